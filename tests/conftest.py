"""Shared fixtures. Tests run from the repository root (cache/ and examples/ are relative to it)."""

from __future__ import annotations

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


# Tests that start training processes, browsers, clusters or containers run one after another in one worker: their
# jobs use both cores, and several at once would only wait for each other.  The rest spread over the other workers
# (`make test` runs pytest-xdist with --dist loadgroup); without xdist the marker changes nothing.
SERIAL = ("e2e", "browser", "slurm", "container")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in SERIAL):
            item.add_marker(pytest.mark.xdist_group("serial"))


@pytest.fixture(autouse=True)
def no_cli_job_outlives_its_test():
    """A job a failed test left running (zeroboard train from a test) would block every later test's start: stop it."""
    yield
    from helpers import stop_jobs

    stop_jobs(Path(os.environ["ZEROBOARD_RUNS_INDEX"]))


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
    """The session's finished runs, each trained once when a test first asks (tests/bank.py): ``bank.get(name)``."""
    from bank import Bank

    return Bank(tmp_path_factory.mktemp("bank"), Path(os.environ["ZEROBOARD_RUNS_INDEX"]))


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
def webui(tmp_path_factory):
    """One ``zeroboard webui`` for the session's browser tests, as a user starts it: (its URL, its folder, whose
    ``runs.json`` is its runs index).  Each test works in folders of its own and ends the runs it starts; a test that
    needs a server of its own (another environment, a restart, a password) starts one."""
    yield from _serve(tmp_path_factory, "webui", {})


@pytest.fixture(scope="session")
def standin_webui(tmp_path_factory):
    """The same, whose jobs run the stand-in trainer (helpers.standin_env): for the pages' supervision tests (Abort,
    the queue), which are not about the training."""
    from helpers import standin_env

    yield from _serve(tmp_path_factory, "standin-webui", standin_env(step_s=0.1))
