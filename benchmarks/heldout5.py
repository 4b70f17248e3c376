"""Issue 34's held-out set (benchmarks/heldout_sets.py HELDOUT5): sealed estimates, final estimates, the GPU rows.

    python benchmarks/heldout5.py --seal            # CPU: the planner as it is now -> sealed_* columns (before a fix)
    python benchmarks/heldout5.py --final           # CPU: the planner as it is now -> estimate_gib / needed_gib
    python benchmarks/heldout5.py --tiny            # CPU: the GPU harness on tiny shapes (2 processes' worth of rows)
    python benchmarks/heldout5.py --gpu [--budget-s 540]   # one H200: measure, rows side by side where they fit

Every row is planned as the H200 run will run it: one GPU (143 GiB), Liger read from the liger-kernel wheel the GPU
runs install (``ZEROBOARD_LIGER_SOURCE``), DeepSpeed's values as ZeroBoard tunes them for one GPU. A model the
planner refuses is a result: its ``plan_error`` is recorded. The measured columns (``torch_peak_gib``,
``nvml_peak_gib``) stay null with ``not_run`` until a GPU run fills them; ``--gpu`` keeps what earlier runs measured
(``--skip-done``) and saves after every row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout_sets as hsets  # noqa: E402
import planner_heldout as h  # noqa: E402

GIB = 1 << 30
RESULTS = ROOT / "benchmarks" / "results" / "planner_heldout5.json"
NOT_RUN = "not run: no GPU in the session that built the set (the lent H200 was paused); benchmarks/heldout5.py --gpu"


def plan_row(model: str, seq: int, mbs: int, cfg: str) -> dict:
    """The planner's figures for a row, as on the H200 (or the reason it refuses the model)."""
    from zeroboard import planner
    from zeroboard.job.devices import Gpu

    gpus = [Gpu(0, "NVIDIA H200", 143771 << 20, 139 << 30, 0, 0, (9, 0))]
    job = h.job_of(model, seq, mbs, cfg, Path("/tmp/zb-heldout5"), 6, False)
    try:
        try:
            shape = planner.shape_from_config(h.MODELS[model][1])
        except planner.Untraced:  # planned from its own code (the planner of issue 34 on): traced now, or kept
            shape = planner.traces.stub(h.MODELS[model][1])
        p = planner.estimate(job, gpus, model=shape, host_available=1 << 40, trace="wait")
    except planner.PlanError as e:
        from zeroboard.words import tr

        return {"estimate_gib": None, "needed_gib": None, "plan_error": tr(e.args[0], "en")}
    return {"estimate_gib": p.peak_bytes / GIB, "needed_gib": p.needed_bytes / GIB, "phase": p.phase,
            "plan_error": None}


def base_rows() -> list[dict]:
    return [{"set": "heldout5", "family": h.MODELS[m][0], "model": m, "config": c, "seq": s, "mbs": b, "micro_batch": b,
             "accum": h.parse_config(c)["accumulation"], "torch_peak_gib": None, "nvml_peak_gib": None, "not_run": NOT_RUN}
            for m, s, b, c in hsets.HELDOUT5]


def load() -> dict:
    if RESULTS.is_file():
        return json.loads(RESULTS.read_text())
    return {"set": "heldout5", "rows": base_rows()}


def save(data: dict) -> None:
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")


def commit_of() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip()


def estimates(prefix: str) -> dict:
    """Fill ``<prefix>estimate_gib`` / ``needed_gib`` / ``plan_error`` of every row with the planner as it is now."""
    data = load()
    for r in data["rows"]:
        got = plan_row(r["model"], r["seq"], r["mbs"], r["config"])
        r.update({f"{prefix}{k}": v for k, v in got.items()})
        h.with_errors(r)
    data[f"{prefix or 'final_'}planner_commit"] = commit_of()
    return data


def tiny(a) -> int:
    """The GPU harness on CPU: the set's models at tiny widths, every row at 64 tokens (checks the harness only)."""
    rows = [("heldout5", m, 64, min(b, 2), c) for m, _s, b, c in hsets.HELDOUT5]
    a.tiny, a.kept, a.started, a.sealed = True, [], time.time(), ""
    out = Path(a.out or "/tmp/heldout5_tiny.json")
    results = h.run_rows(rows, a, out)
    h.print_table(results)
    bad = [r for r in results if "failure" in r]
    print(f"{len(results) - len(bad)}/{len(results)} tiny rows ran; results in {out}")
    return 1 if bad else 0


def gpu(a) -> int:
    """Measure the set on the H200; the measured columns are merged into the results file, row by row."""
    data = load()
    done = [r for r in data["rows"] if r.get("torch_peak_gib") is not None]
    keys = {(r["model"], r["seq"], r["mbs"], r["config"]) for r in done}
    rows = [("heldout5", m, s, b, c) for m, s, b, c in hsets.HELDOUT5 if (m, s, b, c) not in keys]
    a.tiny, a.kept, a.started, a.sealed = False, [], time.time(), ""
    out = Path(a.out or "/tmp/heldout5_gpu.json")
    measured = h.run_rows(rows, a, out)
    by = {(r["model"], r["seq"], r["micro_batch"], r["config"]): r for r in measured}
    for r in data["rows"]:
        m = by.get((r["model"], r["seq"], r["mbs"], r["config"]))
        if m and m.get("torch_peak_gib"):
            r.update({k: m[k] for k in ("torch_peak_gib", "torch_reserved_gib", "nvml_peak_gib", "nvml_peak_trainer_gib",
                                        "step_s", "speedups", "pools_gib") if k in m})
            r.pop("not_run", None)
            h.with_errors(r)
        elif m:
            r["not_run"] = f"failed: {str(m.get('failure'))[-300:]}"
    save(data)
    return 0


def liger_source() -> None:
    """Plan with Liger as the GPU runs will have it: the liger-kernel wheel they carry (``.whl``) unless one is named."""
    import os

    wheels = sorted((ROOT / ".whl").glob("liger_kernel-*.whl"))
    if not os.environ.get("ZEROBOARD_LIGER_SOURCE") and not wheels:
        raise SystemExit("no liger-kernel wheel in .whl and ZEROBOARD_LIGER_SOURCE unset: the plans would have no Liger")
    os.environ.setdefault("ZEROBOARD_LIGER_SOURCE", str(wheels[-1]) if wheels else "")
    print(f"Liger read from {os.environ['ZEROBOARD_LIGER_SOURCE']}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seal", action="store_true")
    ap.add_argument("--final", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--workdir", default="/tmp/zb-heldout5")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--grace-s", type=float, default=45)
    ap.add_argument("--row-timeout", type=float, default=300)
    ap.add_argument("--host-gib", type=float, default=100)
    a = ap.parse_args()
    if a.seal or a.final:
        liger_source()
        if a.seal and RESULTS.is_file() and any("sealed_estimate_gib" in r for r in load()["rows"]):
            raise SystemExit(f"{RESULTS} is sealed already: its sealed columns are never written again")
        data = estimates("sealed_" if a.seal else "")
        save(data)
        for r in data["rows"]:
            key = "sealed_" if a.seal else ""
            print(f"{r['model']:<15}{r['seq']:>6}{r['mbs']:>3} {r['config']:<22}"
                  f"{r.get(key + 'needed_gib') or 0:8.2f}  {r.get(key + 'plan_error') or ''}"[:160])
        return 0
    if a.tiny:
        return tiny(a)
    if a.gpu:
        return gpu(a)
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
