"""A preference record as a chat: a prompt with a chosen and a rejected answer, or with one answer tagged good or bad.

Pure Python, read as LLaMA-Factory 0.9.5 reads them (its converter, its pairwise and feedback processors):

- ``ranking: true``, alpaca: the prompt from the usual columns, ``chosen`` and ``rejected`` two text columns;
  sharegpt: the conversation (its ``messages`` column) is the prompt, ending with a prompt turn, and ``chosen`` and
  ``rejected`` are one message each, spoken by the assistant tag;
- ``kto_tag``: an SFT record (the last answer is the one judged) with a true/false column: true, a good answer.

The chat returned is the prompt and the chosen (or judged) answer, so everything that reads SFT chats (the checks'
token counts, the preview) reads it unchanged; the rejected answer, or the tag, rides in ``Chat.extra``.
"""

from __future__ import annotations

from typing import Any

from ..words import say
from .formats import DataError, Skipped

REJECTED = "rejected"  # Chat.extra keys
KTO_TAG = "kto_tag"


def pair(record: dict, src, fmt: str, read_sft) -> Any:
    """A ``ranking`` record as the chat of its chosen answer, the rejected one in ``extra``. ``read_sft(column)``
    reads the record as SFT: alpaca with its answer from ``column``; sharegpt (``None``) its conversation alone."""
    chosen_col, rejected_col = src.columns.get("chosen", "chosen"), src.columns.get("rejected", "rejected")
    chosen, rejected = record.get(chosen_col), record.get(rejected_col)
    if fmt == "alpaca":
        if not (isinstance(chosen, str) and isinstance(rejected, str)):
            raise Skipped(say("data.pair_not_text", chosen=chosen_col, rejected=rejected_col))
        chat = read_sft(chosen_col)
        chat.extra[REJECTED] = {"role": "assistant", "content": rejected}
        return chat
    tags = {"role_tag": "from", "content_tag": "value", "assistant_tag": "gpt", **_base_tags(src), **src.tags}
    answers = []
    for m in (chosen, rejected):
        if not isinstance(m, dict) or m.get(tags["role_tag"], m.get("role")) not in (tags["assistant_tag"], "assistant"):
            raise Skipped(say("data.pair_not_message", chosen=chosen_col, rejected=rejected_col, tag=tags["assistant_tag"]))
        content = m.get(tags["content_tag"], m.get("content"))
        answers.append({"role": "assistant", "content": "" if content is None else str(content)})
    chat = read_sft(None)  # a prompt last (convert.alternating)
    chat.messages.append(answers[0])
    chat.extra[REJECTED] = answers[1]
    return chat


def tagged(record: dict, src, chat) -> Any:
    """A ``kto_tag`` record: the SFT chat (its last answer judged), the tag in ``extra``."""
    col = src.columns["kto_tag"]
    tag = record.get(col)
    if not isinstance(tag, bool):  # LLaMA-Factory reads it as a plain SFT record, which its KTO drops
        raise Skipped(say("data.kto_tag_not_bool", column=col, got=repr(tag)[:40]))
    chat.extra[KTO_TAG] = tag
    return chat


def _base_tags(src) -> dict:
    if src.formatting == "openai":
        return {"role_tag": "role", "content_tag": "content", "assistant_tag": "assistant"}
    return {}


def check_kind(chat, kind: str) -> None:
    """A chat read for ``kind`` has what that kind needs (a bug otherwise)."""
    need = {"pairwise": REJECTED, "kto": KTO_TAG}.get(kind)
    if need is not None and need not in chat.extra:  # pragma: no cover - a reader bug
        raise DataError(f"preference record without {need}")
