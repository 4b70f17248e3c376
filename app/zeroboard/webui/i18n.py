"""English and Chinese labels, keyed by job-spec field name (plus a few page words).

Components get their label in the page's language when they are created, so
the first paint is already labelled; switching language re-sends the labels.
English help comes from the spec itself; Chinese help sits next to the label.
Chinese wording follows the course: 设备数量, DeepSpeed stage, 使用 offload, 预览命令, 开始.
"""

from __future__ import annotations

from .. import spec

LANGS = {"en": "English", "zh": "中文"}
DEFAULT = "en"

# field: (English label, Chinese label, Chinese help)
FIELDS: dict[str, tuple[str, str, str]] = {
    "model_name_or_path": ("Model path", "模型路径", "本地模型目录(含 config.json)或 hub id。"),
    "finetuning_type": ("Finetuning method", "微调方法", "lora 只训练小的适配器;full 训练全部权重。"),
    "dataset_dir": ("Data dir", "数据路径", "存放 dataset_info.json 和数据文件的目录。"),
    "dataset": ("Dataset", "数据集", "dataset_info.json 中的数据集名,或 .json/.jsonl 文件路径,用逗号分隔。"),
    "template": ("Prompt template", "提示模板", "auto:有对话模板就用对话模板,否则用纯文本。"),
    "cutoff_len": ("Cutoff length", "截断长度", "单个样本的最大 token 数,超出部分被截断。"),
    "max_samples": ("Max samples", "最大样本数", "每个数据集最多使用的样本数(0 = 全部)。"),
    "learning_rate": ("Learning rate", "学习率", "AdamW 的峰值学习率。"),
    "num_train_epochs": ("Epochs", "训练轮数", "遍历数据的次数(max_steps > 0 时忽略)。"),
    "max_steps": ("Max steps", "最大步数", "训练到这么多优化步后停止(0 = 按轮数)。"),
    "lr_scheduler_type": ("LR scheduler", "学习率调度器", "预热之后的学习率变化方式。"),
    "warmup_steps": ("Warmup steps", "预热步数", "预热步数;小于 1 时表示占总步数的比例。"),
    "per_device_train_batch_size": ("Batch size", "批处理大小", "每个设备每次前向的样本数(micro-batch)。"),
    "gradient_accumulation_steps": ("Gradient accumulation", "梯度累积", "每次优化步之前累加的 micro-batch 数。"),
    "max_grad_norm": ("Max grad norm", "最大梯度范数", "梯度裁剪的范数(0 = 关闭)。"),
    "weight_decay": ("Weight decay", "权重衰减", "AdamW 的权重衰减。"),
    "precision": ("Compute type", "计算类型", "auto:支持的 GPU 上用 bf16,较老的 GPU 用 fp16,CPU 上用 fp32。"),
    "gradient_checkpointing": ("Gradient checkpointing", "梯度检查点", "反向时重算激活以节省显存。"),
    "logging_steps": ("Logging steps", "日志间隔", "每 N 步记录一次 loss、学习率和速度。"),
    "save_steps": ("Save steps", "保存间隔", "每 N 步保存一次检查点(0 = 只保存最终结果)。"),
    "seed": ("Seed", "随机种子", "随机种子。"),
    "liger_kernel": ("Liger kernels", "Liger 融合算子", "Liger 的 Triton 融合算子(RMSNorm、SwiGLU、RoPE、线性层+交叉熵):"
                     "更快、更省显存。auto:NVIDIA GPU 上装了 liger-kernel 就启用。"),
    "attn_implementation": ("Attention kernel", "注意力实现", "auto:模型默认(PyTorch SDPA);flash_attention_2 需要安装 flash-attn。"),
    "packing": ("Sequence packing", "序列打包", "把多条样本拼进一行 cutoff_len:没有填充,步数更少。每条样本的位置重新计数,"
                "注意力和 loss 不跨样本。"),
    "pure_bf16": ("Pure bf16", "纯 bf16 训练", "权重和 AdamW 状态都用 bf16,不保留 fp32 主权重:更省显存、更快,"
                  "但小于 bf16 精度的更新会丢失。仅在不用 DeepSpeed 时可用。"),
    "lora_rank": ("LoRA rank", "LoRA 秩", "LoRA 矩阵的秩。"),
    "lora_alpha": ("LoRA alpha", "LoRA 缩放系数", "LoRA 缩放分子(scale = alpha / rank)。"),
    "lora_dropout": ("LoRA dropout", "LoRA 随机丢弃", "LoRA 输入上的 dropout。"),
    "lora_target": ("LoRA modules", "LoRA 作用模块", "要适配的模块名,或 all 表示除输出层外的所有线性层。"),
    "output_dir": ("Output dir", "输出目录", "本次运行写入记录、日志、检查点和结果的目录。"),
    "resume": ("Resume", "断点续训", "从 output_dir 中最后一个检查点继续。"),
    "device_type": ("Device type", "设备类型", "auto:有 NVIDIA GPU 就用选中的 GPU,否则用 CPU 进程。"),
    "gpu_ids": ("GPUs to use", "使用的 GPU", "按顺序选择要用的 GPU(不选 = 全部)。"),
    "num_processes": ("Processes", "进程数", "在 CPU 上运行时的训练进程数。"),
    "deepspeed_stage": ("DeepSpeed stage", "DeepSpeed stage", "ZeRO stage:none(普通数据并行)、2 或 3。"),
    "offload": ("Enable offload", "使用 offload", "把优化器状态(stage 3 时还有参数)放到 CPU 内存。"),
    "launcher": ("Launcher", "启动器", "用哪个启动器启动进程。"),
    "num_nodes": ("Nodes", "节点数", "参与训练的机器数;在每台机器上用各自的 node_rank 启动同一任务(torchrun)。"),
    "node_rank": ("Node rank", "节点序号", "本机在 num_nodes 中的序号(0 号节点负责 rendezvous)。"),
    "master_addr": ("Master address", "主节点地址", "0 号节点的地址,所有节点都要能访问。"),
    "master_port": ("Master port", "主节点端口", "0 号节点上的 rendezvous 端口(0 = 自动选空闲端口;多节点时请固定一个)。"),
    "deepspeed": ("DeepSpeed config file", "DeepSpeed 配置文件", "自己的 DeepSpeed JSON 路径(留空 = 使用 cache/ 中对应 stage 的预设)。"),
    "extra_args": ("Extra arguments (JSON)", "额外参数(JSON)", "更多 transformers TrainingArguments,写成 JSON 对象。"),
}

# page words: key -> (English, Chinese)
UI: dict[str, tuple[str, str]] = {
    "title": ("ZeroBoard · Train", "ZeroBoard · 训练"),
    "lang": ("Language", "语言"),
    "section_model": ("Model", "模型"),
    "section_data": ("Data", "数据"),
    "section_train": ("Hyperparameters", "超参数"),
    "section_speed": ("Speed-ups", "加速选项"),
    "section_lora": ("LoRA configurations", "LoRA 参数设置"),
    "section_output": ("Output", "输出"),
    "section_devices": ("Devices and DeepSpeed", "设备与 DeepSpeed"),
    "more_devices": ("More device options", "更多设备选项"),
    "device_count": ("Device count", "设备数量"),
    "device_count_info": ("GPUs (or CPU processes) the job will use", "任务将使用的 GPU(或 CPU 进程)数"),
    "preview_data": ("Preview dataset", "预览数据集"),
    "preview": ("Preview command", "预览命令"),
    "save": ("Save arguments", "保存训练参数"),
    "load": ("Load arguments", "载入训练参数"),
    "start": ("Start", "开始"),
    "abort": ("Abort", "中断"),
    "args_path": ("Arguments file", "参数文件"),
    "command": ("Command", "命令"),
    "ds_json": ("DeepSpeed config", "DeepSpeed 配置"),
    "run": ("Run", "运行记录"),
    "status": ("Status", "状态"),
    "logs": ("Logs", "日志"),
    "download_log": ("Download full log", "下载完整日志"),
    "loss": ("Loss", "损失"),
    "lr": ("Learning rate", "学习率"),
    "tps": ("Tokens/s", "每秒 token 数"),
    "memory": ("GPU memory", "显存"),
    "memory_cpu": ("Memory (no GPU: host RAM and each rank's RSS)", "内存(无 GPU:主机内存和各进程 RSS)"),
    "gpus": ("GPUs", "GPU"),
    "host_ram": ("Host RAM used", "主机内存已用"),
    "processes": ("Job processes", "任务进程"),
    "history": ("Memory history", "内存历史"),
    "progress": ("Progress", "进度"),
    "final": ("Final status", "最终状态"),
    "plan": ("Memory plan (per device)", "显存估算(每个设备)"),
    "mem_vs_plan": ("Memory plan vs measured peak, per rank", "显存估算与实测峰值对比(每个进程)"),
    "mem_rank": ("rank", "进程"),
    "mem_estimate": ("estimate", "估算"),
    "mem_measured": ("measured peak", "实测峰值"),
    "mem_error": ("error", "误差"),
    "mem_nvml": ("NVML peak", "NVML 峰值"),
    "mem_nvml_error": ("error vs NVML", "相对 NVML 误差"),
    "mem_note": ("error = (estimate − measured) / measured: positive means the plan over-estimates",
                 "误差 = (估算 − 实测) / 实测:正数表示估算偏高"),
    "output_check": ("Output check", "输出检查"),
    "saved": ("What was saved", "保存的内容"),
    "prompts": ("Prompts (one per line)", "测试问题(每行一个)"),
    "reload": ("Reload and answer", "重新加载并回答"),
    "consolidate": ("Consolidate", "整合 ZeRO 检查点"),
    "consolidate_dir": ("New model folder (consolidated ZeRO checkpoint)", "新模型目录(整合后的 ZeRO 检查点)"),
    "merge": ("Merge LoRA", "合并 LoRA"),
    "merge_dir": ("New model folder (LoRA merged into its base)", "新模型目录(LoRA 合并进基座模型)"),
    "prompt": ("Prompt", "问题"),
    "tuned_answer": ("Tuned answer", "微调后回答"),
    "base_answer": ("Base answer", "原模型回答"),
    "matches": ("Matches the training answer", "与训练答案一致"),
    "identity": ("Identity answers matching the training answer: {n} of {m}", "身份问答与训练答案一致:{n} / {m}"),
    # sentences with {placeholders}: fill them with i18n.say
    "progress_line": ("step {step}/{total} · elapsed {wall} · ETA {eta}", "第 {step}/{total} 步 · 已用 {wall} · 预计剩余 {eta}"),
    "progress_wait": ("waiting for the first step · elapsed {wall}", "等待第一步 · 已用 {wall}"),
    "exit_code": ("exit code", "退出码"),
    "failed_rank": ("failed rank", "出错的进程"),
    "note": ("note", "注意"),
    "need_prompt": ("Give at least one prompt (one per line).", "请至少写一个问题(每行一个)。"),
    "reloading": ("Reloading `{run}` and its base model in a separate process…", "正在独立进程中重新加载 `{run}` 及其基座模型…"),
    "reload_failed": ("**Reload failed:** {why}", "**重新加载失败:**{why}"),
    "reloaded": ("Reloaded {kind} from `{path}` in a separate process.", "已在独立进程中从 `{path}` 重新加载 {kind}。"),
    "writing": ("{what}: writing `{out}` in a separate process…", "{what}:正在独立进程中写入 `{out}`…"),
    "export_no_dir": ("**{what}: nothing written.** Give a new folder for the model.", "**{what}:没有写入任何文件。**请给出新模型的目录。"),
    "export_exists": ("**{what}: nothing written.** `{out}` already exists; choose a new folder.",
                      "**{what}:没有写入任何文件。**`{out}` 已经存在,请换一个新目录。"),
    "export_failed": ("**{what} failed:** {why}", "**{what}失败:**{why}"),
    "wrote_consolidated": ("Wrote `{path}`: {parameters:,} parameters (fp32) from `{src}` (step {step}).",
                           "已写入 `{path}`:从 `{src}`(第 {step} 步)整合出 {parameters:,} 个参数(fp32)。"),
    "wrote_merged": ("Wrote `{path}`: `{base}` with the adapter merged in ({parameters:,} parameters).",
                     "已写入 `{path}`:`{base}` 合并了适配器({parameters:,} 个参数)。"),
    "loads_with": (" It loads with `AutoModelForCausalLM.from_pretrained(path)`; the run was not changed.",
                   "可用 `AutoModelForCausalLM.from_pretrained(path)` 加载;本次运行的内容没有改动。"),
}

# table headers: key -> (English, Chinese)
HEADERS: dict[str, tuple[list[str], list[str]]] = {
    "gpus": (["GPU", "name", "used / total", "util"], ["GPU", "名称", "已用 / 总量", "利用率"]),
    "procs": (["device", "pid", "rank", "process", "memory now", "peak (trainer)"],
              ["设备", "pid", "rank", "进程", "当前占用", "峰值(训练脚本)"]),
}

STATUS = {
    "idle": ("No run yet: fill the form, Preview command, then Start.", "还没有运行:填好表单,预览命令,然后开始。"),
    "starting": ("starting", "正在启动"),
    "running": ("running", "运行中"),
    "stopping": ("stopping", "正在停止"),
    "finished": ("finished", "已完成"),
    "failed": ("failed", "失败"),
    "aborted": ("aborted", "已中断"),
    "lost": ("lost (no record of how it ended)", "丢失(没有结束记录)"),
}


def _pick(pair: tuple[str, ...], lang: str) -> str:
    return pair[1] if lang == "zh" else pair[0]


def label(name: str, lang: str = DEFAULT) -> str:
    """Label of a spec field or a page word (a field added to the spec but not here yet shows its name)."""
    if name in FIELDS:
        return _pick(FIELDS[name][:2], lang)
    if name in UI:
        return _pick(UI[name], lang)
    return name.replace("_", " ").capitalize()


def info(name: str, lang: str = DEFAULT) -> str:
    """Help line under a spec field (English from the spec when there is no translation)."""
    return FIELDS[name][2] if lang == "zh" and name in FIELDS else spec.help_text(name)


def status(key: str, lang: str = DEFAULT) -> str:
    return _pick(STATUS.get(key, (key, key)), lang)


def say(key: str, lang: str = DEFAULT, **values) -> str:
    """A page sentence in ``lang`` with its {placeholders} filled."""
    return label(key, lang).format(**values)


def headers(key: str, lang: str = DEFAULT) -> list[str]:
    return list(_pick(HEADERS[key], lang))
