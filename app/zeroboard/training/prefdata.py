"""Preference data as rows: a prompt with a chosen and a rejected answer, or with one answer and its tag.

The map function of :mod:`.dataprep` for a preference stage, tokenizing as LLaMA-Factory 0.9.5's pairwise and
feedback processors do (``benchmarks/lf_templates.py`` checks the ids): the prompt is everything before the last
answer (earlier answers included, learned by neither), the answer is the last one; the template renders each
whole conversation and the answers' tokens are found as for SFT (``data.tokens``).  A pair is cut as one: the
prompt and the longer of its two answers share ``cutoff_len`` by LLaMA-Factory's rule (``tokens.lf_lengths``), both
answers cut to the same length.  KTO's rows carry the tag (``label``) and, for the KL term, the answer of the record
before in the same batch of 1,000 (the first takes the last: LLaMA-Factory's +1 offset), cut on its own; the KL
sequence is this row's prompt followed by it.

The rows are TRL's own columns (``prompt_ids``, ``chosen_ids``, ``rejected_ids``; ``completion_ids``, ``label``,
``KL_completion_ids``), beside the statistics every row keeps (``length``, ``full_length``, ``prompt_length``,
``learned``, ``source``, ``record``, ``problem``; see :mod:`.dataprep`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .. import words
from ..data import convert, preference, records as datarecords, tokens
from ..data.formats import DataError
from ..words import say
from . import templates

STATS = ("length", "full_length", "prompt_length", "learned", "source", "record", "problem")
COLUMNS = {"pairwise": ("prompt_ids", "chosen_ids", "rejected_ids"),
           "kto": ("prompt_ids", "completion_ids", "label", "KL_completion_ids")}


def kind_of(stage: str) -> str:
    """The rows a training stage learns from: ``pairwise``, ``kto`` or ``""`` (SFT's)."""
    return "kto" if stage == "kto" else "" if stage == "sft" else "pairwise"


def split_last(ids: list[int], answers: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """(prompt, answer): the tokens before the last answer and the last answer's (LLaMA-Factory's encode_oneturn)."""
    if not answers:
        return ids, []
    a, b = answers[-1]
    return ids[:a], ids[a:b]


def cut(prompt: list[int], answers: list[list[int]], cutoff: int) -> tuple[list[int], list[list[int]]]:
    """The prompt and its answers cut together: the longest answer decides the split (LLaMA-Factory's infer_seqlen)."""
    source, target = tokens.lf_lengths(len(prompt), max(len(a) for a in answers), cutoff)
    return prompt[:source], [a[:target] for a in answers]


@dataclass
class PreferenceBatch:
    """Records -> chats (the chosen answer's, the other answer in ``extra``) -> rows of a pair or a tagged answer
    (picklable, for the map's workers: ``dataprep.TokenizeBatch``'s fields, and the kind of row)."""

    src: Any  # data.info.DatasetSource
    source: int
    formatting: str | None
    tokenizer: Any
    renderer: templates.Renderer
    cutoff: int
    truncation: tokens.Rule = "proportional"  # (a pair is always cut by LLaMA-Factory's rule: the checks say so)
    sizes: datarecords.Sizes = datarecords.DEFAULT
    kind: str = "pairwise"

    def __call__(self, batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        keys = list(batch)
        chats, problems = {}, {}
        for j, i in enumerate(indices):
            record = {k: batch[k][j] for k in keys}
            try:
                too_big = datarecords.size_problem(record, self.src.kind, self.sizes, i)
                if too_big is not None:
                    raise DataError(too_big)
                chats[i] = convert.chat_of(record, self.src, self.formatting)
                preference.check_kind(chats[i], self.kind)
            except Exception as e:  # a record that cannot be used: skipped, counted, its reason kept
                msg = e.args[0] if isinstance(e, DataError) else say("data.template_failed", why=f"{type(e).__name__}: {e}")
                problems[i] = json.dumps(words.to_json(msg), ensure_ascii=False)
        where = [i for i in indices if i in chats]
        layouts = []
        for n, i in enumerate(where):
            c = chats[i]
            layouts.append(self.renderer.layout(c.messages, c.tools))
            other = c.extra[preference.REJECTED] if self.kind == "pairwise" else _kl_answer(chats, where, indices, n)
            layouts.append(self.renderer.layout(c.messages[:-1] + [other], c.tools))
        encoded = templates.encode_layouts(self.tokenizer, layouts)
        out: dict[str, list] = {k: [] for k in COLUMNS[self.kind] + STATS}
        done = {i: (encoded[2 * n], encoded[2 * n + 1]) for n, i in enumerate(where)}
        for i in indices:
            first, second = done.get(i, (([], []), ([], [])))
            prompt, answer = split_last(*first)
            other_prompt, other = split_last(*second)
            if self.kind == "pairwise":
                kept, (chosen, rejected) = cut(prompt, [answer, other], self.cutoff)
                out["chosen_ids"].append(chosen)
                out["rejected_ids"].append(rejected)
                full, learned = len(prompt) + max(len(answer), len(other)), min(len(chosen), len(rejected))
                length = len(kept) + max(len(chosen), len(rejected))
            else:
                kept, (completion,) = cut(prompt, [answer], self.cutoff)
                _, (kl,) = cut(other_prompt, [other], self.cutoff)
                out["completion_ids"].append(completion)
                out["KL_completion_ids"].append(kl)
                out["label"].append(bool(chats[i].extra.get(preference.KTO_TAG)) if i in chats else False)
                full, learned, length = len(prompt) + len(answer), len(completion), len(kept) + len(completion)
            out["prompt_ids"].append(kept)
            for k, v in (("length", length), ("full_length", full), ("prompt_length", len(kept)), ("learned", learned),
                         ("source", self.source), ("record", i), ("problem", problems.get(i, ""))):
                out[k].append(v)
        return out


def _kl_answer(chats: dict, where: list[int], indices: list[int], n: int) -> dict:
    """The answer KTO's KL term pairs with record ``where[n]``'s prompt: the batch's record before it (the first
    takes the last), as LLaMA-Factory offsets them; its own when that one could not be read."""
    i = where[n]
    before = indices[indices.index(i) - 1]
    return (chats.get(before) or chats[i]).messages[-1]


def features(kind: str):
    import datasets

    seq = getattr(datasets, "List", datasets.Sequence)
    ids = {k: seq(datasets.Value("int32")) for k in COLUMNS[kind] if k != "label"}
    ints = {k: datasets.Value("int32") for k in ("length", "full_length", "prompt_length", "learned", "source")}
    label = {"label": datasets.Value("bool")} if kind == "kto" else {}
    return datasets.Features({**ids, **label, **ints, "record": datasets.Value("int64"), "problem": datasets.Value("string")})


def sft_view(row: dict, kind: str) -> dict:
    """A row as SFT's (``input_ids``, ``labels``: the prompt masked), and the other sequence (the rejected answer, or
    KTO's none) the same way: what the data preview shows."""
    prompt = list(row["prompt_ids"])
    answer = list(row["chosen_ids"] if kind == "pairwise" else row["completion_ids"])
    out = {"input_ids": prompt + answer, "labels": [tokens.IGNORE] * len(prompt) + answer}
    if kind == "pairwise":
        out["other_ids"] = prompt + list(row["rejected_ids"])
        out["other_labels"] = [tokens.IGNORE] * len(prompt) + list(row["rejected_ids"])
    else:
        out["kto_tag"] = bool(row["label"])
    return out
