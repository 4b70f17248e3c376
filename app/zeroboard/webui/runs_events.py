"""The Runs page's events (``wire``): the list, the selection, compare, open, and the hand-overs to the Train page.

Every handler takes a dict of its inputs (gradio's ``inputs={...}``) and
calls a plain function of ``runs_view``.  Charts whose series change (other
runs, another language) are sent their rows first and then an invisible
change of their legend's title: gradio's LinePlot keeps the colour domain of
the value it had when its title last changed, so a new set of series is only
drawn after such a change.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gradio as gr
import pandas as pd

from .. import words, workspace
from ..job import folders
from . import pages, runs_view as rv

CHARTS = ("loss", "eval_loss", "lr", "margins", "accuracies")
CHART_WORDS = {"loss": "loss", "eval_loss": "runs.eval_loss", "lr": "lr", "margins": "runs.margins",
               "accuracies": "runs.accuracies"}
SOMETIMES = ("eval_loss", "margins", "accuracies")  # charts shown only when some run has them (no empty box)
ZWSP = "\u200b"  # invisible: appended to a chart's legend title, then removed, to make it draw its new series


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["step", "value", "run"]).astype({"step": "float64", "value": "float64",
                                                                        "run": "string"})


def wire(p, ctx: pages.Context) -> None:  # noqa: C901 - one page's events, read top to bottom
    """``p``: the page's blocks (``runs_page.RunsPage``); ``ctx.views["train"]``: the Train page it hands over to."""
    manager, lang_radio, io = ctx.manager, ctx.lang_radio, dict(show_progress="hidden")
    train = ctx.views["train"].page
    form = train.form
    chart_list = [p.charts[k] for k in CHARTS]
    list_out = [p.table, p.count, p.selected, p.state]

    def listed(d: dict, state: rv.RunsState, page: int) -> list:
        """The list read again; nothing is sent when the page already shows it (a tab opened, Refresh, a page
        turned back and forth): the table is not drawn again, and a read that crosses a click changes nothing."""
        lang = d[lang_radio]
        got = rv.listing(manager, d[p.filter], d[p.status], page, lang)
        listed_runs = {r for _, r in got.choices}
        selected = [r for r in state.selected if r in listed_runs]
        key = rv.shown_key(got, selected, lang)
        if key == state.shown:
            return [gr.skip()] * (len(list_out) + 1)
        table = {"headers": words.headers("runs", lang), "data": got.rows}
        state = dataclasses.replace(state, page=got.page, selected=selected, shown=key)
        return [table, got.count, gr.update(choices=got.choices, value=selected), state, got.runs]

    def refresh(d):
        return listed(d, d[p.state], d[p.state].page)

    def first_page(d):
        return listed(d, d[p.state], 0)

    def step_page(delta):
        def go(d):
            return listed(d, d[p.state], d[p.state].page + delta)
        return go

    def on_open(lang):
        """The first page of the list, as the page opens (the tab shows it at once, then reads it again)."""
        got = rv.listing(manager, "", "", 0, lang)
        return [{"headers": words.headers("runs", lang), "data": got.rows}, got.count,
                gr.update(choices=got.choices, value=[]), rv.RunsState(shown=rv.shown_key(got, [], lang)), got.runs]

    rows_on_page = gr.State([])  # the run of each row of the table as shown (for a click on a row)
    ctx.on_load(on_open, [], [*list_out, rows_on_page])
    list_in = {p.filter, p.status, p.state, lang_radio}
    # reading the list is light (cached summaries): answered at once, not behind the queue's other events
    for trigger, fn in ((ctx.tab_items["runs"].select, refresh), (p.refresh.click, refresh), (p.filter.submit, first_page),
                        (p.status.change, first_page), (p.prev.click, step_page(-1)), (p.next.click, step_page(1))):
        trigger(fn, list_in, [*list_out, rows_on_page], queue=False, **io)

    def on_row(d, evt: gr.SelectData):
        runs = d[rows_on_page]
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        if not isinstance(row, int) or not 0 <= row < len(runs):
            return gr.skip(), gr.skip()
        selected = rv.toggle(d[p.state].selected, runs[row])
        return gr.update(value=selected), dataclasses.replace(d[p.state], selected=selected)

    p.table.select(on_row, {rows_on_page, p.state}, [p.selected, p.state], **io)
    p.selected.input(lambda d: dataclasses.replace(d[p.state], selected=list(d[p.selected] or [])),
                     {p.selected, p.state}, [p.state], **io)
    p.clear.click(lambda d: (gr.update(value=[]), dataclasses.replace(d[p.state], selected=[])), {p.state},
                  [p.selected, p.state], **io)

    # --- compare and open: charts, then the redraw of their series ---------------------------------------
    shown_out = [p.charts_box, *chart_list, p.curves_note, p.course, p.diff, p.detail, p.actions, p.buttons["resume"],
                 p.buttons["archive"], p.buttons["restore"], p.confirm_row, p.message, p.state]

    def charts_of(runs) -> list:
        """The charts' rows; the evaluation and preference charts only when some run has them (no empty box)."""
        rows = rv.curve_rows(runs)
        return [gr.update(value=frame(rows[k]), visible=k not in SOMETIMES or bool(rows[k])) for k in CHARTS]

    def compared(state: rv.RunsState, lang: str) -> list:
        runs = rv.chosen(manager, state.selected)
        if len(runs) < 2:
            return [gr.skip()] * (len(shown_out) - 2) + [words.text("runs.need_two", lang), state]
        note = "" if any(s.has_eval for s in runs) else words.text("runs.no_eval", lang)
        return [gr.update(visible=True), *charts_of(runs), rv.curves_note(runs, lang),
                rv.course_markdown(runs, lang) + rv.rewards_markdown(runs, lang),
                rv.diff_markdown([s.run_dir for s in runs], lang), "", gr.update(visible=False), gr.skip(), gr.skip(),
                gr.skip(), gr.update(visible=False), note, dataclasses.replace(state, opened=None, pending=None)]

    def opened(state: rv.RunsState, run: str | None, lang: str) -> list:
        runs = rv.chosen(manager, [run] if run else [])
        if not runs:
            return [gr.skip()] * (len(shown_out) - 2) + [words.text("runs.pick_one", lang), state]
        s = runs[0]
        resumable = not s.archived and folders.last_checkpoint(Path(s.output or s.run_dir)) is not None
        return [gr.update(visible=True), *charts_of(runs), "", "", "", rv.detail_markdown(manager, s.run_dir, lang),
                gr.update(visible=True), gr.update(visible=resumable), gr.update(visible=not s.archived),
                gr.update(visible=s.archived),
                gr.update(visible=False), "", dataclasses.replace(state, opened=s.run_dir, pending=None)]

    def relayout(suffix: str):
        def fn(lang):
            return [gr.update(color_title=words.label("runs.axis_run", lang) + suffix) for _ in CHARTS]
        return fn

    def redrawn(event):
        event.then(relayout(ZWSP), [lang_radio], chart_list, **io).then(relayout(""), [lang_radio], chart_list, **io)

    redrawn(p.compare.click(lambda d: compared(d[p.state], d[lang_radio]), {p.state, lang_radio}, shown_out, **io))
    redrawn(p.open.click(lambda d: opened(d[p.state], (d[p.state].selected or [None])[-1], d[lang_radio]),
                         {p.state, lang_radio}, shown_out, **io))

    def again_in_lang(d):
        state, lang = d[p.state], d[lang_radio]
        if state.opened:
            return opened(state, state.opened, lang)
        if len(state.selected) >= 2 and d[p.course]:
            return compared(state, lang)
        return [gr.skip()] * len(shown_out)

    relabelled = lang_radio.change(refresh, list_in, [*list_out, rows_on_page], **io)
    redrawn(relabelled.then(again_in_lang, {p.state, lang_radio, p.course}, shown_out, **io))

    # --- the opened run: hand-overs to the Train page ------------------------------------------------
    names = form.names
    to_train = [*form.inputs, train.new_job, train.message, ctx.session, ctx.tabs, p.message]

    def form_values(values: dict, locked: bool) -> list:
        return [gr.update(value=values[n], interactive=not locked) if n in values else gr.update(interactive=not locked)
                for n in names]

    def on_resume(d):
        state, lang, session = d[p.state], d[lang_radio], d[ctx.session]
        values, message, st = rv.resume(manager, ctx.gpus, state.opened or "", lang)
        if st is None:
            return [*[gr.skip()] * (len(names) + 1), gr.skip(), session, gr.skip(), message]
        return [*form_values(values, True), gr.update(visible=True), message, {**session, "run_dir": st.run_dir},
                pages.select("train"), ""]

    def on_again(d):
        state, lang, session = d[p.state], d[lang_radio], d[ctx.session]
        values, message = rv.start_again(state.opened or "", lang)
        if values is None:
            return [*[gr.skip()] * (len(names) + 3), gr.skip(), message]
        return [*form_values(values, False), gr.update(visible=False), message, session, pages.select("train"), ""]

    def on_follow(d):
        state, session = d[p.state], d[ctx.session]
        if not state.opened:
            return [*[gr.skip()] * (len(names) + 3), gr.skip(), words.text("runs.pick_one", d[lang_radio])]
        message = words.text("runs.following", d[lang_radio], run=workspace.shown(state.opened))
        return [*[gr.skip()] * (len(names) + 1), message, {**session, "run_dir": state.opened}, pages.select("train"), ""]

    hand_in = {p.state, lang_radio, ctx.session}
    p.buttons["resume"].click(on_resume, hand_in, to_train, **io)
    p.buttons["again"].click(on_again, hand_in, to_train, **io)
    p.buttons["follow"].click(on_follow, hand_in, to_train, **io)

    # --- delete, archive, restore: asked first, done on Confirm ----------------------------------------
    confirm_out = [p.confirm_row, p.confirm_text, p.message, p.state]

    def ask(action: str):
        def fn(d):
            state, lang = d[p.state], d[lang_radio]
            if not state.opened:
                return gr.update(visible=False), "", words.text("runs.pick_one", lang), state
            if action == "restore":
                message, _ = rv.act(manager, "restore", state.opened, lang)
                return gr.update(visible=False), "", message, dataclasses.replace(state, opened=None, pending=None)
            asked, ok = rv.confirm_text(manager, action, state.opened, lang)
            if not ok:
                return gr.update(visible=False), "", asked, dataclasses.replace(state, pending=None)
            return gr.update(visible=True), asked, "", dataclasses.replace(state, pending=(action, state.opened))
        return fn

    for action in ("delete", "archive", "restore"):
        clicked = p.buttons[action].click(ask(action), {p.state, lang_radio}, confirm_out, **io)
        if action == "restore":
            clicked.then(refresh, list_in, [*list_out, rows_on_page], **io)

    def on_confirm(d):
        state, lang = d[p.state], d[lang_radio]
        if not state.pending:
            return gr.update(visible=False), "", gr.skip(), state
        action, run = state.pending
        message, _now = rv.act(manager, action, run, lang)
        return gr.update(visible=False), "", message, dataclasses.replace(state, pending=None, opened=None)

    def on_cancel(d):
        return gr.update(visible=False), "", words.text("runs.cancelled", d[lang_radio]), \
            dataclasses.replace(d[p.state], pending=None)

    done = p.confirm.click(on_confirm, {p.state, lang_radio}, confirm_out, **io)
    done.then(refresh, list_in, [*list_out, rows_on_page], **io).then(
        lambda: ("", gr.update(visible=False)), None, [p.detail, p.actions], **io)
    p.cancel.click(on_cancel, {p.state, lang_radio}, confirm_out, **io)
