"""A traced model's activations: the terms the tracer fitted (:mod:`.tracer`), evaluated for one micro-batch.

Pure Python (no torch). A mode is what decides what autograd keeps (an :class:`~.activations.ActMode` and the
LoRA it adapts with); its key names the tracer's entry. Each part of the model (a layer kind, or "outside") has
coefficients of bytes per token, per position, per token and position, per position pair, and a constant
(:func:`~.tracer.basis`), fitted apart for micro-batches of one sequence where that differs.
"""

from __future__ import annotations

from dataclasses import replace

from .activations import ActMode
from .shapes import ModelShape


def mode_key(m: ActMode, rank: int, targets: list[str]) -> str:
    """The tracer's name for a mode: dtype kind, LoRA, ZeRO-3's fp32 adapters and saved inputs, mask, attention,
    CUDA autocast's fp32 ops, the device's kernels."""
    lora = f"lora{rank}:{','.join(sorted(targets))}" if m.lora else "full"
    flags = [f for f, on in (("a32", m.adapters32), ("z3", m.saves_frozen_inputs), ("masked", m.masked),
                             ("eager", m.eager), ("acf32", m.autocast_fp32)) if on]
    return "|".join([m.kind, lora, *flags, "cuda" if m.cuda else "cpu"])


def mode_request(m: ActMode, rank: int, targets: list[str], pure_adapters: bool) -> dict:
    """What the tracer builds and plays for a mode (``pure_adapters``: LoRA adapters in the model's 16 bit, as
    pure bf16 holds them without DeepSpeed)."""
    return {"kind": m.kind, "lora": m.lora, "rank": rank, "targets": list(targets), "adapters32": m.adapters32,
            "adapters16": pure_adapters, "zero3": m.saves_frozen_inputs, "masked": m.masked, "eager": m.eager,
            "autocast_fp32": m.autocast_fp32, "cuda": m.cuda}


def value(coef: dict, batch: int, seq: int) -> float:
    """Bytes a part keeps for a micro-batch of ``batch`` sequences of ``seq`` tokens (the tracer's basis)."""
    c = coef["one"] if batch == 1 else coef["many"]
    return sum(k * x for k, x in zip(c, (batch * seq, seq, batch * seq * seq, seq * seq, 1)))


def terms(shape: ModelShape, m: ActMode, rank: int, targets: list[str], batch: int) -> dict[str, float]:
    """The layers' bytes (the first as traced, each other by its kind; sliding-window layers with the masked mode's terms once the
    sequence reaches the window, as transformers then masks them), the largest layer's bytes per token, and the
    rest of the model's ("outside"), for one micro-batch."""
    seq = m.seq
    entry = shape.traced[mode_key(m, rank, targets)]
    c = shape.census
    window = c.get("sliding_window", 0)
    masked_entry = None
    if window and seq >= window and not m.masked and any(c["kind_sliding"]):
        masked_entry = shape.traced.get(mode_key(replace(m, masked=True), rank, targets), entry)
    layers, largest = 0.0, 0.0
    for i, kind in enumerate(c["kinds"]):
        use = masked_entry if masked_entry is not None and c["kind_sliding"][kind] else entry
        # the first layer as traced (with LoRA nothing before it needs a gradient: it keeps less), the others by kind
        b = value(use["first"] if i == 0 else use["layers"][str(kind)], batch, seq)
        layers += b
        largest = max(largest, b)
    return {"layers": layers, "largest_per_token": largest / max(1, batch * seq),
            "outside": value(entry["outside"], batch, seq)}


def has(shape: ModelShape, m: ActMode, rank: int, targets: list[str]) -> bool:
    return mode_key(m, rank, targets) in (shape.traced or {})
