"""The Runs page in headless Chromium: two demo runs compared, one resumed, one started again; and the Chinese page,
every tab, with no English left (gradio's own words included).

Gradio pages keep connections open: these tests wait for elements, never for "network idle".
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from helpers import RETITLE_S, left_after, on_standin, start_on_page, synthetic_run, wait_until
from test_browser import RUN_S, UI_S, choose, demo_form, fill, fill_after_load, status, step
from test_chapter_zh import TERMS, WORD, english_left
from zeroboard.job import folders, record, spec
from zeroboard.runs.launch import prepare_launch
from zeroboard.runs.manager import JobManager
from zeroboard.runs.queue import Queue
from zeroboard.runs.state import read_state
from zeroboard.words import say

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def server(webui):
    """The session's web UI (conftest.py): (its URL, its folder)."""
    return webui


def _job(out: Path, **changes):
    job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    job.output_dir = str(out)
    for k, v in changes.items():
        setattr(job, k, v)
    return job


def opened(browser, url: str, locale: str = "en-US"):
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale=locale)
    pg = context.new_page()
    pg.set_default_timeout(UI_S)
    pg.goto(url)
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    return pg


def runs_tab(pg) -> None:
    pg.locator("#zb-tab-runs-button").click()
    pg.wait_for_selector("#zb-runs-table .virtual-row")


def rows(pg) -> list[str]:
    return pg.evaluate("() => [...document.querySelectorAll('#zb-runs-table .virtual-row')].map(r => r.innerText)")


def select_only(pg, *names: str) -> None:
    """Clear the selection, then click the row of each run (its folder's name)."""
    pg.locator("#zb-runs-clear").click()
    pg.wait_for_function("() => !document.querySelector('#zb-runs-selected .token')")
    for k, name in enumerate(names):
        row = pg.evaluate("""(name) => [...document.querySelectorAll('#zb-runs-table .virtual-row')]
            .findIndex(r => (r.querySelector('[role=gridcell]')?.innerText.trim() || '').split('/').pop() === name)""",
                          name)
        assert row >= 0, f"no run {name} in the list: {rows(pg)}"
        pg.locator("#zb-runs-table .virtual-row").nth(row).locator("[role=gridcell]").first.click()
        pg.wait_for_function("(k) => document.querySelectorAll('#zb-runs-selected .token').length > k", arg=k)


def legend(pg, chart: str) -> list[str]:
    return pg.evaluate("""(sel) => [...document.querySelectorAll(sel + ' svg g[class*=legend] text')]
                          .map(t => t.textContent.trim()).filter(Boolean)""", chart)


def start_run(pg, index: Path, out: Path, max_steps: int, stage: str, lr: float) -> None:
    fill_after_load(pg, "output_dir", out)
    fill(pg, "max_steps", max_steps)
    fill(pg, "learning_rate", lr)
    choose(pg, "deepspeed_stage", stage)
    start_on_page(pg, index, out)  # on a shared machine another workspace's CPU job may hold the CPU a while
    pg.wait_for_selector("#zb-message :text('Started')", timeout=90_000)
    wait_until(lambda: out.name in pg.locator("#zb-status").inner_text(), 60, f"{out.name} on the page")


def test_two_runs_compared_then_one_resumed_and_one_started_again(browser, server):
    url, work = server
    pg = opened(browser, url + "?lang=en")
    demo_form(pg)
    a, b = work / "alpha", work / "beta"

    # alpha: saved and stopped early (a whole checkpoint, to resume from); beta: stage 2, another learning rate
    start_run(pg, work / "runs.json", a, 200, "none", 0.005)
    wait_until(lambda: step(pg) >= 10, RUN_S, "alpha's first steps")
    # on a 1440x900 screen the run stays in sight while the form scrolls, and one click shows its charts and log
    pg.locator("#zb-max_steps").scroll_into_view_if_needed()
    assert pg.locator("#zb-strip").evaluate("e => e.getBoundingClientRect().top") <= 1
    assert "alpha" in pg.locator("#zb-strip").inner_text()
    pg.locator("#zb-live-jump").click()
    wait_until(lambda: pg.locator("#zb-loss").evaluate("e => { const r = e.getBoundingClientRect(); "
                                                       "return r.top >= 0 && r.bottom <= innerHeight; }"), 10,
               "the loss chart in view")
    pg.locator("#zb-save-stop").click()
    wait_until(lambda: status(pg) in ("finished", "failed"), RUN_S, "alpha to save and stop")
    assert status(pg) == "finished", pg.locator("#zb-final").inner_text()
    # ended, the strip is part of the page again: a full-page capture shows it above the form, covering nothing
    assert pg.locator("#zb-strip").evaluate("e => getComputedStyle(e).position") != "sticky"
    stopped_at = int(folders.last_checkpoint(a).name.split("-")[1])  # saved where it stopped
    assert 10 <= stopped_at < 200 and step(pg) == stopped_at  # the page says the step it stopped at, not the total
    start_run(pg, work / "runs.json", b, 20, "2", 0.002)
    wait_until(lambda: status(pg) in ("finished", "failed") and "beta" in pg.locator("#zb-status").inner_text(), RUN_S,
               "beta to finish")
    assert status(pg) == "finished", pg.locator("#zb-final").inner_text()

    # the Runs tab lists both, overlays their curves and shows exactly the fields that differ
    runs_tab(pg)
    listed = rows(pg)
    assert any("alpha" in r and "finished" in r for r in listed) and any("beta" in r for r in listed), listed
    select_only(pg, "alpha", "beta")
    pg.locator("#zb-runs-compare").click()
    pg.wait_for_selector("#zb-runs-diff table")
    wait_until(lambda: {"alpha", "beta"} <= set(legend(pg, "#zb-runs-loss")), 30, "both runs in the loss chart's legend")
    strokes = pg.evaluate("""() => new Set([...document.querySelectorAll('#zb-runs-loss svg path[aria-roledescription]')]
                             .map(p => p.getAttribute('stroke')).filter(s => s && s !== 'transparent')).size""")
    assert strokes >= 2, "the two runs' loss curves are not both drawn"
    differ = pg.evaluate("() => [...document.querySelectorAll('#zb-runs-diff tbody tr td:first-child')]"
                         ".map(td => td.innerText.trim())")
    assert sorted(differ) == ["deepspeed_stage", "learning_rate", "max_steps"], differ
    course = pg.locator("#zb-runs-course table").inner_text()
    assert "MiB" in course and "none" in course and "2" in course  # measured peaks per setting

    # Resume alpha: the Train tab follows it, and its steps go on from the checkpoint to the end
    select_only(pg, "alpha")
    pg.locator("#zb-runs-open").click()
    pg.wait_for_selector(f"#zb-runs-detail :text('checkpoint-{stopped_at}')")
    resumed = time.time()
    start_on_page(pg, work / "runs.json", a, button="#zb-runs-resume")
    pg.wait_for_selector("#zb-message :text('alpha')", timeout=90_000)  # the Train page says it started
    assert pg.locator("#zb-tab-train-button").get_attribute("aria-selected") == "true"
    # its own end, not its first one (the page may still say "finished" for a tick while the resumed steps come in)
    wait_until(lambda: (s := read_state(a)) is not None and s.status in ("finished", "failed") and (s.ended or 0) > resumed,
               RUN_S, "alpha to resume and end")
    wait_until(lambda: status(pg) == read_state(a).status and step(pg) > stopped_at, 30, "the page to show alpha's end")
    assert status(pg) == "finished" and step(pg) == 200, pg.locator("#zb-final").inner_text()
    events = record.read_events(a / record.EVENTS_FILE)
    last_start = max(i for i, e in enumerate(events) if e["event"] == "start")
    resumed = [e["step"] for e in events[last_start:] if e["event"] == "log"]
    assert resumed and resumed[0] > stopped_at and resumed[-1] == 200, resumed  # counted on, not from 0

    # Start again beta: its settings in the Train form, in a new folder
    runs_tab(pg)
    select_only(pg, "beta")
    pg.locator("#zb-runs-open").click()
    pg.wait_for_selector("#zb-runs-detail h3:has-text('beta')")  # (alpha's, opened before, shows until beta's comes)
    pg.locator("#zb-runs-again").click()
    wait_until(lambda: pg.locator("#zb-tab-train-button").get_attribute("aria-selected") == "true", 30, "the Train tab")
    wait_until(lambda: pg.locator("#zb-deepspeed_stage input").input_value() == "2", 30, "beta's stage in the form")
    assert float(pg.locator("#zb-learning_rate input").input_value()) == 0.002
    assert pg.locator("#zb-max_steps input").input_value() == "20"
    assert pg.locator("#zb-output_dir input, #zb-output_dir textarea").first.input_value() == str(work / "beta-2")
    pg.context.close()


# --- the Chinese page -------------------------------------------------------------------------------------

# the words of gradio's own buttons and tooltips, and of ours: what a reader hovers or a screen reader says
TOOLTIPS = """() => [...document.querySelectorAll('[title], button[aria-label]')].filter(e => {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || e.closest('svg')) return false;
    for (let a = e; a; a = a.parentElement) {
      const st = getComputedStyle(a);
      if (st.display === 'none' || st.visibility === 'hidden') return false;
    }
    return true;
  }).flatMap(e => [e.getAttribute('title'), e.getAttribute('aria-label')].filter(Boolean)
     .map(v => [v, (e.closest('[id]') || {}).id || '']))"""


def tooltips_left(pg) -> list[str]:
    found = []
    for text, where in pg.evaluate(TOOLTIPS):
        text = re.sub(r"\S*[/\\.]\S*", " ", text)  # paths and file names
        if [w for w in WORD.findall(text) if len(w) > 1 and w.lower() not in TERMS and not re.search(r"[\d_]", w)]:
            found.append(f"{text} (#{where})")
    return sorted(set(found))


def assert_no_english(pg, where: str) -> None:
    pg.wait_for_selector("body[data-zb-lang='zh']", state="attached")
    pg.wait_for_selector("#zb-start:text-is('开始')", state="attached", timeout=60_000)  # the labels said again
    left = left_after(lambda: english_left(pg) + tooltips_left(pg))
    assert not left, f"English on the Chinese page ({where}), {RETITLE_S} s after its labels switched: {left}"


def test_no_english_on_any_chinese_tab(browser, server):
    url, work = server
    index = work / "runs.json"
    for i, (stage, off) in enumerate((("2", False), ("3", True))):  # two ended runs, one with an evaluation set
        synthetic_run(work / f"s{stage}{'_off' if off else ''}", index, seed=i, deepspeed_stage=stage, offload=off,
                      val_size=0.1 if off else 0.0)
    pg = opened(browser, url + "?lang=zh")  # an English browser: the page's choice wins, gradio's words too
    pg.wait_for_selector("#zb-preview:text-is('预览命令')")
    assert pg.evaluate("document.documentElement.lang") == "zh-CN"
    wait_until(lambda: "训练" in legend(pg, "#zb-loss"), 30, "the loss legend in Chinese")
    assert not {"loss", "eval_loss"} & set(legend(pg, "#zb-loss"))
    wait_until(lambda: {"主机内存", "任务内存"} <= set(legend(pg, "#zb-history")), 30, "the memory legend in Chinese")
    assert_no_english(pg, "the Train tab")
    choose(pg, "deepspeed_stage", "2")
    pg.locator("#zb-preview").click()
    pg.wait_for_function("() => (document.querySelector('#zb-ds-json')?.innerText || '').includes('\"stage\": 2')")
    assert pg.locator("#zb-command pre.zb-cmd >> nth=0").inner_text().startswith("# 在工作区目录中运行")
    assert_no_english(pg, "the Train tab after 预览命令")

    runs_tab(pg)
    assert_no_english(pg, "the Runs tab")
    select_only(pg, "s2", "s3_off")
    pg.locator("#zb-runs-compare").click()
    pg.wait_for_selector("#zb-runs-course table")
    assert "每设备实测峰值" in pg.locator("#zb-runs-course").inner_text()
    assert_no_english(pg, "the comparison")
    select_only(pg, "s3_off")
    pg.locator("#zb-runs-open").click()
    pg.wait_for_selector("#zb-runs-detail h3:has-text('s3_off')")
    assert_no_english(pg, "a run opened")
    pg.locator("#zb-runs-delete").click()
    pg.wait_for_selector("#zb-runs-confirm-row", state="visible")
    assert "无法撤销" in pg.locator("#zb-runs-confirm-text").inner_text()
    assert_no_english(pg, "the confirmation of a deletion")
    pg.locator("#zb-runs-cancel").click()
    pg.wait_for_selector("#zb-runs-confirm-row", state="hidden")
    assert (work / "s3_off").is_dir()

    # the Queue tab with an entry waiting for the run that holds the CPU (a stand-in job: the words are the subject),
    # then the Chat tab
    mgr = JobManager(index=index)
    holder = mgr.start(on_standin(prepare_launch(_job(work / "holds-cpu", max_steps=5000), gpus=[])))
    entry = Queue(index).add({"output_dir": str(work / "next"), "max_steps": 2}, str(work), "page", "cpu", [0, 1],
                             str(work / "next"), why=say("queue.next"))
    try:
        pg.locator("#zb-tab-queue-button").click()
        pg.wait_for_selector("#zb-queue-table .virtual-row")
        assert "等待" in pg.locator("#zb-queue-table").inner_text()
        assert_no_english(pg, "the Queue tab")
    finally:
        Queue(index).remove(entry.id)
        mgr.abort(holder.run_dir)
        wait_until(lambda: not mgr.state(holder.run_dir).active, 120, "the run that held the CPU to stop")
    pg.locator("#zb-tab-chat-button").click()
    pg.wait_for_selector("#zb-chat-load:text-is('加载模型')")
    assert_no_english(pg, "the Chat tab")
    pg.context.close()
