"""The supervisor of one run: ``python -m zeroboard.runs.supervisor RUN_DIR``, in a session of its own.

Process layout::

    web UI server or ``zeroboard train`` (either may exit any time)
      └─ supervisor (this module)                     own session, sole writer of RUN_DIR/state.json
           └─ launcher: exactly command.json's argv    own session (torchrun / deepspeed)
                └─ ranks (torchrun puts each in its own session too)

The supervisor is the launcher's parent, so it sees the exit code and records
it in ``state.json`` whether or not anyone is watching.  SIGTERM or SIGINT
asks it to stop the job (graceful, then SIGKILL after the grace period, then a
check that nothing is left); SIGHUP is ignored (closing a terminal must not
stop a job the page started).  A disk error while it records the run (the
run's disk is full) ends the run as failed with that reason: room set aside at
the start (``state.reserve``) is given back for that last word, which also goes
into the runs index (and only there when even so the run folder takes nothing:
the next look at the run writes it into state.json once the disk has room).
Once a second it also judges from the ranks' heartbeats whether the run still
moves (:mod:`.stall`): stalled, naming the ranks that have not moved, and back
to running when it moves again; it stops nothing for that.  A chat
worker (launch.json's ``kind: chat``) is supervised the same way; its entry
in the runs index is removed when it ends.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from .. import files
from ..job import checks, manifest, record, spec as specmod
from ..job.registry import Registry
from ..planner.record import record_plan
from ..words import Msg, from_json, say
from . import executors, outcome, stall
from .state import JobState, hold_lock, release_reserve, set_reserve, write_state

RANK_FAIL_GRACE_S = 10.0  # a rank reported an error: give the launcher this long to stop the others
SIGNAL_REPORT = "SignalException"
TRACEBACK = "Traceback ("  # torchrun's own report of the stop signal: a traceback that is no crash


class Supervisor:
    def __init__(self, run_dir: Path, stop_asked: threading.Event):
        self.run = run_dir
        try:  # the state's lock, held for this process's life: while it is held, nobody else writes state.json
            self.lock = hold_lock(run_dir)
        except OSError:  # a full disk cannot even make the lock: the end goes into the index (finish)
            self.lock = None
        set_reserve(run_dir)  # room for the last word, should the disk fill up meanwhile
        self.cmd = json.loads((run_dir / record.COMMAND_FILE).read_text(encoding="utf-8"))
        launch = json.loads((run_dir / record.LAUNCH_FILE).read_text(encoding="utf-8"))
        self.registry = Registry(launch["index"])
        me = psutil.Process()
        self.state = JobState(run_dir=str(run_dir), message=say("run.starting"), source=launch.get("source", "page"),
                              launcher=launch.get("launcher", "torchrun"), device_kind=self.cmd["device_kind"],
                              devices=list(self.cmd["devices"]), master_port=self.cmd["master_port"],
                              supervisor_pid=me.pid, supervisor_ctime=me.create_time(), started=launch["requested"],
                              grace_s=launch.get("grace_s", 30.0), events_offset=launch.get("events_offset", 0),
                              log_offset=launch.get("log_offset", 0), trainer_dir=launch.get("trainer_dir", ""),
                              node_rank=launch.get("node_rank", 0), notes=[from_json(n) for n in launch.get("notes", [])],
                              kind=launch.get("kind", "train"), run_id=launch.get("run_id", ""))
        self.stall = stall.Watch(launch.get("stall"))
        self.executor = executors.for_command(self.cmd)
        self.state.executor = self.executor.name
        self.disk_error: Msg | None = None
        self.stop_asked = stop_asked
        self.log = open(run_dir / record.LOG_FILE, "ab", buffering=0)  # noqa: SIM115 - the launcher writes into it too
        self.unplanned = self.state.node_rank == 0 and not (run_dir / record.PLAN_FILE).is_file()

    # --- recording --------------------------------------------------------------------------------
    def save(self) -> None:
        """Write state.json; a disk error is kept as the cause that ends the run (it can record nothing more)."""
        try:
            write_state(self.state)
        except OSError as e:
            if self.disk_error is None:
                self.disk_error = say("run.disk_error", path=str(self.run / record.STATE_FILE), why=e.strerror or str(e))
                _stderr(self.disk_error)

    def note(self, msg: str) -> None:
        """A step of the stop (or the end), in state.json's stop log and in the launcher log."""
        self.state.log_stop(msg)
        self.write_log(f"[zeroboard] {msg}\n")

    def write_log(self, text: str) -> None:
        try:
            self.log.write(text.encode())
        except OSError:  # the run's disk is full: state.json (or the index) still says what happened
            pass

    # --- the run ----------------------------------------------------------------------------------
    def run_job(self) -> int:
        st = self.state
        self.save()
        self.write_log(f"[zeroboard] $ {self.cmd['shell']}\n")
        try:
            self.executor.launch(st, self.cmd, self.log)
        except OSError as e:
            st.status, st.error, st.ended = "failed", say("run.cannot_start", argv0=self.cmd["argv"][0], why=str(e)), time.time()
            st.message = st.error
            self.note(st.error)
            self.finish()
            return 1
        st.status, st.message = "running", say("run.running")
        self.executor.follow(st)  # then the executor's own word, if it has one (Slurm: waiting in its queue, and why)
        self.save()
        code, evs, stop_at = self.watch()
        st.ended = time.time()
        left = self.executor.left(st)
        if left:  # e.g. the launcher died and orphaned its ranks
            self.note(say("run.orphans", how=outcome.exit_text(code), n=len(left)))
            st.leftover = self.executor.stop(st, self.note)
        cause = self.disk_error or (_disk_problem(self.run) if code not in (0, None) and not st.abort_requested else None)
        outcome.conclude(st, code, evs, cause)
        if st.status == "aborted" and stop_at is not None:
            self.log.close()
            _rewrite_log(self.run / record.LOG_FILE, stop_at)
            self.log = open(self.run / record.LOG_FILE, "ab", buffering=0)  # noqa: SIM115 - the new file
        self.note(say("run.ended", message=st.message, how=outcome.exit_text(code)))
        self.finish()
        return 0

    def watch(self) -> tuple[int | None, list[dict], int | None]:
        """Follow the job until it ends; stop it when asked, when a rank failed, or on a disk error."""
        st = self.state
        tail = record.Tail(st.output / record.EVENTS_FILE)
        tail.offset = st.events_offset
        evs: list[dict] = []
        error_seen: float | None = None
        last_scan, stop_at = 0.0, None
        while (code := self.executor.poll(st)) is None:
            new = record.parse(tail.read_lines())
            evs += new
            if self.unplanned and any(e.get("event") == "data" for e in new):
                self.plan_late()
            if error_seen is None and any(e.get("event") == "error" for e in new):
                error_seen = time.time()
                outcome.failure_details(st, evs)
                st.message = say("run.rank_failed_stopping", rank=st.failed_rank, why=st.error)
                self.save()
            if time.time() - last_scan > 1.0:
                last_scan = time.time()
                followed = self.executor.follow(st)
                if self.stall.look(st) or followed:
                    self.save()
            rank_stuck = error_seen is not None and time.time() - error_seen > RANK_FAIL_GRACE_S
            if (self.stop_asked.is_set() or rank_stuck or self.disk_error) and st.status != "stopping":
                if self.stop_asked.is_set() and not self.disk_error:
                    st.abort_requested, st.message = time.time(), say("run.stopping")
                elif self.disk_error:
                    self.note(self.disk_error)
                else:
                    self.note(say("run.rank_stuck", rank=st.failed_rank, seconds=round(RANK_FAIL_GRACE_S)))
                st.status = "stopping"
                stop_at = _size(self.run / record.LOG_FILE)
                self.save()
                st.leftover = self.executor.stop(st, self.note)
                self.save()
            time.sleep(0.2)
        return code, evs + record.parse(tail.read_lines()), stop_at

    def plan_late(self) -> None:
        """A run on a built-in model that was not built yet at launch has no plan (the planner reads its config.json):
        plan it once the first rank has built the model and gone on to the data. Once; no plan is no harm."""
        self.unplanned = False
        try:
            job = specmod.load_yaml(self.run / record.SPEC_FILE)
        except (OSError, specmod.SpecError):
            return
        if checks.is_demo_model(job.model_name_or_path):
            record_plan(job, self.run)

    def finish(self) -> None:
        """The last word: into state.json (the room set aside is given back for it first), and into the runs index
        when the run ended for a disk error or state.json could not take it (from there, the next look writes it
        into state.json)."""
        release_reserve(self.run)
        self.state.files, self.state.written = manifest.at_end(self.run)  # what the run wrote: its own files from now on
        written = False
        try:
            write_state(self.state)
            written = True
        except OSError as e:
            _stderr(say("run.disk_error", path=str(self.run / record.STATE_FILE), why=e.strerror or str(e)))
        try:
            if not written or _disk_cause(self.state):
                self.registry.update(self.state.run_dir, outcome=self.state.to_json())
        except Exception as err:  # nowhere left to write: the supervisor's own log may still have it
            _stderr(f"{type(err).__name__}: {err}")
        finally:
            try:
                self.log.close()
            except OSError:
                pass
            if self.state.kind == "chat":  # a chat worker is listed while it holds its devices, not after
                try:
                    self.registry.remove(self.state.run_dir)
                except Exception as err:  # its state.json says it ended: the guard passes it by anyway
                    _stderr(f"{type(err).__name__}: {err}")


def _stderr(text: str) -> None:
    """The supervisor's own log (its stderr, in the run folder): on a full disk even that may fail, and must not stop it."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def _disk_cause(st: JobState) -> bool:
    """The run ended for a disk error (its folder's disk is suspect: the index keeps a copy of the end)."""
    return st.status == "failed" and getattr(st.error, "key", "") in ("run.disk_full", "run.disk_error")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _disk_problem(run: Path) -> Msg | None:
    """After a failure: is the run's disk full (or read-only)? Then that is the cause, whatever the ranks could log."""
    probe = run / ".zeroboard-disk-probe"
    try:
        files.write_text_atomic(probe, "x" * 4096)
        probe.unlink()
    except OSError as e:
        if files.is_disk_error(e):
            return say("run.disk_full", path=str(run), why=e.strerror or str(e))
    return None


def drop_signal_report(lines: list[str]) -> list[str] | None:
    """The lines without torchrun's traceback for the stop signal (a SignalException), one note in its place;
    None when there is none.  It is torchrun reporting the SIGTERM we sent, not a crash, yet it reads like one."""
    end = max((i for i, ln in enumerate(lines) if SIGNAL_REPORT in ln), default=None)
    if end is None:
        return None
    begin = max((i for i, ln in enumerate(lines[:end]) if ln.lstrip().startswith(TRACEBACK)), default=end)
    return lines[:begin] + [f"[zeroboard] {say('run.signal_report')}\n"] + lines[end + 1:]


def _rewrite_log(log_path: Path, start: int) -> None:
    """Drop the stop's report from the log, as a new file put in place whole (readers see a new file and reread)."""
    try:
        data = log_path.read_bytes()
        head, tail = data[:start], data[start:].decode("utf-8", errors="replace").splitlines(keepends=True)
        kept = drop_signal_report(tail)
        if kept is not None:
            files.write_bytes_atomic(log_path, head + "".join(kept).encode())
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(say("run.supervisor_usage"), file=sys.stderr)
        return 2
    stop_asked = threading.Event()  # before anything else: a stop asked for during start-up is not lost
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_asked.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return Supervisor(Path(argv[0]), stop_asked).run_job()


if __name__ == "__main__":
    sys.exit(main())
