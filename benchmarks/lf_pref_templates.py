"""Preference rows of ZeroBoard and LLaMA-Factory 0.9.5, row for row: pairs (dpo) and tagged answers (kto).

The sibling of ``lf_templates.py`` (SFT) for issue 37: LLaMA-Factory's own demo files ``dpo_en_demo`` (sharegpt,
``ranking: true``) and ``kto_en_demo`` (sharegpt, ``kto_tag``), and the demo's ``demo_pref`` / ``demo_kto`` (alpaca
with chosen/rejected columns, and with a tag), each dataset alone, through both tools' own pipelines at two cutoffs
for every template name both write: ZeroBoard's trainer path (``dataprep.tokenized`` with the training stage),
LLaMA-Factory's (``run_lf_templates.py`` with ``stage: dpo`` / ``kto``, in its own venv).  Compared per row:

- dpo: the chosen sequence (prompt + chosen answer) and its labels, the rejected one and its labels: ZeroBoard's
  ``prompt_ids + chosen_ids`` with the prompt masked is LLaMA-Factory's ``chosen_input_ids`` / ``chosen_labels``;
- kto: the sequence and its labels, the tag; the KL sequence (the record before's answer on this prompt) is compared
  too and counted apart: ZeroBoard's KL sequence is this row's prompt as cut for its own answer (TRL joins them),
  LLaMA-Factory cuts the KL prompt on its own, so the two differ only where the cutoff cut the prompt.

    python benchmarks/lf_pref_templates.py --lf-python /work/lfvenv/bin/python [--lf-data LLaMA-Factory/data]
        [--json benchmarks/results/lf_pref_templates.json]

Exit status 1 when a row (sequences, labels, tags) differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lf_templates as sft  # noqa: E402 - the same tokenizers, LLaMA-Factory runner and folder of the demo files

ROOT = sft.ROOT
IGNORE = -100
LF_DATASETS = {"dpo": ["dpo_en_demo"], "kto": ["kto_en_demo"]}
OUR_DATASETS = {"dpo": ["demo_pref"], "kto": ["demo_kto"]}
CUTOFFS = (1024, 256)


def data_folder(d: Path, lf_data: Path) -> Path:
    """LLaMA-Factory's preference demo files and entries, beside the demo's own (alpaca ranking and kto_tag)."""
    from zeroboard.data.demo import write_demo_data

    d.mkdir(parents=True)
    info = json.loads((lf_data / "dataset_info.json").read_text(encoding="utf-8"))
    entries = {n: info[n] for names in LF_DATASETS.values() for n in names}
    for entry in entries.values():
        shutil.copy(lf_data / entry["file_name"], d / entry["file_name"])
    demo = write_demo_data(d / "demo")
    ours = json.loads((demo / "dataset_info.json").read_text())
    for name in (n for names in OUR_DATASETS.values() for n in names):
        shutil.copy(demo / ours[name]["file_name"], d / ours[name]["file_name"])
        entries[name] = ours[name]
    (d / "dataset_info.json").write_text(json.dumps(entries, indent=1), encoding="utf-8")
    return d


def zeroboard_rows(data: Path, tok_dir: Path, name: str, cutoff: int, stage: str, dataset: str, cache: Path) -> list[dict]:
    """ZeroBoard's rows of one dataset for ``stage``, as LLaMA-Factory's columns."""
    from transformers import AutoTokenizer

    from zeroboard.job import spec
    from zeroboard.training import dataprep, templates

    os.environ[dataprep.CACHE_ENV] = str(cache)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    templates.apply(tok, name)
    job = spec.JobSpec(model_name_or_path=str(tok_dir), dataset_dir=str(data), dataset=[dataset], template=name,
                       cutoff_len=cutoff, seed=sft.SEED, training_stage=stage)
    out = []
    for r in dataprep.tokenized([dataset], job, tok).dataset:
        p = list(r["prompt_ids"])
        mask = [IGNORE] * len(p)
        if stage == "dpo":
            out.append({"chosen_input_ids": p + r["chosen_ids"], "chosen_labels": mask + r["chosen_ids"],
                        "rejected_input_ids": p + r["rejected_ids"], "rejected_labels": mask + r["rejected_ids"],
                        "record": r["record"]})
        else:
            out.append({"input_ids": p + r["completion_ids"], "labels": mask + r["completion_ids"],
                        "kto_tags": r["label"], "kl_input_ids": p + r["KL_completion_ids"], "record": r["record"]})
    return out


KEYS = {"dpo": ("chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels"),
        "kto": ("input_ids", "labels", "kto_tags")}


def compare(zb: list[dict], lf: list[dict], stage: str) -> dict:
    keys = KEYS[stage]
    same = sum(1 for z, r in zip(zb, lf) if all(z[k] == r[k] for k in keys))
    out = {"rows_zeroboard": len(zb), "rows_llamafactory": len(lf), "identical": same, "first_difference": None}
    for k, (z, r) in enumerate(zip(zb, lf)):
        wrong = [key for key in keys if z[key] != r[key]]
        if wrong:
            key = wrong[0]
            a, b = z[key], r[key]
            at = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))) if isinstance(a, list) else 0
            out["first_difference"] = {"row": k, "record": z["record"], "field": key, "position": at,
                                       "zeroboard": a[at:at + 8] if isinstance(a, list) else a,
                                       "llamafactory": b[at:at + 8] if isinstance(b, list) else b}
            break
    if stage == "kto":
        out["kl_identical"] = sum(1 for z, r in zip(zb, lf) if z["kl_input_ids"] == r["kl_input_ids"])
    out["equal"] = len(zb) == len(lf) == same
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a = sft.comparison_args(ap)
    if a is None:
        return 0
    names, label = [n for n in a.templates.split(",") if n], sft.data_label(a)
    t0 = time.time()
    result: dict = {"llamafactory": sft.lf_version(a.lf_python), "data": label, "cutoffs": list(CUTOFFS),
                    "datasets": {s: LF_DATASETS[s] + OUR_DATASETS[s] for s in LF_DATASETS},
                    "tokenizer": "cache/demo/model with each family's marker tokens and bos token", "rows": {}}
    with tempfile.TemporaryDirectory(prefix="zb-lf-pref-") as tmp:
        tmp = Path(tmp)
        data = data_folder(tmp / "data", a.lf_data)
        toks = {n: sft.family_tokenizer(ROOT / "cache" / "demo" / "model", n, tmp / f"tok-{n}") for n in names}
        jobs = [{"id": i, "tokenizer": str(toks[n]), "data_dir": str(data), "datasets": [ds], "template": n,
                 "cutoff_len": c, "stage": stage, "seed": sft.SEED}
                for i, (n, c, stage, ds) in enumerate((n, c, stage, ds) for n in names for c in CUTOFFS
                                                      for stage in LF_DATASETS
                                                      for ds in LF_DATASETS[stage] + OUR_DATASETS[stage])]
        lf = sft.run_llamafactory(a.lf_python, jobs, tmp)
        for job in jobs:
            got = lf[job["id"]]
            if got and "error" in got[0]:
                res = {"error_llamafactory": got[0]["error"]}
            else:
                zb = zeroboard_rows(data, Path(job["tokenizer"]), job["template"], job["cutoff_len"], job["stage"],
                                    job["datasets"][0], tmp / f"zb-{job['id']}")
                res = compare(zb, got, job["stage"])
            where = result["rows"].setdefault(job["template"], {}).setdefault(job["stage"], {})
            where[f"{job['datasets'][0]}@{job['cutoff_len']}"] = res
            shown = res.get("error_llamafactory") or f"{res['identical']}/{res['rows_llamafactory']} rows identical"
            print(f"{job['template']:14s} {job['stage']} {job['datasets'][0]:12s} {job['cutoff_len']:5d} {shown}", flush=True)
    ok = [n for n, by in result["rows"].items() if all(r.get("equal") for st in by.values() for r in st.values())]
    result["identical_templates"] = ok
    result["rows_compared"] = sum(r.get("rows_llamafactory", 0) for by in result["rows"].values() for st in by.values()
                                  for r in st.values())
    result["rows_identical"] = sum(r.get("identical", 0) for by in result["rows"].values() for st in by.values()
                                   for r in st.values())
    result["seconds"] = round(time.time() - t0, 1)
    print(f"{len(ok)} of {len(names)} templates token-identical on pairs and tagged answers at cutoffs {list(CUTOFFS)} "
          f"({result['rows_identical']} of {result['rows_compared']} rows)")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if len(ok) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
