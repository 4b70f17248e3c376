"""LLaMA-Factory's side of ``benchmarks/data_prep.py``: its own data pipeline, run by its own Python.

Runs in LLaMA-Factory's environment (``/work/lf/venv/bin/python``), never in
ZeroBoard's: it imports ``llamafactory`` and calls its public functions as its
trainer does (``get_train_args``, ``load_tokenizer``,
``get_template_and_fix_tokenizer``, ``get_dataset``), from a fresh cache.

    run_lf_prep.py --data-dir D --dataset NAME --model M --template T --cutoff-len N [--workers W]
        prints one JSON line: rows, tokens, seconds, peak RSS (the speed figures)
    ... --ids OUT.jsonl
        also writes every row's dataset, input_ids and labels, dataset by dataset in the order of its records

The set-up in /work/lf (outside any repository), as made for the figures in benchmarks/results/data_prep.json:
LLaMA-Factory's source in src/ (``git archive`` of its repository, the commit in src/COMMIT), a venv with
``pip install torch==2.13.0`` (the CPU wheel), then transformers 5.8.0, datasets 4.0.0 and the rest of its
requirements within its pins, and ``pip install --no-deps -e src``.  Its data module imports torchaudio, whose
wheels on PyPI are built for another torch: torchaudio 2.11.1 is installed with its compiled libraries moved out of
the package (torchaudio then imports without them; nothing here reads audio).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--dataset", required=True, help="comma-separated names from the data dir's dataset_info.json")
    ap.add_argument("--model", required=True)
    ap.add_argument("--template", required=True)
    ap.add_argument("--cutoff-len", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--ids", help="write each row's input_ids and labels to this JSON-lines file")
    a = ap.parse_args()

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lf-prep-") as tmp:
        os.environ["HF_DATASETS_CACHE"] = os.path.join(tmp, "hf")  # a fresh cache: everything is tokenized
        import llamafactory
        from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
        from llamafactory.hparams import get_train_args
        from llamafactory.model import load_tokenizer

        imported = time.perf_counter()
        model_args, data_args, training_args, _, _ = get_train_args({
            "model_name_or_path": a.model, "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "dataset_dir": a.data_dir, "dataset": a.dataset, "template": a.template, "cutoff_len": a.cutoff_len,
            "preprocessing_num_workers": a.workers if a.workers > 1 else None, "overwrite_cache": True,
            "output_dir": os.path.join(tmp, "out"), "report_to": "none", "use_cpu": True})
        module = load_tokenizer(model_args)
        template = get_template_and_fix_tokenizer(module["tokenizer"], data_args)
        t1 = time.perf_counter()
        if a.ids:  # dataset by dataset, so that each row is known by its dataset and its place there
            names, n, tokens = list(data_args.dataset), 0, 0
            with open(a.ids, "w", encoding="utf-8") as fh:
                for name in names:
                    data_args.dataset = [name]
                    data = get_dataset(template, model_args, data_args, training_args, stage="sft", **module)
                    for r in data["train_dataset"].select_columns(["input_ids", "labels"]):
                        fh.write(json.dumps({"dataset": name, "input_ids": r["input_ids"], "labels": r["labels"]}) + "\n")
                        n, tokens = n + 1, tokens + len(r["input_ids"])
        else:
            data = get_dataset(template, model_args, data_args, training_args, stage="sft", **module)["train_dataset"]
            n, tokens = len(data), sum(len(x) for x in data["input_ids"])
        ready = time.perf_counter()
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({
        "tool": "llamafactory", "llamafactory_version": llamafactory.__version__, "dataset": a.dataset,
        "model": a.model, "template": a.template, "workers": a.workers, "cutoff_len": a.cutoff_len,
        "rows": n, "tokens": tokens, "seconds": round(ready - t1, 3), "seconds_total": round(ready - t0, 3),
        "import_s": round(imported - t0, 3), "peak_rss_main_mib": round(me.ru_maxrss / 1024, 1),
        "ru_maxrss_largest_child_mib": round(kids.ru_maxrss / 1024, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
