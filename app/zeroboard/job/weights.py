"""How a job holds its weights: one rule for the trainer, the checks, the planner and the page.

Light (no torch): the web server asks it on every form change.

=============  =====================================================================================================
mode           what the trainer does
=============  =====================================================================================================
``deepspeed``  DeepSpeed casts the model to 16 bit and keeps its own fp32 master copy (any stage)
``fp32``       fp32 weights and compute (precision fp32)
``pure_bf16``  bf16 weights and AdamW states, no master copy: updates under half a bf16 step are lost
``autocast``   fp32 weights, 16-bit matmuls under autocast (fp16; or ``master_weights: fp32``; or the cases below)
``split``      bf16 weights; the optimizer keeps each fp32 master weight's low 16 bits (training/master.py), so the
               updates are exactly those of an fp32 master copy, at pure bf16's speed
``bf16_base``  LoRA: the frozen base in bf16 (what autocast would compute with anyway), fp32 adapters under autocast
=============  =====================================================================================================

``auto`` (the default) picks ``split`` for full fine-tuning in bf16 when one process takes one micro-batch per
step, and ``autocast`` otherwise: the gradients of a bf16 model are bf16, so gradient accumulation (and DDP's
average over several processes) would add them up in bf16 where the fp32 master copy adds fp32 gradients.
``master_weights: split`` asks for it anyway. A job that names its own optimizer (``extra_args.optim``) keeps it.
"""

from __future__ import annotations

from .spec import JobSpec

MODES = ("deepspeed", "fp32", "pure_bf16", "autocast", "split", "bf16_base")


def mode(finetuning: str, precision: str, stage: str, pure_bf16: bool, master_weights: str, accumulation: int = 1,
         world: int = 1, own_optimizer: bool = False) -> str:
    """The weights mode for these settings (``precision``: resolved; ``stage``: the effective ZeRO stage)."""
    if stage != "none":
        return "deepspeed"
    if precision not in ("bf16", "fp16"):
        return "fp32"
    if pure_bf16:
        return "pure_bf16"
    if precision != "bf16" or master_weights == "fp32":
        return "autocast"
    if finetuning == "lora":
        return "bf16_base"
    if own_optimizer and master_weights != "split":
        return "autocast"
    if master_weights == "split" or (accumulation == 1 and world == 1):
        return "split"
    return "autocast"


def of_job(spec: JobSpec, precision: str, stage: str, world: int) -> str:
    """The mode of a job, given its placement's resolved precision, effective stage and world size."""
    # a preference stage's trainer (TRL) makes its own optimizer, as a job that names one does
    return mode(spec.finetuning_type, precision, stage, spec.pure_bf16, spec.master_weights,
                spec.gradient_accumulation_steps, world, "optim" in spec.extra_args or spec.training_stage != "sft")


def loads_16bit(m: str) -> bool:
    """Whether the trainer loads the model in 16 bit (the split mode loads fp32 and splits it itself)."""
    return m in ("deepspeed", "pure_bf16", "bf16_base")
