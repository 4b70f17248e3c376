"""``zeroboard plan --fit`` with its probes, against a measured grid, on three held-out setups (issue 34).

    python benchmarks/fit_probe.py --out benchmarks/results/fit_probe.json     # one H200: probes, then the grid
    python benchmarks/fit_probe.py --tiny --out /tmp/fit_probe.json            # the same harness on CPU, tiny shapes
    python benchmarks/fit_probe.py --empty --out benchmarks/results/fit_probe.json   # the file, GPU rows not run

A setup is one job (model, cutoff, LoRA or full, per-device batch = micro-batch x accumulation). For each: the probe
phase exactly as ``--fit`` runs it (:func:`zeroboard.runs.probes.fit_measured`, budget ``--probe-budget``, default
the product's 180 s), its pick, the time it spent; then the grid: every setting of GRID_SETTINGS (no DeepSpeed and
ZeRO-2 at each micro-batch that keeps the batch) measured through the same runner with the same steps, those the
probes measured reused (their key is the same). ``share`` = the pick's tokens/s / the grid's fastest (goal >= 0.97).
Results are written after every setting (a call that runs out of time keeps what it measured); ``--skip-done`` keeps
a file's measured settings and setups.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import planner_heldout as h  # noqa: E402 - models, data and jobs as the held-out harness makes them

# name: (model, cutoff, finetuning, per-device batch); the first is long-cutoff with accumulation, like issue 34's
# Gemma-3-1B case (cutoff 8192, global batch 8); none of the three families was in a --fit grid before
SETUPS = {
    "olmo2-1b full 8192 x8": ("olmo2-1b", 8192, "full", 8),
    "pythia-1.4b full 2048 x4": ("pythia-1.4b", 2048, "full", 4),
    "helium-2b lora 4096 x4": ("helium-2b", 4096, "lora", 4),
}
GRID_STAGES = ("none", "2")
GIB = 1 << 30
NOT_RUN = "not run yet on the GPU: bash benchmarks/h200_run.sh fitprobe SETUPS (benchmarks/fit_probe.py)"


def job_for(name: str, work: Path, tiny: bool):
    model, seq, ft, batch = SETUPS[name]
    job = h.job_of(model, 64 if tiny else seq, batch, f"{ft}-none", work, 5, tiny)
    return replace(job, gradient_accumulation_steps=1, output_dir=str(work / "runs" / name.replace(" ", "_")))


def grid(job) -> list:
    """The grid's settings as --fit choices (the planner's own, so their probe keys are --fit's)."""
    from zeroboard import planner

    gpus = h_gpus()
    choices = planner.fit(job, gpus, trace="wait", cpu=job.device_type == "cpu")
    return [c for c in choices if c.stage in GRID_STAGES and not c.offload and not c.checkpointing]


def h_gpus():
    from zeroboard.job import devices

    return devices.detect_gpus()


def run_setup(name: str, a, results: dict) -> None:
    from zeroboard.runs import probes

    job = job_for(name, Path(a.workdir), a.tiny)
    row = results.setdefault(name, {"setup": name, "model": SETUPS[name][0], "seq": job.cutoff_len,
                                    "finetuning": SETUPS[name][2], "per_device_batch": SETUPS[name][3]})
    gpus = h_gpus()
    if not row.get("pick"):  # a setup of the --empty file (pick null) is probed as a new one
        row.pop("not_run", None)
        t0 = time.time()
        choices, measured, pick, source = probes.fit_measured(job, gpus, a.probe_budget, trace="wait")
        best = next(c for c in choices if c.fits is not False)
        row.update(pick=best.overrides(), pick_words=str(pick or ""), source=source, probe_seconds=round(time.time() - t0, 1),
                   probed={f"{c.stage}/{c.micro_batch}x{c.accumulation}/ckpt={c.checkpointing}/off={c.offload}":
                           str(measured.get(id(c))) for c in choices if measured and id(c) in measured})
        save(a, results)
    kept = probes.Store().read()
    device = probes.where(job, gpus)
    text = probes._config_text(job)
    measured_grid = row["grid"] = row.get("grid") or {}
    for c in grid(job):
        label = f"{c.stage}/{c.micro_batch}x{c.accumulation}"
        if label in measured_grid or time.time() > a.deadline:
            continue
        key = probes.key_of(job, c, device, text)
        p = kept.get(key)
        if p is None or p.status not in ("measured", "oom"):
            p = probes.run_one(job, c, key, time.time() + a.row_timeout, probes.JobManager(), gpus)
            if p.status in ("measured", "oom"):
                probes.Store().add(p)
        if p.status != "busy":  # the devices taken by another job: measured on a later call
            measured_grid[label] = {"status": p.status, "tokens_per_s": p.tokens_per_s, "seconds": p.seconds}
        save(a, results)
    done = {k: v["tokens_per_s"] for k, v in measured_grid.items() if v["tokens_per_s"]}
    pick = row["pick"]
    mine = done.get(f"{pick['deepspeed_stage']}/{pick['per_device_train_batch_size']}x{pick['gradient_accumulation_steps']}")
    if done and mine:
        row.update(fastest=max(done, key=done.get), share_of_fastest=mine / max(done.values()))
    save(a, results)


def save(a, results: dict) -> None:
    a.out.write_text(json.dumps({"steps": 5, "tiny": a.tiny, "command": "python " + " ".join(sys.argv),
                                 "setups": list(results.values())}, indent=1) + "\n")


def predicted(name: str) -> list[dict]:
    """The step-time model's first settings for a setup on an H200 (what --fit says without the devices)."""
    from zeroboard import planner
    from zeroboard.job.devices import Gpu

    gpus = [Gpu(0, "NVIDIA H200", 143771 << 20, 139 << 30, 0, 0, (9, 0))]
    job = replace(job_for(name, Path("/tmp/zb-fit-probe"), False), device_type="cuda", precision="bf16")
    shape = planner.traces.stub(h.MODELS[SETUPS[name][0]][1])  # no model folder: planned from the config itself
    choices = [c for c in planner.fit(job, gpus, model=shape, trace="wait") if c.fits is not False][:3]
    return [{**c.overrides(), "predicted_tokens_per_s": round(c.tokens_per_s), "needed_gib": round(c.plan.needed_bytes / GIB, 2)}
            for c in choices]


def empty() -> dict:
    """The results file before the GPU run: each setup, the model's predicted first settings, the GPU columns null."""
    return {"steps": 5, "provenance": NOT_RUN + "; predicted: planner.fit on an H200 (139 GiB free), no probes, Liger from"
            " the carried wheel: ZEROBOARD_LIGER_SOURCE=.whl/liger_kernel-0.8.5-py3-none-any.whl"
            " python benchmarks/fit_probe.py --empty --out benchmarks/results/fit_probe.json",
            "setups": [{"setup": n, "model": m, "seq": s, "finetuning": f, "per_device_batch": b, "predicted": predicted(n),
                        "pick": None, "probe_seconds": None, "grid": None, "share_of_fastest": None, "not_run": NOT_RUN}
                       for n, (m, s, f, b) in SETUPS.items()]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/fit_probe.json"))
    ap.add_argument("--only", default="")
    ap.add_argument("--workdir", default="/tmp/zb-fit-probe")
    ap.add_argument("--probe-budget", type=float, default=180)
    ap.add_argument("--budget-s", type=float, default=560, help="seconds from the start: start nothing after this")
    ap.add_argument("--row-timeout", type=float, default=150)
    ap.add_argument("--skip-done", type=Path)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on CPU: checks the harness, measures nothing")
    ap.add_argument("--empty", action="store_true", help="write the results file with the GPU rows not run")
    a = ap.parse_args()
    if a.empty:
        a.out.write_text(json.dumps(empty(), indent=1) + "\n")
        return 0
    a.deadline = time.time() + a.budget_s
    from zeroboard import workspace

    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    workspace.allow([f"{work}:rw"])
    os.environ.setdefault("ZEROBOARD_CACHE", str(work / "cache"))
    os.environ.setdefault("ZEROBOARD_WAIT_FOREIGN_S", "600")  # another workspace's job on the devices: wait its turn
    names = [n for n in SETUPS if not a.only or n in a.only.split(",")]
    seqs = {}
    for n in names:
        seqs.setdefault(SETUPS[n][0], []).append(64 if a.tiny else SETUPS[n][1])
    h.prepare_models(list(seqs), work, seqs, a.tiny)
    results = {r["setup"]: r for r in json.loads(a.skip_done.read_text())["setups"]} if a.skip_done else {}
    for n in names:
        if time.time() < a.deadline:
            run_setup(n, a, results)
    for r in results.values():
        print(f"{r['setup']:<28} pick {r.get('pick')} {r.get('pick_words', '')}  share {r.get('share_of_fastest')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
