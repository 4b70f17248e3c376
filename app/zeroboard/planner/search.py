"""Find the setting that fits: stage x offload x micro-batch x gradient checkpointing, fastest first.

For the chosen devices every combination is planned (the same memory model as the plan) and given its expected
seconds per optimizer step (:mod:`.speed`, built from the pieces of a step measured on an H200); the global batch
stays what the job asks (micro-batch x accumulation x devices). Memory comes first: those that fit with the
headroom the measured errors call for (memory.HEADROOM), then those that fit tightly, then the rest; within each,
the fastest first. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..job.placement import offloads_parameters
from .memory import Plan, Setup, plan_one, with_liger
from .shapes import ModelShape
from .speed import MEASURED, Rates, StepTime, step_time

SETTINGS = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]


@dataclass
class Choice:
    stage: str
    offload: bool
    micro_batch: int
    accumulation: int
    checkpointing: bool
    plan: Plan
    time: StepTime
    tokens_per_s: float
    asked: bool = False  # the job's own setting
    rates: Rates = MEASURED  # the GPU the step times are for

    @property
    def step_s(self) -> float:
        return self.time.seconds

    @property
    def mostly(self) -> str:
        """What the step spends most of its time on (a part of :class:`.speed.StepTime`)."""
        return self.time.mostly

    @property
    def fits(self) -> bool | None:
        return self.plan.fits

    @property
    def tight(self) -> bool:
        """It fits, but with less headroom than the measured errors call for (memory.HEADROOM)."""
        return bool(self.plan.fits) and self.plan.roomy is False

    @property
    def setting(self) -> tuple:
        return self.stage, self.offload, self.checkpointing

    def overrides(self) -> dict:
        """The job fields this choice sets (what --fit prints as --set and the button writes into the form)."""
        return {"deepspeed_stage": self.stage, "offload": self.offload, "per_device_train_batch_size": self.micro_batch,
                "gradient_accumulation_steps": self.accumulation, "gradient_checkpointing": self.checkpointing}


def compare(shape: ModelShape, s: Setup, capacity: int | None, rates: Rates = MEASURED) -> dict | None:
    """The job's own setting against the fastest stage/offload setting that fits (with room if one does), at the
    job's micro-batch, accumulation and checkpointing: expected tokens/s of each and their memory (the plan panel's
    "why"). None when nothing fits or the capacity is unknown."""
    if capacity is None:
        return None
    rows = []
    for stage, off in SETTINGS:
        alt = with_liger(shape, replace(s, stage=stage, offload_optimizer=off, offload_param=offloads_parameters(stage, off)))
        p = plan_one(shape, alt)
        p.capacity_bytes = capacity
        rows.append({"stage": stage, "offload": off, "needed_bytes": p.needed_bytes, "fits": bool(p.fits),
                     "roomy": bool(p.roomy),
                     "tokens_per_s": s.world * s.accumulation * s.tokens / step_time(shape, alt, rates).seconds})
    mine = next((r for r in rows if r["stage"] == (s.stage if s.deepspeed else "none")
                 and r["offload"] == s.offload_optimizer), None)
    fitting = [r for r in rows if r["roomy"]] or [r for r in rows if r["fits"]]
    if mine is None or not fitting:
        return None
    return {"current": mine, "best": max(fitting, key=lambda r: r["tokens_per_s"])}


def micro_batches(per_device: int) -> list[int]:
    """Micro-batch sizes that keep the per-device batch of one optimizer step (micro-batch x accumulation)."""
    return [m for m in range(1, per_device + 1) if per_device % m == 0 and m <= 64]


def search(shape: ModelShape, s: Setup, accumulation: int, capacity: int | None,
           stages: list[tuple[str, bool]] | None = None, rates: Rates = MEASURED) -> list[Choice]:
    """Every setting, fastest first: those that fit with room, then those that fit tightly, then the others."""
    per_device = s.micro_batch * accumulation
    asked = (s.stage if s.deepspeed else "none", s.offload_optimizer, s.micro_batch, s.checkpointing)
    out = []
    for stage, off in stages or SETTINGS:
        for ckpt in (False, True):
            for m in micro_batches(per_device):
                packed = s.masked and s.micro_batch == 1  # a mask with one row a micro-batch: packing
                ga = per_device // m
                alt = with_liger(shape, replace(s, stage=stage, offload_optimizer=off, offload_param=offloads_parameters(stage, off),
                                                checkpointing=ckpt, micro_batch=m, masked=packed or m > 1,
                                                accumulation=ga))
                p = plan_one(shape, alt)
                p.capacity_bytes = capacity
                t = step_time(shape, alt, rates)
                out.append(Choice(stage, off, m, ga, ckpt, p, t, s.world * per_device * s.seq / t.seconds,
                                  asked=(stage, off, m, ckpt) == asked, rates=rates))
    out.sort(key=lambda c: (c.fits is False, c.tight, c.step_s))
    return out
