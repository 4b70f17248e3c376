"""The plan in the run record: ``plan.json`` written at launch, and the measured peaks read back next to it."""

from __future__ import annotations

import json
from pathlib import Path

from .. import files
from ..job import devices
from ..job.record import EVENTS_FILE, PLAN_FILE, read_events
from ..job.spec import JobSpec
from . import estimate
from .memory import Plan
from .shapes import PlanError


def save_plan(plan: Plan, output_dir: str | Path) -> Path:
    """Write the estimate into the run dir (the launcher calls this before starting the job)."""
    path = Path(output_dir) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_text_atomic(path, json.dumps(plan.to_dict(), indent=2, default=str) + "\n")
    return path


def record_plan(spec: JobSpec, output_dir: str | Path, gpus: list[devices.Gpu] | None = None) -> Plan | None:
    """Estimate and save ``plan.json`` into the run dir at launch; None (nothing written) if it cannot be planned."""
    try:
        plan = estimate(spec, gpus)
    except PlanError:
        return None
    save_plan(plan, output_dir)
    return plan


def measured_vs_estimate(run_dir: str | Path, output: str | Path | None = None) -> dict | None:
    """Per-rank measured peak (from events.jsonl) next to the saved estimate, with the error; None without a plan.

    GPU ranks compare the torch allocator peak with the estimated peak (and NVML with the estimate plus
    context, when the trainer records ``nvml_peak_bytes``); CPU ranks compare RSS with the per-process estimate.
    """
    run = Path(run_dir)
    try:
        plan = json.loads((run / PLAN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    gpu = plan["setup"]["device"] == "cuda"
    key, est = ("torch_peak_bytes", plan["peak_bytes"]) if gpu else ("rss_peak_bytes", plan["host_bytes"])
    peaks: dict[int, dict] = {}
    for e in read_events(Path(output or run) / EVENTS_FILE):
        for m in e.get("memory") or []:
            cur = peaks.setdefault(int(m["rank"]), {})
            for k, v in m.items():
                if k != "rank" and isinstance(v, (int, float)):
                    cur[k] = max(cur.get(k, 0), v)
    ranks = []
    for rank, m in sorted(peaks.items()):
        row = {"rank": rank, "measured_bytes": m.get(key), "error": None}
        if m.get(key):
            row["error"] = (est - m[key]) / m[key]
        if gpu and m.get("nvml_peak_bytes"):
            row["nvml_peak_bytes"] = m["nvml_peak_bytes"]
            row["nvml_error"] = (plan["needed_bytes"] - m["nvml_peak_bytes"]) / m["nvml_peak_bytes"]
        ranks.append(row)
    errors = [r["error"] for r in ranks if r["error"] is not None]
    return {"what": key, "estimate_bytes": est, "ranks": ranks,
            "worst_error": max(errors, key=abs) if errors else None}
