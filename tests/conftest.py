"""Shared fixtures. Tests run from the repository root (cache/ and examples/ are relative to it)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.chdir(ROOT)
# Runs of the tests write into pytest's temporary folders, outside the workspace (the checkout): allow them, as a user
# allows a runs disk with --allow-path PATH:rw.  Set before any test (and inherited by the processes they start).
os.environ["ZEROBOARD_ALLOW_PATHS"] = f"{Path(tempfile.gettempdir()).resolve()}:rw"
# A CPU job of another workspace on this machine (another checkout's tests, a page someone left running) neither
# delays nor fails this suite's jobs: the product's ZEROBOARD_CPU_SHARED, inherited by the servers and commands the
# tests start (test_runner.py checks the guard with and without it).
os.environ["ZEROBOARD_CPU_SHARED"] = "1"
# Runs started without an index of their own (zeroboard train in a test) register in this process's, not the
# checkout's. One index per test process: xdist's workers inherit the controller's environment, and each test's
# teardown aborts the jobs of its index (no_cli_job_outlives_its_test), so a shared one let a fast test's teardown on
# one worker abort the run another worker's test was training (the bank's lora_identity, aborted three times).
if os.environ.get("ZEROBOARD_TESTS_PID") != str(os.getpid()):
    os.environ["ZEROBOARD_RUNS_INDEX"] = str(Path(tempfile.mkdtemp(prefix="zeroboard-tests-")) / "runs.json")
    os.environ["ZEROBOARD_TESTS_PID"] = str(os.getpid())


# `make test` runs pytest-xdist on both cores with --dist loadgroup.  A module of tests that start training
# processes, browsers, clusters or containers is one group, kept on one worker: its module fixtures (a container, a
# cluster) start once.  The groups start longest first, by the per-file times of the last measured run
# (benchmarks/results/test_time.json), so the last to end is a short one; the quick tests fill the gaps.  Two heavy
# modules may run at once, one a worker: every wait in them is sized for a machine training beside them.
HEAVY = ("e2e", "browser", "slurm", "container")
TIMES = ROOT / "benchmarks" / "results" / "test_time.json"


def measured_file_seconds() -> dict[str, float]:
    """Per test file, its wall time in the newest run test_time.py recorded (empty when none is committed)."""
    import json

    try:
        labels = json.loads(TIMES.read_text())
        newest = max(labels.values(), key=lambda run: run.get("when", ""))
        return {name: f["wall"] for name, f in newest["files"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed browser test's report carries what its pages logged as errors (a lost connection, a script error,
    a toast), and what the web UI servers wrote meanwhile (a handler's traceback)."""
    from helpers import BROWSER_ERRORS, SERVER_LOGS

    if call.when == "setup":
        BROWSER_ERRORS.clear()
        for log in SERVER_LOGS:
            SERVER_LOGS[log] = log.stat().st_size if log.exists() else 0
    outcome = yield
    report = outcome.get_result()
    if report.failed and BROWSER_ERRORS:
        report.sections.append(("browser errors", "\n".join(BROWSER_ERRORS)))
    for log, start in SERVER_LOGS.items() if report.failed else ():
        with contextlib.suppress(OSError), log.open("rb") as f:
            f.seek(start)
            if text := f.read().decode(errors="replace")[-4000:].strip():
                report.sections.append((f"server log {log.name}", text))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    heavy = {item.nodeid.split("::")[0] for item in items if any(item.get_closest_marker(m) for m in HEAVY)}
    for item in items:
        module = item.nodeid.split("::")[0]
        if module in heavy and any(item.get_closest_marker(m) for m in HEAVY):
            item.add_marker(pytest.mark.xdist_group(module.removeprefix("tests/").removesuffix(".py")))
    seconds = measured_file_seconds()
    # stable: within a file the tests keep their order (and their module fixtures' reuse)
    items.sort(key=lambda item: (item.nodeid.split("::")[0] not in heavy, -seconds.get(item.nodeid.split("::")[0], 0.0)))


@pytest.fixture(autouse=True)
def demo_before_a_heavy_test(request):
    """A test that trains, browses or serves finds the demo built (a web UI would build it on its first start, in
    minutes, inside the test's wait): the session's ``demo`` first, whichever test the scheduler starts with."""
    if any(request.node.get_closest_marker(m) for m in HEAVY):
        request.getfixturevalue("demo")


@pytest.fixture(autouse=True)
def no_cli_job_outlives_its_test():
    """A job a failed test left running (zeroboard train from a test) would block every later test's start: stop it."""
    yield
    from helpers import stop_jobs

    stop_jobs(Path(os.environ["ZEROBOARD_RUNS_INDEX"]))


_PROCESS_STATE = ("ZEROBOARD_WORKSPACE", "ZEROBOARD_ALLOW_PATHS", "ZEROBOARD_RUNS_INDEX", "HF_HUB_CACHE", "HF_HOME")


@pytest.fixture(autouse=True)
def leaves_the_process_as_it_found_it():
    """The working folder and the workspace's variables are the process's, shared by every later test of this worker:
    a test that changes them (not through monkeypatch) fails here, by its own name, not a later test by chance."""
    before = os.getcwd(), {k: os.environ.get(k) for k in _PROCESS_STATE}
    yield
    after = os.getcwd(), {k: os.environ.get(k) for k in _PROCESS_STATE}
    assert after == before, f"this test left the process changed: {before} -> {after}"


@pytest.fixture()
def index(tmp_path):
    """A runs index of the test's own; every job registered there is stopped when the test ends."""
    from helpers import stop_jobs

    path = tmp_path / "runs.json"
    yield path
    stop_jobs(path)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def demo() -> Path:
    """The built-in demo (cache/demo: its model and its data), built as a user builds it when a clean checkout lacks it.

    In a subprocess, as the product does: this process stays free of torch for the tests that check that."""
    import fcntl
    import hashlib

    model = ROOT / "cache/demo/model"
    key = hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]  # (outside the checkout: the suite leaves it as it was)
    with open(Path(tempfile.gettempdir()) / f"zeroboard-demo-build-{key}.lock", "w") as lock:  # the workers build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (model / "config.json").is_file() or not (ROOT / "cache/demo/data/dataset_info.json").is_file():
            subprocess.run([sys.executable, "-m", "zeroboard.cli", "demo-model"], cwd=ROOT, check=True, timeout=900,
                           capture_output=True, text=True)
    return model


@pytest.fixture(scope="session")
def bank(tmp_path_factory, demo):
    """The session's finished runs, each trained once when a test of any worker first asks (tests/bank.py):
    ``bank.get(name)``."""
    from bank import Bank

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: <session>/popen-gwN
    folder = shared / "bank"
    folder.mkdir(exist_ok=True)
    return Bank(folder, Path(os.environ["ZEROBOARD_RUNS_INDEX"]))


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session's browser tests; each test opens a context (a fresh page) of its own."""
    from helpers import chromium

    with chromium() as b:
        yield b


def _serve(tmp_path_factory, name: str, env: dict):
    from helpers import start_server, stop_jobs, stop_server
    from zeroboard.job import command

    work = tmp_path_factory.mktemp(name)
    port = command.free_port()
    proc = start_server(port, work / "runs.json", work / "server.log", env={"ZEROBOARD_LANG": "", **env})
    yield f"http://127.0.0.1:{port}/", work
    stop_jobs(work / "runs.json")
    stop_server(proc)


@pytest.fixture(scope="session")
def _webui_server(tmp_path_factory, demo):
    yield from _serve(tmp_path_factory, "webui", {})


@pytest.fixture(scope="session")
def _standin_webui_server(tmp_path_factory, demo):
    from helpers import standin_env

    yield from _serve(tmp_path_factory, "standin-webui", standin_env(step_s=0.1))


def _ended_after(served):
    """The session's server for one test; whatever that test left running or queued on it is stopped when it ends
    (a test that failed half-way through a long run would otherwise leave it training beside every later test)."""
    from helpers import stop_jobs

    yield served
    stop_jobs(served[1] / "runs.json")


@pytest.fixture()
def webui(_webui_server):
    """One ``zeroboard webui`` for the session's browser tests, as a user starts it: (its URL, its folder, whose
    ``runs.json`` is its runs index).  Each test works in folders of its own; the runs it started are stopped when it
    ends.  A test that needs a server of its own (another environment, a restart, a password) starts one."""
    yield from _ended_after(_webui_server)


@pytest.fixture()
def standin_webui(_standin_webui_server):
    """The same, whose jobs run the stand-in trainer (helpers.standin_env): for the pages' supervision tests (Abort,
    the queue), which are not about the training."""
    yield from _ended_after(_standin_webui_server)
