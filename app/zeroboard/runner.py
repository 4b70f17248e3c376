"""Run a prepared job in the background, keep its record on disk, stop it for sure.

Process layout::

    web UI server (may restart any time)
      └─ supervisor: python -m zeroboard.runner supervise RUN_DIR    own session, owns state.json
           └─ launcher: exactly Command.argv (torchrun / deepspeed)  own session
                └─ ranks (torchrun puts each in its own session too)

The supervisor is the launcher's parent, so it sees the exit code and records
it in ``RUN_DIR/state.json`` whether or not a web UI is running.  The web UI
reads state.json, asks the supervisor to stop (SIGTERM), and only acts on the
processes itself when the supervisor is gone.  A registry of run dirs (a small
JSON file in the cache dir) lets a restarted UI find its jobs again.

Light on purpose (stdlib + psutil): the web server and the supervisor import it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from . import command, events, planner, spec as specmod

STATE_FILE = "state.json"
COMMAND_FILE = "command.json"
SPEC_FILE = "job.requested.yaml"  # the trainer writes the resolved job.yaml next to it
LOG_FILE = "launcher.log"
SUPERVISOR_LOG = "supervisor.log"

ACTIVE = ("starting", "running", "stopping")  # then finished, failed, aborted or lost
GRACE_S = 30.0  # after SIGTERM, before SIGKILL (torchrun itself waits 30 s for its ranks)
RANK_FAIL_GRACE_S = 10.0  # a rank reported an error: give the launcher this long to stop the others
ERROR_LINES = 20


def index_path() -> Path:
    return Path(os.environ.get("ZEROBOARD_RUNS_INDEX") or command.cache_dir() / "webui" / "runs.json")


# --- state on disk ------------------------------------------------------------------

@dataclass
class JobState:
    run_dir: str
    status: str = "starting"  # starting, running, stopping, finished, failed, aborted, lost
    message: str = ""
    launcher: str = "torchrun"
    device_kind: str = "cpu"
    devices: list[int] = field(default_factory=list)
    master_port: int = 0
    supervisor_pid: int | None = None
    supervisor_ctime: float | None = None
    launcher_pid: int | None = None
    launcher_ctime: float | None = None
    ranks: list[dict] = field(default_factory=list)  # {"pid", "rank", "ctime"} of every process seen
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    failed_rank: int | None = None
    error: str = ""
    error_lines: list[str] = field(default_factory=list)
    abort_requested: float | None = None
    stop_log: list[str] = field(default_factory=list)
    leftover: list[int] = field(default_factory=list)
    grace_s: float = GRACE_S
    events_offset: int = 0  # where this run's lines start in files an earlier attempt may have left
    log_offset: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def path(self) -> Path:
        return Path(self.run_dir)


def read_state(run_dir: str | Path) -> JobState | None:
    try:
        data = json.loads((Path(run_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    known = {f.name for f in dataclasses.fields(JobState)}
    return JobState(**{k: v for k, v in data.items() if k in known})


def write_state(state: JobState) -> None:
    path = state.path / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(state), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


# --- processes of a job -------------------------------------------------------------

def _proc(pid: int | None, ctime: float | None) -> psutil.Process | None:
    """The process with this pid if it is still the one we started (pids get reused)."""
    if not pid:
        return None
    try:
        p = psutil.Process(pid)
        if ctime is not None and abs(p.create_time() - ctime) > 0.05:
            return None
        return p if p.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _trainer_of(p: psutil.Process, run_dir: Path) -> bool:
    """Is p a zeroboard.train process writing into run_dir (found by its command line)?"""
    try:
        cmd = p.cmdline()
        if "zeroboard.train" not in cmd or "--output_dir" not in cmd:
            return False
        out = Path(cmd[cmd.index("--output_dir") + 1])
        return (out if out.is_absolute() else Path(p.cwd()) / out).resolve() == run_dir.resolve()
    except (psutil.Error, IndexError, OSError):
        return False


def job_processes(state: JobState) -> list[psutil.Process]:
    """Every live process of the job: the launcher's tree, every pid recorded, and any trainer of this run dir."""
    found: dict[int, psutil.Process] = {}
    launcher = _proc(state.launcher_pid, state.launcher_ctime)
    if launcher is not None:
        found[launcher.pid] = launcher
        with contextlib.suppress(psutil.Error):
            found.update((c.pid, c) for c in launcher.children(recursive=True))
    for r in state.ranks:
        p = _proc(r["pid"], r.get("ctime"))
        if p is not None:
            found[p.pid] = p
    me = os.getpid()
    for p in psutil.process_iter():
        if p.pid not in found and p.pid != me and _trainer_of(p, state.path):
            found[p.pid] = p
    return [p for p in found.values() if _alive(p)]


def rank_processes(state: JobState) -> list[dict]:
    """The launcher's descendants with their rank (from the RANK variable each rank gets)."""
    launcher = _proc(state.launcher_pid, state.launcher_ctime)
    if launcher is None:
        return []
    out = []
    with contextlib.suppress(psutil.Error):
        for c in launcher.children(recursive=True):
            try:
                rank = c.environ().get("RANK")
                out.append({"pid": c.pid, "rank": int(rank) if rank is not None else None, "ctime": c.create_time()})
            except (psutil.Error, ValueError):
                continue
    return out


def _signal(p: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
        p.send_signal(sig)


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_job(state: JobState, say, reap=None) -> list[int]:
    """Graceful stop, SIGKILL after the grace period, then check; returns pids still alive.

    torchrun: SIGTERM to torchrun only (it forwards to the ranks; killing it first
    would orphan them).  deepspeed launcher: SIGTERM to its whole process group.
    ``reap`` (the launcher's Popen.poll when we are its parent) clears its zombie.
    """
    reap = reap or (lambda: None)
    launcher = _proc(state.launcher_pid, state.launcher_ctime)
    procs = job_processes(state)
    if launcher is not None:
        if state.launcher == "deepspeed":
            say(f"SIGTERM to the deepspeed launcher's process group {launcher.pid}")
            _killpg(launcher.pid, signal.SIGTERM)
        else:
            say(f"SIGTERM to {state.launcher} (pid {launcher.pid}); it forwards the signal to the ranks")
            _signal(launcher, signal.SIGTERM)
    else:
        say(f"launcher gone; SIGTERM to {len(procs)} remaining process(es) {[p.pid for p in procs]}")
        for p in procs:
            _signal(p, signal.SIGTERM)
    left = _wait_gone(state, state.grace_s, reap)
    if left:
        say(f"still running after {state.grace_s:.0f} s: SIGKILL to {[p.pid for p in left]} and their groups")
        mine = os.getpgrp()
        for p in left:
            with contextlib.suppress(psutil.Error, OSError):
                if (pg := os.getpgid(p.pid)) != mine:
                    _killpg(pg, signal.SIGKILL)
            _signal(p, signal.SIGKILL)
        left = _wait_gone(state, 10.0, reap)
    pids = sorted(p.pid for p in left)
    say("verified: no process of the job is left" if not pids else f"processes still alive: {pids}")
    return pids


def _wait_gone(state: JobState, timeout: float, reap) -> list[psutil.Process]:
    deadline = time.time() + timeout
    while True:
        reap()
        left = job_processes(state)
        if not left or time.time() >= deadline:
            return left
        time.sleep(0.2)


# --- what went wrong ----------------------------------------------------------------

ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def tail_lines(path: Path, n: int, start: int = 0) -> list[str]:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(start, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-n:]


def failure_details(state: JobState, evs: list[dict]) -> None:
    """Which rank failed first and why: torchrun's root-cause summary, the ranks' error events, the log."""
    log_tail = tail_lines(state.path / LOG_FILE, 300, state.log_offset)
    text = "\n".join(log_tail)
    root = ROOT_CAUSE.search(text)
    errors = [e for e in evs if e.get("event") == "error"]
    errors = [e for e in errors if "interrupted" not in str(e.get("message", ""))] or errors
    rank = int(root.group(1)) if root else (errors[0].get("rank") if errors else None)
    # torchrun orders failures it sees in one poll by rank: a rank killed by a signal (not torchrun's own
    # SIGTERM) is the cause, and ranks that then lost their connection to it are not
    summary = text[text.find("ChildFailedError"):] if "ChildFailedError" in text else ""
    codes = {int(r): int(c) for r, c in FAILURE.findall(summary)}  # the root cause's entry is among them
    killed = [r for r, c in codes.items() if c < 0 and c != -signal.SIGTERM]
    if killed and rank not in killed:
        rank = killed[0]
    event = next((e for e in errors if e.get("rank") == rank), None)
    state.failed_rank = rank
    if event is not None:
        state.error = str(event.get("message", ""))
        tb = [ln for ln in str(event.get("traceback", "")).splitlines() if ln.strip()]
        state.error_lines = tb[-ERROR_LINES:] or log_tail[-ERROR_LINES:]
        return
    if rank in codes:  # died without a word (e.g. killed): its own last lines and torchrun's summary
        state.error = f"rank {rank} {_exit_text(codes[rank])}"
        own = [ln for ln in log_tail if ln.startswith(f"[rank{rank}]:")]
        state.error_lines = (own[-5:] + log_tail[-15:]) if own else log_tail[-ERROR_LINES:]
        return
    state.error_lines = log_tail[-ERROR_LINES:]


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0 and -code in signal.valid_signals():
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def conclude(state: JobState, code: int | None, evs: list[dict]) -> None:
    """Final status from the exit code, the events and whether an abort was asked for."""
    state.exit_code = code
    state.ended = state.ended or time.time()
    ended = any(e.get("event") == "end" for e in evs)
    if ended and code in (0, None):
        state.status, state.message = "finished", "finished"
    elif state.abort_requested:
        state.status = "aborted"
        state.message = "aborted" + ("" if not state.leftover else f"; processes still alive: {state.leftover}")
    elif code == 0:
        state.status, state.message = "finished", "finished (exit code 0, no end event)"
    else:
        state.status = "failed" if code is not None or any(e.get("event") == "error" for e in evs) else "lost"
        failure_details(state, evs)
        who = f"rank {state.failed_rank}" if state.failed_rank is not None else "the launcher"
        why = state.error.removeprefix(f"{who} ")
        state.message = f"failed ({_exit_text(code)}): {who}" + (f": {why}" if why else "")


# --- the supervisor (a process of its own) ------------------------------------------

def supervise(run_dir: str | Path) -> int:
    run = Path(run_dir)
    state = read_state(run)
    cmd = json.loads((run / COMMAND_FILE).read_text(encoding="utf-8"))
    stop_asked = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_asked.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    me = psutil.Process()
    state.supervisor_pid, state.supervisor_ctime = me.pid, me.create_time()

    log = open(run / LOG_FILE, "ab", buffering=0)  # noqa: SIM115 - the launcher writes into it until it exits

    def say(msg: str) -> None:
        state.stop_log.append(f"{time.strftime('%H:%M:%S')} {msg}")
        log.write(f"[zeroboard] {msg}\n".encode())

    log.write(f"[zeroboard] $ {cmd['shell']}\n".encode())
    try:
        proc = subprocess.Popen(cmd["argv"], env={**os.environ, **cmd["env"]}, cwd=cmd["cwd"], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        state.status, state.error = "failed", f"cannot start {cmd['argv'][0]}: {e}"
        state.message, state.ended = state.error, time.time()
        write_state(state)
        say(state.error)
        return 1
    state.launcher_pid, state.launcher_ctime = proc.pid, psutil.Process(proc.pid).create_time()
    state.status, state.message = "running", "running"
    write_state(state)

    tail = events.Tail(run / events.EVENTS_FILE)
    tail.offset = state.events_offset
    evs: list[dict] = []
    error_seen: float | None = None
    last_scan = 0.0
    while (code := proc.poll()) is None:
        new = events.parse(tail.read_lines())
        evs += new
        if error_seen is None and any(e.get("event") == "error" for e in new):
            error_seen = time.time()
            failure_details(state, evs)
            state.message = f"rank {state.failed_rank} failed: {state.error}; stopping the other ranks"
            write_state(state)
        if time.time() - last_scan > 1.0:
            last_scan = time.time()
            if _merge_ranks(state, rank_processes(state)):
                write_state(state)
        rank_stuck = error_seen is not None and time.time() - error_seen > RANK_FAIL_GRACE_S
        if (stop_asked.is_set() or rank_stuck) and state.status != "stopping":
            if stop_asked.is_set():
                state.abort_requested, state.message = time.time(), "stopping"
            else:
                say(f"rank {state.failed_rank} failed {RANK_FAIL_GRACE_S:.0f} s ago and the launcher still runs")
            state.status = "stopping"
            write_state(state)
            state.leftover = stop_job(state, say, reap=proc.poll)
            write_state(state)
        time.sleep(0.2)

    evs += events.parse(tail.read_lines())
    state.ended = time.time()
    left = job_processes(state)
    if left:  # e.g. the launcher died and orphaned its ranks
        say(f"launcher exited ({_exit_text(code)}) but {len(left)} process(es) remain: stopping them")
        state.leftover = stop_job(state, say)
    conclude(state, code, evs)
    say(f"{state.message} ({_exit_text(code)})")
    write_state(state)
    log.close()
    return 0


def _merge_ranks(state: JobState, seen: list[dict]) -> bool:
    known = {r["pid"] for r in state.ranks}
    new = [r for r in seen if r["pid"] not in known]
    state.ranks += new
    return bool(new)


# --- the manager the web UI holds ---------------------------------------------------

class Busy(RuntimeError):
    """Another job runs on (some of) the same devices."""


class JobManager:
    """Starts, finds and stops jobs; every fact lives in the run dirs, so any number of instances agree."""

    def __init__(self, index: str | Path | None = None, grace_s: float = GRACE_S):
        self.index = Path(index) if index else index_path()
        self.grace_s = grace_s
        self._lock = threading.Lock()

    # registry ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked_index(self):
        self.index.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.index.with_suffix(".lock"), "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            yield

    def run_dirs(self) -> list[str]:
        try:
            return [str(r) for r in json.loads(self.index.read_text(encoding="utf-8")).get("runs", [])]
        except (OSError, ValueError, AttributeError):
            return []

    def _register(self, run_dir: str) -> None:
        runs = [r for r in self.run_dirs() if r != run_dir and Path(r, STATE_FILE).is_file()]
        runs = [run_dir, *runs][:100]
        tmp = self.index.with_suffix(".tmp")
        tmp.write_text(json.dumps({"runs": runs}, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.index)

    # queries -------------------------------------------------------------------------
    def state(self, run_dir: str | Path) -> JobState | None:
        """The job's state, settled when its supervisor is gone (e.g. killed) and so is the launcher."""
        st = read_state(run_dir)
        if st is None or not st.active:
            return st
        if st.supervisor_pid is None:  # between launch and the supervisor's first word
            if time.time() - (st.started or 0) < 120:
                return st
            st.status, st.ended, st.message = "failed", time.time(), "the supervisor never started; see supervisor.log"
            write_state(st)
            return st
        if _proc(st.supervisor_pid, st.supervisor_ctime) is not None:
            return st
        st = read_state(run_dir)  # it may have written its last word just before exiting
        if st is None or not st.active or _proc(st.launcher_pid, st.launcher_ctime) is not None:
            return st
        if job_processes(st):
            return st
        evs = events.parse(events.Tail(st.path / events.EVENTS_FILE).read_lines(1 << 30))
        st.notes.append("the supervisor was gone before the job ended: exit code unknown")
        conclude(st, None, [e for e in evs if e.get("time", 0) >= (st.started or 0)])
        write_state(st)
        return st

    def jobs(self) -> list[JobState]:
        return [s for s in (self.state(r) for r in self.run_dirs()) if s is not None]

    def active(self) -> list[JobState]:
        return [s for s in self.jobs() if s.active]

    def current(self) -> JobState | None:
        """What a fresh page should show: a running job, else the latest one."""
        jobs = self.jobs()
        return next((s for s in jobs if s.active), jobs[0] if jobs else None)

    # actions -------------------------------------------------------------------------
    def start(self, prepared: command.Prepared) -> JobState:
        """Launch the prepared command under a supervisor. Raises Busy or RuntimeError."""
        cmd = prepared.command
        if cmd is None:
            raise RuntimeError("the job has errors; nothing was started")
        run = (Path(cmd.cwd) / prepared.spec.output_dir).resolve()
        with self._locked_index():
            for other in self.active():
                if _overlap(other, cmd):
                    raise Busy(busy_message(other))
            cmd, notes = settle_port(prepared.spec, cmd)
            run.mkdir(parents=True, exist_ok=True)
            (run / SPEC_FILE).write_text(specmod.dump_yaml(prepared.spec), encoding="utf-8")
            (run / COMMAND_FILE).write_text(json.dumps(cmd.to_dict(), indent=2) + "\n", encoding="utf-8")
            planner.record_plan(prepared.spec, run)  # plan.json: the estimate, next to what the trainer measures
            state = JobState(run_dir=str(run), message="starting", launcher=prepared.spec.launcher,
                             device_kind=cmd.device_kind, devices=list(cmd.devices), master_port=cmd.master_port,
                             started=time.time(), grace_s=self.grace_s, notes=notes,
                             events_offset=_size(run / events.EVENTS_FILE), log_offset=_size(run / LOG_FILE))
            write_state(state)
            self._register(str(run))
            with open(run / SUPERVISOR_LOG, "ab") as err:
                sup = subprocess.Popen([sys.executable, "-m", "zeroboard.runner", "supervise", str(run)],
                                       cwd=cmd.cwd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                       start_new_session=True)
            threading.Thread(target=sup.wait, daemon=True).start()  # reap it when it ends
            return self._await_launch(run, sup)

    def _await_launch(self, run: Path, sup: subprocess.Popen, timeout: float = 30.0) -> JobState:
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = read_state(run)
            if st is not None and (st.launcher_pid or not st.active):
                return st
            if sup.poll() is not None:
                break
            time.sleep(0.05)
        st = read_state(run)
        if st is not None and st.status == "starting":
            st.status, st.ended = "failed", time.time()
            st.error = "the supervisor did not start: " + " ".join(tail_lines(run / SUPERVISOR_LOG, 5))
            st.message = st.error
            write_state(st)
        return st

    def abort(self, run_dir: str | Path) -> JobState | None:
        """Ask the job to stop; returns at once (the supervisor escalates and verifies)."""
        st = self.state(run_dir)
        if st is None or not st.active:
            return st
        sup = _proc(st.supervisor_pid, st.supervisor_ctime)
        if sup is not None:
            _signal(sup, signal.SIGTERM)
            return st
        # No supervisor: stop the processes from here, in the background.
        st.abort_requested, st.status, st.message = time.time(), "stopping", "stopping"
        write_state(st)
        threading.Thread(target=self._stop_here, args=(st,), daemon=True).start()
        return st

    def _stop_here(self, st: JobState) -> None:
        st.leftover = stop_job(st, lambda m: st.stop_log.append(f"{time.strftime('%H:%M:%S')} {m}"))
        conclude(st, None, [])
        write_state(st)


def settle_port(job: specmod.JobSpec, cmd: command.Command) -> tuple[command.Command, list[str]]:
    """A previewed master port taken since is replaced and said so; a port the user fixed is never changed."""
    if job.node_rank != 0 or command.port_is_free(cmd.master_port):  # other nodes bind nothing locally
        return cmd, []
    if job.master_port:  # several nodes (or the user) agreed on this port: changing it would strand them
        raise RuntimeError(f"master_port {cmd.master_port} is in use on this machine; free it or choose another")
    new = command.free_port()
    return command.with_port(cmd, new), [f"master port {cmd.master_port} was taken at start; using {new}"]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _overlap(job: JobState, cmd: command.Command) -> bool:
    if job.device_kind != cmd.device_kind:
        return False
    return job.device_kind == "cpu" or bool(set(job.devices) & set(cmd.devices))


def busy_message(job: JobState) -> str:
    what = "CPU processes" if job.device_kind == "cpu" else "GPU " + ",".join(map(str, job.devices))
    return (f"A job is already running on {what}: {job.run_dir} ({job.status}, launcher pid {job.launcher_pid}). "
            "Abort it or wait for it to end.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "supervise":
        return supervise(argv[1])
    print("usage: python -m zeroboard.runner supervise RUN_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
