"""Live panels under the form: status, progress, plots, logs, memory (and the plan next to it), final status,
and the output check of a finished run.

A gr.Timer ticks every ``TICK_S``; each tick renders the shared Snapshot of
the session's run and skips every panel whose data did not change, so idle
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

from .. import words
from ..job import devices
from ..runs import monitor
from . import output_check, output_panel
from .live import Live, Snapshot

TICK_S = 0.5
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


# fixed names, the metrics' own (as in the log and the result file), the same in every language: the plot's colours
# are set on its first value
LOSS_SERIES = {"loss": "#2563eb", "eval_loss": "#ea580c"}


def loss_frame(train: list[dict], evals: list[dict]) -> pd.DataFrame:
    """Training and evaluation loss as two series; a series with no point yet gets an empty (NaN) one, so every
    value the plot gets names both series (it keeps the series of its first value: see notes on gradio's LinePlot)."""
    rows = [{**r, "series": "loss"} for r in train] + [{**r, "series": "eval_loss"} for r in evals]
    step = float(train[0]["step"]) if train else 0.0
    rows += [{"step": step, "loss": float("nan"), "series": name} for name, has in (("loss", train), ("eval_loss", evals))
             if not has]
    return _frame(rows, ["step", "loss", "series"])


def render_live(lang: str, gpus: list[devices.Gpu]) -> LivePanels:
    t = lambda key: words.label(key, lang)  # noqa: E731
    texts = {}
    with gr.Row():
        run = gr.Dropdown([], label=t("run"), allow_custom_value=True, scale=3, elem_id="zb-run")
        status = gr.HTML(words.status("idle", lang), elem_id="zb-status")
    progress = gr.HTML(elem_id="zb-progress")
    with gr.Row():
        loss = gr.LinePlot(loss_frame([], []), x="step", y="loss", color="series", color_map=LOSS_SERIES, label=t("loss"),
                           x_title=t("axis_step"), y_title=t("loss"), color_title=t("axis_loss_series"), height=220,
                           elem_id="zb-loss")
        lr = gr.LinePlot(_frame([], ["step", "lr"]), x="step", y="lr", label=t("lr"), x_title=t("axis_step"),
                         y_title=t("lr"), height=220, elem_id="zb-lr")
        tps = gr.LinePlot(_frame([], ["step", "tokens/s"]), x="step", y="tokens/s", label=t("tps"), x_title=t("axis_step"),
                          y_title=t("tps"), height=220, elem_id="zb-tps")
    log = gr.Textbox(label=t("logs"), lines=16, max_lines=16, autoscroll=True, interactive=False, elem_id="zb-log")
    log.change(None, js=STICK_TO_BOTTOM, show_progress="hidden")
    download = gr.DownloadButton(t("download_log"), size="sm", elem_id="zb-download")
    with gr.Accordion(t("memory") if gpus else t("memory_cpu"), open=True) as mem:
        gpu_table = gr.Dataframe(headers=words.headers("gpus", lang), label=t("gpus"), interactive=False) if gpus else None
        host = gr.Markdown(elem_id="zb-host")
        # the process table has the page's width: every column readable, no sideways scrolling (course screenshots)
        procs = gr.Dataframe(headers=words.headers("procs", lang), label=t("processes"), interactive=False, elem_id="zb-procs")
        first = monitor.history_rows([monitor.take_sample(None)])  # every series, so each gets drawn
        history = gr.LinePlot(_frame(first, ["seconds", "series", "MiB"]), x="seconds", y="MiB", color="series",
                              label=t("history"), x_title=t("axis_seconds"), y_title="MiB", color_title=t("axis_series"),
                              height=220, elem_id="zb-history")
        mem_plan = gr.Markdown(elem_id="zb-mem-vs-plan")
    final = gr.Markdown(elem_id="zb-final")
    check = output_panel.render_output_check(lang)
    chart = lambda key: {"label": key, "x_title": "axis_step", "y_title": key}  # noqa: E731
    texts.update(run=(run, "label"), loss=(loss, {**chart("loss"), "color_title": "axis_loss_series"}), lr=(lr, chart("lr")),
                 tps=(tps, chart("tps")),
                 logs=(log, "label"), download_log=(download, "label"), processes=(procs, "label"),
                 history=(history, {"label": "history", "x_title": "axis_seconds", "color_title": "axis_series"}))
    texts["memory" if gpus else "memory_cpu"] = (mem, "label")
    if gpu_table is not None:
        texts["gpus"] = (gpu_table, "label")
    texts.update(check.texts)
    timer = gr.Timer(TICK_S)
    return LivePanels(run, status, progress, loss, lr, tps, log, download, gpu_table, host, procs, history, final,
                      timer, texts, mem_plan, check, gr.State({}))


def outputs(p: LivePanels) -> list:
    return [c for c in (p.status, p.progress, p.loss, p.lr, p.tps, p.log, p.download, p.gpus, p.host, p.procs,
                        p.history, p.final, p.mem) if c is not None] + output_panel.outputs(p.check)


def render_snapshot(p: LivePanels, snap: Snapshot, seen: dict | None, now: float) -> tuple[list, dict]:
    """Updates for ``outputs(p)``; panels whose data did not change since ``seen`` are skipped."""
    seen = seen or {}
    fresh = seen.get("run_dir") != snap.run_dir or seen.get("started") != snap.started
    skip = gr.skip()

    def changed(key, value):
        return fresh or seen.get(key) != value

    events_new = changed("events", snap.events_version)
    log_new = changed("log", snap.log_version)
    status_key = (snap.status, snap.status_md)
    download_due = changed("download", snap.log_path)
    out = [
        snap.status_md if changed("status", status_key) else skip,
        snap.progress_html,
        loss_frame(snap.loss, snap.eval_loss) if events_new else skip,
        _frame(snap.lr, ["step", "lr"]) if events_new else skip,
        _frame(snap.tps, ["step", "tokens/s"]) if events_new else skip,
        snap.log_text if log_new else skip,
        gr.update(value=downloadable(snap.log_path)) if download_due else skip,
    ]
    sampled = changed("sample", snap.sample_time)
    if p.gpus is not None:
        out.append({"headers": words.headers("gpus", snap.lang), "data": snap.gpu_rows} if sampled else skip)
    out += [
        snap.host if sampled else skip,
        {"headers": words.headers("procs", snap.lang), "data": snap.proc_rows} if sampled else skip,
        _frame(snap.history, ["seconds", "series", "MiB"]) if sampled else skip,
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
    seen = {"run_dir": snap.run_dir, "started": snap.started, "events": snap.events_version, "log": snap.log_version,
            "status": status_key, "sample": snap.sample_time,
            "download": snap.log_path, "mem": snap.mem_md, "check": check_key, "lang": snap.lang}
    return out, seen


def downloadable(path: str | None) -> str | None:
    """The run's log, served as it is (a static path of its own: no copy, and nothing else of the folder)."""
    if path is None:
        return None
    p = Path(path).resolve()
    from gradio.data_classes import _StaticFiles

    if p not in _StaticFiles.all_paths:
        gr.set_static_paths([p])
    return str(p)


def run_choices(live: Live) -> list[str]:
    return live.manager.run_dirs()


def wire_live(p: LivePanels, live: Live, session: gr.State, lang: gr.Radio, demo: gr.Blocks) -> None:
    def tick(state, view, lang_value):
        snap = live.snapshot(state.get("run_dir"), lang_value)
        updates, seen = render_snapshot(p, snap, view.get("seen"), time.time())
        run_update = gr.skip()
        if snap.run_dir and view.get("listed") != snap.run_dir:
            run_update = gr.update(choices=run_choices(live), value=snap.run_dir)
        return [*updates, run_update, {"seen": seen, "listed": snap.run_dir}]

    def on_load(state):
        job = live.manager.current()
        run_dir = job.run_dir if job is not None else None
        return gr.update(choices=run_choices(live), value=run_dir), {**state, "run_dir": run_dir}

    def on_pick(run_dir, state):
        # only a run of this page's index: a folder typed into the box is never shown, written or signalled
        if not run_dir or run_dir == state.get("run_dir") or not live.manager.is_registered(run_dir):
            return state
        return {**state, "run_dir": run_dir}

    output_panel.wire_output_check(p.check, live.manager, session, lang)
    p.timer.tick(tick, [session, p.view, lang], [*outputs(p), p.run, p.view], show_progress="hidden",
                 concurrency_limit=None, queue=False)
    p.run.input(on_pick, [p.run, session], [session], show_progress="hidden")
    demo.load(on_load, [session], [p.run, session], show_progress="hidden")
