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
every other turn is masked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..data import chat as chatmod
from ..data.formats import Conversation
from ..words import say

IGNORE = -100
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


@dataclass
class Renderer:
    """Renders conversations with one chat template and one set of special tokens (picklable for map workers)."""

    template: str
    special: dict[str, str]
    named: bool  # a named template: tool descriptions go into the system message

    @classmethod
    def of(cls, tokenizer) -> Renderer:
        jinja = tokenizer.chat_template
        return cls(jinja, special_tokens(tokenizer), jinja in {n.jinja for n in chatmod.NAMED.values()})

    def render(self, conv: Conversation, gen: bool = False, tools=None) -> str:
        if self.named:
            return chatmod.render_template(chatmod.with_tools(conv, tools), self.template, self.special, gen)
        return chatmod.render_template(conv, self.template, self.special, gen, tools=tools)

    def spans(self, conv: Conversation, tools=None) -> tuple[str, list[tuple[int, int]]]:
        """The full text and the (start, end) character spans of each assistant answer."""
        text = self.render(conv, tools=tools)
        spans = []
        last = len(conv) - 1
        for i, m in enumerate(conv):
            if m["role"] != "assistant":
                continue
            prefix = self.render(conv[:i], True, tools)
            upto = text if i == last else self.render(conv[: i + 1], tools=tools)
            if not text.startswith(prefix) or not text.startswith(upto) or len(upto) < len(prefix):
                raise ValueError(say("train.template_unstable"))
            spans.append((len(prefix), len(upto)))
        return text, spans


def token_range(enc, start: int, end: int) -> tuple[int, int] | None:
    """Tokens [a, b) lying wholly inside the characters [start, end) of a ``tokenizers.Encoding``."""
    a = b = None
    for pos in range(start, end):
        t = enc.char_to_token(pos)
        if t is not None:
            a = t if enc.token_to_chars(t)[0] >= start else t + 1
            break
    for pos in range(end - 1, start - 1, -1):
        t = enc.char_to_token(pos)
        if t is not None:
            b = t + 1 if enc.token_to_chars(t)[1] <= end else t
            break
    return (a, b) if a is not None and b is not None and b > a else None


def labelled(ids: list[int], ranges: list[tuple[int, int]], cutoff: int | None = None) -> list[int]:
    """Labels for ``ids`` (cut at ``cutoff``): the tokens of each range learned, every other one masked."""
    ids = ids if cutoff is None else ids[:cutoff]
    labels = [IGNORE] * len(ids)
    for a, b in ranges:
        labels[a:b] = ids[a:b]
    return labels


def encode_texts(tokenizer, texts: list[str], spans: list[list[tuple[int, int]]]) -> list[tuple[list[int], list]]:
    """(input_ids, learned token ranges [a, b)) of each text, untruncated."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    out = []
    if backend is not None:  # one batched call into the Rust tokenizer, then the answer spans by character
        for enc, sp in zip(backend.encode_batch(texts, add_special_tokens=False), spans):
            out.append((enc.ids, [r for s, e in sp if (r := token_range(enc, s, e))]))
        return out
    for text, sp in zip(texts, spans):  # no offsets: tokenize the pieces between span edges one by one
        ids: list[int] = []
        ranges = []
        edges = sorted({0, len(text), *[x for s in sp for x in s]})
        for a, b in zip(edges, edges[1:]):
            piece = tokenizer(text[a:b], add_special_tokens=False)["input_ids"]
            if any(s <= a and b <= e for s, e in sp) and piece:
                ranges.append((len(ids), len(ids) + len(piece)))
            ids += piece
        out.append((ids, ranges))
    return out


def encode(conv: Conversation, tokenizer, cutoff_len: int, tools=None) -> dict:
    """One conversation, truncated to ``cutoff_len`` (the tokenizer carries the template: see ``apply``)."""
    text, spans = Renderer.of(tokenizer).spans(conv, tools)
    ((ids, ranges),) = encode_texts(tokenizer, [text], [spans])
    return {"input_ids": list(ids[:cutoff_len]), "labels": labelled(ids, ranges, cutoff_len)}


def use_chat_template(tokenizer, template: str) -> bool:
    has = bool(getattr(tokenizer, "chat_template", None))
    if template == "chat" and not has:
        raise ValueError(say("train.no_chat_template"))
    return template == "chat" or (template == "auto" and has)


def prompt_text(question: str, tokenizer, template: str = "auto") -> str:
    """The text to feed for generating an answer to one user question (a saved tokenizer carries its template)."""
    conv = [{"role": "user", "content": question}]
    if use_chat_template(tokenizer, template):
        return tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    return chatmod.render_plain(conv, tokenizer.eos_token or "", add_generation_prompt=True)
