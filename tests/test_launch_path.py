"""One launch path: ``zeroboard train`` goes through the page's runner, with real launcher processes and signals.

A CLI job and a page job never share devices or a folder (each combination is
refused with the running job named); Ctrl-C, SIGTERM and SIGHUP to
``zeroboard train`` stop the job as Abort does and leave no process.  The ranks run the stand-in trainer
(helpers.standin_env): what is tested is the launch path around them; the real trainer's own runs through
``zeroboard train`` are in test_train_e2e.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import standin_env, wait_until
from test_runner import assert_nothing_left, ended, first_log_event, standin_for
from zeroboard.job import record
from zeroboard.job.registry import Registry
from zeroboard.runs import manager as runner

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]


def cli(index: Path, *args: str, background: bool = False):
    """``zeroboard ARGS`` as a user runs it, with this test's runs index (its jobs' ranks: the stand-in trainer)."""
    env = {**os.environ, "ZEROBOARD_RUNS_INDEX": str(index), "PYTHONUNBUFFERED": "1", **standin_env()}
    argv = [sys.executable, "-m", "zeroboard.cli", *args]
    if background:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def train_args(out: Path, steps: int) -> list[str]:
    return ["train", "examples/demo.yaml", "--set", f"output_dir={out}", "--set", f"max_steps={steps}"]


def started_cli_job(index: Path, out: Path) -> subprocess.Popen:
    """A long CLI job, followed in the foreground, once its first step is logged."""
    proc = cli(index, *train_args(out, 5000), background=True)
    wait_until(lambda: Registry(index).entry(str(out.resolve())) is not None or proc.poll() is not None, 120,
               "the CLI job to register")
    assert proc.poll() is None, proc.communicate()
    first_log_event(str(out.resolve()))
    return proc


def test_cli_train_runs_through_the_runner_and_returns_the_job_status(tmp_path, index):
    out = tmp_path / "run"
    done = cli(index, *train_args(out, 6))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[rank0]:" in done.stdout and "[rank1]:" in done.stdout  # the live log, on the terminal
    assert "torchrun" in done.stderr[:done.stderr.index("--output_dir")]  # the exact command, first
    assert "Ctrl-C stops the job" in done.stderr  # followed here: the terminal's Ctrl-C stops it
    entry = Registry(index).entry(str(out.resolve()))
    assert entry["source"] == "cli"  # the page's run list shows it
    st = runner.JobManager(index=index).state(out.resolve())
    assert st.status == "finished" and st.source == "cli" and st.exit_code == 0
    assert (out / record.STATE_FILE).is_file() and (out / record.RESULT_FILE).is_file()
    runs = cli(index, "runs")
    assert str(out.resolve()) in runs.stdout and "finished" in runs.stdout


def test_cli_and_page_jobs_never_share_devices_or_a_folder(tmp_path, index):
    first = tmp_path / "first"
    a = started_cli_job(index, first)
    named = str(first.resolve())
    mgr = runner.JobManager(index=index)
    # page after CLI: the devices are in use, the running job is named
    with pytest.raises(runner.Busy) as busy:
        mgr.start(standin_for(tmp_path / "page"))
    assert named in str(busy.value)
    # CLI after CLI: into the running job's folder, and onto its devices
    same = cli(index, *train_args(first, 5))
    other = cli(index, *train_args(tmp_path / "second", 5))
    for done in (same, other):
        assert done.returncode == 3 and named in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "second").exists()
    assert "max_steps: 5000" in (first / record.SPEC_FILE).read_text()  # the running job's record is untouched
    # Ctrl-C in the terminal stops the job as Abort does, and the command returns only when nothing is left
    a.send_signal(signal.SIGINT)
    _, err = a.communicate(timeout=120)
    assert a.returncode == 128 + signal.SIGINT, err[-2000:]
    st = mgr.state(named)
    assert st.status == "aborted" and st.leftover == []
    assert_nothing_left(st)
    # CLI after page: refused with the page's job named; `zeroboard stop` stops it from the terminal
    page = mgr.start(standin_for(tmp_path / "page", max_steps=5000))
    refused = cli(index, *train_args(tmp_path / "third", 5))
    assert refused.returncode == 3 and page.run_dir in refused.stderr
    stopped = cli(index, "stop", page.run_dir)
    assert stopped.returncode == 0, stopped.stderr
    st = ended(mgr, page.run_dir)
    assert st.status == "aborted"
    assert_nothing_left(st)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_to_zeroboard_train_stop_the_job(tmp_path, index, sig):
    out = tmp_path / "run"
    proc = started_cli_job(index, out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err[-2000:]
    st = runner.JobManager(index=index).state(out.resolve())
    assert st.status == "aborted" and st.leftover == [], st.message
    assert any("verified" in e["msg"] for e in st.stop_log)
    assert_nothing_left(st)


def test_stop_takes_one_run_or_all_of_them(index):
    """`zeroboard stop --all` is what a container's stop runs (docker/entrypoint.sh); with a job it is in test_container."""
    assert cli(index, "stop").returncode == 2
    assert cli(index, "stop", "--all", "runs/demo").returncode == 2
    nothing = cli(index, "stop", "--all")
    assert nothing.returncode == 0 and "no job" in nothing.stdout, nothing.stdout + nothing.stderr


def test_detach_leaves_the_job_running_on_purpose(tmp_path, index):
    out = tmp_path / "run"
    done = cli(index, *train_args(out, 5000), "--detach")
    assert done.returncode == 0, done.stderr
    assert "Ctrl-C" not in done.stderr and "zeroboard stop" in done.stderr  # what stops it, truly
    mgr = runner.JobManager(index=index)
    assert mgr.state(out.resolve()).active
    stopped = cli(index, "stop", str(out))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines()[-1] == "aborted", stopped.stdout  # not "aborted: aborted"
    st = ended(mgr, str(out.resolve()))
    assert st.status == "aborted"
    assert_nothing_left(st)
