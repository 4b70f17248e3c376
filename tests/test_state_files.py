"""State files that cannot be read -- the queue, the runs index, a run's state.json -- are kept aside byte for byte under
a dated name, said on the page and the command line until the copy is removed, and never written over (issue 31: a
garbage queue file read as empty, then overwritten by the next Queue with 5 entries gone)."""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
from pathlib import Path

import pytest

from helpers import synthetic_run
from zeroboard import files, words
from zeroboard.job import folders, record
from zeroboard.job.registry import Registry, RegistryError
from zeroboard.runs import housekeeping
from zeroboard.runs.manager import JobManager
from zeroboard.runs.queue import Queue
from zeroboard.runs.state import read_state

DAMAGE = ["garbage bytes", "truncated", "a list where an object belongs", "an entry of the wrong kind", "empty"]


def damaged(good: bytes, how: str, entry_key: str) -> bytes:
    return {"garbage bytes": b"\x00\xff\xfePK\x03\x04 not a queue \x9c",
            "truncated": good[: len(good) // 2],
            "a list where an object belongs": json.dumps(json.loads(good)[entry_key]).encode(),
            "an entry of the wrong kind": json.dumps({entry_key: [42]}).encode(),
            "empty": b""}[how]


def five_queued(q: Queue) -> None:
    for i in range(5):
        q.add({"output_dir": f"runs/q{i}"}, "/", "cli", "cpu", [0], f"/r/q{i}")


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_queue_is_kept_aside_said_and_the_next_add_starts_afresh(tmp_path, how):
    q = Queue(tmp_path / "runs.json")
    five_queued(q)
    bad = damaged(q.path.read_bytes(), how, "queue")
    q.path.write_bytes(bad)
    assert q.entries() == []  # read as empty now: the damaged file is no longer the queue...
    (aside,) = files.kept(q.path)  # ...it was moved aside, byte for byte, under a dated name
    assert aside.read_bytes() == bad and aside.name.startswith("queue.json.unreadable-20")
    said = q.problem()
    assert said is not None and str(q.path) in said and str(aside) in said and "queue its jobs again" in said
    assert "队列文件" in words.tr(said, "zh")
    q.add({"output_dir": "runs/next"}, "/", "page", "cpu", [0], "/r/next")  # the next write: a new file
    assert [e.output for e in q.entries()] == ["/r/next"]
    assert files.kept(q.path) == [aside] and aside.read_bytes() == bad  # never written over
    aside.unlink()
    assert q.problem() is None


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_runs_index_is_kept_aside_said_and_the_next_run_starts_a_new_one(tmp_path, how):
    index = Registry(tmp_path / "runs.json")
    with index.locked():
        for i in range(5):
            index.add({"run_dir": f"/r/run{i}", "run_id": f"{i}" * 32})
    bad = damaged(index.path.read_bytes(), how, "runs")
    index.path.write_bytes(bad)
    assert index.entries() == [] and index.entry("/r/run1") is None
    (aside,) = files.kept(index.path)
    assert aside.read_bytes() == bad
    said = JobManager(index=index.path).problems()
    assert len(said) == 1 and str(aside) in said[0] and "their folders are untouched" in said[0]
    with index.locked():
        index.add({"run_dir": "/r/new"})
    assert [e["run_dir"] for e in index.entries()] == ["/r/new"] and aside.read_bytes() == bad


def test_an_index_of_an_older_version_is_no_damage(tmp_path):
    index = Registry(tmp_path / "runs.json")
    index.path.write_text(json.dumps({"runs": ["/r/a", {"run_dir": "/r/b"}]}))  # plain folder names: an old index
    assert [e["run_dir"] for e in index.entries()] == ["/r/a", "/r/b"] and files.kept(index.path) == []


@pytest.mark.parametrize("how", ["garbage bytes", "truncated", "a list where an object belongs", "empty"])
def test_a_damaged_state_json_is_kept_aside_and_the_run_recorded_again_from_its_events(tmp_path, index, how):
    run = synthetic_run(tmp_path / "run", index)
    state = run / record.STATE_FILE
    bad = {"garbage bytes": b"\x00\xffgarbage", "truncated": state.read_bytes()[:40],
           "a list where an object belongs": b"[1, 2]", "empty": b""}[how]
    state.write_bytes(bad)
    manager = JobManager(index=index)
    st = manager.state(str(run.resolve()))
    assert st.status == "finished"  # its events end with the trainer's end
    (aside,) = files.kept(state)
    assert aside.read_bytes() == bad and any(str(aside) in n for n in st.notes)
    assert read_state(run).status == "finished"  # a new state.json, written beside the copy, not over it
    said = manager.problems()
    assert len(said) == 1 and str(aside) in said[0]
    assert folders.ownership(run, manager.registry).foreign == []  # the copy blocks no resume; Delete leaves it, named
    assert "left state.json.unreadable-" in housekeeping.delete(manager, str(run.resolve())) and aside.exists()


def test_a_file_that_cannot_be_opened_is_never_moved_nor_written_over(tmp_path):
    """Not a regular file (here a folder in its place): it may be whole, so reads say why and writes are refused."""
    q = Queue(tmp_path / "runs.json")
    q.path.mkdir(parents=True)
    (q.path / "keep.txt").write_text("mine")
    assert q.entries() == [] and files.kept(q.path) == []
    assert "cannot be read" in q.problem() and "not a regular file" in q.problem()
    with pytest.raises(RegistryError, match="nothing is written to it"):
        q.add({}, "/", "cli", "cpu", [0], "/r/x")
    assert (q.path / "keep.txt").read_text() == "mine"


def _as_nobody(folder: str, conn) -> None:
    """In a child process, as the user nobody: read, ask, then try to add to a queue and an index nobody may read."""
    os.setgid(65534)
    os.setuid(65534)
    q, index = Queue(Path(folder) / "runs.json"), Registry(Path(folder) / "runs.json")
    out = {"entries": len(q.entries()), "problem": str(q.problem()), "runs": len(index.entries()),
           "index_problem": str(index.problem())}
    for name, write in (("add", lambda: q.add({}, "/", "cli", "cpu", [0], "/r/x")),
                        ("register", lambda: index.update("/r/a", note=1))):
        try:
            write()
            out[name] = "written"
        except RegistryError as e:
            out[name] = str(e)
    conn.send(out)
    conn.close()


def test_a_queue_and_index_their_reader_may_not_read_are_left_whole_and_writes_refused():
    """A real permission: the files belong to root with mode 000, and the reader is the user nobody (a child of this
    process that drops root: tests run as root, whom no permission stops)."""
    folder = tempfile.mkdtemp(prefix="zeroboard-perm-")
    try:
        os.chmod(folder, 0o777)
        q, index = Queue(Path(folder) / "runs.json"), Registry(Path(folder) / "runs.json")
        five_queued(q)
        with index.locked():
            index.add({"run_dir": "/r/a"})
        for p in (q.path, index.path):
            os.chmod(p, 0)
            os.chmod(p.with_suffix(".lock"), 0o666)  # the lock may be taken: only the file is unreadable
        before = (q.path.read_bytes(), index.path.read_bytes())
        parent, child = multiprocessing.get_context("fork").Pipe()
        proc = multiprocessing.get_context("fork").Process(target=_as_nobody, args=(folder, child))
        proc.start()
        got = parent.recv()
        proc.join(30)
        assert got["entries"] == 0 and got["runs"] == 0
        assert "Permission denied" in got["problem"] and "Permission denied" in got["index_problem"]
        assert "nothing is written to it" in got["add"] and "nothing is written to it" in got["register"]
        assert (q.path.read_bytes(), index.path.read_bytes()) == before  # whole, unmoved
        assert files.kept(q.path) == [] and files.kept(index.path) == []
    finally:
        for p in Path(folder).iterdir():
            p.unlink()
        os.rmdir(folder)


def _add_many(path: str, n: int, tag: str) -> None:
    q = Queue(path)
    for i in range(n):
        q.add({}, "/", "cli", "cpu", [0], f"/r/{tag}{i}")


def test_a_reader_never_takes_a_write_in_flight_for_damage(tmp_path):
    """Two processes add 40 entries each while this one reads the queue as fast as it can: every write is a whole new
    file renamed over the old, so no read finds a damaged file and nothing is kept aside."""
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_add_many, args=(str(tmp_path / "runs.json"), 40, tag)) for tag in "ab"]
    for w in writers:
        w.start()
    q, reads = Queue(tmp_path / "runs.json"), 0
    while any(w.is_alive() for w in writers) or reads < 50:
        q.entries()
        assert q.problem() is None
        reads += 1
    for w in writers:
        w.join()
    assert len(q.entries()) == 80 and files.kept(q.path) == []


def test_zeroboard_queue_and_runs_say_it_and_exit_1_until_the_copy_is_removed(tmp_path, index, monkeypatch, capsys):
    from zeroboard import cli

    monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(index))
    q = Queue(index)
    five_queued(q)
    q.path.write_text("{garbage")
    assert cli.main(["queue"]) == 1
    out, err = capsys.readouterr()
    (aside,) = files.kept(q.path)
    assert "The queue is empty." in out and str(aside) in err and "queue its jobs again" in err
    assert aside.read_text() == "{garbage"
    assert cli.main(["queue"]) == 1 and str(aside) in capsys.readouterr().err  # said until dealt with
    aside.unlink()
    assert cli.main(["queue"]) == 0 and capsys.readouterr().err == ""
    synthetic_run(tmp_path / "run", index)
    Path(index).write_bytes(b"\x00")
    assert cli.main(["runs"]) == 1
    out, err = capsys.readouterr()
    (aside,) = files.kept(index)
    assert str(aside) in err and "a new index was started" in err


def test_the_queue_and_runs_tabs_say_it(tmp_path, index):
    from zeroboard.webui import queue_page, runs_view

    q = Queue(index)
    five_queued(q)
    q.path.write_text("[]")
    _table, _picker, count = queue_page.view(q, None, "zh")
    (aside,) = files.kept(q.path)
    assert str(aside) in count and "队列文件" in count and words.text("cli.queue_empty", "zh") in count
    Path(index).write_text('{"runs": 5}')
    count = runs_view.listing(JobManager(index=index), lang="en").count
    (aside,) = files.kept(index)
    assert str(aside) in count and "runs index" in count
