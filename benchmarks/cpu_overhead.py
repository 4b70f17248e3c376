"""ZeroBoard's trainer vs a bare HF Trainer script on the CPU demo (2 processes).

For each configuration, runs `zeroboard train` and benchmarks/bare_trainer.py
alternately (same model, data, steps, batch, learning rate, DeepSpeed JSON), and
prints: launch -> training start, launch -> first logged step, launch -> exit,
the Trainer's own train_runtime, and the throughput ratio ZeroBoard / bare
(steps per second of the training loop; target >= 0.98).

    python benchmarks/cpu_overhead.py [--repeats 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

from zeroboard import workspace  # noqa: E402
from zeroboard.job import record as events  # noqa: E402
from zeroboard.job.command import cache_dir, free_port  # noqa: E402
from zeroboard.job.spec import DEMO_DATA_DIR, DEMO_MODEL  # noqa: E402

CONFIGS = [("lora", "none"), ("lora", "2"), ("full", "none")]


def run_zeroboard(out: Path, ft: str, stage: str, steps: int) -> dict:
    lr = "0.005" if ft == "lora" else "0.001"
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "zeroboard.cli", "train", "examples/demo.yaml",
                        f"--set=output_dir={out}", f"--set=finetuning_type={ft}", f"--set=deepspeed_stage={stage}",
                        f"--set=max_steps={steps}", f"--set=learning_rate={lr}", "--set=logging_steps=5"],
                       cwd=ROOT, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode:
        raise SystemExit(f"zeroboard train failed:\n{p.stderr[-2000:]}")
    evs = events.read_events(out / events.EVENTS_FILE)
    start = next(e for e in evs if e["event"] == "start")
    first = next(e for e in evs if e["event"] == "log")
    end = next(e for e in evs if e["event"] == "end")
    m = end["result"]["metrics"]
    return {"wall": wall, "to_start": start["time"] - t0, "to_first_log": first["time"] - t0,
            "train_runtime": m["train_runtime"], "steps_per_s": m["train_steps_per_second"]}


def run_bare(out: Path, ft: str, stage: str, steps: int) -> dict:
    lr = "0.005" if ft == "lora" else "0.001"
    argv = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", str(free_port()),
            str(ROOT / "benchmarks/bare_trainer.py"), "--model", DEMO_MODEL,
            "--data", f"{DEMO_DATA_DIR}/identity.json", "--data", f"{DEMO_DATA_DIR}/demo_alpaca.json",
            "--output_dir", str(out), "--finetuning", ft, "--max_steps", str(steps), "--lr", lr, "--cpu"]
    if stage != "none":
        argv += ["--deepspeed", str(cache_dir() / f"ds_z{stage}_config.json")]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    t0 = time.time()
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    if p.returncode:
        raise SystemExit(f"bare trainer failed:\n{p.stderr[-2000:]}")
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("BARE_METRICS "))
    m = json.loads(line.split(" ", 1)[1])
    return {"wall": wall, "train_runtime": m["train_runtime"], "steps_per_s": m["train_steps_per_second"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--configs", default="", help="comma list like lora-none,lora-2,full-none (default: all)")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace.allow([f"{tmp}:rw"])  # the runs' folders, outside the checkout (the path guards refuse them otherwise)
        # a first short run builds the demo model and compiles DeepSpeed's ops: not measured
        run_zeroboard(Path(tmp) / "warm", "lora", "2", 5)
        wanted = [tuple(c.split("-")) for c in a.configs.split(",") if c]
        for ft, stage in wanted or CONFIGS:
            zb, bare = [], []
            for i in range(a.repeats):
                zb.append(run_zeroboard(Path(tmp) / f"zb-{ft}-{stage}-{i}", ft, stage, a.steps))
                bare.append(run_bare(Path(tmp) / f"bare-{ft}-{stage}-{i}", ft, stage, a.steps))
            med = lambda rs, k: statistics.median(r[k] for r in rs)
            rows.append({
                "config": f"{ft} stage={stage}",
                "zb_to_start_s": med(zb, "to_start"), "zb_to_first_log_s": med(zb, "to_first_log"),
                "zb_wall_s": med(zb, "wall"), "zb_exit_overhead_s": med(zb, "wall") - med(zb, "train_runtime"),
                "bare_wall_s": med(bare, "wall"), "bare_exit_overhead_s": med(bare, "wall") - med(bare, "train_runtime"),
                "zb_steps_per_s": med(zb, "steps_per_s"), "bare_steps_per_s": med(bare, "steps_per_s"),
                "ratio": med(zb, "steps_per_s") / med(bare, "steps_per_s"),
            })
    print(f"CPU demo, 2 processes, {a.steps} steps, median of {a.repeats} (ratio = ZeroBoard / bare HF Trainer)")
    print(f"{'config':<18} {'start s':>8} {'1st log s':>9} {'wall s':>7} {'overhead s':>10} "
          f"{'bare wall s':>11} {'bare ovh s':>10} {'zb st/s':>8} {'bare st/s':>9} {'ratio':>6}")
    for r in rows:
        print(f"{r['config']:<18} {r['zb_to_start_s']:8.1f} {r['zb_to_first_log_s']:9.1f} {r['zb_wall_s']:7.1f} "
              f"{r['zb_exit_overhead_s']:10.1f} {r['bare_wall_s']:11.1f} {r['bare_exit_overhead_s']:10.1f} "
              f"{r['zb_steps_per_s']:8.2f} {r['bare_steps_per_s']:9.2f} {r['ratio']:6.3f}")
    out = ROOT / "benchmarks/results/cpu_overhead.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
