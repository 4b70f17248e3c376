"""Words of the guards: input read within limits, folders a run owns, numbers within reason, who holds a device."""

WORDS: dict[str, tuple[str, str]] = {
    # reading what users hand us (safeload)
    "safe.too_big": ("it is larger than {limit}", "它超过了 {limit}"),
    "safe.too_deep": ("it nests deeper than {limit} levels", "它的嵌套超过了 {limit} 层"),
    "safe.too_many_nodes": (
        "its aliases expand to more than {limit} values (a YAML anchor bomb?); write the values out",
        "它的别名展开后超过 {limit} 个值(YAML 锚点炸弹?);请把取值直接写出来",
    ),
    "safe.recursive": ("an alias refers to itself", "有别名引用了它自己"),
    "safe.value_too_big": ("is larger than {limit}; keep extra arguments short", "超过了 {limit};额外参数请保持简短"),
    "safe.special_fifo": (
        "it is a FIFO (a named pipe), not a file: reading it would wait for a writer for ever; give a regular file",
        "它是 FIFO(命名管道)而不是文件:读取它会一直等待写入方;请给出普通文件",
    ),
    "safe.special_char": ("it is a character device, not a file; give a regular file", "它是字符设备而不是文件;请给出普通文件"),
    "safe.special_block": ("it is a block device, not a file; give a regular file", "它是块设备而不是文件;请给出普通文件"),
    "safe.special_socket": ("it is a socket, not a file; give a regular file", "它是套接字而不是文件;请给出普通文件"),
    "safe.special_other": ("it is no regular file; give a regular file", "它不是普通文件;请给出普通文件"),
    "safe.duplicate_key": (
        "the key {key} is given twice in one mapping (lines {lines}): the last would silently win; keep one",
        "键 {key} 在同一个映射里出现了两次(第 {lines} 行):后一个会悄悄覆盖前一个;请只保留一个",
    ),
    "safe.not_finite": (
        "{key} is {got}, not a finite number (a number past ±1.8e308, such as 1e400, reads as infinity)",
        "{key} 为 {got},不是有限的数(超过 ±1.8e308 的数,例如 1e400,会被读成无穷大)",
    ),
    "safe.nul_in_path": (
        "contains a NUL byte (\\0), which no file name can hold; remove it",
        "含有 NUL 字节(\\0),任何文件名都不能包含它;请删除",
    ),
    "spec.unsafe": ("{path} was not read: {why}", "没有读取 {path}:{why}"),
    "spec.too_long": (
        "is {n} characters long (at most {limit}); was a file pasted here?",
        "长度为 {n} 个字符(最多 {limit});是不是把文件内容粘贴到了这里?",
    ),
    "spec.too_many": ("has {n} entries (at most {limit})", "有 {n} 项(最多 {limit} 项)"),
    "spec.list_of_text": ("must be a list of names (got {got})", "必须是名称的列表(当前为 {got})"),
    "data.info_unsafe": ("{path} was not read: {why}", "没有读取 {path}:{why}"),
    "check.ds_unsafe": ("{path} was not read: {why}", "没有读取 {path}:{why}"),
    "check.config_unsafe": ("{path} was not read: {why}", "没有读取 {path}:{why}"),
    "check.config_size": (
        "{path}: {key} is {got}; a model's sizes are whole numbers from 0 to {limit}",
        "{path}:{key} 为 {got};模型的尺寸必须是 0 到 {limit} 之间的整数",
    ),
    # whose folder it is (job.folders)
    "check.folder_unmarked": (
        " — it has no ZeroBoard run marker (zeroboard_run.json), so it is not a run folder whatever its files are called",
        " —— 其中没有 ZeroBoard 的运行标记(zeroboard_run.json),所以无论文件叫什么名字,它都不是运行目录",
    ),
    "check.folder_other_run": (
        " — its marker names run {run_id}, which this workspace's runs index records for another run",
        " —— 其中的标记指向运行 {run_id},而本工作区的运行索引记录的是另一次运行",
    ),
    "check.folder_copied": (
        " — its marker was written for {folder} (a copy of another run's folder)",
        " —— 其中的标记是为 {folder} 写的(这是另一个运行目录的副本)",
    ),
    "check.folder_no_state": (
        " — it holds a run marker (zeroboard_run.json) but no record of that run ({file}), so it is not a run folder",
        " —— 其中有运行标记(zeroboard_run.json),却没有这次运行的记录({file}),所以它不是运行目录",
    ),
    "check.folder_state_other": (
        " — its marker and its run's record name different runs (the record names {run_id})",
        " —— 其中的标记与运行记录指向不同的运行(记录中是 {run_id})",
    ),
    "check.folder_state_unreadable": (
        " — its run's record ({file}) cannot be read, so nothing says the marker is this folder's",
        " —— 其中的运行记录({file})无法读取,无从确认标记属于这个目录",
    ),
    # who holds the devices (runs.manager)
    "run.busy_other": (
        "These devices are in use by a job of another workspace (user {user}). Wait for it to end, or pick other devices.",
        "这些设备正被另一个工作区的任务占用(用户 {user})。请等它结束,或选择其他设备。",
    ),
    "run.busy_other_folder": (
        "A training process of another workspace (user {user}) writes into this output folder. Use another folder.",
        "另一个工作区的训练进程(用户 {user})正在写入这个输出目录。请换一个目录。",
    ),
    # numbers within reason (job.bounds)
    "bound.batch": (
        "is {got}, above {limit}: no device holds that many samples at once; use gradient_accumulation_steps for a larger batch",
        "为 {got},超过 {limit}:没有设备能一次容纳这么多样本;需要更大的批量请用 gradient_accumulation_steps",
    ),
    "bound.accumulation": (
        "is {got}, above {limit}: each optimizer step would wait for that many micro-batches per device, so the run "
        "would hardly take a step; raise per_device_train_batch_size or lower this",
        "为 {got},超过 {limit}:每次优化器更新都要等每个设备跑完这么多个微批次,训练几乎无法更新;请增大 per_device_train_batch_size 或减小此值",
    ),
    "bound.samples": ("is {got}, above {limit}: more samples than any dataset holds; 0 takes them all", "为 {got},超过 {limit}:比任何数据集的样本都多;填 0 表示全部使用"),
    "bound.grad_norm": ("is {got}, above {limit}: a clip this large never clips; 0 turns clipping off", "为 {got},超过 {limit}:这么大的阈值永远不会裁剪;填 0 表示关闭梯度裁剪"),
    "bound.weight_decay": (
        "is {got}, above {limit}: decoupled weight decay shrinks each weight by lr × decay per step, above 1 it is no longer a decay",
        "为 {got},超过 {limit}:解耦权重衰减每步把权重缩小 lr × decay,超过 1 就不再是衰减",
    ),
    "bound.lora": ("is {got}, above {limit}: wider than any layer a LoRA adapter attaches to", "为 {got},超过 {limit}:比 LoRA 能挂接的任何层都宽"),
    "bound.lora_alpha": (
        "is {got}, above {limit}: alpha scales the adapter's update by alpha / rank (usually 1–2 × the rank)",
        "为 {got},超过 {limit}:alpha 按 alpha / rank 缩放适配器的更新(通常取秩的 1–2 倍)",
    ),
    "bound.processes": ("is {got}, above {limit} processes on one machine", "为 {got},单台机器上超过 {limit} 个进程"),
    "bound.nodes": ("is {got}, above {limit} machines: start fewer, or split the job", "为 {got},超过 {limit} 台机器:请减少机器数量,或拆分任务"),
    "bound.stall_factor": (
        "is {got}, above {limit}: a run would be called stalled only after that many step times without progress; "
        "0 turns the watch off",
        "为 {got},超过 {limit}:要等这么多倍步时都没有进展才算停滞;填 0 表示不检测停滞",
    ),
    "bound.stall_min_s": (
        "is {got} s, above {limit} s (a week): a hung run would go unnoticed for that long",
        "为 {got} 秒,超过 {limit} 秒(一周):卡住的任务这么久都不会被发现",
    ),
    "bound.workers_absurd": (
        "is {got}, above {limit}: no machine has use for that many worker processes (each is a process of its own); "
        "use at most the machine's cores",
        "为 {got},超过 {limit}:没有哪台机器需要这么多 worker 进程(每个都是独立进程);最多填机器的核心数",
    ),
    "bound.size": (
        "is {got}, above {limit} bytes: a cell or record that large is a whole dataset in one field",
        "为 {got},超过 {limit} 字节:这么大的单元格或记录相当于把整个数据集放进一个字段",
    ),
    "bound.image_pixels": (
        "is {got}, above {limit} pixels: no model's image processor takes a picture that large (a Qwen-VL model reads "
        "at most 16 million); lower it",
        "为 {got},超过 {limit} 像素:没有哪个模型的图像处理器接受这么大的图片(Qwen-VL 模型最多读取 1600 万像素);请减小",
    ),
    "bound.at_least": ("must be at least {limit} (got {got})", "至少为 {limit}(当前为 {got})"),
    "check.batch_over_data": (
        "one optimizer step takes {per_step} samples (micro-batch × accumulation × devices) but the data holds {n}: "
        "each epoch makes a single short step",
        "一次优化器更新要用 {per_step} 个样本(微批次 × 梯度累积 × 设备数),但数据只有 {n} 条:每个 epoch 只会做一次不满的更新",
    ),
    # extra TrainingArguments (job.checks)
    "check.extra_choice": (
        "{key} = {got} is not a value transformers knows; it takes one of: {options}",
        "{key} = {got} 不是 transformers 认识的取值;可选值为:{options}",
    ),
    "check.extra_type": ("{key} = {got}: it takes {want}", "{key} = {got}:它需要 {want}"),
    # paths the filesystem cannot hold (job.checks)
    "check.name_too_long": (
        "the name {part} is {n} bytes long; this filesystem takes at most {limit} bytes per folder or file name: shorten it",
        "名称 {part} 长 {n} 字节;此文件系统每个目录名或文件名最多 {limit} 字节:请缩短它",
    ),
    "check.path_too_long": (
        "the path {part} is {n} bytes long; this filesystem takes at most {limit} bytes per path: shorten it",
        "路径 {part} 长 {n} 字节;此文件系统每个路径最多 {limit} 字节:请缩短它",
    ),
    # checkpoints cut short (outputs.export) and what resume takes (job.checks)
    "out.checkpoint_cut": (
        "{path} was cut short while it was being saved (it has no completion mark), so it cannot be consolidated; {last}",
        "{path} 在保存过程中被中断(没有完成标记),无法合并;{last}",
    ),
    "out.last_whole": ("the last whole checkpoint is {name}", "最后一个完整的检查点是 {name}"),
    "out.no_whole": ("the run has no whole ZeRO checkpoint", "该运行没有完整的 ZeRO 检查点"),
    "out.only_cut": (
        "{path} has only checkpoints whose save was cut short ({names}): none of them can be consolidated",
        "{path} 中只有保存时被中断的检查点({names}):都无法合并",
    ),
    "check.resume_from": (
        "resumes from {name} (step {step}, the last whole checkpoint){skipped}",
        "将从 {name}(第 {step} 步,最后一个完整的检查点)继续{skipped}",
    ),
    "check.resume_skips": ("; skips {names} (cut short while saving)", ";跳过 {names}(保存时被中断)"),
    "bound.per_node": ("is {got}, above {limit}: no cluster node has that many", "为 {got},超过 {limit}:没有哪个集群节点有这么多"),
}
