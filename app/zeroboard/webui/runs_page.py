"""The Runs page: every run of the workspace, compared or opened one at a time (render_runs / wire_runs).

Registered as the page ``runs``.  Its logic is ``runs_view`` (plain
functions); this module lays out the blocks and connects them.  Handlers take
their inputs as a dict (``inputs={...}``), and the page's own session is a
typed :class:`runs_view.RunsState` in a gr.State.  Resume, Start again and
Follow hand over to the Train page (its form, its message, the session's run)
and show its tab.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .. import words
from . import pages, runs_events, runs_view as rv
from .runs_events import CHART_WORDS, CHARTS, frame

# run, status, model, method, stage / offload, devices, steps, train loss, eval loss, tokens/s, peak, duration, started
COLUMN_WIDTHS = ["16%", "7%", "11%", "7%", "8%", "6%", "6%", "6%", "6%", "6%", "7%", "5%", "9%"]


@dataclass
class RunsPage(pages.View):
    filter: gr.Textbox | None = None
    status: gr.Dropdown | None = None
    refresh: gr.Button | None = None
    table: gr.Dataframe | None = None
    prev: gr.Button | None = None
    count: gr.Markdown | None = None
    next: gr.Button | None = None
    selected: gr.Dropdown | None = None
    compare: gr.Button | None = None
    open: gr.Button | None = None
    clear: gr.Button | None = None
    charts_box: gr.Column | None = None
    charts: dict | None = None  # loss | eval_loss | lr -> gr.LinePlot
    curves_note: gr.Markdown | None = None  # under the charts: curves that coincide, and why
    diff: gr.Markdown | None = None
    course: gr.Markdown | None = None
    detail: gr.Markdown | None = None
    actions: gr.Row | None = None
    buttons: dict | None = None  # resume | again | follow | delete | archive | restore -> gr.Button
    confirm_row: gr.Row | None = None
    confirm_text: gr.Markdown | None = None
    confirm: gr.Button | None = None
    cancel: gr.Button | None = None
    message: gr.Markdown | None = None
    state: gr.State | None = None

    def relabel_outputs(self) -> list:
        return [*super().relabel_outputs(), self.status]

    def relabel(self, lang: str) -> list:
        return [*super().relabel(lang), gr.update(choices=rv.status_choices(lang), label=words.label("runs.status_filter", lang))]


def render(ctx: pages.Context) -> RunsPage:
    lang = ctx.lang
    t = lambda key: words.label(key, lang)  # noqa: E731
    p = RunsPage()
    with gr.Row(equal_height=False):
        p.filter = gr.Textbox(label=t("runs.filter"), scale=4, elem_id="zb-runs-filter")
        p.status = gr.Dropdown(rv.status_choices(lang), value="", label=t("runs.status_filter"), scale=1,
                               elem_id="zb-runs-status")
        p.refresh = gr.Button(t("runs.refresh"), size="sm", scale=0, min_width=100, elem_id="zb-runs-refresh")
    p.table = gr.Dataframe(headers=words.headers("runs", lang), interactive=False, max_height=560, wrap=True,
                           column_widths=COLUMN_WIDTHS, buttons=[], label=t("tab.runs"), show_label=False,
                           elem_id="zb-runs-table")
    with gr.Row(equal_height=True):
        p.prev = gr.Button(t("runs.prev"), size="sm", scale=0, min_width=110, elem_id="zb-runs-prev")
        p.count = gr.Markdown(elem_id="zb-runs-count")
        p.next = gr.Button(t("runs.next"), size="sm", scale=0, min_width=110, elem_id="zb-runs-next")
    with gr.Row(equal_height=False):
        p.selected = gr.Dropdown([], value=[], multiselect=True, label=t("runs.selected"), scale=5,
                                 elem_id="zb-runs-selected")
        with gr.Column(scale=1, min_width=240):
            p.compare = gr.Button(t("runs.compare"), variant="primary", size="sm", elem_id="zb-runs-compare")
            with gr.Row():
                p.open = gr.Button(t("runs.open"), size="sm", min_width=90, elem_id="zb-runs-open")
                p.clear = gr.Button(t("runs.clear"), size="sm", min_width=90, elem_id="zb-runs-clear")
    p.message = gr.Markdown(elem_id="zb-runs-message")
    with gr.Column(visible=False, elem_id="zb-runs-charts") as p.charts_box:
        with gr.Row():
            p.charts = {key: gr.LinePlot(frame([]), x="step", y="value", color="run", label=t(CHART_WORDS[key]),
                                         x_title=t("axis_step"), y_title=t(CHART_WORDS[key]),
                                         color_title=t("runs.axis_run"), height=260, elem_id=f"zb-runs-{key}")
                        for key in CHARTS}
        p.curves_note = gr.Markdown(elem_id="zb-runs-curves-note")
    p.course = gr.Markdown(elem_id="zb-runs-course")
    p.diff = gr.Markdown(elem_id="zb-runs-diff")
    p.detail = gr.Markdown(elem_id="zb-runs-detail")
    with gr.Row(visible=False, elem_id="zb-runs-actions") as p.actions:
        p.buttons = {
            "resume": gr.Button(t("runs.resume"), variant="primary", elem_id="zb-runs-resume"),
            "again": gr.Button(t("runs.again"), elem_id="zb-runs-again"),
            "follow": gr.Button(t("runs.follow"), elem_id="zb-runs-follow"),
            "archive": gr.Button(t("runs.archive"), elem_id="zb-runs-archive"),
            "restore": gr.Button(t("runs.restore"), visible=False, elem_id="zb-runs-restore"),
            "delete": gr.Button(t("runs.delete"), variant="stop", elem_id="zb-runs-delete"),
        }
    with gr.Row(visible=False, equal_height=True, elem_id="zb-runs-confirm-row") as p.confirm_row:
        p.confirm_text = gr.Markdown(elem_id="zb-runs-confirm-text")
        p.confirm = gr.Button(t("runs.confirm"), variant="stop", scale=0, min_width=100, elem_id="zb-runs-confirm")
        p.cancel = gr.Button(t("runs.cancel"), scale=0, min_width=100, elem_id="zb-runs-cancel")
    p.state = gr.State(rv.RunsState())
    p.texts = {"runs.filter": (p.filter, "label"), "runs.refresh": (p.refresh, "value"), "runs.prev": (p.prev, "value"),
               "runs.next": (p.next, "value"), "runs.selected": (p.selected, "label"),
               "runs.compare": (p.compare, "value"), "runs.open": (p.open, "value"), "runs.clear": (p.clear, "value"),
               "runs.confirm": (p.confirm, "value"), "runs.cancel": (p.cancel, "value"), "tab.runs": (p.table, "label")}
    p.texts.update({f"runs.{k}": (b, "value") for k, b in p.buttons.items()})
    p.texts.update({CHART_WORDS[k]: (c, {"label": CHART_WORDS[k], "x_title": "axis_step", "y_title": CHART_WORDS[k],
                                         "color_title": "runs.axis_run"}) for k, c in p.charts.items()})
    return p


# preloaded, and its list filled as the page opens (then read again when the tab is opened): the tab answers at once
PAGE = pages.register(pages.Page("runs", "tab.runs", render, runs_events.wire, order=20, preload=True))
