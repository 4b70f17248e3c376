"""The course chapter, walked in the Chinese page as a student would, in headless Chromium.

设备数量 / DeepSpeed stage / 使用 offload at the bottom, 预览命令 with cache/ds_z2_offload_config.json, the JSON,
开始, the processes per device, a reload during the run (the page shows the run's own settings), the output
kind, reload and answer, 中断.  At every step the page must hold no English sentence (nor a stray English word)
outside commands, logs, paths, code and the demo's own data.  The language is picked from the URL and from the
browser, and kept across reloads and new tabs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import RETITLE_S, held, left_after, wait_until
from test_browser import RELOAD_S, RUN_S, UI_S, choose, demo_form, fill, status, step

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[1]
HOLD_S = 3600  # the first run's stall_min_s: longer than it is held while its running page is read

VISIBLE_TEXT = """() => {
  const skip = 'pre, code, textarea, input, script, style, svg title, .cm-editor, #zb-log, #zb-command, #zb-ds-json,'
    + ' #zb-answers td, #zb-data-preview blockquote, #zb-run, [aria-hidden="true"]';
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const n = walker.currentNode, t = n.textContent.trim(), el = n.parentElement;
    if (!t || !el || el.closest(skip)) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    let shown = true;
    for (let a = el; a; a = a.parentElement) {
      const st = getComputedStyle(a);
      // opacity 0: gradio keeps the status text of an event with show_progress="hidden" there, never seen
      if (st.display === 'none' || st.visibility === 'hidden' || st.opacity === '0') { shown = false; break; }
    }
    if (shown) out.push([t, (el.closest('[id]') || {}).id || '']);
  }
  return out;
}"""
# terms a Chinese page keeps in English: product and library names, units, field names and values a user types
TERMS = {"zeroboard", "deepspeed", "stage", "offload", "lora", "zero", "gpu", "gpus", "cpu", "rss", "ram", "nvml",
         "json", "yaml", "token", "tokens", "torch", "torchrun", "python", "adamw", "adam", "hub", "id", "config",
         "micro", "batch", "loss", "logits", "fp32", "fp16", "bf16", "autocast", "gib", "mib", "kib", "llama", "auto",
         "none", "full", "pid", "rank", "sigterm", "sigkill", "english", "dataset", "info", "jsonl", "cutoff", "len",
         "max", "steps", "output", "dir", "all", "sdpa", "eager", "flash", "attention", "liger", "triton", "rmsnorm",
         "swiglu", "rope", "nccl", "cuda", "ssh", "nvidia", "smi", "train", "training", "zeroboard_result",
         "lora_adapter", "adapter", "safetensors", "ddp", "transformers", "peft", "mb", "gb", "peak", "ok",
         "state", "events", "launcher", "log", "checkpoint", "global", "step", "latest", "from_pretrained", "hf",
         # DeepSpeed's and the math's terms, and the template names a user picks
         "reduce", "bucket", "tensorboard", "wandb", "mlflow", "swanlab", "tb", "mlruns", "swanlog", "factory",
         "proportional", "end", "ollama", "modelfile", "softmax", "plain", "chatml", "mistral", "gemma", "qwen", "phi", "alpaca", "eval",
         # data formats and the values of the data fields (LLaMA-Factory's names: the template default, concat)
         "csv", "parquet", "concat", "default", "vicuna", "llamafactory",
         # the preference methods and the libraries behind them, named as their papers and packages name them
         "sft", "dpo", "kto", "orpo", "simpo", "qlora", "trl", "bitsandbytes",
         # the dataset_info.json key that marks a preference (chosen / rejected) dataset
         "ranking"}
WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9_]*(?![A-Za-z0-9_])")  # whole ASCII words, CJK around or not
SENTENCE = re.compile(r"[A-Za-z][a-z']+(?:[ ,;:]+[A-Za-z][a-z']+){2,}")


def english_left(pg) -> list[str]:
    """English sentences, and English words that are no term, in the visible text (not commands, logs, paths, code)."""
    found = []
    for text, where in pg.evaluate(VISIBLE_TEXT):
        if re.search(r"[/\\.]\w+[/\\.]", text):  # a path or a file name: left as it is
            text = re.sub(r"\S*[/\\.]\S*", " ", text)
        # a word with a digit or an underscore is a value or a field name (bf16, r16, max_steps), not English
        words = [w for w in WORD.findall(text) if len(w) > 1 and w.lower() not in TERMS and not re.search(r"[\d_]", w)]
        if SENTENCE.search(text) or words:
            found.append(f"{text} (#{where})")
    return sorted(set(found))


def assert_chinese(pg, where: str) -> None:
    # the labels switch once the page knows its language; the live panels at their next tick (within 2 s)
    pg.wait_for_selector("body[data-zb-lang='zh']", state="attached")
    # the labels are said again by one event after the language is known: one of them in Chinese means all are
    pg.wait_for_selector("#zb-start:text-is('开始')", timeout=60_000)
    pg.wait_for_function("() => document.querySelector('#zb-host').innerText.includes('主机内存')")
    left = left_after(lambda: english_left(pg))  # the charts draw their new titles a few ticks later
    assert not left, f"English on the Chinese page ({where}), {RETITLE_S} s after its labels switched: {left}"


@pytest.fixture()
def server(webui):
    """The session's web UI (conftest.py): (its URL, its folder)."""
    return webui


def opened(context, url: str):
    pg = context.new_page()
    pg.set_default_timeout(UI_S)
    pg.goto(url)
    # the page's load chain, on a machine training beside the browser: once over a minute in a full run
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached", timeout=2 * UI_S)
    return pg


def lang_of(pg) -> str:
    return "zh" if pg.locator("#zb-preview").inner_text().strip() == "预览命令" else "en"


def test_the_language_comes_from_the_url_or_the_browser_and_survives_a_reload(browser, server):
    url, _ = server
    english = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    chinese = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="zh-CN")
    try:
        # each page is closed once read: an open page keeps asking the server for news
        pg = opened(english, url)
        assert lang_of(pg) == "en"  # an English browser, nothing asked for
        pg.close()
        pg = opened(english, url + "?lang=zh")
        pg.wait_for_selector("#zb-preview:text-is('预览命令')")
        pg.reload()
        pg.wait_for_selector("#zb-preview:text-is('预览命令')")  # the choice survives a reload ...
        pg.close()
        other = opened(english, url)
        other.wait_for_selector("#zb-preview:text-is('预览命令')")  # ... and a new tab
        other.locator("#zb-lang label", has_text="English").click()
        # every label is said again by one event: on a busy machine it can wait behind the other tabs' ticks
        other.wait_for_selector("#zb-preview:text-is('Preview command')", timeout=60_000)
        other.close()
        assert lang_of(opened(english, url)) == "en"  # a choice made on the page is kept too
        zh = opened(chinese, url)
        zh.wait_for_selector("#zb-preview:text-is('预览命令')")  # a Chinese browser gets the Chinese page
    finally:
        english.close()
        chinese.close()


def test_the_chapter_in_chinese(browser, server):
    url, work = server
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="zh-CN")
    pg = opened(context, url + "?lang=zh")
    demo_form(pg)
    pg.wait_for_selector("#zb-preview:text-is('预览命令')")
    pg.wait_for_selector("#zb-plan :text('内存估算')")  # CPU processes: the host's memory
    for word in ("设备数量", "DeepSpeed stage", "使用 offload", "预览命令", "开始", "中断"):
        assert pg.get_by_text(word, exact=True).first.is_visible(), word
    assert_chinese(pg, "the form")

    # Stage 2 + offload, then 预览命令: the command names cache/ds_z2_offload_config.json
    choose(pg, "deepspeed_stage", "2")
    pg.locator("#zb-offload input[type=checkbox]").check()
    pg.locator("#zb-preview").click()
    assert pg.locator("#zb-command mark.zb-ds >> nth=0").inner_text() == "cache/ds_z2_offload_config.json"
    assert pg.locator("#zb-command pre.zb-cmd >> nth=0").inner_text().startswith("# 在工作区目录中运行")  # where it runs, in Chinese too
    pg.wait_for_function("() => document.querySelector('#zb-ds-json').innerText.includes('offload_optimizer')")
    assert_chinese(pg, "the preview")

    # a field error in Chinese, gone as soon as it is fixed
    fill(pg, "learning_rate", 7)
    pg.locator("#zb-preview").click()
    pg.wait_for_selector("#zb-learning_rate.zb-invalid")
    assert "超出范围" in pg.locator("#zb-learning_rate").inner_text()
    assert_chinese(pg, "a field error")
    fill(pg, "learning_rate", 0.005)
    pg.locator("#zb-learning_rate input").blur()
    pg.wait_for_selector("#zb-learning_rate.zb-invalid", state="detached")

    # 开始
    fill(pg, "output_dir", work / "chapter")
    fill(pg, "max_steps", 40)
    fill(pg, "stall_min_s", HOLD_S)  # held while the running page is read: not a stall
    pg.locator("#zb-start").click()
    pg.wait_for_selector("#zb-message :text('已启动')", timeout=90_000)
    wait_until(lambda: step(pg) > 0, RUN_S, "the first step on the page")
    assert status(pg) == "running", status(pg)
    with held(work / "chapter"):  # a short run, still running however long the reading takes
        # the process table: one row per rank (and its device), under the header
        pg.wait_for_function("() => Number(document.querySelector('#zb-procs [role=grid]').getAttribute('aria-rowcount')) >= 3")
        assert_chinese(pg, "the running job")

    wait_until(lambda: status(pg) in ("finished", "failed"), RUN_S, "the run to end")
    assert status(pg) == "finished", pg.locator("#zb-final").inner_text()
    wait_until(lambda: not pg.locator("#zb-offload input[type=checkbox]").is_disabled(), 30, "the form to be editable")
    out_box = pg.locator("#zb-output_dir input, #zb-output_dir textarea").first
    assert out_box.input_value() != str(work / "chapter")  # the folder suggestion moved on
    pg.locator("#zb-output-check").wait_for(state="visible")
    assert "LoRA 适配器" in pg.locator("#zb-saved textarea").input_value()
    pg.locator("#zb-reload-btn").click()
    pg.wait_for_selector("#zb-answers table", timeout=RELOAD_S * 1000)
    assert "已在独立进程中" in pg.locator("#zb-output-message").inner_text()
    assert_chinese(pg, "the output check")

    # a second run, long enough to outlast a reload: a reload during the run shows the run's own settings,
    # read-only, with its command and JSON; then 中断, the stop, step by step, in Chinese
    fill(pg, "output_dir", work / "chapter-abort")
    fill(pg, "max_steps", 5000)
    choose(pg, "deepspeed_stage", "2")
    pg.locator("#zb-offload input[type=checkbox]").check()
    pg.locator("#zb-start").click()
    pg.wait_for_selector("#zb-message :text('已启动')", timeout=90_000)
    wait_until(lambda: "chapter-abort" in pg.locator("#zb-status").inner_text() and step(pg) > 0, RUN_S,
               "the first step of the second run")
    pg.reload()
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    pg.wait_for_selector("#zb-new-job", state="visible")
    assert pg.locator("#zb-deepspeed_stage input").input_value() == "2"
    assert pg.locator("#zb-offload input[type=checkbox]").is_checked()
    assert pg.locator("#zb-offload input[type=checkbox]").is_disabled()
    assert "ds_z2_offload_config.json" in pg.locator("#zb-command").inner_text()
    assert pg.locator("#zb-command pre.zb-cmd >> nth=0").inner_text().startswith("# 在工作区目录中运行")
    assert "offload_optimizer" in pg.locator("#zb-ds-json").inner_text()
    assert_chinese(pg, "a reload during the run")

    assert "chapter-abort" in pg.locator("#zb-status").inner_text() and status(pg) == "running"
    pg.locator("#zb-abort").click()
    pg.wait_for_selector("#zb-message :text('正在停止')")
    wait_until(lambda: status(pg) == "aborted", 120, "the aborted status")
    assert "已确认" in pg.locator("#zb-final").inner_text()
    assert "Traceback" not in pg.locator("#zb-log textarea").input_value()  # torchrun's report of the stop is one line
    assert_chinese(pg, "after 中断")
    context.close()
