"""Helpers for the tests (and the screenshot tool): a real `zeroboard webui` server, waiting on conditions, stopping jobs.

Waits poll a condition with a short sleep and a deadline; where something can
be waited on directly (a process, a page element) the tests do that instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from zeroboard.job import folders, manifest, record
from zeroboard.job.registry import Registry
from zeroboard.runs.manager import JobManager
from zeroboard.runs.state import JobState, write_state

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "tests" / "standin"  # the stand-in trainer's overlay (tests/standin/zeroboard/__init__.py says how)
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
        opened = browser.new_context

        def new_context(*args, **kwargs):  # every page's console errors kept, for a failed test's report
            context = opened(*args, **kwargs)
            context.add_init_script(TOASTS)
            context.on("console", lambda m: (m.type == "error" or m.text.startswith("zb-toast:")) and _heard(f"console: {m.text}"))
            context.on("weberror", lambda e: _heard(f"page error: {e.error}"))
            return context

        browser.new_context = new_context
        try:
            yield browser
        finally:
            browser.close()


BROWSER_ERRORS: list[str] = []  # what the pages of the running test logged as errors (conftest reports them)
SERVER_LOGS: dict[Path, int] = {}  # each web UI server's log, and its size when the running test began

# every toast the page shows, said on its console as it appears (a toast may be gone when a failed test looks)
TOASTS = """new MutationObserver(ms => ms.forEach(m => m.addedNodes.forEach(n => {
  const t = n.nodeType === 1 && (n.matches('.toast-body') ? n : n.querySelector && n.querySelector('.toast-body'));
  if (t) console.warn('zb-toast: ' + t.innerText.replace(/\\s+/g, ' ').slice(0, 400)); })))
  .observe(document, {childList: true, subtree: true});"""


def _heard(line: str) -> None:
    BROWSER_ERRORS.append(f"{time.strftime('%H:%M:%S')} {line[:500]}")
    del BROWSER_ERRORS[:-40]


def standin_env(step_s: float = 0.05, **knobs) -> dict[str, str]:
    """The environment that makes a job's ranks run the stand-in trainer instead of the real one: for the supervision
    tests (the runner, the supervisor, signals, abort, kill, hang, reattach, the queue), whose subject is not the
    training.  Give it to a job this process starts (:func:`on_standin`), to ``zeroboard train`` or to a web UI server
    (the jobs they start inherit it).  ``knobs``: the stand-in's own (``fail="1:3"``, ``save_s=2``)."""
    path = os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "ZB_STANDIN_STEP_S": str(step_s), **{f"ZB_STANDIN_{k.upper()}": str(v) for k, v in knobs.items()}}


def on_standin(prepared, step_s: float = 0.05, **knobs):
    """A prepared job whose ranks run the stand-in trainer (its command's environment says so, in its record too)."""
    prepared.command.env.update(standin_env(step_s, **knobs))
    return prepared


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


@contextlib.contextmanager
def held(run_dir: Path):
    """A running job's ranks stopped (SIGSTOP) while a test or the screenshot tool reads its page, then let go
    (SIGCONT): the page shows a run still running however busy the machine, so the run itself can be short.  Its
    stall_min_s must be longer than the pause, or the page says it stalled."""
    state = json.loads((run_dir / record.STATE_FILE).read_text())
    pids = [r["pid"] for r in state.get("ranks", []) if r.get("pid")]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def mark_page(pg) -> None:
    """Mark the page's document.  Gradio reloads a page by itself once it lost its connection to the server (a broken
    request) and reached it again, and drops every click meanwhile: :func:`page_reloaded` tells a test that this
    happened, so it does its steps again instead of waiting for an answer to a click the page never sent."""
    pg.evaluate("() => { window.__zbMarked = true; }")


def page_reloaded(pg) -> bool:
    """The document marked by :func:`mark_page` was replaced (or is being replaced)."""
    try:
        return not pg.evaluate("() => window.__zbMarked === true")
    except Exception:  # noqa: BLE001 - the page is navigating: its old document is gone
        return True


def start_server(port: int, index: Path, log: Path, cwd: Path = REPO, env: dict | None = None,
                 args: list[str] | None = None) -> subprocess.Popen:
    """``zeroboard webui`` as a user starts it, on ``port``, with its own runs index; returns once it answers."""
    env = {"ZEROBOARD_RUNS_INDEX": str(index), "ZEROBOARD_LANG": "en", **(env or {})}
    SERVER_LOGS[log] = log.stat().st_size if log.exists() else 0
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
    """Teardown: a run still going (a failed test, Ctrl-C) is aborted, not left on the shared machine; jobs still
    queued are cancelled first, so the dispatcher starts none of them."""
    from zeroboard.runs.queue import Queue

    q = Queue(index)
    for entry in q.entries():
        q.remove(entry.id)
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


def owned_run(folder: Path, index: Path | None = None, files: list[str] | None = None) -> Path:
    """A run folder as ZeroBoard leaves it: claimed (its marker), registered in the index (the env's by default),
    with a state.json that lists what the run wrote: ``files``, paths relative to the folder, made here (a path
    ending in "/" a folder, any other a file holding "x" until the caller writes it), with their folders and the
    record files (None: no list, as after a run that never ended)."""
    registry = Registry(index)
    with registry.locked():
        claimed = folders.claim(folder, registry)
        run_id = claimed.run_id
        registry.add({"run_dir": str(folder.resolve()), "run_id": run_id})
    (folder / record.LAUNCH_FILE).write_text(json.dumps({"run_id": run_id, "run_dir": str(folder.resolve()),
                                                         "foreign": claimed.foreign}))
    state = {"run_dir": str(folder.resolve()), "status": "finished", "run_id": run_id}
    (folder / record.STATE_FILE).write_text(json.dumps(state))
    if files is not None:
        for rel in files:
            path = folder / rel
            if rel.endswith("/"):
                path.mkdir(parents=True, exist_ok=True)
            elif not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("x")
        seal(folder)
    return folder


def seal(folder: Path) -> Path:
    """List everything the run folder holds now as what the run wrote (``state.json``'s ``written`` and ``files``),
    as its supervisor does when the run ends."""
    state = json.loads((folder / record.STATE_FILE).read_text())
    state["written"] = manifest.tree(folder)
    state["files"] = sorted(p for p in state["written"] if "/" not in p)
    (folder / record.STATE_FILE).write_text(json.dumps(state))
    return folder


def synthetic_run(folder: Path, index: Path | None = None, steps: int = 60, every: int = 5, status: str = "finished",
                  seed: int = 0, started: float | None = None, **job) -> Path:
    """A finished run as ZeroBoard leaves one, written directly (no training): its marker and index entry, the job
    it asked for, its request, its command, its plan, its events (a loss curve, the learning rate, speed, memory
    peaks), its log and state (listing all it wrote).  For listings and comparisons of many runs (tests,
    benchmarks/runs_page.py)."""
    import math
    import random

    from zeroboard.job import command as cmdmod, spec
    from zeroboard.planner.record import record_plan

    rng = random.Random(seed)
    spec_job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    for k, v in {"max_steps": steps, "logging_steps": every, **job}.items():
        setattr(spec_job, k, v)
    spec_job.output_dir = str(folder)
    registry = Registry(index)
    with registry.locked():
        claimed = folders.claim(folder, registry)
        run_id = claimed.run_id
        registry.add({"run_dir": str(folder.resolve()), "run_id": run_id, "source": "page", "device_kind": "cpu",
                      "devices": [0, 1], "trainer_dir": str(folder.resolve())})
    (folder / record.LAUNCH_FILE).write_text(json.dumps({  # the request, with what the claim found (a new folder: nothing)
        "source": "page", "launcher": "torchrun", "index": str(registry.path), "trainer_dir": str(folder.resolve()),
        "run_id": run_id, "run_dir": str(folder.resolve()), "foreign": claimed.foreign}))
    (folder / record.SPEC_FILE).write_text(spec.dump_yaml(spec_job))
    argv = ["torchrun", "--nproc_per_node", "2", "-m", "zeroboard.training.train", *spec.to_flags(spec.to_dict(spec_job))]
    cmd = cmdmod.Command(argv, {"CUDA_VISIBLE_DEVICES": ""}, str(REPO), None, "cpu", [0, 1], 29500)
    (folder / record.COMMAND_FILE).write_text(json.dumps(cmd.to_dict()))
    record_plan(spec_job, folder, [])
    t0 = started or time.time() - 3600
    lines = [{"event": "start", "time": t0, "world_size": 2, "devices": [], "total_steps": steps}]
    rss = 500 << 20
    for step in range(every, steps + 1, every):
        rss += rng.randint(0, 4 << 20)
        loss = 2.0 * math.exp(-step / (steps / 3)) + 0.3 + rng.random() * 0.05
        lines.append({"event": "log", "time": t0 + step * 0.1, "step": step, "total_steps": steps, "loss": loss,
                      "lr": 5e-3 * (1 - step / steps), "tokens_per_sec": 5000 + rng.random() * 500,
                      "tokens": step * 1000, "elapsed": step * 0.1 + 2, "eta": (steps - step) * 0.1,
                      "memory": [{"rank": r, "rss_peak_bytes": rss + r * (1 << 20)} for r in (0, 1)]})
    lines.append({"event": "memory", "time": t0 + steps * 0.1, "step": steps,
                  "memory": [{"rank": r, "rss_peak_bytes": rss + r * (1 << 20)} for r in (0, 1)]})
    if status == "finished":
        lines.append({"event": "end", "time": t0 + steps * 0.1 + 1, "status": "finished",
                      "result": {"kind": "lora_adapter", "global_step": steps}})
    (folder / record.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in lines))
    (folder / record.LOG_FILE).write_text("".join(f"[rank0]: step {e['step']}/{steps} loss {e['loss']:.4f}\n"
                                                  for e in lines if e["event"] == "log"))
    state = {"run_dir": str(folder.resolve()), "status": status, "source": "page", "device_kind": "cpu", "devices": [0, 1],
             "started": t0, "ended": t0 + steps * 0.1 + 2, "exit_code": 0,
             "message": {"key": f"run.{status}", "values": {}},
             "trainer_dir": str(folder.resolve()), "run_id": run_id}
    (folder / record.STATE_FILE).write_text(json.dumps(state))
    return seal(folder)


def start_on_page(pg, index: Path, run_dir: Path, button: str = "#zb-start", lang: str = "en", wait_s: float = 900) -> None:
    """Click Start (or Resume), and again every few seconds while the page says the CPU is busy -- on a shared
    machine another workspace's job may hold it a while -- until the run is registered as started by this click."""
    from zeroboard import words

    busy, key = words.text("page.busy", lang), str(Path(run_dir).resolve())
    deadline = time.time() + wait_s
    while True:
        clicked = time.time()
        pg.locator(button).click()

        def outcome(clicked=clicked):
            entry = Registry(index).entry(key)
            if entry and (entry.get("requested") or 0) >= clicked - 1:
                return "started"
            shown = " ".join(pg.locator(m).inner_text() for m in ("#zb-message", "#zb-runs-message")
                             if pg.locator(m).count() and pg.locator(m).is_visible())
            return "busy" if busy in shown and time.time() - clicked > 10 else None  # not the last click's words

        if wait_until(outcome, 120, "the run to start, or the page to say the CPU is busy") == "started":
            return
        if time.time() > deadline:
            raise TimeoutError(f"{run_dir} did not start within {wait_s:.0f} s: the CPU stayed busy")
        time.sleep(5)


# Liger's own source, as the GPU image installs it: `make install-test` downloads the liger-kernel wheel (pure
# Python; not installed: it would pull Triton) and the tests read its monkey_patch.py through job/liger.py.
WHEELS = Path(os.environ.get("ZEROBOARD_WHEEL_CACHE") or Path.home() / ".cache" / "zeroboard" / "wheels")


_REAL_SOURCE: dict = {}  # job.liger.source_text before any test replaced it


def liger_wheel() -> Path:
    found = sorted(WHEELS.glob("liger_kernel-*.whl"))
    assert found, f"no liger-kernel wheel in {WHEELS}: `make install-test` downloads it"
    return found[-1]


def liger_installed(monkeypatch, installed: bool = True) -> None:
    """As on a GPU machine with (or without) liger-kernel: the planner, checks and trainer read its real source."""
    from zeroboard.job import liger

    if installed:
        monkeypatch.setenv(liger.SOURCE_ENV, str(liger_wheel()))
        monkeypatch.setattr(liger, "source_text", _REAL_SOURCE.setdefault("fn", liger.source_text))
    else:
        _REAL_SOURCE.setdefault("fn", liger.source_text)
        monkeypatch.delenv(liger.SOURCE_ENV, raising=False)
        monkeypatch.setattr(liger, "source_text", lambda: None)


def as_measured_before_26(monkeypatch, spec=None):
    """Runs measured before issue 26 kept fp32 master weights without DeepSpeed and ran the DeepSpeed presets as
    written: plan them that way (the spec's master_weights, and ZeroBoard's one-GPU DeepSpeed values off)."""
    import dataclasses

    from zeroboard.job import dstune

    monkeypatch.setenv(dstune.TUNING_ENV, "off")
    return dataclasses.replace(spec, master_weights="fp32") if spec is not None else None


def hub_dataset(cache: Path, repo: str, files: dict[str, str], revision: str = "0" * 40) -> Path:
    """A dataset repository as huggingface_hub leaves it in its cache after a download (``refs/main`` naming the
    snapshot that holds the files): for the jobs whose ``dataset_dir`` is ``REMOTE:owner/name``, on a machine without
    the hub.  Returns the snapshot folder."""
    folder = cache / f"datasets--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / revision
    for name, text in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).write_text(text, encoding="utf-8")
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    return snapshot


RETITLE_S = 20  # the charts of a page draw their titles in a new language within this (live_panels.RETITLE_TICKS)


def left_after(find, seconds: float = RETITLE_S, every: float = 0.5):
    """What ``find()`` still finds once it finds nothing or ``seconds`` have passed: for a page whose charts draw
    their new titles asynchronously (a check that reads too soon sees the old words of a drawing under way)."""
    deadline = time.time() + seconds
    while (found := find()) and time.time() < deadline:
        time.sleep(every)
    return found
