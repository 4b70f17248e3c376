"""The Queue page (队列): the jobs waiting for their devices, in the order they will start; reorder or cancel them.

A page of the registry (``pages``).  Jobs get here from the Train page's **Queue** button (or ``zeroboard train
--queue``): the same check and command as Start, then the queue's dispatcher starts each through the one launch
path as its devices and folder free (``runs.dispatcher``).  This page only reads the queue file and asks the queue
to move or drop an entry (``runs.queue.Queue`` is its one writer, under its lock); what it shows for each entry
is why it waits (which run holds its devices, or which earlier entry goes first), and above the count, a queue file
that cannot be read or a damaged one kept aside (where the copy went, what to do).  Each look (the tab opened, its
timer, Refresh, a move or a cancel) starts a new dispatcher when entries wait and none runs, which costs one lock
probe when one does (``dispatcher.revive``).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass

import gradio as gr

from .. import words, workspace
from ..job.registry import RegistryError
from ..runs import dispatcher
from ..runs.queue import Entry, Queue
from ..words import text, tr
from . import pages
from .live import dur_text
from .runs_view import devices_text

REFRESH_S = 2.0  # the list is read again this often while the page is open (a small file)


# position, id, status, waited, folder, devices, source, why it waits: the reason takes the rest and wraps
COLUMN_WIDTHS = ["4%", "8%", "8%", "7%", "15%", "8%", "9%", "41%"]


@dataclass(kw_only=True)
class QueuePage(pages.View):
    table: gr.Dataframe
    refresh: gr.Button
    selected: gr.Dropdown
    up: gr.Button
    down: gr.Button
    cancel: gr.Button
    message: gr.Markdown
    count: gr.Markdown
    timer: gr.Timer


def rows(entries: list[Entry], lang: str, now: float | None = None) -> list[list[str]]:
    """One line per entry: position, id, status, waited, folder, devices, source, why it waits."""
    now = now or time.time()
    out = []
    for pos, e in enumerate(entries, 1):
        where = "Slurm" if e.device_kind == "slurm" else devices_text(e.device_kind, e.devices)  # as the Runs tab says
        out.append([str(pos), e.id, words.status(e.status, lang), dur_text(max(0.0, now - e.queued)),
                    workspace.shown(e.output), where, text(f"source.{e.source}", lang) if e.source in ("page", "cli")
                    else e.source, tr(e.why, lang) if e.why else "-"])
    return out


def choices(entries: list[Entry]) -> list[tuple[str, str]]:
    return [(f"{pos}. {e.id} — {workspace.shown(e.output)}", e.id) for pos, e in enumerate(entries, 1)]


def view(q: Queue, current: str | None, lang: str):
    """The table, the picker (keeping the picked entry while it is queued) and the count; a dispatcher started first
    when entries wait without one (the reasons shown are then the ones found now)."""
    dispatcher.revive(q)
    entries = q.entries()
    ids = [e.id for e in entries]
    keep = current if current in ids else (ids[0] if ids else None)
    table = rows(entries, lang)
    count = text("queue.count", lang, n=len(entries)) if entries else text("cli.queue_empty", lang)
    problem = q.problem()  # a queue file that cannot be read, or a damaged one kept aside: said until dealt with
    if problem is not None:
        count = f"**⚠ {html.escape(tr(problem, lang))}**\n\n{count}"
    return (gr.update(value=table or None, headers=words.headers("queue", lang)),
            gr.update(choices=choices(entries), value=keep), count)


def act(q: Queue, action: str, entry_id: str | None, lang: str) -> str:
    """Move the picked entry up or down one place, or cancel it (nothing had started: nothing is lost)."""
    entries = q.entries()
    pos = next((i for i, e in enumerate(entries, 1) if e.id == entry_id), None)
    if pos is None:
        return text("queue.pick_first", lang)
    entry = entries[pos - 1]
    try:
        if action == "cancel":
            q.remove(entry.id)
            return html.escape(text("cli.queue_cancelled", lang, id=entry.id, output=workspace.shown(entry.output)))
        to = max(1, min(len(entries), pos + (-1 if action == "up" else 1)))
        q.move(entry.id, to)
    except RegistryError as e:  # the queue file cannot be read or written: nothing changed
        return html.escape(tr(e.args[0], lang))
    return text("cli.queue_moved", lang, id=entry.id, position=to)


def render(ctx: pages.Context) -> QueuePage:
    t = lambda key: words.label(key, ctx.lang)  # noqa: E731
    with gr.Row(equal_height=True):
        intro = gr.Markdown(t("queue.intro"), elem_id="zb-queue-intro")
        refresh = gr.Button(t("runs.refresh"), size="sm", scale=0, min_width=100, elem_id="zb-queue-refresh")
    table = gr.Dataframe(headers=words.headers("queue", ctx.lang), interactive=False, wrap=True, buttons=[],
                         column_widths=COLUMN_WIDTHS, label=t("queue.tab"), show_label=False, elem_id="zb-queue-table")
    message = gr.Markdown(elem_id="zb-queue-message")
    with gr.Row(equal_height=True):
        selected = gr.Dropdown([], value=None, label=t("queue.selected"), scale=4, elem_id="zb-queue-selected")
        up = gr.Button(t("queue.up"), size="sm", scale=0, min_width=110, elem_id="zb-queue-up")
        down = gr.Button(t("queue.down"), size="sm", scale=0, min_width=110, elem_id="zb-queue-down")
        cancel = gr.Button(t("queue.cancel"), variant="stop", size="sm", scale=0, min_width=110, elem_id="zb-queue-cancel")
    count = gr.Markdown(elem_id="zb-queue-count")
    timer = gr.Timer(REFRESH_S, active=False)
    texts = {"queue.intro": (intro, "value"), "runs.refresh": (refresh, "value"), "queue.selected": (selected, "label"),
             "queue.up": (up, "value"), "queue.down": (down, "value"), "queue.cancel": (cancel, "value")}
    return QueuePage(texts=texts, table=table, refresh=refresh, selected=selected, up=up, down=down, cancel=cancel,
                     message=message, count=count, timer=timer)


def wire(p: QueuePage, ctx: pages.Context) -> None:
    q, io, lang = Queue(ctx.manager.index), dict(show_progress="hidden"), ctx.lang_radio
    listed = [p.table, p.selected, p.count]

    def show(current, lang_value):
        return view(q, current, lang_value)

    def on_act(action):
        def handler(current, lang_value):
            message = act(q, action, current, lang_value)
            return (message, *view(q, current, lang_value))
        return handler

    tab = ctx.tab_items["queue"]
    tab.select(show, [p.selected, lang], listed, **io).then(lambda: gr.Timer(active=True), None, [p.timer], **io)
    for other in ctx.tab_items.values():  # read the queue only while its tab is open
        if other is not tab:
            other.select(lambda: gr.Timer(active=False), None, [p.timer], **io)
    p.timer.tick(show, [p.selected, lang], listed, **io)
    p.refresh.click(show, [p.selected, lang], listed, **io)
    lang.change(show, [p.selected, lang], listed, **io)
    for action, button in (("up", p.up), ("down", p.down), ("cancel", p.cancel)):
        button.click(on_act(action), [p.selected, lang], [p.message, *listed], **io)
    ctx.on_load(lambda current, lang_value: view(q, current, lang_value), [p.selected], listed)


PAGE = pages.register(pages.Page("queue", "queue.tab", render, wire, order=25))
