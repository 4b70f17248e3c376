"""The memory plan's words (planner.report fills them with a plan's figures, so both languages show the same ones)."""

from .plan_probe import WORDS as _PROBE_WORDS

WORDS: dict[str, tuple[str, str]] = {
    # errors of the planner
    "plan.unknown_arch": (
        "unknown architecture: model_type {model_type} (architectures: {arch}); the planner knows {known}",
        "未知的模型结构:model_type {model_type}(architectures:{arch});显存估算支持 {known}",
    ),
    "plan.config_incomplete": (
        "config.json of this {model_type} model lacks hidden size, layers, heads or vocab size",
        "这个 {model_type} 模型的 config.json 缺少 hidden size、层数、注意力头数或词表大小",
    ),
    "plan.no_config": (
        "{path} has no config.json; the planner reads the model's config.json: {hint}",
        "{path} 中没有 config.json;显存估算需要读取模型的 config.json:{hint}",
    ),
    "plan.hint_demo": ("build it with `zeroboard demo-model`", "先用 `zeroboard demo-model` 构建它"),
    "plan.hint_lesson": ("build it with `zeroboard demo-model --lesson`", "先用 `zeroboard demo-model --lesson` 构建它"),
    "plan.hint_folder": ("point to a local model folder that holds config.json", "请指向含有 config.json 的本地模型目录"),
    "plan.source.cache": (
        "config.json of {repo} read from the local Hugging Face cache (nothing downloaded)",
        "{repo} 的 config.json 读自本地 Hugging Face 缓存(未下载任何文件)",
    ),
    "plan.source.fetched": (
        "config.json of {repo} fetched from {endpoint} (only that file; the weights are not downloaded)",
        "{repo} 的 config.json 取自 {endpoint}(只下载这一个文件,不下载权重)",
    ),
    "plan.hub_offline": (
        "{repo} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so its config.json cannot be fetched ({why})",
        "{repo} 不在本地 Hugging Face 缓存中,且设置了 HF_HUB_OFFLINE,无法获取它的 config.json({why})",
    ),
    "plan.hub_private": (
        "the model is private or gated: accept its licence on the hub and log in (hf auth login) or set HF_TOKEN",
        "该模型是私有或受限模型:请先在 hub 上同意其许可,再登录(hf auth login)或设置 HF_TOKEN",
    ),
    "plan.hub_missing": ("there is no such model (check the id's spelling)", "没有这个模型(请检查 id 的拼写)"),
    "plan.hub_failed": (
        "config.json of {repo} could not be fetched from {endpoint}: {why}; set HF_ENDPOINT for a mirror, or download the model",
        "无法从 {endpoint} 获取 {repo} 的 config.json:{why};可用 HF_ENDPOINT 指定镜像,或先下载模型",
    ),
    "plan.fit_gpu_only": (
        "finding a setting that fits is for GPUs: choose CUDA devices (NVML sees none here)",
        "查找放得下的设置只针对 GPU:请选择 CUDA 设备(这里 NVML 看不到 GPU)",
    ),
    "plan.fit_head": (
        "### Settings that fit, fastest first (those with headroom before tight ones)\nThe global batch stays {batch} sequences per optimizer step (micro-batch x accumulation x {n} devices).",
        "### 放得下的设置(由快到慢,有余量的排在偏紧的前面)\n全局 batch 保持每次优化器更新 {batch} 条序列(micro-batch × 累积步数 × {n} 个设备)。",
    ),
    "plan.fit_cols": (
        "| setting | micro-batch x accumulation | peak GiB | needed GiB | expected step s | expected tokens/s | why |",
        "| 设置 | micro-batch × 累积 | 峰值 GiB | 需要 GiB | 预计每步秒数 | 预计 token/s | 原因 |",
    ),
    "plan.fit_none": ("**No setting fits on these devices.** The smallest needs {gib} GiB: {setting}.",
                      "**这些设备上没有放得下的设置。** 最小的需要 {gib} GiB:{setting}。"),
    "plan.fit_best": ("**Best: {setting}.** Command line: `{sets}`", "**最佳:{setting}。** 命令行:`{sets}`"),
    "plan.fit_tight": ("; tight: under {margin}% headroom", ";偏紧:余量不到 {margin}%"),
    "plan.fit_same": ("The job already uses the fastest setting that fits.", "任务已经在用放得下的最快设置。"),
    "plan.fit_asked": ("As the job asks ({setting}): {reason}.", "任务当前的设置「{setting}」:{reason}。"),
    "plan.fit_asked_not": (
        "As the job asks, {setting} does not fit: it needs {need} GiB, {have} GiB are free.",
        "任务当前的设置「{setting}」放不下:需要 {need} GiB,空闲只有 {have} GiB。",
    ),
    "plan.at_batch": ("{setting} at {mb} x {acc}", "{setting}({mb} × {acc})"),
    # why one setting over another: its step time and memory against the other's (planner.reasons)
    "plan.reason": ("{speed}, {memory}", "{speed},{memory}"),
    "plan.reason.unneeded": ("{speed}; {memory}", "{speed};{memory}"),
    "plan.reason.only": ("the only setting that fits", "唯一放得下的设置"),
    "plan.speed.same": ("as fast as {other} (within 1%)", "与「{other}」一样快(相差不到 1%)"),
    "plan.speed.faster": ("{n}% faster than {other}", "比「{other}」快 {n}%"),
    "plan.speed.faster_x": ("{n}x as fast as {other}", "速度是「{other}」的 {n} 倍"),
    "plan.speed.slower": ("{n}% slower than {other}", "比「{other}」慢 {n}%"),
    "plan.speed.slower_x": ("{n}x slower than {other}", "每步耗时是「{other}」的 {n} 倍"),
    "plan.mem.same": ("about the same memory", "显存相当"),
    "plan.mem.less": ("{gib} GiB less", "少用 {gib} GiB"),
    "plan.mem.more": ("{gib} GiB more", "多用 {gib} GiB"),
    "plan.mem.unneeded": ("it saves {gib} GiB you do not need", "省下的 {gib} GiB 用不上"),
    "plan.speed_source.measured": (
        "Expected step times: the step-time model built on one H200's measured step components (its errors on "
        "measured grids are in the GPU results page).",
        "预计每步耗时:基于单张 H200 实测步骤组件的步时模型(它在实测网格上的误差见「GPU 实测结果」页)。",
    ),
    "plan.speed_source.scaled": (
        "Expected step times: an estimate from H200 measurements, scaled to {gpu} by its bf16 peak and memory bandwidth.",
        "预计每步耗时:由 H200 实测按 {gpu} 的 bf16 峰值算力与显存带宽换算得到的估计。",
    ),
    "plan.speed_source.unknown": (
        "Expected step times: an estimate from H200 measurements; the planner has no figures for {gpu}.",
        "预计每步耗时:依据 H200 实测的估计;显存估算没有 {gpu} 的性能数据。",
    ),
    "plan.config_not_json": ("{path} cannot be read as JSON: {why}", "{path} 无法按 JSON 读取:{why}"),
    # models planned from a trace of their own code (planner.traces)
    "plan.not_derived": (
        "model_type {model_type} ({arch}) is not one of the families derived by hand: its own code is traced",
        "model_type {model_type}({arch})不在手工推导的模型族中:改为追踪它自己的代码",
    ),
    "plan.tracing": (
        "tracing the code of {model_type} (once per config.json and transformers version, about a minute)",
        "正在追踪 {model_type} 的代码(每个 config.json 与 transformers 版本只追踪一次,约一分钟)",
    ),
    "plan.tracing_panel": ("*Memory plan: {why}… it appears here when done.*", "*显存估算:{why}……完成后显示在这里。*"),
    "plan.tracing_panel_cpu": ("*Memory plan: {why}… it appears here when done.*", "*内存估算:{why}……完成后显示在这里。*"),
    "plan.untraceable": (
        "the code of {model_type} could not be traced ({why}); the job may still start, without a plan",
        "无法追踪 {model_type} 的代码({why});任务仍可启动,只是没有估算",
    ),
    "plan.not_traced": (
        "{model_type} has not been traced yet: `zeroboard plan` or the page's memory plan traces it once",
        "{model_type} 尚未追踪:`zeroboard plan` 或页面上的显存估算会追踪它一次",
    ),
    "plan.trace_failed": ("the tracer stopped: {why}", "追踪进程中止:{why}"),
    "plan.trace.custom_code": (
        "its config names custom code (auto_map): only model classes transformers ships are traced",
        "其 config 指向自定义代码(auto_map):只追踪 transformers 自带的模型类",
    ),
    "plan.trace.no_layers": (
        "{cls} has no list of {n} decoder layers (not a transformer decoder as the tracer knows one)",
        "{cls} 中没有 {n} 个解码层组成的列表(不是追踪器认识的 Transformer 解码器)",
    ),
    "plan.trace.not_linear": (
        "what its layers keep does not grow with tokens and sequence length as traced (off by {off})",
        "其各层保存的张量不随 token 数与序列长度按追踪的规律增长(偏差 {off})",
    ),
    "plan.trace.raised": ("its code failed on meta tensors: {error}", "其代码在 meta 张量上运行失败:{error}"),
    "plan.trace_timeout": ("it ran longer than {s} s", "运行超过 {s} 秒"),
    "plan.trace_waiting": (
        "Tracing the model's own code (first plan of this config.json)…",
        "正在追踪模型自己的代码(此 config.json 的首次估算)……",
    ),
    "plan.unavailable": ("*Memory plan unavailable: {why}*", "*无法估算显存:{why}*"),
    "plan.fix_fields": ("*Memory plan: fix the marked fields first.*", "*显存估算:请先修正标出的字段。*"),
    "plan.unavailable_cpu": ("*Memory plan unavailable: {why}*", "*无法估算内存:{why}*"),
    "plan.fix_fields_cpu": ("*Memory plan: fix the marked fields first.*", "*内存估算:请先修正标出的字段。*"),
    # settings
    "plan.no_deepspeed": ("no DeepSpeed", "不用 DeepSpeed"),
    "plan.offload_opt": (" + offload (optimizer)", " + offload(优化器)"),
    "plan.offload_both": (" + offload (optimizer + params)", " + offload(优化器 + 参数)"),
    "plan.with_ckpt": (" + gradient checkpointing", " + 梯度检查点"),
    # the panel
    "plan.head": ("### Memory plan: {setting} on {n} {devs}", "### 显存估算:{setting},{n} {devs}"),
    "plan.head_cpu": ("### Memory plan: {setting} on {n} {devs}", "### 内存估算:{setting},{n} {devs}"),
    "plan.devs.cuda": ("GPU", "张 GPU"),
    "plan.devs.cudas": ("GPUs", "张 GPU"),
    "plan.devs.cpu": ("CPU process", "个 CPU 进程"),
    "plan.devs.cpus": ("CPU processes", "个 CPU 进程"),
    "plan.per.cuda": ("per GPU", "每张 GPU"),
    "plan.per.cpu": ("per CPU process", "每个 CPU 进程"),
    "plan.model": ("{model_type}, {params} parameters, {finetuning} fine-tuning", "{model_type},{params} 参数,{finetuning}微调"),
    "plan.finetuning.lora": ("LoRA", "LoRA "),
    "plan.finetuning.full": ("full", "全参数"),
    "plan.lora": (" (LoRA r{rank}: {trainable} trainable)", "(r{rank}:可训练 {trainable})"),
    "plan.batch": ("; {mode}; micro-batch {mb} x {seq} tokens", ";{mode};micro-batch {mb} × {seq} token"),
    "plan.ckpt": ("; gradient checkpointing", ";梯度检查点"),
    "plan.mode.fp32": ("fp32", "fp32"),
    "plan.mode.pure16": (
        "{precision} (model cast to {precision}, fp32 master weights in the optimizer)",
        "{precision}(模型转为 {precision},优化器中保留 fp32 主权重)",
    ),
    "plan.mode.autocast": ("fp32 weights + {precision} autocast", "fp32 权重 + {precision} autocast"),
    "plan.mode.split": (
        "bf16 weights, the fp32 master weights' low 16 bits in the optimizer (exact fp32 updates)",
        "bf16 权重,fp32 主权重的低 16 位保存在优化器中(更新与 fp32 完全一致)",
    ),
    "plan.mode.bf16_base": (
        "frozen base in bf16, fp32 LoRA adapters + {precision} autocast",
        "冻结底座为 bf16,fp32 LoRA 适配器 + {precision} autocast",
    ),
    "plan.mode.pure_bf16": (
        "pure bf16 (weights, gradients and AdamW states in bf16; no fp32 master copy)",
        "纯 bf16(权重、梯度和 AdamW 状态都是 bf16,没有 fp32 主权重)",
    ),
    "plan.part.weights": ("weights", "权重"),
    "plan.part.gradients": ("gradients", "梯度"),
    "plan.part.optimizer states": ("optimizer states", "优化器状态"),
    "plan.part.activations": ("activations", "激活"),
    "plan.part.buffers": ("buffers", "缓冲区"),
    "plan.gpu_peak": ("**peak (torch allocator)**", "**峰值(torch 分配器)**"),
    "plan.gpu_needed": ("needed free (peak + CUDA context and allocator slack)", "需要的空闲显存(峰值 + CUDA 上下文与分配器余量)"),
    "plan.cpu_runtime": ("runtime (Python, torch) + mapped checkpoint", "运行时(Python、torch)+ 映射的检查点"),
    "plan.cpu_peak": ("**peak RSS**", "**峰值 RSS**"),
    "plan.where.cuda": ("free on the tightest selected GPU", "所选 GPU 中最紧的一张的空闲显存"),
    "plan.where.cpu": ("RAM available per process", "每个进程可用的内存"),
    "plan.fits": ("fits", "放得下"),
    "plan.does_not_fit": ("**does not fit**", "**放不下**"),
    "plan.phase": ("Peak at the {phase}.", "峰值出现在{phase}。"),
    "plan.phase.forward": (
        "end of the forward pass (all activations kept for backward, loss being computed)",
        "前向结束时(为反向保存了全部激活,正在计算 loss)",
    ),
    "plan.phase.backward": (
        "start of the backward pass (activations still kept, the loss's gradients and the reduce buckets allocated)",
        "反向开始时(激活仍在,loss 的梯度与 reduce bucket 已分配)",
    ),
    "plan.phase.step": ("optimizer step (all gradients alive, activations freed)", "优化器更新时(所有梯度都在,激活已释放)"),
    "plan.act": (
        "\nActivations: {tokens} tokens x {layers} layers x {per} bytes = {layers_gib} GiB in the layers",
        "\n激活:{tokens} 个 token × {layers} 层 × 每 token 每层 {per} 字节 = 各层共 {layers_gib} GiB",
    ),
    "plan.act_ckpt": (" (checkpointed: each layer's input plus one layer)", "(梯度检查点:每层只保存输入,外加一层)"),
    "plan.act_loss": (
        ", {loss_gib} GiB around the loss (16-bit logits, their fp32 copy and log-softmax: 10-12 x T x V bytes)",
        ";loss 附近 {loss_gib} GiB(16 位 logits、其 fp32 副本与 log-softmax:10-12 × T × V 字节)",
    ),
    "plan.act_loss_fused": (
        ", {loss_gib} GiB in the fused loss (no logits: its input and head gradients, one chunk of logits at a time)",
        ";融合 loss 中 {loss_gib} GiB(不生成完整 logits:输入梯度与输出层梯度,每次只算一块 logits)",
    ),
    "plan.act_autocast": (", {gib} GiB of 16-bit weight copies kept by autocast", ";autocast 保留的 16 位权重副本 {gib} GiB"),
    "plan.act_end": (".", "。"),
    "plan.dominate": (
        "Activations dominate ({act} GiB against {states} GiB of model states): the ZeRO stage only moves the "
        "model states; micro-batch, cutoff_len and gradient checkpointing move this.",
        "激活占主导({act} GiB,模型状态 {states} GiB):ZeRO stage 只影响模型状态;要减少激活,请调小 micro-batch "
        "或 cutoff_len,或开启梯度检查点。",
    ),
    "plan.host": ("\nHost RAM per process: about {gib} GiB", "\n每个进程的主机内存:约 {gib} GiB"),
    "plan.host_offload": (" (offloaded states included).", "(含 offload 出去的状态)。"),
    "plan.host_end": (".", "。"),
    "plan.alt_head": (
        "| setting | peak GiB | needed GiB | fits | expected step s |",
        "| 设置 | 峰值 GiB | 需要 GiB | 放得下 | 预计每步秒数 |",
    ),
    "plan.yes": ("yes", "是"),
    "plan.no": ("no", "否"),
    "plan.advice": ("**Recommendation:** {text}", "**建议**:{text}"),
    # the expected speed of the chosen setting against the fastest that fits (planner.search.compare)
    "plan.tps.where": ("on {n} {devs}", "在 {n} {devs}上"),
    "plan.tps.fastest": (
        "**Speed:** {setting} {where}: about {tps} tokens/s expected, the fastest setting that fits",
        "**速度**:{setting}{where}:预计约 {tps} tokens/s,是放得下的设置中最快的",
    ),
    "plan.tps.slower": (
        "**Speed:** {setting} {where}: {factor}× slower than {best} here (about {tps} against {best_tps} tokens/s "
        "expected); {gain}",
        "**速度**:{setting}{where}:比「{best}」慢 {factor} 倍(预计约 {tps} 对 {best_tps} tokens/s);{gain}",
    ),
    "plan.tps.saves": (
        "it saves {gib} GiB you do not need",
        "它省下的 {gib} GiB 显存在这里用不上",
    ),
    "plan.tps.saves_nothing": ("it saves no memory here", "在这里它也不省显存"),
    "plan.cpu_offload_note": (
        "offload on CPU processes moves nothing: the optimizer states are in host RAM already",
        "CPU 进程上 offload 不移动任何东西:优化器状态本来就在主机内存里",
    ),
    # advice
    "plan.advice.nothing_fits": (
        "nothing fits, not even ZeRO-3 + offload with gradient checkpointing: lower the micro-batch or cutoff_len, use LoRA, or add GPUs",
        "都放不下,即使 ZeRO-3 + offload 加梯度检查点也不行:请减小 micro-batch 或 cutoff_len、改用 LoRA,或增加 GPU",
    ),
    "plan.advice.ram": (
        "does not fit in the RAM available per process: lower the micro-batch or cutoff_len, use fewer "
        "processes, or turn on gradient checkpointing",
        "每个进程可用的内存放不下:请减小 micro-batch 或 cutoff_len、减少进程数,或开启梯度检查点",
    ),
    "plan.advice.keep": (
        "keep {best}: the fastest setting that fits, by the step-time model ({why})",
        "保持「{best}」:按步时模型,它是放得下的设置中最快的({why})",
    ),
    "plan.advice.keep_only": ("keep {best}: the only setting that fits", "保持「{best}」:唯一放得下的设置"),
    "plan.advice.use_fits": (
        "use {best}: the fastest setting that fits, by the step-time model ({current} fits too): {why}",
        "改用「{best}」:按步时模型,它是放得下的设置中最快的(当前的「{current}」也放得下):{why}",
    ),
    "plan.advice.use_room": (
        "use {best}: the fastest setting that fits with {margin}% headroom ({current} fits with less): {why}",
        "改用「{best}」:能留出 {margin}% 余量的设置中最快的(当前的「{current}」也放得下,但余量更少):{why}",
    ),
    "plan.advice.use_not": (
        "use {best}: the fastest setting that fits, by the step-time model ({current} does not fit; {why})",
        "改用「{best}」:按步时模型,它是放得下的设置中最快的(当前的「{current}」放不下;{why})",
    ),
    # notes
    "plan.note.checkpointing": (
        "gradient checkpointing would keep only each layer's input, not all its activations",
        "开启梯度检查点后,每层只保存输入,不再保存全部激活",
    ),
    "plan.note.one_gpu": (
        "on one GPU ZeRO-2/3 split nothing across devices. ZeRO-2 still changes the precision: the model is held in "
        "16 bit and the fp32 master copy lives in the optimizer; measured on one H200 it needed 2-20 GiB less at the "
        "allocator than no DeepSpeed and ran from 58% slower (1.1 B Llama, full, Liger) to 12% faster (StarCoder-1B "
        "LoRA, accumulation 2), so --fit compares the two for this job. ZeRO-3 gathers every layer: 3.5-3.6x the step "
        "time of no DeepSpeed (1.1 B Llama, full and LoRA)",
        "单卡时 ZeRO-2/3 没有可在卡间切分的对象。ZeRO-2 仍会改变精度:模型以 16 位保存,fp32 主权重放在优化器里;"
        "单张 H200 实测,它在分配器上比不用 DeepSpeed 少用 2-20 GiB,速度从慢 58%(1.1 B Llama,全参数,Liger)"
        "到快 12%(StarCoder-1B LoRA,累积 2)不等,所以 --fit 会针对本任务比较两者。ZeRO-3 要逐层收集参数:"
        "每步耗时是不用 DeepSpeed 的 3.5-3.6 倍(1.1 B Llama,全参数与 LoRA)",
    ),
    "plan.note.lora_zero3": (
        "under ZeRO-3 the LoRA adapters stay fp32 and every adapter input is saved in fp32 (and ZeRO-3 "
        "saves the frozen layers' inputs): activations are about twice ZeRO-2's",
        "ZeRO-3 下 LoRA 适配器保持 fp32,每个适配器的输入都以 fp32 保存(ZeRO-3 还会保存冻结层的输入):激活约为 ZeRO-2 的两倍",
    ),
    "plan.note.autocast": (
        "without DeepSpeed ZeroBoard keeps fp32 weights and trains under autocast: 16-bit copies of the "
        "weights are kept for the backward pass (counted in activations); pure bf16 drops the fp32 copy "
        "and AdamW's fp32 states at some cost in precision",
        "不用 DeepSpeed 时,ZeroBoard 保留 fp32 权重并在 autocast 下训练:反向需要的 16 位权重副本会被保留"
        "(计入激活);纯 bf16 去掉 fp32 权重和 AdamW 的 fp32 状态,代价是一些精度",
    ),
    "plan.note.fused_loss": (
        "Liger's fused linear cross-entropy computes the loss in chunks: no full logits tensor",
        "Liger 的线性层 + 交叉熵融合算子分块计算 loss:不生成完整的 logits 张量",
    ),
    "plan.note.loss_layout": (
        "ZeRO-3 computes the loss on full logits; with offload the allocator may place those logits-sized "
        "buffers at new addresses from one step to the next: \"needed\" keeps room for one more 16-bit logits "
        "tensor and for the gathered tied embedding that splits the free space (traced on an H200)",
        "ZeRO-3 在完整的 logits 上计算 loss;开启 offload 时,分配器可能每一步把这些与 logits 同样大小的缓冲放到新地址:"
        "「需要的空闲显存」为此多留一份 16 位 logits 的空间,以及收集后常驻、把空闲区切开的共享词嵌入(在 H200 上追踪得出)",
    ),
    "plan.note.traced": (
        "Planned from a trace of the model's own code (not a hand-derived family): what each layer keeps for backward "
        "was counted on the meta device and scaled to this batch; Liger's norm and MLP kernels, where the run gets "
        "them, keep less than planned.",
        "依据对模型自身代码的追踪估算(非手工推导的模型族):每层为反向传播保存的张量在 meta 设备上统计,再按本批次规模外推;"
        "若运行时启用 Liger 的归一化与 MLP 内核,实际占用会低于估算。",
    ),
    "plan.note.cpu": (
        "CPU processes: the estimate is each process's RAM (RSS), including the Python/torch runtime",
        "CPU 进程:估算的是每个进程的内存(RSS),包括 Python/torch 运行时",
    ),
    # the formula paragraph: the guide's formulas with this model's numbers
    "plan.dev.every.cuda": ("every GPU", "每张 GPU"),
    "plan.dev.every.cpu": ("every process", "每个进程"),
    "plan.dev.units.cuda": ("GPUs", "张 GPU"),
    "plan.dev.units.cpu": ("processes", "个进程"),
    "plan.dev.one.cuda": ("GPU", "GPU"),
    "plan.dev.one.cpu": ("process", "进程"),
    "plan.f.who": ("Ψ = {psi} parameters", "Ψ = {psi} 参数"),
    "plan.f.who_lora": (
        "Ψ = {psi} parameters, of which the LoRA adapter Ψt = {t} is trained",
        "Ψ = {psi} 参数,其中训练的 LoRA 适配器 Ψt = {t}",
    ),
    "plan.f.none": ("**{formula}** (no DeepSpeed, {who}): {body}{lora}.", "**{formula}**(不用 DeepSpeed,{who}):{body}{lora}。"),
    "plan.f.none.pure_bf16": (
        "{every} holds all model states, all in bf16 (pure bf16): 2Ψ weights + 2Ψ gradients + 4Ψ Adam "
        "moments = 8Ψ instead of the guide's 16Ψ, because there is no fp32 master copy; updates smaller "
        "than bf16 can represent are lost",
        "{every}持有全部模型状态,而且都是 bf16(纯 bf16):2Ψ 权重 + 2Ψ 梯度 + 4Ψ Adam 动量 = 8Ψ,"
        "而不是教材的 16Ψ,因为没有 fp32 主权重;小于 bf16 精度的更新会丢失",
    ),
    "plan.f.none.autocast": (
        "{every} holds all model states. The guide counts 2Ψ fp16 weights + 2Ψ gradients + 12Ψ fp32 "
        "master weights and Adam moments; ZeroBoard keeps fp32 weights instead and trains under "
        "autocast: 4Ψ weights + 8Ψ Adam moments, plus 4Ψ fp32 gradients from the backward pass to the "
        "optimizer step (freed between steps) — the same 16Ψ, with the 16-bit weight copies of "
        "autocast on top",
        "{every}持有全部模型状态。教材的算法是 2Ψ fp16 权重 + 2Ψ 梯度 + 12Ψ fp32 主权重和 Adam 动量;"
        "ZeroBoard 改为保留 fp32 权重并在 autocast 下训练:4Ψ 权重 + 8Ψ Adam 动量,再加上从反向到优化器更新"
        "之间存在的 4Ψ fp32 梯度(两步之间释放)——同样是 16Ψ,另外还有 autocast 的 16 位权重副本",
    ),
    "plan.f.none.split": (
        "{every} holds all model states: 2Ψ bf16 weights + 2Ψ bf16 gradients + 8Ψ fp32 Adam moments + 2Ψ for "
        "the low 16 bits of each fp32 master weight = 14Ψ against the guide's 16Ψ: the bf16 weight and those 16 bits "
        "are the fp32 master weight, bit for bit, so the updates are exactly fp32's",
        "{every}持有全部模型状态:2Ψ bf16 权重 + 2Ψ bf16 梯度 + 8Ψ fp32 Adam 动量 + 2Ψ 每个 fp32 主权重的低 16 位"
        " = 14Ψ,教材为 16Ψ:bf16 权重加上这 16 位就是逐位相同的 fp32 主权重,所以更新与 fp32 完全一致",
    ),
    "plan.f.none.bf16_base": (
        "{every} holds all model states: the frozen base in bf16 (2 bytes a parameter), the adapter in fp32 with its "
        "gradients and Adam moments",
        "{every}持有全部模型状态:冻结的底座为 bf16(每个参数 2 字节),适配器及其梯度和 Adam 动量为 fp32",
    ),
    "plan.f.none.plain": (
        "{every} holds all model states: weights, gradients and Adam moments (16Ψ in the guide's count)",
        "{every}持有全部模型状态:权重、梯度和 Adam 动量(教材算作 16Ψ)",
    ),
    "plan.f.none.lora": (
        "; with LoRA only the adapter has gradients and Adam moments, so {formula} applies to Ψt alone",
        ";LoRA 只有适配器有梯度和 Adam 动量,所以 {formula} 只作用于 Ψt",
    ),
    "plan.f.stage1": (
        "**4Ψ+12Ψ/N** (ZeRO-1, N = {n}, {who}): the optimizer states are split over the {units}.",
        "**4Ψ+12Ψ/N**(ZeRO-1,N = {n},{who}):优化器状态分摊到各{units}。",
    ),
    "plan.f.stage2": (
        "**2Ψ+14Ψ/N** (ZeRO-2, N = {n}, {who}): {every} keeps the 16-bit weights (2Ψ); gradients (2Ψ) and "
        "fp32 master weights + Adam moments (12Ψ) are split over the N {units}.{one}{off}{lora}",
        "**2Ψ+14Ψ/N**(ZeRO-2,N = {n},{who}):{every}保留 16 位权重(2Ψ);梯度(2Ψ)以及 fp32 主权重 + "
        "Adam 动量(12Ψ)分摊到 N {units}。{one}{off}{lora}",
    ),
    "plan.f.stage3": (
        "**16Ψ/N** (ZeRO-3, N = {n}, {who}): weights, gradients and optimizer states are all split over the N "
        "{units}; each layer's weights are gathered just before use.{one}{off}{lora}",
        "**16Ψ/N**(ZeRO-3,N = {n},{who}):权重、梯度和优化器状态全部分摊到 N {units};每层的权重在用到之前才收集。{one}{off}{lora}",
    ),
    "plan.f.one": (" With N = 1 nothing is split: the formula gives back 16Ψ.", "N = 1 时什么也没有切分:公式回到 16Ψ。"),
    "plan.f.off_opt": (
        " Offload moves the fp32 master weights and Adam moments (12Ψ/N) to host RAM; the {device} keeps the "
        "16-bit weights (2Ψ) and gradient buckets.",
        "Offload 把 fp32 主权重和 Adam 动量(12Ψ/N)放到主机内存;{device}上保留 16 位权重(2Ψ)和梯度缓冲区。",
    ),
    "plan.f.off_both": (
        " Offload moves the fp32 master weights and Adam moments (12Ψ/N and the 16-bit weights) to host RAM; "
        "the {device} keeps only the layers being computed (ZeRO-3 gathers them on the fly).",
        "Offload 把 fp32 主权重和 Adam 动量(12Ψ/N 以及 16 位权重)放到主机内存;{device}上只保留正在计算的层(ZeRO-3 随用随收集)。",
    ),
    "plan.f.lora2": (
        " With LoRA the split applies to the adapter Ψt; the frozen base stays 2Ψ.",
        "使用 LoRA 时切分的是适配器 Ψt;冻结的基座仍占 2Ψ。",
    ),
    "plan.f.lora3": (
        " With LoRA the split applies to the adapter Ψt; the frozen base stays 2Ψ/N.",
        "使用 LoRA 时切分的是适配器 Ψt;冻结的基座仍占 2Ψ/N。",
    ),
}
WORDS.update(_PROBE_WORDS)  # --fit measured on the devices: kept apart for this module's size
