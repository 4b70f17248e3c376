"""The runner's and the trainer's words: starting, busy, stopping, how a run ended."""

WORDS: dict[str, tuple[str, str]] = {
    # states
    "run.starting": ("starting", "正在启动"),
    "run.running": ("running", "运行中"),
    "run.stopping": ("stopping", "正在停止"),
    "run.stalled": (
        "stalled: no rank has moved since {since} (over {limit} s: the job's stall_factor {factor} × its recent step "
        "time, at least stall_min_s); furthest behind: rank {ranks}, at step {step}. Nothing was stopped: it goes "
        "back to running if it moves again; Abort stops it.",
        "停滞:自 {since} 起没有任何进程有进展(超过 {limit} 秒:任务的 stall_factor {factor} × 最近步时,且不少于 "
        "stall_min_s);最落后的是 rank {ranks},停在第 {step} 步。没有停止任何进程:一旦恢复进展就回到运行中;要停止请点中断。",
    ),
    "run.stalled_silent": (
        "stalled: rank {ranks} has given no sign of life since {since} (at step {step}; stopped, or stuck) and the "
        "other ranks wait for it. Nothing was stopped: it goes back to running if it moves again; Abort stops it.",
        "停滞:rank {ranks} 自 {since} 起没有任何响应(停在第 {step} 步;被暂停或卡住),其他进程都在等它。"
        "没有停止任何进程:一旦恢复进展就回到运行中;要停止请点中断。",
    ),
    "run.stall_over": ("stalled from {since} to {until} (rank {ranks}), then moved again",
                       "{since} 至 {until} 停滞(rank {ranks}),之后恢复进展"),
    "run.finished": ("finished", "已完成"),
    "run.finished_no_end": ("finished (exit code 0, no end event)", "已完成(退出码 0,没有结束事件)"),
    "run.aborted": ("aborted", "已中断"),
    "run.aborted_left": ("aborted; processes still alive: {pids}", "已中断;仍有进程存活:{pids}"),
    "run.failed_how": ("failed ({how}): {who}: {why}", "失败({how}):{who}:{why}"),
    "run.failed_who": ("failed ({how}): {who}", "失败({how}):{who}"),
    "run.rank": ("rank {rank}", "进程 rank {rank}"),
    "run.the_launcher": ("the launcher", "启动器"),
    "run.exit_code": ("exit code {code}", "退出码 {code}"),
    "run.exit_signal": ("killed by {signal}", "被 {signal} 终止"),
    "run.exit_unknown": ("exit code unknown", "退出码未知"),
    "run.ended": ("{message} ({how})", "{message}({how})"),
    # starting
    "run.has_errors": ("the job has errors; nothing was started", "任务有错误;没有启动任何进程"),
    "run.cannot_write": ("cannot write into {path}: {why}; nothing was started", "无法写入 {path}:{why};没有启动任何进程"),
    "run.cannot_start": ("cannot start {argv0}: {why}", "无法启动 {argv0}:{why}"),
    "run.port_changed": ("master port {old} was taken at start; using {new}", "开始时 master port {old} 已被占用;改用 {new}"),
    "run.busy": (
        "A job is already running on {what}: {run} ({status}, started from the {source}, pid {pid}). Abort it or wait for it to end.",
        "{what}上已经有任务在运行:{run}({status},从{source}启动,pid {pid})。请中断它,或等它结束。",
    ),
    "run.busy_folder": (
        "A job is already writing into this folder: {run} ({status}, started from the {source}, pid {pid}). "
        "Abort it or choose another output folder.",
        "已经有任务在写这个目录:{run}({status},从{source}启动,pid {pid})。请中断它,或换一个输出目录。",
    ),
    "run.cpu_processes": ("CPU processes", "CPU 进程"),
    "run.gpus": ("GPU {ids}", "GPU {ids} "),
    "run.index_unwritable": ("cannot write the runs index {path}: {why}", "无法写入运行记录索引 {path}:{why}"),
    # the supervisor
    "run.supervisor_usage": ("usage: python -m zeroboard.runs.supervisor RUN_DIR", "用法:python -m zeroboard.runs.supervisor RUN_DIR"),
    "run.supervisor_never": ("the supervisor ended before the job started: {log}", "监督进程在任务启动之前就结束了:{log}"),
    "run.supervisor_gone": ("the supervisor was gone before the job ended: exit code unknown", "任务结束之前监督进程就已不在:退出码未知"),
    "run.rank_failed_stopping": ("rank {rank} failed: {why}; stopping the other ranks", "rank {rank} 出错:{why};正在停止其他进程"),
    "run.rank_stuck": (
        "rank {rank} failed {seconds} s ago and the launcher still runs",
        "rank {rank} 在 {seconds} 秒前出错,启动器仍在运行",
    ),
    "run.orphans": (
        "launcher exited ({how}) but {n} process(es) remain: stopping them",
        "启动器已退出({how}),但还剩 {n} 个进程:正在停止它们",
    ),
    "run.disk_error": (
        "no space left on the disk (or it failed) while writing {path}: {why}",
        "写入 {path} 时磁盘空间不足(或磁盘出错):{why}",
    ),
    "run.disk_full": (
        "the disk of {path} is full (or failing): {why}; free space there and start again",
        "{path} 所在的磁盘已满(或出错):{why};请腾出空间后重新开始",
    ),
    "run.signal_report": (
        "torchrun stopped on the SIGTERM sent by Abort; its report of that signal (a Python traceback) is left out: it is not a crash",
        "torchrun 收到中断发出的 SIGTERM 后停止;省略了它对这个信号的报告(一段 Python traceback):这不是崩溃",
    ),
    # stopping, step by step
    "run.stop_sigterm_group": ("SIGTERM to the deepspeed launcher's process group {pid}", "向 deepspeed 启动器的进程组 {pid} 发送 SIGTERM"),
    "run.stop_sigterm_launcher": (
        "SIGTERM to {launcher} (pid {pid}); it forwards the signal to the ranks",
        "向 {launcher}(pid {pid})发送 SIGTERM;它会把信号转发给各个进程",
    ),
    "run.stop_sigterm_rest": (
        "launcher gone; SIGTERM to {n} remaining process(es) {pids}",
        "启动器已不在;向剩下的 {n} 个进程 {pids} 发送 SIGTERM",
    ),
    "run.stop_sigterm_worker": ("SIGTERM to the chat worker (pid {pid})", "向对话进程(pid {pid})发送 SIGTERM"),
    "run.stop_sigkill": (
        "still running after {seconds} s: SIGKILL to {pids} and their groups",
        "{seconds} 秒后仍在运行:向 {pids} 及其进程组发送 SIGKILL",
    ),
    "run.stop_verified": ("verified: no process of the job is left", "已确认:任务的进程都已退出"),
    "run.stop_left": ("processes still alive: {pids}", "仍有进程存活:{pids}"),
    # the trainer (its log and its errors)
    "train.interrupted": ("interrupted (SIGINT)", "被中断(SIGINT)"),
    "train.tracker_failed": ("the experiment tracker {tracker} could not start, so training did not: {why}",
                             "实验跟踪工具 {tracker} 无法启动,训练没有开始:{why}"),
    "train.stale_lock": ("removed the build lock of DeepSpeed op {op} left by a compile that was stopped",
                         "已删除 DeepSpeed 算子 {op} 的编译锁(上次编译被中断后遗留)"),
    "train.compile": ("compiling DeepSpeed op {op} (first time only; `zeroboard build-ops` builds it ahead)",
                        "正在编译 DeepSpeed 算子 {op}(仅首次;`zeroboard build-ops` 可提前编译)"),
    "train.compiled": ("compiled DeepSpeed op {op} in {seconds} s", "DeepSpeed 算子 {op} 编译完成,用时 {seconds} 秒"),
    "train.demo_model_wait": (
        "rank 0 did not build the demo model in {path} within {seconds} s",
        "rank 0 没有在 {seconds} 秒内于 {path} 构建好演示模型",
    ),
    "train.cutoff_every_answer": (
        "cutoff_len: {cutoff} tokens cut off every answer; raise cutoff_len",
        "cutoff_len:{cutoff} 个 token 截掉了所有回答;请调大截断长度",
    ),
    "train.data_not_built": (
        "the tokenized data is not in {path}: the main process did not prepare it (see its error)",
        "{path} 中没有分词后的数据:主进程没有准备好它(见其错误)",
    ),
    "train.no_weights": ("save_model wrote no weight file into {path}", "save_model 没有在 {path} 写入任何权重文件"),
    "train.no_chat_template": (
        "template: chat was asked for but the tokenizer has no chat template; use plain or auto",
        "template:指定了 chat,但分词器没有对话模板;请使用 plain 或 auto",
    ),
    "train.template_unstable": (
        "template: the chat template renders turns differently as the conversation grows; use template: plain",
        "template:对话变长时对话模板对前面各轮的渲染会改变;请使用 template: plain",
    ),
    "train.liger_no_cuda": ("no CUDA device", "没有 CUDA 设备"),
    "train.liger_not_installed": ("liger-kernel is not installed", "没有安装 liger-kernel"),
    "train.liger_no_kernels": ("no Liger kernels for model type {model_type}", "Liger 没有 {model_type} 类型模型的算子"),
    "train.liger_on_but": ("liger_kernel: is on but {why}; choose auto or off", "liger_kernel:设为 on,但{why};请选择 auto 或 off"),
    "train.liger_off": ("Liger kernels off ({why})", "Liger 算子关闭({why})"),
    # what the installed Liger's own function for the model type applies (zeroboard.job.liger), kernel by kernel
    "train.liger_on": ("Liger kernels on ({kernels})", "Liger 算子开启({kernels})"),
    "train.liger_and": ("{a}, {b}", "{a}、{b}"),
    "train.liger_k.rms_norm": ("RMSNorm", "RMSNorm"),
    "train.liger_k.swiglu": ("SwiGLU", "SwiGLU"),
    "train.liger_k.geglu": ("GeGLU", "GeGLU"),
    "train.liger_k.layer_norm": ("LayerNorm", "LayerNorm"),
    "train.liger_k.rope": ("RoPE", "RoPE"),
    "train.liger_k.fused_linear_cross_entropy": ("fused linear cross-entropy", "线性层与交叉熵融合"),
    "train.liger_k.cross_entropy": ("cross-entropy (logits still built)", "交叉熵(仍生成 logits)"),
    "train.pure_bf16_precision": (
        "pure_bf16: needs bf16 compute but this job runs in {precision}; untick pure_bf16",
        "pure_bf16:需要 bf16 计算,但这个任务使用 {precision};请取消纯 bf16",
    ),
    "train.attention": ("attention: {attn}", "注意力:{attn}"),
    "train.attention_default": ("model default", "模型默认"),
    "train.weights_pure_bf16": ("weights: bf16 (pure bf16, no fp32 master copy)", "权重:bf16(纯 bf16,没有 fp32 主权重)"),
    "train.weights_split": (
        "weights: bf16; the optimizer keeps the low 16 bits of each fp32 master weight (updates exactly as with fp32 master weights)",
        "权重:bf16;优化器保存每个 fp32 主权重的低 16 位(更新与 fp32 主权重完全一致)",
    ),
    "train.weights_split_slow": (
        "split master weights: the fused Triton kernel is unavailable or disagrees with the PyTorch reference; the optimizer runs as PyTorch operations (slower)",
        "split 主权重:融合的 Triton 算子不可用或与 PyTorch 参考结果不一致;优化器改用 PyTorch 运算(更慢)",
    ),
    "train.weights_bf16_base": (
        "weights: frozen base in bf16, LoRA adapters fp32 + {precision} autocast",
        "权重:冻结的底座为 bf16,LoRA 适配器为 fp32 + {precision} autocast",
    ),
    "train.weights_autocast": ("weights: fp32 master + {precision} autocast", "权重:fp32 主权重 + {precision} autocast"),
    "train.weights_plain": ("weights: {precision}", "权重:{precision}"),
    "train.weights_ds_half": (
        "weights: {precision} (DeepSpeed ZeRO-{stage} keeps the fp32 master copy)",
        "权重:{precision}(DeepSpeed ZeRO-{stage} 保留 fp32 主权重)",
    ),
    "train.weights_ds_fp32": ("weights: fp32 (DeepSpeed ZeRO-{stage}, no 16-bit copy)", "权重:fp32(DeepSpeed ZeRO-{stage},没有 16 位副本)"),
    "run.finished_early": ("finished early, as asked: saved at step {step} of {total}", "按要求提前结束:在第 {step} 步(共 {total} 步)保存"),
    # state files that cannot be read (files.load_state): kept aside, said, never written over
    "state.not_regular": ("not a regular file", "不是普通文件"),
    "state.cannot_read": (
        "{path} cannot be read ({why}); nothing is written to it until it can be: check its owner and permissions "
        "(it may well be whole)",
        "无法读取 {path}({why});在能读取之前不会向它写入任何内容:请检查它的所有者和权限(文件本身可能完好)",
    ),
    "state.cannot_move": (
        "{path} is damaged ({why}) and could not be kept aside; nothing is written over it: move it away yourself",
        "{path} 已损坏({why}),且无法移到一旁保存;不会覆盖它:请自行把它移走",
    ),
    "queue.kept_aside": (
        "The queue file {path} could not be read (damaged, not what ZeroBoard writes), so it was kept aside as "
        "{aside} and the queue started afresh: the jobs it held will not start. Look at the copy, "
        "queue its jobs again, then delete it; this message stays until you do.",
        "队列文件 {path} 无法读取(已损坏,不是 ZeroBoard 写入的内容),已另存为 {aside},"
        "队列已重新开始:其中的任务不会启动。请查看副本,重新排队其中的任务,然后删除副本;在此之前这条提示会一直显示。",
    ),
    "index.kept_aside": (
        "The runs index {path} could not be read (damaged, not what ZeroBoard writes), so it was kept aside as {aside} "
        "and a new index was started: the runs it listed are not shown here (their folders are "
        "untouched). Look at the copy, then delete it; this message stays until you do.",
        "运行索引 {path} 无法读取(已损坏,不是 ZeroBoard 写入的内容),已另存为 {aside},"
        "并已新建索引:其中记录的运行不再列出(它们的目录没有改动)。请查看副本,然后删除它;在此之前这条提示会一直显示。",
    ),
    "state.kept_aside_state": (
        "{path} could not be read (damaged, not what ZeroBoard writes), so it was kept aside as {aside}; the run's "
        "end was recorded again from its events. Delete the copy once you have looked at it.",
        "{path} 无法读取(已损坏,不是 ZeroBoard 写入的内容),已另存为 {aside};已根据事件记录重新记下这次运行的结果。"
        "查看后请删除该副本。",
    ),
}
