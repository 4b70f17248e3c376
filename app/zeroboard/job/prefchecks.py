"""The checks of preference tuning and QLoRA, before launch: each problem names its field and the fix.

Which stage learns from which data is the data layer's rule (``data.info.stage_problem``, read per dataset by
``checks``); here the fields themselves: a preference stage packs nothing, keeps ``pref_ftx`` and ``pref_loss`` to
the stages that read them, cuts its pairs by LLaMA-Factory's rule (``truncation: proportional``) and trains through
TRL (installed); ``quantization_bit`` is 0, 4 or 8, for LoRA only, on an NVIDIA GPU (bitsandbytes' CUDA kernels),
with bitsandbytes installed, and its weights not offloaded by ZeRO-3.
bitsandbytes 0.50's CPU path did train a 4-bit LoRA of the demo model in one process (loss 8.3 -> 5.4 in 5 steps);
ZeroBoard's CPU runs are 2 processes under gloo, with or without DeepSpeed, which it was not tried under: refused.

Light (no torch): the web server checks every form change.
"""

from __future__ import annotations

from ..words import Msg, say
from . import modelinfo
from .placement import Placement
from .spec import JobSpec

QUANT_BITS = (0, 4, 8)
NO_FTX = ("orpo", "kto")  # ORPO's SFT term is its own (beta weighs the odds ratio); TRL's KTO has none


def check(spec: JobSpec, where: Placement, errors: dict[str, Msg]) -> None:
    """Every problem of the stage's and the quantization's fields, into ``errors`` (the first per field)."""
    stage = spec.training_stage
    if stage != "sft":
        if not modelinfo.installed("trl"):
            errors.setdefault("training_stage", say("check.pref_no_trl", stage=stage))
        if spec.packing:
            errors.setdefault("packing", say("check.stage_packing", stage=stage))
        if spec.truncation != "proportional":  # a pair is cut as LLaMA-Factory cuts it (training.prefdata)
            errors.setdefault("truncation", say("check.stage_truncation", stage=stage))
        if spec.master_weights == "split":
            errors.setdefault("master_weights", say("check.pref_master_split"))
    if spec.pref_ftx and stage in NO_FTX:
        errors.setdefault("pref_ftx", say("check.pref_ftx_stage", stage=stage))
    if spec.pref_loss != "sigmoid" and stage != "dpo":
        errors.setdefault("pref_loss", say("check.pref_loss_stage", stage=stage))
    bits = spec.quantization_bit
    if not bits:
        return
    if bits not in QUANT_BITS:
        errors.setdefault("quantization_bit", say("check.quant_bits", got=bits))
    elif spec.finetuning_type != "lora":
        errors.setdefault("quantization_bit", say("check.quant_full"))
    elif where.kind != "cuda":
        errors.setdefault("quantization_bit", say("check.quant_no_gpu", bits=bits, where=where.kind.upper()))
    elif not modelinfo.installed("bitsandbytes"):
        errors.setdefault("quantization_bit", say("check.quant_no_bnb", bits=bits))
    elif where.offload_param:
        errors.setdefault("quantization_bit", say("check.quant_offload_params"))
