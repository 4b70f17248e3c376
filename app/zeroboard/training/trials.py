"""Speed changes on trial: off unless ``ZEROBOARD_TRIAL`` names them, for the GPU matrix to measure before one becomes
a default (``benchmarks/gpu_rows.py`` switches them per row; ``benchmarks/zero_counts.py`` checks the losses on CPU).

- ``lora_nocast``: peft's ``lora.Linear.forward`` casts each adapted linear's input to the adapters' dtype (fp32)
  before ``lora_A``; under autocast ``lora_A`` then casts it back to bf16 for its matmul. The matmul sees the same
  bf16 values either way, so switching the cast off (peft's own ``cast_input_dtype_enabled``) changes no number:
  it saves, per adapted linear and micro-batch, an fp32 copy of the input, its bf16 copy again, and the bf16 copy
  autograd keeps for the backward (the base layer keeps the input itself). Only where autocast runs the adapters
  (LoRA without DeepSpeed: ``bf16_base`` and ``autocast`` weights).
- ``lora_fused_a``: the adapted linears that read the same input (q/k/v, gate/up) run their ``lora_A`` as one matmul
  on the concatenated A matrices, split afterwards: the input is read once instead of three (two) times forward and
  backward, and autograd adds one gradient into the input instead of three (two). The cache is keyed by the input
  tensor itself, so a grouping that does not hold only costs the unfused work. Not under ZeRO-3 (its hooks gather a
  module's weights when the module is called; this reads them directly) nor with dropout on the adapters (one mask
  per adapter).
- ``lora_adapters_16bit``: under DeepSpeed the adapters in the model's 16-bit dtype, as ZeRO-2's engine casts them
  anyway. ZeRO-3 does not cast a model ``zero.Init`` built (``engine._configure_distributed_model``), so peft's fp32
  adapters stay fp32 there: fp32 matmuls and an fp32 copy of every adapted input. DeepSpeed keeps fp32 master
  weights for the optimizer either way.
"""

from __future__ import annotations

import os
import weakref

TRIAL_ENV = "ZEROBOARD_TRIAL"
KNOWN = ("lora_nocast", "lora_fused_a", "lora_adapters_16bit")
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("w1", "w3"))


def asked() -> set[str]:
    names = {n.strip() for n in os.environ.get(TRIAL_ENV, "").split(",") if n.strip()}
    unknown = names - set(KNOWN)
    if unknown:
        raise ValueError(f"{TRIAL_ENV}: unknown trial {', '.join(sorted(unknown))} (known: {', '.join(KNOWN)})")
    return names


def apply(model, finetuning: str, weights_mode: str, stage: str) -> list[str]:
    """Apply the trials asked for that fit this run; what was applied, in words for the log."""
    names = asked()
    if finetuning != "lora" or not names:
        return []
    import torch
    from peft.tuners.lora import Linear as LoraLinear

    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, LoraLinear)]
    done = []
    if "lora_adapters_16bit" in names and weights_mode == "deepspeed":
        base = next((m.base_layer.weight.dtype for _, m in layers), torch.float32)
        for _, m in layers:
            for p in (*m.lora_A.parameters(), *m.lora_B.parameters()):
                p.data = p.data.to(base)
        done.append(f"lora_adapters_16bit ({base})")
    autocast = weights_mode in ("bf16_base", "autocast")
    if "lora_nocast" in names and autocast:
        for _, m in layers:
            m.cast_input_dtype_enabled = False
        done.append("lora_nocast")
    if "lora_fused_a" in names and stage != "3":
        groups = fuse_a(layers)
        done.append(f"lora_fused_a ({groups} groups)")
    return done


def fuse_a(layers) -> int:
    """Patch each group of LoRA linears that share a parent and read the same input (``GROUPS``)."""
    import torch.nn as nn

    by_parent: dict[str, dict[str, object]] = {}
    for name, m in layers:
        parent, _, leaf = name.rpartition(".")
        by_parent.setdefault(parent, {})[leaf] = m
    count = 0
    for members in by_parent.values():
        for names in GROUPS:
            group = [members[n] for n in names if n in members]
            plain = all(list(m.active_adapters) == ["default"] and not m.lora_variant and not m.merged
                        and isinstance(m.lora_dropout["default"], nn.Identity) for m in group)
            if len(group) > 1 and plain:
                shared = SharedA(group)
                for m in group:
                    m.forward = shared.forward_of(m)
                count += 1
    return count


class SharedA:
    """One matmul for the A matrices of ``layers``, computed on the first call with a new input and served to the
    others from it."""

    def __init__(self, layers):
        self.layers = layers
        self.ranks = [m.lora_A["default"].weight.shape[0] for m in layers]
        self.key = None  # a weak reference to the input the parts were computed for
        self.parts = None

    def part(self, layer, x):
        import torch
        import torch.nn.functional as F

        if self.key is None or self.key() is not x:
            weight = torch.cat([m.lora_A["default"].weight for m in self.layers])
            autocast = torch.is_autocast_enabled(x.device.type)
            h = F.linear(x if autocast or not layer.cast_input_dtype_enabled else x.to(weight.dtype), weight)
            self.parts, self.key = h.split(self.ranks, dim=-1), weakref.ref(x)
        out = self.parts[self.layers.index(layer)]
        if layer is self.layers[-1]:
            self.parts, self.key = None, None  # nothing held past the group's last layer
        return out

    def forward_of(self, layer):
        def forward(x, *args, **kwargs):
            result = layer.base_layer(x, *args, **kwargs)
            if layer.disable_adapters:
                return result
            # as peft's forward: lora_B on A's output (autocast casts it where it runs), scaled, added in the result's dtype
            return (result + layer.lora_B["default"](self.part(layer, x)) * layer.scaling["default"]).to(result.dtype)

        return forward
