"""Find the setting that fits: stage x offload x micro-batch x gradient checkpointing, fastest first.

For the chosen devices every combination is planned (the same memory model as the plan) and given an expected
throughput; the global batch stays what the job asks (micro-batch x accumulation x devices). Pure Python.

The throughput model (docs/en/gpu-results.md, "How --fit ranks settings") comes from the measured H200 table of
a 1.1 B Llama (benchmarks/results/h200.json: micro-batch 8 x 1024 tokens, one GPU, Liger on), scaled to other
models by their FLOPs per token and parameter counts:

- compute: seconds per token of the no-DeepSpeed run (full 0.145 s, LoRA 0.203 s per 8192 tokens) x this model's
  FLOPs per token / the 1.1 B model's; gradient checkpointing recomputes the forward pass: x 4/3 (8N instead of
  6N FLOPs, from the arithmetic, not measured); each micro-batch also costs a fixed 5 ms (kernel launches; an
  assumption, not measured), which is what makes small micro-batches slower;
- ZeRO-2: + 0.085 s per optimizer step per 1.1 B trainable parameters on a device (flatten, fp32 copy, AdamW on
  the partition: the full/ZeRO-2 row minus the no-DeepSpeed row);
- ZeRO-3: + 0.42 s per micro-batch per 1.1 B parameters (gathering and releasing every layer in forward and
  backward: the ZeRO-3 rows, full and LoRA, minus no DeepSpeed);
- offload: ZeRO-2 + 0.09 s per micro-batch and + 0.45 s per step per 1.1 B trainable parameters; ZeRO-3 + 0.53 s
  per micro-batch per 1.1 B parameters and + 0.16 s per step per 1.1 B trainable (CPU AdamW and the copies).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..job.placement import offloads_parameters
from .memory import Plan, Setup, plan_one, with_liger
from .shapes import ModelShape

REF_PARAMS = 1.1e9
REF_TOKENS = 8192
REF_FLOPS = 6.76e9  # per token, full fine-tuning of the reference model (6 x matmul parameters + attention)
COMPUTE_S = {"full": 0.145, "lora": 0.203}  # per REF_TOKENS, no DeepSpeed
MICRO_BATCH_S = 0.005
CHECKPOINTING = 4 / 3
STEP_S = {("2", False): 0.085, ("2", True): 0.45, ("3", True): 0.16}  # per step, per REF_PARAMS trainable on a device
MICRO_S = {("3", False): 0.42, ("2", True): 0.09, ("3", True): 0.53}  # per micro-batch (ZeRO-3: per REF_PARAMS)
SETTINGS = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]


def flops_per_token(shape: ModelShape, seq: int, lora: bool) -> float:
    """6N (full) or 4N (LoRA: no weight gradients) over the matmul weights, plus attention (QK^T and AV)."""
    attn = 12 * shape.layers * shape.heads * shape.head_dim * seq
    return (4 if lora else 6) * shape.linear_weight_params + attn


@dataclass
class Choice:
    stage: str
    offload: bool
    micro_batch: int
    accumulation: int
    checkpointing: bool
    plan: Plan
    step_s: float
    tokens_per_s: float
    why: str  # what dominates the step: "compute", "zero3", "offload", "step", "recompute"

    @property
    def fits(self) -> bool | None:
        return self.plan.fits

    @property
    def tight(self) -> bool:
        """It fits, but with less headroom than the measured errors call for (memory.HEADROOM)."""
        return bool(self.plan.fits) and self.plan.roomy is False

    def overrides(self) -> dict:
        """The job fields this choice sets (what --fit prints as --set and the button writes into the form)."""
        return {"deepspeed_stage": self.stage, "offload": self.offload, "per_device_train_batch_size": self.micro_batch,
                "gradient_accumulation_steps": self.accumulation, "gradient_checkpointing": self.checkpointing}


def step_time(shape: ModelShape, s: Setup, accumulation: int, trainable: int, psi: int) -> tuple[float, str]:
    """Expected seconds per optimizer step on one device, and the term that dominates it."""
    lora = s.finetuning == "lora"
    key = (s.stage if s.stage in ("2", "3") else "none", s.offload_optimizer)
    per_token = COMPUTE_S["lora" if lora else "full"] / REF_TOKENS * flops_per_token(shape, s.seq, lora) / (
        REF_FLOPS * (4 / 6 if lora else 1))
    compute = s.tokens * per_token * (CHECKPOINTING if s.checkpointing else 1) + MICRO_BATCH_S
    micro = MICRO_S.get(key, 0.0) * ((psi / REF_PARAMS) if s.stage == "3" else 1.0)
    step = STEP_S.get(key, 0.0) * trainable / s.world / REF_PARAMS
    parts = {"compute": accumulation * s.tokens * per_token, "recompute": accumulation * (compute - s.tokens * per_token
                                                                                          - MICRO_BATCH_S),
             "zero3" if s.stage == "3" and not s.offload_optimizer else "offload": accumulation * micro, "step": step}
    return accumulation * (compute + micro) + step, max(parts, key=parts.get)


def micro_batches(per_device: int) -> list[int]:
    """Micro-batch sizes that keep the per-device batch of one optimizer step (micro-batch x accumulation)."""
    return [m for m in range(1, per_device + 1) if per_device % m == 0 and m <= 64]


def search(shape: ModelShape, s: Setup, accumulation: int, capacity: int | None,
           stages: list[tuple[str, bool]] | None = None) -> list[Choice]:
    """Every setting, fastest first: those that fit with room, then those that fit tightly, then the others."""
    per_device = s.micro_batch * accumulation
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
                t, why = step_time(shape, alt, ga, p.trainable, p.params)
                out.append(Choice(stage, off, m, ga, ckpt, p, t, s.world * per_device * s.seq / t, why))
    out.sort(key=lambda c: (c.fits is False, c.tight, -c.tokens_per_s))
    return out
