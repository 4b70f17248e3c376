"""Beside the memory plan: the "Use this setting" button and the top choices it found (render_fit / wire_fit)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .. import words
from ..job import devices
from . import form as formmod, plan_fit

FIT_FIELDS = ("deepspeed_stage", "offload", "per_device_train_batch_size", "gradient_accumulation_steps",
              "gradient_checkpointing")


@dataclass
class FitPanel:
    button: gr.Button
    choices: gr.Markdown


def render_fit(f: formmod.Form, lang: str) -> FitPanel:
    button = gr.Button(words.label("use_setting", lang), size="sm", elem_id="zb-use-setting")
    choices = gr.Markdown(elem_id="zb-fit-choices")
    f.texts["use_setting"] = (button, "value")
    return FitPanel(button, choices)


def wire_fit(panel: FitPanel, f: formmod.Form, gpus: list[devices.Gpu], lang: gr.Radio) -> None:
    """One click: the fastest setting that fits is written into the form's fields (the plan redraws itself)."""
    n = len(f.names)
    targets = [f.fields[k] for k in FIT_FIELDS if k in f.fields]

    def on_click(*args):
        changes, md = plan_fit.best_setting(f.values(args[:n]), gpus, args[n])
        return [changes.get(k, gr.skip()) for k in FIT_FIELDS if k in f.fields] + [md]

    panel.button.click(on_click, [*f.inputs, lang], [*targets, panel.choices], show_progress="hidden")
