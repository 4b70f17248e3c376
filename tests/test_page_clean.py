"""Every page as a printout shows it (issue 33), in headless Chromium on the session's web UI: in both languages no
path of this machine (the checkout, its environment, the home folder, the temporary folder) and, on the Chinese
page, no English word but a few product and course names -- from the first paint on; the command box breaks its
lines between arguments, never inside one, and pastes back as the command; the layout at the widths the
screenshots use (tools/screenshots.py): the memory plan whole, the queue's reasons whole, each form row's inputs on
one line, no button on two lines, the status strip over nothing in a full-page capture.

The pages show a run of the workspace (``runs/...``, as ``make run`` leaves one) and a queue entry; runs other tests
keep in the session's temporary folder (``--allow-path``, outside the workspace) are named as they are, which is
the one place a full path is the truth.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from helpers import synthetic_run
from test_browser import UI_S, demo_form
from test_chapter_zh import TERMS, WORD, english_left
from test_runs_page import select_only, tooltips_left
from zeroboard import workspace
from zeroboard.job import record
from zeroboard.job.registry import Registry
from zeroboard.runs.queue import Queue
from zeroboard.words import say

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[1]
WIDTHS = (1440, 1024)  # the screenshots' width (tools/screenshots.py VIEWPORT), and a narrow window
SHOT_WIDTH = 1440
# what a Chinese page may say in English: the product and the tools it drives, the course's own terms
# (DeepSpeed stage, 使用 offload), units and formats
ALLOWED = {"zeroboard", "deepspeed", "zero", "lora", "torchrun", "python", "cpu", "gpu", "gpus", "cuda", "nvml", "rss",
           "stage", "offload", "adam", "adamw", "json", "yaml", "gib", "mib", "pid", "rank", "token", "tokens",
           "llama", "fp32", "bf16", "fp16", "none", "auto", "full", "peft", "transformers", "slurm", "ollama", "english",
           "csv", "parquet", "arrow", "sft", "dpo", "kto", "orpo", "simpo", "qlora", "trl", "bitsandbytes", "ranking"}


def machine_paths() -> list[str]:
    """The folders of this machine a page must not name: the checkout (the workspace) as written and as resolved,
    its environment, the home folder, the temporary folder, and the checkout's top folder."""
    found = {str(REPO), os.path.realpath(REPO), sys.prefix, os.path.realpath(sys.prefix), str(Path(sys.executable).parent),
             str(Path.home()), tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir()), "/" + REPO.parts[1]}
    return sorted((p.rstrip("/") for p in found if p not in ("/", "")), key=len, reverse=True)


# the text a reader sees, and what the page says in the attributes a reader meets: a title, a screen reader's label, the
# value of an input
SHOWN = """() => {
  const out = [];
  // drawn, not folded away (a closed <details>), not hidden from a screen reader
  const seen = e => e.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true})
    && e.getClientRects().length > 0 && !e.closest('[aria-hidden="true"]');
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const n = walker.currentNode, el = n.parentElement;
    if (n.textContent.trim() && el && seen(el)) out.push([n.textContent, (el.closest('[id]') || {}).id || '']);
  }
  for (const e of document.querySelectorAll('[title], [aria-label], input, textarea')) {
    if (!seen(e)) continue;
    for (const v of [e.getAttribute('title'), e.getAttribute('aria-label'), e.value]) {
      if (v) out.push([v, (e.closest('[id]') || {}).id || '']);
    }
  }
  return out;
}"""


def paths_left(pg, outside: list[str]) -> list[str]:
    """The machine's folders named on the page; ``outside``: run folders the user keeps outside the workspace
    (named as they are)."""
    found = []
    for text, where in pg.evaluate(SHOWN):
        for run in outside:
            text = text.replace(run, "")
        hits = [p for p in machine_paths() if re.search(re.escape(p) + r"(?![\w.-])", text)]
        if hits:
            found.append(f"{text.strip()[:200]!r} (#{where}: {hits[0]})")
    return sorted(set(found))


def english_beyond(pg) -> list[str]:
    """English words on the Chinese page beyond ALLOWED (english_left's rules for paths, values and field names)."""
    left = []
    for line in english_left(pg) + tooltips_left(pg):
        text = line.rsplit(" (#", 1)[0]
        text = re.sub(r"\S*[/\\.]\S*", " ", text)
        if [w for w in WORD.findall(text) if len(w) > 1 and w.lower() not in ALLOWED and not re.search(r"[\d_]", w)]:
            left.append(line)
    return left


@pytest.fixture()
def workspace_run(webui):
    """A finished run inside the workspace (``runs/…`` of the checkout, as ``make run`` leaves one), with a result the
    Chat tab offers, registered with the session's web UI; gone again after the test."""
    url, work = webui
    folder = REPO / "runs" / f"zb_clean_{uuid.uuid4().hex[:8]}"  # a value, not English (an underscore)
    folder.parent.mkdir(exist_ok=True)
    try:
        synthetic_run(folder, work / "runs.json", deepspeed_stage="2")
        (folder / record.RESULT_FILE).write_text(json.dumps({"kind": "lora_adapter", "base_model": "cache/demo/model",
                                                               "precision": "fp32", "template": "auto"}))
        yield folder
    finally:
        Registry(work / "runs.json").remove(str(folder.resolve()))
        shutil.rmtree(folder, ignore_errors=True)


def opened(browser, url: str, lang: str, width: int = SHOT_WIDTH, init: str | None = None):
    context = browser.new_context(viewport={"width": width, "height": 1000}, locale="en-US")
    if init:
        context.add_init_script(init)
    pg = context.new_page()
    pg.set_default_timeout(UI_S * 3)
    pg.goto(f"{url}?lang={lang}")
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    pg.wait_for_selector(f"body[data-zb-lang='{lang}']", state="attached")
    return pg


def previewed(pg) -> None:
    """The demo job (Load arguments), then Preview command: the command box filled."""
    demo_form(pg)
    pg.locator("#zb-preview").click()
    try:
        pg.wait_for_selector("#zb-command pre.zb-cmd .zb-arg", state="attached", timeout=60_000)
    except Exception as e:
        raise AssertionError(f"no command after Preview: {pg.locator('#zb-message').inner_text()}") from e


def outside_runs(index: Path) -> list[str]:
    """The registered run folders outside the workspace (other tests' runs in the session's temporary folder)."""
    ws = workspace.Workspace(REPO.resolve())
    return sorted((r for r in Registry(index).run_dirs("train") + Registry(index).run_dirs("chat")
                   if workspace.shown(r, ws).startswith("/")), key=len, reverse=True)


def test_every_page_in_both_languages_names_no_path_of_this_machine(browser, webui, workspace_run):
    url, work = webui
    index = work / "runs.json"
    run = workspace_run.relative_to(REPO).as_posix()
    waiting = Queue(index).add({"output_dir": str(REPO / "runs" / "zb_clean_next"), "max_steps": 2}, str(REPO), "page",
                               "cpu", [0, 1], str(REPO / "runs" / "zb_clean_next"), why=say("queue.next"))
    Queue(index).update(waiting.id, status="failed", why=say("run.busy_folder", run=run, status=say("status.running"),
                                                             source=say("source.page"), pid=1))
    try:
        for lang in ("en", "zh"):
            pg = opened(browser, url, lang)
            problems = look_through(pg, lang, index, run, workspace_run.name)
            pg.context.close()
            assert not problems, "\n".join(problems)
    finally:
        Queue(index).remove(waiting.id)


def look_through(pg, lang: str, index: Path, run: str, name: str) -> list[str]:
    """Every tab, the Train tab after Preview, a run opened in the Runs tab, the queue's reasons, the run picked in the
    Chat tab: what each shows that it should not."""
    problems: list[str] = []

    def look(where: str) -> None:
        problems.extend(f"{lang}, {where}: {p}" for p in paths_left(pg, outside_runs(index)))
        if lang == "zh":
            problems.extend(f"{lang}, {where}: English {e}" for e in english_beyond(pg))
            problems.extend(f"{lang}, {where}: 。。 in {t[:80]!r}" for t, _ in pg.evaluate(SHOWN) if "。。" in t)

    previewed(pg)
    assert "torchrun" in pg.locator("#zb-command pre").first.inner_text()
    look("the Train tab after Preview")
    pg.locator("#zb-tab-runs-button").click()
    pg.wait_for_selector("#zb-runs-table .virtual-row")
    names = pg.evaluate("""() => [...document.querySelectorAll('#zb-runs-table .virtual-row')]
                           .map(r => r.querySelector('[role=gridcell]')?.innerText.trim())""")
    assert run in names, names  # the run's folder as the workspace names it
    select_only(pg, name)
    pg.locator("#zb-runs-open").click()
    pg.wait_for_selector("#zb-runs-detail h3")
    look("the Runs tab, a run opened")
    pg.locator("#zb-tab-queue-button").click()
    pg.wait_for_selector("#zb-queue-table .virtual-row")
    assert run in pg.locator("#zb-queue-table").inner_text()  # the reason names the run as the workspace does
    look("the Queue tab")
    pg.locator("#zb-tab-chat-button").click()
    box = pg.locator("#zb-chat-target input")
    box.fill(run)
    box.press("Enter")
    pg.wait_for_function("(run) => document.querySelector('#zb-chat-about').innerText.includes(run)", arg=run)
    look("the Chat tab, the run picked")
    return problems


# --- the command box ------------------------------------------------------------------------------------------

# each word of the command box: the lines (rect tops) it is drawn on
WORD_LINES = """() => [...document.querySelectorAll('#zb-command pre.zb-cmd')].filter(p => p.getClientRects().length)
  .flatMap(p => [...p.querySelectorAll('.zb-arg')]).map(s => [s.innerText, [...s.getClientRects()].length])"""


def bash_words(text: str) -> list[str]:
    """The words bash reads from a shown command (its comment lines left out, continuations joined)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return shlex.split("\n".join(lines).replace("\\\n", " "))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_command_box_breaks_only_between_arguments_and_pastes_back(browser, webui, lang):
    url, _ = webui
    for width in WIDTHS:
        pg = opened(browser, url, lang, width)
        previewed(pg)
        words = pg.evaluate(WORD_LINES)
        assert words and all(n == 1 for _, n in words), [w for w, n in words if n != 1]  # no word drawn on two lines
        shown = pg.locator("#zb-command pre.zb-cmd").first.inner_text()
        assert "--learning_rate 0.005 \\" in shown  # a flag and its value, one line
        pg.locator("#zb-command details.zb-full summary").click()  # the absolute form, one click away
        full = pg.locator("#zb-command details.zb-full pre").inner_text()
        pg.context.close()
        short, whole = bash_words(shown), bash_words(full)
        assert len(short) == len(whole)
        for a, b in zip(short, whole):  # the same command; the workspace's paths relative to it
            assert a == b or (b.startswith("/") and a == workspace.shown(b, workspace.Workspace(REPO.resolve()))), (a, b)
        assert subprocess.run(["bash", "-n"], input=shown, text=True).returncode == 0


# --- the first paint ------------------------------------------------------------------------------------------

# what the page says the moment the form is first drawn (before its load event answers): the title, the buttons, the
# labels above the fold
FIRST_PAINT = """
window.zbFirst = null;
new MutationObserver((_, obs) => {
  const start = document.querySelector('#zb-start');
  if (!start || !start.innerText.trim()) return;
  if (document.body.dataset.zbLoaded) { obs.disconnect(); return; }
  // every word drawn before the page's load came back (the tab bar apart: see the test's docstring)
  const inView = e => e.getBoundingClientRect().height > 0;  // drawn, above the fold or below it
  const words = [...document.querySelectorAll('#zb-title, button:not([role=tab]), label, [data-testid=block-info]')]
    .filter(e => inView(e) && !e.closest('[role=tablist], .tab-wrapper, .tab-container')).map(e => e.innerText.trim()).filter(Boolean);
  const was = window.zbFirst || {words: []};
  window.zbFirst = {words: [...new Set([...was.words, ...words])], loaded: null, lang: document.documentElement.lang};
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def test_the_chinese_page_is_chinese_from_its_first_paint(browser, webui):
    """The title, the labels and the buttons are Chinese as the form is first drawn (gradio's i18n, its
    locale set by the page's head script), before the page's load event comes back.  Gradio draws its tab bar
    before any script of the page runs: the tabs not shown yet are named in the browser's language until the
    language is picked, the page's first, quick call (the tab bar is left out of the words before it, and checked
    after it).  The words are every one drawn in view until the load came back, not one moment's."""
    url, _ = webui
    pg = opened(browser, url, "zh", init=FIRST_PAINT)
    first = pg.evaluate("window.zbFirst")
    assert first and first["loaded"] is None, first  # drawn before the page's load came back
    assert first["lang"] == "zh-CN"  # gradio's own words follow
    text = " ".join(first["words"])
    assert "开始" in text and "预览命令" in text and "用 DeepSpeed ZeRO 微调" in text, text
    left = [w for w in WORD.findall(re.sub(r"\S*[/\\.]\S*", " ", text))
            if len(w) > 1 and w.lower() not in ALLOWED | TERMS and not re.search(r"[\d_]", w)]
    assert not left, (sorted(set(left)), text)
    # the tab bar, once the language picked has relabelled the page (its own call, which may end after the load's)
    tabs = "() => [...document.querySelectorAll('[role=tab]')].map(t => t.innerText.trim())"
    try:
        pg.wait_for_function(f"() => ({tabs})().slice(0, 4).join('|') === '训练|运行记录|队列|对话'", timeout=30_000)
    except Exception:
        raise AssertionError(f"the tabs after the language was picked: {pg.evaluate(tabs)}") from None
    pg.context.close()


# The layout as the screenshots show it (issue 33): each action button's words on one line; the inputs of a row of
# fields on one line, however long the help above each; the memory plan whole, not a box to scroll.
LAYOUT = """() => {
  const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const lines = e => { const g = document.createRange(); g.selectNodeContents(e);
    return new Set([...g.getClientRects()].filter(r => r.width > 1).map(r => Math.round(r.bottom))).size; };
  const wrapped = [...document.querySelectorAll('#zb-preview, #zb-save, #zb-load, #zb-start, #zb-queue, #zb-abort, '
    + '#zb-save-stop, #zb-new-job, #zb-unload-start')].filter(b => shown(b) && lines(b) > 1).map(b => b.innerText);
  const rows = [];
  for (const form of document.querySelectorAll('.form')) {
    const boxes = [...form.children].filter(b => b.matches('.block.padded') && shown(b))
      .map(b => b.querySelector('textarea, input:not([type=checkbox]):not([type=radio]):not([type=range])'))
      .filter(Boolean).map(i => (i.closest('.wrap') && i.closest('.wrap').closest('.block') === i.closest('.block')
                                  ? i.closest('.wrap') : i));
    const bottoms = boxes.map(b => Math.round(b.getBoundingClientRect().bottom));
    const top = Math.round(form.getBoundingClientRect().top);
    if (boxes.length > 1 && Math.max(...bottoms) - Math.min(...bottoms) > 4)
      rows.push([...form.children].map(b => b.id).join(',') + ': ' + bottoms.map(b => b - top).join('/'));
  }
  const plan = document.querySelector('#zb-plan');
  const scrolls = [plan, ...plan.querySelectorAll('*')].filter(e => shown(e) && e.scrollHeight > e.clientHeight + 2
    && ['auto', 'scroll', 'hidden'].includes(getComputedStyle(e).overflowY)).map(e => e.className.toString());
  return {wrapped, rows, scrolls};
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_train_page_keeps_its_buttons_its_rows_and_its_plan_whole_at_the_screenshot_widths(browser, webui, width):
    url, _ = webui
    for lang in ("en", "zh"):
        pg = opened(browser, url, lang, width=width)
        previewed(pg)  # the plan of the demo job, at its longest
        pg.wait_for_selector("#zb-plan table")
        found = pg.evaluate(LAYOUT)
        assert not found["wrapped"], f"{lang}, {width} px: buttons on two lines: {found['wrapped']}"
        assert not found["rows"], f"{lang}, {width} px: a row's inputs at different heights: {found['rows']}"
        assert not found["scrolls"], f"{lang}, {width} px: the memory plan scrolls: {found['scrolls']}"
        pg.context.close()
