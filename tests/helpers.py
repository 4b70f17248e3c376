"""Helpers for the tests (and the screenshot tool): a real `zeroboard webui` server, waiting on conditions, stopping jobs.

Waits poll a condition with a short sleep and a deadline; where something can
be waited on directly (a process, a page element) the tests do that instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from zeroboard.runs.manager import JobManager
from zeroboard.runs.state import JobState, write_state

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("ZEROBOARD_CHROMIUM", "/usr/bin/chromium")


@contextlib.contextmanager
def chromium():
    """Headless Chromium from the system (`make test` installs it; playwright cannot download browsers here).

    No skip: the browser tests are part of the suite."""
    from playwright import sync_api

    assert Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}: run `make chromium` or set ZEROBOARD_CHROMIUM"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield browser
        finally:
            browser.close()


def wait_until(fn, timeout: float, what: str, every: float = 0.25):
    """The first truthy value of ``fn()``; TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.time() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def start_server(port: int, index: Path, log: Path, cwd: Path = REPO, env: dict | None = None,
                 args: list[str] | None = None) -> subprocess.Popen:
    """``zeroboard webui`` as a user starts it, on ``port``, with its own runs index; returns once it answers."""
    env = {"ZEROBOARD_RUNS_INDEX": str(index), "ZEROBOARD_LANG": "en", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "zeroboard.cli", "webui", "--port", str(port), *(args or [])],
                            cwd=cwd, env={**os.environ, **env}, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)

    def up():
        if proc.poll() is not None:
            raise RuntimeError(f"the web UI exited:\n{log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
            return True
        return False

    try:
        wait_until(up, 180, "the web UI to answer", every=0.3)
    except TimeoutError:
        stop_server(proc)
        raise
    return proc


def stop_server(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def stop_jobs(index: Path) -> None:
    """Teardown: a run still going (a failed test, Ctrl-C) is aborted, not left on the shared machine."""
    if not Path(index).is_file():
        return
    mgr = JobManager(index=index, grace_s=10)
    for st in mgr.active():
        mgr.abort(st.run_dir)
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: not mgr.active(), 60, "the jobs to stop", every=0.5)


def register(manager: JobManager, st: JobState) -> JobState:
    """Put a run in the manager's index, as Start does: only registered runs are shown or signalled."""
    write_state(st)
    with manager.registry.locked():
        manager.registry.add({"run_dir": st.run_dir, "source": "page", "device_kind": st.device_kind,
                              "devices": st.devices})
    return st


# Liger's layout as its monkey_patch.py has it (liger-kernel 0.8.5): the table and, per model type, the kernel
# parameters with their defaults; Granite's fused loss raises. Only the signature facts, for CPU machines without
# Liger; tests/test_liger_coverage.py checks the reader against the installed Liger where there is one.
LIGER_LAYOUT = '''
def apply_liger_kernel_to_llama(rope: bool = True, cross_entropy: bool = False, fused_linear_cross_entropy: bool = True,
                                rms_norm: bool = True, swiglu: bool = True, model=None) -> None:
    pass


def apply_liger_kernel_to_gemma(rope: bool = True, cross_entropy: bool = False, fused_linear_cross_entropy: bool = True,
                                rms_norm: bool = True, geglu: bool = True, model=None) -> None:
    pass


def apply_liger_kernel_to_granite(rope: bool = True, cross_entropy: bool = True, fused_linear_cross_entropy: bool = False,
                                  rms_norm: bool = True, swiglu: bool = True, model=None) -> None:
    if fused_linear_cross_entropy:
        raise NotImplementedError("LigerFusedLinearCrossEntropy is not available for Granite models.")


MODEL_TYPE_TO_APPLY_LIGER_FN = {
    "llama": apply_liger_kernel_to_llama, "mistral": apply_liger_kernel_to_llama, "qwen2": apply_liger_kernel_to_llama,
    "qwen3": apply_liger_kernel_to_llama, "smollm3": apply_liger_kernel_to_llama, "phi3": apply_liger_kernel_to_llama,
    "ministral": apply_liger_kernel_to_llama, "gemma": apply_liger_kernel_to_gemma,
    "gemma2": apply_liger_kernel_to_gemma, "gemma3_text": apply_liger_kernel_to_gemma,
    "granite": apply_liger_kernel_to_granite,
}
'''


def liger_installed(monkeypatch, installed: bool = True) -> None:
    """As on a GPU machine with (or without) liger-kernel: the planner, checks and trainer read LIGER_LAYOUT."""
    from zeroboard.job import liger

    monkeypatch.setattr(liger, "source_text", lambda: (LIGER_LAYOUT, "tests") if installed else None)
