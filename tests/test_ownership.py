"""A run folder is one ZeroBoard made (its marker first, the run id in the index too), and a run's state tells the
truth after its supervisor is gone.  Real launches where the launch path is what is tested."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import owned_run, wait_until
from test_runner import assert_nothing_left, ended, first_log_event, prepared_for, standin_for
from zeroboard.job import folders, record
from zeroboard.job.registry import Registry
from zeroboard.runs import housekeeping, manager as runner, processes
from zeroboard.runs.state import JobState, hold_lock, read_state, settle, writer_gone


def hashes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


# --- the marker and the index ---------------------------------------------------------------------------------


def test_a_claim_writes_the_marker_first_and_the_index_agrees(tmp_path):
    index = Registry(tmp_path / "runs.json")
    run = tmp_path / "a" / "b" / "run"
    with index.locked():
        claimed = folders.claim(run, index)
        run_id, created = claimed.run_id, claimed.created
        index.add({"run_dir": str(run.resolve()), "run_id": run_id})
    assert [p.name for p in run.iterdir()] == [record.OWNER_FILE]  # nothing else was written before it
    mark = json.loads((run / record.OWNER_FILE).read_text())
    assert mark["run_id"] == run_id and mark["folder"] == str(run.resolve()) and mark["made"] is True
    assert created == [run, run.parent, run.parent.parent]  # deepest first, for unclaim
    assert claimed.fresh and claimed.foreign == []  # nothing there was not the run's
    own = folders.ownership(run, index)
    assert (own.kind, own.run_id, own.foreign) == ("owned", run_id, [])
    with index.locked():  # a second attempt in the same folder keeps its id
        assert folders.claim(run, index).run_id == run_id


@pytest.mark.parametrize("names", [{"README.md": "x"}, {record.COMMAND_FILE: "{}"}, {record.STATE_FILE: "{}"},
                                   {record.COMMAND_FILE: "{}", record.STATE_FILE: "{}", "adapter_model.safetensors": "w"}])
def test_files_named_like_a_runs_do_not_make_a_run_folder(tmp_path, names):
    d = tmp_path / "mine"
    d.mkdir()
    for name, text in names.items():
        (d / name).write_text(text)
    before = hashes(d)
    index = Registry(tmp_path / "runs.json")
    assert folders.ownership(d, index).kind == "foreign"
    with pytest.raises(folders.FolderTaken) as e, index.locked():
        folders.claim(d, index)
    assert all(n in str(e.value) for n in names) and hashes(d) == before


def test_a_marker_the_index_records_for_another_run_is_not_ownership(tmp_path):
    index = Registry(tmp_path / "runs.json")
    run = owned_run(tmp_path / "run", tmp_path / "runs.json", files=[])
    with index.locked():
        index.add({"run_dir": str(run.resolve()), "run_id": "f" * 32})  # the index now holds another id there
    own = folders.ownership(run, index)
    assert own.kind == "foreign" and folders.marker(run)["run_id"][:8] in str(own.why)


def marked(d: Path, run_id: str = "1" * 32, files: dict[str, str] | None = None, **record_files: dict) -> Path:
    """A folder holding a marker naming ``run_id`` and this very folder, the user's ``files``, and record files
    (``state``, ``launch``) as given."""
    d.mkdir(parents=True, exist_ok=True)
    (d / record.OWNER_FILE).write_text(json.dumps({"run_id": run_id, "folder": str(d.resolve())}))
    for name, text in (files or {}).items():
        (d / name).write_text(text)
    names = {"state": record.STATE_FILE, "launch": record.LAUNCH_FILE}
    for kind, data in record_files.items():
        (d / names[kind]).write_text(data if isinstance(data, str) else json.dumps(data))
    return d


def test_a_marker_without_its_runs_record_is_not_a_run_folder(tmp_path):
    """The issue's folder: a marker naming this very folder beside a user's thesis, no state.json: foreign -- refused
    as an output folder (naming the thesis, proposing a free name), refused for a claim, nothing written."""
    from zeroboard.job import spec

    d = marked(tmp_path / "thesis", files={"thesis.tex": "chapter 1\n"})
    before = hashes(d)
    index = Registry(tmp_path / "runs.json")
    own = folders.ownership(d, index)
    assert own.kind == "foreign" and "thesis.tex" in own.foreign and "no record of that run" in str(own.why)
    job = spec.JobSpec(output_dir=str(d))
    assert folders.output_problem(job, index)[0] == "output_dir"
    assert "thesis.tex" in folders.output_problem(job, index)[1] and "thesis-2" in folders.output_problem(job, index)[1]
    with pytest.raises(folders.FolderTaken, match="thesis.tex"), index.locked():
        folders.claim(d, index)
    assert hashes(d) == before


@pytest.mark.parametrize("state, why", [
    ({"run_id": "2" * 32, "status": "finished"}, "name different runs"),  # a state of another run
    ({"run_dir": "/elsewhere/run", "status": "finished"}, "written for /elsewhere/run"),  # copied from another folder
    ("{not json", "cannot be read"),
    ("[1, 2]", "cannot be read"),
])
def test_a_marker_its_runs_record_contradicts_is_not_ownership(tmp_path, state, why):
    d = marked(tmp_path / "run", files={"thesis.tex": "x"}, state=state)
    own = folders.ownership(d, Registry(tmp_path / "runs.json"))
    assert own.kind == "foreign" and why in str(own.why) and "thesis.tex" in own.foreign


def test_a_run_between_its_claim_and_its_supervisors_first_word_is_its_own(tmp_path):
    """No state.json yet: the request it was started with (launch.json) names its run id, or the index does."""
    index = Registry(tmp_path / "runs.json")
    d = marked(tmp_path / "a", launch={"run_id": "1" * 32, "run_dir": str((tmp_path / "a").resolve())})
    assert folders.ownership(d, index).kind == "owned"
    d = marked(tmp_path / "b", launch={"run_id": "2" * 32})  # a request of another run
    assert folders.ownership(d, index).kind == "foreign"
    with index.locked():
        index.add({"run_dir": str(d.resolve()), "run_id": "1" * 32})  # registered: claimed and starting
    assert folders.ownership(d, index).kind == "owned"


def test_a_failed_launch_in_a_users_empty_folder_leaves_it_empty_and_free(tmp_path):
    index = Registry(tmp_path / "runs.json")
    d = tmp_path / "mine"
    d.mkdir()
    with index.locked():
        claimed = folders.claim(d, index)
    assert claimed.fresh and claimed.created == [] and folders.marker(d)["made"] is False
    (d / record.COMMAND_FILE).write_text("{}")  # the launch wrote a record file, then failed
    folders.unclaim(d, claimed)
    assert d.is_dir() and list(d.iterdir()) == [] and folders.ownership(d, index).kind == "new"


def test_what_a_run_wrote_is_everything_that_appeared_after_its_claim(tmp_path):
    """launch.json notes what the folder held at the claim that was not the run's; the end lists the rest; a reader
    recording the end after the fact leaves out what changed after the run's last sign of life."""
    from zeroboard.job import manifest

    run = tmp_path / "run"
    run.mkdir()
    (run / ".draft.tmp").write_text("a user's file named like a write in flight")  # the folder still counts as new
    index = Registry(tmp_path / "runs.json")
    with index.locked():
        claimed = folders.claim(run, index)
    assert claimed.fresh and claimed.foreign == [".draft.tmp"]
    (run / record.LAUNCH_FILE).write_text(json.dumps({"run_id": claimed.run_id, "foreign": claimed.foreign}))
    (run / "checkpoint-1").mkdir()
    (run / "checkpoint-1" / "model.pt").write_text("w")
    (run / record.LOG_FILE).write_text("step 1\n")
    files, written = manifest.at_end(run)
    assert written == sorted([record.LAUNCH_FILE, "checkpoint-1", "checkpoint-1/model.pt", record.LOG_FILE, record.OWNER_FILE])
    assert files == sorted([record.LAUNCH_FILE, "checkpoint-1", record.LOG_FILE, record.OWNER_FILE])
    (run / "notes.txt").write_text("mine")  # put there long after the run's last word (as seen from then)
    assert "notes.txt" not in manifest.written(run, until=time.time() - 3 * manifest.SLACK_S)
    assert "notes.txt" in manifest.written(run, until=time.time())


def test_a_file_added_to_a_finished_run_makes_it_foreign_until_moved_out(tmp_path):
    index = Registry(tmp_path / "runs.json")
    run = owned_run(tmp_path / "run", tmp_path / "runs.json", files=["adapter_model.safetensors", "runs/", "checkpoint-3/"])
    (run / "adapter_model.safetensors").write_text("w")
    assert folders.ownership(run, index).foreign == []
    (run / "notes.txt").write_text("mine")
    assert folders.ownership(run, index).foreign == ["notes.txt"]
    (run / "notes.txt").unlink()
    (run / "checkpoint-3" / "notes.txt").write_text("mine")  # inside a folder the run wrote: still not the run's
    assert folders.ownership(run, index).foreign == ["checkpoint-3/notes.txt"]
    (run / "checkpoint-3" / "notes.txt").unlink()
    assert folders.ownership(run, index).foreign == []


def test_a_run_of_an_earlier_version_stays_its_own(tmp_path):
    """Registered before markers existed (no run id), with its state: still resumable, and marked at next launch."""
    index = Registry(tmp_path / "runs.json")
    run = tmp_path / "old"
    run.mkdir()
    (run / record.STATE_FILE).write_text('{"status": "finished"}')
    (run / "adapter_model.safetensors").write_text("w")
    with index.locked():
        index.add({"run_dir": str(run.resolve())})
    assert folders.ownership(run, index).kind == "owned"
    with index.locked():
        claimed = folders.claim(run, index)
    assert claimed.created == [] and folders.marker(run)["run_id"] == claimed.run_id and claimed.foreign == []


def test_free_names_count_on_instead_of_piling_up(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo-2").mkdir()
    assert folders.free_dir_name(tmp_path / "demo") == tmp_path / "demo-3"
    assert folders.free_dir_name(tmp_path / "demo-2") == tmp_path / "demo-3"


# --- the launch path ---------------------------------------------------------------------------------------------


def test_a_folder_that_changed_after_the_check_is_refused_at_start(tmp_path, index):
    """Checked at Preview, then the user copies their files in: Start claims under the index lock and refuses."""
    out = tmp_path / "out"
    out.mkdir()
    prepared = prepared_for(out, max_steps=2)
    (out / "README.md").write_text("mine")
    with pytest.raises(runner.StartError) as e:
        runner.JobManager(index=index).start(prepared)
    assert "README.md" in str(e.value)
    assert [p.name for p in out.iterdir()] == ["README.md"] and (out / "README.md").read_text() == "mine"
    assert runner.JobManager(index=index).run_dirs() == []


def test_a_start_that_fails_midway_leaves_no_folder_behind(tmp_path, index, monkeypatch):
    out = tmp_path / "newparent" / "deeper" / "run"
    prepared = prepared_for(out, max_steps=2)

    def disk_full(job, run):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "record_plan", disk_full)
    with pytest.raises(runner.StartError):
        runner.JobManager(index=index).start(prepared)
    assert not (tmp_path / "newparent").exists()


@pytest.mark.e2e
def test_a_started_run_is_marked_and_registered_with_one_id(tmp_path, index):
    mgr = runner.JobManager(index=index)
    st = ended(mgr, mgr.start(standin_for(tmp_path / "run", max_steps=2)).run_dir)  # (the stand-in trainer)
    assert st.status == "finished", st.message
    run_id = folders.marker(Path(st.run_dir))["run_id"]
    assert Registry(index).entry(st.run_dir)["run_id"] == run_id
    assert st.files and record.OWNER_FILE in st.files  # what the run folder held at the end: its own from now on
    assert folders.ownership(Path(st.run_dir), Registry(index)).foreign == []
    # what the trainer wrote is on the run's list; a file put there after the end is not, and Delete leaves it
    assert {record.EVENTS_FILE, record.RESULT_FILE, "adapter_model.safetensors", record.STATE_FILE} <= set(st.written)
    run = Path(st.run_dir)
    (run / "notes.txt").write_text("mine")
    message = housekeeping.delete(mgr, st.run_dir)
    assert "left notes.txt" in message and os.listdir(run) == ["notes.txt"] and (run / "notes.txt").read_text() == "mine"
    assert not mgr.is_registered(st.run_dir)


# --- the state tells the truth ----------------------------------------------------------------------------------


def test_nobody_settles_a_run_whose_supervisor_holds_the_lock(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from zeroboard.runs.state import hold_lock; "
                               f"hold_lock({str(run)!r}); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with writer_gone(run) as free:
            assert not free
        assert not settle(JobState(run_dir=str(run), status="lost"))
        assert read_state(run) is None
    finally:
        holder.kill()
        holder.wait()
    assert settle(JobState(run_dir=str(run), status="lost"))  # the holder is gone: its lock went with it
    assert read_state(run).status == "lost"
    fd = hold_lock(run)  # and the lock is not inherited by what its holder starts
    try:
        child = subprocess.run([sys.executable, "-c", f"import os; print(os.path.exists('/proc/self/fd/{fd}'))"],
                               capture_output=True, text=True)
        assert child.stdout.strip() == "False"
    finally:
        os.close(fd)


@pytest.mark.e2e
def test_a_run_killed_whole_is_recorded_as_ended_in_its_own_state(tmp_path, index):
    mgr = runner.JobManager(index=index, grace_s=10)
    st = mgr.start(standin_for(tmp_path / "run", max_steps=5000, logging_steps=1))  # (the stand-in trainer)
    first_log_event(st.run_dir)
    st = mgr.state(st.run_dir)
    victims = [psutil.Process(st.supervisor_pid), *processes.job_processes(st)]
    for p in victims:  # the supervisor and every process of the job at once, as a crash or OOM killer would
        os.kill(p.pid, signal.SIGKILL)
    wait_until(lambda: all(not processes.alive(p) for p in victims), 30, "every process to die")
    assert read_state(st.run_dir).status == "running"  # what the dead supervisor left
    seen = mgr.state(st.run_dir)  # the first reader settles it...
    assert not seen.active, seen.status
    assert read_state(st.run_dir).status == seen.status  # ...in the run's own record, for every reader after
    assert read_state(st.run_dir).files is not None
    assert_nothing_left(seen)
