"""The job form, generated from the spec: one widget per field, grouped by the spec's sections.

Widget kind follows the field type: Dropdown for a Literal, Checkbox for a
bool, Number for int/float (whole numbers for int), Textbox for text and
lists (comma-separated), Code for a mapping (JSON).  Devices sit at the
bottom as in LLaMA Board: Device count (read-only), the GPU picker or the
number of CPU processes, DeepSpeed stage and Enable offload.

To add a section or a field, change the spec; to place a section somewhere
special, add it to ``BOTTOM`` / ``COLLAPSED`` or give it a renderer in
``SPECIAL``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

import gradio as gr

from .. import words
from ..job import devices, spec
from . import handlers

PER_ROW = 5
BOTTOM = ("output", "devices")  # below the buttons, in this order
COLLAPSED = ("speed", "lora", "vision", "pref")  # accordions, closed at first
WIDE = {"model_name_or_path": 3, "dataset_dir": 2, "dataset": 2, "output_dir": 3, "deepspeed": 3, "lora_target": 2}
DEVICE_MAIN = ("gpu_ids", "num_processes", "deepspeed_stage", "offload")  # the row next to Device count


@dataclass
class Form:
    fields: dict[str, gr.components.Component] = field(default_factory=dict)  # spec field -> widget
    # page word -> (block, property), or (block, {property: page word}) for a block with several words (a chart)
    texts: dict[str, tuple[gr.blocks.Block, str | dict[str, str]]] = field(default_factory=dict)
    device_count: gr.Number | None = None

    @property
    def names(self) -> list[str]:
        return list(self.fields)

    @property
    def inputs(self) -> list:
        return list(self.fields.values())

    def values(self, args) -> dict:
        return dict(zip(self.names, args, strict=True))


def widget(name: str, value, lang: str, gpus: list[devices.Gpu]) -> gr.components.Component:
    """The widget for one spec field, labelled in ``lang``."""
    t = spec.field_type(name)
    kw = dict(label=words.label(name, lang), elem_id=f"zb-{name}", scale=WIDE.get(name, 1), min_width=160)
    value = handlers.to_form_value(name, value)
    if name == "gpu_ids":
        opts = [(words.text("page.gpu_choice", lang, index=g.index, name=g.name, free=f"{g.free_bytes / 2**30:.0f}",
                            total=f"{g.total_bytes / 2**30:.0f}"), g.index) for g in gpus]
        return gr.CheckboxGroup(opts, value=value, info=words.help_text(name, lang), **kw)
    if spec.choices(name) is not None:
        return gr.Dropdown(list(spec.choices(name)), value=value, info=words.help_text(name, lang), **kw)
    if t is bool:
        return gr.Checkbox(value=value, info=words.help_text(name, lang), **kw)
    if t in (int, float):
        return gr.Number(value=value, precision=0 if t is int else None, info=words.help_text(name, lang), **kw)
    if typing.get_origin(t) is dict:
        return gr.Code(value=value, language="json", lines=3, buttons=[], **kw)  # gradio's own buttons say English
    return gr.Textbox(value=value, info=words.help_text(name, lang), **kw)


def has_info(component) -> bool:
    return not isinstance(component, gr.Code)


def render_fields(form: Form, names: list[str], job: spec.JobSpec, lang: str, gpus: list[devices.Gpu]) -> None:
    for i in range(0, len(names), PER_ROW):
        with gr.Row(equal_height=False):
            for name in names[i:i + PER_ROW]:
                form.fields[name] = widget(name, getattr(job, name), lang, gpus)


def render_section(form: Form, section: str, names: list[str], job: spec.JobSpec, lang: str,
                   gpus: list[devices.Gpu]) -> None:
    key = f"section_{section}"
    if section in SPECIAL:
        SPECIAL[section](form, names, job, lang, gpus)
    elif section in COLLAPSED:
        with gr.Accordion(words.label(key, lang), open=False) as acc:
            render_fields(form, names, job, lang, gpus)
        form.texts[key] = (acc, "label")
    else:
        render_fields(form, names, job, lang, gpus)


def render_devices(form: Form, names: list[str], job: spec.JobSpec, lang: str, gpus: list[devices.Gpu]) -> None:
    """Device count, the GPU picker (or CPU processes), DeepSpeed stage, Enable offload; the rest folded."""
    main = [n for n in DEVICE_MAIN if n in names and (n != "gpu_ids" or gpus)]
    with gr.Row(equal_height=False):
        count = handlers.device_count(spec.to_dict(job), gpus)
        form.device_count = gr.Number(count, label=words.label("device_count", lang), precision=0, interactive=False,
                                      info=words.label("device_count_info", lang), elem_id="zb-device_count")
        for name in main:
            form.fields[name] = widget(name, getattr(job, name), lang, gpus)
    with gr.Accordion(words.label("more_devices", lang), open=False, elem_id="zb-more-devices") as acc:
        render_fields(form, [n for n in names if n not in main and n != "gpu_ids"], job, lang, gpus)
    form.texts["more_devices"] = (acc, "label")


SPECIAL = {"devices": render_devices}


def top_sections() -> dict[str, list[str]]:
    return {s: names for s, names in spec.sections().items() if s not in BOTTOM}


def bottom_sections() -> dict[str, list[str]]:
    all_sections = spec.sections()
    return {s: all_sections[s] for s in BOTTOM if s in all_sections}


# --- updates ---------------------------------------------------------------------------


def field_updates(form: Form, errors: dict[str, str], lang: str) -> list:
    """Each field's help line, or its error (marked red) when the check found one."""
    out = []
    for name, comp in form.fields.items():
        err = errors.get(name)
        text = words.text("page.field_error", lang, why=words.tr(err, lang)) if err else None
        cls = ["zb-invalid"] if err else []
        if has_info(comp):
            out.append(gr.update(info=text or words.help_text(name, lang), elem_classes=cls))
        else:
            out.append(gr.update(label=words.label(name, lang) + (f" — {text}" if text else ""), elem_classes=cls))
    return out


def relabel(form: Form, lang: str) -> list:
    """Label updates for every field and page word, in the order of ``relabel_outputs``."""
    out = [gr.update(label=words.label(n, lang), **({"info": words.help_text(n, lang)} if has_info(c) else {}))
           for n, c in form.fields.items()]
    for key, target in form.texts.items():
        out.append(text_update(key, target, lang))
    return out


def text_update(key: str, target: tuple, lang: str):
    """The update that says a page word (or each of a block's words) in ``lang``."""
    _, prop = target
    props = prop if isinstance(prop, dict) else {prop: key}
    return gr.update(**{p: words.label(k, lang) for p, k in props.items()})


def relabel_outputs(form: Form) -> list:
    return form.inputs + [block for block, _ in form.texts.values()]
