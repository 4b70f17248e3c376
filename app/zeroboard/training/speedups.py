"""The speed-up options (Liger kernels, attention kernel, how the weights are held) resolved for this machine and model."""

from __future__ import annotations

import os

from ..job import liger as ligerinfo, placement, spec as specmod, weights
from ..words import Msg, say


def kernel_words(kernels: tuple[str, ...]) -> Msg:
    """The kernels Liger applies, in words: RMSNorm, SwiGLU, RoPE, fused linear cross-entropy."""
    out = say(f"train.liger_k.{kernels[0]}")
    for k in kernels[1:]:
        out = say("train.liger_and", a=out, b=say(f"train.liger_k.{k}"))
    return out


def weights_note(mode: str, precision: str, stage: str) -> Msg:
    """How the weights are held, as this run really holds them (``mode``: job.weights.mode)."""
    if mode == "deepspeed":
        return (say("train.weights_ds_half", precision=precision, stage=stage) if precision in ("bf16", "fp16")
                else say("train.weights_ds_fp32", stage=stage))
    if mode in ("pure_bf16", "split"):
        return say(f"train.weights_{mode}")
    if mode in ("autocast", "bf16_base"):
        return say(f"train.weights_{mode}", precision=precision)
    return say("train.weights_plain", precision=precision)


class Speedups:
    """The speed-up options resolved for this machine and model, with a line saying what was chosen."""

    def __init__(self, job: specmod.JobSpec, ds_config: dict | None):
        import torch
        from transformers import AutoConfig

        stage = placement.zero_setting(ds_config)[0]
        stage3 = stage == "3"
        model_type = AutoConfig.from_pretrained(job.model_name_or_path).model_type
        self.notes: list[Msg] = []
        self.liger, self.liger_config, self.liger_kernels = False, {}, ()
        if job.liger_kernel != "off":
            why_not, cov = None, None
            if not torch.cuda.is_available():
                why_not = say("train.liger_no_cuda")
            elif ligerinfo.source_text() is None:
                why_not = say("train.liger_not_installed")
            else:
                # ZeRO-3 shards lm_head and the fused loss reads its weight directly; a LoRA on lm_head would be
                # skipped; some model types' functions raise for it (Granite): the fused loss stays off there
                self.liger_config = ligerinfo.trainer_config(model_type, stage3, job.finetuning_type == "lora"
                                                             and "lm_head" in job.lora_target)
                cov = ligerinfo.coverage(model_type, self.liger_config)
                if cov is None or not cov.kernels:
                    why_not = say("train.liger_no_kernels", model_type=repr(model_type))
            if why_not and job.liger_kernel == "on":
                raise ValueError(say("train.liger_on_but", why=why_not))
            if why_not:
                self.notes.append(say("train.liger_off", why=why_not))
                self.liger_config = {}
            else:
                self.liger, self.liger_kernels = True, cov.kernels
                self.notes.append(say("train.liger_on", kernels=kernel_words(cov.kernels)))
        if job.pure_bf16 and job.precision != "bf16":
            raise ValueError(say("train.pure_bf16_precision", precision=job.precision))
        self.attn = None if job.attn_implementation == "auto" else job.attn_implementation
        self.notes.append(say("train.attention", attn=self.attn or say("train.attention_default")))
        # the launcher's world size: the weights mode depends on it (several processes average bf16 gradients)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self.weights = weights.of_job(job, job.precision, stage, world)
        self.notes.append(weights_note(self.weights, job.precision, stage))

    def to_dict(self) -> dict:
        return {"liger": self.liger, "liger_config": self.liger_config, "liger_kernels": list(self.liger_kernels),
                "attn_implementation": self.attn, "weights": self.weights,
                "notes": [str(n) for n in self.notes]}
