"""Token ids and labels of ZeroBoard and LLaMA-Factory 0.9.5, row for row, for every template name both write.

On LLaMA-Factory's own demo data (its ``data/``: identity, alpaca_en/zh_demo, glaive_toolcall_en/zh_demo with
their tools), plus two files of records it skips (sharegpt turns out of order, an odd number of turns, a system
message in the middle; alpaca records without a response) beside records it keeps (an empty answer), each template
is run at two cutoffs through both tools' own pipelines: ZeroBoard's trainer path (``templates.apply``,
``dataprep.tokenized``), LLaMA-Factory's (``run_lf_templates.py``, in its own venv; never ZeroBoard's dependency).
The datasets are concatenated in one job, so the rows compared are every row each tool keeps, in order: the same
sequence means the same ids, the same labels and the same records kept and dropped.  Then the mixes: identity and
alpaca_en_demo concatenated and interleaved (under- and over-sampled, in turn and with probabilities), the rows of
the mixed training set in their order.

Each template is used with its model family's tokenizer: the demo model's byte-level BPE with the template's marker
tokens as special tokens and, for the templates that write one, a begin-of-sequence token (``lf_ids.py``'s way).

    python benchmarks/lf_templates.py --lf-python /work/lfvenv/bin/python [--lf-data LLaMA-Factory/data]
        [--json benchmarks/results/lf_templates.json]

``--lf-data`` is a checkout's ``data/`` folder (the full demo files); without it, the cut copies of
tests/fixtures/llamafactory.  Exit status 1 when a row differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
FIXTURE = ROOT / "tests" / "fixtures" / "llamafactory" / "data"
LF_SCRIPT = Path(__file__).resolve().with_name("run_lf_templates.py")

TEMPLATES = ["default", "empty", "alpaca", "vicuna", "chatml", "qwen", "qwen3", "qwen3_nothink", "llama2", "llama3",
             "mistral", "ministral", "gemma", "gemma3", "phi", "phi4", "granite3", "smollm", "smollm2", "starchat", "yi",
             "zephyr", "deepseek"]
BOS = {"llama2": "<s>", "llama3": "<|begin_of_text|>", "mistral": "<s>", "ministral": "<s>", "gemma": "<bos>",
       "gemma3": "<bos>", "deepseek": "<｜begin▁of▁sentence｜>"}
LF_DATASETS = ["identity", "alpaca_en_demo", "alpaca_zh_demo", "glaive_toolcall_en_demo", "glaive_toolcall_zh_demo"]
DATASETS = [*LF_DATASETS, "skips_sharegpt", "skips_alpaca"]
CUTOFFS = (1024, 256)
MIXES = [("concat", None), ("interleave_under", None), ("interleave_under", [0.3, 0.7]),
         ("interleave_over", [0.3, 0.7])]
MIX_DATASETS = ["identity", "alpaca_en_demo"]
MIX_TEMPLATE, MIX_CUTOFF, SEED = "qwen3_nothink", 1024, 42


def _turns(*pairs):
    return [{"from": who, "value": text} for who, text in pairs]


# records LLaMA-Factory skips (and some it keeps), by its converter's rules
SKIPS_SHAREGPT = [
    {"conversations": _turns(("human", "Name a color."), ("gpt", "Blue."))},  # kept
    {"conversations": _turns(("human", "Hi."), ("human", "Anyone?"), ("gpt", "Yes."))},  # two prompts in a row
    {"conversations": _turns(("human", "Hi."), ("gpt", "Hello."), ("human", "Bye."))},  # odd: no answer last
    {"conversations": _turns(("gpt", "I start."), ("human", "Odd."))},  # an answer first
    {"conversations": _turns(("human", "A."), ("gpt", "B."), ("system", "Late system."), ("gpt", "C."))},  # system late
    {"conversations": _turns(("system", "Be terse."), ("human", "Why?"), ("gpt", ""))},  # kept: an empty answer
    {"conversations": _turns(("human", "Q1"), ("gpt", "A1"), ("human", "Q2"), ("gpt", "A2"))},  # kept
    {"conversations": []},  # nothing
]
SKIPS_ALPACA = [{"instruction": "Say yes.", "input": "", "output": "Yes."},
                {"instruction": "Say nothing.", "input": "", "output": ""},  # kept: the end of the answer learned
                {"instruction": "No response here.", "input": "at all"},  # skipped
                {"instruction": "A null response.", "input": "", "output": None},  # skipped
                {"instruction": "Say no.", "input": "please", "output": "No."}]


def data_folder(d: Path, lf_data: Path) -> Path:
    """LLaMA-Factory's demo files and their entries, and the two files of records it skips."""
    d.mkdir(parents=True)
    info = json.loads((lf_data / "dataset_info.json").read_text(encoding="utf-8"))
    entries = {name: info[name] for name in LF_DATASETS}
    for entry in entries.values():
        shutil.copy(lf_data / entry["file_name"], d / entry["file_name"])
    (d / "skips_sharegpt.json").write_text(json.dumps(SKIPS_SHAREGPT), encoding="utf-8")
    (d / "skips_alpaca.json").write_text(json.dumps(SKIPS_ALPACA), encoding="utf-8")
    entries |= {"skips_sharegpt": {"file_name": "skips_sharegpt.json", "formatting": "sharegpt"},
                "skips_alpaca": {"file_name": "skips_alpaca.json"}}
    (d / "dataset_info.json").write_text(json.dumps(entries, indent=1), encoding="utf-8")
    return d


def family_tokenizer(base: Path, name: str, out: Path) -> Path:
    """The demo tokenizer as the template's model family has it: its marker tokens special, its bos token."""
    from transformers import AutoTokenizer

    from zeroboard.data import chat

    tok = AutoTokenizer.from_pretrained(base)
    extra = [t for t in (*chat.NAMED[name].tokens, BOS.get(name)) if t and t not in tok.get_vocab()]
    if extra:
        tok.add_special_tokens({"additional_special_tokens": extra}, replace_extra_special_tokens=False)
    if name in BOS:
        tok.bos_token = BOS[name]
    tok.save_pretrained(out)
    return out


def zeroboard_rows(data: Path, tok_dir: Path, name: str, cutoff: int, names: list[str], cache: Path,
                   mix: tuple[str, list | None] = ("concat", None)) -> tuple[list[dict], dict]:
    """ZeroBoard's rows of ``names`` as one training set, in order, through the trainer's own path; and its info."""
    from transformers import AutoTokenizer

    from zeroboard.job import spec
    from zeroboard.training import dataprep, templates

    os.environ[dataprep.CACHE_ENV] = str(cache)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    templates.apply(tok, name)
    job = spec.JobSpec(model_name_or_path=str(tok_dir), dataset_dir=str(data), dataset=names, template=name,
                       cutoff_len=cutoff, seed=SEED, mix_strategy=mix[0], interleave_probs=mix[1] or [])
    out = dataprep.tokenized(names, job, tok)
    rows = [{"input_ids": r["input_ids"], "labels": r["labels"], "dataset": names[r["source"]], "record": r["record"]}
            for r in out.dataset.select_columns(["input_ids", "labels", "source", "record"])]
    return rows, out.info


def compare(zb: list[dict], lf: list[dict]) -> dict:
    """Rows of each, identical rows in order, and the first differing row (its dataset and record on our side)."""
    same = sum(1 for z, r in zip(zb, lf) if z["input_ids"] == r["input_ids"] and z["labels"] == r["labels"])
    out = {"rows_zeroboard": len(zb), "rows_llamafactory": len(lf), "identical": same, "first_difference": None}
    for k, (z, r) in enumerate(zip(zb, lf)):
        if (z["input_ids"], z["labels"]) != (r["input_ids"], r["labels"]):
            key = "input_ids" if z["input_ids"] != r["input_ids"] else "labels"
            at = next((j for j, (x, y) in enumerate(zip(z[key], r[key])) if x != y), min(len(z[key]), len(r[key])))
            out["first_difference"] = {"row": k, "dataset": z["dataset"], "record": z["record"], "field": key,
                                       "position": at, "zeroboard": z[key][at:at + 8], "llamafactory": r[key][at:at + 8]}
            break
    if out["first_difference"] is None and len(zb) != len(lf):
        out["first_difference"] = {"row": min(len(zb), len(lf)), "missing_in": "zeroboard" if len(zb) < len(lf)
                                   else "llamafactory"}
    out["equal"] = len(zb) == len(lf) == same
    return out


def run_llamafactory(lf_python: Path, jobs: list[dict], tmp: Path) -> dict[int, list[dict]]:
    (tmp / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    done = subprocess.run([str(lf_python), str(LF_SCRIPT), "--jobs", str(tmp / "jobs.json"), "--out",
                           str(tmp / "rows.jsonl")], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"LLaMA-Factory's side failed:\n{done.stderr[-3000:]}")
    rows: dict[int, list[dict]] = {j["id"]: [] for j in jobs}
    for line in (tmp / "rows.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        rows[r["job"]].append(r)
    return rows


def lf_version(lf_python: Path) -> str:
    done = subprocess.run([str(lf_python), "-c", "import importlib.metadata as m; print(m.version('llamafactory'), "
                           "m.version('transformers'), m.version('datasets'))"], capture_output=True, text=True)
    return done.stdout.strip()


def comparison_args(ap: argparse.ArgumentParser):
    """The arguments both comparisons with LLaMA-Factory take (this one and lf_pref_templates.py); None where
    LLaMA-Factory's Python is missing (said, nothing compared)."""
    ap.add_argument("--lf-python", type=Path, default=Path("/work/lfvenv/bin/python"))
    ap.add_argument("--lf-data", type=Path, default=FIXTURE, help="LLaMA-Factory's data/ folder")
    ap.add_argument("--data-label", help="how the results name --lf-data (default: its path in the repository)")
    ap.add_argument("--templates", default=",".join(TEMPLATES))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not a.lf_python.is_file():
        print(f"no LLaMA-Factory Python at {a.lf_python}: nothing compared")
        return None
    os.environ.setdefault("ZEROBOARD_ALLOW_PATHS", tempfile.gettempdir())
    return a


def data_label(a) -> str:
    data = a.lf_data.resolve()
    return a.data_label or (str(data.relative_to(ROOT)) if data.is_relative_to(ROOT) else str(a.lf_data))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a = comparison_args(ap)
    if a is None:
        return 0
    names, label = [n for n in a.templates.split(",") if n], data_label(a)
    t0 = time.time()
    result: dict = {"llamafactory": lf_version(a.lf_python), "data": label, "cutoffs": list(CUTOFFS),
                    "datasets": DATASETS, "tokenizer": "cache/demo/model with each family's marker tokens and bos token",
                    "templates": {}, "mixes": {}}
    with tempfile.TemporaryDirectory(prefix="zb-lf-templates-") as tmp:
        tmp = Path(tmp)
        data = data_folder(tmp / "data", a.lf_data)
        base = ROOT / "cache" / "demo" / "model"
        toks = {n: family_tokenizer(base, n, tmp / f"tok-{n}") for n in {*names, MIX_TEMPLATE}}
        jobs = [{"id": i, "tokenizer": str(toks[n]), "data_dir": str(data), "datasets": DATASETS, "template": n,
                 "cutoff_len": c, "merged": True, "seed": SEED} for i, (n, c) in enumerate((n, c) for n in names
                                                                                          for c in CUTOFFS)]
        jobs += [{"id": len(jobs) + k, "tokenizer": str(toks[MIX_TEMPLATE]), "data_dir": str(data),
                  "datasets": MIX_DATASETS, "template": MIX_TEMPLATE, "cutoff_len": MIX_CUTOFF, "merged": True,
                  "seed": SEED, "mix_strategy": m, "interleave_probs": p} for k, (m, p) in enumerate(MIXES)]
        lf = run_llamafactory(a.lf_python, jobs, tmp)
        for job in jobs:
            got = lf[job["id"]]
            if got and "error" in got[0]:
                res = {"error_llamafactory": got[0]["error"]}
            else:
                mix = (job.get("mix_strategy", "concat"), job.get("interleave_probs"))
                zb, info = zeroboard_rows(data, Path(job["tokenizer"]), job["template"], job["cutoff_len"],
                                          job["datasets"], tmp / f"zb-{job['id']}", mix)
                res = compare(zb, got)
                res["skipped_zeroboard"] = info["skipped"]
                res["kept_by_dataset"] = {ds: sum(r["dataset"] == ds for r in zb) for ds in job["datasets"]}
                res["kept_records"] = {ds: [r["record"] for r in zb if r["dataset"] == ds]
                                       for ds in job["datasets"] if ds.startswith("skips_")}
                res["truncated_rows"] = sum(len(r["input_ids"]) == job["cutoff_len"] for r in zb)
            if "mix_strategy" in job:
                label = f"{job['mix_strategy']}" + (f" {job['interleave_probs']}" if job["interleave_probs"] else "")
                res["order"] = [[r["dataset"], r["record"]] for r in zb][:12] if "equal" in res else None
                result["mixes"][label] = res
            else:
                result["templates"].setdefault(job["template"], {})[str(job["cutoff_len"])] = res
            shown = res.get("error_llamafactory") or (f"{res['identical']}/{res['rows_llamafactory']} rows identical"
                                                      f" ({res['rows_zeroboard']} ours)")
            print(f"{job['template']:14s} {job['cutoff_len']:5d} {job.get('mix_strategy', ''):16s} {shown}", flush=True)
    ok = [n for n, by in result["templates"].items() if all(r.get("equal") for r in by.values())]
    result["identical_templates"] = ok
    result["identical_mixes"] = [m for m, r in result["mixes"].items() if r.get("equal")]
    result["seconds"] = round(time.time() - t0, 1)
    print(f"{len(ok)} of {len(names)} templates token-identical at cutoffs {list(CUTOFFS)}; mixes identical: "
          f"{len(result['identical_mixes'])} of {len(MIXES)}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if len(ok) == len(names) and len(result["identical_mixes"]) == len(MIXES) else 1


if __name__ == "__main__":
    sys.exit(main())
