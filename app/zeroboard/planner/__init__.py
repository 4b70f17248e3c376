"""The memory planner: per-device peak memory of a job, from the model's config.json alone, before launch.

- :mod:`.shapes`: the model's layers from config.json
- :mod:`.memory`: model states, activations and buffers of one setting
- :mod:`.advice`: every setting's memory and the fastest that fits
- :mod:`.speed`: seconds per optimizer step of a setting, from the pieces of a step measured on an H200
- :mod:`.search`: ``--fit``: every stage x offload x micro-batch x checkpointing setting, fastest that fits first
- :mod:`.report`: the plan in words (Markdown for the page, text for the terminal), English or Chinese
- :mod:`.record`: plan.json in the run folder, and the measured peaks next to it
- :mod:`.traces`: any other causal LM, planned from a trace of its own code (:mod:`.tracer`, in a child process)
- :mod:`.reserve`: what NVML shows above the allocator's peak
- :mod:`.probes`: ``--fit`` on the devices themselves: each setting that fits run for a few steps

Pure Python (no torch): the web server calls :func:`estimate` on every form change.
"""

from __future__ import annotations

from dataclasses import replace

from ..job import devices
from ..job.spec import JobSpec
from ..words import say, text, tr
from . import advice, search as fitmod, speed, traces
from .memory import CONTEXT, GIB, Plan, Setup, liger_wanted, plan_one, setup_of, with_liger
from .report import advice_text, render_markdown
from .shapes import ModelShape, PlanError, Untraced, read_model, shape_from_config

__all__ = ["CONTEXT", "GIB", "ModelShape", "Plan", "PlanError", "Setup", "Untraced", "estimate", "fit", "read_model",
           "shape_from_config", "traces"]


def _capacity(s: Setup, gpus: list[devices.Gpu], ids: list[int], host_available: int | None) -> int | None:
    if s.device == "cuda":
        chosen = [g for g in gpus if g.index in ids] or gpus
        return min((g.free_bytes for g in chosen), default=None)
    avail = host_available if host_available is not None else devices.host_memory()["available_bytes"]
    return avail // s.world


def rates(gpus: list[devices.Gpu], ids: list[int]) -> speed.Rates:
    """How the chosen GPU's speed relates to the measured H200's (the first chosen; the planner plans alike ones)."""
    chosen = [g for g in gpus if g.index in ids] or gpus
    return speed.rates_for(chosen[0].name if chosen else None)


def _setup(spec: JobSpec, gpus: list[devices.Gpu], shape: ModelShape, weights_16bit_without_ds: bool = False) -> Setup:
    s = setup_of(spec, gpus)
    s = replace(s, weights_16bit_without_ds=weights_16bit_without_ds,
                pure_bf16=spec.pure_bf16 and s.half and not s.deepspeed, liger_wanted=liger_wanted(spec, s.device),
                eager_attention=spec.attn_implementation == "eager" or (
                    spec.attn_implementation == "auto" and shape.eager_default))
    return with_liger(shape, s)


def _model(spec: JobSpec, model: ModelShape | None) -> ModelShape:
    """The job's model: a family derived by hand, or a stub of any other (its trace completes it in :func:`_traced`)."""
    if model is not None:
        return model
    try:
        return read_model(spec.model_name_or_path)
    except Untraced as e:
        return replace(traces.stub(e.config), source=getattr(e, "source", ""), source_msg=getattr(e, "source_msg", None))


def _traced(shape: ModelShape, s: Setup, trace: str, timeout: float) -> ModelShape:
    if shape.traced is None:
        return shape
    return traces.complete(shape, s, trace, timeout)


def estimate(spec: JobSpec, gpus: list[devices.Gpu] | None = None, *, host_available: int | None = None,
             model: ModelShape | None = None, weights_16bit_without_ds: bool = False, trace: str = "cache",
             timeout: float = traces.TIMEOUT_S) -> Plan:
    """Plan a job. ``gpus``: what NVML sees (None: detect now; []: CPU processes).

    Raises PlanError when the model's config cannot be read or its model cannot be planned; a model type the
    planner does not derive is planned from its trace, waited for as ``trace`` says (:mod:`.traces`: "cache",
    "start" or "wait"). ``weights_16bit_without_ds`` models a script that loads the model in bf16/fp16 without
    DeepSpeed (the reference table), not ZeroBoard's trainer.
    """
    gpus = devices.detect_gpus() if gpus is None else gpus
    shape = _model(spec, model)
    s = _setup(spec, gpus, shape, weights_16bit_without_ds)
    shape = _traced(shape, s, trace, timeout)
    ids = spec.gpu_ids or [g.index for g in gpus]
    plan = plan_one(shape, s)
    plan.capacity_bytes = _capacity(s, gpus, ids, host_available)
    plan.notes = [text(f"plan.note.{k}") for k in advice.note_keys(plan)]
    if s.device == "cuda" and not spec.deepspeed:
        plan.alternatives, plan.advice = advice.recommend(shape, s, plan.capacity_bytes, rates(gpus, ids))
        plan.speed = fitmod.compare(shape, s, plan.capacity_bytes, rates(gpus, ids))
    elif plan.fits is False:
        plan.advice = {"kind": "ram_does_not_fit"}
    plan.recommendation = advice_text(plan.advice)
    return plan


CPU_SETTINGS = [("none", False), ("2", False), ("3", False)]  # offload moves nothing on CPU processes


def fit(spec: JobSpec, gpus: list[devices.Gpu] | None = None, *, model: ModelShape | None = None,
        trace: str = "cache", timeout: float = traces.TIMEOUT_S, cpu: bool = False) -> list[fitmod.Choice]:
    """Every stage x offload x micro-batch x checkpointing setting for the job's devices, fastest that fits first.

    The global batch is kept: micro-batch x accumulation x devices stays what the job asks. A job with its own
    DeepSpeed file is searched too (its file is what changes then: the caller says so). CPU processes only with
    ``cpu`` (their settings are measured, not predicted: runs.probes). Raises PlanError.
    """
    gpus = devices.detect_gpus() if gpus is None else gpus
    shape = _model(spec, model)
    s = _setup(spec, gpus, shape)
    shape = _traced(shape, s, trace, timeout)
    ids = spec.gpu_ids or [g.index for g in gpus]
    if s.device != "cuda" and not cpu:
        raise PlanError(say("plan.fit_gpu_only"))
    if s.device != "cuda":
        return fitmod.search(shape, s, spec.gradient_accumulation_steps, _capacity(s, gpus, ids, None), CPU_SETTINGS)
    return fitmod.search(shape, s, spec.gradient_accumulation_steps, _capacity(s, gpus, ids, None), rates=rates(gpus, ids))


def panel(spec: JobSpec | None, gpus: list[devices.Gpu], lang: str = "en") -> str:
    """The web form's live panel: the plan as Markdown, or why there is none (never raises)."""
    cpu = "" if gpus else "_cpu"  # the memory of GPUs (显存), or of the host's CPU processes (内存)
    if spec is None:
        return text(f"plan.fix_fields{cpu}", lang)
    try:
        return render_markdown(estimate(spec, gpus, trace="start"), lang)
    except traces.Tracing as e:
        return text(f"plan.tracing_panel{cpu}", lang, why=tr(e.args[0], lang))
    except PlanError as e:
        return text(f"plan.unavailable{cpu}", lang, why=tr(e.args[0], lang))
