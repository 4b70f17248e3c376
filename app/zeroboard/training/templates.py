"""Prompt templates and tokenization with the prompt masked out of the labels.

A conversation is rendered to text; the character spans of the assistant
answers are found by rendering each prefix, and only tokens inside those spans
get labels (the rest are -100, ignored by the loss).
"""

from __future__ import annotations

from ..data.chat import render_plain
from ..data.formats import Conversation
from ..words import say

IGNORE = -100


def use_chat_template(tokenizer, template: str) -> bool:
    has = bool(getattr(tokenizer, "chat_template", None))
    if template == "chat" and not has:
        raise ValueError(say("train.no_chat_template"))
    return template == "chat" or (template == "auto" and has)


def render(conv: Conversation, tokenizer, chat: bool, add_generation_prompt: bool = False) -> str:
    if chat:
        return tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=add_generation_prompt)
    return render_plain(conv, tokenizer.eos_token or "", add_generation_prompt)


def answer_spans(conv: Conversation, tokenizer, chat: bool) -> tuple[str, list[tuple[int, int]]]:
    """The full text and the (start, end) character spans of each assistant answer."""
    text = render(conv, tokenizer, chat)
    spans = []
    for i, m in enumerate(conv):
        if m["role"] != "assistant":
            continue
        prefix = render(conv[:i], tokenizer, chat, add_generation_prompt=True)
        upto = render(conv[: i + 1], tokenizer, chat)
        if not text.startswith(prefix) or not text.startswith(upto):
            raise ValueError(say("train.template_unstable"))
        spans.append((len(prefix), len(upto)))
    return text, spans


def encode(conv: Conversation, tokenizer, chat: bool, cutoff_len: int) -> dict:
    text, spans = answer_spans(conv, tokenizer, chat)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                    truncation=True, max_length=cutoff_len)
    labels = []
    for tok_id, (start, end) in zip(enc["input_ids"], enc["offset_mapping"]):
        inside = any(s <= start and end <= e and end > start for s, e in spans)
        labels.append(tok_id if inside else IGNORE)
    return {"input_ids": list(enc["input_ids"]), "labels": labels}


def prompt_text(question: str, tokenizer, template: str = "auto") -> str:
    """The text to feed for generating an answer to one user question."""
    chat = use_chat_template(tokenizer, template)
    return render([{"role": "user", "content": question}], tokenizer, chat, add_generation_prompt=True)
