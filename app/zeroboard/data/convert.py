"""One record as a chat: alpaca, sharegpt and OpenAI-style records, read through an entry's columns and tags.

Pure Python.  The same function serves the checks before launch (a few
records), the dataset preview and the trainer's tokenizing map (every
record), so what is checked is what is trained.  A chat is a list of messages
``{"role": "system" | "user" | "assistant" | "tool", "content": str}`` and
the tool descriptions, if the record has any.  Assistant messages are learned;
every other message is prompt.  A function-call turn is an assistant message
whose ``tool_calls`` hold the calls, and tools are JSON schemas, both as
transformers' chat templates read them (``data.tools``).

The records LLaMA-Factory skips are skipped here too (:class:`Skipped`, counted and the first shown, never an
error that blocks a launch): a conversation whose turns do not alternate prompt / answer (two turns of one role
in a row, a first turn that is an answer, a system message after the first), one that does not end with an
answer (an odd number of turns), an alpaca record without a response.  An empty answer is trained, as there:
the template's end of the answer is what is learned.

Defaults follow LLaMA-Factory: an entry reads only the columns it maps (the
alpaca prompt/query/response default to instruction/input/output, sharegpt's
messages to conversations) and its tags default to from/value, human/gpt,
observation/function_call/system.  A bare file path, with no entry, also reads
the usual ``system``, ``history`` and ``tools`` keys and accepts role/content
messages with the common speaker names.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..words import say
from . import preference, tools as toolfmt
from .formats import DataError, Message, Skipped
from .info import DatasetSource, resolve
from .records import head

ROLE_ALIASES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
                "bot": "assistant", "system": "system", "observation": "tool", "tool": "tool",
                "function_call": "assistant"}
SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"}
OPENAI_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
               "observation_tag": "tool", "function_tag": "function_call", "system_tag": "system"}
MEDIA_KEYS = ("images", "videos", "audios")
BARE_COLUMNS = {"system": "system", "history": "history", "tools": "tools"}  # read from a bare file path too


@dataclass
class Chat:
    messages: list[Message]
    tools: Any = None  # a list of function descriptions (JSON), or None
    extra: dict = field(default_factory=dict)


def text_of(value: Any) -> str:
    """A cell as text: missing (None, a CSV's empty cell read as NaN) is empty; numbers are written out."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def detect_format(record: dict) -> str:
    if "conversations" in record or "messages" in record:
        return "sharegpt"
    if "instruction" in record and "output" in record:
        return "alpaca"
    raise DataError(say("data.unknown_format", keys=str(sorted(record))))


def _column(src: DatasetSource, key: str, default: str | None) -> str | None:
    if key in src.columns:
        return src.columns[key]
    if src.formatting == "auto" and key in BARE_COLUMNS:
        return BARE_COLUMNS[key]
    return default


def _tools(record: dict, src: DatasetSource) -> Any:
    col = _column(src, "tools", None)
    value = record.get(col) if col else None
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise DataError(say("data.tools_not_json", column=col)) from None
    return [toolfmt.wrapped(t) for t in (value if isinstance(value, list) else [value])]


def _calls(content: Any, i: int) -> list[dict]:
    """A function-call turn's content (one ``{"name", "arguments"}`` object or a list of them, JSON text or parsed)
    as transformers' ``tool_calls``."""
    try:
        value = json.loads(content) if isinstance(content, str) else content
        value = value if isinstance(value, list) else [value]
        return [toolfmt.call(c["name"], c["arguments"]) for c in value]
    except (ValueError, TypeError, KeyError):
        raise DataError(say("data.bad_function_call", i=i)) from None


def _system(record: dict, src: DatasetSource) -> str:
    col = _column(src, "system", None)
    return text_of(record.get(col)) if col else ""


def alpaca(record: dict, src: DatasetSource, answer: str | None = None) -> Chat:
    """An alpaca record; ``answer``: the column of the answer (a ranking record's chosen), else the response's."""
    conv: list[Message] = []
    system = _system(record, src)
    if system:
        conv.append({"role": "system", "content": system})
    hist_col = _column(src, "history", None)
    history = record.get(hist_col) if hist_col else None
    if history is not None and not (isinstance(history, float) and math.isnan(history)):
        if not isinstance(history, list) or not all(isinstance(t, (list, tuple)) and len(t) == 2 for t in history):
            raise DataError(say("data.bad_history", column=hist_col))
        for q, a in history:
            conv += [{"role": "user", "content": text_of(q)}, {"role": "assistant", "content": text_of(a)}]
    parts = [text_of(record.get(_column(src, key, default))) for key, default in (("prompt", "instruction"),
                                                                                  ("query", "input"))]
    conv.append({"role": "user", "content": "\n".join(p for p in parts if p)})
    col = answer or _column(src, "response", "output")
    response = record.get(col)
    if response is None or (isinstance(response, float) and math.isnan(response)):  # LLaMA-Factory: no response
        raise Skipped(say("data.skip_no_response", column=col))
    conv.append({"role": "assistant", "content": text_of(response)})
    return Chat(conv, _tools(record, src))


def sharegpt(record: dict, src: DatasetSource, prompt_only: bool = False) -> Chat:
    """A sharegpt (or OpenAI-style) record; ``prompt_only``: the conversation before a ranking record's answers."""
    base = OPENAI_TAGS if src.formatting == "openai" else SHAREGPT_TAGS
    tags = {**base, **src.tags}
    col = _column(src, "messages", "messages" if src.formatting == "openai" else "conversations")
    turns = record.get(col)
    if turns is None and src.formatting == "auto":
        turns = record.get("messages")
    if not isinstance(turns, list):
        raise DataError(say("data.no_messages", column=col))
    roles = {tags["user_tag"]: "user", tags["assistant_tag"]: "assistant", tags["observation_tag"]: "tool",
             tags["function_tag"]: "assistant", tags["system_tag"]: "system"}
    lenient = not src.tags  # no tags given: the common speaker names and both key styles are understood
    conv: list[Message] = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            raise DataError(say("data.turn_not_object", i=i))
        who = t.get(tags["role_tag"])
        content = t.get(tags["content_tag"])
        if lenient and who is None:
            who, content = t.get("role", t.get("from")), t.get("content", t.get("value"))
        if who is None:
            raise DataError(say("data.no_role_key", i=i, key=tags["role_tag"], keys=", ".join(sorted(map(str, t)))))
        role = roles.get(who) or (ROLE_ALIASES.get(str(who).lower()) if lenient and who is not None else None)
        if role is None:  # LLaMA-Factory skips the record (an invalid role tag)
            raise Skipped(say("data.unknown_speaker_tags", who=repr(who), key=tags["role_tag"],
                                known=", ".join(sorted(k for k in roles if k))))
        if role == "system" and conv:
            raise Skipped(say("data.system_not_first", i=i))
        if who == tags["function_tag"] and role == "assistant":
            conv.append({"role": "assistant", "content": "", "tool_calls": _calls(content, i)})
        elif role == "assistant" and t.get("tool_calls"):  # OpenAI style: the calls beside the text
            conv.append({"role": "assistant", "content": text_of(content),
                         "tool_calls": _calls([c.get("function", c) for c in t["tool_calls"]], i)})
        else:
            conv.append({"role": role, "content": text_of(content)})
    alternating(conv, prompt_last=prompt_only)
    system = _system(record, src)
    if system and not (conv and conv[0]["role"] == "system"):  # a system turn of its own wins, as in LLaMA-Factory
        conv.insert(0, {"role": "system", "content": system})
    return Chat(conv, _tools(record, src))


def alternating(conv: list[Message], prompt_last: bool = False) -> None:
    """LLaMA-Factory's rule for a conversation (after a first system message): prompt turns (user, a tool's result)
    and answers (the assistant's, function calls) take turns, a prompt first, an answer last (``prompt_last``: a
    prompt last, the conversation before a ranking record's answers); else Skipped."""
    turns = conv[1:] if conv and conv[0]["role"] == "system" else conv
    for i, m in enumerate(turns):
        if (m["role"] == "assistant") != (i % 2 == 1):
            first = say("data.skip_answer_first") if i == 0 else say("data.skip_same_role", i=i, role=m["role"])
            raise Skipped(first)
    if prompt_last:
        if len(turns) % 2 != 1:
            raise Skipped(say("data.pair_prompt_turns", n=len(turns)))
        return
    if len(turns) % 2:
        raise Skipped(say("data.skip_no_answer_last", n=len(turns)))
    if not turns:
        raise Skipped(say("data.skip_empty"))


def chat_of(record: dict, src: DatasetSource, formatting: str | None = None) -> Chat:
    """The record as a chat; DataError saying what is wrong with it (the caller adds the file and the record)."""
    if not isinstance(record, dict):
        raise DataError(say("data.record_not_object"))
    if src.formatting == "auto":  # a bare file: media keys mean a multimodal dataset, which text-only SFT cannot train
        media = [k for k in MEDIA_KEYS if record.get(k) not in (None, "", [])]
        if media:
            raise DataError(say("data.record_media", keys=", ".join(media)))
    fmt = formatting or (src.formatting if src.formatting != "auto" else detect_format(record))
    if src.preference == "pairwise":  # the chosen answer's chat, the rejected answer in extra
        return preference.pair(record, src, fmt, lambda col: alpaca(record, src, col) if fmt == "alpaca"
                               else sharegpt(record, src, prompt_only=True))
    chat = alpaca(record, src) if fmt == "alpaca" else sharegpt(record, src)
    return preference.tagged(record, src, chat) if src.preference == "kto" else chat


def chats(src: DatasetSource, records: list[dict], first: int = 0, skipped: list | None = None) -> list[Chat]:
    """Every record as a chat, or a DataError naming the file, the record and what to fix; a record LLaMA-Factory
    skips is left out (with ``skipped``: its number and why, appended)."""
    fmt = None
    if src.formatting == "auto" and records:
        try:
            fmt = detect_format(records[0])
        except DataError as e:
            raise DataError(say("data.record_error", path=src.where, i=first, why=e.args[0])) from None
    out = []
    for i, r in enumerate(records):
        try:
            out.append(chat_of(r, src, fmt))
        except Skipped as e:
            if skipped is not None:
                skipped.append((first + i, e.args[0]))
        except DataError as e:
            raise DataError(say("data.record_error", path=src.where, i=first + i, why=e.args[0])) from None
    return out


def load(names: list[str], dataset_dir: str | Path, max_samples: int = 0) -> list[list[Message]]:
    """All conversations of the named small datasets, in order (the demo model's corpus)."""
    convs = []
    for name in names:
        src = resolve(name, dataset_dir)
        convs += [c.messages for c in chats(src, head(src, max_samples if max_samples > 0 else 10**9))]
    return convs
