"""Which setting to use: every stage/offload setting's memory, and the fastest that fits; the plan's notes."""

from __future__ import annotations

from dataclasses import replace

from ..job.placement import offloads_parameters
from .memory import Plan, Setup, plan_one, with_liger
from .reserve import loss_drift
from .shapes import ModelShape
from .speed import MEASURED, Rates, step_time

SETTINGS = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]


def _setting(stage: str, off: bool, ckpt: bool) -> dict:
    """A setting as advice carries it: the renderer says it in the page's language."""
    return {"stage": stage, "offload": off, "gradient_checkpointing": ckpt}


def recommend(shape: ModelShape, s: Setup, capacity: int | None, rates: Rates = MEASURED) -> tuple[list[dict], dict]:
    """Every stage/offload setting's peak, and the fastest that fits with headroom (else the fastest that fits).

    At the job's micro-batch and accumulation, with gradient checkpointing as a further choice when it is off;
    "fastest" is the step-time model's (:mod:`.speed`).
    """
    rows = []
    for ckpt in ([s.checkpointing] if s.checkpointing else [False, True]):
        for stage, off in SETTINGS:
            alt = with_liger(shape, replace(s, stage=stage, offload_optimizer=off,
                                            offload_param=offloads_parameters(stage, off), checkpointing=ckpt))
            p = plan_one(shape, alt)
            p.capacity_bytes = capacity
            rows.append({**_setting(stage, off, ckpt), "new_checkpointing": ckpt and not s.checkpointing,
                         "peak_bytes": p.peak_bytes, "needed_bytes": p.needed_bytes, "host_bytes": p.host_bytes,
                         "fits": p.fits, "roomy": p.roomy, "step_s": step_time(shape, alt, rates).seconds})
    if capacity is None:
        return rows, {}
    current = next(r for r in rows if r["stage"] == s.stage and r["offload"] == s.offload_optimizer
                   and r["gradient_checkpointing"] == s.checkpointing)
    ranked = sorted(rows, key=lambda r: r["step_s"])
    best = next((r for r in ranked if r["roomy"]), None) or next((r for r in ranked if r["fits"]), None)
    if best is None:
        return rows, {"kind": "nothing_fits"}
    pick = lambda r: {**_setting(r["stage"], r["offload"], r["gradient_checkpointing"]),  # noqa: E731
                      "new_checkpointing": r["new_checkpointing"]}
    speed = {"speed": {"source": rates.source, "gpu": rates.name}}  # where the step times come from
    compared = lambda other: {k: (best[k], other[k]) for k in ("step_s", "needed_bytes")}  # noqa: E731
    if best is current:
        runner = next((r for r in ranked if r["fits"] and r is not best), None)
        return rows, {"kind": "keep", "setting": pick(current), **speed,
                      **({"other": pick(runner), "compared": compared(runner)} if runner else {})}
    return rows, {"kind": "use", "setting": pick(best), "current": pick(current), "current_fits": bool(current["fits"]),
                  "current_tight": bool(current["fits"]) and not current["roomy"],
                  "compared": compared(current), **speed}


def note_keys(plan: Plan) -> list[str]:
    """Which notes apply to this plan (their words are ``plan.note.<key>`` in the catalog)."""
    s, keys = plan.setup, []
    if plan.breakdown["activations"] > plan.peak_bytes / 2 and not s.checkpointing:
        keys.append("checkpointing")
    if s.deepspeed and s.world == 1 and not s.offload_optimizer:
        keys.append("one_gpu")
    if s.finetuning == "lora" and s.stage == "3" and s.half:
        keys.append("lora_zero3")
    if s.device == "cuda" and not s.deepspeed and s.half and s.weights == "autocast":
        keys.append("autocast")
    if s.fused_loss:
        keys.append("fused_loss")
    elif loss_drift(plan.model, s):
        keys.append("loss_layout")  # what reserve.loss_drift adds, and why
    if plan.model.traced is not None:
        keys.append("traced")
    if s.sequences > 1:
        keys.append("pairs")
    if s.reference:
        keys.append("reference")
    if s.quant_bits:
        keys.append("qlora")
    if s.device == "cpu":
        keys.append("cpu")
    return keys
