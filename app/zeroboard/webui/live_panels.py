"""Live panels under the form: status, progress, plots, logs, memory (and the plan next to it), final status,
and the output check of a finished run.

A gr.Timer ticks every ``TICK_S`` while the run shown is active and every
``IDLE_TICK_S`` otherwise (each tick sets the pace of the next; a change of the
session's run sets the fast pace at once); each tick renders the shared Snapshot
of the session's run and skips every panel whose data did not change, so idle
ticks send almost nothing.  What a tick has sent is kept in its own gr.State
(``LivePanels.view``), never in the session: a tick that overlaps Start or a
pick in the run list must not write an older run choice back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from .. import words, workspace
from ..job import devices
from ..runs import monitor
from ..runs.state import ACTIVE
from . import output_check, output_panel
from .live import REWARD_SERIES, Live, Snapshot

TICK_S = 0.5  # while the run shown starts, runs or stops
# otherwise: a tab left open on a finished run asked twice a second and kept 40% of a core busy in the browser and
# 17% in the server, 23% and 12% at this pace (benchmarks/webui_bench.py, 2 cores); the machine's memory tables
# of such a page refresh at this pace too
IDLE_TICK_S = 2.0
# Follow the log's end unless the reader scrolled up to read (also on the first paint of a long log).
STICK_TO_BOTTOM = """() => {
  const t = document.querySelector('#zb-log textarea');
  if (!t) return;
  if (!t.dataset.zbWatch) {
    t.dataset.zbWatch = '1'; t.dataset.zbPin = '1';
    t.addEventListener('scroll', () => { t.dataset.zbPin = t.scrollHeight - t.scrollTop - t.clientHeight < 40 ? '1' : '0'; });
  }
  if (t.dataset.zbPin === '1') requestAnimationFrame(() => { t.scrollTop = t.scrollHeight; });
}"""
GPU_HEADERS = words.headers("gpus")  # in English: how benchmarks/gpu_ui_check.py finds the tables
PROC_HEADERS = words.headers("procs")


@dataclass
class LivePanels:
    run: gr.Dropdown
    status: gr.HTML
    progress: gr.HTML
    loss: gr.LinePlot
    lr: gr.LinePlot
    tps: gr.LinePlot
    rewards: gr.LinePlot  # preference stages only (hidden for SFT)
    log: gr.Textbox
    download: gr.DownloadButton
    gpus: gr.Dataframe | None
    host: gr.Markdown
    procs: gr.Dataframe
    history: gr.LinePlot
    final: gr.Markdown
    timer: gr.Timer
    texts: dict
    mem: gr.Markdown  # the plan's estimate next to each rank's measured peak
    check: output_panel.OutputPanel
    view: gr.State  # what this page's ticks have sent: {"seen": ..., "listed": the run shown in the list}


def _frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """Typed even when empty: the plot takes its axis types from the first value it gets."""
    df = pd.DataFrame(rows, columns=columns)
    return df.astype({c: ("string" if c == "series" else "float64") for c in columns})


def loss_frame(train: list[dict], evals: list[dict], lang: str = words.DEFAULT, has_eval: bool = False) -> pd.DataFrame:
    """The training loss, and the evaluation loss when the run evaluates, as series named in the page's language.

    A series with no point yet gets an empty (NaN) one, so the plot knows every series of the run from its first
    value; a run without an evaluation set has no evaluation series (no empty legend entry)."""
    train_name, eval_name = words.label("series.train", lang), words.label("series.eval", lang)
    rows = [{**r, "series": train_name} for r in train] + [{**r, "series": eval_name} for r in evals]
    step = float(train[0]["step"]) if train else 0.0
    wanted = ((train_name, train), (eval_name, evals)) if has_eval or evals else ((train_name, train),)
    rows += [{"step": step, "loss": float("nan"), "series": name} for name, has in wanted if not has]
    return _frame(rows, ["step", "loss", "series"])


def rewards_frame(rows: list[dict], lang: str = words.DEFAULT) -> pd.DataFrame:
    """A preference run's rewards, margin, accuracy (and KTO's KL), each a series named in the page's language (a
    run's series all come with its first log: the chart is redrawn for them as RELAID says)."""
    names = {k: words.label(f"series.{k}", lang) for k in REWARD_SERIES}
    return _frame([{**r, "series": names[r["series"]]} for r in rows], ["step", "value", "series"])


def history_frame(rows: list[dict], lang: str = words.DEFAULT) -> pd.DataFrame:
    """The memory history, its host and job series named in the page's language (GPUs keep their numbers)."""
    names = {monitor.HOST_SERIES: words.label("series.host", lang), monitor.JOB_SERIES: words.label("series.job", lang)}
    return _frame([{**r, "series": names.get(r["series"], r["series"])} for r in rows], ["seconds", "series", "MiB"])


# gradio's LinePlot draws the series of the value it had when its (legend) title last changed: a chart whose series
# change (another language, a run with an evaluation set) is sent its rows, then, on the next tick, its legend title
# again with an invisible character added or taken away
ZWSP = "\u200b"
RELAID = (("loss", "axis_loss_series"), ("history", "axis_series"), ("rewards", "axis_rewards_series"))
# ...and it may draw a chart from the titles it had before a language switch: a drawing begun before the new titles
# came can end after the one they started (seen on a busy machine: the lr chart's axis in English on the Chinese
# page until the page was reloaded). So some ticks after a switch say each chart's axis titles again, an invisible
# character added or taken away, which makes it draw again from the titles it has by then
AXES = {"loss": {"x_title": "axis_step", "y_title": "loss"}, "lr": {"x_title": "axis_step", "y_title": "lr"},
        "tps": {"x_title": "axis_step", "y_title": "tps"}, "rewards": {"x_title": "axis_step", "y_title": "rewards"},
        "history": {"x_title": "axis_seconds"}}
RETITLE_TICKS = (2, 5, 10)  # ticks after the switch (2 s each at rest, 0.5 s while a run is live)


def render_strip(lang: str) -> tuple[gr.HTML, gr.HTML, gr.Button]:
    """The run's status and progress, in a strip that stays at the top of the Train tab while the form scrolls, with
    a button that jumps to the live run below the form (its charts and log)."""
    with gr.Row(elem_id="zb-strip", equal_height=False):
        with gr.Column(scale=6, min_width=320):
            status = gr.HTML(words.status("idle", lang), elem_id="zb-status")
            progress = gr.HTML(elem_id="zb-progress")
        jump = gr.Button(words.label("live_jump", lang), size="sm", scale=0, min_width=140, elem_id="zb-live-jump")
    jump.click(None, js="() => document.getElementById('zb-live')?.scrollIntoView({block: 'start'})")
    return status, progress, jump


def render_live(lang: str, gpus: list[devices.Gpu], strip: tuple[gr.HTML, gr.HTML] | None = None) -> LivePanels:
    """The live run under the form; its status and progress are the strip's (``render_strip``), or its own."""
    t = lambda key: words.label(key, lang)  # noqa: E731
    texts = {}
    with gr.Row(elem_id="zb-live"):
        run = gr.Dropdown([], label=t("run"), allow_custom_value=True, scale=3, elem_id="zb-run")
        if strip is None:
            status = gr.HTML(words.status("idle", lang), elem_id="zb-status")
    if strip is None:
        progress = gr.HTML(elem_id="zb-progress")
    else:
        status, progress = strip
    with gr.Row():
        loss = gr.LinePlot(loss_frame([], [], lang), x="step", y="loss", color="series", label=t("loss"),
                           x_title=t("axis_step"), y_title=t("loss"), color_title=t("axis_loss_series"), height=220,
                           elem_id="zb-loss")
        lr = gr.LinePlot(_frame([], ["step", "lr"]), x="step", y="lr", label=t("lr"), x_title=t("axis_step"),
                         y_title=t("lr"), height=220, elem_id="zb-lr")
        tps = gr.LinePlot(_frame([], ["step", "tokens/s"]), x="step", y="tokens/s", label=t("tps"), x_title=t("axis_step"),
                          y_title=t("tps"), height=220, elem_id="zb-tps")
        rewards = gr.LinePlot(rewards_frame([], lang), x="step", y="value", color="series", label=t("rewards"),
                              x_title=t("axis_step"), y_title=t("rewards"), color_title=t("axis_rewards_series"),
                              height=220, visible=False, elem_id="zb-rewards")
    log = gr.Textbox(label=t("logs"), lines=16, max_lines=16, autoscroll=True, interactive=False, elem_id="zb-log")
    log.change(None, js=STICK_TO_BOTTOM, show_progress="hidden")
    download = gr.DownloadButton(t("download_log"), size="sm", elem_id="zb-download")
    with gr.Accordion(t("memory") if gpus else t("memory_cpu"), open=True) as mem:
        # no copy / fullscreen buttons: their labels are gradio's own, in English only
        gpu_table = gr.Dataframe(headers=words.headers("gpus", lang), label=t("gpus"), interactive=False,
                                 buttons=[]) if gpus else None
        host = gr.Markdown(elem_id="zb-host")
        # the process table has the page's width: every column readable, no sideways scrolling (course screenshots)
        procs = gr.Dataframe(headers=words.headers("procs", lang), label=t("processes"), interactive=False, buttons=[],
                             elem_id="zb-procs")
        first = monitor.history_rows([monitor.take_sample(None)])  # every series, so each gets drawn
        history = gr.LinePlot(history_frame(first, lang), x="seconds", y="MiB", color="series",
                              label=t("history"), x_title=t("axis_seconds"), y_title="MiB", color_title=t("axis_series"),
                              height=220, elem_id="zb-history")
        mem_plan = gr.Markdown(elem_id="zb-mem-vs-plan")
    final = gr.Markdown(elem_id="zb-final")
    check = output_panel.render_output_check(lang)
    chart = lambda key: {"label": key, "x_title": "axis_step", "y_title": key}  # noqa: E731
    texts.update(run=(run, "label"), loss=(loss, {**chart("loss"), "color_title": "axis_loss_series"}), lr=(lr, chart("lr")),
                 tps=(tps, chart("tps")), rewards=(rewards, {**chart("rewards"), "color_title": "axis_rewards_series"}),
                 logs=(log, "label"), download_log=(download, "label"), processes=(procs, "label"),
                 history=(history, {"label": "history", "x_title": "axis_seconds", "color_title": "axis_series"}))
    texts["memory" if gpus else "memory_cpu"] = (mem, "label")
    if gpu_table is not None:
        texts["gpus"] = (gpu_table, "label")
    texts.update(check.texts)
    timer = gr.Timer(TICK_S)
    return LivePanels(run, status, progress, loss, lr, tps, rewards, log, download, gpu_table, host, procs, history, final,
                      timer, texts, mem_plan, check, gr.State({}))


def outputs(p: LivePanels) -> list:
    return [c for c in (p.status, p.progress, p.loss, p.lr, p.tps, p.rewards, p.log, p.download, p.gpus, p.host, p.procs,
                        p.history, p.final, p.mem) if c is not None] + output_panel.outputs(p.check)


def render_snapshot(p: LivePanels, snap: Snapshot, seen: dict | None, now: float) -> tuple[list, dict]:
    """Updates for ``outputs(p)``; panels whose data did not change since ``seen`` are skipped."""
    seen = seen or {}
    fresh = seen.get("run_dir") != snap.run_dir or seen.get("started") != snap.started
    skip = gr.skip()

    def changed(key, value):
        return fresh or seen.get(key) != value

    # what names each chart's series; which series each chart was sent rows for, and was last redrawn for
    series = {"loss": [snap.lang, snap.has_eval], "history": [snap.lang],
              "rewards": [snap.lang, sorted({r["series"] for r in snap.rewards})]}
    sent = dict(seen.get("sent") or {})
    laid = {} if seen.get("lang") != snap.lang else dict(seen.get("laid") or {})  # a switch relabels (redraws) them
    due = {"loss": changed("events", snap.events_version), "history": changed("sample", snap.sample_time)}
    due["rewards"] = due["loss"]
    rows = {"loss": lambda: loss_frame(snap.loss, snap.eval_loss, snap.lang, snap.has_eval),
            "history": lambda: history_frame(snap.history, snap.lang),
            "rewards": lambda: gr.update(value=rewards_frame(snap.rewards, snap.lang), visible=bool(snap.rewards))}
    chart_out, sent_rows = {}, {}
    for chart, title in RELAID:
        if sent.get(chart) != series[chart]:  # new series: their rows first ...
            chart_out[chart], sent[chart], sent_rows[chart] = rows[chart](), series[chart], True
        elif (laid.get(chart) or [None])[0] != series[chart]:  # ... then the title, which makes the chart draw them
            zwsp = not (laid.get(chart) or [None, False])[1]
            laid[chart] = [series[chart], zwsp]
            chart_out[chart] = gr.update(color_title=words.label(title, snap.lang) + (ZWSP if zwsp else ""))
            sent_rows[chart] = False
        elif due[chart]:
            chart_out[chart], sent_rows[chart] = rows[chart](), True
        else:
            chart_out[chart], sent_rows[chart] = skip, True
    events_new = due["loss"] and sent_rows["loss"]  # rows held back by a redraw go out on the next tick
    sampled = due["history"] and sent_rows["history"]
    chart_out["lr"] = _frame(snap.lr, ["step", "lr"]) if events_new else skip
    chart_out["tps"] = _frame(snap.tps, ["step", "tokens/s"]) if events_new else skip
    retitled = retitle(chart_out, seen, snap.lang, skip)
    log_new = changed("log", snap.log_version)
    status_key = (snap.status, snap.status_md)
    download_due = changed("download", snap.log_path)
    out = [
        snap.status_md if changed("status", status_key) else skip,
        snap.progress_html,
        chart_out["loss"],
        chart_out["lr"],
        chart_out["tps"],
        chart_out["rewards"],
        snap.log_text if log_new else skip,
        gr.update(value=downloadable(snap.log_path)) if download_due else skip,
    ]
    if p.gpus is not None:
        out.append({"headers": words.headers("gpus", snap.lang), "data": snap.gpu_rows} if sampled else skip)
    out += [
        snap.host if sampled else skip,
        {"headers": words.headers("procs", snap.lang), "data": snap.proc_rows} if sampled else skip,
        chart_out["history"],
        snap.final_md if changed("status", status_key) else skip,
        snap.mem_md if changed("mem", snap.mem_md) else skip,
    ]
    check_key = [snap.run_dir, snap.status]  # not the language: a switch must not reset typed folders
    if changed("check", check_key):
        out += output_panel.updates(output_check.view(snap.run_dir, snap.status, snap.lang))
    elif seen.get("lang") != snap.lang:  # a language switch: only the "what was saved" text is said again
        out += output_panel.relabel_saved(output_check.view(snap.run_dir, snap.status, snap.lang))
    else:
        out += [skip] * len(output_panel.outputs(p.check))
    seen = {"run_dir": snap.run_dir, "started": snap.started, "log": snap.log_version,
            "events": snap.events_version if sent_rows["loss"] or not due["loss"] else None,
            "sample": snap.sample_time if sent_rows["history"] or not due["history"] else None,
            "status": status_key, "download": snap.log_path, "mem": snap.mem_md, "check": check_key, "lang": snap.lang,
            "sent": sent, "laid": laid, **retitled}
    return out, seen


def retitle(chart_out: dict, seen: dict, lang: str, skip) -> dict:
    """On the ticks RETITLE_TICKS after a language switch, each chart's axis titles again (into ``chart_out``, for a
    chart this tick sends nothing else; else on a later tick).  Returns what the next tick needs to know."""
    ticks = 0 if seen.get("lang") != lang else seen.get("ticks", 0) + 1
    owed = set(AXES) if ticks in RETITLE_TICKS else set(seen.get("owed") or [])
    flips = dict(seen.get("flips") or {})
    for chart in sorted(owed):
        if chart_out[chart] is not skip:  # rows (or a legend title) this tick: the titles wait for the next
            continue
        flips[chart] = not flips.get(chart, False)
        titles = {prop: words.label(key, lang) for prop, key in AXES[chart].items()}
        titles["x_title"] += ZWSP if flips[chart] else ""
        chart_out[chart] = gr.update(**titles)
        owed.discard(chart)
    return {"ticks": ticks, "owed": sorted(owed), "flips": flips}


def downloadable(path: str | None) -> str | None:
    """The run's log, served as it is (a static path of its own: no copy, and nothing else of the folder)."""
    if path is None:
        return None
    p = Path(path).resolve()
    from gradio.data_classes import _StaticFiles

    if p not in _StaticFiles.all_paths:
        gr.set_static_paths([p])
    return str(p)


def pace(status: str) -> float:
    """Seconds to the next tick for a run of this status on the page (``idle``: none)."""
    return TICK_S if status in ACTIVE else IDLE_TICK_S


def run_choices(live: Live) -> list[tuple[str, str]]:
    """The runs of the index, named as the workspace sees them (``runs/demo``), each standing for its folder."""
    return [(workspace.shown(r), r) for r in live.manager.run_dirs()]


def wire_live(p: LivePanels, live: Live, session: gr.State, lang: gr.Radio, ctx) -> None:
    """The tick, the run list, and (a load step of ``ctx``, a ``pages.Context``) the run a fresh page follows."""
    def tick(state, view, lang_value):
        snap = live.snapshot(state.get("run_dir"), lang_value)
        updates, seen = render_snapshot(p, snap, view.get("seen"), time.time())
        run_update = gr.skip()
        if snap.run_dir and view.get("listed") != snap.run_dir:
            run_update = gr.update(choices=run_choices(live), value=snap.run_dir)
        # the slow pace is said on every slow tick: a change of the session sets the fast one without this view
        want = pace(snap.status)
        timer = gr.Timer(value=want) if want == IDLE_TICK_S or view.get("pace") != want else gr.skip()
        return [*updates, run_update, timer, {"seen": seen, "listed": snap.run_dir, "pace": want}]

    def follow_current(state, _lang):
        job = live.manager.current()
        run_dir = job.run_dir if job is not None else None
        return gr.update(choices=run_choices(live), value=run_dir), {**state, "run_dir": run_dir}

    def on_pick(run_dir, state):
        # only a run of this page's index: a folder typed into the box is never shown, written or signalled
        if not run_dir or run_dir == state.get("run_dir") or not live.manager.is_registered(run_dir):
            return state
        return {**state, "run_dir": run_dir}

    output_panel.wire_output_check(p.check, live.manager, session, lang)
    p.timer.tick(tick, [session, p.view, lang], [*outputs(p), p.run, p.timer, p.view], show_progress="hidden",
                 concurrency_limit=None, queue=False)
    # Start, Resume, a pick, a load: the run shown may be starting; the next tick comes at the fast pace
    session.change(lambda: gr.Timer(value=TICK_S), None, [p.timer], show_progress="hidden", queue=False)
    p.run.input(on_pick, [p.run, session], [session], show_progress="hidden")
    ctx.on_load(follow_current, [session], [p.run, session])
