"""One row of a GPU matrix, defined once: the job it runs through ZeroBoard, the bare script beside it, and the order.

A :class:`Row` is one job: method, stage, offload, micro-batch, steps, and what it changes against ZeroBoard's
defaults: job fields (``spec``), the trainer's environment (``env``: ``ZEROBOARD_DS_TUNING=off`` runs the presets as
written, ``ZEROBOARD_TRIAL`` switches a speed change on trial, training/trials.py), or DeepSpeed values on top of the
JSON ZeroBoard would use (``ds``: written as a file of the user's own, which ZeroBoard runs as written). :func:`job_for`
makes its job; :func:`run_zeroboard` runs it through ``zeroboard train`` (the web UI's argv); :func:`run_bare` runs
``benchmarks/bare_trainer.py`` with what that run used: the DeepSpeed JSON it wrote (``ds_config.json``), its weights
mode and Liger kernels, the same scheduler, and the environment ``zeroboard train``'s command gave the ranks.

:func:`measure` runs rows in blocks of two in ABBA order (A B B A: each row's two runs on both sides of the other's,
so a drift of the machine during the call falls on both), a row's bare run after ZeroBoard's in its first repeat and
before it in the second, and writes the results after every run: a call that is stopped keeps what it measured, and
lists what it did not run. Step time: see gpu_harness.step_times; a row's figure is the median of its runs' medians.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import gpu_harness as gh
from zeroboard.job import command, devices, dstune, placement, record as events, spec as specmod


@dataclass(frozen=True)
class Row:
    name: str
    method: str  # "full" | "lora"
    stage: str  # "none" | "2" | "3"
    offload: bool = False
    micro_batch: int = 8
    steps: int = 20
    spec: dict = field(default_factory=dict)  # job fields changed
    env: dict = field(default_factory=dict)  # the trainer's environment
    ds: dict = field(default_factory=dict)  # DeepSpeed keys set on top of ZeroBoard's JSON ({"zero_optimization": {...}})
    bare: tuple[str, ...] = ()  # the bare script beside it: "same" (ZeroBoard's weights mode), "fp32" (fp32 master)
    profile: str = ""  # ZEROBOARD_PROFILE_STEPS, "first:last" (left out of the step times)
    timeout: float = 150  # s, one run
    goal: str = ""  # what the issue asks of it, in words


def job_for(row: Row, bench: gh.Bench, tag: str = "") -> specmod.JobSpec:
    """The row's job; on CPU (``bench.tiny``) the same with the tiny model, micro-batch 2 and at most 6 steps."""
    tiny = bench.tiny
    job = specmod.JobSpec(
        model_name_or_path=str(bench.model_dir), finetuning_type=row.method, dataset_dir=str(bench.work),
        dataset=[str(bench.data)], cutoff_len=bench.seq, learning_rate=1e-5 if row.method == "full" else 1e-4,
        max_steps=min(row.steps, 6) if tiny else row.steps, per_device_train_batch_size=2 if tiny else row.micro_batch,
        precision="bf16" if not tiny or row.stage == "none" else "fp32", logging_steps=1, lora_rank=16, lora_alpha=32,
        output_dir=str(bench.runs / f"{slug(row.name)}{tag}-{int(time.time() * 1000) % 10**8}"),
        device_type="cpu" if tiny else "cuda", num_processes=bench.gpus, deepspeed_stage=row.stage,
        offload=row.offload, lr_scheduler_type="constant")
    job = replace(job, **row.spec)
    if tiny:  # no GPU: the GPU-only kernels off, the rest runs
        job = replace(job, liger_kernel="off", extra_args={k: v for k, v in job.extra_args.items() if k != "torch_compile"})
    if row.ds:
        job = replace(job, deepspeed=write_ds(row, job, bench))
    return job


def slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "+-" else "_" for c in name)


def write_ds(row: Row, job: specmod.JobSpec, bench: gh.Bench) -> str:
    """The JSON ZeroBoard would use for this job (its preset with ZeroBoard's values; ``"_base": "preset"``: the preset
    as written), with the row's keys set. Values: ``"layer"`` one decoder layer's elements, ``"params"`` the model's,
    None removes the key."""
    where = placement.place(job, [])
    cfg, _ = dstune.for_run(where.ds_config, where.ds_path, bench.gpus, job.model_name_or_path,
                            job.gradient_checkpointing, job.finetuning_type == "lora", job.lora_rank, job.lora_target)
    cfg = copy.deepcopy(where.ds_config if row.ds.get("_base") == "preset" else cfg)
    facts = dstune.facts(job.model_name_or_path)
    named = {"layer": facts.layer_params, "params": facts.params}
    for key, value in row.ds.items():
        if key == "_base":
            continue
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key].update({k: named.get(v, v) if isinstance(v, str) else v for k, v in value.items()})
            cfg[key] = {k: v for k, v in cfg[key].items() if v is not None}
        else:
            cfg[key] = value
    path = bench.runs / f"{slug(row.name)}.ds.json"
    path.write_text(json.dumps(cfg, indent=2))
    return str(path)


# --- one run each way ---------------------------------------------------------------

def run_zeroboard(row: Row, job: specmod.JobSpec, bench: gh.Bench) -> dict:
    path = bench.work / f"{Path(job.output_dir).name}.yaml"
    path.write_text(specmod.dump_yaml(job, full=False))
    env = {**os.environ, **row.env, **({"ZEROBOARD_PROFILE_STEPS": row.profile} if row.profile and not bench.tiny else {})}
    t0 = time.time()
    p, sampler = gh.sampled(lambda: gh.run_job([sys.executable, "-m", "zeroboard.cli", "train", str(path)], row.timeout,
                                                cwd=gh.ROOT, env=env))
    wall = time.time() - t0
    out = Path(job.output_dir)
    evs = events.read_events(out / events.EVENTS_FILE) if (out / events.EVENTS_FILE).is_file() else []
    if p.returncode:
        said = [e.get("message", "") for e in evs if e["event"] == "error"]  # the rank's own words first
        return {"error": "; ".join(said)[:1500] or ((p.stderr or "") + (p.stdout or ""))[-1500:], "wall_s": wall}
    profiled = 0
    if "ZEROBOARD_PROFILE_STEPS" in env:
        first, _, last = env["ZEROBOARD_PROFILE_STEPS"].partition(":")
        profiled = int(last or first) - int(first) + 1
    steps = gh.step_times(evs, skip=2, skip_last=profiled)
    logs = [e for e in evs if e["event"] == "log"]
    start = next(e for e in evs if e["event"] == "start")
    mem = logs[-1].get("memory") or [{}]
    res = {"step_s": statistics.median(steps), "steps_s": steps, "wall_s": wall,
           "torch_peak_gib": mem[0].get("torch_peak_bytes", 0) / 2**30, "nvml_peak_gib": sampler.peak / 2**30,
           "nvidia_smi_checks": sampler.checks[-3:], "speedups": start.get("speedups"),
           "losses": [e["loss"] for e in logs if "loss" in e], "output_dir": str(out),
           "real_tokens_per_s": statistics.median(e["tokens_per_sec"] for e in logs[2:]) if len(logs) > 2 else None}
    for name, key in ((events.DS_CONFIG_FILE, "ds_config"), ("profile.json", "profile")):
        if (out / name).is_file():
            res[key] = json.loads((out / name).read_text())
    return res


BARE_WEIGHTS = {"split": ["--split_master"], "bf16_base": ["--base16"], "pure_bf16": ["--pure_bf16"]}


def run_bare(row: Row, job: specmod.JobSpec, bench: gh.Bench, zb: dict, mode: str) -> dict:
    """The bare script with what ZeroBoard's run ``zb`` used; ``mode`` "fp32": fp32 master weights + autocast instead
    of ZeroBoard's weights mode (the Trainer's own way, for the full-none row)."""
    speedups = zb.get("speedups") or {}
    # the environment ZeroBoard's command gives its ranks (allocator, NCCL, the cleaned arch list, threads)
    env = {**os.environ, **command.build(job, placement.place(job, devices.detect_gpus())).env}
    argv = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", str(bench.gpus), "--master_port",
            str(command.free_port()), str(gh.ROOT / "benchmarks/bare_trainer.py"), "--model", job.model_name_or_path,
            "--data", str(bench.data), "--output_dir", job.output_dir + f"-bare-{mode}", "--finetuning",
            job.finetuning_type, "--max_steps", str(job.max_steps), "--batch", str(job.per_device_train_batch_size),
            "--cutoff", str(job.cutoff_len), "--lr", str(job.learning_rate), "--logging_steps", "1", "--lora_r",
            str(job.lora_rank), "--lora_alpha", str(job.lora_alpha), "--scheduler", job.lr_scheduler_type]
    ds = Path(zb["output_dir"]) / events.DS_CONFIG_FILE
    argv += ["--deepspeed", str(ds)] if ds.is_file() else []
    argv += (["--bf16"] if job.precision == "bf16" else []) + (["--cpu"] if job.device_type == "cpu" else [])
    if speedups.get("liger"):  # the same kernels ZeroBoard chose
        argv += ["--liger_config", json.dumps(speedups.get("liger_config") or {})]
    if mode == "same":
        argv += BARE_WEIGHTS.get(speedups.get("weights"), [])
    extra = {k: v for k, v in job.extra_args.items() if k == "torch_compile"}
    argv += ["--extra_args", json.dumps(extra)] if extra else []
    t0 = time.time()
    p, sampler = gh.sampled(lambda: gh.run_job(argv, row.timeout, cwd=gh.ROOT, env=env))
    if p.returncode:
        return {"error": ((p.stderr or "") + (p.stdout or ""))[-1500:], "wall_s": time.time() - t0}
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("BARE_METRICS "))
    m = json.loads(line.split(" ", 1)[1])
    return {"step_s": statistics.median(m["step_times"][2:]), "steps_s": m["step_times"][2:], "wall_s": time.time() - t0,
            "torch_peak_gib": m.get("torch_peak_bytes", 0) / 2**30, "nvml_peak_gib": sampler.peak / 2**30,
            "losses": m.get("losses", [])}


# --- the order, the deadline, the results --------------------------------------------

def plan(blocks: list[list[Row]], repeats: int) -> list[tuple[Row, int]]:
    """(row, repeat): each block of two rows A B B A per pair of repeats, a block of one A A."""
    out: list[tuple[Row, int]] = []
    for block in blocks:
        for r in range(repeats):
            out += [(row, r) for row in (block if r % 2 == 0 else block[::-1])]
    return out


def pairs(rows: list[Row]) -> list[list[Row]]:
    return [rows[i:i + 2] for i in range(0, len(rows), 2)]


def measure(blocks: list[list[Row]], bench: gh.Bench, save: Callable[[dict], None], repeats: int = 2,
            deadline: float | None = None, meta: dict | None = None) -> dict:
    """Run every row ``repeats`` times in plan's order, saving the results after each run; a run whose row's timeout
    no longer fits before ``deadline`` (time.time()) is left out and named in ``not_run``."""
    order = plan(blocks, repeats)
    rows = {r.name: r for r, _ in order}
    results = {"call": {"host": os.uname().nodename, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "repeats": repeats,
                        "order": [f"{r.name}#{i + 1}" for r, i in order]},
               **(meta or {}), "rows": {n: {"row": asdict(r), "zeroboard": [], "bare": {m: [] for m in r.bare}}
                                        for n, r in rows.items()}, "not_run": []}
    for row, i in order:
        entry = results["rows"][row.name]
        needs = row.timeout * (1 + len(row.bare)) * 0.6
        if deadline is not None and time.time() + needs > deadline:
            results["not_run"].append(f"{row.name}#{i + 1}")
            print(f"{row.name} #{i + 1}: not run ({deadline - time.time():.0f} s left)", flush=True)
            continue
        job = job_for(row, bench, f"-r{i + 1}")
        bare_first = i % 2 == 1 and entry["zeroboard"] and "error" not in entry["zeroboard"][0]
        if bare_first:
            for mode in row.bare:
                entry["bare"][mode].append(run_bare(row, job, bench, entry["zeroboard"][0], mode))
        zb = run_zeroboard(row, job, bench)
        entry["zeroboard"].append(zb)
        if not bare_first and "error" not in zb:
            for mode in row.bare:
                entry["bare"][mode].append(run_bare(row, job, bench, zb, mode))
        summarize(results, bench)
        save(results)
        print(progress(row, entry, i), flush=True)
    return results


def median_of(runs: list[dict]) -> float | None:
    steps = [r["step_s"] for r in runs if "step_s" in r]
    return statistics.median(steps) if steps else None


def summarize(results: dict, bench: gh.Bench) -> None:
    """Each row's step time (the median of its runs' medians), tokens/s, MFU, and ZeroBoard against the bare script."""
    peak = results.get("matmul_tflops")
    for entry in results["rows"].values():
        row = entry["row"]
        step = median_of(entry["zeroboard"])
        if step is None:
            continue
        tps = row["micro_batch"] * bench.seq * bench.gpus / step if not bench.tiny else 2 * bench.seq * bench.gpus / step
        entry.update(step_s=step, tokens_per_s=tps)
        if peak:
            entry["mfu"] = tps * gh.flops_per_token(bench.shape, bench.seq, row["method"]) / (peak * bench.gpus * 1e12)
        for mode, runs in entry["bare"].items():
            b = median_of(runs)
            if b is not None:
                entry.setdefault("bare_step_s", {})[mode] = b
                entry.setdefault("zeroboard_over_bare", {})[mode] = b / step  # above 1: ZeroBoard faster


def progress(row: Row, entry: dict, i: int) -> str:
    zb = entry["zeroboard"][-1]
    if "error" in zb:
        return f"{row.name} #{i + 1}: FAILED {zb['error'][-300:]!r}"
    bare = " ".join(f"bare[{m}] {runs[-1].get('step_s', float('nan')):.3f}" for m, runs in entry["bare"].items() if runs)
    return f"{row.name} #{i + 1}: {zb['step_s']:.3f} s/step ({zb['wall_s']:.0f} s) {bare}"


def ratio(results: dict, num: str, den: str) -> float | None:
    """Row ``den``'s step time over row ``num``'s (how fast ``num`` runs relative to ``den``), both of this call."""
    a, b = results["rows"].get(num, {}).get("step_s"), results["rows"].get(den, {}).get("step_s")
    return b / a if a and b else None
