"""The memory plan in Chinese: the same figures as planner.render_markdown, in the course's words.

Only words live here; every number comes from the Plan that planner.estimate made.
"""

from __future__ import annotations

from . import planner
from .planner import Plan, gib

PARTS = {"weights": "权重", "gradients": "梯度", "optimizer states": "优化器状态", "activations": "激活",
         "buffers": "缓冲区"}
PHASES = {"forward": "前向结束时(为反向保存了全部激活,正在计算 loss)", "step": "优化器更新时(所有梯度都在,激活已释放)"}
NOTES = {
    "checkpointing": "开启梯度检查点后,每层只保存输入,不再保存全部激活",
    "one_gpu": "单卡时 ZeRO-2/3 没有可切分的对象:与不用 DeepSpeed 相比,只会多占显存、变慢",
    "lora_zero3": "ZeRO-3 下 LoRA 适配器保持 fp32,每个适配器的输入都以 fp32 保存(ZeRO-3 还会保存冻结层的输入):"
                  "激活约为 ZeRO-2 的两倍",
    "autocast": "不用 DeepSpeed 时,ZeroBoard 保留 fp32 权重并在 autocast 下训练:反向需要的 16 位权重副本会被保留"
                "(计入激活);纯 bf16 去掉 fp32 权重和 AdamW 的 fp32 状态,代价是一些精度",
    "fused_loss": "Liger 的线性层 + 交叉熵融合算子分块计算 loss:不生成完整的 logits 张量",
    "cpu": "CPU 进程:估算的是每个进程的内存(RSS),包括 Python/torch 运行时",
}


def setting(label: str) -> str:
    """A setting's label (Setup.label, plus the recommendation's suffix) in Chinese."""
    return (label.replace("no DeepSpeed", "不用 DeepSpeed").replace(" (optimizer + params)", "(优化器 + 参数)")
            .replace(" (optimizer)", "(优化器)").replace(" + gradient checkpointing", " + 梯度检查点"))


def advice_text(advice: dict) -> str:
    kind = advice.get("kind")
    if kind == "nothing_fits":
        return "都放不下,即使 ZeRO-3 + offload 加梯度检查点也不行:请减小 micro-batch 或 cutoff_len、改用 LoRA,或增加 GPU"
    if kind == "ram_does_not_fit":
        return "每个进程可用的内存放不下:请减小 micro-batch 或 cutoff_len、减少进程数,或开启梯度检查点"
    if kind == "keep":
        return f"保持「{setting(advice['setting'])}」:放得下的设置中最快的"
    if kind == "use":
        verb = "放得下" if advice["current_fits"] else "放不下"
        return f"改用「{setting(advice['setting'])}」:放得下的设置中最快的(当前的「{setting(advice['current'])}」{verb})"
    return ""


def formula_text(plan: Plan) -> str:
    text = _formula_text(plan)
    if plan.setup.device == "cuda":
        return text
    return text.replace("每张 GPU ", "每个进程").replace("张 GPU", "个进程").replace("GPU 上", "进程中")


def _formula_text(plan: Plan) -> str:
    s, n = plan.setup, plan.setup.world
    lora = s.finetuning == "lora"
    formula = planner.formula_of(s)
    who = f"Ψ = {planner._count(plan.params)} 参数" + (f",其中训练的 LoRA 适配器 Ψt = {planner._count(plan.trainable)}"
                                                        if lora else "")
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
            body += f";LoRA 只有适配器有梯度和 Adam 动量,所以 {formula} 只作用于 Ψt"
        return f"**{formula}**(不用 DeepSpeed,{who}):{body}。"
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


def render_markdown_zh(plan: Plan) -> str:
    s, b = plan.setup, plan.breakdown
    dev = "GPU" if s.device == "cuda" else "CPU 进程"
    unit = "张" if s.device == "cuda" else "个"
    p = s.precision
    mode = {"fp32": "fp32", "pure16": f"{p}(模型转为 {p},优化器中保留 fp32 主权重)",
            "autocast": f"fp32 权重 + {p} autocast"}[planner.act_mode(s).kind]
    if s.pure_bf16:
        mode = "纯 bf16(权重、梯度和 AdamW 状态都是 bf16,没有 fp32 主权重)"
    method = (f"LoRA 微调(r{s.lora_rank}:可训练 {planner._count(plan.trainable)})" if s.finetuning == "lora"
              else "全参数微调")
    lines = [f"### 显存估算:{setting(s.label())},{s.world} {unit} {dev}",
             f"{plan.model.model_type},{planner._count(plan.params)} 参数,{method};{mode};"
             f"micro-batch {s.micro_batch} × {s.seq} token" + (";梯度检查点" if s.checkpointing else ""), "",
             f"| 每{unit} {dev} | GiB |", "|---|---:|"]
    lines += [f"| {PARTS.get(k, k)} | {gib(v)} |" for k, v in b.items()]
    if s.device == "cuda":
        lines.append(f"| **峰值(torch 分配器)** | **{gib(plan.peak_bytes)}** |")
        lines.append(f"| 需要的空闲显存(峰值 + CUDA 上下文与分配器余量) | {gib(plan.needed_bytes)} |")
    else:
        lines.append(f"| 运行时(Python、torch)+ 映射的检查点 | {gib(plan.host_bytes - plan.peak_bytes)} |")
        lines.append(f"| **峰值 RSS** | **{gib(plan.host_bytes)}** |")
    if plan.capacity_bytes is not None:
        verdict = "放得下" if plan.fits else "**放不下**"
        where = "所选 GPU 中最紧的一张的空闲显存" if s.device == "cuda" else "每个进程可用的内存"
        lines.append(f"| {where} | {gib(plan.capacity_bytes)} → {verdict} |")
    phase = next((PHASES[k] for k, v in planner.PHASES.items() if v == plan.phase), plan.phase)
    lines += ["", f"峰值出现在{phase}。", "", formula_text(plan)]
    d = plan.activation_detail
    lines.append(f"\n激活:{s.tokens} 个 token × {plan.model.layers} 层 × 每 token 每层 {d['per_token_per_layer']:,} 字节 "
                 f"= 各层共 {gib(d['layers'])} GiB" + ("(梯度检查点:每层只保存输入,外加一层)" if s.checkpointing else "")
                 + f";loss 附近 {gib(d['other'] + d['loss_temporaries'])} GiB(fp32 logits,T × V × 4 字节)"
                 + (f";autocast 保留的 16 位权重副本 {gib(d['autocast_weight_copies'])} GiB"
                    if d["autocast_weight_copies"] else "") + "。")
    states = b["weights"] + b["optimizer states"] + b["gradients"]
    if b["activations"] > states:
        lines.append(f"激活占主导({gib(b['activations'])} GiB,模型状态 {gib(states)} GiB):ZeRO stage 只影响模型状态;"
                     "要减少激活,请调小 micro-batch 或 cutoff_len,或开启梯度检查点。")
    if s.device == "cuda" and (s.offload_optimizer or plan.host_bytes):
        lines.append(f"\n每个进程的主机内存:约 {gib(plan.host_bytes)} GiB" + ("(含 offload 出去的状态)。"
                                                                       if s.offload_optimizer else "。"))
    keys = planner.note_keys(plan)
    if keys:
        lines += [""] + [f"- {NOTES[k]}" for k in keys]
    if plan.alternatives:
        lines += ["", "| 设置 | 峰值 GiB | 需要 GiB | 放得下 |", "|---|---:|---:|---|"]
        for r in plan.alternatives:
            fits = "-" if r["fits"] is None else ("是" if r["fits"] else "否")
            lines.append(f"| {setting(r['setting'])} | {gib(r['peak_bytes'])} | {gib(r['needed_bytes'])} | {fits} |")
    if plan.advice:
        lines += ["", f"**建议:**{advice_text(plan.advice)}"]
    return "\n".join(lines)
