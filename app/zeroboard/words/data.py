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
    "data.unknown_speaker": (
        "unknown speaker {who} (use human/gpt or user/assistant)",
        "未知的说话人 {who}(请用 human/gpt 或 user/assistant)",
    ),
    "data.bad_formatting": (
        "{name}: formatting {fmt} is not supported (use alpaca or sharegpt)",
        "{name}:不支持 formatting {fmt}(请用 alpaca 或 sharegpt)",
    ),
    "data.record_error": ("{path} record {i}: {why}", "{path} 第 {i} 条记录:{why}"),
    "data.no_answer": ("{path} record {i} has no answer to learn from", "{path} 第 {i} 条记录没有可学习的回答"),
}
