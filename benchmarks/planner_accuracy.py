"""Planner estimate vs measured per-rank peak, on the real trainer.

    python benchmarks/planner_accuracy.py              # CPU: the demo job, a few settings, 2 processes
    python benchmarks/planner_accuracy.py --reference  # no runs: estimates vs the H200 table of the reference doc
    python benchmarks/planner_accuracy.py --gpu-matrix [--only full|lora]
                                                       # GPU: a 1.1B Llama, bf16, seq 1024, micro-batch 8,
                                                       # none/2/3/2+offload/3+offload x full/LoRA r16

Every run goes through ``zeroboard.job.command.check_and_build`` and ``zeroboard.training.train``, the
same path as ``zeroboard train`` but for the memory verdict (the planner is what is measured); the measured peak is what the trainer writes
into ``events.jsonl`` (``memory[].torch_peak_bytes`` on GPU, ``rss_peak_bytes``
on CPU).  On GPU each rank also runs a small probe (this file, ``--rank-probe``)
that records the allocator state at every step and the NVML reading, into
``probe_rank*.json`` of the run.

On CPU the RSS peak holds the Python + torch + transformers (+ DeepSpeed)
runtime, which the planner cannot know from the model config: it is measured
once here (a process that imports those and trains a one-parameter model) and
added as a fixed "runtime" term.  That term dominates for the tiny demo model,
so the CPU error mostly says how well the runtime was measured, not the model
states: the printout splits the two.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
GIB = 1024**3

# The reference table of shared/reference/gpu-and-deepspeed.md (H200, 1.1B Llama, bf16, seq 1024, mb 8):
# (stage, offload, finetuning type) -> peak allocated GiB.  None: not measured there.
REFERENCE_H200 = {
    ("none", False, "full"): 23.9, ("2", False, "full"): 32.1, ("3", False, "full"): 34.2,
    ("2", True, "full"): 19.9, ("3", True, "full"): 19.6,
    ("none", False, "lora"): 21.3, ("3", False, "lora"): 30.6,
    ("2", False, "lora"): None, ("2", True, "lora"): None, ("3", True, "lora"): None,
}
# ZeroBoard's own trainer, same model and batch, measured with --gpu-matrix on the lent H200 (torch peak GiB;
# raw per-step probes in benchmarks/results/planner_h200_matrix.json)
MEASURED_H200 = {
    ("none", False, "full"): 35.44, ("2", False, "full"): 32.09, ("3", False, "full"): 34.15,
    ("2", True, "full"): 19.92, ("3", True, "full"): 19.63, ("none", False, "lora"): 25.22,
    ("3", False, "lora"): 30.63, ("2", False, "lora"): 18.50, ("2", True, "lora"): 18.36, ("3", True, "lora"): 30.25,
}
MATRIX = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]
TINYLLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, tie_word_embeddings=False,
                 architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu", rms_norm_eps=1e-5)


def workdir(prefix: str) -> Path:
    """A temporary folder for the runs, allowed to them (it lies outside the checkout, which the path guards refuse)."""
    from zeroboard import workspace

    work = Path(tempfile.mkdtemp(prefix=prefix))
    workspace.allow([f"{work}:rw"])
    return work


# --- the probe each rank runs on GPU (--rank-probe) -------------------------------------

def rank_probe(argv: list[str]) -> int:
    """Run zeroboard.training.train with an extra per-step memory probe on this rank."""
    import torch

    from zeroboard.training import train

    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    nvml_index = int(visible.split(",")[local]) if visible else local
    out_dir = Path(argv[argv.index("--output_dir") + 1])
    record: dict = {"rank": rank, "steps": []}

    def nvml_used() -> int | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)
            used = 0
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid == os.getpid():
                    used = int(p.usedGpuMemory or 0)
            return used or int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
        except Exception:
            return None

    original = train.make_callback

    def make_callback(*args):
        cb = original(*args)

        class Probe(type(cb)):
            def on_train_begin(self, args, state, control, **kw):
                record["train_begin_allocated"] = torch.cuda.memory_allocated()
                record["train_begin_peak"] = torch.cuda.max_memory_allocated()
                return super().on_train_begin(args, state, control, **kw)

            def on_step_begin(self, args, state, control, **kw):
                self._begin = torch.cuda.memory_allocated()
                self._saved: dict[int, int] = {}
                if state.global_step == 2:  # count what autograd saves for backward, once
                    params = {p.data_ptr() for p in kw["model"].parameters()}

                    def pack(t):
                        if t.device.type == "cuda":
                            s = t.untyped_storage()
                            if s.data_ptr() not in params:
                                self._saved[s.data_ptr()] = s.nbytes()
                        return t

                    self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
                    self._hooks.__enter__()

            def on_step_end(self, args, state, control, **kw):
                if getattr(self, "_hooks", None) is not None:
                    self._hooks.__exit__(None, None, None)
                    self._hooks = None
                record["steps"].append({"step": state.global_step, "allocated_begin": self._begin,
                                        "allocated_end": torch.cuda.memory_allocated(),
                                        "peak_so_far": torch.cuda.max_memory_allocated(),
                                        "reserved_peak": torch.cuda.max_memory_reserved(),
                                        "saved_for_backward": sum(self._saved.values()) or None,
                                        "nvml_used": nvml_used()})
                (out_dir / f"probe_rank{rank}.json").write_text(json.dumps(record, indent=1))
                return super().on_step_end(args, state, control, **kw)

        cb.__class__ = Probe
        return cb

    train.make_callback = make_callback
    return train.main(argv)


# --- running one job through the real command builder --------------------------------------

def run_job(job, timeout: float, probe: bool = False) -> dict:
    """Prepare + run a job like `zeroboard train`; return the peak per rank from its events."""
    from zeroboard.job import command, record as events
    from zeroboard.training import dataprep

    prepared = command.check_and_build(job)  # no memory verdict: the planner is what this measures
    if not prepared.report.ok:
        raise SystemExit(f"job invalid: {prepared.report.text()}")
    argv = list(prepared.command.argv)
    if probe:
        i = argv.index("-m")
        argv[i: i + 2] = [str(Path(__file__).resolve()), "--rank-probe"]
    out = Path(job.output_dir)
    # each run tokenizes its data into a cache of its own, as a dataset's first run does: the larger footprint
    env = {**prepared.command.full_env(), "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "app"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        dataprep.CACHE_ENV: str(out.parent / f"{out.name}.data-cache")}
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(out / "launcher.log", "w") as log:
        proc = subprocess.run(argv, env=env, cwd=prepared.command.cwd, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout)
    evs = events.read_events(out / events.EVENTS_FILE)
    peaks: dict[int, dict] = {}
    for e in evs:
        for m in e.get("memory") or []:
            cur = peaks.setdefault(m["rank"], {})
            for k, v in m.items():
                if k != "rank":
                    cur[k] = max(cur.get(k, 0), v)
    probes = [json.loads(p.read_text()) for p in sorted(out.glob("probe_rank*.json"))]
    status = next((e["status"] for e in evs if e["event"] == "end"), "failed")
    if proc.returncode != 0 or status != "finished":
        tail = (out / "launcher.log").read_text(errors="replace")[-3000:]
        print(f"  run failed (rc {proc.returncode}):\n{tail}", file=sys.stderr)
    return {"rc": proc.returncode, "status": status, "seconds": round(time.time() - t0, 1),
            "peaks": [peaks[r] for r in sorted(peaks)], "probes": probes}


# --- GPU matrix ---------------------------------------------------------------------------

def make_long_model(where: Path, dims: dict | None = None, name: str = "llama-1.1b") -> tuple[Path, Path]:
    """A random model (default: the reference table's 1.1B Llama) with the demo tokenizer, and long samples."""
    import random

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from zeroboard.training.demo_model import ensure_demo_model

    demo = ensure_demo_model(ROOT / "cache/demo/model", ROOT / "cache/demo/data")
    model_dir, data_dir = where / name, where / "data"
    if not (model_dir / "config.json").is_file():
        tok = AutoTokenizer.from_pretrained(demo)
        dims = {**TINYLLAMA, **(dims or {})}
        cfg = AutoConfig.for_model(dims["model_type"], **{k: v for k, v in dims.items() if k != "model_type"},
                                   pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
        model.save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        del model
    data_dir.mkdir(parents=True, exist_ok=True)
    words = "the cat sat on a warm mat and looked at the moon while rain fell over old roads".split()
    rng = random.Random(0)
    recs = [{"instruction": "Tell a long story.", "input": "",
             "output": " ".join(rng.choice(words) for _ in range(2600))} for _ in range(96)]
    (data_dir / "long.json").write_text(json.dumps(recs))
    (data_dir / "dataset_info.json").write_text(json.dumps({"long": {"file_name": "long.json"}}))
    return model_dir, data_dir


def gpu_matrix(only: str | None, steps: int, out_json: Path | None) -> int:
    from zeroboard.job import devices
    from zeroboard.job.spec import JobSpec

    gpus = devices.detect_gpus()
    if not gpus:
        print("no NVIDIA GPU: --gpu-matrix needs one", file=sys.stderr)
        return 2
    work = workdir("zb-matrix-")
    model_dir, data_dir = make_long_model(work)
    rows = []
    for ft in ("full", "lora"):
        if only and ft != only:
            continue
        for stage, offload in MATRIX:
            name = f"{ft}-{stage}{'-offload' if offload else ''}"
            job = JobSpec(model_name_or_path=str(model_dir), finetuning_type=ft, dataset_dir=str(data_dir),
                          dataset=["long"], cutoff_len=1024, per_device_train_batch_size=8, max_steps=steps,
                          logging_steps=1, precision="bf16", learning_rate=1e-5, lora_rank=16, lora_alpha=32,
                          lora_target=["all"], device_type="cuda", gpu_ids=[gpus[0].index],
                          deepspeed_stage=stage, offload=offload, output_dir=str(work / name))
            print(f"== {name}", flush=True)
            res = run_job(job, timeout=420, probe=True)
            res.update(name=name, finetuning_type=ft, stage=stage, offload=offload)
            try:
                from zeroboard import planner

                res["estimate_bytes"] = planner.estimate(job, gpus).peak_bytes
            except Exception as e:  # the measurement still counts
                print(f"  no estimate: {e}", file=sys.stderr)
            rows.append(res)
            print(json.dumps({k: res[k] for k in ("name", "rc", "seconds", "peaks")}), flush=True)
            for p in res["probes"]:
                print(json.dumps(p), flush=True)
            for big in (work / name).glob("*.safetensors"):
                big.unlink()
            if out_json:
                out_json.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work / "llama-1.1b", ignore_errors=True)
    print_table(rows, gpu=True)
    return 0


# --- GPU validation: settings the planner was not calibrated on ---------------------------------

QWEN_05B = dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                max_position_embeddings=4096)
VALIDATION = [  # name, model ("llama" | "qwen"), job overrides
    ("llama full zero2 ckpt mb4x512", "llama", dict(finetuning_type="full", deepspeed_stage="2",
                                                    gradient_checkpointing=True, per_device_train_batch_size=4,
                                                    cutoff_len=512)),
    ("llama lora none mb2x2048", "llama", dict(finetuning_type="lora", per_device_train_batch_size=2,
                                               cutoff_len=2048)),
    ("llama full none ckpt", "llama", dict(finetuning_type="full", gradient_checkpointing=True)),
    ("llama full zero3+off ckpt", "llama", dict(finetuning_type="full", deepspeed_stage="3", offload=True,
                                                gradient_checkpointing=True)),
    ("qwen0.5b full zero3 mb4", "qwen", dict(finetuning_type="full", deepspeed_stage="3",
                                             per_device_train_batch_size=4)),
    ("qwen0.5b lora-qv zero2 mb8x512", "qwen", dict(finetuning_type="lora", deepspeed_stage="2", lora_rank=8,
                                                    lora_target=["q_proj", "v_proj"], cutoff_len=512)),
    ("qwen0.5b lora none ckpt", "qwen", dict(finetuning_type="lora", gradient_checkpointing=True)),
]


def gpu_validate(steps: int, out_json: Path | None) -> int:
    from zeroboard.job import devices
    from zeroboard.job.spec import JobSpec

    gpus = devices.detect_gpus()
    if not gpus:
        print("no NVIDIA GPU: --gpu-validate needs one", file=sys.stderr)
        return 2
    work = workdir("zb-validate-")
    models = {"llama": make_long_model(work)[0], "qwen": make_long_model(work, QWEN_05B, "qwen-0.5b")[0]}
    data_dir = work / "data"
    rows = []
    for name, model, over in VALIDATION:
        base = dict(model_name_or_path=str(models[model]), dataset_dir=str(data_dir), dataset=["long"],
                    cutoff_len=1024, per_device_train_batch_size=8, max_steps=steps, logging_steps=1,
                    precision="bf16", learning_rate=1e-5, lora_rank=16, lora_alpha=32, lora_target=["all"],
                    device_type="cuda", gpu_ids=[gpus[0].index], output_dir=str(work / name.replace(" ", "_")))
        job = JobSpec(**{**base, **over})
        print(f"== {name}", flush=True)
        res = run_job(job, timeout=300, probe=True)
        res.update(name=name)
        from zeroboard import planner

        res["estimate_bytes"] = planner.estimate(job, gpus).peak_bytes
        rows.append(res)
        print(json.dumps({k: res[k] for k in ("name", "rc", "seconds", "peaks", "estimate_bytes")}), flush=True)
        for big in Path(job.output_dir).glob("*.safetensors"):
            big.unlink()
        if out_json:
            out_json.write_text(json.dumps(rows, indent=1))
    print_table(rows, gpu=True)
    return 0


# --- CPU: the demo job ------------------------------------------------------------------------

CPU_CONFIGS = [  # name, overrides of the demo job
    ("demo lora", {}),
    ("demo full", {"finetuning_type": "full"}),
    ("demo lora zero2", {"deepspeed_stage": "2"}),
    ("demo full zero3", {"finetuning_type": "full", "deepspeed_stage": "3"}),
]
MID = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4)
MICRO = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
             vocab_size=768)


def cpu_runs(steps: int, out_json: Path | None) -> int:
    from zeroboard import planner
    from zeroboard.job.spec import load_job
    from zeroboard.planner import memory as plan_memory

    work = workdir("zb-cpu-")
    base = load_job(None)
    # 1. the runtime: the same trainer on a 30k-parameter model, whose own states are a few hundred kB
    micro, data = make_long_model(work, MICRO, "micro")
    runtime = {}
    for ds in ("none", "2"):
        job = replace(base, model_name_or_path=str(micro), dataset_dir=str(data), dataset=["long"], cutoff_len=32,
                      per_device_train_batch_size=1, max_steps=2, logging_steps=1, finetuning_type="full",
                      deepspeed_stage=ds, output_dir=str(work / f"runtime-{ds}"))
        res = run_job(job, timeout=900)
        rss = max(p["rss_peak_bytes"] for p in res["peaks"])
        runtime[ds] = rss - planner.estimate(job, [], host_available=1 << 40).peak_bytes
    plan_memory.CPU_RUNTIME, plan_memory.CPU_RUNTIME_DS = runtime["none"], runtime["2"]
    print(f"runtime per process (Python + torch + transformers [+ DeepSpeed]), measured on a 30k-parameter model: "
          f"{runtime['none'] / GIB:.3f} GiB without DeepSpeed, {runtime['2'] / GIB:.3f} GiB with it", flush=True)
    # 2. the demo job, and one wider model where the model terms are not lost in the runtime
    mid, data = make_long_model(work, {**MID, "vocab_size": 32000}, "mid")
    midq, _ = make_long_model(work, {**MID, "model_type": "qwen2", "num_key_value_heads": 2, "vocab_size": 32000,
                                     "tie_word_embeddings": True}, "midq")
    configs = [(n, {**o, "max_steps": steps}) for n, o in CPU_CONFIGS] + [
        ("mid-size full (41M)", dict(model_name_or_path=str(mid), dataset_dir=str(data), dataset=["long"],
                                     cutoff_len=512, per_device_train_batch_size=4, max_steps=3,
                                     finetuning_type="full")),
        ("mid-size full zero3", dict(model_name_or_path=str(mid), dataset_dir=str(data), dataset=["long"],
                                     cutoff_len=512, per_device_train_batch_size=4, max_steps=3,
                                     finetuning_type="full", deepspeed_stage="3")),
        ("mid-size full ckpt", dict(model_name_or_path=str(mid), dataset_dir=str(data), dataset=["long"],
                                    cutoff_len=512, per_device_train_batch_size=4, max_steps=3,
                                    finetuning_type="full", gradient_checkpointing=True)),
        ("mid qwen2 lora zero2", dict(model_name_or_path=str(midq), dataset_dir=str(data), dataset=["long"],
                                      cutoff_len=512, per_device_train_batch_size=4, max_steps=3,
                                      finetuning_type="lora", deepspeed_stage="2"))]
    rows = []
    for name, over in configs:
        job = replace(base, logging_steps=1, output_dir=str(work / name.replace(" ", "-")), **over)
        print(f"== {name}", flush=True)
        res = run_job(job, timeout=900)
        plan = planner.estimate(job, [], host_available=1 << 40)
        res.update(name=name, estimate_bytes=plan.peak_bytes,
                   model_bytes=plan.peak_bytes + plan.model.checkpoint_bytes,
                   runtime_bytes=plan.host_bytes - plan.peak_bytes - plan.model.checkpoint_bytes)
        res["estimate_bytes"] = plan.host_bytes
        rows.append(res)
        if out_json:
            out_json.write_text(json.dumps(rows, indent=1))
    print_table(rows, gpu=False)
    print("\nOn CPU the estimate is runtime + mapped checkpoint + model states + activations; for the demo model "
          "the runtime is nearly all of it, so its error mostly measures how steady the runtime is.")
    shutil.rmtree(work, ignore_errors=True)
    return 0


# --- printing ---------------------------------------------------------------------------------

def print_table(rows: list[dict], gpu: bool) -> None:
    print(f"\n{'config':<24}{'estimate GiB':>14}{'measured GiB':>14}{'error':>9}   (per rank: max over ranks)")
    for r in rows:
        if not r["peaks"] or "estimate_bytes" not in r:
            print(f"{r['name']:<24}{'-':>14}{'failed' if not r['peaks'] else '-':>14}")
            continue
        key = "torch_peak_bytes" if gpu else "rss_peak_bytes"
        measured = max(p.get(key, 0) for p in r["peaks"])
        est = r["estimate_bytes"]
        extra = f"   model part {(r['model_bytes']) / GIB:.3f}" if "model_bytes" in r else ""
        print(f"{r['name']:<24}{est / GIB:>14.3f}{measured / GIB:>14.3f}{(est - measured) / measured * 100:>+8.1f}%{extra}")


def reference() -> int:
    """Planner vs the H200 table of the reference doc (no runs)."""
    from zeroboard import planner
    from zeroboard.job import devices
    from zeroboard.job.spec import JobSpec

    shape = planner.shape_from_config(TINYLLAMA)
    h200 = [devices.Gpu(0, "NVIDIA H200", 143 << 30, 139 << 30, 0, 0, (9, 0))]
    print(f"1.1B Llama (Ψ = {shape.params:,}), bf16, seq 1024, micro-batch 8, one H200")
    print(f"{'config':<44}{'ZeroBoard est':>14}{'measured':>9}{'error':>8}{'ref-script est':>15}{'reference':>10}"
          f"{'error':>8}")
    for (stage, off, ft), ref in REFERENCE_H200.items():
        spec = JobSpec(finetuning_type=ft, deepspeed_stage=stage, offload=off, precision="bf16", cutoff_len=1024,
                       per_device_train_batch_size=8, lora_rank=16, lora_target=["all"])
        ours = planner.estimate(spec, h200, model=shape).peak_bytes / GIB
        bare = planner.estimate(spec, h200, model=shape, weights_16bit_without_ds=True).peak_bytes / GIB
        name = f"{ft} {planner.setup_of(spec, h200).label()}"
        err = f"{(bare - ref) / ref * 100:+.1f}%" if ref else "-"
        meas = MEASURED_H200[(stage, off, ft)]
        print(f"{name:<44}{ours:>14.2f}{meas:>9.2f}{(ours - meas) / meas * 100:>+7.1f}%{bare:>15.2f}"
              f"{ref if ref else '-':>10}{err:>8}")
    print("ref-script: the table's script loads the model in bf16 without DeepSpeed; ZeroBoard loads fp32 there "
          "(mixed precision), which the 'ZeroBoard est' column models. With DeepSpeed both are the same.")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--rank-probe"]:
        return rank_probe(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu-matrix", action="store_true")
    p.add_argument("--gpu-validate", action="store_true", help="GPU: settings outside the calibration matrix")
    p.add_argument("--reference", action="store_true")
    p.add_argument("--only", choices=["full", "lora"])
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (CPU 10, GPU 6)")
    p.add_argument("--json", type=Path, help="write the measurements here")
    a = p.parse_args(argv)
    os.chdir(ROOT)
    if a.reference:
        return reference()
    if a.gpu_matrix:
        return gpu_matrix(a.only, a.steps or 6, a.json)
    if a.gpu_validate:
        return gpu_validate(a.steps or 6, a.json)
    return cpu_runs(a.steps or 10, a.json)


if __name__ == "__main__":
    sys.exit(main())
