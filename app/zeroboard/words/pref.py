"""Preference tuning's and QLoRA's words: which data a stage learns from, the checks of their fields, the trainer's."""

WORDS: dict[str, tuple[str, str]] = {
    # which stage takes which data (data.info.stage_problem)
    "data.not_sft_pref": (
        "dataset {name} is preference data ({kind}: chosen and rejected answers, or answers tagged by kto_tag): set training_stage to dpo, orpo or simpo for pairs, kto for tagged answers; supervised fine-tuning (sft) needs one answer per prompt",
        "数据集 {name} 是偏好数据({kind}:选中与拒绝的回答,或用 kto_tag 标注的回答):回答对请把 training_stage 设为 dpo、orpo 或 simpo,标注的回答设为 kto;监督微调(sft)需要每个问题一个回答",
    ),
    "data.not_pairwise": (
        "dataset {name} is {kind} data, but training_stage {stage} learns from pairs of a chosen and a rejected answer: pick a dataset whose dataset_info.json entry says \"ranking\": true (columns chosen and rejected), or set training_stage to match the data",
        "数据集 {name} 是 {kind} 数据,但 training_stage {stage} 需要「选中 / 拒绝」回答对:请选择 dataset_info.json 中标有 \"ranking\": true(含 chosen 和 rejected 列)的数据集,或把 training_stage 改成与数据相符",
    ),
    "data.not_kto": (
        "dataset {name} is {kind} data without kto tags, but training_stage kto learns from answers tagged good or bad: map a true/false column as columns.kto_tag in its dataset_info.json entry, or set training_stage to match the data",
        "数据集 {name} 是 {kind} 数据,没有 kto 标签,但 training_stage kto 需要标注好坏的回答:请在 dataset_info.json 中用 columns.kto_tag 指定一个 true/false 列,或把 training_stage 改成与数据相符",
    ),
    # a preference record (data.preference)
    "data.pair_not_text": (
        "columns {chosen} and {rejected} must both hold text (an alpaca ranking record)",
        "{chosen} 列和 {rejected} 列都必须是文本(alpaca 格式的 ranking 记录)",
    ),
    "data.pair_not_message": (
        "columns {chosen} and {rejected} must both hold one message each, spoken by the assistant tag {tag} (a sharegpt ranking record)",
        "{chosen} 列和 {rejected} 列都必须各是一条由助手标签 {tag} 说出的消息(sharegpt 格式的 ranking 记录)",
    ),
    "data.pair_prompt_turns": (
        "the conversation before the chosen and rejected answers must end with a prompt (an odd number of alternating turns; got {n})",
        "选中与拒绝回答之前的对话必须以提问结束(轮次交替且为奇数;当前为 {n})",
    ),
    "data.kto_tag_not_bool": (
        "column {column} must be true or false (got {got})",
        "{column} 列必须是 true 或 false(当前为 {got})",
    ),
    "data.pref_rejected": ("rejected", "拒绝"),
    "data.pref_kto_good": ("tagged good (kto_tag true)", "标注为好(kto_tag 为 true)"),
    "data.pref_kto_bad": ("tagged bad (kto_tag false)", "标注为差(kto_tag 为 false)"),
    # checks of the fields (job.prefchecks)
    "check.stage_packing": (
        "packing joins samples into rows, and a preference stage compares whole answers: turn packing off for {stage}",
        "packing 会把样本拼成一行,而偏好训练比较的是完整的回答:{stage} 请关闭 packing",
    ),
    "check.stage_truncation": (
        "{stage} cuts a prompt and its answers together, as LLaMA-Factory does (the longer answer decides the split): set truncation to proportional",
        "{stage} 会把提问与回答一起截断(与 LLaMA-Factory 相同,由较长的回答决定如何分配):请把 truncation 设为 proportional",
    ),
    "check.pref_ftx_stage": (
        "{stage} has no separate SFT loss to weigh (ORPO's is built in; KTO has none): set pref_ftx to 0",
        "{stage} 没有单独的 SFT 损失可以加权(ORPO 自带;KTO 没有):请把 pref_ftx 设为 0",
    ),
    "check.pref_loss_stage": (
        "pref_loss chooses dpo's loss; training_stage {stage} has its own: leave pref_loss at sigmoid, or set training_stage to dpo",
        "pref_loss 选择的是 dpo 的损失;training_stage {stage} 有自己的损失:请让 pref_loss 保持 sigmoid,或把 training_stage 设为 dpo",
    ),
    "check.pref_master_split": (
        "master_weights split needs ZeroBoard's own optimizer, which the preference trainers (TRL) do not take: set master_weights to auto or fp32",
        "master_weights split 需要 ZeroBoard 自己的优化器,偏好训练器(TRL)不接受:请把 master_weights 设为 auto 或 fp32",
    ),
    "check.pref_no_trl": (
        "training_stage {stage} trains through TRL, which is not installed in this Python: pip install 'trl>=1.16,<1.17'",
        "training_stage {stage} 通过 TRL 训练,但当前 Python 没有安装它:pip install 'trl>=1.16,<1.17'",
    ),
    "check.quant_bits": (
        "must be 0 (no quantization), 4 or 8 (got {got})",
        "必须是 0(不量化)、4 或 8(当前为 {got})",
    ),
    "check.quant_full": (
        "QLoRA trains LoRA adapters on a quantized base that stays frozen: a full fine-tune cannot update 4- or 8-bit weights; set finetuning_type to lora, or quantization_bit to 0",
        "QLoRA 在冻结的量化底座上训练 LoRA 适配器:全参微调无法更新 4 位或 8 位的权重;请把 finetuning_type 设为 lora,或把 quantization_bit 设为 0",
    ),
    "check.quant_no_gpu": (
        "{bits}-bit QLoRA runs on NVIDIA GPUs here (bitsandbytes' CUDA kernels; its CPU path is not supported for ZeroBoard's multi-process runs) and this job runs on {where}: set quantization_bit to 0 to train LoRA on the full-precision model here, or run on a machine with an NVIDIA GPU",
        "{bits} 位 QLoRA 在这里需要 NVIDIA GPU(bitsandbytes 的 CUDA 内核;它的 CPU 路径不支持 ZeroBoard 的多进程运行),而本任务运行在 {where} 上:请把 quantization_bit 设为 0,在这里对全精度模型训练 LoRA,或换一台有 NVIDIA GPU 的机器",
    ),
    "check.quant_no_bnb": (
        "{bits}-bit QLoRA loads the model through bitsandbytes, which is not installed in this Python: pip install 'bitsandbytes>=0.45'",
        "{bits} 位 QLoRA 通过 bitsandbytes 加载模型,但当前 Python 没有安装它:pip install 'bitsandbytes>=0.45'",
    ),
    "check.quant_offload_params": (
        "ZeRO-3 parameter offload moves the weights to the CPU, where bitsandbytes' 4- and 8-bit kernels do not run: turn offload off for QLoRA, or use ZeRO-2 with offload (only the optimizer moves)",
        "ZeRO-3 的参数 offload 会把权重移到 CPU,而 bitsandbytes 的 4 位和 8 位内核不能在 CPU 上运行:QLoRA 请关闭 offload,或使用 ZeRO-2 加 offload(只移动优化器)",
    ),
    "bound.pref_beta": ("{got} is outside (0, {top}]: a beta above {top} is no preference tuning anyone runs (0.1 is usual)", "{got} 不在 (0, {top}] 之内:没有人会用大于 {top} 的 beta(常用 0.1)"),
    "bound.pref_weight": ("{got} is above {top}: a weight this large drowns the preference loss (0 to 1 is usual)", "{got} 大于 {top}:这么大的权重会淹没偏好损失(常用 0 到 1)"),
    # the Train page's rewards chart and the Runs comparison
    "rewards": ("Rewards (preference)", "奖励(偏好训练)"),
    "axis_rewards_series": ("metric", "指标"),
    "series.chosen": ("chosen", "选中"),
    "series.rejected": ("rejected", "拒绝"),
    "series.margins": ("margin", "差值"),
    "series.accuracies": ("accuracy", "准确率"),
    "series.kl": ("KL", "KL"),
    "runs.margins": ("Reward margin (preference)", "奖励差值(偏好训练)"),
    "runs.accuracies": ("Reward accuracy (preference)", "奖励准确率(偏好训练)"),
    "runs.rewards_title": ("Preference runs at their last log: rewards of the chosen and the rejected answers, their margin, how often the chosen wins", "偏好训练在最后一次记录时:选中与拒绝回答的奖励、两者之差、选中回答胜出的比例"),
    # the plan's notes (planner.advice.note_keys)
    "plan.note.pairs": ("a preference pair forwards its chosen and its rejected answer in one batch: twice the activations of a sample at this micro-batch", "偏好训练的回答对在同一批中前向选中和拒绝两个回答:在这个 micro-batch 下是一条样本的两倍激活"),
    "plan.note.reference": ("the reference model is a frozen copy of the weights, placed as the model (16 bit under DeepSpeed, a partition of it under ZeRO-3): counted in the weights", "参考模型是一份冻结的权重拷贝,放置方式与模型相同(DeepSpeed 下为 16 位,ZeRO-3 下只保留分片):已计入权重"),
    "plan.note.qlora": ("QLoRA: every linear layer of the frozen base counted packed (4 bit: half a byte a weight and its block constants), embeddings, norms and the head at 16 bit", "QLoRA:冻结底座的每个线性层按打包后计算(4 位:每个权重半个字节加分块常数),词嵌入、归一化层和输出层按 16 位计算"),
    # the trainer and the outputs
    "train.ref_none": ("{stage}: no reference model (the loss needs none)", "{stage}:没有参考模型(损失不需要)"),
    "train.ref_base": ("{stage}: the reference model is the base with the LoRA adapters off (no second copy)", "{stage}:参考模型是关闭 LoRA 适配器的底座模型(没有第二份拷贝)"),
    "train.ref_held": ("reference model on rank 0 holds {here} of {total} weights", "参考模型在 rank 0 上持有 {total} 个权重中的 {here} 个"),
    "train.ref_copy": ("{stage}: the reference model is a frozen copy of the model, placed as the model is (under ZeRO-3 each rank holds its shard)", "{stage}:参考模型是冻结的模型拷贝,放置方式与模型相同(ZeRO-3 下每个进程只持有自己的分片)"),
    "out.pref_stage": (", preference tuning ({stage})", ",偏好训练({stage})"),
    "out.qlora": (", QLoRA on a {bits}-bit base", ",在 {bits} 位底座上的 QLoRA"),
    "outputs.qlora_gap": (
        "this adapter was trained on a {bits}-bit quantized base (QLoRA); merged into the full-precision base it meets weights slightly different from those it was trained against, so the merged model's answers can differ a little from the adapter's on the quantized base",
        "该适配器是在 {bits} 位量化的底座上训练的(QLoRA);合并到全精度底座后,它面对的权重与训练时略有不同,因此合并后模型的回答可能与量化底座加适配器时略有差别",
    ),
}
