"""LLaMA-Factory's side of ``benchmarks/lf_templates.py``: its own data pipeline, run by its own Python, many jobs.

Runs in LLaMA-Factory's environment (a venv with ``pip install llamafactory==0.9.5`` and the CPU torch), never in
ZeroBoard's: it imports ``llamafactory`` once and, for each job of a JSON list, calls its public functions as its
trainer does (``get_train_args``, ``load_tokenizer``, ``get_template_and_fix_tokenizer``, ``get_dataset``).

    run_lf_templates.py --jobs JOBS.json --out ROWS.jsonl

A job: ``{"id", "tokenizer", "data_dir", "datasets": [...], "template", "cutoff_len"}``, and for a mixing job
``"merged": true`` with ``"mix_strategy"``, ``"interleave_probs"`` (or null) and ``"seed"``; ``"stage"``: ``sft``
(the default), ``dpo`` or ``kto`` (``benchmarks/lf_pref_templates.py``).  Each row written:
``{"job", "dataset", "input_ids", "labels"}`` (dpo: ``chosen_input_ids``, ``chosen_labels``, ``rejected_input_ids``,
``rejected_labels``; kto: ``input_ids``, ``labels``, ``kl_input_ids``, ``kl_labels``, ``kto_tags``), dataset by
dataset in the order of its records (a merged job: the rows of the mixed training set, in its order, under the
dataset name ``merged``).  A job LLaMA-Factory refuses
writes ``{"job", "error"}``.

The venv, outside any repository, as made for benchmarks/results/lf_templates.json:
``python3 -m venv /work/lfvenv && /work/lfvenv/bin/pip install llamafactory==0.9.5 torch==2.13.0`` (the CPU wheel;
transformers 5.6.0 and datasets 4.0.0 come with it), then ``pip uninstall torchvision`` (its wheel is built for
another torch and breaks transformers' imports) and torchaudio's compiled libraries moved out of its package
(LLaMA-Factory's data module imports torchaudio; nothing here reads audio).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

COLUMNS = {"sft": ["input_ids", "labels"],
           "dpo": ["chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels"],
           "kto": ["input_ids", "labels", "kl_input_ids", "kl_labels", "kto_tags"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    jobs = json.loads(open(a.jobs, encoding="utf-8").read())
    with tempfile.TemporaryDirectory(prefix="lf-templates-") as tmp:
        os.environ["HF_DATASETS_CACHE"] = os.path.join(tmp, "hf")  # fresh: everything is tokenized
        from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
        from llamafactory.hparams import get_train_args
        from llamafactory.model import load_tokenizer

        with open(a.out, "w", encoding="utf-8") as fh:
            for job in jobs:
                stage = job.get("stage", "sft")
                args = {"model_name_or_path": job["tokenizer"], "stage": stage, "do_train": True,
                        "finetuning_type": "lora", "dataset_dir": job["data_dir"], "template": job["template"],
                        "cutoff_len": job["cutoff_len"], "overwrite_cache": True, "report_to": "none", "use_cpu": True,
                        "output_dir": os.path.join(tmp, "out"), "seed": job.get("seed", 42),
                        "mix_strategy": job.get("mix_strategy", "concat")}
                if job.get("interleave_probs"):
                    args["interleave_probs"] = ",".join(str(p) for p in job["interleave_probs"])
                groups = [job["datasets"]] if job.get("merged") else [[d] for d in job["datasets"]]
                try:
                    for names in groups:
                        model_args, data_args, training_args, _, _ = get_train_args({**args, "dataset": ",".join(names)})
                        module = load_tokenizer(model_args)
                        template = get_template_and_fix_tokenizer(module["tokenizer"], data_args)
                        # LLaMA-Factory's DPO workflow reads its data as the reward model's (pairs): stage "rm"
                        data = get_dataset(template, model_args, data_args, training_args,
                                           stage="rm" if stage == "dpo" else stage, **module)
                        name = "merged" if job.get("merged") else names[0]
                        for r in data["train_dataset"].select_columns(COLUMNS[stage]):
                            fh.write(json.dumps({"job": job["id"], "dataset": name, **r}) + "\n")
                except Exception as e:  # noqa: BLE001 - reported per job, as LLaMA-Factory words it
                    fh.write(json.dumps({"job": job["id"], "error": f"{type(e).__name__}: {e}"[:500]}) + "\n")
                fh.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
