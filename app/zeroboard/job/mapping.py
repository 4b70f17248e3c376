"""Where each job field goes: the transformers ``TrainingArguments`` it sets, or the part of ZeroBoard that reads it.

Every field of :class:`~zeroboard.job.spec.JobSpec` declares this in its own definition (``_f(..., to=...)``):

- ``trainer("learning_rate")``: the argument of that name gets the field's value as it is;
- ``trainer("bf16", "fp16", value=fn)``: several arguments, or a converted value: ``fn(job, resolved)`` returns
  them (``resolved``: what the trainer settles on the machine first, see :class:`Resolved`);
- ``own("data")``: no Trainer argument; ZeroBoard itself reads it -- ``data`` (tokenizing the data), ``model``
  (loading the model and its adapters), ``launch`` (the command, its environment and the DeepSpeed preset it names),
  ``run`` (the trainer's own steps, such as resuming), ``watch`` (the run's supervisor, which watches it: whether
  it still moves);
- both, when a field does two things (``trainer("gradient_checkpointing", own="model")``).

The trainer's arguments (:func:`~zeroboard.job.spec.trainer_arguments`) and the arguments the job owns
(``checks.OWNED_ARGS``: refused in ``extra_args``) are generated from these declarations; a test sets every field
to another value and checks that it reached what it declares.

Light (stdlib only): the web server imports the spec.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PARTS = ("data", "model", "launch", "run", "watch")  # ZeroBoard's own readers of a field


@dataclass(frozen=True)
class Resolved:
    """What the trainer settles before it makes its arguments: the DeepSpeed config it read, the Liger kernels it
    could turn on here (``training.speedups``)."""

    ds_config: dict | None = None
    liger: bool = False
    liger_config: dict = field(default_factory=dict)


@dataclass(frozen=True)
class To:
    args: tuple[str, ...] = ()  # the TrainingArguments the field sets (and owns: extra_args may not set them)
    value: Callable[[Any, Resolved], dict] | None = None  # their values from the job; None: the one argument, as it is
    parts: tuple[str, ...] = ()  # ZeroBoard's own readers
    extra: bool = False  # any further TrainingArguments, by name (extra_args): none of them owned

    def arguments(self, name: str, job: Any, resolved: Resolved) -> dict:
        """The TrainingArguments this field sets for ``job``."""
        if self.value is not None:
            return self.value(job, resolved)
        return {self.args[0]: getattr(job, name)} if self.args else {}


def trainer(*args: str, value: Callable[[Any, Resolved], dict] | None = None, own: str | tuple[str, ...] = (),
            extra: bool = False) -> To:
    parts = (own,) if isinstance(own, str) else tuple(own)
    if len(args) > 1 and value is None:  # pragma: no cover - a schema bug (several arguments need a value function)
        raise ValueError(args)
    return To(tuple(args), value, parts, extra)


def own(*parts: str) -> To:
    if not parts or set(parts) - set(PARTS):  # pragma: no cover - a schema bug (a part that is none of PARTS)
        raise ValueError(parts)
    return To(parts=parts)


# --- fields whose value is not the argument's as it is -----------------------------------------------------------

def max_steps(job, _: Resolved) -> dict:
    return {"max_steps": job.max_steps if job.max_steps > 0 else -1}  # 0: use the epochs (the Trainer's -1)


def precision(job, _: Resolved) -> dict:
    return {"bf16": job.precision == "bf16", "fp16": job.precision == "fp16"}


def save_steps(job, _: Resolved) -> dict:
    return {"save_strategy": "steps" if job.save_steps > 0 else "no", "save_steps": job.save_steps or 500}


def eval_steps(job, _: Resolved) -> dict:
    """Every N steps when there is an evaluation set; without one, nothing (the final evaluation is ZeroBoard's)."""
    if job.eval_steps > 0 and (job.val_size > 0 or job.eval_dataset):
        return {"eval_strategy": "steps", "eval_steps": job.eval_steps}
    return {}


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def dataloader_workers(job, _: Resolved) -> dict:
    """At most the cores of the machine the trainer runs on: a file written for a cluster node may ask for more
    (the checks say so before launch; here it is clamped)."""
    return {"dataloader_num_workers": min(job.dataloader_num_workers, cores())}


def liger(_, resolved: Resolved) -> dict:
    """The kernels as the trainer resolved ``liger_kernel`` on this machine and model (auto: on where they work)."""
    return {"use_liger_kernel": True, "liger_kernel_config": resolved.liger_config} if resolved.liger else {}


def device_type(job, _: Resolved) -> dict:
    cpu = job.device_type == "cpu"
    return {"use_cpu": cpu, **({"ddp_backend": "gloo"} if cpu else {})}


def deepspeed(_, resolved: Resolved) -> dict:
    return {"deepspeed": resolved.ds_config}  # the content of the file the command names


def extra_args(job, _: Resolved) -> dict:
    """The extra TrainingArguments as given; a DataLoader worker count above the cores of the machine that runs
    this (the trainer's) is used as the cores (the checks noted it: a count meant for a larger machine)."""
    out = dict(job.extra_args)
    n, cores = out.get("dataloader_num_workers"), _cores()
    if isinstance(n, int) and not isinstance(n, bool) and n > cores:
        out["dataloader_num_workers"] = cores
    return out


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
