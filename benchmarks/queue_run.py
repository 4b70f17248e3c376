"""A queue of N demo jobs submitted at once: they must run one at a time, in order, with nothing left behind.

Each job is queued as ``zeroboard train --queue --detach`` does it (the same function), all within a second; the
dispatcher starts them as the CPU frees.  Recorded per job: when it was queued, started and ended, its status;
then the overlaps (a job that started before the previous one ended), the order, and leftover processes.

    python benchmarks/queue_run.py [--jobs 20] [--json benchmarks/results/queue.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
os.chdir(ROOT)

from zeroboard.job import spec  # noqa: E402
from zeroboard.runs import dispatcher, manager as runner, processes  # noqa: E402
from zeroboard.runs.launch import prepare_launch  # noqa: E402
from zeroboard.runs.queue import Queue  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zb-queue-"))
    os.environ["ZEROBOARD_ALLOW_PATHS"] = f"{work}:rw"
    index = work / "runs.json"
    mgr = runner.JobManager(index=index)
    outs, queued = [], []
    for i in range(args.jobs):
        job = spec.load_yaml("examples/demo.yaml")
        job.output_dir, job.max_steps = str(work / f"run-{i:02d}"), args.steps
        prepared = prepare_launch(job, gpus=[])
        assert prepared.report.ok, prepared.report.errors
        queued.append(dispatcher.enqueue(mgr, prepared, "cli").queued)
        outs.append(str((work / f"run-{i:02d}").resolve()))
    print(f"queued {args.jobs} jobs in {queued[-1] - queued[0]:.2f} s", flush=True)
    q = Queue(index)
    t0 = time.time()
    while q.entries() or any((s := mgr.state(o)) is None or s.active for o in outs):
        failed = [e for e in q.entries() if e.status == "failed"]
        if failed:
            print("failed:", [str(e.why) for e in failed])
            break
        time.sleep(2)
    states = [mgr.state(o) for o in outs]
    rows = [{"job": i, "queued": round(queued[i] - queued[0], 2), "started": round(s.started - queued[0], 2),
             "ended": round(s.ended - queued[0], 2), "status": s.status, "left": len(processes.job_processes(s))}
            for i, s in enumerate(states)]
    overlaps = sum(1 for a, b in zip(rows, rows[1:]) if b["started"] < a["ended"] - 0.5)
    in_order = all(a["started"] <= b["started"] for a, b in zip(rows, rows[1:]))
    summary = {"jobs": args.jobs, "finished": sum(r["status"] == "finished" for r in rows), "overlaps": overlaps,
               "in_order": in_order, "leftover_processes": sum(r["left"] for r in rows),
               "wall_s": round(time.time() - t0, 1),
               "mean_job_s": round(sum(r["ended"] - r["started"] for r in rows) / len(rows), 1)}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                         "summary": summary, "jobs": rows}, indent=2) + "\n")
    ok = summary["finished"] == args.jobs and not overlaps and in_order and not summary["leftover_processes"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
