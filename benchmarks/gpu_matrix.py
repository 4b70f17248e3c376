"""The GPU matrix: ZeroBoard's runner vs a bare HF Trainer script, stage x offload x method.

A random-init Llama of about 1.1 B parameters (hidden 2048, 22 layers, 32 heads, 4 KV heads, vocab 32000), bf16,
sequence 1024, micro-batch 8, one GPU (``--gpus N``: N). Each configuration is a row of gpu_rows.py: it runs through
`zeroboard train` (the same argv the web UI starts) and through benchmarks/bare_trainer.py with what that run used.
Prints and writes: median step time, tokens/s, MFU, peak memory (torch allocator and NVML), the planner's estimate and
its error, and the bare/ZeroBoard ratio.

    python benchmarks/gpu_matrix.py --out benchmarks/results/h200.json [--configs full-none,lora-3] [--steps 10]
    python benchmarks/gpu_matrix.py --tiny --out /tmp/m.json   # the same logic on CPU, for a dry run
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_harness as gh  # noqa: E402
import gpu_rows  # noqa: E402
from zeroboard.job import devices  # noqa: E402

STAGES = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]
METHODS = ["full", "lora"]


def config_name(method: str, stage: str, offload: bool) -> str:
    return f"{method}-{stage}{'+offload' if offload else ''}"


def rows(steps: int, batch: int, bare: tuple[str, ...]) -> list[gpu_rows.Row]:
    return [gpu_rows.Row(config_name(m, st, off), m, st, off, micro_batch=batch, steps=steps, bare=bare,
                         timeout=300 if off else 200) for m in METHODS for st, off in STAGES]


def planner_estimate(job) -> float | None:
    try:
        from zeroboard import planner

        return planner.estimate(job, devices.detect_gpus()).peak_bytes / 2**30
    except Exception as e:  # the planner is optional here: report, don't stop the matrix
        print(f"planner: {type(e).__name__}: {e}", flush=True)
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", default="", help="comma list like full-none,lora-2+offload (default: all 10)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--bare", default="same", help="bare runs beside each: same (ZeroBoard's weights mode), fp32, none")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each config, in ABBA order with the next one")
    ap.add_argument("--tiny", action="store_true", help="a tiny model on CPU: checks the harness, measures nothing")
    ap.add_argument("--workdir", default="/tmp/zb-matrix")
    ap.add_argument("--gpus", type=int, default=1, help="processes (GPUs) per job; tokens/s counts all, MFU divides by all")
    ap.add_argument("--prepare-only", action="store_true", help="build the model and the data, then stop")
    ap.add_argument("--deadline-s", type=float, default=0, help="no run starts after this many seconds (0: none)")
    ap.add_argument("--grow-host-gib", type=int, default=0,
                    help="touch this much host memory first (microVMs whose memory grows on first use)")
    a = ap.parse_args()
    t_end = time.time() + a.deadline_s if a.deadline_s else None
    signal.signal(signal.SIGTERM, gh.stop_children)
    bench = gh.Bench(Path(a.workdir), a.tiny, a.gpus, a.seq)
    t = time.time()
    bench.prepare()
    print(f"model and data ready in {time.time() - t:.0f} s", flush=True)
    if a.prepare_only:
        return
    if a.grow_host_gib:
        gh.grow_host_memory(a.grow_host_gib)
    bare = tuple(m for m in a.bare.split(",") if m and m != "none")
    every = rows(a.steps, a.batch, bare)
    wanted = [c for c in a.configs.split(",") if c]
    if wanted:  # in the order asked for
        every = sorted((r for r in every if r.name in wanted), key=lambda r: wanted.index(r.name))
    meta = {"model": {**bench.shape, "seq": bench.seq, "micro_batch": a.batch}, "matmul_tflops": gh.peak_matmul_tflops(),
            "gpus_per_job": a.gpus, "host_mem_total_gib": gh.host_mem_total_gib()}
    out = Path(a.out)
    results = gpu_rows.measure(gpu_rows.pairs(every), bench, lambda r: out.write_text(json.dumps(r, indent=1) + "\n"),
                               a.repeats, t_end, meta)
    for r in every:
        entry = results["rows"][r.name]
        est = planner_estimate(gpu_rows.job_for(r, bench))
        runs = [z for z in entry["zeroboard"] if "torch_peak_gib" in z]
        if est is not None and runs and runs[0]["torch_peak_gib"]:
            entry.update(planner_gib=est, planner_error=est / runs[0]["torch_peak_gib"] - 1)
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    print_table(results)


def print_table(results: dict) -> None:
    print(f"\n{'config':<18}{'step s':>8}{'tok/s':>9}{'MFU':>7}{'torch GiB':>10}{'NVML GiB':>9}{'plan err':>9}"
          f"{'bare s':>8}{'bare/ZB':>8}")
    f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "-"  # noqa: E731
    for name, e in results["rows"].items():
        runs = [z for z in e["zeroboard"] if "step_s" in z]
        if not runs:
            print(f"{name:<18} FAILED: {(e['zeroboard'] or [{}])[-1].get('error', 'not run')[-200:]!r}")
            continue
        bare = next(iter((e.get("bare_step_s") or {}).values()), None)
        ratio = next(iter((e.get("zeroboard_over_bare") or {}).values()), None)
        print(f"{name:<18}{e['step_s']:8.3f}{e['tokens_per_s']:9.0f}{f(e.get('mfu'), '7.1%')}"
              f"{runs[0]['torch_peak_gib']:10.1f}{runs[0]['nvml_peak_gib']:9.1f}{f(e.get('planner_error'), '9.1%')}"
              f"{f(bare, '8.3f')}{f(ratio, '8.3f')}")
    if results.get("not_run"):
        print("not run:", ", ".join(results["not_run"]))


if __name__ == "__main__":
    main()
