"""What the trainer will see of a job's data: ``zeroboard dataset JOB [--json] [-n N]``.

The job's tokenizer with its template, the datasets tokenized (or read from
the cache, which the run then reuses), the first N samples as text with the
learned tokens marked, and the whole data's statistics: samples, tokens, how
many the cutoff truncates, how many lose their whole answer, how many records
were skipped and why.  Needs transformers and ``datasets``: the web server
runs it as a subprocess.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..job import spec as specmod
from . import dataprep, prefdata, templates, vision


def tokenizer_for(job: specmod.JobSpec):
    from transformers import AutoTokenizer

    built_here = job.model_name_or_path in (specmod.DEMO_MODEL, specmod.LESSON_MODEL)  # the demo's and the lesson's
    if built_here and not (Path(job.model_name_or_path) / "config.json").is_file():
        from .demo_model import ensure_demo_model

        ensure_demo_model(job.model_name_or_path, job.dataset_dir)
    tokenizer = AutoTokenizer.from_pretrained(job.model_name_or_path)
    applied = templates.apply(tokenizer, job.template)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, applied


def segments(tokenizer, ids: list[int], labels: list[int]) -> list[dict]:
    """The sample as text, in runs of prompt (masked) and learned tokens."""
    out: list[dict] = []
    start = 0
    for k in range(1, len(ids) + 1):
        if k == len(ids) or (labels[k] != templates.IGNORE) != (labels[start] != templates.IGNORE):
            text = tokenizer.decode(ids[start:k], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            out.append({"text": text, "learned": labels[start] != templates.IGNORE})
            start = k
    return out


def report(job: specmod.JobSpec, n: int = 5) -> dict:
    tokenizer, applied = tokenizer_for(job)
    seen = vision.Vision.of(job, tokenizer)  # a vision-language model: its image tokens, as the run writes them
    data = dataprep.prepare(job, tokenizer, vision=seen)
    info = data.info
    names = [s["name"] for s in info["sources"]]
    samples = []
    kind = prefdata.kind_of(job.training_stage)  # a preference row: its chosen (or judged) answer, and the other
    for row in data.full.select(range(min(n, len(data.full)))):
        seq = prefdata.sft_view(row, kind) if kind else row
        sample = {"dataset": names[row["source"]], "record": row["record"], "tokens": row["length"],
                  "full_tokens": row["full_length"], "learned": row["learned"],
                  "truncated": row["full_length"] > job.cutoff_len,
                  "segments": segments(tokenizer, seq["input_ids"], seq["labels"])}
        if seen is not None and row.get("images"):  # the files, and each image's run of pad tokens shown short
            sample["images"] = row["images"]
            for seg in sample["segments"]:
                seg["text"] = re.sub(f"(?:{re.escape(seen.pad)})+", lambda m: f"{seen.pad}x{len(m[0]) // len(seen.pad)}",
                                     seg["text"])
        if kind == "pairwise":
            sample["rejected_segments"] = segments(tokenizer, seq["other_ids"], seq["other_labels"])
        elif kind == "kto":
            sample["kto_tag"] = seq["kto_tag"]
        samples.append(sample)
    stats = {k: info[k] for k in ("records", "samples", "tokens", "learned_tokens", "truncated", "answer_lost", "skipped",
                                  "problems")}
    stats["train_samples"] = len(data.train)
    stats["eval_samples"] = len(data.eval) if data.eval is not None else 0
    if data.eval_info is not None:
        stats["eval"] = {k: data.eval_info[k] for k in ("samples", "tokens", "truncated", "answer_lost", "skipped")}
    return {"template": applied.name, "training_stage": job.training_stage, "added_tokens": applied.added, "eos_token": tokenizer.eos_token,
            "cutoff_len": job.cutoff_len, "datasets": info["sources"], "stats": stats, "samples": samples,
            "cache": [str(p) for p in data.paths], "tokenized": data.built, "seconds": round(data.seconds, 3)}
