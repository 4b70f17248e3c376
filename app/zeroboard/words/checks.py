"""Validation's words: why a value or a job cannot be used, and the fix (spec conversion, checks, folders)."""

WORDS: dict[str, tuple[str, str]] = {
    # converting values (spec.coerce, job files, --set)
    "spec.choice": ("must be one of {options} (got {got})", "必须是 {options} 之一(当前为 {got})"),
    "spec.bool": ("must be true or false (got {got})", "必须是 true 或 false(当前为 {got})"),
    "spec.whole": ("must be a whole number (got {got})", "必须是整数(当前为 {got})"),
    "spec.number": ("must be a number such as 5e-5 (got {got})", "必须是数字,例如 5e-5(当前为 {got})"),
    "spec.finite": ("must be a finite number, not {got}", "必须是有限的数字,不能是 {got}"),
    "spec.text": ("must be text (got {got})", "必须是文本(当前为 {got})"),
    "spec.list": ("must be a list or comma-separated text (got {got})", "必须是列表或用逗号分隔的文本(当前为 {got})"),
    "spec.int_list": ("must be whole numbers separated by commas (got {got})", "必须是用逗号分隔的整数(当前为 {got})"),
    "spec.number_list": ("must be numbers separated by commas (got {got})", "必须是用逗号分隔的数字(当前为 {got})"),
    "spec.json_object": (
        'must be a JSON object such as {{"optim": "adamw_torch"}} ({why})',
        '必须是 JSON 对象,例如 {{"optim": "adamw_torch"}}({why})',
    ),
    "spec.mapping": ("must be a mapping of argument names to values (got {got})", "必须是参数名到取值的映射(当前为 {got})"),
    "spec.unknown": ("unknown option", "未知的选项"),
    "spec.unknown_near": ("unknown option; did you mean {near}?", "未知的选项;是不是 {near}?"),
    "spec.cannot_read": ("cannot read {path}: {why}", "无法读取 {path}:{why}"),
    "spec.not_yaml": ("{path} is not valid YAML: {why}", "{path} 不是有效的 YAML:{why}"),
    "spec.not_mapping": ("{path} must hold a mapping of option: value", "{path} 必须是「选项: 取值」的映射"),
    "spec.override_form": ("overrides look like name=value", "覆盖参数的格式是 name=value"),
    "spec.flag_unexpected": ("unexpected argument (flags look like --name value)", "意外的参数(参数的格式是 --name value)"),
    "spec.flag_no_value": ("flag without a value", "参数缺少取值"),
    # names are names (job.quoting): no control character in a name or a path
    "spec.control": (
        "holds a control character, {char}, at position {pos} (got {got}): names and paths cannot hold control "
        "characters, tabs or line breaks; type the name without it",
        "第 {pos} 个字符是控制字符 {char}(当前为 {got}):名称和路径中不能含有控制字符、制表符或换行;请去掉它再输入",
    ),
    "spec.control_in": (
        "{key}: holds a control character, {char}, at position {pos}: names, paths and other text arguments cannot "
        "hold control characters, tabs or line breaks",
        "{key}:第 {pos} 个字符是控制字符 {char}:名称、路径和其他文本参数中不能含有控制字符、制表符或换行",
    ),
    "quote.nul": ("a NUL character cannot be part of a command's argument", "NUL 字符不能出现在命令的参数中"),
    "quote.env_name": ("{name} is not a name an environment variable can have", "{name} 不能作为环境变量名"),
    "quote.sbatch_control": (
        "holds a control character, {char}, at position {pos}, which an #SBATCH line cannot carry",
        "第 {pos} 个字符是控制字符 {char},#SBATCH 行中无法写入",
    ),
    "check.workers_clamped": (
        "is {n}, above this machine's {cores} CPU cores: {cores} are used here (the trainer uses at most the cores of "
        "the machine it runs on)",
        "为 {n},超过本机的 {cores} 个 CPU 核心:这里按 {cores} 个使用(训练进程最多使用所在机器的核数)",
    ),
    "check.probs_concat": (
        "only an interleave mixing draws by probability; set mix_strategy to interleave_under, interleave_over or "
        "interleave_once, or leave this empty",
        "只有交错混合才按概率抽取;请把 mix_strategy 设为 interleave_under、interleave_over 或 interleave_once,或留空",
    ),
    "check.probs_count": (
        "has {n} probabilities for {datasets} datasets ({evals} evaluation datasets); give one per dataset",
        "有 {n} 个概率,而数据集有 {datasets} 个(验证数据集 {evals} 个);请每个数据集给一个",
    ),
    "check.probs_sum": (
        "must be probabilities from 0 to 1 that sum to 1 (they sum to {total})",
        "必须是 0 到 1 之间、总和为 1 的概率(当前总和为 {total})",
    ),
    # the report
    "check.error_word": ("error", "错误"),
    "check.note_word": ("note", "注意"),
    "check.empty_number": ("is empty; enter a number", "为空;请填写一个数字"),
    # model
    "check.model_empty": ("is empty; give a model folder (with config.json) or a hub id", "为空;请填写模型目录(含 config.json)或 hub id"),
    "check.model_no_config": (
        "{path} has no config.json; point to the folder that holds the model's config.json",
        "{path} 中没有 config.json;请指向含有模型 config.json 的目录",
    ),
    "check.demo_model_built": ("the demo model will be built on first use", "演示模型会在第一次使用时构建"),
    "check.model_is_file": (
        "{path} is a file; point to the model folder that holds config.json",
        "{path} 是一个文件;请指向含有 config.json 的模型目录",
    ),
    "check.model_hub": (
        "{path} is not a local folder but a hub id: {source}; the trainer fetches its weights at launch",
        "{path} 不是本地目录,而是 hub id:{source};训练启动时会下载它的权重",
    ),
    "check.model_hub_unusable": (
        "{path} is not a local folder, and as a hub id it cannot be used now: {why}",
        "{path} 不是本地目录,作为 hub id 目前也无法使用:{why}",
    ),
    "check.model_missing": (
        "folder {path} not found; check the path or use a hub id like org/name",
        "找不到目录 {path};请检查路径,或使用 org/name 形式的 hub id",
    ),
    "check.read_outside": (
        "{path} is outside the folders this page may read ({roots}); choose a path inside them, or start the server with --allow-path",
        "{path} 不在本页面可以读取的目录内({roots});请选择其中的路径,或用 --allow-path 启动服务",
    ),
    # data
    "check.no_dataset": ("no dataset chosen; pick at least one", "没有选择数据集;请至少选择一个"),
    # numbers
    "check.lr_range": ("{got} is out of range; use a small positive number such as 5e-5", "{got} 超出范围;请使用较小的正数,例如 5e-5"),
    "check.max_steps": ("must be 0 (use epochs) or a positive number of steps", "必须是 0(按轮数)或正的步数"),
    "check.epochs_positive": ("must be above 0 when max_steps is 0", "max_steps 为 0 时必须大于 0"),
    "check.at_least_one": ("must be at least 1 (got {got})", "至少为 1(当前为 {got})"),
    "check.not_negative": ("must not be negative (got {got})", "不能为负数(当前为 {got})"),
    "check.cutoff_range": ("must be between 8 and 1048576 tokens (got {got})", "必须在 8 到 1048576 个 token 之间(当前为 {got})"),
    "check.dropout_range": ("must be in [0, 1) (got {got})", "必须在 [0, 1) 之间(当前为 {got})"),
    # LoRA
    "check.lora_target_empty": ("is empty; use all, or module names such as q_proj,v_proj", "为空;请填写 all,或模块名,例如 q_proj,v_proj"),
    "check.lora_target_both": ("use either all or a list of module names, not both", "请填写 all 或模块名列表,不要同时填写"),
    "check.lora_target_unknown": (
        "cannot list this model's layers (no safetensors); targets are checked at start",
        "无法列出这个模型的层(没有 safetensors);作用模块会在开始时检查",
    ),
    "check.lora_target_missing": (
        "{names} not found in the model; its linear layers are: {known} (or use all)",
        "模型中没有 {names};它的线性层有:{known}(或填写 all)",
    ),
    # output folder
    "check.output_empty": ("is empty; give a folder for this run", "为空;请为本次运行填写一个目录"),
    "check.output_outside": (
        "{path} is outside the folders runs may write into ({roots}); choose a folder inside them, or allow one with --allow-path PATH:rw",
        "{path} 不在允许写入的目录内({roots});请选择其中的目录,或用 --allow-path PATH:rw 允许一个目录",
    ),
    "check.output_is_model": (
        "{path} is the model's folder, inside it, or holds it: a run there would overwrite the model; choose a new folder under runs/",
        "{path} 是模型所在的目录、其子目录或包含模型的目录:在那里训练会覆盖模型;请在 runs/ 下选择一个新目录",
    ),
    "check.output_is_data": (
        "{path} is the data folder, inside it, or holds it; choose a new folder under runs/",
        "{path} 是数据目录、其子目录或包含数据的目录;请在 runs/ 下选择一个新目录",
    ),
    "check.output_is_file": ("{path} is a file; choose a folder name", "{path} 是一个文件;请填写目录名"),
    "check.output_uncreatable": (
        "{path} cannot be created here (no such place, or not writable); choose a folder under runs/",
        "无法在这里创建 {path}(位置不存在或不可写);请在 runs/ 下选择一个目录",
    ),
    "check.output_unwritable": ("{path} is not writable; choose another folder", "{path} 不可写;请选择其他目录"),
    "check.output_foreign": (
        "{path} already holds files ZeroBoard did not write ({files}){why}; a run writes only into a new "
        "folder or one of its own runs, so nothing of yours is replaced: use a new folder such as {free}",
        "{path} 中已有不是 ZeroBoard 写的文件({files}){why};运行只写入新目录或它自己的运行目录,不会替换你的任何文件:请换一个新目录,例如 {free}",
    ),
    "check.output_foreign_in_run": (
        "{path} is a run folder, but files were added to it after its last run ended ({files}); a run never writes "
        "beside files it did not write: move them out, or use a new folder such as {free}",
        "{path} 是运行目录,但在上次运行结束后又被放入了文件({files});运行不会写入含有别人文件的目录:请把它们移走,或换一个新目录,例如 {free}",
    ),
    "check.output_has_run": (
        "{path} already holds an earlier run ({marks}); tick resume to continue it, or use a new folder such as {free}",
        "{path} 中已有之前的运行({marks});勾选断点续训以继续它,或换一个新目录,例如 {free}",
    ),
    "check.resume_nothing": (
        "{path} does not exist yet: there is nothing to resume; untick resume or pick the run's folder",
        "{path} 还不存在:没有可以续训的内容;请取消断点续训,或选择那次运行的目录",
    ),
    "check.resume_none": (
        "{path} holds no complete checkpoint-* to resume from{why}; untick resume or pick the run's folder",
        "{path} 中没有可以续训的完整 checkpoint-*{why};请取消断点续训,或选择那次运行的目录",
    ),
    "check.resume_partial": (" (incomplete, skipped: {names})", "(不完整,已跳过:{names})"),
    # devices
    "check.no_gpu": ("no NVIDIA GPU found (NVML sees none); choose cpu or auto", "没有找到 NVIDIA GPU(NVML 看不到);请选择 cpu 或 auto"),
    "check.gpu_missing": ("GPU {wrong} does not exist; this machine has GPU {have}", "GPU {wrong} 不存在;这台机器的 GPU 是 {have}"),
    "check.ds_refused": (
        "DeepSpeed refuses {file}: {why}; the ranks would stop on it at start. Fix the file (\"auto\" takes the job's "
        "value where the Trainer fills one)",
        "DeepSpeed 拒绝了 {file}:{why};各进程启动时会因此停止。请修改该文件(Trainer 会填写的项可写 \"auto\",取任务中的值)",
    ),
    "check.ds_unchecked": (
        "not checked against DeepSpeed's own config model ({why}); the ranks will check it at start",
        "没有用 DeepSpeed 自己的配置模型检查({why});各进程启动时会检查它",
    ),
    "check.ds_not_installed": ("DeepSpeed is not installed here", "这里没有安装 DeepSpeed"),
    "check.ds_timeout": ("DeepSpeed gave no answer within {seconds} s", "DeepSpeed 在 {seconds} 秒内没有回答"),
    "check.gpu_none_here": (
        "GPU {wrong} does not exist: no GPU on this machine (NVML sees none); leave gpu_ids empty to train on CPU",
        "GPU {wrong} 不存在:这台机器上没有 GPU(NVML 看不到);要在 CPU 上训练请把 gpu_ids 留空",
    ),
    "check.gpu_twice": ("lists a GPU twice; give each index once", "同一张 GPU 出现了两次;每个编号只写一次"),
    "check.gpu_no_bf16": (
        "GPU {gpus} cannot do bf16 (needs compute capability 8.0+); use fp16 or auto",
        "GPU {gpus} 不支持 bf16(需要算力 8.0 以上);请使用 fp16 或 auto",
    ),
    "check.processes_positive": ("must be at least 1", "至少为 1"),
    "check.processes_cores": (
        "{n} processes but this machine has {cores} CPU cores; use at most {cores}",
        "{n} 个进程,但这台机器只有 {cores} 个 CPU 核;最多使用 {cores} 个",
    ),
    "check.fp16_cpu": (
        "fp16 training needs a GPU; use fp32 or bf16 on CPU (or auto)",
        "fp16 训练需要 GPU;CPU 上请使用 fp32 或 bf16(或 auto)",
    ),
    "check.gpu_ids_ignored": ("ignored: no GPU is used (CPU processes)", "已忽略:不使用 GPU(CPU 进程)"),
    # nodes and ports
    "check.nodes_positive": ("must be at least 1", "至少为 1"),
    "check.node_rank_range": ("must be between 0 and {top} (num_nodes - 1)", "必须在 0 到 {top}(num_nodes - 1)之间"),
    "check.nodes_torchrun": (
        "several nodes are started with torchrun here; choose torchrun (or use deepspeed's hostfile yourself)",
        "这里多节点用 torchrun 启动;请选择 torchrun(或自己使用 deepspeed 的 hostfile)",
    ),
    "check.nodes_port": (
        "with several nodes every node must use the same port; give one, e.g. 29500",
        "多节点时每个节点必须使用同一个端口;请填写一个,例如 29500",
    ),
    "check.port_range": (
        "must be a TCP port between 1 and 65535 (or 0 to pick one)",
        "必须是 1 到 65535 之间的 TCP 端口(或 0 表示自动选择)",
    ),
    "check.port_taken": (
        "master_port {port} is in use on this machine; free it or choose another (or 0 to pick a free one)",
        "master_port {port} 在这台机器上已被占用;请释放它或换一个(或填 0 自动选择空闲端口)",
    ),
    # DeepSpeed
    "check.offload_needs_stage": (
        "needs DeepSpeed stage 2 or 3; choose a stage or untick offload",
        "需要 DeepSpeed stage 2 或 3;请选择 stage,或取消使用 offload",
    ),
    "check.ds_unreadable": (
        "{path} cannot be read; check the path or leave it empty to use a preset",
        "无法读取 {path};请检查路径,或留空以使用预设",
    ),
    "check.ds_not_json": (
        "{path} is not valid JSON ({why}); fix it or leave the field empty",
        "{path} 不是有效的 JSON({why});请修正它,或留空",
    ),
    "check.ds_not_object": ("{path} must hold a JSON object", "{path} 必须是 JSON 对象"),
    "check.stage_mismatch": (
        "is {stage} but {file} sets stage {own}; set the stage to none to use your file as it is, or clear the file",
        "为 {stage},但 {file} 设置的是 stage {own};要按文件原样使用请把 stage 设为 none,或清空文件",
    ),
    "check.presets_wrote": ("wrote {written}", "已写入 {written}"),
    "check.presets_kept": ("kept your edited {kept} (delete a file to regenerate it)", "保留了你修改过的 {kept}(删除文件即可重新生成)"),
    "check.presets_wrote_kept": (
        "wrote {written}; kept your edited {kept} (delete a file to regenerate it)",
        "已写入 {written};保留了你修改过的 {kept}(删除文件即可重新生成)",
    ),
    "check.presets_unwritable": ("cannot write the DeepSpeed presets into {path}: {why}", "无法把 DeepSpeed 预设写入 {path}:{why}"),
    "check.arch_list": (
        "TORCH_CUDA_ARCH_LIST={given} breaks DeepSpeed op builds; the job gets {used}",
        "TORCH_CUDA_ARCH_LIST={given} 会让 DeepSpeed 算子编译失败;任务改用 {used}",
    ),
    # speed-ups
    "check.liger_cpu": (
        "Liger's Triton kernels need an NVIDIA GPU; choose auto or off for CPU runs",
        "Liger 的 Triton 算子需要 NVIDIA GPU;CPU 运行请选择 auto 或 off",
    ),
    "check.tracker_missing": (
        "{tracker} is not installed here; `{install}` installs it (usable now: {offered})",
        "这里没有安装 {tracker};用 `{install}` 安装(现在可选:{offered})",
    ),
    "check.liger_missing": (
        "liger-kernel is not installed; pip install liger-kernel (or zeroboard[gpu]), or choose auto",
        "没有安装 liger-kernel;请 pip install liger-kernel(或 zeroboard[gpu]),或选择 auto",
    ),
    "check.liger_model": (
        "Liger has no kernels for model type {model_type}; choose auto or off",
        "Liger 没有 {model_type} 类型模型的算子;请选择 auto 或 off",
    ),
    "check.fa_cpu": ("flash_attention_2 needs an NVIDIA GPU; choose auto or sdpa", "flash_attention_2 需要 NVIDIA GPU;请选择 auto 或 sdpa"),
    "check.fa_missing": (
        "the flash-attn package is not installed; pip install flash-attn, or choose auto",
        "没有安装 flash-attn;请 pip install flash-attn,或选择 auto",
    ),
    "check.fa_old_gpu": (
        "flash_attention_2 needs compute capability 8.0+, GPU {gpus} has less; choose auto",
        "flash_attention_2 需要算力 8.0 以上,GPU {gpus} 不够;请选择 auto",
    ),
    "check.fa_fp32": (
        "flash_attention_2 runs in bf16 or fp16 only; set Compute type to auto or bf16",
        "flash_attention_2 只支持 bf16 或 fp16;请把计算类型设为 auto 或 bf16",
    ),
    "check.sdpa_unsupported": (
        "{model_type} models have no SDPA attention in transformers (their attention soft-caps its scores); set "
        "Attention to auto (eager for this model) or flash_attention_2",
        "{model_type} 模型在 transformers 中没有 SDPA 注意力(它的注意力分数带软截断);请把注意力实现设为 auto"
        "(此模型即 eager)或 flash_attention_2",
    ),
    "check.fa_packing": (
        "flash_attention_2 finds packed samples' boundaries only in a batch of one row; set Batch size to 1 "
        "(and raise cutoff_len) or choose auto",
        "flash_attention_2 只在每批一行时才能找到打包样本的边界;请把批处理大小设为 1(并调大截断长度),或选择 auto",
    ),
    "check.packing_recurrent": (
        "{model_type} has recurrent layers whose state would run from one packed sample into the next; untick packing",
        "{model_type} 有循环层,状态会从一个打包样本带到下一个;请取消序列打包",
    ),
    "check.compile_liger": (
        "torch_compile with Liger's kernels stopped with a CUDA illegal memory access on the H200 bench (1.1 B Llama, pure bf16, through the Trainer); a 4-layer model compiled the same way ran, so the cause is not found yet. Set liger_kernel: off to compile, or leave torch_compile out",
        "torch_compile 与 Liger 算子一起使用时,H200 基准(1.1 B Llama、纯 bf16、经由 Trainer)因 CUDA 非法内存访问而停止;同样编译的 4 层模型能正常运行,原因尚未查明。要编译请把 liger_kernel 设为 off,或者不用 torch_compile",
    ),
    "check.ds_tuned": (
        "ZeroBoard sets {values} for this run, from the model and its placement (one GPU has nothing to split or communicate; LoRA trains only its adapters); the preset file stays as written",
        "ZeroBoard 为本次运行设置 {values},依据模型和运行位置推导(单个 GPU 没有可切分或通信的内容;LoRA 只训练适配器);预设文件保持原样",
    ),
    "check.master_split_optim": (
        "split master weights come with their own AdamW; remove optim from the extra arguments or choose fp32 master weights",
        "split 主权重自带 AdamW 优化器;请从额外参数中删除 optim,或选择 fp32 主权重",
    ),
    "check.pure_bf16_ds": (
        "DeepSpeed keeps its own fp32 master weights; untick pure_bf16 or set DeepSpeed stage to none and clear the DeepSpeed file",
        "DeepSpeed 会保留自己的 fp32 主权重;请取消纯 bf16,或把 DeepSpeed stage 设为 none 并清空 DeepSpeed 文件",
    ),
    "check.pure_bf16_compute": (
        "needs bf16 compute; set Compute type to bf16 (auto means fp32 on CPU)",
        "需要 bf16 计算;请把计算类型设为 bf16(CPU 上 auto 表示 fp32)",
    ),
    "check.pure_bf16_gpu": (
        "GPU {gpus} cannot do bf16 (auto means fp16 there); untick pure_bf16",
        "GPU {gpus} 不支持 bf16(那里 auto 表示 fp16);请取消纯 bf16",
    ),
    # extra arguments
    "check.extra_owned": ("{key} is set by the job field {field}; set it there", "{key} 由任务字段 {field} 设置;请在那里设置"),
    "check.extra_unknown": (
        "{key} is not a transformers TrainingArguments option; check its spelling",
        "{key} 不是 transformers TrainingArguments 的选项;请检查拼写",
    ),
    "check.seed_range": ("{got} is out of range: a seed is a whole number from 0 to {top}", "{got} 超出范围:随机种子是 0 到 {top} 之间的整数"),
    "check.too_long": ("is far too large for a training run; use a realistic number", "对一次训练来说太大了;请填写合理的数值"),
    "check.lora_rank_width": ("{rank} is above the model's hidden size {hidden}: a LoRA rank is at most the layer width (8 to 64 is usual)",
                              "{rank} 大于模型的 hidden size {hidden}:LoRA 秩最多等于层宽(常用 8 到 64)"),
    "check.ds_disagrees": ("{file} fixes values the job sets otherwise ({fields}); set them to \"auto\" in the file, or change the job to match",
                           "{file} 固定的值与任务的设置不一致({fields});请在文件中改为 \"auto\",或修改任务使之一致"),
    "check.cutoff_all_lost": ("{cutoff} tokens cut off the answer of every sample looked at ({n}): the prompt alone is longer; raise cutoff_len",
                              "{cutoff} 个 token 截掉了所查看的全部 {n} 条样本的回答:光是提示就更长;请调大截断长度"),
    "check.cutoff_half_lost": ("{cutoff} tokens cut off the whole answer of {lost} of {n} samples looked at; those teach nothing: consider a larger cutoff_len",
                               "{cutoff} 个 token 截掉了所查看的 {n} 条样本中 {lost} 条的全部回答;这些样本学不到东西:可以考虑调大截断长度"),
    "check.does_not_fit": ("the memory plan needs {need} GiB {where} but {have} GiB are free: {advice}",
                           "显存估算需要 {need} GiB({where}),但只有 {have} GiB 空闲:{advice}"),
    "check.fit_close": ("the memory plan needs {need} GiB of the {have} GiB free: less than {margin}% headroom, and real peaks "
                        "have come out up to 8% above the plan; a smaller micro-batch or gradient checkpointing leaves room",
                        "显存估算需要 {need} GiB,空闲 {have} GiB:余量不到 {margin}%,而实测峰值曾比估算高出 8%;"
                        "减小单卡批大小或开启梯度检查点可以留出余量"),
    "check.fit_where_gpu": ("per GPU", "每张 GPU"),
    "check.fit_where_ram": ("of RAM per process", "每个进程的内存"),
}
