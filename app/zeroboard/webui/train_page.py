"""The Train page: its form, buttons and command preview (render_train / wire_train), and under them the live
run (``live_panels``) whose status and progress stay in a strip at the top of the tab.  Registered as the page
``train`` (``PAGE``).

Preview and Start both go through handlers.check (validate everything, then
build the command); Start runs the command it built, on the port the preview
showed when that port is still free.  The memory plan sits beside the device
controls and is redrawn whenever a field the planner reads changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .. import planner, words
from ..job import devices, spec
from ..runs.manager import JobManager
from . import attach, data_view, form as formmod, handlers, live_panels, pages, plan_panel


@dataclass
class TrainPage:
    form: formmod.Form
    preview_data: gr.Button
    data_preview: gr.Markdown
    preview: gr.Button
    save: gr.Button
    load: gr.Button
    start: gr.Button
    queue: gr.Button  # Start, or wait in the queue when the devices or the folder are taken
    unload_start: gr.Button  # shown when Start was refused for a chat worker on the job's devices
    abort: gr.Button
    save_stop: gr.Button
    new_job: gr.Button  # shown while the form shows a running job (read-only): edit a copy
    args_path: gr.Textbox
    message: gr.Markdown
    command: gr.HTML
    ds_json: gr.Code
    plan: gr.Markdown
    fit: plan_panel.FitPanel


def render_train(job: spec.JobSpec, lang: str, gpus: list[devices.Gpu]) -> TrainPage:
    f = formmod.Form()
    for section, names in formmod.top_sections().items():
        formmod.render_section(f, section, names, job, lang, gpus)
        if section == "data":
            with gr.Row():
                preview_data = gr.Button(words.label("preview_data", lang), size="sm", scale=0, elem_id="zb-preview-data")
            data_preview = gr.Markdown(elem_id="zb-data-preview")
            f.texts["preview_data"] = (preview_data, "value")
    with gr.Row():
        new_job = gr.Button(words.label("new_job", lang), visible=False, elem_id="zb-new-job")
        preview = gr.Button(words.label("preview", lang), elem_id="zb-preview")
        save = gr.Button(words.label("save", lang), elem_id="zb-save")
        load = gr.Button(words.label("load", lang), elem_id="zb-load")
        start = gr.Button(words.label("start", lang), variant="primary", elem_id="zb-start")
        queue = gr.Button(words.label("queue.button", lang), elem_id="zb-queue")
        unload_start = gr.Button(words.label("unload_start", lang), variant="primary", visible=False,
                                 elem_id="zb-unload-start")
        save_stop = gr.Button(words.label("save_stop", lang), elem_id="zb-save-stop")
        abort = gr.Button(words.label("abort", lang), variant="stop", elem_id="zb-abort")
    for key, btn in (("preview", preview), ("save", save), ("load", load), ("start", start), ("queue.button", queue), ("abort", abort),
                     ("save_stop", save_stop), ("new_job", new_job), ("unload_start", unload_start)):
        f.texts[key] = (btn, "value")
    for section, names in formmod.bottom_sections().items():
        if section == "devices":
            plan, fit = render_devices_with_plan(f, names, job, lang, gpus)
            continue
        formmod.render_section(f, section, names, job, lang, gpus)
        if section == "output":
            args_path = gr.Textbox("runs/saved/job.yaml", label=words.label("args_path", lang), elem_id="zb-args-path")
            f.texts["args_path"] = (args_path, "label")
    message = gr.Markdown(elem_id="zb-message")
    command = gr.HTML(label=words.label("command", lang), show_label=True, container=True, elem_id="zb-command")
    # shown once there is a DeepSpeed config to show (none with stage none: no empty panel); without gradio's copy and
    # download buttons, which say "Copy" and "Download" in every language (the file is named in the command)
    ds_json = gr.Code(language="json", label=words.label("ds_json", lang), elem_id="zb-ds-json", lines=8, visible=False,
                      buttons=[])
    f.texts["command"] = (command, "label")
    f.texts["ds_json"] = (ds_json, "label")
    return TrainPage(f, preview_data, data_preview, preview, save, load, start, queue, unload_start, abort, save_stop, new_job,
                     args_path, message, command, ds_json, plan, fit)


def render_devices_with_plan(f: formmod.Form, names: list[str], job: spec.JobSpec, lang: str,
                             gpus: list[devices.Gpu]) -> tuple[gr.Markdown, plan_panel.FitPanel]:
    """The device and DeepSpeed controls, with the memory plan of the job as it stands beside them."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            formmod.render_section(f, "devices", names, job, lang, gpus)
        with gr.Column(scale=2, min_width=320):
            key = "plan" if gpus else "plan_cpu"  # memory on GPUs (显存), host memory on CPU processes (内存)
            with gr.Accordion(words.label(key, lang), open=True) as acc:
                plan = gr.Markdown(planner.panel(job, gpus, lang), elem_id="zb-plan")  # whole: no box to scroll
            fit = plan_panel.render_fit(f, lang)
    f.texts[key] = (acc, "label")
    return plan, fit


def wire_train(page: TrainPage, manager: JobManager, gpus: list[devices.Gpu], session: gr.State,
               lang: gr.Radio) -> None:
    f = page.form
    n = len(f.names)
    checked_outputs = [*f.inputs, page.message, page.command, page.ds_json]

    def shown(checked: handlers.Checked, lang_value: str, message: str) -> list:
        cmd = checked.command
        ds = handlers.deepspeed_json(cmd)
        return [*formmod.field_updates(f, checked.errors, lang_value), message,
                handlers.command_html(cmd, lang_value) if cmd else "", gr.update(value=ds, visible=bool(ds))]

    def on_preview(*args):
        values, lang_value, state = f.values(args[:n]), args[n], args[n + 1]
        checked = handlers.check(values, gpus)
        port = checked.command.master_port if checked.ok else None
        return [*shown(checked, lang_value, handlers.report_markdown(checked, lang_value)),
                {**state, "port": port, "marked": bool(checked.errors)}]

    def on_edit(*args):
        """A field changed while some are marked: check again, so a fixed field loses its mark at once."""
        values, lang_value, state = f.values(args[:n]), args[n], args[n + 1]
        if not state.get("marked"):
            return [gr.skip()] * (len(checked_outputs) + 1)
        checked = handlers.check(values, gpus)
        return [*shown(checked, lang_value, handlers.report_markdown(checked, lang_value)),
                {**state, "marked": bool(checked.errors), "port": None}]

    def on_start(*args, unload_chat: bool = False):
        values, lang_value, state = f.values(args[:n]), args[n], args[n + 1]
        checked, job, message = handlers.start(values, gpus, manager, port=state.get("port"), lang=lang_value,
                                               unload_chat=unload_chat)
        state = {**state, "marked": bool(checked.errors)}
        if job is not None:
            state = {**state, "run_dir": job.run_dir, "port": None}
        offer = getattr(checked.refused, "key", "") == "run.busy_chat"  # a chat worker holds its devices: offer to unload it
        return [*shown(checked, lang_value, message), state, gr.update(visible=offer)]

    def on_queue(*args):
        values, lang_value, state = f.values(args[:n]), args[n], args[n + 1]
        checked, message = handlers.queue(values, gpus, manager, port=state.get("port"), lang=lang_value)
        return [*shown(checked, lang_value, message), {**state, "marked": bool(checked.errors)}]

    def on_abort(state, lang_value):
        return handlers.abort(manager, state.get("run_dir"), lang_value)

    def on_save(*args):
        values, path, lang_value, state = f.values(args[:n]), args[n], args[n + 1], args[n + 2]
        again = state.get("confirm_save") == path  # a second click on the same file replaces it
        message, confirm = handlers.save_args(values, path, lang_value, replace=again)
        return message, {**state, "confirm_save": path if confirm else None}

    def on_load(path, lang_value):
        """The file's job in the form; the command and DeepSpeed config of the job shown before are cleared (they
        described that one: Preview shows the new job's)."""
        values, message = handlers.load_args(path, lang_value)
        if values is None:  # a malformed file changes nothing
            return [gr.skip()] * (n + 2) + [message]
        return [values.get(name, gr.skip()) for name in f.names] + ["", gr.update(value="", visible=False), message]

    def on_preview_data(*args):
        """The first records at once, then (a subprocess) the samples as the trainer sees them, and the statistics."""
        values, lang_value = f.values(args[:n]), args[n]
        light = handlers.dataset_preview(values.get("dataset_dir", ""), values.get("dataset", ""), lang=lang_value)
        yield f"*{words.text('page.data_tokenizing', lang_value)}*\n\n---\n\n{light}"
        yield f"{data_view.tokenized_view(values, lang=lang_value)}\n\n---\n\n{light}"

    def on_devices(*args):
        return handlers.device_count(f.values(args), gpus)

    def on_plan(*args):
        return plan_panel.plan_and_timer(handlers.plan_markdown(f.values(args[:n]), gpus, args[n]))

    io = dict(show_progress="hidden")
    page.preview.click(on_preview, [*f.inputs, lang, session], [*checked_outputs, session], **io)
    page.start.click(on_start, [*f.inputs, lang, session], [*checked_outputs, session, page.unload_start], **io)
    page.unload_start.click(lambda *args: on_start(*args, unload_chat=True), [*f.inputs, lang, session],
                            [*checked_outputs, session, page.unload_start], **io)
    page.queue.click(on_queue, [*f.inputs, lang, session], [*checked_outputs, session], **io)
    gr.on([c.change for c in f.inputs], on_edit, [*f.inputs, lang, session], [*checked_outputs, session],
          trigger_mode="always_last", **io)
    page.abort.click(on_abort, [session, lang], [page.message], **io)
    page.save_stop.click(lambda state, lang_value: handlers.save_and_stop(manager, state.get("run_dir"), lang_value),
                         [session, lang], [page.message], **io)
    page.save.click(on_save, [*f.inputs, page.args_path, lang, session], [page.message, session], **io)
    page.load.click(on_load, [page.args_path, lang], [*f.inputs, page.command, page.ds_json, page.message], **io)
    page.preview_data.click(on_preview_data, [*f.inputs, lang], [page.data_preview], **io)
    for name in ("gpu_ids", "num_processes", "device_type"):
        if name in f.fields:
            f.fields[name].change(on_devices, f.inputs, [f.device_count], **io)
    plan_triggers = [f.fields[name].change for name in handlers.plan_fields(gpus) if name in f.fields] + [lang.change]
    gr.on(plan_triggers, on_plan, [*f.inputs, lang], [page.plan, page.fit.tracing], trigger_mode="always_last",
          queue=False, **io)
    plan_panel.wire_fit(page.fit, f, gpus, lang)
    plan_panel.wire_tracing(page.fit, page.plan, f, gpus, lang)


# --- the page -----------------------------------------------------------------------------


@dataclass
class TrainView(pages.View):
    page: TrainPage | None = None
    panels: live_panels.LivePanels | None = None
    device_count_key: str = "device_count"

    def relabel_outputs(self) -> list:
        extra = [b for k, (b, _) in self.panels.texts.items() if k not in self.page.form.texts]
        return formmod.relabel_outputs(self.page.form) + extra + [self.page.form.device_count]

    def relabel(self, lang: str) -> list:
        form = self.page.form
        out = formmod.relabel(form, lang)
        out += [pages.text_update(key, target, lang) for key, target in self.panels.texts.items() if key not in form.texts]
        out.append(gr.update(label=words.label("device_count", lang), info=words.label("device_count_info", lang)))
        return out


def render(ctx: pages.Context) -> TrainView:
    strip = live_panels.render_strip(ctx.lang)
    page = render_train(ctx.job, ctx.lang, ctx.gpus)
    panels = live_panels.render_live(ctx.lang, ctx.gpus, strip=strip[:2])
    page.form.texts["live_jump"] = (strip[2], "value")
    return TrainView(page=page, panels=panels)


def wire(view: TrainView, ctx: pages.Context) -> None:
    wire_train(view.page, ctx.manager, ctx.gpus, ctx.session, ctx.lang_radio)
    live_panels.wire_live(view.panels, ctx.live, ctx.session, ctx.lang_radio, ctx)
    attach.wire_attach(view.page, ctx.manager, ctx.session, ctx)


PAGE = pages.register(pages.Page("train", "tab.train", render, wire, order=10))
