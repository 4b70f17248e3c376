"""A run that stops moving: the ranks' heartbeat slots, the supervisor's verdict (stalled, naming the rank that has
not moved; back to running when it moves), and what the terminal follower says.  Plain functions and files; the
real SIGSTOP of a rank is in ``test_runner.py`` (the killed-rank test's job)."""

from __future__ import annotations

import time

import pytest

from helpers import wait_until
from zeroboard import words
from zeroboard.cli import train as cli_train
from zeroboard.job import heartbeat, record, spec
from zeroboard.job.bounds import problem
from zeroboard.runs import stall
from zeroboard.runs.state import ACTIVE, JobState, from_json
from zeroboard.training.heartbeat import Heartbeat
from zeroboard.webui.live import status_html

NOW = 1_000_000.0


def beat(rank: int, step: int = 10, at: float = NOW - 1, seen: float = NOW - 1, phase: str = "train",
         step_s: float | None = 0.5) -> dict:
    return {"rank": rank, "pid": 100 + rank, "host": "h", "beat": seen, "step": step, "at": at, "phase": phase,
            "step_s": step_s}


def test_each_rank_writes_its_own_slot_in_place_and_a_torn_or_empty_slot_is_skipped(tmp_path):
    path = tmp_path / record.HEARTBEAT_FILE
    heartbeat.write(path, 2, beat(2))
    heartbeat.write(path, 0, beat(0))
    assert path.stat().st_size == 3 * heartbeat.SLOT  # rank 1's slot: never written (a hole of NULs)
    assert [b["rank"] for b in heartbeat.read(path)] == [0, 2]
    inode = path.stat().st_ino
    heartbeat.write(path, 0, beat(0, step=11))
    assert path.stat().st_ino == inode and heartbeat.read(path)[0]["step"] == 11  # rewritten in place, no new file
    with open(path, "r+b") as fh:  # rank 2's slot half rewritten when read
        fh.seek(2 * heartbeat.SLOT + 5)
        fh.write(b"\0" * 20)
    assert [b["rank"] for b in heartbeat.read(path)] == [0]
    assert heartbeat.read(tmp_path / "missing") == []
    with pytest.raises(ValueError):
        heartbeat.write(path, 0, {"rank": 0, "host": "x" * heartbeat.SLOT})


def test_a_rank_reports_its_step_time_without_evaluations_and_saves(tmp_path):
    hb = Heartbeat(tmp_path, 1, period=60)
    hb.write()
    assert heartbeat.read(tmp_path / record.HEARTBEAT_FILE)[0]["step_s"] is None  # before any step
    hb.step_end(1, False, False)
    for step in range(2, 6):
        time.sleep(0.02)
        hb.step_end(step, False, step == 5)  # the Trainer plans a save after step 5
    assert hb.slot["phase"] == "save" and 0.015 < hb.slot["step_s"] < 0.2
    time.sleep(0.3)  # the save takes long: it is not a step's time
    hb.done("save")
    hb.step_end(6, True, False)
    assert hb.slot["phase"] == "eval" and hb.slot["step_s"] < 0.2
    hb.moved()  # an evaluation batch
    hb.done("eval")
    hb.end()
    hb.done("eval")  # the final evaluation, after training
    assert hb.slot["phase"] == "end"
    hb.write()
    (written,) = heartbeat.read(tmp_path / record.HEARTBEAT_FILE)
    assert written["rank"] == 1 and written["step"] == 6 and written["phase"] == "end"


def test_the_verdict_names_the_rank_that_gives_no_sign_of_life_or_the_ones_behind():
    # moving: the latest progress is within the limit (10 x 0.5 s, at least 3 s)
    assert stall.judge([beat(0), beat(1)], NOW, 10, 3) is None
    # too early to say: no rank knows its step time yet (compiling, the first steps), however long it takes
    assert stall.judge([beat(0, step_s=None, at=NOW - 900)], NOW, 10, 3) is None
    # rank 1 is stopped: its thread does not beat; rank 0 waits for it in a collective, alive
    found = stall.judge([beat(0, at=NOW - 20), beat(1, step=9, at=NOW - 20, seen=NOW - 19)], NOW, 10, 3)
    assert found.ranks == [1] and found.silent and found.step == 9 and found.limit_s == 5
    # everyone alive, nobody moves (a hang in a collective, a data loader that waits): the ones behind are named
    found = stall.judge([beat(0, step=12, at=NOW - 8), beat(1, step=11, at=NOW - 7)], NOW, 10, 3)
    assert found.ranks == [1] and not found.silent and found.since == NOW - 7
    # a save goes at its own pace, and so does the work after the last step; a silent rank is a stall even then
    assert stall.judge([beat(0, at=NOW - 60, phase="save"), beat(1, at=NOW - 60)], NOW, 10, 3) is None
    assert stall.judge([beat(0, at=NOW - 60, phase="end")], NOW, 10, 3) is None
    assert stall.judge([beat(0, at=NOW - 60, phase="save", seen=NOW - 60)], NOW, 10, 3).silent
    # the limit follows the run's pace: 10 x 20 s steps
    assert stall.judge([beat(0, at=NOW - 150, step_s=20)], NOW, 10, 3) is None
    # 0 turns the watch off; an earlier attempt's slots are not this run's
    assert stall.judge([beat(0, at=NOW - 60)], NOW, 0, 3) is None
    assert stall.judge([beat(0, at=NOW - 60, seen=NOW - 60)], NOW, 10, 3, started=NOW - 30) is None


def test_the_watch_turns_the_state_to_stalled_and_back_with_a_note(tmp_path):
    st = JobState(run_dir=str(tmp_path), status="running", message=words.say("run.running"), started=NOW - 100)
    watch = stall.Watch({"factor": 10, "min_s": 3})
    path = tmp_path / record.HEARTBEAT_FILE
    heartbeat.write(path, 0, beat(0, at=NOW - 20))
    heartbeat.write(path, 1, beat(1, step=9, at=NOW - 20, seen=NOW - 19))
    assert watch.look(st, NOW) and st.status == "stalled" and st.stall["ranks"] == [1] and st.stall["silent"]
    assert st.status in ACTIVE and "rank 1" in st.message and "Abort" in st.message
    assert not watch.look(st, NOW + 1)  # the same stall: nothing to write again
    again = from_json(st.to_json())  # as state.json keeps it
    assert again.status == "stalled" and again.stall == st.stall and words.tr(again.message, "zh") != again.message
    assert "rank 1" in status_html(again, "en") and "stalled" in status_html(again, "en")
    heartbeat.write(path, 0, beat(0, step=10, at=NOW + 1, seen=NOW + 1))
    heartbeat.write(path, 1, beat(1, step=10, at=NOW + 1, seen=NOW + 1))
    assert watch.look(st, NOW + 2) and st.status == "running" and st.stall == {}
    assert st.message == words.say("run.running") and "rank 1" in st.notes[-1]
    st.status = "stopping"  # a stop asked for is never turned into stalled
    heartbeat.write(path, 0, beat(0, at=NOW - 20, seen=NOW - 20))
    assert not watch.look(st, NOW + 60) and st.status == "stopping"


def test_the_stall_fields_are_checked_and_reach_the_supervisor():
    job = spec.JobSpec(stall_factor=4, stall_min_s=12)
    assert stall.settings(job) == {"factor": 4.0, "min_s": 12.0}
    assert problem("stall_factor", -1) and problem("stall_min_s", 0.5) and problem("stall_min_s", 10**9)
    assert problem("stall_factor", 0) is None  # 0: no watch
    assert spec.FIELDS["stall_factor"].metadata["launch_only"]  # the supervisor's, no flag of the trainer's


class StubManager:
    """What the follower asks of a manager: the run's state, one after the other."""

    def __init__(self, states: list[JobState]):
        self.states = states

    def state(self, run_dir):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def test_the_terminal_follower_says_when_a_run_stalls_and_when_it_moves_again(tmp_path, capsys):
    def state(status: str, **kw) -> JobState:
        return JobState(run_dir=str(tmp_path), status=status, started=NOW, **kw)

    found = stall.Stall([1], True, 8, NOW, 5.0)
    stalled = state("stalled", message=stall.message(found, 10), stall={"ranks": [1], "silent": True})
    moving = state("running", message=words.say("run.running"),
                   notes=[words.say("run.stall_over", ranks="1", since="12:00:00", until="12:00:30")])
    done = state("aborted", message=words.say("run.aborted"))
    mgr = StubManager([state("running"), stalled, stalled, moving, done])
    code = cli_train.follow(mgr, state("running"), cli_train.Signals(), cli_train.Terminal(), "en")
    err = capsys.readouterr().err
    assert code == 130 and err.count("no sign of life") == 1 and "rank 1" in err
    assert "stalled from 12:00:00 to 12:00:30" in err and err.index("no sign of life") < err.index("stalled from")


def test_a_heartbeat_thread_beats_on_its_own(tmp_path):
    hb = Heartbeat(tmp_path, 0, period=0.05)
    hb.start()
    try:
        first = wait_until(lambda: heartbeat.read(tmp_path / record.HEARTBEAT_FILE), 10, "a first beat")[0]["beat"]
        wait_until(lambda: heartbeat.read(tmp_path / record.HEARTBEAT_FILE)[0]["beat"] > first, 10, "a second beat")
    finally:
        hb.stop()
