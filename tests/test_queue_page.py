"""The Queue page and the Train page's Queue button.

Unit: the table says each entry's place, folder and why it waits; Move up / Move down / Cancel go through the
queue's own writer.  Browser (headless Chromium, a real server, real demo jobs): while a first job holds the CPU,
**Queue** puts a second one in the queue instead of refusing it; the Queue tab shows it waiting for the first run;
when the first is aborted the dispatcher starts the second through the same launch path and it finishes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import mark_page, page_reloaded, start_on_page, stop_jobs, wait_until
from test_browser import RUN_S, UI_S, demo_form, fill, fill_after_load, status, step
from zeroboard import words
from zeroboard.job.registry import Registry
from zeroboard.runs.queue import Queue
from zeroboard.webui import queue_page


def queued(tmp_path: Path, n: int) -> Queue:
    q = Queue(tmp_path / "runs.json")  # no dispatcher is started: the entries stay as written
    for i in range(n):
        q.add({"output_dir": f"runs/q{i}"}, str(tmp_path), "cli" if i else "page", "cpu", [0, 1],
              str(tmp_path / f"q{i}"), why=words.say("queue.behind", id="x"))
    return q


def test_the_table_says_place_folder_source_and_why_in_each_language(tmp_path):
    q = queued(tmp_path, 2)
    for lang in ("en", "zh"):
        table = queue_page.rows(q.entries(), lang)
        assert [r[0] for r in table] == ["1", "2"] and len(table[0]) == len(words.headers("queue", lang))
        assert table[0][4].endswith("q0") and table[1][4].endswith("q1")
        assert table[0][6] == words.text("source.page", lang) and table[1][6] == words.text("source.cli", lang)
        assert table[0][7] == words.text("queue.behind", lang, id="x")
    assert "cpu × 2" in queue_page.rows(q.entries(), "en")[0][5]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_intro_names_the_button_as_the_train_page_calls_it(lang):
    assert words.text("queue.button", lang) in words.text("queue.intro", lang)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_job_queued_behind_a_busy_folder_says_so_in_sentences_that_end_once(lang):
    why = words.say("run.busy_folder", run="runs/demo", status=words.say("status.running"), source=words.say("source.page"), pid=7)
    said = words.text("page.queued", lang, id="q1", position=1, why=words.clause(words.tr(why, lang)))
    assert words.text("run.busy_folder", lang, run="runs/demo", status=words.text("status.running", lang),
                      source=words.text("source.page", lang), pid=7).rstrip("。.") in said
    assert "。。" not in said and ".." not in said and "。." not in said
    assert words.clause("Wait...") == "Wait..." and words.clause("等待。") == "等待"


def test_move_and_cancel_change_the_queue_and_say_so(tmp_path):
    q = queued(tmp_path, 3)
    first, second, third = (e.id for e in q.entries())
    assert queue_page.act(q, "up", third, "en") == words.text("cli.queue_moved", "en", id=third, position=2)
    assert [e.id for e in q.entries()] == [first, third, second]
    queue_page.act(q, "up", first, "en")  # the first stays first
    assert [e.id for e in q.entries()][0] == first
    queue_page.act(q, "down", first, "en")
    assert [e.id for e in q.entries()] == [third, first, second]
    message = queue_page.act(q, "cancel", first, "en")
    assert first in message and [e.id for e in q.entries()] == [third, second]
    assert queue_page.act(q, "cancel", "nope", "en") == words.text("queue.pick_first", "en")
    assert queue_page.act(q, "cancel", None, "zh") == words.text("queue.pick_first", "zh")


# the cells of the queue whose text runs past their edge (the reason, a long sentence, must wrap in its column)
CUT = """() => { const table = document.querySelector('#zb-queue-table').getBoundingClientRect();
  return [...document.querySelectorAll('#zb-queue-table .virtual-row [role=gridcell]')].filter(c => {
    const g = document.createRange(); g.selectNodeContents(c);
    const text = g.getBoundingClientRect(), cell = c.getBoundingClientRect();
    return text.right > Math.min(cell.right, table.right) + 1; }).map(c => c.innerText); }"""


@pytest.mark.browser
@pytest.mark.e2e
def test_queue_on_the_train_page_waits_for_the_run_that_holds_the_cpu_then_starts(browser, standin_webui, tmp_path):
    # the queue is the subject, not the training: the session's server whose jobs run the stand-in trainer
    url, work = standin_webui
    index = work / "runs.json"
    try:
        context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US")
        pg = context.new_page()
        pg.set_default_timeout(UI_S)
        pg.goto(url + "?lang=en")
        demo_form(pg)
        first, second = tmp_path / "first", tmp_path / "second"
        fill_after_load(pg, "output_dir", first)
        fill(pg, "max_steps", 5000)  # (500 steps at the stand-in's 0.1 s could end, on a busy machine, before the
        start_on_page(pg, index, first)  # second Start meets it; it is aborted below)
        # Start answered (the page drops a click on Start while its last one is unanswered), and the page follows
        # this run: until then it shows the server's latest run, an earlier test's, with its own steps
        pg.wait_for_selector("#zb-message :text('Started')")
        ours = f"{tmp_path.name}/{first.name}"
        wait_until(lambda: status(pg) == "running" and ours in pg.locator("#zb-status").inner_text() and step(pg) > 0,
                   RUN_S, "the first run's first step on the page")

        # the form shows the running job, locked: edit a copy (its button shows once the page follows the run)
        def editable() -> bool:  # New job, while the page shows it (a tick may follow the run again after a click)
            if pg.locator("#zb-new-job").is_visible():
                pg.locator("#zb-new-job").click()
            return pg.locator("#zb-max_steps input").is_editable()

        busy = words.text("page.busy", "en")

        def answer() -> str | None:
            if page_reloaded(pg):
                return "reloaded"
            return "busy" if busy in pg.locator("#zb-message").inner_text() else None

        for _ in range(3):  # again only where Gradio reloaded the page meanwhile (it dropped the click)
            mark_page(pg)
            wait_until(editable, 60, "the form to be editable (New job)", every=1)
            fill(pg, "output_dir", second)
            fill(pg, "max_steps", 3)
            pg.locator("#zb-start").click()  # refused: the CPU is taken, and the page says Queue would wait
            try:
                said = wait_until(answer, UI_S / 1000, "the page to say the CPU is busy")
            except TimeoutError:
                raise AssertionError(f"Start said no {busy!r}; the message: {pg.locator('#zb-message').inner_text()!r}, "
                                     f"the page's toasts: {pg.locator('.toast-body').all_inner_texts()!r}") from None
            if said == "busy":
                break
            pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
        else:
            raise AssertionError("the page was reloaded three times (its connection to the server lost each time)")
        assert "Queue" in pg.locator("#zb-message").inner_text() and not second.exists()
        pg.locator("#zb-queue").click()
        pg.wait_for_selector("#zb-message :text('Queued')")
        assert not (second / "state.json").exists()  # it waits: nothing of it started

        pg.locator("#zb-tab-queue-button").click()
        pg.wait_for_selector("#zb-queue-table .virtual-row")
        row = pg.locator("#zb-queue-table .virtual-row").first.inner_text()
        assert "second" in row and "first" in row and "waiting" in row, row  # why: the first run holds the CPU
        assert not pg.evaluate(CUT), "a cell of the queue is cut at its edge (the reason wraps in its column)"

        pg.locator("#zb-tab-train-button").click()
        pg.locator("#zb-abort").click()
        wait_until(lambda: (Registry(index).entry(str(second.resolve())) or {}).get("requested"), RUN_S,
                   "the dispatcher to start the queued job once the first run ended")
        first_state = Registry(index).entry(str(first.resolve()))
        assert first_state is not None
        wait_until(lambda: (second / "state.json").exists() and '"finished"' in (second / "state.json").read_text(),
                   RUN_S, "the queued job to finish")
        pg.locator("#zb-tab-queue-button").click()
        wait_until(lambda: pg.locator("#zb-queue-table .virtual-row").count() == 0, 30, "the queue to be empty")
        assert status(pg) in ("finished", "failed", "aborted", "")  # the Train page still answers
        context.close()
    finally:
        stop_jobs(index)
