"""The queue: a job waits for its devices instead of being refused, starts in order as they free, never two on one
device set; the queue is a file and its dispatcher a process of its own, so both outlive the page and a crash."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers import standin_env, wait_until
from test_runner import assert_nothing_left, ended, prepared_for
from zeroboard.runs import dispatcher, manager as runner
from zeroboard.runs.queue import Entry, Queue, blocked_by_earlier
from zeroboard.webui import queue_page

REPO = Path(__file__).resolve().parents[1]


def entry(i: str, kind: str, devices: list[int], output: str, status: str = "waiting") -> Entry:
    return Entry(i, {}, "/", device_kind=kind, devices=devices, output=output, status=status)


def test_an_entry_waits_behind_an_earlier_one_on_the_same_devices_only():
    q = [entry("a", "cuda", [0, 1], "/r/a"), entry("b", "cuda", [1], "/r/b"), entry("c", "cuda", [2], "/r/c"),
         entry("d", "cpu", [0, 1], "/r/d"), entry("e", "cpu", [0], "/r/e"), entry("f", "cuda", [3], "/r/a"),
         entry("g", "slurm", [], "/r/g"), entry("h", "slurm", [], "/r/h")]
    by = {e.id: (blocked_by_earlier(q, e).id if blocked_by_earlier(q, e) else None) for e in q}
    assert by == {"a": None, "b": "a", "c": None, "d": None, "e": "d", "f": "a", "g": None, "h": None}
    q[0].status = "failed"  # a failed entry holds nothing
    assert blocked_by_earlier(q, q[1]) is None


def test_entries_are_moved_found_and_cancelled(tmp_path):
    q = Queue(tmp_path / "runs.json")
    ids = [q.add({}, "/", "cli", "cpu", [0], f"/r/{i}").id for i in range(3)]
    assert [e.id for e in q.entries()] == ids
    assert q.move(ids[2], 1) and [e.id for e in q.entries()] == [ids[2], ids[0], ids[1]]
    assert q.find(ids[1][:5]).id == ids[1]
    assert q.remove(ids[0]).id == ids[0] and [e.id for e in q.entries()] == [ids[2], ids[1]]
    assert q.remove("nope") is None and not q.move("nope", 1)


def test_a_look_tells_each_waiting_entry_why_it_waits_now(tmp_path):
    """A reason written by a dispatcher that died since (a run long over, a pid long gone) is replaced."""
    q = Queue(tmp_path / "runs.json")
    stale = runner.say("run.busy", what="GPU 6,7", run="/r/old", status="running", source="cli", pid=424242)
    # GPUs of a machine without them: no job of another workspace on this shared machine holds them
    first = q.add({}, "/", "cli", "cuda", [6, 7], str(tmp_path / "a"), why=stale)
    second = q.add({}, "/", "cli", "cuda", [7], str(tmp_path / "b"), why=stale)
    done = q.add({}, "/", "cli", "cuda", [7], str(tmp_path / "c"), why=stale)
    q.update(done.id, status="failed")
    dispatcher.refresh(q, runner.JobManager(tmp_path / "runs.json"))
    by = {e.id: e.why for e in q.entries()}
    assert by[first.id] == runner.say("queue.next") and by[second.id] == runner.say("queue.behind", id=first.id)
    assert by[done.id] == stale  # a failed entry keeps why it failed


def test_looks_at_once_start_one_dispatcher_and_none_while_one_serves(tmp_path):
    q = Queue(tmp_path / "runs.json")
    assert not dispatcher.revive(q)  # nothing waits: nothing to start
    q.add({"no_such_field": 1}, str(tmp_path), "cli", "cuda", [7], str(tmp_path / "out"))  # it fails at its check
    barrier = threading.Barrier(6)
    started = []

    def look():
        barrier.wait()
        started.append(dispatcher.revive(q))

    threads = [threading.Thread(target=look) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert started.count(True) == 1, started
    pid = wait_until(lambda: dispatcher.holder(q), 30, "the dispatcher's pid")
    try:
        assert not dispatcher.revive(q)  # one serves: a look starts none
        wait_until(lambda: q.entries()[0].status == "failed", 60, "the dispatcher to check the entry")
        assert q.entries()[0].why == runner.say("spec.unknown")
    finally:
        with contextlib.suppress(ProcessLookupError):  # (it exits by itself once nothing waits)
            os.kill(pid, signal.SIGKILL)


@pytest.mark.e2e
def test_queued_jobs_run_one_at_a_time_in_order_and_outlive_a_killed_dispatcher(tmp_path, index, monkeypatch):
    # the ranks run the stand-in trainer: the dispatcher and the `zeroboard queue` it starts inherit this environment
    for k, v in standin_env(step_s=0.1).items():
        monkeypatch.setenv(k, v)
    mgr = runner.JobManager(index=index, grace_s=10)
    first = mgr.start(prepared_for(tmp_path / "r0", max_steps=80))  # 8 s: it holds the CPU while the others queue
    with pytest.raises(runner.Busy):  # the plain Start still refuses
        mgr.start(prepared_for(tmp_path / "r1", max_steps=2))
    queued = [dispatcher.enqueue(mgr, prepared_for(tmp_path / f"r{i}", max_steps=2), "cli") for i in (1, 2, 3)]
    q = Queue(index)
    waiting = q.entries()
    assert [e.id for e in waiting] == [e.id for e in queued]
    assert "r0" in str(waiting[0].why) or "r0" in str(q.entries()[0].why)  # it says which run holds its devices
    # the dispatcher dies while they wait, and the run they wait for ends meanwhile: nothing starts them, and the
    # reason they show (r0 holds the CPU processes) is stale
    pid = wait_until(lambda: dispatcher.holder(q), 30, "the dispatcher to start")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not dispatcher.running(q), 30, "the killed dispatcher's lock to be free")
    assert ended(mgr, first.run_dir, 600).status == "finished"
    r0 = str(Path(first.run_dir))
    assert len(q.entries()) == 3 and r0 in str(q.entries()[0].why)
    # a look from the command line starts a new dispatcher, and says why each entry waits now
    out = subprocess.run([sys.executable, "-m", "zeroboard.cli", "queue"], capture_output=True, text=True,
                         env={**os.environ, "ZEROBOARD_RUNS_INDEX": str(index)}, cwd=REPO)
    assert out.returncode == 0 and queued[0].id in out.stdout and r0 not in out.stdout, out.stdout
    runs = [str((tmp_path / f"r{i}").resolve()) for i in (1, 2, 3)]
    wait_until(lambda: len(q.entries()) == 2, 600, "the revived dispatcher to start the first queued job")
    # killed again while the rest wait behind that run, which then ends: the Queue tab's look revives it
    wait_until(lambda: runs[0] in str(q.entries()[0].why), 60, "the next entry to name the run it waits for")
    pid = wait_until(lambda: dispatcher.holder(q), 30, "the revived dispatcher's pid")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not dispatcher.running(q), 30, "the killed dispatcher's lock to be free")
    ended(mgr, runs[0], 600)
    assert len(q.entries()) == 2 and runs[0] in str(q.entries()[0].why)
    table = queue_page.view(q, None, "en")[0]["value"]
    assert dispatcher.running(q) and not any(runs[0] in row[7] for row in table), table
    wait_until(lambda: not q.entries() and all((s := mgr.state(r)) and not s.active for r in runs), 900,
               "every queued job to run")
    states = [mgr.state(r) for r in [first.run_dir, *runs]]
    assert all(s.status == "finished" for s in states), [s.message for s in states]
    for before, after in zip(states, states[1:]):  # in order, never two at once
        assert after.started >= before.ended - 0.5, (before.run_dir, after.run_dir)
    for s in states:
        assert_nothing_left(s)
    out = subprocess.run([sys.executable, "-m", "zeroboard.cli", "queue"], capture_output=True, text=True,
                         env={**os.environ, "ZEROBOARD_RUNS_INDEX": str(index)}, cwd=REPO)
    assert "empty" in out.stdout
