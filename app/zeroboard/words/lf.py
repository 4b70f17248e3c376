"""LLaMA-Factory's keys and names read here (``job.lfcompat``): what each becomes, the one-line notes, the refusals."""

WORDS: dict[str, tuple[str, str]] = {
    # refusals
    "lf.stage_pt": (
        "{stage} (pre-training on raw text) is not trained here yet: ZeroBoard trains supervised fine-tuning "
        "(stage: sft)",
        "{stage}(在原始文本上预训练)这里还不支持:ZeroBoard 训练的是监督微调(stage: sft)",
    ),
    "lf.stage_rm": (
        "{stage} (training a reward model) is not trained here: ZeroBoard trains sft, dpo (with pref_loss orpo or simpo: ORPO, SimPO) and kto",
        "{stage}(训练奖励模型)这里不支持:ZeroBoard 训练 sft、dpo(pref_loss 为 orpo 或 simpo 时即 ORPO、SimPO)和 kto",
    ),
    "lf.kto_pair": (
        "kto_pair is not a loss TRL keeps (it moved to the KTO trainer): use stage: kto with kto-tagged data, or pref_loss sigmoid",
        "kto_pair 已不是 TRL 保留的损失(已移到 KTO 训练器):请对带 kto 标签的数据使用 stage: kto,或使用 pref_loss sigmoid",
    ),
    "lf.pref_unsupported": (
        "preference tuning here takes pref_beta, pref_loss, pref_ftx and simpo_gamma, and keeps TRL's default for this setting (got {value}); remove it to train with the default",
        "这里的偏好训练只接受 pref_beta、pref_loss、pref_ftx 和 simpo_gamma,此项使用 TRL 的默认值(当前为 {value});删掉它即可用默认值训练",
    ),
    "lf.doc_pref_loss": (
        "sigmoid, hinge, ipo: dpo's loss; orpo, simpo (with stage: dpo): training_stage orpo or simpo; kto_pair refused",
        "sigmoid、hinge、ipo:dpo 的损失;orpo、simpo(与 stage: dpo 一起):training_stage 为 orpo 或 simpo;kto_pair 被拒绝",
    ),
    "lf.stage_ppo": (
        "ppo (reinforcement learning with a reward model) is not trained here: ZeroBoard trains supervised "
        "fine-tuning (stage: sft)",
        "ppo(用奖励模型做强化学习)这里不支持:ZeroBoard 训练的是监督微调(stage: sft)",
    ),
    "lf.do_train_off": (
        "false asks for no training; a ZeroBoard job trains (remove the key, or set it to true)",
        "false 表示不训练;ZeroBoard 的任务就是训练(删掉这个键,或设为 true)",
    ),
    "lf.per_epoch": (
        "{value} has no equivalent here: ZeroBoard evaluates, saves and logs every N steps ({field}); use "
        "steps or no",
        "{value} 在这里没有对应:ZeroBoard 按步数({field})评估、保存和记录;请用 steps 或 no",
    ),
    "lf.warmup_ratio": (
        "must be a ratio from 0 up to (not including) 1 (got {value})",
        "必须是 0 到 1(不含 1)之间的比例(当前为 {value})",
    ),
    "lf.resume_elsewhere": (
        "{value}: ZeroBoard resumes from the last complete checkpoint of output_dir ({output}); "
        "point output_dir at the run that holds that checkpoint",
        "{value}:ZeroBoard 从 output_dir({output})中最后一个完整的检查点继续;"
        "请让 output_dir 指向含有该检查点的运行目录",
    ),
    "lf.report_many": (
        "{value}: one tracker per run here (none, tensorboard, wandb, mlflow or swanlab)",
        "{value}:这里每次运行只用一个跟踪工具(none、tensorboard、wandb、mlflow 或 swanlab)",
    ),
    "lf.finetuning_type": (
        "{value} is not trained here: use lora or full",
        "这里不支持 {value}:请用 lora 或 full",
    ),
    "lf.flash_attn": (
        "{value} has no equivalent here (one of {options}: read as attn_implementation)",
        "{value} 在这里没有对应(可用 {options},对应 attn_implementation)",
    ),
    "lf.enable_thinking": (
        "false (thoughts removed from the answers) is not supported yet; with a reasoning template "
        "the answers are trained as they are, an empty thought added where they have none",
        "设为 false(从回答中去掉思考)还不支持;使用推理模板时,回答按原样训练,没有思考的回答会加上空的思考",
    ),
    "lf.unsupported": (
        "no equivalent in ZeroBoard yet (got {value}); remove it to train without it",
        "在 ZeroBoard 中还没有对应(当前为 {value});删掉它即可不用它训练",
    ),
    "lf.token_in_file": (
        "a secret does not belong in the job file (it is saved with the run); set it in the environment "
        "(HF_TOKEN, SWANLAB_API_KEY, ...)",
        "密钥不应写在任务文件里(它会随运行一起保存);请用环境变量设置(HF_TOKEN、SWANLAB_API_KEY 等)",
    ),
    "lf.predict": (
        "prediction with generation is not a training job here; chat with the result after training instead",
        "带生成的预测不是这里的训练任务;请在训练后与结果对话",
    ),
    "lf.streaming": (
        "true is not needed here: the datasets are memory-mapped, any size, without streaming; remove it",
        "设为 true 在这里没有必要:数据集以内存映射读取,任何大小都无需流式;请删掉它",
    ),
    "lf.fp8": ("fp8 training is not supported yet; remove fp8", "还不支持 fp8 训练;请删掉 fp8"),
    "lf.conflict": (
        "{key} and {other} both set {field}, differently; keep one",
        "{key} 和 {other} 都设置了 {field},而且取值不同;请只保留一个",
    ),
    "lf.unknown_near": (
        "unknown option; did you mean {near} (LLaMA-Factory's name, read as {field})?",
        "未知的选项;是不是 {near}(LLaMA-Factory 的名称,对应 {field})?",
    ),
    # notes: accepted, nothing changes (or this changes)
    "lf.defaults": (
        "a LLaMA-Factory file: the keys it leaves out take LLaMA-Factory {version}'s defaults where they differ from "
        "ZeroBoard's: {values}",
        "这是 LLaMA-Factory 的文件:它没写的键按 LLaMA-Factory {version} 的默认值(与 ZeroBoard 不同之处):{values}",
    ),
    "lf.template_own": (
        "{name}: ZeroBoard does not write LLaMA-Factory's {name} itself; the tokenizer's own chat template "
        "is used (template: chat), so the tokens may differ from LLaMA-Factory's",
        "{name}:ZeroBoard 不自己写 LLaMA-Factory 的 {name} 模板,而使用分词器自带的对话模板(template: chat),"
        "因此 token 可能与 LLaMA-Factory 不同",
    ),
    "lf.packing_neat": (
        "ZeroBoard packs as LLaMA-Factory's neat_packing does (no attention across the samples of a row)",
        "ZeroBoard 的打包方式与 LLaMA-Factory 的 neat_packing 相同(同一行中的样本互不注意)",
    ),
    "lf.plot_loss": (
        "not needed, the Runs page draws the loss (and zeroboard runs compare)",
        "不需要,运行页会画出 loss(zeroboard runs compare 也可以)",
    ),
    "lf.overwrite_output_dir": (
        "ZeroBoard never overwrites a folder: a new output_dir is made, a finished run's is "
        "refused (resume it, or choose a new one)",
        "ZeroBoard 从不覆盖目录:会新建 output_dir,已完成运行的目录会被拒绝(可继续训练,或换一个新目录)",
    ),
    "lf.trust_remote_code": (
        "ZeroBoard loads the models transformers knows with transformers' own code; a model "
        "repository's own code is not run",
        "ZeroBoard 用 transformers 自带的代码加载它认识的模型;不运行模型仓库自带的代码",
    ),
    "lf.tokenized_path": (
        "ZeroBoard keeps the tokenized data in its own cache and reuses it for the same data, "
        "tokenizer and template; this job trains (zeroboard dataset FILE tokenizes without training)",
        "ZeroBoard 把分词后的数据保存在自己的缓存中,数据、分词器和模板相同时直接复用;"
        "这个任务会训练(只分词不训练请用 zeroboard dataset FILE)",
    ),
    "lf.cache_dir": (
        "models come from the Hugging Face cache (HF_HOME) or a local folder here",
        "这里的模型来自 Hugging Face 缓存(HF_HOME)或本地目录",
    ),
    "lf.tokens_per_second": (
        "not needed, ZeroBoard reports tokens per second live",
        "不需要,ZeroBoard 会实时报告每秒 token 数",
    ),
    "lf.ray": (
        "ZeroBoard launches without Ray (torchrun, deepspeed or Slurm); num_processes and gpu_ids say how many",
        "ZeroBoard 不用 Ray 启动(用 torchrun、deepspeed 或 Slurm);进程数由 num_processes 和 gpu_ids 决定",
    ),
    "lf.noop_here": (
        "nothing to set here (ZeroBoard does this on its own)",
        "这里无需设置(ZeroBoard 自己会处理)",
    ),
    "lf.noop_media": (
        "a setting for video or audio, which ZeroBoard does not train (it trains text, and images with a Qwen-VL model)",
        "这是视频或音频的设置,ZeroBoard 不训练它们(它训练文本,以及配合 Qwen-VL 模型的图像)",
    ),
    "lf.noop_image_option": (
        "an image option of other model families' processors (Gemma 3, Llama 4); the Qwen-VL models ZeroBoard trains "
        "on images do not use it",
        "这是其他模型系列(Gemma 3、Llama 4)处理器的图像选项;ZeroBoard 用图像训练的 Qwen-VL 模型不使用它",
    ),
    "lf.media_dir": (
        "ZeroBoard reads a record's relative image paths from the dataset's folder (dataset_dir), LLaMA-Factory's "
        "default; move the images there or write their paths in full, and leave media_dir out",
        "ZeroBoard 从数据集所在文件夹(dataset_dir)读取记录中的相对图像路径(即 LLaMA-Factory 的默认值);"
        "请把图像放到那里或写出完整路径,并去掉 media_dir",
    ),
    "lf.noop_inference": (
        "a setting for generating text, not for training; the chat page has its own",
        "这是生成文本的设置,不用于训练;对话页有自己的设置",
    ),
    "lf.noop_export": (
        "exporting is a step after training here (zeroboard merge, zeroboard export)",
        "这里导出是训练之后的一步(zeroboard merge、zeroboard export)",
    ),
    "lf.noop_stage": (
        "read only by the stages rm and ppo, which are not trained here",
        "只有 rm、ppo 阶段使用,这里不训练这些阶段",
    ),
    "lf.noop_method": (
        "read only with a method that is off here (its switch is refused when on)",
        "只在某种方法开启时使用,这里该方法未开启(开启它的开关会被拒绝)",
    ),
    "lf.swanlab": (
        "SwanLab runs with its own settings here (report_to: swanlab; SWANLAB_* in the environment)",
        "这里 SwanLab 使用它自己的设置(report_to: swanlab;环境变量 SWANLAB_*)",
    ),
    "lf.noop_profiler": (
        "the torch profiler is not started here; the Runs page shows each step's time",
        "这里不启动 torch profiler;运行页显示每一步的时间",
    ),
    # what a mapped key reads (the docs' table)
    "lf.doc_same": ("the same; null: the field's default", "相同;null 表示该字段的默认值"),
    "lf.doc_lora_alpha": (
        "the same; null: twice lora_rank in a LLaMA-Factory file (its default)",
        "相同;在 LLaMA-Factory 文件中 null 表示 lora_rank 的两倍(它的默认值)",
    ),
    "lf.doc_trainer": ("passed to transformers' TrainingArguments as it is", "原样传给 transformers 的 TrainingArguments"),
    "lf.doc_template": (
        "a template ZeroBoard writes token for token as LLaMA-Factory does (the table above); any other of "
        "LLaMA-Factory's names: the tokenizer's own chat template (chat), with a note",
        "ZeroBoard 与 LLaMA-Factory 逐 token 一致地写出的模板(见上表);LLaMA-Factory 的其他模板名:"
        "改用分词器自带的对话模板(chat),并给出提示",
    ),
    "lf.doc_dataset_dir": (
        "the same; REMOTE:owner/name (a dataset repository holding dataset_info.json, fetched into the hub cache) and "
        "ONLINE (each dataset name a hub dataset) as LLaMA-Factory reads them",
        "相同;REMOTE:owner/name(含 dataset_info.json 的数据集仓库,下载到 hub 缓存)和 ONLINE(每个数据集名都是 hub 上的"
        "数据集)与 LLaMA-Factory 的读法一致",
    ),
    "lf.doc_finetuning_type": ("lora, full; freeze and oft refused", "lora、full;freeze 和 oft 被拒绝"),
    "lf.doc_report_to": ("one tracker, or none; several refused", "一个跟踪工具或 none;多个被拒绝"),
    "lf.doc_stage": (
        "training_stage: sft, dpo, kto (dpo with pref_loss orpo or simpo: orpo, simpo); pt, rm and ppo refused",
        "training_stage:sft、dpo、kto(dpo 且 pref_loss 为 orpo 或 simpo 时:orpo、simpo);pt、rm、ppo 被拒绝",
    ),
    "lf.doc_do_train": ("true: a job trains; false refused", "true:任务就是训练;false 被拒绝"),
    "lf.doc_bf16": ("true: precision bf16", "true:precision bf16"),
    "lf.doc_fp16": ("true: precision fp16", "true:precision fp16"),
    "lf.doc_cpu": ("true: device_type cpu", "true:device_type cpu"),
    "lf.doc_warmup_ratio": (
        "a ratio below 1: warmup_steps of that value, which transformers reads as a ratio of the steps",
        "小于 1 的比例:取同样的值作为 warmup_steps,transformers 把小于 1 的值当作总步数的比例",
    ),
    "lf.doc_eval_strategy": (
        "steps: every eval_steps (logging_steps when unset, as transformers does); no: eval_steps 0; epoch refused",
        "steps:每 eval_steps 步(未设置时用 logging_steps,与 transformers 相同);no:eval_steps 为 0;epoch 被拒绝",
    ),
    "lf.doc_save_strategy": ("steps: every save_steps; no: save_steps 0; epoch, best refused",
                             "steps:每 save_steps 步;no:save_steps 为 0;epoch、best 被拒绝"),
    "lf.doc_logging_strategy": ("steps: every logging_steps; others refused", "steps:每 logging_steps 步;其他被拒绝"),
    "lf.doc_resume": (
        "true, or a checkpoint inside output_dir: resume true (the last complete checkpoint of output_dir)",
        "true,或 output_dir 中的检查点:resume 为 true(从 output_dir 中最后一个完整的检查点继续)",
    ),
    "lf.doc_flash_attn": (
        "auto, disabled, sdpa, fa2: attn_implementation auto, eager, sdpa, flash_attention_2; fa3 refused",
        "auto、disabled、sdpa、fa2:attn_implementation 为 auto、eager、sdpa、flash_attention_2;fa3 被拒绝",
    ),
    "lf.doc_liger": ("true: liger_kernel on; false: off", "true:liger_kernel on;false:off"),
    "lf.doc_packing": (
        "true: packing true (ZeroBoard packs as neat_packing does: no attention across samples)",
        "true:packing 为 true(ZeroBoard 的打包与 neat_packing 相同:样本之间互不注意)",
    ),
    "lf.doc_neat_packing": ("true: packing true", "true:packing 为 true"),
    "lf.doc_no_checkpointing": (
        "true: gradient_checkpointing false (LLaMA-Factory checkpoints unless told not to)",
        "true:gradient_checkpointing 为 false(LLaMA-Factory 默认开启梯度检查点)",
    ),
    "lf.doc_swanlab": ("true: report_to swanlab", "true:report_to swanlab"),
    # the table in the docs, and convert-lf
    "lf.kind_field": ("field", "字段"),
    "lf.kind_same": ("the same field", "同名字段"),
    "lf.kind_trainer": ("to the Trainer (extra_args)", "传给 Trainer(extra_args)"),
    "lf.kind_noop": ("accepted, no effect", "接受,不起作用"),
    "lf.kind_refused": ("refused", "拒绝"),
    "lf.table_header": ("LLaMA-Factory key|here|why", "LLaMA-Factory 的键|这里|说明"),
    "lf.from": ("LLaMA-Factory: {keys}", "LLaMA-Factory:{keys}"),
    "lf.converted": (
        "converted from {path} (LLaMA-Factory {version}) by zeroboard convert-lf",
        "由 zeroboard convert-lf 从 {path}(LLaMA-Factory {version})转换而来",
    ),
    "lf.default_from": ("LLaMA-Factory's default", "LLaMA-Factory 的默认值"),
    "lf.not_used": ("not used here: {key}: {value} -- {why}", "这里不使用:{key}: {value} -- {why}"),
    "lf.read_only": ("read, nothing to set: {keys}", "已读取,无需设置:{keys}"),
    "lf.convert_help": (
        "write a LLaMA-Factory training YAML as the equivalent ZeroBoard job file (each mapped key commented)",
        "把 LLaMA-Factory 的训练 YAML 写成等价的 ZeroBoard 任务文件(每个映射的键都带注释)",
    ),
    "lf.convert_file_help": ("the LLaMA-Factory YAML file", "LLaMA-Factory 的 YAML 文件"),
    "lf.convert_out_help": ("write it here (a new file) instead of printing it", "写入这个新文件,而不是打印出来"),
    "lf.convert_exists": ("{path} exists; nothing was written (choose a new file)", "{path} 已存在;没有写入(请换一个新文件)"),
    "lf.convert_written": ("wrote {path}", "已写入 {path}"),
    "lf.convert_failed": ("{path} cannot be converted:", "{path} 无法转换:"),
}
