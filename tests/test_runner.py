"""The job runner: launch, abort, crash, reattach - with real processes and signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import psutil
import pytest

from helpers import on_standin, wait_until
from zeroboard.cli import main as cli_main
from zeroboard.job import command, record, spec
from zeroboard.job.registry import Registry
from zeroboard.runs import executor, manager as runner, outcome, processes
from zeroboard.runs.launch import prepare_launch
from zeroboard.runs.state import JobState, read_state, write_state
from zeroboard.webui.live import Live

REPO = Path(__file__).resolve().parents[1]
WAIT_S = 180  # other trainings share this 2-core machine


def demo_job(out: Path, **changes) -> spec.JobSpec:
    job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    job.output_dir = str(out)
    for k, v in changes.items():
        setattr(job, k, v)
    return job


def prepared_for(out: Path, **changes) -> command.Prepared:
    p = prepare_launch(demo_job(out, **changes), gpus=[])
    assert p.report.ok, p.report.errors
    return p


def standin_for(out: Path, step_s: float = 0.05, knobs: dict | None = None, **changes) -> command.Prepared:
    """The demo job, prepared as Start prepares it, its ranks running the stand-in trainer (helpers.standin_env):
    for tests of the runner and the supervisor, which are not about the training."""
    return on_standin(prepared_for(out, **changes), step_s, **(knobs or {}))


def wait_for(predicate, timeout: float = WAIT_S, what: str = "condition"):
    return wait_until(predicate, timeout, what)


def first_log_event(run_dir: str) -> dict:
    path = Path(run_dir) / record.EVENTS_FILE
    return wait_for(lambda: next((e for e in record.read_events(path) if e["event"] == "log"), None),
                    what="the first logged step")


def ended(mgr: runner.JobManager, run_dir: str, timeout: float = WAIT_S) -> JobState:
    return wait_for(lambda: (s := mgr.state(run_dir)) and not s.active and s, timeout, f"{run_dir} to end")


def assert_nothing_left(st: JobState) -> None:
    assert processes.job_processes(st) == []
    assert processes.proc(st.launcher_pid, st.launcher_ctime) is None
    assert all(processes.proc(r["pid"], r["ctime"]) is None for r in st.ranks)
    assert not [p for p, out in processes.live_trainers() if out == Path(st.run_dir).resolve()]
    wait_for(lambda: processes.proc(st.supervisor_pid, st.supervisor_ctime) is None, 30, "the supervisor to exit")


# --- fast: no processes --------------------------------------------------------------------


def test_torchrun_gets_rank_prefixes_and_the_preview_shows_them(tmp_path):
    cmd = prepared_for(tmp_path / "run").command
    assert cmd.argv[1:3] == ["--tee", "3"]
    assert cmd.env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]:"
    assert "--tee 3" in cmd.shell() and "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" in cmd.shell()


def test_deepspeed_launcher_is_left_alone(tmp_path):
    cmd = prepare_launch(demo_job(tmp_path / "run", launcher="deepspeed"), gpus=[]).command
    assert "--tee" not in cmd.argv and "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" not in cmd.env


TORCHRUN_SUMMARY = """\
[rank0]:RuntimeError: Connection closed by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
zeroboard.training.train FAILED
------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11)  (SIGTERM)
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_12:20:54
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)  (SIGKILL)
======================================================
"""


def _state_with_log(tmp_path, text: str) -> JobState:
    (tmp_path / record.LOG_FILE).write_text(text)
    return JobState(run_dir=str(tmp_path), status="running", started=time.time())


def test_failure_names_torchruns_root_cause_rank_not_the_victim(tmp_path):
    st = _state_with_log(tmp_path, "[rank1]:last words\n" + TORCHRUN_SUMMARY)
    victim = {"event": "error", "rank": 0, "message": "RuntimeError: Connection closed by peer", "traceback": "tb"}
    outcome.conclude(st, 1, [victim])
    assert st.status == "failed" and st.failed_rank == 1 and st.exit_code == 1
    assert "SIGKILL" in st.message and "rank 1" in st.message
    assert any("Root Cause" in ln for ln in st.error_lines)


def test_a_killed_rank_wins_over_a_rank_torchrun_saw_fail_in_the_same_poll(tmp_path):
    summary = TORCHRUN_SUMMARY.replace("rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 12)  (SIGKILL)",
                                       "rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 11)")
    summary = summary.replace("rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 11)  (SIGTERM)",
                              "rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 12)  (SIGKILL)", 1)
    st = _state_with_log(tmp_path, summary)
    reset = {"event": "error", "rank": 0, "message": "RuntimeError: Connection reset by peer", "traceback": "tb"}
    outcome.conclude(st, 1, [reset])
    assert st.failed_rank == 1 and "SIGKILL" in st.message


def test_failure_uses_the_error_event_of_the_failing_rank(tmp_path):
    st = _state_with_log(tmp_path, "some output\n")
    ev = {"event": "error", "rank": 1, "message": "ValueError: cutoff_len too small",
          "traceback": "Traceback (most recent call last):\n  File x\nValueError: cutoff_len too small"}
    outcome.conclude(st, 1, [ev])
    assert st.failed_rank == 1 and "cutoff_len" in st.message
    assert st.error_lines[-1] == "ValueError: cutoff_len too small"


def test_conclude_statuses(tmp_path):
    st = _state_with_log(tmp_path, "")
    outcome.conclude(st, 0, [{"event": "end", "status": "finished"}])
    assert st.status == "finished"
    st = _state_with_log(tmp_path, "")
    st.abort_requested = time.time()
    outcome.conclude(st, -15, [])
    assert st.status == "aborted"
    st = _state_with_log(tmp_path, "")
    outcome.conclude(st, None, [])
    assert st.status == "lost"
    st = _state_with_log(tmp_path, "")  # a cause the supervisor knows (a full disk) beats the log
    outcome.conclude(st, 1, [], cause=runner.say("run.disk_full", path="/x", why="No space left on device"))
    assert st.status == "failed" and "No space left on device" in st.message and "the launcher" in st.message


def test_one_job_per_device_set():
    cpu = JobState(run_dir="/r", status="running", device_kind="cpu", devices=[0, 1])
    gpu = JobState(run_dir="/g", status="running", device_kind="cuda", devices=[0, 1])
    assert executor.overlap(cpu.device_kind, cpu.devices, "cpu", [0])
    assert executor.overlap(gpu.device_kind, gpu.devices, "cuda", [1, 2])
    assert not executor.overlap(gpu.device_kind, gpu.devices, "cuda", [2, 3])
    assert not executor.overlap(gpu.device_kind, gpu.devices, "cpu", [0, 1])
    assert not executor.overlap("slurm", [0], "slurm", [0])  # a cluster's jobs hold none of this machine's devices
    assert "CPU processes" in runner.busy_message(cpu) and "GPU 0,1" in runner.busy_message(gpu)
    assert "/r" in runner.busy_message(cpu)  # the running job is named


def test_the_rendezvous_port_of_a_launcher_and_of_a_rank():
    """A node's launcher names its port on its command line, a rank in MASTER_PORT: both mark the job's peers."""
    import subprocess
    import sys

    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    procs = [subprocess.Popen([*sleep, "--nnodes", "2", "--master_port", "23456"]),
             subprocess.Popen([*sleep, "--master-port=23457"]),
             subprocess.Popen(sleep, env={**os.environ, "MASTER_PORT": "23458"}),
             subprocess.Popen(sleep, env={k: v for k, v in os.environ.items() if k != "MASTER_PORT"})]
    try:  # read each once it runs Python (right after fork it still holds this process's command line and environment)
        for p in procs:
            wait_until(lambda p=p: "time.sleep(60)" in " ".join(psutil.Process(p.pid).cmdline()), 30, "the exec")
        ports = [processes.rendezvous_port(psutil.Process(p.pid)) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert ports == [23456, 23457, 23458, None]


def test_each_node_of_a_job_on_one_machine_counts_only_its_own_processes(tmp_path):
    """Two nodes of one job on one machine write into one folder: a node's leftovers are the trainers of that folder
    and of its own node -- a launcher says its node on its command line, a rank in GROUP_RANK.  (Node 0's supervisor,
    ending first, once took node 1's launcher, which has no GROUP_RANK, for its own leftover and stopped it.)"""
    import subprocess
    import sys

    out = tmp_path / "two-nodes"
    out.mkdir()
    trainer = ["-m", processes.TRAINER_MODULE, "--output_dir", str(out)]
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    procs = [subprocess.Popen([*sleep, "--nnodes", "2", "--node_rank", "1", *trainer]),  # node 1's launcher
             subprocess.Popen([*sleep, "--nnodes=2", "--node-rank=0", *trainer]),  # node 0's
             subprocess.Popen([*sleep, *trainer], env={**os.environ, "GROUP_RANK": "1"}),  # a rank of node 1
             subprocess.Popen([*sleep, *trainer], env={k: v for k, v in os.environ.items() if k != "GROUP_RANK"})]
    try:
        for p in procs:
            wait_until(lambda p=p: "time.sleep(60)" in " ".join(psutil.Process(p.pid).cmdline()), 30, "the exec")
        ranks = [processes.node_rank(psutil.Process(p.pid)) for p in procs]
        mine = {n: {p.pid for p in processes.job_processes(JobState(run_dir=str(out), node_rank=n))} for n in (0, 1)}
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert ranks == [1, 0, 1, 0]
    assert mine == {0: {procs[1].pid, procs[3].pid}, 1: {procs[0].pid, procs[2].pid}}


def test_a_rank_recorded_before_it_had_its_rank_gets_it_at_the_next_look():
    """The supervisor may see a rank between its fork and its exec, still with its launcher's environment (no RANK):
    the next look gives it its rank, and new ranks are added once."""
    import subprocess
    import sys

    child = "import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], " \
            "env={**os.environ, 'RANK': '1'}); time.sleep(60)"
    launcher = subprocess.Popen([sys.executable, "-c", child])
    try:
        kids = wait_until(lambda: [c for c in psutil.Process(launcher.pid).children()
                                   if "time.sleep(60)" in " ".join(c.cmdline())], 30, "the launcher's rank")
        st = JobState(run_dir="/nowhere", launcher_pid=launcher.pid,
                      launcher_ctime=psutil.Process(launcher.pid).create_time(),
                      ranks=[{"pid": kids[0].pid, "rank": None, "ctime": kids[0].create_time()}])
        local = executor.LocalExecutor()
        assert local.follow(st) and st.ranks == [{"pid": kids[0].pid, "rank": 1, "ctime": kids[0].create_time()}]
        assert not local.follow(st) and len(st.ranks) == 1  # nothing new: the record stays as it is
    finally:
        for p in psutil.Process(launcher.pid).children(recursive=True):
            p.kill()
        launcher.kill()
        launcher.wait()


def test_a_taken_port_is_replaced_unless_the_user_fixed_it(tmp_path):
    prepared = prepared_for(tmp_path / "run")
    cmd = prepared.command
    with socket.socket() as s:
        s.bind(("127.0.0.1", cmd.master_port))
        s.listen()
        moved, notes = runner.settle_port(prepared.spec, cmd)
        assert moved.master_port != cmd.master_port and str(cmd.master_port) in notes[0]
        assert moved.argv[moved.argv.index("--master_port") + 1] == str(moved.master_port)
        fixed = demo_job(tmp_path / "run", master_port=cmd.master_port)
        with pytest.raises(runner.StartError, match="in use"):
            runner.settle_port(fixed, cmd)
    assert runner.settle_port(prepared.spec, cmd) == (cmd, [])


def test_state_survives_a_round_trip_with_its_messages(tmp_path):
    st = JobState(run_dir=str(tmp_path), status="running", ranks=[{"pid": 1, "rank": 0, "ctime": 1.0}],
                  message=runner.say("run.rank_failed_stopping", rank=1, why="boom"))
    st.log_stop(runner.say("run.stop_verified"))
    write_state(st)
    back = read_state(tmp_path)
    assert back.to_json() == st.to_json()
    assert back.message.say_in("zh").startswith("rank 1 出错") and back.stop_log[0]["msg"].say_in("zh").startswith("已确认")


def test_state_writes_use_unique_temporary_files_and_leave_the_old_file_whole(tmp_path, monkeypatch):
    import threading

    st = JobState(run_dir=str(tmp_path), status="running")
    errors = []

    def writer(i):
        try:
            for _ in range(50):
                st2 = JobState(run_dir=str(tmp_path), status="running", exit_code=i)
                write_state(st2)
        except Exception as e:  # a shared temporary name made two threads rename the same file
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and read_state(tmp_path).exit_code in range(4)
    assert not list(tmp_path.glob(".*.tmp"))
    write_state(st)

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write_state(JobState(run_dir=str(tmp_path), status="failed"))
    assert read_state(tmp_path).status == "running" and not list(tmp_path.glob(".*.tmp"))


def test_only_registered_runs_have_a_state_and_can_be_aborted(tmp_path, index):
    stray = tmp_path / "stray"
    stray.mkdir()
    write_state(JobState(run_dir=str(stray), status="running", launcher_pid=os.getpid(),
                         launcher_ctime=psutil.Process().create_time()))
    mgr = runner.JobManager(index=index)
    assert mgr.state(stray) is None and mgr.abort(stray) is None  # nothing is signalled: this test process lives on


def test_a_run_whose_supervisor_never_started_is_failed_in_its_state_and_the_index(tmp_path, index):
    run = tmp_path / "run"
    run.mkdir()
    (run / record.SUPERVISOR_LOG).write_text("ModuleNotFoundError: boom\n")
    reg = Registry(index)
    with reg.locked():
        reg.add({"run_dir": str(run), "source": "cli", "supervisor_pid": 999_999_999, "supervisor_ctime": 1.0,
                 "device_kind": "cpu", "devices": [0, 1]})
    st = runner.JobManager(index=index).state(run)
    assert st.status == "failed" and "boom" in st.message
    assert read_state(run).status == "failed"  # no supervisor holds its lock: the reader wrote the truth
    assert reg.entry(run)["outcome"]["status"] == "failed"


def test_an_end_only_the_index_could_take_reaches_state_json_at_a_later_look(tmp_path, index, monkeypatch):
    """The supervisor's last word went into the index (its run folder's disk was full): state.json still says
    running. Each look tries to write the end there, under the state's lock; the first that the disk takes wins."""
    from zeroboard.runs import state as statemod

    run = tmp_path / "run"
    run.mkdir()
    write_state(JobState(run_dir=str(run), status="running", supervisor_pid=999_999_999, supervisor_ctime=1.0))
    statemod.set_reserve(run)  # the dead supervisor's room for its last word, left behind
    assert (run / record.STATE_RESERVE).stat().st_size == statemod.RESERVE_BYTES
    end = JobState(run_dir=str(run), status="failed", ended=time.time(), supervisor_pid=999_999_999, supervisor_ctime=1.0,
                   message=runner.say("run.disk_full", path=str(run), why="No space left on device"))
    reg = Registry(index)
    with reg.locked():
        reg.add({"run_dir": str(run), "source": "cli", "supervisor_pid": 999_999_999, "supervisor_ctime": 1.0,
                 "device_kind": "cpu", "devices": [0, 1], "outcome": end.to_json()})
    mgr = runner.JobManager(index=index)
    real = statemod.write_state

    def full(state):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(statemod, "write_state", full)
    assert mgr.state(run).status == "failed"  # the page and the CLI say the end from the index meanwhile
    assert read_state(run).status == "running"
    monkeypatch.setattr(statemod, "write_state", real)  # the disk has room again
    st = mgr.state(run)
    assert st.status == "failed" and read_state(run).to_json() == st.to_json() == reg.entry(run)["outcome"]
    assert "full" in read_state(run).message and not (run / record.STATE_RESERVE).exists()


def test_another_workspaces_cpu_job_holds_the_cpu_unless_the_cpu_is_shared(tmp_path, monkeypatch):
    """The device guard sees a trainer no index of this workspace knows (a real process whose command line is a
    trainer's); ZEROBOARD_CPU_SHARED lets CPU jobs of two workspaces run side by side, never into one folder."""
    import subprocess
    import sys

    theirs = (tmp_path / "theirs").resolve()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", command.TRAINER_MODULE,
                              "--output_dir", str(theirs)], env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    try:
        wait_for(lambda: any(out == theirs for _, out in processes.live_trainers()), 30, "the other trainer to show")
        monkeypatch.delenv(executor.CPU_SHARED_ENV, raising=False)
        busy = executor.foreign_holder("cpu", [0, 1], (tmp_path / "mine").resolve(), 0, set(), False)
        assert busy is not None and busy.key == "run.busy_other"
        monkeypatch.setenv(executor.CPU_SHARED_ENV, "1")
        assert executor.foreign_holder("cpu", [0, 1], (tmp_path / "mine").resolve(), 0, set(), False) is None
        assert executor.foreign_holder("cpu", [0, 1], theirs, 0, set(), False).key == "run.busy_other_folder"
    finally:
        other.kill()
        other.wait()


# --- end to end: real launcher processes (torchrun, the supervisor), ranks running the stand-in trainer ----------


@pytest.mark.e2e
def test_job_finishes_and_leaves_its_record(tmp_path, index):
    mgr = runner.JobManager(index=index)
    st = mgr.start(standin_for(tmp_path / "run", max_steps=10))
    assert st.status == "running" and st.launcher_pid
    st = ended(mgr, st.run_dir)
    assert st.status == "finished", st.message
    assert st.exit_code == 0
    run = Path(st.run_dir)
    for name in (record.STATE_FILE, record.COMMAND_FILE, record.SPEC_FILE, record.LOG_FILE, record.RESULT_FILE):
        assert (run / name).is_file(), name
    log = (run / record.LOG_FILE).read_text()
    assert "[rank0]:" in log and "[rank1]:" in log  # every line says which rank wrote it
    assert mgr.run_dirs()[0] == st.run_dir
    assert json.loads((run / record.RESULT_FILE).read_text())["deepspeed_stage"] == "none"
    assert_nothing_left(st)


@pytest.mark.e2e
def test_abort_from_a_restarted_manager_leaves_no_process(tmp_path, index):
    first = runner.JobManager(index=index, grace_s=20)
    st = first.start(standin_for(tmp_path / "run", max_steps=5000))
    first_log_event(st.run_dir)

    with pytest.raises(runner.Busy, match="already running on CPU processes"):
        first.start(standin_for(tmp_path / "other", max_steps=10))

    # a new manager (as after a web server restart) finds the running job on disk
    second = runner.JobManager(index=index, grace_s=20)
    found = second.current()
    assert found is not None and found.run_dir == st.run_dir and found.status == "running"
    # its ranks, as the supervisor records them once a second (rank 0 may log a step before that)
    wait_for(lambda: {r["rank"] for r in second.current().ranks} >= {0, 1}, 30, "both ranks in the record")
    second.abort(st.run_dir)
    st = ended(second, st.run_dir, 90)
    assert st.status == "aborted", st.message
    assert st.leftover == []
    assert any("SIGTERM" in e["msg"] for e in st.stop_log)
    assert any("verified: no process of the job is left" in e["msg"] for e in st.stop_log)
    log = (Path(st.run_dir) / record.LOG_FILE).read_text()
    # torchrun's report of our SIGTERM (a SignalException traceback) is one line, so the log does not end like a crash
    assert "SignalException" not in log and "not a crash" in log and "Traceback" not in log
    assert_nothing_left(st)


@pytest.mark.e2e
def test_abort_still_works_when_the_supervisor_was_killed(tmp_path, index):
    mgr = runner.JobManager(index=index, grace_s=20)
    st = mgr.start(standin_for(tmp_path / "run", max_steps=5000))
    first_log_event(st.run_dir)
    os.kill(st.supervisor_pid, signal.SIGKILL)
    wait_for(lambda: processes.proc(st.supervisor_pid, st.supervisor_ctime) is None, 30, "the supervisor to die")
    assert mgr.state(st.run_dir).status == "running"  # the job itself runs on
    mgr.abort(st.run_dir)
    st = ended(mgr, st.run_dir, 90)
    assert st.status == "aborted" and st.leftover == []
    assert processes.job_processes(st) == []
    assert Registry(index).entry(st.run_dir)["outcome"]["status"] == "aborted"
    assert read_state(st.run_dir).status == "aborted"  # the dead supervisor's "running" is replaced by the truth


@pytest.mark.e2e
def test_a_hung_rank_shows_as_stalled_and_a_killed_rank_is_reported_within_seconds(tmp_path, index, monkeypatch, capsys):
    mgr = runner.JobManager(index=index, grace_s=20)
    # stalled after 2 s without progress at the least (the stand-in's steps take a twentieth of a second)
    st = mgr.start(standin_for(tmp_path / "run", max_steps=5000, stall_factor=5.0, stall_min_s=2.0))
    first_log_event(st.run_dir)
    # the supervisor records the ranks once a second: rank 0 may log its first step before rank 1 is in the record
    victim = wait_for(lambda: next((r for r in mgr.state(st.run_dir).ranks if r["rank"] == 1), None), 30,
                      "rank 1 in the run's record")
    # rank 1 hangs (SIGSTOP): rank 0 waits for it at the next logged step; the run is stalled, naming rank 1, everywhere
    os.kill(victim["pid"], signal.SIGSTOP)
    try:
        st = wait_for(lambda: (s := mgr.state(st.run_dir)).status == "stalled" and s.stall["ranks"] == [1]
                      and s.stall["silent"] and s, 60, "the run to show as stalled on rank 1")
        assert read_state(st.run_dir).status == "stalled" and "rank 1" in st.message and "Abort" in st.message
        snap = Live(mgr).snapshot(st.run_dir)
        assert snap.status == "stalled" and "rank 1" in snap.status_md
        monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(index))
        assert cli_main(["runs", "--json"]) == 0
        (listed,) = json.loads(capsys.readouterr().out)
        assert listed["status"] == "stalled" and "rank 1" in listed["message"]
    finally:
        os.kill(victim["pid"], signal.SIGCONT)
    # it moves again: running, with a note of the stall
    st = wait_for(lambda: (s := mgr.state(st.run_dir)).status == "running" and s, 60, "the run to move again")
    assert any("stalled from" in n and "rank 1" in n for n in st.notes), st.notes
    # then rank 1 is killed: the run fails within seconds, naming it
    os.kill(victim["pid"], signal.SIGKILL)
    t0 = time.time()
    st = ended(mgr, st.run_dir, 60)
    assert time.time() - t0 < 30
    assert st.status == "failed" and st.failed_rank == 1, st.message
    assert st.exit_code not in (0, None)
    assert "SIGKILL" in st.message and st.error_lines
    assert_nothing_left(st)


@pytest.mark.e2e
def test_a_python_error_is_reported_with_rank_and_traceback_and_a_taken_port_is_replaced(tmp_path, index):
    # rank 1 raises at its third step (the real trainer's error path: test_train_e2e.py's failing rank)
    prepared = standin_for(tmp_path / "run", max_steps=50, knobs={"fail": "1:3"})
    taken = prepared.command.master_port
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        s.listen()
        mgr = runner.JobManager(index=index)
        st = mgr.start(prepared)
        assert st.master_port != taken and any(str(taken) in n for n in st.notes)
    st = ended(mgr, st.run_dir)
    assert st.status == "failed" and st.failed_rank == 1, st.message
    assert "stand-in failure on rank 1 at step 3" in st.message
    assert any("RuntimeError" in line for line in st.error_lines)
    assert str(st.master_port) in (Path(st.run_dir) / record.COMMAND_FILE).read_text()
    assert_nothing_left(st)
