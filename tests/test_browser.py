"""The Train page in headless Chromium: newcomer's preview-then-start, Abort, and a UI server restart mid-run.

Gradio pages keep connections open: these tests wait for elements, never for "network idle".
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from helpers import standin_env, start_server as start_webui, stop_jobs, stop_server, wait_until
from zeroboard.job import command, record
from zeroboard.runs import processes
from zeroboard.runs.state import JobState, read_state

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]
RUN_S = 300  # a ZeRO-2 offload start-up on a busy 2-core machine can take minutes
RELOAD_S = 240  # reload and answer: a subprocess that imports torch and loads the tuned and the base model
UI_S = 60_000  # ms, for page elements: seconds as a rule, but a 2-core machine training beside the browser can take tens


def start_server(port: int, index: Path, log: Path, env: dict | None = None) -> subprocess.Popen:
    return start_webui(port, index, log, REPO, env=env)  # `zeroboard webui` as a user starts it


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("browser")
    yield path
    for index in path.glob("*runs.json"):  # a failed test must not leave a long job running
        stop_jobs(index)


@pytest.fixture()
def server(webui):
    """The session's web UI (conftest.py)."""
    return webui[0]


@pytest.fixture()
def standin_server(standin_webui):
    """The session's web UI whose jobs run the stand-in trainer: for Abort and the live pace, which are not about the
    training."""
    return standin_webui[0]


def legend_in_card(page, plot: str, entry: str) -> bool:
    """The plot's legend entry is drawn inside the plot's card, not pushed under its clipped bottom edge."""
    return page.evaluate("""([sel, entry]) => {
        const card = document.querySelector(sel).getBoundingClientRect();
        const t = [...document.querySelectorAll(sel + ' svg text')].find(e => e.textContent.trim() === entry);
        if (!t) return false;
        const r = t.getBoundingClientRect();
        return r.height > 0 && r.top >= card.top && r.bottom <= card.bottom;
      }""", [plot, entry])


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(UI_S)
    yield pg
    context.close()


# --- page helpers -------------------------------------------------------------------------------


def open_page(pg, url: str) -> None:
    pg.goto(url)
    pg.wait_for_selector("#zb-start")
    demo_form(pg)


def demo_form(pg) -> None:
    """The form as the demo job has it, loaded with Load arguments: the session's server shows the last run's
    settings when a page opens (as it shows a returning user theirs), and a test starts from the demo's."""
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    fill(pg, "args-path", "examples/demo.yaml")
    pg.locator("#zb-load").click()
    pg.wait_for_selector("#zb-message :text('examples/demo.yaml')")


def reload_page(pg) -> None:
    """The user reloads.  Gradio's page may be reloading itself as its server came back, and a reload that meets
    that one is aborted (or finds the document already replaced): the user's reload is tried again."""
    from playwright.sync_api import Error as PlaywrightError

    for attempt in range(3):
        try:
            pg.reload()
            break
        except PlaywrightError as e:  # the page's own reload replaced the document under ours: reload again
            if attempt == 2 or not any(m in str(e) for m in ("ERR_ABORTED", "Not attached to an active page")):
                raise
            pg.wait_for_timeout(500)
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    pg.wait_for_selector("#zb-start")


def fill(pg, name: str, value) -> None:
    pg.locator(f"#zb-{name} input, #zb-{name} textarea").first.fill(str(value))


def choose(pg, name: str, option: str) -> None:
    pg.locator(f"#zb-{name} input").click()
    pg.get_by_role("option", name=option, exact=True).click()


def status(pg) -> str:
    return pg.locator("#zb-status .zb-status").get_attribute("data-status") or ""


def step(pg) -> int:
    bar = pg.locator("#zb-progress .zb-progress")
    return int(bar.get_attribute("data-step") or 0) if bar.count() else 0


def fill_after_load(pg, name: str, value) -> None:
    """Fill a field the page's load event may rewrite (output_dir moves off a used folder), once that has run."""
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    fill(pg, name, value)


def start_job(pg, out: Path, max_steps: int) -> str:
    fill_after_load(pg, "output_dir", out)
    fill(pg, "max_steps", max_steps)
    pg.locator("#zb-start").click()
    pg.wait_for_selector("#zb-message :text('Started')", timeout=90_000)
    wait_until(lambda: status(pg) == "running", 60, "the running status")
    return str(out)


# the live panels' tick: the event whose trigger is a timer and whose outputs hold the progress bar
LIVE_TICK = """() => {
  const cfg = window.gradio_config, bar = cfg.components.find(c => c.props?.elem_id === 'zb-progress').id;
  return cfg.dependencies.find(d => d.targets.some(t => t[1] === 'tick') && d.outputs.includes(bar)).id;
}"""


def live_ticks(pg, seconds: float) -> int:
    """How many times the live panels asked the server in ``seconds``."""
    fn, asked = pg.evaluate(LIVE_TICK), []

    def seen(request):
        if request.method == "POST" and request.url.endswith("/run/predict"):
            asked.extend([1] if json.loads(request.post_data or "{}").get("fn_index") == fn else [])

    pg.on("request", seen)
    pg.wait_for_timeout(seconds * 1000)  # not time.sleep: the page's events arrive while playwright waits
    pg.remove_listener("request", seen)
    return len(asked)


def recorded_state(run_dir: str) -> JobState:
    return read_state(run_dir)


def assert_no_process_left(run_dir: str) -> None:
    st = recorded_state(run_dir)
    assert processes.job_processes(st) == []
    assert all(processes.proc(r["pid"], r["ctime"]) is None for r in st.ranks)


def as_one_line(box: str) -> str:
    """The command box's text as the one bash line it pastes as: the comment saying where it runs left out, each
    line's ``\\`` continuation joined."""
    body = "\n".join(line for line in box.splitlines() if not line.startswith("#"))
    return re.sub(r" \\\n\s*", " ", body).strip()


# --- tests --------------------------------------------------------------------------------------


def test_newcomer_previews_stage_2_offload_then_starts_and_sees_it_finish(server, page, workdir):
    open_page(page, server)
    for label in ("Device count", "DeepSpeed stage", "Enable offload", "Preview command", "Start"):
        assert page.get_by_text(label, exact=True).first.is_visible(), label

    # the memory plan of the demo's job: redrawn from the fields Load filled (the page opened on the session's last
    # settings), so it is waited for, not read at once
    page.wait_for_function("() => document.querySelector('#zb-plan').innerText.includes('no DeepSpeed')")
    assert not page.locator("#zb-ds-json").is_visible()  # no DeepSpeed config yet: no empty box
    choose(page, "deepspeed_stage", "2")
    page.locator("#zb-offload input[type=checkbox]").check()
    page.wait_for_function("() => document.querySelector('#zb-plan').innerText.includes('Memory plan: ZeRO-2')")
    page.locator("#zb-preview").click()
    mark = page.locator("#zb-command mark.zb-ds >> nth=0")
    mark.wait_for()
    assert mark.inner_text() == "cache/ds_z2_offload_config.json"
    shown = page.locator("#zb-command pre.zb-cmd >> nth=0").inner_text()
    assert page.locator("#zb-command pre.zb-cmd >> nth=0").evaluate("e => getComputedStyle(e).wordBreak") != "break-all"  # no --deepspee|d
    assert "CUDA_VISIBLE_DEVICES=''" in shown and "--deepspeed cache/ds_z2_offload_config.json" in shown
    page.wait_for_function("() => document.querySelector('#zb-ds-json').innerText.includes('offload_optimizer')")
    code = page.locator("#zb-ds-json .cm-content").inner_text()
    cfg = json.loads(code)
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"

    run_dir = start_job(page, workdir / "newcomer", max_steps=60)
    ran = json.loads((Path(run_dir) / record.COMMAND_FILE).read_text())
    assert ran["deepspeed_config"] == "cache/ds_z2_offload_config.json"
    # what ran is what is shown: the folded box with the paths as they are, read as one bash line
    assert as_one_line(page.locator("#zb-command details.zb-full pre").text_content()) == ran["shell"]

    page.wait_for_function("() => document.querySelector('#zb-log textarea').value.includes('[rank1]:')",
                           timeout=RUN_S * 1000)
    steps = set()
    wait_until(lambda: steps.add(step(page)) or status(page) in ("finished", "failed"), RUN_S, "the run to end")
    assert status(page) == "finished", page.locator("#zb-final").inner_text()
    assert len(steps - {0}) >= 2, f"progress did not advance on the page: {sorted(steps)}"
    assert step(page) == 60
    assert "finished" in page.locator("#zb-final").inner_text()
    assert page.locator("#zb-loss svg, #zb-loss canvas").count() > 0
    for plot, entry in (("#zb-loss", "train"), ("#zb-history", "job RSS")):  # each legend names its series in sight
        assert legend_in_card(page, plot, entry), f"{plot}: the legend entry {entry} is cut off"
    assert not legend_in_card(page, "#zb-loss", "eval")  # no evaluation set: no evaluation series in the legend
    log = page.locator("#zb-log textarea").input_value()
    assert "[rank0]:" in log and "[rank1]:" in log

    # the plan next to what each rank measured, then the output check of the finished run
    page.wait_for_selector("#zb-mem-vs-plan table")
    assert page.locator("#zb-mem-vs-plan tbody tr").count() == 2
    page.locator("#zb-output-check").wait_for(state="visible")
    assert "LoRA adapter" in page.locator("#zb-saved textarea").input_value()
    assert page.locator("#zb-merge-btn").is_visible() and not page.locator("#zb-consolidate-btn").is_visible()
    page.locator("#zb-reload-btn").click()
    page.wait_for_selector("#zb-answers table", timeout=RELOAD_S * 1000)
    answers = page.locator("#zb-answers table")
    assert "Who are you?" in answers.inner_text() and "Base answer" in answers.inner_text()
    assert answers.locator("tbody tr").count() == 4  # the demo prompts
    assert "Reloaded LoRA adapter" in page.locator("#zb-output-message").inner_text()


def test_bad_fields_are_marked_in_place_and_chinese_labels_switch_in(server, page, workdir):
    open_page(page, server)
    page.wait_for_selector("body[data-zb-loaded='1']", state="attached")  # the form shows the last run's job
    choose(page, "deepspeed_stage", "none")
    fill(page, "learning_rate", 7)
    page.locator("#zb-offload input[type=checkbox]").check()  # offload without a DeepSpeed stage
    page.locator("#zb-preview").click()
    page.wait_for_selector("#zb-learning_rate.zb-invalid")
    assert "out of range" in page.locator("#zb-learning_rate").inner_text()
    assert "needs DeepSpeed stage 2 or 3" in page.locator("#zb-offload").inner_text()
    assert "Nothing was started" in page.locator("#zb-message").inner_text()
    assert page.locator("#zb-command pre").count() == 0  # no command for a job with errors

    page.locator("#zb-lang label", has_text="中文").click()
    page.wait_for_selector("#zb-preview:text('预览命令')")
    for label in ("设备数量", "DeepSpeed stage", "使用 offload", "开始"):
        assert page.get_by_text(label, exact=True).first.is_visible(), label
    page.wait_for_selector("#zb-plan :text('内存估算')")  # the memory plan follows the language too (CPU: 内存)
    assert "Memory plan" not in page.locator("#zb-plan").inner_text()


def test_abort_stops_the_job_and_no_process_remains(standin_server, page, workdir):
    """... and the page asks for news twice a second only while a run is live: every 2 s before and after."""
    open_page(page, standin_server)
    page.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    idle = live_ticks(page, 6)
    run_dir = start_job(page, workdir / "abort", max_steps=5000)
    wait_until(lambda: step(page) > 0, RUN_S, "the first step on the page")
    live = live_ticks(page, 6)
    page.locator("#zb-abort").click()
    page.wait_for_selector("#zb-message :text('Stopping')")
    wait_until(lambda: status(page) == "aborted", 120, "the aborted status")
    final = page.locator("#zb-final").inner_text()
    assert "verified: no process of the job is left" in final
    assert_no_process_left(run_dir)
    page.wait_for_timeout(2500)  # the tick that saw the end sets the slow pace
    after = live_ticks(page, 6)
    assert 1 <= idle <= 5 and 1 <= after <= 5 and live >= 7, (idle, live, after)  # 3, 12, 3 at the set paces


def test_a_restarted_ui_server_reattaches_to_the_running_job(page, workdir):
    port = command.free_port()
    index, log = workdir / "reattach-runs.json", workdir / "reattach-server.log"
    first = start_server(port, index, log, env=standin_env(step_s=0.1))  # the job runs the stand-in trainer
    url = f"http://127.0.0.1:{port}/"
    second = None
    try:
        open_page(page, url)
        run_dir = start_job(page, workdir / "reattach", max_steps=5000)
        wait_until(lambda: step(page) > 0, RUN_S, "the first step on the page")
        stop_server(first, signal.SIGKILL)  # the UI dies; the job must not
        assert recorded_state(run_dir).status == "running"

        second = start_server(port, index, log, env=standin_env(step_s=0.1))
        reload_page(page)
        wait_until(lambda: status(page) == "running", 30, "the reattached running status")
        assert run_dir in page.locator("#zb-status").inner_text()
        before = wait_until(lambda: step(page), 60, "progress after the restart")
        wait_until(lambda: step(page) > before, 120, "live progress after the restart")
        lines = page.locator("#zb-log textarea").input_value()
        assert re.search(r"\[rank0\]:.*step \d+/5000", lines)

        page.locator("#zb-abort").click()
        wait_until(lambda: status(page) == "aborted", 120, "the aborted status")
        assert_no_process_left(run_dir)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop_server(proc)
