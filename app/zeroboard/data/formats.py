"""Reading training data: alpaca and sharegpt records from JSON or JSONL files.

Pure Python (no transformers): the web server uses it for validation and the
dataset preview, the trainer for training.  Every record becomes a list of
chat messages ``{"role": "system"|"user"|"assistant", "content": str}``.

A dataset is either a path to a ``.json``/``.jsonl`` file or a name listed in
``dataset_dir/dataset_info.json`` (LLaMA-Factory's layout)::

    {"identity": {"file_name": "identity.json", "formatting": "alpaca"}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import workspace
from ..words import say

Message = dict[str, str]
Conversation = list[Message]

ROLE_ALIASES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                "model": "assistant", "bot": "assistant", "system": "system"}


class DataError(ValueError):
    """A dataset cannot be used; the message says which and how to fix it."""


@dataclass
class DatasetSource:
    name: str
    path: Path
    formatting: str  # "alpaca", "sharegpt" or "auto"
    columns: dict


def _confined(path: Path) -> Path:
    """A data file may only be read inside the workspace, a folder allowed to it, or the Hugging Face cache."""
    ws = workspace.current()
    if not ws.readable(path, cache_ok=True):
        raise DataError(say("check.read_outside", path=str(path), roots=ws.describe()))
    return path


def resolve(name: str, dataset_dir: str | Path) -> DatasetSource:
    p = Path(name)
    if p.suffix in (".json", ".jsonl"):
        if not p.is_absolute() and not p.exists():
            p = Path(dataset_dir) / p
        if not p.is_file():
            raise DataError(say("data.file_missing", name=name, dir=str(dataset_dir)))
        return DatasetSource(p.stem, _confined(p), "auto", {})
    info_path = _confined(Path(dataset_dir)) / "dataset_info.json"
    if not info_path.is_file():
        raise DataError(say("data.no_info", name=name, info=str(info_path)))
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(say("data.info_not_json", path=str(info_path), why=str(e))) from None
    if name not in info:
        known = ", ".join(sorted(info)) or "none"
        raise DataError(say("data.not_in_info", name=name, info=str(info_path), known=known))
    entry = info[name]
    file_name = entry.get("file_name")
    if not file_name:
        raise DataError(say("data.no_file_name", info=str(info_path), name=name))
    path = Path(dataset_dir) / file_name
    if not path.is_file():
        raise DataError(say("data.points_nowhere", name=name, path=str(path)))
    _confined(path)  # an entry such as ../../etc/passwd is refused, links followed
    return DatasetSource(name, path, entry.get("formatting", "auto"), entry.get("columns", {}))


def read_records(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(say("data.not_utf8", path=str(path))) from None
    except OSError as e:
        raise DataError(say("data.cannot_read", path=str(path), why=e.strerror or str(e))) from None
    if path.suffix == ".jsonl":
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as e:
                    raise DataError(say("data.line_not_json", path=str(path), line=lineno, why=str(e))) from None
    else:
        try:
            records = json.loads(text)
        except ValueError as e:
            raise DataError(say("data.not_json", path=str(path), why=str(e))) from None
        if not isinstance(records, list):
            raise DataError(say("data.not_list", path=str(path)))
    if not records:
        raise DataError(say("data.empty", path=str(path)))
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise DataError(say("data.not_object", path=str(path), i=bad))
    return records


def detect_format(record: dict) -> str:
    if "conversations" in record or "messages" in record:
        return "sharegpt"
    if "instruction" in record and "output" in record:
        return "alpaca"
    raise DataError(say("data.unknown_format", keys=str(sorted(record))))


def _alpaca(r: dict, cols: dict) -> Conversation:
    get = lambda key: str(r.get(cols.get(key, key)) or "").strip()  # noqa: E731
    conv: Conversation = []
    if get("system"):
        conv.append({"role": "system", "content": get("system")})
    for turn in r.get(cols.get("history", "history")) or []:
        conv += [{"role": "user", "content": str(turn[0])}, {"role": "assistant", "content": str(turn[1])}]
    prompt = get("instruction") + ("\n" + get("input") if get("input") else "")
    conv += [{"role": "user", "content": prompt}, {"role": "assistant", "content": get("output")}]
    return conv


def _sharegpt(r: dict, cols: dict) -> Conversation:
    turns = r.get(cols.get("messages", "conversations")) or r.get("messages") or []
    conv: Conversation = []
    if r.get("system"):
        conv.append({"role": "system", "content": str(r["system"])})
    for t in turns:
        role = ROLE_ALIASES.get(str(t.get("from", t.get("role", ""))).lower())
        if role is None:
            raise DataError(say("data.unknown_speaker", who=repr(t.get("from", t.get("role")))))
        conv.append({"role": role, "content": str(t.get("value", t.get("content", "")))})
    return conv


def to_conversations(src: DatasetSource, records: list[dict]) -> list[Conversation]:
    fmt = src.formatting if src.formatting != "auto" else detect_format(records[0])
    convert = {"alpaca": _alpaca, "sharegpt": _sharegpt}.get(fmt)
    if convert is None:
        raise DataError(say("data.bad_formatting", name=src.name, fmt=repr(fmt)))
    out = []
    for i, r in enumerate(records):
        try:
            conv = convert(r, src.columns)
        except DataError as e:
            raise DataError(say("data.record_error", path=str(src.path), i=i, why=e.args[0])) from None
        if not any(m["role"] == "assistant" and m["content"] for m in conv):
            raise DataError(say("data.no_answer", path=str(src.path), i=i))
        out.append(conv)
    return out


def load(names: list[str], dataset_dir: str | Path, max_samples: int = 0) -> list[Conversation]:
    """All conversations of the named datasets, in order."""
    convs: list[Conversation] = []
    for name in names:
        src = resolve(name, dataset_dir)
        records = read_records(src.path)
        if max_samples > 0:
            records = records[:max_samples]
        convs += to_conversations(src, records)
    return convs
