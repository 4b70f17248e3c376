"""The GPU matrix: ZeroBoard's runner vs a bare HF Trainer script, stage x offload x method.

A random-init Llama of about 1.1 B parameters (hidden 2048, 22 layers, 32 heads,
4 KV heads, vocab 32000), bf16, sequence 1024, micro-batch 8, one GPU. Each
configuration runs through `zeroboard train` (the same argv the web UI starts)
and through benchmarks/bare_trainer.py with identical settings. Prints and
writes: median step time, tokens/s, MFU, peak memory (torch allocator and
NVML), the planner's estimate and its error, and the ZeroBoard/bare ratio.

    python benchmarks/gpu_matrix.py --out benchmarks/results/h200.json [--configs full-none,lora-3] [--steps 10]
    python benchmarks/gpu_matrix.py --tiny --out /tmp/m.json   # the same logic on CPU, for a dry run
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

from zeroboard.job import devices, placement, record as events, spec as specmod  # noqa: E402
from zeroboard.job.command import build, free_port, sanitized_arch_list  # noqa: E402

STAGES = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]
METHODS = ["full", "lora"]
BIG = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
           num_key_value_heads=4, vocab_size=32000)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512)


def config_name(method: str, stage: str, offload: bool) -> str:
    return f"{method}-{stage}{'+offload' if offload else ''}"


# --- model and data ---------------------------------------------------------------

def make_model(folder: Path, shape: dict, seq: int) -> None:
    """Random-init Llama + a word-level tokenizer of the same vocab, with a chat template."""
    if (folder / "config.json").is_file():
        return
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from zeroboard.training.demo_model import CHAT_TEMPLATE, SPECIAL_TOKENS

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    first = len(vocab)
    vocab.update({f"w{i}": first + i for i in range(shape["vocab_size"] - first)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|pad|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(**shape, max_position_embeddings=max(seq, 2048), tie_word_embeddings=False,
                      pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def make_data(path: Path, vocab: int, seq: int, n: int = 2048) -> None:
    """Alpaca records whose answers fill the whole cutoff: every sample is `seq` tokens."""
    if path.is_file():
        return
    rng = random.Random(0)
    words = lambda k: " ".join(f"w{rng.randrange(vocab - 8)}" for _ in range(k))  # noqa: E731
    path.write_text(json.dumps([{"instruction": words(8), "input": "", "output": words(seq + 16)} for _ in range(n)]))


def peak_matmul_tflops() -> float | None:
    """The bf16 matmul rate of this GPU, measured in a child process so this one holds no CUDA memory."""
    here = str(Path(__file__).parent)
    code = f"import sys; sys.path.insert(0, {here!r}); from gpu_matrix import _matmul_tflops as f; print(f())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip().splitlines()
    return float(out[-1]) if out and out[-1] != "None" else None


def _matmul_tflops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * 20 / (time.perf_counter() - t) / 1e12


def flops_per_token(shape: dict, seq: int, method: str) -> float:
    """Model FLOPs per trained token: 6N (full) or 4N (LoRA: no weight gradients) plus attention."""
    h, f, L, v = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"], shape["vocab_size"]
    kv = h * shape["num_key_value_heads"] // shape["num_attention_heads"]
    n_matmul = L * (2 * h * h + 2 * h * kv + 3 * h * f) + h * v
    attn = 12 * L * h * seq  # QK^T and AV, forward + backward
    return (6 if method == "full" else 4) * n_matmul + attn


def host_mem_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def grow_host_memory(gib: int) -> None:
    """Touch ``gib`` GiB of host memory once, then free it.

    The H200 machines are microVMs whose memory grows as it is first used (about 3 s
    per 8 GiB, by the device notes). Whichever run first pins tens of GiB for offload
    pays for that growth, so without this the script that runs first is at a
    disadvantage. Touching the memory up front puts both on the same footing.
    """
    import numpy as np

    before, t = host_mem_total_gib(), time.time()
    held = [np.ones(4 * 2**30 // 8) for _ in range(gib // 4)]  # all written and held at once, then freed
    del held
    print(f"host memory: MemTotal {before:.0f} -> {host_mem_total_gib():.0f} GiB after touching {gib} GiB "
          f"({time.time() - t:.0f} s)", flush=True)


# --- NVML sampling (memory peak and the nvidia-smi cross-check) ---------------------

class GpuSampler(threading.Thread):
    """Used memory of every GPU every ``period`` s (the peak per GPU), and the nvidia-smi cross-check every 3 s."""

    def __init__(self, period: float = 0.2):
        super().__init__(daemon=True)
        self.period, self.peaks, self.stop_flag = period, {}, False
        self.checks: list[dict] = []

    @property
    def peak(self) -> int:
        return max(self.peaks.values(), default=0)

    def run(self) -> None:
        last_check = 0.0
        while not self.stop_flag:
            due = time.time() - last_check > 3
            for g in devices.detect_gpus(with_processes=True):
                self.peaks[g.index] = max(self.peaks.get(g.index, 0), g.used_bytes)
                if due and any(p.pid != os.getpid() for p in g.processes):
                    self.checks.append(cross_check(g.index))
                    last_check = time.time()
            time.sleep(self.period)


def cross_check(index: int) -> dict:
    """Our NVML view (what the GPU panel shows) against nvidia-smi, read back to back."""
    ours = devices.detect_gpus(with_processes=True)[index]
    q = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.used,memory.total",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.split(",")
    apps = subprocess.run(["nvidia-smi", f"--id={index}", "--query-compute-apps=pid,used_memory",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    smi_procs = {int(p): int(m) for p, m in (ln.split(",") for ln in apps.strip().splitlines() if ln.strip())}
    our_procs = {p.pid: p.used_bytes >> 20 for p in ours.processes}
    return {"ours_used_mib": ours.used_bytes >> 20, "smi_used_mib": int(q[0]), "ours_total_mib": ours.total_bytes >> 20,
            "smi_total_mib": int(q[1]), "ours_procs": our_procs, "smi_procs": smi_procs,
            "agree": abs((ours.used_bytes >> 20) - int(q[0])) <= 512 and set(our_procs) == set(smi_procs)}


# --- one run each way ---------------------------------------------------------------

def step_times(evs: list[dict], skip: int) -> list[float]:
    logs = [e for e in evs if e["event"] == "log"]
    return [b["elapsed"] - a["elapsed"] for a, b in zip(logs, logs[1:])][skip:]


_children: list[subprocess.Popen] = []


def run_job(argv: list[str], **kw) -> subprocess.CompletedProcess:
    """subprocess.run for a training job, in its own process group, so that a stopped benchmark stops it too."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw) as p:
        _children.append(p)
        try:
            out, err = p.communicate()
        finally:
            _children.remove(p)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def stop_children(signum, frame) -> None:
    """On SIGTERM (e.g. `timeout`): end the running job's whole group, then leave. Seen on the H200: without
    this a job outlived its benchmark and shared the GPU with the next call's runs."""
    for p in list(_children):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.time() + 30
    for p in list(_children):
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.time()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def sampled(fn):
    """Run ``fn`` with the NVML sampler on: the same polling during ZeroBoard's and the bare runs."""
    sampler = GpuSampler()
    sampler.start()
    try:
        return fn(), sampler
    finally:
        sampler.stop_flag = True
        sampler.join()


def run_zeroboard(a, job: specmod.JobSpec, workdir: Path) -> dict:
    path = workdir / f"{Path(job.output_dir).name}.yaml"
    path.write_text(specmod.dump_yaml(job, full=False))
    t0 = time.time()
    p, sampler = sampled(lambda: run_job([sys.executable, "-m", "zeroboard.cli", "train", str(path)], cwd=ROOT))
    wall = time.time() - t0
    evs = events.read_events(Path(job.output_dir) / events.EVENTS_FILE)
    if p.returncode:
        said = [e.get("message", "") for e in evs if e["event"] == "error"]  # the rank's own words first
        return {"error": "; ".join(said)[:1500] or (p.stderr or p.stdout)[-1500:]}
    steps = step_times(evs, skip=2)
    logs = [e for e in evs if e["event"] == "log"]
    mem = logs[-1]["memory"][0]
    per_rank = [m.get("torch_peak_bytes", 0) / 2**30 for m in logs[-1]["memory"]]
    start = next(e for e in evs if e["event"] == "start")
    return {"step_s": statistics.median(steps), "wall_s": wall, "torch_peak_gib": mem.get("torch_peak_bytes", 0) / 2**30,
            "nvml_peak_gib": sampler.peak / 2**30, "nvidia_smi_checks": sampler.checks[-3 * len(sampler.peaks or [0]):],
            "torch_peak_gib_per_rank": per_rank, "nvml_peak_gib_per_gpu": {i: b / 2**30 for i, b in sampler.peaks.items()},
            "start_devices": start["devices"], "speedups": start.get("speedups"),
            "real_tokens_per_s": statistics.median(e["tokens_per_sec"] for e in logs[2:]) if len(logs) > 2 else None,
            "loss_first_last": [logs[0]["loss"], logs[-1]["loss"]]}


def run_bare(a, job: specmod.JobSpec, data: Path, speedups: dict | None = None) -> dict:
    argv = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", str(job.num_processes), "--master_port", str(free_port()),
            str(ROOT / "benchmarks/bare_trainer.py"), "--model", job.model_name_or_path, "--data", str(data),
            "--output_dir", job.output_dir + "-bare", "--finetuning", job.finetuning_type, "--max_steps", str(job.max_steps),
            "--batch", str(job.per_device_train_batch_size), "--cutoff", str(job.cutoff_len), "--lr", str(job.learning_rate),
            "--logging_steps", "1", "--lora_r", str(job.lora_rank)]
    if job.deepspeed_stage != "none":
        argv += ["--deepspeed", str(ROOT / "cache" / f"ds_z{job.deepspeed_stage}{'_offload' if job.offload else ''}_config.json")]
    argv += ["--bf16"] if job.precision == "bf16" else ["--cpu"]
    if speedups and speedups.get("liger"):  # the same kernels ZeroBoard chose
        argv += ["--liger_config", json.dumps(speedups.get("liger_config") or {})]
    if job.pure_bf16:
        argv += ["--pure_bf16"]
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0"}
    if env.get("TORCH_CUDA_ARCH_LIST"):  # the same clean-up ZeroBoard does for its jobs
        env["TORCH_CUDA_ARCH_LIST"] = sanitized_arch_list(env["TORCH_CUDA_ARCH_LIST"])
    if job.device_type == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="", DS_ACCELERATOR="cpu")
    omp = build(job, placement.place(job, devices.detect_gpus())).env.get("OMP_NUM_THREADS")
    if omp:  # the same share of the cores ZeroBoard's command gives each rank (offload on several GPUs)
        env["OMP_NUM_THREADS"] = omp
    p, sampler = sampled(lambda: run_job(argv, cwd=ROOT, env=env))
    if p.returncode:
        return {"error": (p.stderr or p.stdout)[-1500:]}
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("BARE_METRICS "))
    m = json.loads(line.split(" ", 1)[1])
    return {"step_s": statistics.median(m["step_times"][2:]), "torch_peak_gib": m.get("torch_peak_bytes", 0) / 2**30,
            "nvml_peak_gib": sampler.peak / 2**30}


def planner_estimate(job: specmod.JobSpec) -> float | None:
    try:
        from zeroboard import planner

        plan = planner.estimate(job, devices.detect_gpus())
        return plan.peak_bytes / 2**30
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
    ap.add_argument("--no-bare", action="store_true")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each script per config, alternating which goes first")
    ap.add_argument("--tiny", action="store_true", help="a tiny model on CPU: checks the harness, measures nothing")
    ap.add_argument("--workdir", default="/tmp/zb-matrix")
    ap.add_argument("--gpus", type=int, default=1, help="processes (GPUs) per job; tokens/s counts all, MFU divides by all")
    ap.add_argument("--prepare-only", action="store_true", help="build the model and the data, then stop")
    ap.add_argument("--grow-host-gib", type=int, default=0,
                    help="touch this much host memory first (microVMs whose memory grows on first use)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, stop_children)

    shape = TINY if a.tiny else BIG
    seq, batch = (64, 2) if a.tiny else (a.seq, a.batch)
    work = Path(a.workdir)
    from zeroboard import workspace

    runs = Path(f"{work}-runs")  # outputs apart from the data folder (a job may not write into its data)
    workspace.allow([f"{work}:rw", f"{runs}:rw"])  # outside the repository
    work.mkdir(parents=True, exist_ok=True)
    model_dir, data = work / ("model-tiny" if a.tiny else "model-1b"), work / f"data-{seq}.json"
    t = time.time()
    # in a child process: built here, the model's CUDA memory stayed with this process for the whole matrix
    # (seen on the H200: 4.9 GiB under this pid in every NVML reading of a fresh machine's first call)
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from gpu_matrix import make_model; "
            f"from pathlib import Path; make_model(Path({str(model_dir)!r}), {shape!r}, {seq})")
    subprocess.run([sys.executable, "-c", code], check=True)
    make_data(data, shape["vocab_size"], seq)
    print(f"model and data ready in {time.time() - t:.0f} s", flush=True)
    if a.prepare_only:
        return
    if a.grow_host_gib:
        grow_host_memory(a.grow_host_gib)
    peak = peak_matmul_tflops()
    wanted = [c for c in a.configs.split(",") if c]
    results = json.loads(Path(a.out).read_text()) if Path(a.out).is_file() else {"rows": []}
    results.update(model={**shape, "seq": seq, "micro_batch": batch}, matmul_tflops=peak, gpus_per_job=a.gpus,
                   host_mem_total_gib=host_mem_total_gib())
    done = {r["config"] for r in results["rows"] if "error" not in r.get("zeroboard", {})}
    every = [(m, st, off) for m in METHODS for st, off in STAGES]
    if wanted:  # in the order asked for
        every = sorted((c for c in every if config_name(*c) in wanted), key=lambda c: wanted.index(config_name(*c)))
    for method, stage, offload in every:
        name = config_name(method, stage, offload)
        if name in done:
            continue
        job = specmod.JobSpec(
            model_name_or_path=str(model_dir), finetuning_type=method, dataset_dir=str(work), dataset=[str(data)],
            cutoff_len=seq, learning_rate=1e-5 if method == "full" else 1e-4, max_steps=a.steps,
            per_device_train_batch_size=batch, precision="fp32" if a.tiny else "bf16", logging_steps=1,
            lora_rank=16, lora_alpha=32, output_dir=str(Path(f"{work}-runs") / f"run-{name}-{int(time.time())}"),
            device_type="cpu" if a.tiny else "cuda", num_processes=a.gpus, deepspeed_stage=stage, offload=offload,
            lr_scheduler_type="constant")
        row = {"config": name, **measure(a, job, work, data)}
        zb = row["zeroboard"]
        if "step_s" in zb:
            zb["tokens_per_s"] = batch * seq * a.gpus / zb["step_s"]
            if peak:
                zb["mfu"] = zb["tokens_per_s"] * flops_per_token(shape, seq, method) / (peak * a.gpus * 1e12)
            est = planner_estimate(job)
            if est is not None:
                row["planner_gib"] = est
                row["planner_error"] = (est - zb["torch_peak_gib"]) / zb["torch_peak_gib"] if zb["torch_peak_gib"] else None
            if "step_s" in row.get("bare", {}):
                row["ratio"] = row["bare"]["step_s"] / zb["step_s"]
        print(json.dumps(row), flush=True)
        results["rows"] = [r for r in results["rows"] if r["config"] != name] + [row]
        Path(a.out).write_text(json.dumps(results, indent=2))
    print_table(results)


def measure(a, job: specmod.JobSpec, work: Path, data: Path) -> dict:
    """ZeroBoard's run and the bare run, ``--repeats`` times, alternating which goes first.

    With several repeats, step_s is the median of the runs' medians and ``*_runs`` keeps each run's,
    so the run-to-run spread of each script can be set against the ratio.
    """
    zbs: list[dict] = []
    bares: list[dict] = []
    for i in range(a.repeats):
        out = f"{job.output_dir}-r{i}" if a.repeats > 1 else job.output_dir
        this = dataclasses.replace(job, output_dir=out)
        first_bare = i % 2 == 1 and not a.no_bare and zbs
        if first_bare:
            bares.append(run_bare(a, this, data, zbs[0].get("speedups")))
        zbs.append(run_zeroboard(a, this, work))
        if not a.no_bare and not first_bare:
            bares.append(run_bare(a, this, data, zbs[0].get("speedups")))
        if "error" in zbs[-1] or (bares and "error" in bares[-1]):
            break
    row = {"zeroboard": zbs[-1] if "error" in zbs[-1] else zbs[0]}
    if bares:
        row["bare"] = bares[-1] if "error" in bares[-1] else bares[0]
    for key, runs in (("zeroboard", zbs), ("bare", bares)):
        steps = [r["step_s"] for r in runs if "step_s" in r]
        if len(steps) > 1 and "step_s" in row[key]:
            row[key]["step_s_runs"] = steps
            row[key]["step_s"] = statistics.median(steps)
    return row


def print_table(results: dict) -> None:
    print(f"\n{'config':<18}{'step s':>8}{'tok/s':>9}{'MFU':>6}{'torch GiB':>10}{'NVML GiB':>9}{'plan GiB':>9}{'err':>7}"
          f"{'bare s':>8}{'ratio':>7}")
    for r in results["rows"]:
        zb, bare = r["zeroboard"], r.get("bare", {})
        if "error" in zb:
            print(f"{r['config']:<18} FAILED: {zb['error'][-200:]!r}")
            continue
        f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "-"  # noqa: E731
        print(f"{r['config']:<18}{zb['step_s']:8.3f}{zb['tokens_per_s']:9.0f}{f(zb.get('mfu'), '6.1%')}"
              f"{zb['torch_peak_gib']:10.1f}{zb['nvml_peak_gib']:9.1f}{f(r.get('planner_gib'), '9.1f')}"
              f"{f(r.get('planner_error'), '7.1%')}{f(bare.get('step_s'), '8.3f')}{f(r.get('ratio'), '7.3f')}")


if __name__ == "__main__":
    main()
