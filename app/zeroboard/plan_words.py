"""The words of the memory plan, in English and Chinese.

planner.render_markdown fills these with a Plan's figures: the numbers come from
the planner only, so both languages always show the same ones. The formula
paragraphs are prose, one function per language.
"""

from __future__ import annotations

from . import planner
from .planner import Plan

WORDS: dict[str, dict] = {
    "en": {
        "head": "### Memory plan: {setting} on {n} {devs}",
        "devs": {("cuda", False): "GPU", ("cuda", True): "GPUs", ("cpu", False): "CPU process",
                 ("cpu", True): "CPU processes"},
        "per": {"cuda": "per GPU", "cpu": "per CPU process"},
        "model": "{model_type}, {params} parameters, {finetuning} fine-tuning",
        "lora": " (LoRA r{rank}: {trainable} trainable)",
        "batch": "; {mode}; micro-batch {mb} x {seq} tokens",
        "ckpt": "; gradient checkpointing",
        "modes": {"fp32": "fp32", "pure16": "{p} (model cast to {p}, fp32 master weights in the optimizer)",
                  "autocast": "fp32 weights + {p} autocast",
                  "pure_bf16": "pure bf16 (weights, gradients and AdamW states in bf16; no fp32 master copy)"},
        "parts": {},
        "gpu_peak": "**peak (torch allocator)**",
        "gpu_needed": "needed free (peak + CUDA context and allocator slack)",
        "cpu_runtime": "runtime (Python, torch) + mapped checkpoint",
        "cpu_peak": "**peak RSS**",
        "where": {"cuda": "free on the tightest selected GPU", "cpu": "RAM available per process"},
        "verdict": ("**does not fit**", "fits"),
        "phase": "Peak at the {phase}.",
        "phases": dict(planner.PHASES),
        "act": "\nActivations: {tokens} tokens x {layers} layers x {per:,} bytes = {layers_gib} GiB in the layers",
        "act_ckpt": " (checkpointed: each layer's input plus one layer)",
        "act_loss": ", {loss_gib} GiB around the loss (fp32 logits, T x V x 4 bytes)",
        "act_autocast": ", {gib} GiB of 16-bit weight copies kept by autocast",
        "act_end": ".",
        "dominate": "Activations dominate ({act} GiB against {states} GiB of model states): the ZeRO stage only moves "
                    "the model states; micro-batch, cutoff_len and gradient checkpointing move this.",
        "host": "\nHost RAM per process: about {gib} GiB",
        "host_offload": " (offloaded states included).",
        "host_end": ".",
        "alt_head": "| setting | peak GiB | needed GiB | fits |",
        "yes_no": ("no", "yes"),
        "advice": "**Recommendation:** {text}",
    },
    "zh": {
        "head": "### 显存估算:{setting},{n} {devs}",
        "devs": {("cuda", False): "张 GPU", ("cuda", True): "张 GPU", ("cpu", False): "个 CPU 进程",
                 ("cpu", True): "个 CPU 进程"},
        "per": {"cuda": "每张 GPU", "cpu": "每个 CPU 进程"},
        "model": "{model_type},{params} 参数,{finetuning}",
        "lora": "(r{rank}:可训练 {trainable})",
        "batch": ";{mode};micro-batch {mb} × {seq} token",
        "ckpt": ";梯度检查点",
        "modes": {"fp32": "fp32", "pure16": "{p}(模型转为 {p},优化器中保留 fp32 主权重)",
                  "autocast": "fp32 权重 + {p} autocast",
                  "pure_bf16": "纯 bf16(权重、梯度和 AdamW 状态都是 bf16,没有 fp32 主权重)"},
        "finetuning": {"lora": "LoRA 微调", "full": "全参数微调"},
        "parts": {"weights": "权重", "gradients": "梯度", "optimizer states": "优化器状态", "activations": "激活",
                  "buffers": "缓冲区"},
        "gpu_peak": "**峰值(torch 分配器)**",
        "gpu_needed": "需要的空闲显存(峰值 + CUDA 上下文与分配器余量)",
        "cpu_runtime": "运行时(Python、torch)+ 映射的检查点",
        "cpu_peak": "**峰值 RSS**",
        "where": {"cuda": "所选 GPU 中最紧的一张的空闲显存", "cpu": "每个进程可用的内存"},
        "verdict": ("**放不下**", "放得下"),
        "phase": "峰值出现在{phase}。",
        "phases": {"forward": "前向结束时(为反向保存了全部激活,正在计算 loss)",
                   "step": "优化器更新时(所有梯度都在,激活已释放)"},
        "act": "\n激活:{tokens} 个 token × {layers} 层 × 每 token 每层 {per:,} 字节 = 各层共 {layers_gib} GiB",
        "act_ckpt": "(梯度检查点:每层只保存输入,外加一层)",
        "act_loss": ";loss 附近 {loss_gib} GiB(fp32 logits,T × V × 4 字节)",
        "act_autocast": ";autocast 保留的 16 位权重副本 {gib} GiB",
        "act_end": "。",
        "dominate": "激活占主导({act} GiB,模型状态 {states} GiB):ZeRO stage 只影响模型状态;要减少激活,"
                    "请调小 micro-batch 或 cutoff_len,或开启梯度检查点。",
        "host": "\n每个进程的主机内存:约 {gib} GiB",
        "host_offload": "(含 offload 出去的状态)。",
        "host_end": "。",
        "alt_head": "| 设置 | 峰值 GiB | 需要 GiB | 放得下 |",
        "yes_no": ("否", "是"),
        "advice": "**建议:**{text}",
    },
}

NOTES = {
    "en": {
        "checkpointing": "gradient checkpointing would keep only each layer's input, not all its activations",
        "one_gpu": "on one GPU ZeRO-2/3 split nothing: they cost memory and speed compared with no DeepSpeed",
        "lora_zero3": "under ZeRO-3 the LoRA adapters stay fp32 and every adapter input is saved in fp32 "
                      "(and ZeRO-3 saves the frozen layers' inputs): activations are about twice ZeRO-2's",
        "autocast": "without DeepSpeed ZeroBoard keeps fp32 weights and trains under autocast: 16-bit copies of "
                    "the weights are kept for the backward pass (counted in activations); pure bf16 drops "
                    "the fp32 copy and AdamW's fp32 states at some cost in precision",
        "fused_loss": "Liger's fused linear cross-entropy computes the loss in chunks: no full logits tensor",
        "cpu": "CPU processes: the estimate is each process's RAM (RSS), including the Python/torch runtime",
    },
    "zh": {
        "checkpointing": "开启梯度检查点后,每层只保存输入,不再保存全部激活",
        "one_gpu": "单卡时 ZeRO-2/3 没有可切分的对象:与不用 DeepSpeed 相比,只会多占显存、变慢",
        "lora_zero3": "ZeRO-3 下 LoRA 适配器保持 fp32,每个适配器的输入都以 fp32 保存(ZeRO-3 还会保存冻结层的输入):"
                      "激活约为 ZeRO-2 的两倍",
        "autocast": "不用 DeepSpeed 时,ZeroBoard 保留 fp32 权重并在 autocast 下训练:反向需要的 16 位权重副本会被保留"
                    "(计入激活);纯 bf16 去掉 fp32 权重和 AdamW 的 fp32 状态,代价是一些精度",
        "fused_loss": "Liger 的线性层 + 交叉熵融合算子分块计算 loss:不生成完整的 logits 张量",
        "cpu": "CPU 进程:估算的是每个进程的内存(RSS),包括 Python/torch 运行时",
    },
}


def setting(label: str, lang: str) -> str:
    """A setting's label (Setup.label, with the recommendation's suffix) in ``lang``."""
    if lang != "zh":
        return label
    return (label.replace("no DeepSpeed", "不用 DeepSpeed").replace(" (optimizer + params)", "(优化器 + 参数)")
            .replace(" (optimizer)", "(优化器)").replace(" + gradient checkpointing", " + 梯度检查点"))


def advice_text(advice: dict, lang: str = "en") -> str:
    kind, zh = advice.get("kind"), lang == "zh"
    if kind == "nothing_fits":
        return ("都放不下,即使 ZeRO-3 + offload 加梯度检查点也不行:请减小 micro-batch 或 cutoff_len、改用 LoRA,或增加 GPU" if zh
                else "nothing fits, not even ZeRO-3 + offload with gradient checkpointing: lower the micro-batch "
                     "or cutoff_len, use LoRA, or add GPUs")
    if kind == "ram_does_not_fit":
        return ("每个进程可用的内存放不下:请减小 micro-batch 或 cutoff_len、减少进程数,或开启梯度检查点" if zh
                else "does not fit in the RAM available per process: lower the micro-batch or cutoff_len, "
                     "use fewer processes, or turn on gradient checkpointing")
    if kind == "keep":
        best = setting(advice["setting"], lang)
        return f"保持「{best}」:放得下的设置中最快的" if zh else f"keep {best}: the fastest setting that fits"
    if kind == "use":
        best, current = setting(advice["setting"], lang), setting(advice["current"], lang)
        if zh:
            return f"改用「{best}」:放得下的设置中最快的(当前的「{current}」{'放得下' if advice['current_fits'] else '放不下'})"
        return f"use {best}: the fastest setting that fits ({current} {'fits' if advice['current_fits'] else 'does not fit'})"
    return ""


# --- the formula paragraph ----------------------------------------------------------------------

def formula_text(plan: Plan, lang: str = "en") -> str:
    """Which of the guide's formulas applies here, with this model's numbers (GPU words become process words on CPU)."""
    if lang == "zh":
        text = _formula_zh(plan)
        cpu = (("每张 GPU ", "每个进程"), ("张 GPU", "个进程"), ("GPU 上", "进程中"))
    else:
        text = _formula_en(plan)
        cpu = (("GPUs", "processes"), ("GPU", "process"))
    if plan.setup.device != "cuda":
        for a, b in cpu:
            text = text.replace(a, b)
    return text


def _who(plan: Plan, lang: str) -> str:
    psi, t = planner._count(plan.params), planner._count(plan.trainable)
    if lang == "zh":
        return f"Ψ = {psi} 参数" + (f",其中训练的 LoRA 适配器 Ψt = {t}" if plan.setup.finetuning == "lora" else "")
    return f"Ψ = {psi} parameters" + (f", of which the LoRA adapter Ψt = {t} is trained"
                                      if plan.setup.finetuning == "lora" else "")


def _formula_en(plan: Plan) -> str:
    s, n, who = plan.setup, plan.setup.world, _who(plan, "en")
    lora = s.finetuning == "lora"
    if not s.deepspeed or s.stage == "0":
        if s.pure_bf16:
            body = ("every GPU holds all model states, all in bf16 (pure bf16): 2Ψ weights + 2Ψ gradients + 4Ψ Adam "
                    "moments = 8Ψ instead of the guide's 16Ψ, because there is no fp32 master copy; updates smaller "
                    "than bf16 can represent are lost")
        elif s.half and not s.deepspeed:
            body = ("every GPU holds all model states. The guide counts 2Ψ fp16 weights + 2Ψ gradients + 12Ψ fp32 "
                    "master weights and Adam moments; ZeroBoard keeps fp32 weights instead and trains under autocast: "
                    "4Ψ weights + 8Ψ Adam moments, plus 4Ψ fp32 gradients from the backward pass to the optimizer "
                    "step (freed between steps) — the same 16Ψ, with the 16-bit weight copies of autocast on top")
        else:
            body = "every GPU holds all model states: weights, gradients and Adam moments (16Ψ in the guide's count)"
        if lora:
            body += (f"; with LoRA only the adapter has gradients and Adam moments, so {planner.formula_of(s)} "
                     "applies to Ψt alone")
        return f"**{planner.formula_of(s)}** (no DeepSpeed, {who}): {body}."
    if s.stage == "1":
        return f"**4Ψ+12Ψ/N** (ZeRO-1, N = {n}, {who}): the optimizer states are split over the GPUs."
    off = ""
    if s.offload_optimizer:
        off = (" Offload moves the fp32 master weights and Adam moments (12Ψ/N" + (" and the 16-bit weights"
               if s.offload_param else "") + ") to host RAM; the GPU keeps " +
               ("only the layers being computed (ZeRO-3 gathers them on the fly)." if s.offload_param
                else "the 16-bit weights (2Ψ) and gradient buckets."))
    one = " With N = 1 nothing is split: the formula gives back 16Ψ." if n == 1 and not s.offload_optimizer else ""
    lora_txt = (" With LoRA the split applies to the adapter Ψt; the frozen base stays 2Ψ"
                + ("/N." if s.stage == "3" else ".")) if lora else ""
    if s.stage == "2":
        return (f"**2Ψ+14Ψ/N** (ZeRO-2, N = {n}, {who}): every GPU keeps the 16-bit weights (2Ψ); gradients (2Ψ) "
                f"and fp32 master weights + Adam moments (12Ψ) are split over the N GPUs.{one}{off}{lora_txt}")
    return (f"**16Ψ/N** (ZeRO-3, N = {n}, {who}): weights, gradients and optimizer states are all split over the "
            f"N GPUs; each layer's weights are gathered just before use.{one}{off}{lora_txt}")


def _formula_zh(plan: Plan) -> str:
    s, n, who = plan.setup, plan.setup.world, _who(plan, "zh")
    lora = s.finetuning == "lora"
    if not s.deepspeed or s.stage == "0":
        if s.pure_bf16:
            body = ("每张 GPU 持有全部模型状态,而且都是 bf16(纯 bf16):2Ψ 权重 + 2Ψ 梯度 + 4Ψ Adam 动量 = 8Ψ,"
                    "而不是教材的 16Ψ,因为没有 fp32 主权重;小于 bf16 精度的更新会丢失")
        elif s.half and not s.deepspeed:
            body = ("每张 GPU 持有全部模型状态。教材的算法是 2Ψ fp16 权重 + 2Ψ 梯度 + 12Ψ fp32 主权重和 Adam 动量;"
                    "ZeroBoard 改为保留 fp32 权重并在 autocast 下训练:4Ψ 权重 + 8Ψ Adam 动量,再加上从反向到优化器更新"
                    "之间存在的 4Ψ fp32 梯度(两步之间释放)——同样是 16Ψ,另外还有 autocast 的 16 位权重副本")
        else:
            body = "每张 GPU 持有全部模型状态:权重、梯度和 Adam 动量(教材算作 16Ψ)"
        if lora:
            body += f";LoRA 只有适配器有梯度和 Adam 动量,所以 {planner.formula_of(s)} 只作用于 Ψt"
        return f"**{planner.formula_of(s)}**(不用 DeepSpeed,{who}):{body}。"
    if s.stage == "1":
        return f"**4Ψ+12Ψ/N**(ZeRO-1,N = {n},{who}):优化器状态分摊到各张 GPU。"
    off = ""
    if s.offload_optimizer:
        off = ("Offload 把 fp32 主权重和 Adam 动量(12Ψ/N" + (" 以及 16 位权重" if s.offload_param else "")
               + ")放到主机内存;GPU 上" + ("只保留正在计算的层(ZeRO-3 随用随收集)。" if s.offload_param
                                          else "保留 16 位权重(2Ψ)和梯度缓冲区。"))
    one = "N = 1 时什么也没有切分:公式回到 16Ψ。" if n == 1 and not s.offload_optimizer else ""
    lora_txt = ("使用 LoRA 时切分的是适配器 Ψt;冻结的基座仍占 2Ψ" + ("/N。" if s.stage == "3" else "。")) if lora else ""
    if s.stage == "2":
        return (f"**2Ψ+14Ψ/N**(ZeRO-2,N = {n},{who}):每张 GPU 保留 16 位权重(2Ψ);梯度(2Ψ)以及 fp32 主权重 + "
                f"Adam 动量(12Ψ)分摊到 N 张 GPU。{one}{off}{lora_txt}")
    return (f"**16Ψ/N**(ZeRO-3,N = {n},{who}):权重、梯度和优化器状态全部分摊到 N 张 GPU;每层的权重在用到之前才收集。"
            f"{one}{off}{lora_txt}")
