"""The data's words: why a dataset cannot be read or used, naming the file and the fix."""

WORDS: dict[str, tuple[str, str]] = {
    "data.file_missing": (
        "file {name} not found (looked in the current folder and in {dir})",
        "找不到文件 {name}(在当前目录和 {dir} 中找过)",
    ),
    "data.no_info": (
        "{name} is not a data file path and {info} does not exist; give a file path or a dataset_dir with dataset_info.json",
        "{name} 不是数据文件路径,且 {info} 不存在;请给出文件路径,或含有 dataset_info.json 的 dataset_dir",
    ),
    "data.remote_fetch": (
        "{file} of the hub dataset repository {repo} is not in the hub cache and could not be fetched ({why}); online "
        "it is fetched at the first use; offline, download the repository (huggingface-cli download --repo-type dataset "
        "{repo} --local-dir DIR) and set dataset_dir to DIR",
        "hub 数据集仓库 {repo} 的 {file} 不在 hub 缓存中,也无法下载({why});联网时首次使用会自动下载;离线时请先下载该仓库"
        "(huggingface-cli download --repo-type dataset {repo} --local-dir DIR),再把 dataset_dir 设为 DIR",
    ),
    "data.remote_name": (
        "{value}: REMOTE: is followed by a dataset repository of the hub, owner/name (REMOTE:llamafactory/demo_data)",
        "{value}:REMOTE: 后面应是 hub 上的数据集仓库 owner/name(如 REMOTE:llamafactory/demo_data)",
    ),
    "data.info_not_json": ("{path} is not valid JSON: {why}", "{path} 不是有效的 JSON:{why}"),
    "data.not_in_info": ("{name} is not in {info} (known: {known})", "{info} 中没有 {name}(已有:{known})"),
    "data.no_file_name": ("{info}: entry {name} has no file_name", "{info}:条目 {name} 没有 file_name"),
    "data.points_nowhere": ("{name} points to {path}, which does not exist", "{name} 指向 {path},但它不存在"),
    "data.not_utf8": ("{path} is not UTF-8 text", "{path} 不是 UTF-8 文本"),
    "data.cannot_read": ("cannot read {path}: {why}", "无法读取 {path}:{why}"),
    "data.line_not_json": ("{path} line {line} is not valid JSON: {why}", "{path} 第 {line} 行不是有效的 JSON:{why}"),
    "data.not_json": ("{path} is not valid JSON: {why}", "{path} 不是有效的 JSON:{why}"),
    "data.not_list": ("{path} must hold a JSON list of records", "{path} 必须是记录组成的 JSON 列表"),
    "data.empty": ("{path} holds no records", "{path} 中没有记录"),
    "data.not_object": ("{path} record {i} is not an object", "{path} 的第 {i} 条记录不是对象"),
    "data.unknown_format": (
        "records need instruction/output (alpaca) or conversations/messages (sharegpt); found keys {keys}",
        "记录需要 instruction/output(alpaca)或 conversations/messages(sharegpt);实际的键为 {keys}",
    ),
    "data.bad_formatting": (
        "{name}: formatting {fmt} is not supported (use alpaca, sharegpt or openai)",
        "{name}:不支持 formatting {fmt}(请用 alpaca、sharegpt 或 openai)",
    ),
    "data.record_error": ("{path} record {i}: {why}", "{path} 第 {i} 条记录:{why}"),
    "data.skip_no_response": (
        "no response (the column {column} is missing or null): skipped, as LLaMA-Factory skips it (map the column "
        "with columns.response if it has another name)",
        "没有回答(列 {column} 缺失或为 null):跳过,与 LLaMA-Factory 相同(若列名不同,请用 columns.response 指定)",
    ),
    "data.skip_answer_first": (
        "the first turn is an answer, not a prompt: skipped, as LLaMA-Factory skips it",
        "第一轮是回答而不是提问:跳过,与 LLaMA-Factory 相同",
    ),
    "data.skip_same_role": (
        "turn {i} ({role}) follows a turn of the same kind (prompt and answer must take turns): skipped, as "
        "LLaMA-Factory skips it",
        "第 {i} 轮({role})与上一轮是同一类(提问和回答必须交替):跳过,与 LLaMA-Factory 相同",
    ),
    "data.skip_no_answer_last": (
        "{n} turns, the last one not an answer: skipped, as LLaMA-Factory skips it",
        "共 {n} 轮,最后一轮不是回答:跳过,与 LLaMA-Factory 相同",
    ),
    "data.skip_empty": ("no turns: skipped, as LLaMA-Factory skips it", "没有任何轮次:跳过,与 LLaMA-Factory 相同"),
    "data.skipped_records": (
        "{name}: {n} of {total} records are skipped, as LLaMA-Factory skips them; the first: {first}",
        "{name}:{total} 条记录中有 {n} 条被跳过(与 LLaMA-Factory 相同);第一条:{first}",
    ),
    "data.all_skipped_first": (
        "no record could be used ({n} skipped, as LLaMA-Factory skips them); the first: {first}",
        "没有可用的记录(跳过 {n} 条,与 LLaMA-Factory 相同);第一条:{first}",
    ),
    "data.skipped_shown": (
        "{n} of these records skipped, as LLaMA-Factory skips them; the first: record {i}: {why}",
        "这些记录中有 {n} 条被跳过(与 LLaMA-Factory 相同);第一条:第 {i} 条记录:{why}",
    ),
    "data.record_not_object": ("the record is not an object", "这条记录不是对象"),
    "data.folder_empty": ("{name} points to the folder {path}, which holds no data file", "{name} 指向目录 {path},但其中没有数据文件"),
    "data.file_type": (
        "{path}: not a data file this tool reads (use {types})",
        "{path}:不是可读取的数据文件(请用 {types})",
    ),
    "data.mixed_types": (
        "{name}: the folder {path} mixes kinds of data files; keep one kind per dataset",
        "{name}:目录 {path} 中混有不同类型的数据文件;每个数据集只用一种",
    ),
    "data.info_not_mapping": ("{path} must map dataset names to their descriptions", "{path} 必须是数据集名到其描述的映射"),
    "data.entry_not_mapping": ("{info}: entry {name} must be an object", "{info}:条目 {name} 必须是对象"),
    "data.entry_field": (
        "{info}: entry {name} has an unusable {field} (columns and tags map names to names; num_samples is a whole number)",
        "{info}:条目 {name} 的 {field} 无法使用(columns 和 tags 是名称到名称的映射;num_samples 是正整数)",
    ),
    "data.tools_not_json": ("the tools column {column} is not JSON", "tools 列 {column} 不是 JSON"),
    "data.bad_function_call": (
        'message {i} is a function call but not JSON of {{"name": ..., "arguments": ...}} (or a list of them)',
        '第 {i} 条消息是函数调用,但不是 {{"name": ..., "arguments": ...}}(或其列表)形式的 JSON',
    ),
    "data.bad_history": (
        "the history column {column} must be a list of [prompt, response] pairs",
        "history 列 {column} 必须是 [提问, 回答] 对组成的列表",
    ),
    "data.no_messages": (
        "no list of messages in the column {column} (map it with columns.messages)",
        "列 {column} 中没有消息列表(请用 columns.messages 指定)",
    ),
    "data.turn_not_object": ("message {i} is not an object", "第 {i} 条消息不是对象"),
    "data.unknown_speaker_tags": (
        "unknown speaker {who} in the key {key} (known: {known}; set the tags of the entry to match the data)",
        "键 {key} 中的说话人 {who} 未知(已知:{known};请让条目的 tags 与数据一致)",
    ),
    "data.no_role_key": (
        "message {i} has no key {key} (its keys: {keys}; set role_tag and content_tag in the entry's tags)",
        "第 {i} 条消息没有键 {key}(它的键:{keys};请在条目的 tags 中设置 role_tag 和 content_tag)",
    ),
    "data.system_not_first": (
        "message {i} is a system message, and only the first may be one: skipped, as LLaMA-Factory skips it",
        "第 {i} 条消息是 system 消息,而只有第一条可以是:跳过,与 LLaMA-Factory 相同",
    ),
    "data.not_readable": ("{path} cannot be read as {kind}: {why}", "{path} 无法按 {kind} 读取:{why}"),
    "data.ms_hub_missing": (
        "{name}: {hub} is on ModelScope, which needs the modelscope package (pip install modelscope), or use hf_hub_url",
        "{name}:{hub} 在 ModelScope 上,需要 modelscope 包(pip install modelscope),或改用 hf_hub_url",
    ),
    "data.load_failed": (
        "{name}: the datasets library could not load {where}: {why}",
        "{name}:datasets 库无法加载 {where}:{why}",
    ),
    "data.template_failed": ("the template cannot render this record: {why}", "模板无法渲染这条记录:{why}"),
    "data.all_skipped": (
        "no record could be used ({n} skipped); the first: {path} record {i}: {why}",
        "没有可用的记录(跳过 {n} 条);第一条:{path} 第 {i} 条记录:{why}",
    ),
    "data.val_too_big": (
        "val_size {val} leaves no training sample out of {n}",
        "val_size {val} 使 {n} 条样本中没有剩下训练样本",
    ),
    "data.unknown_keys": (
        "{name}: not used here: {keys} (supervised fine-tuning reads file_name, the hub names, formatting, columns, tags, subset, split, folder, num_samples)",
        "{name}:这里不使用:{keys}(监督微调读取 file_name、hub 名称、formatting、columns、tags、subset、split、folder、num_samples)",
    ),
    "data.hub_note": (
        "{name}: {where} is loaded by the datasets library at launch, from its cache or, online, from the hub",
        "{name}:{where} 将在启动时由 datasets 库加载,来自其缓存或(联网时)hub",
    ),
    "data.both_eval": (
        "choose one: eval_dataset or val_size",
        "请二选一:eval_dataset 或 val_size",
    ),
    "data.val_size_range": (
        "must be 0 (none), a fraction below 1, or a whole number of samples; got {got}",
        "必须是 0(不留)、小于 1 的比例或整数条样本;实际为 {got}",
    ),
    "data.not_sft": (
        "dataset {name} in {info} maps {keys}: ZeroBoard trains text and images (images with a Qwen2-VL, Qwen2.5-VL or "
        "Qwen3-VL model), not video or audio, which would be trained as placeholder text; remove those keys or pick "
        "another dataset",
        "{info} 中的数据集 {name} 映射了 {keys}:ZeroBoard 训练文本和图像(图像需 Qwen2-VL、Qwen2.5-VL 或 Qwen3-VL 模型),"
        "不训练视频和音频(它们会被当作占位文本训练);请去掉这些键,或换一个数据集",
    ),
    "data.images_need_vlm": (
        "dataset {name} has images (columns.images), which {model} cannot see: it is a text-only model (model_type "
        "{kind}); pick a vision-language model (model_type {known}) or a dataset without images",
        "数据集 {name} 含有图像(columns.images),而 {model} 看不到图像:它是纯文本模型(model_type {kind});"
        "请选择视觉语言模型(model_type {known}),或换一个不含图像的数据集",
    ),
    "data.images_not_sft": (
        "dataset {name} has images: the {stage} stage trains on text only here; train images with training_stage sft, "
        "or pick a dataset without images",
        "数据集 {name} 含有图像:这里的 {stage} 阶段只训练文本;图像请用 training_stage sft 训练,或换一个不含图像的数据集",
    ),
    "data.images_packing": (
        "dataset {name} has images, which packing cannot join into shared rows here; set packing to false",
        "数据集 {name} 含有图像,这里打包(packing)无法把它们拼进共享的行;请把 packing 设为 false",
    ),
    "data.images_not_paths": (
        "column {column} must hold an image's path or a list of paths (relative to dataset_dir, or absolute)",
        "列 {column} 必须是一个图像路径或路径列表(相对 dataset_dir,或绝对路径)",
    ),
    "data.image_tags_mismatch": (
        "has {tags} <image> tag(s) in its messages and {images} image(s): each image needs its <image> tag where it "
        "belongs in the text (LLaMA-Factory stops there; skipped here)",
        "消息中有 {tags} 个 <image> 标记,却有 {images} 张图像:每张图像都需要在文本中相应位置有一个 <image> 标记"
        "(LLaMA-Factory 在此停止;这里跳过该记录)",
    ),
    "data.image_cut": (
        "cutoff_len {cutoff} cuts into an image's tokens, which the model must see whole; skipped (raise cutoff_len, "
        "or lower image_max_pixels so that images take fewer tokens)",
        "cutoff_len {cutoff} 截断了图像的 token,而模型必须看到完整的图像;已跳过(请增大 cutoff_len,或减小 "
        "image_max_pixels 让图像占用更少的 token)",
    ),
    "data.image_changed": (
        "the pictures of this batch ({files}) take another number of tokens than when the data was tokenized: a "
        "file was replaced; set overwrite_cache to tokenize the data again",
        "这一批的图片({files})所需的 token 数与数据分词时不同:有文件被替换了;请设置 overwrite_cache 重新分词",
    ),
    "data.image_unreadable": (
        "image {path} cannot be read: {why}; fix the path in the record (relative to dataset_dir) or the file",
        "无法读取图像 {path}:{why};请修正记录中的路径(相对 dataset_dir)或该文件",
    ),
    "data.record_media": (
        "has {keys}: a multimodal record, which a text-only supervised fine-tune cannot learn as meant; remove the media "
        "or pick a text dataset",
        "含有 {keys}:这是多模态记录,纯文本的监督微调无法按原意学习;请去掉媒体,或换一个纯文本数据集",
    ),
    # records read within the job's limits (data.records)
    "data.record_too_big": (
        "{path} record {i}{at} is larger than max_record_bytes ({limit}); it was not read further: split it, or raise "
        "max_record_bytes",
        "{path} 第 {i} 条记录{at}超过了 max_record_bytes({limit});没有继续读取:请拆分它,或调大 max_record_bytes",
    ),
    "data.cell_too_big": (
        "{path} record {i} (line {line}) has a cell of {size}, larger than max_cell_bytes ({limit}): shorten it, or "
        "raise max_cell_bytes",
        "{path} 第 {i} 条记录(第 {line} 行)有一个 {size} 的单元格,超过了 max_cell_bytes({limit}):请缩短它,或调大 max_cell_bytes",
    ),
    "data.skipped_cell": (
        "record {i} has a cell larger than max_cell_bytes ({limit}): skipped",
        "第 {i} 条记录有单元格超过了 max_cell_bytes({limit}):已跳过",
    ),
    "data.skipped_record": (
        "record {i} is larger than max_record_bytes ({limit}): skipped",
        "第 {i} 条记录超过了 max_record_bytes({limit}):已跳过",
    ),
    "data.at_line": (" (line {line})", "(第 {line} 行)"),
    "data.special_file": ("{name} points to {path}: {why}", "{name} 指向 {path}:{why}"),
}
