"""Every number of the job within reason, each bound with its reason, in one table.

A value outside its bound is refused before launch with the field named, the
bound and why: ``gradient_accumulation_steps=1e9`` is a number the Trainer
accepts and a run that never reaches its first step.  Bounds that depend on
the machine (workers per core) are computed where they are checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..words import Msg, say
from .spec import JobSpec


@dataclass(frozen=True)
class Bound:
    low: float | None  # the smallest value allowed (None: no lower bound here)
    high: float | None  # the largest
    low_key: str = "check.at_least_one"  # the sentence saying why (catalog keys)
    high_key: str = "check.too_long"
    low_open: bool = False  # the low end itself is refused (a learning rate of 0)


BOUNDS: dict[str, Bound] = {
    "learning_rate": Bound(0, 1, "check.lr_range", "check.lr_range", low_open=True),
    "num_train_epochs": Bound(0, 1e6, "check.not_negative"),
    "max_steps": Bound(0, 1e9, "check.max_steps"),
    "per_device_train_batch_size": Bound(1, 4096, high_key="bound.batch"),
    "per_device_eval_batch_size": Bound(1, 4096, high_key="bound.batch"),
    "gradient_accumulation_steps": Bound(1, 4096, high_key="bound.accumulation"),
    "logging_steps": Bound(1, 1e9),
    "save_steps": Bound(0, 1e9, "check.not_negative"),
    "eval_steps": Bound(0, 1e9, "check.not_negative"),
    "max_samples": Bound(0, 1e12, "check.not_negative", "bound.samples"),
    "warmup_steps": Bound(0, 1e9, "check.not_negative"),
    "max_grad_norm": Bound(0, 1e6, "check.not_negative", "bound.grad_norm"),
    "weight_decay": Bound(0, 1, "check.not_negative", "bound.weight_decay"),
    "cutoff_len": Bound(8, 1_048_576, "check.cutoff_range", "check.cutoff_range"),
    "lora_rank": Bound(1, 65536, high_key="bound.lora"),
    "lora_alpha": Bound(1, 65536, high_key="bound.lora_alpha"),
    "pref_beta": Bound(0, 100, "bound.pref_beta", "bound.pref_beta", low_open=True),
    "pref_ftx": Bound(0, 100, "check.not_negative", "bound.pref_weight"),
    "simpo_gamma": Bound(0, 100, "check.not_negative", "bound.pref_weight"),
    # worker processes: above this machine's cores a note and a clamp (checks._check_workers: the file may be meant for
    # a cluster node); above 256, no machine's
    "preprocessing_num_workers": Bound(0, 256, "check.not_negative", "bound.workers_absurd"),
    "dataloader_num_workers": Bound(0, 256, "check.not_negative", "bound.workers_absurd"),
    "max_cell_bytes": Bound(1024, 1 << 30, "bound.at_least", "bound.size"),
    "max_record_bytes": Bound(1024, 1 << 30, "bound.at_least", "bound.size"),
    "image_max_pixels": Bound(1, 1 << 28, high_key="bound.image_pixels"),
    "image_min_pixels": Bound(1, 1 << 28, high_key="bound.image_pixels"),
    "seed": Bound(0, 2**32 - 1, "check.seed_range", "check.seed_range"),
    "num_nodes": Bound(1, 1024, "check.nodes_positive", "bound.nodes"),
    "num_processes": Bound(0, 4096, "check.not_negative", "bound.processes"),  # on CPU: at least 1, at most the cores
    "master_port": Bound(0, 65535, "check.port_range", "check.port_range"),
    "slurm_gpus_per_node": Bound(0, 1024, "check.not_negative", "bound.per_node"),
    "slurm_cpus_per_task": Bound(0, 65536, "check.not_negative", "bound.per_node"),
    "stall_factor": Bound(0, 1000, "check.not_negative", "bound.stall_factor"),
    "stall_min_s": Bound(1, 7 * 86400, "check.at_least_one", "bound.stall_min_s"),
}


def problem(name: str, value: float) -> Msg | None:
    """Why ``value`` is out of its field's bound, or None."""
    b = BOUNDS[name]
    if b.low is not None and (value < b.low or (b.low_open and value == b.low)):
        return say(b.low_key, got=value, limit=_shown(b.low), top=_shown(b.high))
    if b.high is not None and value > b.high:
        return say(b.high_key, got=value, limit=_shown(b.high), top=_shown(b.high))
    return None


def _shown(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def check(spec: JobSpec, errors: dict[str, Msg], warnings: dict[str, Msg] | None = None) -> None:
    """Every bounded field of ``spec``; the first problem per field goes into ``errors`` (notes into ``warnings``)."""
    warnings = {} if warnings is None else warnings
    for name in BOUNDS:
        msg = problem(name, getattr(spec, name))
        if msg is not None:
            errors.setdefault(name, msg)
    if spec.max_steps == 0 and spec.num_train_epochs <= 0 and "num_train_epochs" not in errors:
        errors["num_train_epochs"] = say("check.epochs_positive")
    if spec.val_size < 0 or (spec.val_size >= 1 and not float(spec.val_size).is_integer()) or spec.val_size > 1e9:
        errors["val_size"] = say("data.val_size_range", got=spec.val_size)
    elif spec.val_size > 0 and spec.eval_dataset:
        errors["val_size"] = say("data.both_eval")
    if not 0 <= spec.lora_dropout < 1:
        errors["lora_dropout"] = say("check.dropout_range", got=spec.lora_dropout)
