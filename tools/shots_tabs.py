"""The shots of the Runs, Queue and Chat tabs for tools/screenshots.py (which starts the server, the demo run and the
compared runs, and names the files)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from shots_page import FRAMES, Tab

from helpers import wait_until
from zeroboard import words

QUEUED_RUN = "runs/queued"  # a job queued while the demo run holds the CPU processes (shot, then cancelled)

# the row of the Runs table whose first cell (the run's folder) is exactly this name
ROW_OF = """(name) => [...document.querySelectorAll('#zb-runs-table .virtual-row')]
  .findIndex(r => r.querySelector('[role=gridcell]')?.innerText.trim() === name)"""


# the comparison as the page shows it: the memory table's head and rows, the text around it, the note under the charts
COMPARED = """() => {
  const t = document.querySelector('#zb-runs-course table');
  return {head: [...t.querySelectorAll('thead th')].map(c => c.innerText.trim()),
          rows: [...t.querySelectorAll('tbody tr')].map(r => [...r.querySelectorAll('td')].map(c => c.innerText.trim())),
          course: document.querySelector('#zb-runs-course').innerText,
          curves: document.querySelector('#zb-runs-curves-note')?.innerText ?? ''};
}"""


def shoot_runs(tab: Tab, out: Path, names: list[str]) -> dict:
    """The Runs tab: the list, then the runs ``names`` compared (curves, memory and speed, the fields that differ).
    Returns the comparison as the page showed it (``COMPARED``)."""
    tab.pg.locator("#zb-tab-runs-button").click()
    wait_until(lambda: tab.pg.locator("#zb-runs-table .virtual-row").count() >= len(names), 60, "the runs listed")
    tab.pg.mouse.move(0, 0)
    tab.shoot(out, "runs_list")
    for k, name in enumerate(names):
        row = tab.pg.evaluate(ROW_OF, name)
        tab.pg.locator("#zb-runs-table .virtual-row").nth(row).locator("[role=gridcell]").first.click()
        tab.pg.wait_for_function("(k) => document.querySelectorAll('#zb-runs-selected .token').length > k", arg=k)
    tab.pg.locator("#zb-runs-compare").click()
    tab.pg.wait_for_selector("#zb-runs-course table")
    wait_until(lambda: tab.pg.evaluate("""() => new Set([...document.querySelectorAll('#zb-runs-loss svg path')]
                   .map(p => p.getAttribute('stroke')).filter(s => s && s !== 'transparent' && s !== '#e4e4e7')).size""")
               >= len(names), 30, "every run's curve drawn")
    tab.pg.evaluate(FRAMES)
    tab.pg.mouse.move(0, 0)
    tab.shoot(out, "runs_compare")
    tab.shoot(out, "chapter_compare")
    return tab.pg.evaluate(COMPARED)


def lesson_problem(shown: dict, lang: str) -> str:
    """What keeps the comparison ``shown`` (``COMPARED``, of the runs ``runs/lesson-<setting>``) from showing the
    course's lesson: the measured peak per device falling none > 2 > 3, and 2 + offload the lowest planned per GPU.
    '' when it shows it."""
    heads = words.text("headers.course", lang).split("|")
    col = {h: i for i, h in enumerate(shown["head"])}
    on_gpu = [i for h, i in col.items() if h not in heads]  # the one column a CPU run's table adds
    by = {row[0].rsplit("/", 1)[-1].removeprefix("lesson-"): row for row in shown["rows"]}
    if heads[4] not in col or not on_gpu or set(by) != {"none", "2", "3", "2-offload"}:
        return f"the table is not the lesson's four runs with their measured and per-GPU columns: {shown['head']}, {sorted(by)}"
    peak = {k: largest(row[col[heads[4]]]) for k, row in by.items()}
    if not peak["none"] > peak["2"] > peak["3"]:
        return f"the measured peaks do not fall none > 2 > 3: {peak}"
    planned = {k: largest(row[on_gpu[0]]) for k, row in by.items()}
    if min(planned, key=planned.get) != "2-offload":
        return f"2 + offload is not the lowest per GPU planned: {planned}"
    return ""


def largest(cell: str) -> int:
    """The largest size in a cell of the table (``2.43 GiB · 2.42 GiB``), in bytes; 0 where it shows none."""
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    return int(max([float(n.replace(",", "")) * units[u] for n, u in re.findall(r"([\d.,]+) ([KMG]iB)", cell)] or [0]))


def shoot_queue(tabs: list[Tab], out: Path, index: Path, ws: Path, env: dict) -> None:
    """The Queue tab with a job waiting behind the held demo run (queued as a user queues one from the command
    line), in every tab; then the job is cancelled, before it could start, and each tab is back on Train."""
    from zeroboard.runs.queue import Queue

    argv = [sys.executable, "-m", "zeroboard.cli", "train", "examples/demo.yaml", "--set", f"output_dir={QUEUED_RUN}",
            "--set", "max_steps=20", "--queue", "--detach"]
    done = subprocess.run(argv, cwd=ws, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)
    queue = Queue(index)
    queued = [e for e in queue.entries() if e.output.endswith(QUEUED_RUN)]
    if done.returncode != 0 or not queued:
        raise RuntimeError(f"the job to show in the queue was not queued (exit {done.returncode}):\n"
                           f"{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    try:
        for t in tabs:
            t.pg.locator("#zb-tab-queue-button").click()
            t.pg.wait_for_function("(name) => [...document.querySelectorAll('#zb-queue-table .virtual-row')]"
                                   ".some(r => r.innerText.includes(name))", arg=QUEUED_RUN)
            t.pg.mouse.move(0, 0)
            t.shoot(out, "queue")
    finally:
        for entry in queued:
            queue.remove(entry.id)
    for t in tabs:
        t.pg.locator("#zb-tab-train-button").click()


def shoot_chat(tabs: list[Tab], out: Path, index: Path, demo_run: str, answer_s: float) -> None:
    """The Chat tab on the finished demo run: loaded once (one worker for the CPU processes, found by every tab),
    asked the chapter's first question in each tab's language, shot; then unloaded, so the compared runs can train."""
    from zeroboard.data.demo import DEMO_PROMPTS, DEMO_PROMPTS_ZH
    from zeroboard.runs.manager import JobManager

    question = {"en": DEMO_PROMPTS[0], "zh": DEMO_PROMPTS_ZH[0]}
    try:
        for k, t in enumerate(tabs):
            t.pg.locator("#zb-tab-chat-button").click()
            t.pg.wait_for_function("(name) => document.querySelector('#zb-chat-target input')?.value.endsWith(name)",
                                   arg=demo_run)
            if k == 0:
                t.pg.locator("#zb-chat-load").click()
            # the worker's line names its pid once it is loaded (in either language)
            wait_until(lambda t=t: "pid" in t.pg.locator("#zb-chat-status").inner_text(), answer_s, "the chat worker")
            t.pg.locator("#zb-chat-question textarea").fill(question.get(t.lang, DEMO_PROMPTS[0]))
            t.pg.locator("#zb-chat-send").click()
            wait_until(lambda t=t: answered(t), answer_s, "the chat answer")
            t.pg.locator("#zb-chat-question textarea").blur()
            t.pg.mouse.move(0, 0)
            t.shoot(out, "chat")
    finally:
        tabs[-1].pg.locator("#zb-chat-unload").click()
        wait_until(lambda: not JobManager(index=index).workers(), 120, "the chat worker to unload")
    for t in tabs:
        t.pg.locator("#zb-tab-train-button").click()


def answered(t: Tab) -> bool:
    """The chat's answer has ended (its figures are shown under it); a message in their place is an error."""
    said = t.pg.locator("#zb-chat-figures").inner_text().strip()
    if said and not t.has("#zb-chat-tuned .bot-row"):
        raise RuntimeError(f"the chat on the {t.lang} page did not answer: {said}")
    return bool(said)
