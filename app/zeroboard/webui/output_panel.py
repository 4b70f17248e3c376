"""The output check panel under the live view: what a finished run saved, and what to do with it.

render_output_check() builds it (hidden until the selected run has finished;
the live view's tick shows it through ``updates``), wire_output_check()
connects Reload and answer, Consolidate and Merge LoRA to the plain functions
in ``output_check``.  Those run one subprocess at a time per button, with a
time limit.  The last answers are kept per session (``report``), so a
language switch redraws the table's headings.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .. import words
from ..runs.manager import JobManager
from . import output_check


@dataclass
class OutputPanel:
    box: gr.Accordion
    saved: gr.Textbox
    prompts: gr.Textbox
    reload: gr.Button
    answers: gr.Markdown
    consolidate_row: gr.Row
    consolidate_dir: gr.Textbox
    consolidate: gr.Button
    merge_row: gr.Row
    merge_dir: gr.Textbox
    merge: gr.Button
    export_row: gr.Row
    export_dir: gr.Textbox
    export: gr.Button
    message: gr.Markdown
    report: gr.State  # the last check report shown in ``answers`` (None: none)
    texts: dict


def render_output_check(lang: str) -> OutputPanel:
    t = lambda key: words.label(key, lang)  # noqa: E731
    with gr.Accordion(t("output_check"), open=True, visible=False, elem_id="zb-output-check") as box:
        saved = gr.Textbox(label=t("saved"), lines=3, max_lines=10, interactive=False, elem_id="zb-saved")
        with gr.Row(equal_height=False):
            prompts = gr.Textbox(output_check.PROMPTS[lang], label=t("prompts"), lines=4, max_lines=12, scale=4,
                                 elem_id="zb-prompts")
            reload = gr.Button(t("reload"), variant="primary", scale=1, elem_id="zb-reload-btn")
        answers = gr.Markdown(elem_id="zb-answers")
        with gr.Row(visible=False, equal_height=False) as consolidate_row:
            consolidate_dir = gr.Textbox(label=t("consolidate_dir"), scale=4, elem_id="zb-consolidate-dir")
            consolidate = gr.Button(t("consolidate"), scale=1, elem_id="zb-consolidate-btn")
        with gr.Row(visible=False, equal_height=False) as merge_row:
            merge_dir = gr.Textbox(label=t("merge_dir"), scale=4, elem_id="zb-merge-dir")
            merge = gr.Button(t("merge"), scale=1, elem_id="zb-merge-btn")
        with gr.Row(visible=False, equal_height=False) as export_row:
            export_dir = gr.Textbox(label=t("export_dir"), scale=4, elem_id="zb-export-dir")
            export = gr.Button(t("export"), scale=1, elem_id="zb-export-btn")
        message = gr.Markdown(elem_id="zb-output-message")
        report = gr.State(None)
    texts = {"output_check": (box, "label"), "saved": (saved, "label"), "prompts": (prompts, "label"),
             "reload": (reload, "value"), "consolidate_dir": (consolidate_dir, "label"),
             "consolidate": (consolidate, "value"), "merge_dir": (merge_dir, "label"), "merge": (merge, "value"),
             "export_dir": (export_dir, "label"), "export": (export, "value")}
    return OutputPanel(box, saved, prompts, reload, answers, consolidate_row, consolidate_dir, consolidate, merge_row,
                       merge_dir, merge, export_row, export_dir, export, message, report, texts)


def outputs(p: OutputPanel) -> list:
    """What ``updates`` fills, in order."""
    return [getattr(p, name) for name in outputs_order()]


def updates(v: output_check.View) -> list:
    """The panel for a newly selected (or newly finished) run; earlier answers and messages are cleared."""
    return [gr.update(visible=v.visible), v.saved, gr.update(visible=v.can_consolidate), v.consolidate_dir,
            gr.update(visible=v.can_merge), v.merge_dir, gr.update(visible=v.can_export), v.export_dir, "", "", None]


def relabel_saved(v: output_check.View) -> list:
    """After a language switch: the saved text in the new language, nothing else touched."""
    return [gr.skip(), v.saved if v.visible else gr.skip()] + [gr.skip()] * (len(outputs_order()) - 2)


def outputs_order() -> tuple[str, ...]:
    return ("box", "saved", "consolidate_row", "consolidate_dir", "merge_row", "merge_dir", "export_row", "export_dir",
            "answers", "message", "report")


def wire_output_check(p: OutputPanel, manager: JobManager, session: gr.State, lang: gr.Radio) -> None:
    def on_reload(state, prompts, lang_value):
        run_dir = state.get("run_dir")
        why = output_check.not_ready(manager, run_dir, lang_value)
        if why:
            yield "", why, None
            return
        yield "", words.text("reloading", lang_value, run=run_dir), None
        yield output_check.reload_and_answer(run_dir, prompts, lang_value)

    def on_lang(report, lang_value):
        return output_check.answers_markdown(report, lang_value) if report else gr.skip()

    def exporter(kind: str):
        def on_export(state, out_dir, lang_value):
            run_dir = state.get("run_dir")
            why = output_check.not_ready(manager, run_dir, lang_value)
            if why:
                yield why, gr.skip()
                return
            yield words.text("writing", lang_value, what=words.label(kind, lang_value), out=out_dir), gr.skip()
            message, next_dir = output_check.export(kind, run_dir, out_dir, lang=lang_value)
            yield message, next_dir if next_dir else gr.skip()
        return on_export

    # our own "working" message says it; gradio's tracker would end by showing an untranslated key (common.complete)
    io = dict(show_progress="hidden")
    p.reload.click(on_reload, [session, p.prompts, lang], [p.answers, p.message, p.report], **io)
    lang.change(on_lang, [p.report, lang], [p.answers], show_progress="hidden")

    def on_lang_prompts(prompts, lang_value):  # the demo's questions follow the page's language; one's own stay
        defaults = {text.strip() for text in output_check.PROMPTS.values()}
        return output_check.PROMPTS[lang_value] if (prompts or "").strip() in defaults else gr.skip()

    lang.change(on_lang_prompts, [p.prompts, lang], [p.prompts], show_progress="hidden")
    p.consolidate.click(exporter("consolidate"), [session, p.consolidate_dir, lang], [p.message, p.consolidate_dir], **io)
    p.merge.click(exporter("merge"), [session, p.merge_dir, lang], [p.message, p.merge_dir], **io)
    p.export.click(exporter("export"), [session, p.export_dir, lang], [p.message, p.export_dir], **io)
