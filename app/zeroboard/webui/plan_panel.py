"""Beside the memory plan: the "Use this setting" button and the top choices it found (render_fit / wire_fit)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .. import words
from ..job import devices
from ..planner import traces
from ..runs import probes
from . import form as formmod, handlers, plan_fit

FIT_FIELDS = ("deepspeed_stage", "offload", "per_device_train_batch_size", "gradient_accumulation_steps",
              "gradient_checkpointing")


TRACE_TICK_S = 2.0  # while a model's code is traced for its plan: how often the page looks whether it is done


@dataclass
class FitPanel:
    button: gr.Button
    budget: gr.Number  # seconds the button may spend measuring settings on the job's devices (runs.probes)
    choices: gr.Markdown
    tracing: gr.Timer  # on only while the plan waits for a trace (planner.traces), off otherwise


def render_fit(f: formmod.Form, lang: str) -> FitPanel:
    with gr.Row():
        button = gr.Button(words.label("use_setting", lang), size="sm", elem_id="zb-use-setting", scale=3)
        budget = gr.Number(probes.BUDGET_S, label=words.label("fit_probe_s", lang), minimum=0, maximum=3600, precision=0,
                           elem_id="zb-fit-probe-s", scale=1, min_width=120)
    choices = gr.Markdown(elem_id="zb-fit-choices")
    f.texts["use_setting"] = (button, "value")
    f.texts["fit_probe_s"] = (budget, "label")
    return FitPanel(button, budget, choices, gr.Timer(TRACE_TICK_S, active=traces.tracing()))


def plan_and_timer(md: str) -> tuple[str, object]:
    """The plan, and the tracing timer on while a trace runs (the panel says "tracing…" meanwhile)."""
    return md, gr.Timer(active=traces.tracing())


def wire_tracing(panel: FitPanel, plan: gr.Markdown, f: formmod.Form, gpus: list[devices.Gpu], lang: gr.Radio) -> None:
    """When the trace the plan waits for ends, the plan is drawn again and the timer stops."""
    n = len(f.names)

    def on_tick(*args):
        if traces.tracing():
            return gr.skip(), gr.skip()
        return handlers.plan_markdown(f.values(args[:n]), gpus, args[n]), gr.Timer(active=False)

    panel.tracing.tick(on_tick, [*f.inputs, lang], [plan, panel.tracing], show_progress="hidden")


def wire_fit(panel: FitPanel, f: formmod.Form, gpus: list[devices.Gpu], lang: gr.Radio) -> None:
    """One click: the settings that fit are measured where the devices are here (within the budget field's seconds),
    and the fastest is written into the form's fields (the plan redraws itself)."""
    n = len(f.names)
    targets = [f.fields[k] for k in FIT_FIELDS if k in f.fields]

    def on_click(*args):
        """The probe phase's progress as it goes, then the fields the best setting writes."""
        for changes, md in plan_fit.best_setting_steps(f.values(args[:n]), gpus, args[n + 1], args[n] or 0):
            keep = changes or {}
            yield [keep.get(k, gr.skip()) for k in FIT_FIELDS if k in f.fields] + [md]

    panel.button.click(on_click, [*f.inputs, panel.budget, lang], [*targets, panel.choices], show_progress="hidden")
