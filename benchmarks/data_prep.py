"""Data preparation at scale: ZeroBoard with 2 ranks against LLaMA-Factory's own preprocessing, side by side.

Both read the same 200,000-sample alpaca JSON, render it with the same chat
text (LLaMA-Factory's ``phi`` template; ZeroBoard's ``auto``, the model's own
template, which writes the same text) and tokenize it with the same tokenizer,
each from a fresh, empty cache.  ZeroBoard runs exactly what each training
rank runs before the model is built (``train.use_template`` and
``train.prepare_data``: the main process tokenizes with ``map(num_proc)``, the
other rank waits and reads the cache), launched by torchrun with 2 ranks.
A second ZeroBoard run then shows the cache being reused.

Prints the seconds, the peak RSS of each rank (and of its map workers), what
each rank tokenized, and the ratio to LLaMA-Factory; ``--json`` saves them.

``--ids`` compares what both tokenize instead (``lf_ids.py``): for every
template both name, on fresh LLaMA-Factory-style data (alpaca with system and
history, sharegpt with custom tags, OpenAI messages, tool calls, samples over
the cutoff, CSV, Parquet, a folder of shards), the input_ids and labels row by
row, ZeroBoard's trainer path against LLaMA-Factory's own pipeline run by its
own Python (``run_lf_prep.py``); the rows, the identical rows and the first
differing row of each template go under the file's ``ids`` key, beside the
speed figures.  Without LLaMA-Factory in /work/lf it says so and compares
nothing.
LLaMA-Factory's side needs the set-up in /work/lf (its venv and source, see
``run_lf_prep.py``, which runs there; for the speed figures also its data and
model); without it the benchmark says so, writes its own 200,000-sample file,
and measures ZeroBoard with the demo model's tokenizer.

    python benchmarks/data_prep.py [--workers 2] [--json benchmarks/results/data_prep.json]
    python benchmarks/data_prep.py --ids --json benchmarks/results/data_prep.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
LF = Path(os.environ.get("ZEROBOARD_LF_DIR", "/work/lf"))
LF_PYTHON, LF_SCRIPT = LF / "venv" / "bin" / "python", Path(__file__).resolve().with_name("run_lf_prep.py")


def lf_available() -> bool:
    return LF_PYTHON.is_file() and LF_SCRIPT.is_file() and (LF / "data" / "alpaca200k.json").is_file()


def make_alpaca(d: Path, n: int, seed: int = 0) -> Path:
    """A synthetic alpaca file (instruction / input / output of made-up words) and its dataset_info.json."""
    rng = random.Random(seed)
    syl = "ka lo mi ne ru sa te vo zi pa qu xe bi do fu ga hi ja ko le ma no pe ri so tu va we yo ze".split()
    vocab = ["".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) for _ in range(4000)]

    def words(lo, hi):
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(lo, hi))).capitalize() + "."

    d.mkdir(parents=True, exist_ok=True)
    with (d / "alpaca200k.json").open("w") as fh:
        fh.write("[")
        for i in range(n):
            rec = {"instruction": words(5, 40), "input": words(0, 60) if rng.random() < 0.6 else "", "output": words(10, 80)}
            fh.write(("," if i else "") + json.dumps(rec))
        fh.write("]")
    (d / "dataset_info.json").write_text(json.dumps({"alpaca200k": {"file_name": "alpaca200k.json", "columns": {
        "prompt": "instruction", "query": "input", "response": "output"}}}))
    return d


# --- one rank (run by torchrun) ----------------------------------------------------------------------


def rank_main(flags: list[str], out: Path) -> int:
    t0 = time.perf_counter()
    from transformers import AutoTokenizer, TrainingArguments

    from zeroboard.job import spec
    from zeroboard.job.record import EventWriter
    from zeroboard.training import train

    job = spec.from_flags(flags)
    rank = int(os.environ.get("RANK", "0"))
    args = TrainingArguments(output_dir=job.output_dir, use_cpu=True, ddp_backend="gloo", report_to="none")
    imported = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(job.model_name_or_path)
    train.use_template(job, tokenizer)
    rows, _, data = train.prepare_data(job, tokenizer, args, EventWriter(job.output_dir, rank))
    ready = time.perf_counter()
    self_ = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the map workers, reaped
    (out / f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "tokenized": data.built, "rows_tokenized": data.info["records"] if data.built else 0,
        "samples": len(rows), "tokens": data.info["tokens"], "seconds": round(ready - imported, 3),
        "seconds_with_imports": round(ready - t0, 3), "peak_rss_mib": round(self_.ru_maxrss / 1024, 1),
        "peak_rss_largest_worker_mib": round(kids.ru_maxrss / 1024, 1),
        "cpu_s": round(self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime, 1),
        "phases_s": data.info.get("phases_s") if data.built else None}))
    return 0


# --- the benchmark -----------------------------------------------------------------------------------


def zeroboard(data_dir: Path, model: Path, ranks: int, workers: int, cutoff: int, caches: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix="zb-prep-out-"))
    flags = ["--model_name_or_path", str(model), "--dataset_dir", str(data_dir), "--dataset", "alpaca200k",
             "--template", "auto", "--cutoff_len", str(cutoff), "--preprocessing_num_workers", str(workers),
             "--output_dir", str(out / "run")]
    env = {**os.environ, "HF_DATASETS_CACHE": str(caches / "hf"), "ZEROBOARD_DATA_CACHE": str(caches / "zb"),
           "ZEROBOARD_ALLOW_PATHS": f"{data_dir},{model}", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    torchrun = Path(sys.executable).parent / "torchrun"
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    subprocess.run([str(torchrun), "--nproc_per_node", str(ranks), "--master_port", str(_free_port()), __file__,
                    "--rank-worker", str(out), *flags], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    per_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
    shutil.rmtree(out, ignore_errors=True)
    return {"ranks": per_rank, "seconds": max(r["seconds"] for r in per_rank), "wall_s": round(wall, 3),
            "tokens": per_rank[0]["tokens"], "samples": per_rank[0]["samples"], "workers": workers,
            "loadavg_1m_start_end": [round(load, 2), round(os.getloadavg()[0], 2)]}


def llamafactory(workers: int, cutoff: int) -> dict:
    res = subprocess.run([str(LF_PYTHON), str(LF_SCRIPT), "--data-dir", str(LF / "data"), "--dataset", "alpaca200k",
                          "--model", str(LF / "model"), "--template", "phi", "--workers", str(workers),
                          "--cutoff-len", str(cutoff)], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def same_ids(cutoff: int, base: Path) -> dict:
    """Token ids row by row, ZeroBoard against LLaMA-Factory's own code, for each template both name."""
    import lf_ids
    from zeroboard.data import info
    from zeroboard.training import dataload

    if not (LF_PYTHON.is_file() and (LF / "src").is_dir()):
        return {"llamafactory": None, "note": f"LLaMA-Factory is not installed in {LF} (its venv and src/): "
                                              "nothing compared"}
    os.environ.setdefault("ZEROBOARD_ALLOW_PATHS", tempfile.gettempdir())
    commit = LF / "src" / "COMMIT"
    out: dict = {"llamafactory": lf_version(), "llamafactory_commit": commit.read_text().strip() if commit.is_file()
                 else None, "cutoff_len": cutoff, "tokenizer": f"{base.relative_to(ROOT)} with each family's marker "
                 "tokens and bos token", "templates": {}}
    with tempfile.TemporaryDirectory(prefix="zb-ids-") as tmp:
        tmp = Path(tmp)
        os.environ["HF_DATASETS_CACHE"] = str(tmp / "hf")
        data = lf_ids.write(tmp / "data")
        records = {ds: len(dataload.load_source(info.resolve(ds, data), 0, 0)) for ds in lf_ids.DATASETS}
        order = lf_ids.lf_order(data, records)
        out["datasets"] = records
        for name in lf_ids.SHARED:
            tok = lf_ids.family_tokenizer(base, name, tmp / f"tok-{name}")
            lf = lf_ids.lf_rows(LF_PYTHON, LF_SCRIPT, data, tok, name, cutoff)
            zb = lf_ids.zeroboard_rows(data, tok, name, cutoff, tmp / f"zb-{name}")
            res = lf_ids.compare(zb, lf, order)
            res["over_cutoff_by_dataset"] = {ds: sum(len(r["input_ids"]) == cutoff for r in rows) for ds, rows in lf.items()}
            res["over_cutoff_rows"] = sum(res["over_cutoff_by_dataset"].values())
            end = lf_ids.zeroboard_rows(data, tok, name, cutoff, tmp / f"zb-end-{name}", truncation="end")
            res["identical_if_cut_at_the_end"] = lf_ids.compare(end, lf, order)["identical"]
            out["templates"][name] = res
            print(f"{name:8s} {res['identical']}/{res['rows']} rows identical ({res['over_cutoff_rows']} over the "
                  f"cutoff; cut at the end instead: {res['identical_if_cut_at_the_end']}); first difference: "
                  f"{res['first_difference']}", flush=True)
    return out


def lf_version() -> str:
    res = subprocess.run([str(LF_PYTHON), "-c", "import importlib.metadata as m; print(m.version('llamafactory'))"],
                         capture_output=True, text=True)
    return res.stdout.strip() or "unknown"


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--rank-worker":
        return rank_main(sys.argv[3:], Path(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="tokenizing processes, for both tools")
    ap.add_argument("--cutoff", type=int, help="cutoff_len: 1024 for the speed figures, 1600 for --ids (the tool rows "
                    "fit, the long ones do not)")
    ap.add_argument("--no-lf", action="store_true", help="measure ZeroBoard only")
    ap.add_argument("--ids", action="store_true", help="compare token ids row by row with LLaMA-Factory for each "
                    "template both name (no timing); --json then updates the file's 'ids' key only")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    a.cutoff = a.cutoff or (1600 if a.ids else 1024)
    if a.ids:
        ids = same_ids(a.cutoff, ROOT / "cache" / "demo" / "model")
        if ids["llamafactory"] is None:
            print(ids["note"])
        if a.json:
            old = json.loads(Path(a.json).read_text()) if Path(a.json).is_file() else {}
            Path(a.json).write_text(json.dumps({**old, "ids": ids}, indent=2) + "\n")
        return 0 if ids["llamafactory"] is None or all(
            t["identical"] == t["rows"] for t in ids["templates"].values()) else 1

    figures: dict = {"cpus": os.cpu_count(), "ranks": a.ranks, "workers": a.workers, "cutoff_len": a.cutoff}
    with tempfile.TemporaryDirectory(prefix="zb-prep-") as tmp:
        tmp = Path(tmp)
        if lf_available():
            data_dir, model = LF / "data", LF / "model"
        else:
            print(f"LLaMA-Factory's set-up is not in {LF}: measuring ZeroBoard alone, on a synthetic file and the demo "
                  "model's tokenizer")
            data_dir, model = make_alpaca(tmp / "data", 200_000), ROOT / "cache" / "demo" / "model"
            a.no_lf = True
        figures["data"] = str(data_dir / "alpaca200k.json")
        figures["model"] = str(model)
        figures["zeroboard"] = zeroboard(data_dir, model, a.ranks, a.workers, a.cutoff, tmp / "caches")
        figures["zeroboard_cached"] = zeroboard(data_dir, model, a.ranks, a.workers, a.cutoff, tmp / "caches")
        if not a.no_lf:
            figures["llamafactory"] = llamafactory(a.workers, a.cutoff)
    zb, again = figures["zeroboard"], figures["zeroboard_cached"]
    print(f"ZeroBoard, {a.ranks} ranks, {a.workers} tokenizing processes: {zb['samples']} samples, {zb['tokens']} tokens "
          f"ready in {zb['seconds']:.1f} s ({zb['wall_s']:.1f} s with torchrun and imports)")
    for r in zb["ranks"]:
        print(f"  rank {r['rank']}: tokenized {r['rows_tokenized']} records ({'tokenized' if r['tokenized'] else 'read the cache'}), "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB, largest map worker {r['peak_rss_largest_worker_mib']:.0f} MiB, "
              f"{r['seconds']:.1f} s")
    print(f"  again, same data, tokenizer and template: {again['seconds']:.1f} s, tokenized by rank 0: "
          f"{again['ranks'][0]['rows_tokenized']} records")
    if "llamafactory" in figures:
        lf = figures["llamafactory"]
        figures["ratio_lf_over_zeroboard"] = round(lf["seconds"] / zb["seconds"], 2)
        print(f"LLaMA-Factory, {a.workers} workers: {lf['rows']} samples, {lf['tokens']} tokens in {lf['seconds']:.1f} s, "
              f"main process peak RSS {lf['peak_rss_main_mib']:.0f} MiB")
        print(f"ZeroBoard is {figures['ratio_lf_over_zeroboard']:.2f}x as fast as LLaMA-Factory")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
