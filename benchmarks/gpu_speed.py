"""Issue 26 on one H200: the stage x method matrix with the new defaults, in one device call with a deadline.

The 1.1 B Llama bench of docs/en/gpu-results.md (seq 1024, micro-batch 8, 20 steps), every row through
`zeroboard train`; the bare Trainer script (benchmarks/bare_trainer.py, same kernels, same optimizer, the same
DeepSpeed JSON the ZeroBoard run used) for the rows time allows, first full-none. Rows run in order until the
deadline leaves too little for the next; results are written after each row, so a stopped call keeps them.

ZeRO rows can profile their last steps (ZEROBOARD_PROFILE_STEPS, training/profiling.py); those steps are left out
of the median.

    python benchmarks/gpu_speed.py --out $OUT/h200_speed.json --deadline-s 430 [--rows full-none,full-2]
    python benchmarks/gpu_speed.py --tiny --out /tmp/s.json      # the harness on CPU; measures nothing
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_matrix as gm  # noqa: E402
from zeroboard.job import record as events, spec as specmod  # noqa: E402

# name -> (method, stage, offload, micro-batch, steps, row timeout s, profile steps, bare)
ROWS = {
    "full-none": ("full", "none", False, 8, 20, 80, "", True),
    "full-2": ("full", "2", False, 8, 20, 100, "18:20", False),
    "full-3": ("full", "3", False, 8, 20, 110, "18:20", False),
    "lora-none": ("lora", "none", False, 8, 20, 80, "", False),
    "lora-none-bare": ("lora", "none", False, 8, 20, 70, "", True),
    "lora-2": ("lora", "2", False, 8, 20, 90, "", False),
    "lora-3": ("lora", "3", False, 8, 20, 110, "18:20", False),
    "full-2+offload": ("full", "2", True, 8, 12, 120, "", False),
    "full-3+offload": ("full", "3", True, 8, 12, 130, "", False),
    "lora-none-mb16": ("lora", "none", False, 16, 20, 80, "", False),
}
ORDER = list(ROWS)


def timed_job(argv: list[str], timeout: float, **kw):
    """gm.run_job with a timeout: the job's whole process group is stopped when it runs past it."""
    import subprocess

    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)
    gm._children.append(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        err = (err or "") + f"\n[gpu_speed] stopped after {timeout:.0f} s"
    finally:
        gm._children.remove(p)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def median_steps(run_dir: Path, skip_last: int) -> float | None:
    steps = gm.step_times(events.read_events(run_dir / events.EVENTS_FILE), skip=2)
    steps = steps[: len(steps) - skip_last] if skip_last else steps
    return statistics.median(steps) if steps else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", default="", help="comma list of row names, in order (default: all, in ORDER)")
    ap.add_argument("--deadline-s", type=float, default=430, help="seconds from now after which no row starts")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--workdir", default="/tmp/zb-matrix")
    ap.add_argument("--peak-tflops", type=float, default=0, help="skip measuring the matmul peak (0: measure it)")
    a = ap.parse_args()
    t_end = time.time() + a.deadline_s
    signal.signal(signal.SIGTERM, gm.stop_children)
    shape = gm.TINY if a.tiny else gm.BIG
    seq = 64 if a.tiny else 1024
    work = Path(a.workdir)
    from zeroboard import workspace

    runs = Path(f"{work}-runs")
    workspace.allow([f"{work}:rw", f"{runs}:rw"])
    model_dir, data = work / ("model-tiny" if a.tiny else "model-1b"), work / f"data-{seq}.json"
    if not (model_dir / "config.json").is_file():
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from gpu_matrix import make_model; "
                f"from pathlib import Path; make_model(Path({str(model_dir)!r}), {shape!r}, {seq})")
        import subprocess

        subprocess.run([sys.executable, "-c", code], check=True)
    gm.make_data(data, shape["vocab_size"], seq)
    peak = a.peak_tflops or gm.peak_matmul_tflops()
    out = Path(a.out)
    results = json.loads(out.read_text()) if out.is_file() else {"rows": []}
    results.update(model={**shape, "seq": seq}, matmul_tflops=peak, deadline_s=a.deadline_s)
    names = [n for n in a.rows.split(",") if n] or ORDER
    results["not_run"] = [n for n in results.get("not_run", []) if n not in names]  # this call says again
    for name in names:
        method, stage, offload, batch, steps, timeout, profile, bare = ROWS[name]
        if a.tiny:
            batch, steps, timeout = 2, 6, 300
        left = t_end - time.time()
        if left < 0.6 * timeout:
            results.setdefault("not_run", []).append(name)
            print(f"{name}: not run ({left:.0f} s left)", flush=True)
            continue
        if name.endswith("-bare"):  # the bare script alone, beside the row ZeroBoard ran before
            row = next((r for r in results["rows"] if r["config"] == name.removesuffix("-bare") and "step_s" in r), None)
            if row is None:
                continue
            b = run_bare(job_for(a, name, model_dir, work, data, method, stage, offload, batch, steps), data,
                         row["zeroboard"].get("speedups") or {}, Path(row["ds_config_used"]) if row.get("ds_config_used")
                         else None, min(timeout, left + 30))
            row["bare"] = b
            if "step_s" in b:
                row["ratio"] = b["step_s"] / row["step_s"]
        else:
            row = run_row(a, name, model_dir, work, data, method, stage, offload, batch, steps, min(timeout, left + 30),
                          profile, bare, shape, seq, peak)
        print(json.dumps({k: v for k, v in row.items() if k not in ("zeroboard", "bare")} | {
            "error": row["zeroboard"].get("error", "")[-300:]}), flush=True)
        results["rows"] = [r for r in results["rows"] if r["config"] != row["config"]] + [row]
        out.write_text(json.dumps(results, indent=2))
    print_table(results)


def job_for(a, name, model_dir, work, data, method, stage, offload, batch, steps) -> specmod.JobSpec:
    seq = 64 if a.tiny else 1024
    job = specmod.JobSpec(
        model_name_or_path=str(model_dir), finetuning_type=method, dataset_dir=str(work), dataset=[str(data)],
        cutoff_len=seq, learning_rate=1e-5 if method == "full" else 1e-4, max_steps=steps, per_device_train_batch_size=batch,
        precision="fp32" if a.tiny else "bf16", logging_steps=1, lora_rank=16, lora_alpha=32,
        output_dir=str(Path(f"{work}-runs") / f"speed-{name}-{int(time.time())}"), device_type="cpu" if a.tiny else "cuda",
        num_processes=1, deepspeed_stage=stage, offload=offload, lr_scheduler_type="constant")
    if a.tiny and method == "full" and stage == "none":
        job = dataclasses.replace(job, precision="bf16")  # the split master weights run on CPU too
    return job


def run_row(a, name, model_dir, work, data, method, stage, offload, batch, steps, timeout, profile, bare, shape, seq,
            peak) -> dict:
    config = name
    job = job_for(a, name, model_dir, work, data, method, stage, offload, batch, steps)
    env_profile = {"ZEROBOARD_PROFILE_STEPS": profile} if profile and not a.tiny else {}
    zb = run_zeroboard(job, work, timeout, env_profile)
    row = {"config": config, "micro_batch": batch, "steps": steps, "zeroboard": zb}
    if "error" in zb:
        return row
    skip_last = int(profile.split(":")[1]) - int(profile.split(":")[0]) + 1 if env_profile else 0
    zb["step_s"] = median_steps(Path(job.output_dir), skip_last) or zb["step_s"]
    tps = batch * seq / zb["step_s"]
    row.update(tokens_per_s=tps, step_s=zb["step_s"], nvml_peak_gib=zb["nvml_peak_gib"], torch_peak_gib=zb["torch_peak_gib"],
               weights=(zb.get("speedups") or {}).get("weights"))
    if peak:
        row["mfu"] = tps * gm.flops_per_token(shape, seq, method) / (peak * 1e12)
    run_dir = Path(job.output_dir)
    if (run_dir / "ds_config.json").is_file():
        row["ds_config_used"] = str(run_dir / "ds_config.json")
    for f, key in (("profile.json", "profile"), ("ds_config.resolved.json", "ds_config_resolved")):
        if (run_dir / f).is_file():
            row[key] = json.loads((run_dir / f).read_text())
    est = gm.planner_estimate(job)
    if est is not None and zb["torch_peak_gib"]:
        row.update(planner_gib=est, planner_error=(est - zb["torch_peak_gib"]) / zb["torch_peak_gib"])
    if bare:
        ds = run_dir / "ds_config.json"
        b = run_bare(job, data, zb.get("speedups") or {}, ds if ds.is_file() else None, timeout)
        row["bare"] = b
        if "step_s" in b:
            row["ratio"] = b["step_s"] / zb["step_s"]
    return row


def run_zeroboard(job: specmod.JobSpec, work: Path, timeout: float, env: dict) -> dict:
    """gm.run_zeroboard with a timeout and extra environment."""
    path = work / f"{Path(job.output_dir).name}.yaml"
    path.write_text(specmod.dump_yaml(job, full=False))
    t0 = time.time()
    cmd = [sys.executable, "-m", "zeroboard.cli", "train", str(path)]
    p, sampler = gm.sampled(lambda: timed_job(cmd, timeout, cwd=gm.ROOT, env={**os.environ, **env}))
    evs = events.read_events(Path(job.output_dir) / events.EVENTS_FILE) if (Path(job.output_dir) / events.EVENTS_FILE).is_file() else []
    if p.returncode:
        said = [e.get("message", "") for e in evs if e["event"] == "error"]
        return {"error": "; ".join(said)[:1500] or ((p.stderr or "") + (p.stdout or ""))[-1500:]}
    logs = [e for e in evs if e["event"] == "log"]
    start = next(e for e in evs if e["event"] == "start")
    mem = logs[-1]["memory"][0]
    return {"step_s": statistics.median(gm.step_times(evs, skip=2)), "wall_s": time.time() - t0,
            "torch_peak_gib": mem.get("torch_peak_bytes", 0) / 2**30, "nvml_peak_gib": sampler.peak / 2**30,
            "speedups": start.get("speedups"), "loss_first_last": [logs[0]["loss"], logs[-1]["loss"]]}


def run_bare(job: specmod.JobSpec, data: Path, speedups: dict, ds: Path | None, timeout: float) -> dict:
    argv = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "1", "--master_port", str(gm.free_port()),
            str(gm.ROOT / "benchmarks/bare_trainer.py"), "--model", job.model_name_or_path, "--data", str(data),
            "--output_dir", job.output_dir + "-bare", "--finetuning", job.finetuning_type, "--max_steps", str(job.max_steps),
            "--batch", str(job.per_device_train_batch_size), "--cutoff", str(job.cutoff_len), "--lr", str(job.learning_rate),
            "--logging_steps", "1", "--lora_r", str(job.lora_rank), "--scheduler", "constant"]
    argv += ["--deepspeed", str(ds)] if ds else []
    argv += (["--bf16"] if job.precision == "bf16" else []) + (["--cpu"] if job.device_type == "cpu" else [])
    if speedups.get("liger"):
        argv += ["--liger_config", json.dumps(speedups.get("liger_config") or {})]
    argv += {"split": ["--split_master"], "bf16_base": ["--base16"], "pure_bf16": ["--pure_bf16"]}.get(
        speedups.get("weights"), [])
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    if job.device_type == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="", DS_ACCELERATOR="cpu")
    p, sampler = gm.sampled(lambda: timed_job(argv, timeout, cwd=gm.ROOT, env=env))
    if p.returncode:
        return {"error": ((p.stderr or "") + (p.stdout or ""))[-1500:]}
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("BARE_METRICS "))
    m = json.loads(line.split(" ", 1)[1])
    return {"step_s": statistics.median(m["step_times"][2:]), "torch_peak_gib": m.get("torch_peak_bytes", 0) / 2**30,
            "nvml_peak_gib": sampler.peak / 2**30}


def print_table(results: dict) -> None:
    print(f"\n{'config':<16}{'mb':>4}{'step s':>8}{'tok/s':>9}{'MFU':>7}{'NVML GiB':>9}{'plan err':>9}{'ratio':>7}  weights")
    for r in results["rows"]:
        if "step_s" not in r:
            print(f"{r['config']:<16} FAILED: {r['zeroboard'].get('error', '')[-200:]!r}")
            continue
        f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "-"  # noqa: E731
        print(f"{r['config']:<16}{r['micro_batch']:>4}{r['step_s']:8.3f}{r['tokens_per_s']:9.0f}{f(r.get('mfu'), '7.1%')}"
              f"{r['nvml_peak_gib']:9.1f}{f(r.get('planner_error'), '9.1%')}{f(r.get('ratio'), '7.3f')}  {r.get('weights')}")
    if results.get("not_run"):
        print("not run:", ", ".join(results["not_run"]))


if __name__ == "__main__":
    main()
