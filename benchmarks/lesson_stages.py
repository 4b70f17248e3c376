"""The ZeRO lesson measured: examples/lesson_zero.yaml under stage none, 2, 3 and 2 + offload on 2 CPU processes.

Each setting is trained ``--repeats`` times through ``zeroboard train`` (the command a user types), into a runs index
of its own; per run it keeps the measured RSS peak of each rank (the trainer's log events), the wall time, and the
figure the Runs tab puts beside it: the same job planned per GPU on 2 × H200 (``runs.compare.gpu_plan``, with the
DeepSpeed config the run used). The lesson holds when the measured peaks fall none > 2 > 3 with every repeat, and
the planned GPU figure of 2 + offload is the lowest.

    python benchmarks/lesson_stages.py [--repeats 2] [--json benchmarks/results/lesson_stages.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

from zeroboard.runs import compare, summary  # noqa: E402

SETTINGS = (("none", False), ("2", False), ("3", False), ("2", True))
MIB = 1 << 20


def train(out: Path, index: Path, stage: str, offload: bool) -> float:
    argv = [sys.executable, "-m", "zeroboard.cli", "train", "examples/lesson_zero.yaml", f"--set=output_dir={out}",
            f"--set=deepspeed_stage={stage}", f"--set=offload={str(offload).lower()}"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "ZEROBOARD_RUNS_INDEX": str(index)})
    if done.returncode != 0:
        raise SystemExit(f"{out.name} did not train:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.monotonic() - start


def measured(run: Path) -> list[int]:
    return summary.peaks_of(summary.all_events(run), "rss_peak_bytes")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/lesson_stages.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="zb-lesson-") as tmp:
        index = Path(tmp) / "runs.json"
        # the runs (and the DeepSpeed configs the plan per GPU reads back) sit outside the workspace: allowed here
        os.environ["ZEROBOARD_ALLOW_PATHS"] = f"{Path(tmp).resolve()}:rw"
        for repeat in range(args.repeats):
            for stage, offload in SETTINGS:
                name = f"lesson-{stage}{'-offload' if offload else ''}-{repeat}"
                run = Path(tmp) / name
                wall = train(run, index, stage, offload)
                fig = compare.gpu_figure(compare.gpu_plan(run, 2))
                row = {"setting": f"{stage}{' + offload' if offload else ''}", "repeat": repeat, "wall_s": round(wall, 1),
                       "rss_peak_mib": [round(p / MIB) for p in measured(run)],
                       "plan_per_gpu_mib": round(fig.peak / MIB) if fig else None, "formula": fig.formula if fig else None}
                rows.append(row)
                print(json.dumps(row), flush=True)
                result = summarize(rows)
                Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, ensure_ascii=False))
    return 0 if result["order_none_2_3_holds"] and result["offload_lowest_on_gpu"] else 1


def summarize(rows: list[dict]) -> dict:
    """What the runs so far show (kept after each run: an interrupted benchmark keeps what it measured)."""
    worst: dict[str, list[int]] = {}
    for r in rows:
        worst.setdefault(r["setting"], []).append(max(r["rss_peak_mib"] or [0]))
    repeats = min(len(worst.get(k, [])) for k in ("none", "2", "3"))
    order = repeats > 0 and all(worst["none"][i] > worst["2"][i] > worst["3"][i] for i in range(repeats))
    gpu = {r["setting"]: r["plan_per_gpu_mib"] for r in rows}
    return {"job": "examples/lesson_zero.yaml", "processes": 2, "gpu": "2 × H200 (planned)", "runs": rows,
            "worst_rank_mib": worst, "order_none_2_3_holds": order,
            "offload_lowest_on_gpu": len(gpu) == len(SETTINGS) and all(v is not None for v in gpu.values())
            and min(gpu, key=gpu.get) == "2 + offload"}


if __name__ == "__main__":
    raise SystemExit(main())
