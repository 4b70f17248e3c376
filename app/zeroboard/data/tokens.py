"""Rendered conversations as token ids with labels, and the two ways of cutting a sample at ``cutoff_len``.

Pure Python: the tokenizer comes in as a function that encodes a batch of
texts (``tokenizers``' ``encode_batch``, or a transformers tokenizer's
backend), so the trainer and the checks before launch count the same tokens.

A layout with cuts (a named template) is tokenized piece by piece, each piece
on its own (the turns, as LLaMA-Factory tokenizes them: the same ids as its
templates give); one without is tokenized whole and the answers found by
character offsets.

Cutting: a sample is a row of (prompt, answer) pairs.  ``proportional``
(the default, LLaMA-Factory's rule) walks the pairs in order with the tokens
left; a pair that does not fit gives its answer
``int(left * answer / (prompt + answer))`` tokens when both are long (the
whole answer when it takes less than half of what is left, everything past
the prompt when the prompt takes less than half), and the prompt the rest;
each part keeps its start.  ``end`` keeps the first ``cutoff_len`` tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from .chat import Layout

IGNORE = -100
Rule = Literal["proportional", "end"]
Span = tuple[int, int]


def token_range(enc, start: int, end: int) -> Span | None:
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


def pieces(layout: Layout) -> list[tuple[int, int]]:
    """The character ranges tokenized apart: between every cut and answer edge."""
    edges = {0, len(layout.text), *(layout.cuts or ()), *(x for s in layout.answers for x in s)}
    edges = sorted(e for e in edges if 0 <= e <= len(layout.text))
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def encode(layouts: list[Layout], encode_batch: Callable[[list[str]], list], offsets: bool = True
           ) -> list[tuple[list[int], list[Span]]]:
    """(ids, answer token ranges) of each layout.  ``encode_batch`` gives objects with ``ids`` (and character offsets,
    unless ``offsets`` is False: then every layout is tokenized at its answer edges)."""
    whole = [i for i, lay in enumerate(layouts) if lay.cuts is None and offsets]
    out: list = [None] * len(layouts)
    for i, enc in zip(whole, encode_batch([layouts[i].text for i in whole]) if whole else []):
        out[i] = (list(enc.ids), [r for s, e in layouts[i].answers if (r := token_range(enc, s, e))])
    apart = [i for i in range(len(layouts)) if out[i] is None]
    split = {i: pieces(layouts[i]) for i in apart}
    texts = [layouts[i].text[a:b] for i in apart for a, b in split[i]]
    encoded = iter(encode_batch(texts) if texts else [])
    for i in apart:
        ids: list[int] = []
        starts = {}
        for a, _ in split[i]:
            starts[a] = len(ids)
            ids += next(encoded).ids
        starts[len(layouts[i].text)] = len(ids)
        out[i] = (ids, [(starts[s], starts[e]) for s, e in layouts[i].answers if starts[e] > starts[s]])
    return out


def pairs(n: int, answers: list[Span]) -> list[tuple[Span, Span]]:
    """The (prompt, answer) token ranges of a sample of ``n`` tokens; text after the last answer is a prompt alone."""
    out, at = [], 0
    for a, b in answers:
        out.append(((at, a), (a, b)))
        at = b
    if at < n:
        out.append(((at, n), (n, n)))
    return out


def lf_lengths(source: int, target: int, left: int) -> tuple[int, int]:
    """How many prompt and answer tokens of one pair LLaMA-Factory keeps with ``left`` tokens to go."""
    if target * 2 < left:
        most = left
    elif source * 2 < left:
        most = left - source
    else:
        most = int(left * (target / (source + target)))
    kept = min(most, target)
    return min(max(left - kept, 0), source), kept


def kept(n: int, answers: list[Span], cutoff: int, rule: Rule = "proportional") -> list[tuple[int, int, bool]]:
    """The token ranges a sample keeps, in order, each marked learned (an answer) or not."""
    out = []
    if rule == "end":
        for (s0, s1), (t0, t1) in pairs(n, answers):
            out += [(s0, min(s1, cutoff), False), (t0, min(t1, cutoff), True)]
        return [(a, b, learn) for a, b, learn in out if b > a]
    total = 0
    for (s0, s1), (t0, t1) in pairs(n, answers):
        if total >= cutoff:
            break
        s, t = lf_lengths(s1 - s0, t1 - t0, cutoff - total)
        out += [(s0, s0 + s, False), (t0, t0 + t, True)]
        total += s + t
    return [(a, b, learn) for a, b, learn in out if b > a]


def cut(ids: list[int], answers: list[Span], cutoff: int, rule: Rule = "proportional") -> tuple[list[int], list[int]]:
    """(input_ids, labels) of a sample cut to ``cutoff`` tokens: answers learned, everything else masked."""
    input_ids: list[int] = []
    labels: list[int] = []
    for a, b, learn in kept(len(ids), answers, cutoff, rule):
        input_ids += ids[a:b]
        labels += ids[a:b] if learn else [IGNORE] * (b - a)
    return input_ids, labels
