"""The Chat page in headless Chromium, on the tuned demo: streamed answers, base and tuned side by side, unload.

The demo's identity set is trained from the command line into the server's runs index (the Train page's own flow
has its browser test); the base's answer is asked with ``zeroboard chat --base``.  Then, on the page: Load, ask,
see the answer arrive in several updates, ask again side by side (the base's answer on the left, the tuned identity
on the right); reload the page: the Chat tab still shows the worker (found in the runs index, not the tab's
session) and answers through it, Start on the Train page is refused naming it and offers "Unload and start", which unloads it and starts
the job (on the stand-in trainer: the server's jobs are not the subject); the memory of the web server and
everything it started is back where it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import standin_env, start_server, stop_jobs, stop_server, wait_until
from test_browser import UI_S, demo_form, fill, reload_page, status
from zeroboard.data import demo as demo_data
from zeroboard.job import command
from zeroboard.outputs.chat_client import rss_tree
from zeroboard.runs.manager import JobManager

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

Q = "Who are you?"
LOAD_S = 300  # starting a worker and loading the demo: seconds alone, minutes on a busy 2-core machine
MiB = 1 << 20


def cli(index: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeroboard.cli", *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "ZEROBOARD_RUNS_INDEX": str(index)})


def last_bot(page, chat: str) -> str:
    rows = page.locator(f"#{chat} .bot-row")
    return rows.last.inner_text().strip() if rows.count() else ""


def test_chat_on_the_tuned_demo_streams_compares_with_the_base_and_unloads(tmp_path, bank, browser):
    index = tmp_path / "runs.json"
    run = bank.listed_in("lora_identity", index)  # the session's identity run, the only one this server lists
    asked = cli(index, "chat", str(run), "--base", "--cpu", "--prompt", Q, "--max-new-tokens", "128", "--json")
    assert asked.returncode == 0, asked.stderr[-3000:]
    base_answer = json.loads(asked.stdout.strip().splitlines()[-1])["text"].strip()
    assert base_answer and base_answer != demo_data.IDENTITY_ANSWER_EN

    port = command.free_port()
    server = start_server(port, index, tmp_path / "server.log", env=standin_env(step_s=0.1))
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.set_default_timeout(UI_S)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("#zb-start")
        page.get_by_role("tab", name="Chat").click()
        page.wait_for_function(f"() => document.querySelector('#zb-chat-target input')?.value === {json.dumps(str(run))}")
        page.wait_for_selector("#zb-chat-about :text('LoRA adapter')")
        before = rss_tree(server.pid)

        page.locator("#zb-chat-load").click()
        page.wait_for_selector("#zb-chat-status :text('loaded on CPU')", timeout=LOAD_S * 1000)
        assert "held" in page.locator("#zb-chat-status").inner_text()

        # one question: the answer arrives in more than one update
        page.evaluate("""() => {
            window.zbSeen = new Set();
            const box = document.querySelector('#zb-chat-tuned');
            new MutationObserver(() => {
                const rows = box.querySelectorAll('.bot-row');
                if (rows.length) window.zbSeen.add(rows[rows.length - 1].innerText.trim());
            }).observe(box, {subtree: true, childList: true, characterData: true});
        }""")
        page.locator("#zb-chat-question textarea").fill(Q)
        page.locator("#zb-chat-send").click()
        wait_until(lambda: last_bot(page, "zb-chat-tuned") == demo_data.IDENTITY_ANSWER_EN, 120, "the tuned answer")
        seen = [s for s in page.evaluate("() => [...window.zbSeen]") if s]
        assert len(seen) > 1, f"the answer arrived in one piece: {seen}"
        assert all(demo_data.IDENTITY_ANSWER_EN.startswith(s) for s in seen), seen  # growing, token by token

        # side by side: the same question, the base on the left, the tuned model on the right
        page.locator("#zb-chat-clear").click()
        page.locator("#zb-chat-side-by-side input[type=checkbox]").check()
        page.locator("#zb-chat-base").wait_for(state="visible")
        page.locator("#zb-chat-question textarea").fill(Q)
        page.locator("#zb-chat-send").click()
        wait_until(lambda: last_bot(page, "zb-chat-tuned") == demo_data.IDENTITY_ANSWER_EN, 120, "the tuned answer")
        assert last_bot(page, "zb-chat-base") == base_answer
        left = page.locator("#zb-chat-base").bounding_box()
        right = page.locator("#zb-chat-tuned").bounding_box()
        assert left["x"] < right["x"]
        assert "first after" in page.locator("#zb-chat-figures").inner_text()

        # a reloaded page: its session knows nothing of the worker; the Chat tab finds it on the CPU in the runs index
        reload_page(page)
        page.get_by_role("tab", name="Chat").click()
        page.wait_for_selector("#zb-chat-status :text('loaded on CPU')")
        assert "unloads itself 15 min after its last answer" in page.locator("#zb-chat-status").inner_text()
        # ... and talks to it: the worker the status line names is the one Send asks
        page.locator("#zb-chat-question textarea").fill(Q)
        page.locator("#zb-chat-send").click()
        wait_until(lambda: last_bot(page, "zb-chat-tuned") == demo_data.IDENTITY_ANSWER_EN, 120,
                   "the tuned answer on the reloaded page")

        # the Train page: Start is refused naming the worker, and offers to unload it instead
        page.get_by_role("tab", name="Train").click()
        demo_form(page)
        fill(page, "output_dir", tmp_path / "after-chat")
        fill(page, "max_steps", 5)
        page.locator("#zb-start").click()
        page.wait_for_selector("#zb-unload-start", state="visible")
        refused = page.locator("#zb-message").inner_text()
        assert "The chat worker (" in refused and "holds CPU processes" in refused and "Unload and start" in refused, refused
        page.locator("#zb-unload-start").click()
        page.wait_for_selector("#zb-message :text('Started')", timeout=120_000)
        said = page.locator("#zb-message").inner_text()
        assert said.startswith("Unloaded: the worker") and "(verified)" in said, said
        page.wait_for_selector("#zb-unload-start", state="hidden")
        assert JobManager(index=index).workers() == []
        wait_until(lambda: status(page) == "finished", 120, "the started job to finish")

        def back() -> int | None:
            now = rss_tree(server.pid)
            return now if abs(now - before) < 50 * MiB else None

        after = wait_until(back, 30, "the memory to come back within 50 MiB")
        print(f"RSS of the web server and its children: {before / MiB:.0f} MiB before Load, "
              f"{after / MiB:.0f} MiB after Unload")
        page.close()
    finally:
        stop_server(server)
        stop_jobs(index)
