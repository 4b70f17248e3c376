"""What DeepSpeed does in a training step of ZeroBoard's trainer, counted on CPU: the evidence for job/dstune.py's choices.

Each variant is a real job of ZeroBoard's trainer (``zeroboard.training.train``, the argv ``command.check_and_build``
makes, under torchrun, gloo between the ranks) on a tiny Llama; this script only wraps the trainer's entry point in
each rank to count, per optimizer step (the mean over the steps after the first two):

- ``hooks``: ZeRO-3's module hooks that ran (pre/post forward and backward, ``parameter_offload.py``);
- ``gathered``: parameters ZeRO-3 all-gathered (``partitioned_param_coordinator.__all_gather_params_``) and their
  elements, and the collectives themselves by kind (calls and bytes, at DeepSpeed's torch backend);
- ``flushes``: gradient buckets reduced (ZeRO-2 ``reduce_ipg_grads``, ZeRO-3 ``__reduce_and_partition_ipg_grads``);
- at set-up: the elements the optimizer holds, the reduce bucket's size, ZeRO-3's persistent parameters and the
  modules it hooked, the adapters' dtype;
- the loss of every step (the runs share seed and data: the same losses say the change kept the numerics).

CPU wall times are printed but prove nothing about a GPU.

    python benchmarks/zero_counts.py --out benchmarks/results/zero_counts.json [--variants a,b] [--steps 6]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
COUNTS_FILE = "zero_counts.rank{rank}.json"


@dataclass(frozen=True)
class Variant:
    """One job: the spec's changes, extra environment, and (``ds``) a hand-written DeepSpeed JSON made from the
    tuned preset of the same job: ``"before"`` (the one-GPU values ZeroBoard set before issue 36), or a dict merged
    into ``zero_optimization`` (None: the job's own preset, tuned by ZeroBoard as every run is)."""
    spec: dict
    env: dict = field(default_factory=dict)
    ds: dict | str | None = None
    note: str = ""


OFF = {"ZEROBOARD_DS_TUNING": "off"}
NO_INPUT_GRADS = "ZERO_COUNTS_NO_INPUT_GRADS"
LORA = dict(finetuning_type="lora", lora_rank=16, lora_alpha=32, learning_rate=5e-3)
FULL = dict(finetuning_type="full", learning_rate=1e-3)


def lora(stage: str, n: int, **kw) -> dict:
    return {**LORA, "deepspeed_stage": stage, "num_processes": n, **kw}


def full(stage: str, n: int, **kw) -> dict:
    return {**FULL, "deepspeed_stage": stage, "num_processes": n, **kw}


VARIANTS: dict[str, Variant] = {
    # LoRA, ZeRO-3, several GPUs: the preset as written, then ZeroBoard's values
    "lora-3 x2 / preset": Variant(lora("3", 2), OFF),
    "lora-3 x2 / tuned": Variant(lora("3", 2)),
    "lora-3 x2 / tuned / per-module hooks": Variant(lora("3", 2), ds="no_leaf"),
    # adapters persistent (what issue 36 first set): gathered after every step, one call each
    "lora-3 x2 / tuned / adapters persistent": Variant(lora("3", 2), ds={"stage3_param_persistence_threshold": "adapter"}),
    # with offload (optimizer and parameters on the host); persistent adapters would stay on the device
    "lora-3+offload x2 / preset": Variant(lora("3", 2, offload=True), OFF),
    "lora-3+offload x2 / tuned": Variant(lora("3", 2, offload=True)),
    "lora-3+offload x2 / tuned / adapters persistent": Variant(lora("3", 2, offload=True),
                                                               ds={"stage3_param_persistence_threshold": "adapter"}),
    # what the trainer's enable_input_require_grads prevents (the counting child leaves it out when asked)
    "lora-3 x2 / tuned / no input grads": Variant(lora("3", 2), {NO_INPUT_GRADS: "1"}),
    # LoRA, ZeRO-3, one GPU: as written, as issue 26 left it, now
    "lora-3 x1 / preset": Variant(lora("3", 1), OFF),
    "lora-3 x1 / issue 26": Variant(lora("3", 1), ds="before"),
    "lora-3 x1 / tuned": Variant(lora("3", 1)),
    "lora-3 x1 / tuned / bf16": Variant(lora("3", 1, precision="bf16")),
    "lora-3 x1 / tuned / bf16 / adapters bf16": Variant(lora("3", 1, precision="bf16"),
                                                      {"ZEROBOARD_TRIAL": "lora_adapters_16bit"}),
    "lora-2 x1 / tuned / bf16": Variant(lora("2", 1, precision="bf16")),
    # LoRA, ZeRO-2
    "lora-2 x2 / preset": Variant(lora("2", 2), OFF),
    "lora-2 x2 / tuned": Variant(lora("2", 2)),
    # full fine-tuning, ZeRO-3, several GPUs: the preset, then each model-derived value as a variant
    "full-3 x2 / preset": Variant(full("3", 2), OFF),
    "full-3 x2 / tuned": Variant(full("3", 2)),
    "full-3 x2 / layer prefetch": Variant(full("3", 2), ds={"stage3_prefetch_bucket_size": "layer"}),
    "full-3 x2 / layer buckets": Variant(full("3", 2), ds={"stage3_prefetch_bucket_size": "layer",
                                                           "reduce_bucket_size": "layer"}),
    "full-3 x2 / decoder leaves": Variant(full("3", 2), ds={"leaf_module": "layer"}),
    "full-3 x1 / tuned": Variant(full("3", 1)),
    "full-3 x1 / layer buckets": Variant(full("3", 1), ds={"reduce_bucket_size": "layer"}),
    # DeepCompile: the Trainer's torch_compile makes accelerate call engine.compile(), which DeepCompile needs
    "full-3 x1 / deepcompile": Variant(full("3", 1, extra_args={"torch_compile": True}), ds={"compile": True}),
    # no DeepSpeed, LoRA: the trials of the single-GPU path (bf16 base, fp32 adapters under autocast)
    "lora-none x1 / bf16": Variant(lora("none", 1, precision="bf16")),
    "lora-none x1 / bf16 / no input cast": Variant(lora("none", 1, precision="bf16"), {"ZEROBOARD_TRIAL": "lora_nocast"}),
    "lora-none x1 / bf16 / fused A": Variant(lora("none", 1, precision="bf16"),
                                           {"ZEROBOARD_TRIAL": "lora_nocast,lora_fused_a"}),
}


# --- the parent: one job per variant ------------------------------------------------

def base_spec(work: Path, steps: int, name: str):
    from zeroboard.job import spec as specmod

    return specmod.JobSpec(model_name_or_path=str(ROOT / "cache/demo/model"), dataset_dir=str(ROOT / "cache/demo/data"),
                           dataset=["identity", "demo_alpaca"], cutoff_len=128, per_device_train_batch_size=4,
                           max_steps=steps, logging_steps=1, lr_scheduler_type="constant", device_type="cpu",
                           precision="fp32", output_dir=str(work / slug(name)), seed=7)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def hand_written(v: Variant, job, path: Path) -> str:
    """The DeepSpeed JSON of a variant that changes ZeroBoard's values: the tuned preset with the change, as a file of
    the user's own (ZeroBoard runs such a file as written)."""
    from zeroboard.job import dstune, modelinfo, placement

    where = placement.place(job, [])
    tuned, _ = dstune.for_run(where.ds_config, where.ds_path, job.num_processes, job.model_name_or_path,
                              job.gradient_checkpointing, job.finetuning_type == "lora", job.lora_rank, job.lora_target)
    cfg = copy.deepcopy(tuned)
    zero = cfg["zero_optimization"]
    facts = dstune.facts(job.model_name_or_path, job.lora_rank, job.lora_target)
    if v.ds == "before":  # issue 26's one-GPU values: overlap off, every parameter persistent, nothing for LoRA
        cfg = copy.deepcopy(where.ds_config)
        cfg["zero_optimization"].update(overlap_comm=False, stage3_param_persistence_threshold=facts.params)
    elif v.ds == "no_leaf":
        zero.pop("leaf_module", None)
    elif v.ds.get("compile"):
        cfg["compile"] = {"deepcompile": True}
    else:
        for key, value in v.ds.items():
            if value == "layer":
                value = {"classes": [facts.layer_class]} if key == "leaf_module" else facts.layer_params
            elif value == "adapter":  # at least the largest adapter, and no less than "auto" (10 x hidden)
                hidden = (modelinfo.model_config(Path(job.model_name_or_path)) or {}).get("hidden_size", 0)
                value = max(facts.lora_largest, 10 * hidden)
            if value is None:
                zero.pop(key, None)
            else:
                zero[key] = value
    path.write_text(json.dumps(cfg, indent=2))
    return str(path)


def run_variant(name: str, v: Variant, work: Path, steps: int, timeout: float) -> dict:
    from zeroboard.job import command, record, spec as specmod

    job = replace(base_spec(work, steps, name), **v.spec)
    shutil.rmtree(job.output_dir, ignore_errors=True)  # this script's own folder, run again
    if v.ds is not None:
        job = replace(job, deepspeed=hand_written(v, job, work / f"{slug(name)}.ds.json"))
    prepared = command.check_and_build(job, [])
    if prepared.command is None:
        return {"error": json.dumps({k: str(m) for k, m in prepared.report.errors.items()})}
    argv = list(prepared.command.argv)
    at = argv.index("-m")
    argv[at:at + 2] = [str(Path(__file__).resolve()), "--child"]
    env = {**os.environ, **prepared.command.env, **v.env, "PYTHONPATH": str(ROOT / "app")}
    out = Path(job.output_dir)
    t0 = time.time()
    p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.time() - t0
    evs = record.read_events(out / record.EVENTS_FILE) if (out / record.EVENTS_FILE).is_file() else []
    if p.returncode:
        said = [e.get("message", "") for e in evs if e["event"] == "error"]
        return {"error": ("; ".join(said) or (p.stderr + p.stdout))[-1500:]}
    ranks = [json.loads((out / COUNTS_FILE.format(rank=r)).read_text()) for r in range(job.num_processes)]
    losses = [e["loss"] for e in evs if e["event"] == "log" and "loss" in e]
    tuned = out / record.DS_CONFIG_FILE
    return {"job": specmod.changed(job) | {"deepspeed": job.deepspeed or None}, "env": v.env, "wall_s": round(wall, 1),
            "losses": losses, "rank0": ranks[0], "ranks_agree": all(r["per_step"] == ranks[0]["per_step"] for r in ranks),
            "ds_config": json.loads(tuned.read_text()).get("zero_optimization") if tuned.is_file() else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--variants", default="", help="comma list of names (default: all)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zb-counts"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--markdown", action="store_true", help="print --out's rows as the docs' table, then stop")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a, rest = ap.parse_known_args()
    if a.child:
        return child(rest)
    if a.markdown:
        rows = json.loads(a.out.read_text())["rows"]
        print(markdown({n: rows[n] for n in VARIANTS if n in rows}))
        return 0
    from zeroboard import workspace

    workspace.allow([f"{a.workdir}:rw"])
    a.workdir.mkdir(parents=True, exist_ok=True)
    names = [n for n in a.variants.split(",") if n] or list(VARIANTS)
    results = json.loads(a.out.read_text()) if a.out and a.out.is_file() else {"rows": {}}
    results.update(steps=a.steps, model="cache/demo/model (Llama, hidden 128, 2 layers, vocabulary 768)",
                   torch=_version("torch"), deepspeed=_version("deepspeed"), peft=_version("peft"))
    for name in names:
        t = time.time()
        row = run_variant(name, VARIANTS[name], a.workdir, a.steps, a.timeout)
        results["rows"][name] = row
        print(f"{name}: {time.time() - t:.0f} s " + (row.get("error", "")[-600:] or summary_line(row)), flush=True)
        if a.out:
            a.out.write_text(json.dumps(results, indent=1) + "\n")
    print_table(results["rows"])
    return 0


def markdown(rows: dict) -> str:
    """The table of docs/en/gpu-results.md: per step in rank 0, and the losses against the group's first row's (the
    largest relative difference of a step's loss)."""
    out = ["| variant | module hooks | parameters gathered | all-gather calls | MB gathered | bucket flushes | "
           "optimizer elements | reduce bucket | losses |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    first: dict[str, list] = {}
    for name, r in rows.items():
        if "error" in r:
            lines = r["error"].strip().splitlines()
            said = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1]).strip()
            said = said if len(said) <= 100 else said[-100:].partition(" ")[2]
            out.append(f"| {name} | failed: {said} | | | | | | | |")
            continue
        s, init = r["rank0"]["mean"], r["rank0"]["init"]
        group = name.split(" / ")[0] + ("bf16" if "bf16" in name else "")
        ref = first.setdefault(group, r["losses"])
        worst = max((abs(a - b) / abs(a) for a, b in zip(ref, r["losses"])), default=0.0)
        same = "same" if worst == 0 else f"within {worst:.0e}"
        out.append(f"| {name} | {s.get('hooks', 0):.0f} | {s.get('gathered_params', 0):.0f} | "
                   f"{s.get('allgather_calls', 0):.0f} | {s.get('allgather_bytes', 0) / 1e6:.2f} | {s.get('flushes', 0):.0f} | "
                   f"{init.get('optimizer_numel', 0):,} | {init.get('reduce_bucket', 0):,} | "
                   f"{same} |")
    return "\n".join(out)


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def summary_line(row: dict) -> str:
    s = row["rank0"]["mean"]
    return (f"hooks {s.get('hooks', 0):.0f}, gathered {s.get('gathered_params', 0):.0f} params "
            f"({s.get('gathered_numel', 0):.0f} el.), flushes {s.get('flushes', 0):.0f}, losses {fmt(row['losses'])}")


def fmt(xs) -> str:
    return " ".join(f"{x:.4f}" for x in xs)


def print_table(rows: dict) -> None:
    print(f"\n{'variant':<42}{'hooks':>7}{'gath.':>7}{'elements':>10}{'ag calls':>9}{'ag MB':>7}{'flush':>6}"
          f"{'opt el.':>9}{'bucket':>10}{'persist':>9}{'step s':>8}  losses")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:<42} FAILED {r['error'][-160:]!r}")
            continue
        s, init = r["rank0"]["mean"], r["rank0"]["init"]
        print(f"{name:<42}{s.get('hooks', 0):7.0f}{s.get('gathered_params', 0):7.0f}{s.get('gathered_numel', 0):10.0f}"
              f"{s.get('allgather_calls', 0):9.0f}{s.get('allgather_bytes', 0) / 1e6:7.2f}{s.get('flushes', 0):6.0f}"
              f"{init.get('optimizer_numel', 0):9d}{init.get('reduce_bucket', 0):10d}{init.get('persistent_numel', 0):9d}"
              f"{statistics.median(r['rank0']['step_s']):8.3f}  {fmt(r['losses'])}")


# --- the child: ZeroBoard's trainer with counters ------------------------------------

def child(flags: list[str]) -> int:
    counts: Counter = Counter()
    marks: list[tuple[float, dict]] = []
    init: dict = {}
    install_counters(counts, marks, init)
    from zeroboard.job import dstune
    from zeroboard.training import train

    if os.environ.get(NO_INPUT_GRADS):
        dstune.needs_input_grads = lambda config, lora: False

    code = train.main(flags)
    rank = int(os.environ.get("RANK", "0"))
    per_step = [{k: b[k] - a.get(k, 0) for k in b} for (_, a), (_, b) in zip(marks, marks[1:])]
    times = [tb - ta for (ta, _), (tb, _) in zip(marks, marks[1:])]
    kept = per_step[2:] or per_step
    keys = sorted({k for s in kept for k in s})
    out = {"init": init, "per_step": per_step, "step_s": times[2:] or times,
           "mean": {k: sum(s.get(k, 0) for s in kept) / max(1, len(kept)) for k in keys}}
    output_dir = flags[flags.index("--output_dir") + 1]
    Path(output_dir, COUNTS_FILE.format(rank=rank)).write_text(json.dumps(out))
    return code


def install_counters(counts: Counter, marks: list, init: dict) -> None:
    import deepspeed  # noqa: F401 - the modules below are patched before the trainer builds anything
    from deepspeed.comm.torch import TorchBackend
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero import parameter_offload, partition_parameters
    from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    def wrap(cls, name, before):
        original = getattr(cls, name)

        def wrapped(self, *args, **kw):
            before(*args, **kw)
            return original(self, *args, **kw)

        wrapped.original = original
        setattr(cls, name, wrapped)

    def nbytes(t) -> int:
        return t.numel() * t.element_size() if hasattr(t, "numel") else sum(nbytes(x) for x in t)

    def collective(kind, position, keyword):
        def count(*args, **kw):
            counts[f"{kind}_calls"] += 1
            counts[f"{kind}_bytes"] += nbytes(args[position] if len(args) > position else kw[keyword])
        return count

    # DeepSpeed's torch backend: (name, kind, the counted tensor's position and keyword)
    for name, kind, position, keyword in (
            ("all_gather_into_tensor", "allgather", 0, "output_tensor"), ("all_gather", "allgather", 0, "tensor_list"),
            ("all_gather_coalesced", "allgather", 0, "output_tensors"), ("all_gather_base", "allgather", 0, "output_tensor"),
            ("reduce_scatter_tensor", "reduce_scatter", 1, "input_tensor"),
            ("reduce_scatter", "reduce_scatter", 1, "input_list"), ("all_reduce", "all_reduce", 0, "tensor"),
            ("all_reduce_coalesced", "all_reduce", 0, "tensors"), ("broadcast", "broadcast", 0, "tensor")):
        wrap(TorchBackend, name, collective(kind, position, keyword))

    def hook(*args, **kw):
        counts["hooks"] += 1

    for name in ("pre_sub_module_forward_function", "post_sub_module_forward_function",
                 "pre_sub_module_backward_function", "post_sub_module_backward_function"):
        wrap(parameter_offload.DeepSpeedZeRoOffload, name, hook)

    def gathering(params, *args, **kw):
        todo = [p for p in params if p.ds_status == partition_parameters.ZeroParamStatus.NOT_AVAILABLE]
        counts["gathered_params"] += len(todo)
        counts["gathered_numel"] += sum(p.ds_numel for p in todo)

    wrap(PartitionedParameterCoordinator, "_PartitionedParameterCoordinator__all_gather_params_", gathering)
    wrap(DeepSpeedZeroOptimizer, "reduce_ipg_grads", lambda *a, **k: counts.update(flushes=1))
    wrap(DeepSpeedZeroOptimizer_Stage3, "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads",
         lambda *a, **k: counts.update(flushes=1))

    original_step = DeepSpeedEngine.step

    def step(self, *args, **kw):
        out = original_step(self, *args, **kw)
        if not init:
            describe(self, init)
        marks.append((time.perf_counter(), dict(counts)))
        return out

    DeepSpeedEngine.step = step
    _count_without_deepspeed(counts, marks, init)


def _count_without_deepspeed(counts: Counter, marks: list, init: dict) -> None:
    """Runs without DeepSpeed: step marks from the optimizer's step, the adapters' dtype at the first one."""
    import torch
    from transformers import Trainer

    original = Trainer.create_optimizer

    def create_optimizer(self, *args, **kw):
        opt = original(self, *args, **kw)
        if getattr(self, "is_deepspeed_enabled", False):
            return opt
        inner = opt.optimizer if hasattr(opt, "optimizer") else opt
        model = self.model

        def mark(*a, **k):
            if not init:
                init.update(optimizer_numel=sum(p.numel() for g in inner.param_groups for p in g["params"]),
                            adapter_dtypes=sorted({str(p.dtype) for n, p in model.named_parameters() if "lora_" in n}))
            marks.append((time.perf_counter(), dict(counts)))

        inner.register_step_post_hook(lambda *a, **k: mark())
        return opt

    Trainer.create_optimizer = create_optimizer
    del torch


def describe(engine, init: dict) -> None:
    """What the engine holds once set up (at its first step)."""
    opt = engine.optimizer
    module = engine.module
    if hasattr(opt, "fp16_groups") and hasattr(opt, "parameter_offload"):  # ZeRO-3
        init["optimizer_numel"] = sum(p.ds_numel for g in opt.fp16_groups for p in g)
        init["persistent_numel"] = sum(p.ds_numel for p in opt.persistent_parameters)
        init["persistent_params"] = len(opt.persistent_parameters)
        init["hooked_modules"] = len(opt.parameter_offload.forward_hooks) // 2
        init["leaf_modules"] = sum(1 for m in module.modules() if getattr(m, "_z3_leaf", False))
    elif hasattr(opt, "bit16_groups"):  # ZeRO-1/2
        init["optimizer_numel"] = sum(p.numel() for g in opt.bit16_groups for p in g)
    init["reduce_bucket"] = int(getattr(opt, "reduce_bucket_size", 0))
    init["model_numel"] = sum(getattr(p, "ds_numel", p.numel()) for p in module.parameters())
    init["adapter_dtypes"] = sorted({str(p.dtype) for n, p in module.named_parameters() if "lora_" in n})


if __name__ == "__main__":
    sys.exit(main())
