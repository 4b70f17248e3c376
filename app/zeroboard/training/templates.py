"""Prompt templates on the tokenizer, and tokenization with the prompt masked out of the labels.

``apply`` sets the job's template on the tokenizer: ``auto`` keeps the
tokenizer's own chat template (plain headers when it has none), ``chat``
requires it, a named template (chatml, llama3, ...; ``data.chat.NAMED``)
replaces it, adding the special tokens the template writes when the
tokenizer lacks them and making its end-of-answer token the end of sequence.

A conversation is rendered to text with the tokenizer's chat template; the
character spans of the assistant answers are found by rendering each prefix
(with the generation prompt), and only tokens inside those spans get labels
(the rest are -100, ignored by the loss).  Every assistant turn is learned,
every other turn is masked.  A named template's text is tokenized turn by
turn, a model's own template's whole (``data.chat.Layout``); a sample longer
than ``cutoff_len`` is cut by the job's rule (``data.tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..data import chat as chatmod, tokens
from ..data.formats import Conversation
from ..words import say

IGNORE = tokens.IGNORE
SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")


@dataclass
class Applied:
    """What the template did to the tokenizer."""

    name: str  # the template used: the job's, or for auto "chat" / "plain"
    added: list[str] = field(default_factory=list)  # special tokens added to the vocabulary
    eos: str | None = None  # the new end-of-sequence token, when the template changed it


def apply(tokenizer, template: str) -> Applied:
    """Set ``template`` on the tokenizer (its chat_template afterwards is what renders every sample)."""
    has = bool(getattr(tokenizer, "chat_template", None))
    if template == "chat" and not has:
        raise ValueError(say("train.no_chat_template"))
    if template in ("auto", "chat") and has:
        return Applied("chat")
    named = chatmod.NAMED["plain" if template in ("auto", "chat") else template]
    out = Applied("plain" if template == "auto" else template)
    vocab = tokenizer.get_vocab()
    missing = [t for t in named.tokens if t not in vocab]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
        out.added = missing
    if named.stop and tokenizer.eos_token != named.stop:
        tokenizer.eos_token = named.stop
        out.eos = named.stop
    tokenizer.chat_template = named.jinja
    return out


def special_tokens(tokenizer) -> dict[str, str]:
    return {k: getattr(tokenizer, k, None) or "" for k in SPECIAL_NAMES}


class Renderer(chatmod.Renderer):
    """``data.chat.Renderer`` made from a tokenizer (its chat template and special tokens)."""

    @classmethod
    def of(cls, tokenizer) -> Renderer:
        return cls.for_template(tokenizer.chat_template, special_tokens(tokenizer))


class _Ids:
    def __init__(self, ids):
        self.ids = ids


def encoder(tokenizer):
    """(encode_batch, offsets) for ``data.tokens.encode``: one batched call into the Rust tokenizer when there is one;
    else the pieces one by one, without offsets."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return (lambda texts: backend.encode_batch(texts, add_special_tokens=False)), True
    return (lambda texts: [_Ids(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]), False


def encode_layouts(tokenizer, layouts: list[chatmod.Layout]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """(input_ids, answer token ranges [a, b)) of each layout, untruncated."""
    batch, offsets = encoder(tokenizer)
    return tokens.encode(layouts, batch, offsets)


def encode(conv: Conversation, tokenizer, cutoff_len: int, tools=None, truncation: tokens.Rule = "proportional") -> dict:
    """One conversation, cut to ``cutoff_len`` (the tokenizer carries the template: see ``apply``)."""
    ((ids, ranges),) = encode_layouts(tokenizer, [Renderer.of(tokenizer).layout(conv, tools)])
    input_ids, labels = tokens.cut(ids, ranges, cutoff_len, truncation)
    return {"input_ids": input_ids, "labels": labels}


def use_chat_template(tokenizer, template: str) -> bool:
    has = bool(getattr(tokenizer, "chat_template", None))
    if template == "chat" and not has:
        raise ValueError(say("train.no_chat_template"))
    return template == "chat" or (template == "auto" and has)


def prompt_text(question: str, tokenizer, template: str = "auto") -> str:
    """The text to feed for generating an answer to one user question (a saved tokenizer carries its template)."""
    return chat_text([{"role": "user", "content": question}], tokenizer, template)


def chat_text(conv: Conversation, tokenizer, template: str = "auto") -> str:
    """A conversation so far, ending with the header that opens the next answer, as the model was trained to read it."""
    if use_chat_template(tokenizer, template):
        return tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    return chatmod.render_plain(conv, tokenizer.eos_token or "", add_generation_prompt=True)
