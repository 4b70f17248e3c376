"""A run's state on disk: ``RUN_DIR/state.json``, with one writer at a time.

The run's supervisor writes it, holding ``state.lock`` for as long as it
lives.  Once it is gone -- killed, or its machine restarted -- the lock is
free, and whoever finds the run first (a page, ``zeroboard runs``) takes the
lock and writes the run's true end (:func:`settle`): no reader sees
``running`` for a run that is not.  Messages are catalog sentences, stored
with their key and values so each reader says them in its own language.

The last word must reach the file even when the run's disk is full: the
supervisor sets room aside when it starts (``state.reserve``) and whoever
writes the end gives that room back first (:func:`release_reserve`); an end
that still could not be written is kept in the runs index, and each later
look writes it here once the disk takes it (``JobManager.state``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import files, words
from ..job.record import STATE_FILE, STATE_LOCK, STATE_RESERVE, WORKER_FILE

# stalled: running, but no progress for longer than the job allows (runs.stall); it goes back to running when it moves
ACTIVE = ("starting", "running", "stalled", "stopping")  # then finished, failed, aborted or lost
STATUSES = (*ACTIVE, "finished", "failed", "aborted", "lost")
GRACE_S = 30.0  # after SIGTERM, before SIGKILL (torchrun itself waits 30 s for its ranks)
# Start waits this long for the supervisor to report the launcher's pid, then returns the run as "starting":
# the run goes on and the page or the CLI keeps following it (nothing is marked failed for being slow).
LAUNCH_WAIT_S = 30.0
RESERVE_BYTES = 256 << 10  # room for the last word: a state.json is a few KiB (its file list, at most a few dozen)


@dataclass
class JobState:
    run_dir: str
    status: str = "starting"  # one of STATUSES
    message: str = ""  # a catalog Msg (plain text from older records)
    source: str = "page"  # who started it: page or cli
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
    stop_log: list[dict] = field(default_factory=list)  # {"at": "HH:MM:SS", "msg": catalog Msg}
    leftover: list[int] = field(default_factory=list)
    grace_s: float = GRACE_S
    trainer_dir: str = ""  # the trainer's output_dir (events, weights): the run dir itself, except on nodes 1..N-1
    node_rank: int = 0  # of a job on several machines: this machine's part of it
    events_offset: int = 0  # where this run's lines start in files an earlier attempt may have left
    log_offset: int = 0
    notes: list[str] = field(default_factory=list)
    files: list[str] | None = None  # the top-level names of what the run wrote (set when it ends)
    written: list[str] | None = None  # every path the run wrote, relative to its folder (job.manifest); None: unknown
    run_id: str = ""  # the id its folder's marker and the runs index hold
    executor: str = "local"  # where the job's processes run: "local" (this machine) or "slurm" (a cluster)
    slurm: dict = field(default_factory=dict)  # a Slurm job: job_id, state, reason, position, nodes
    kind: str = "train"  # "train": a training run; "chat": a chat worker (its own word in worker.json)
    stall: dict = field(default_factory=dict)  # while stalled: ranks, silent, step, since, limit_s (runs.stall)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def path(self) -> Path:
        return Path(self.run_dir)

    @property
    def output(self) -> Path:
        """Where the trainer writes (events.jsonl, checkpoints, the result)."""
        return Path(self.trainer_dir or self.run_dir)

    def log_stop(self, msg: str) -> None:
        self.stop_log.append({"at": time.strftime("%H:%M:%S"), "msg": msg})

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["message"], data["error"] = words.to_json(self.message), words.to_json(self.error)
        data["notes"] = [words.to_json(n) for n in self.notes]
        data["stop_log"] = [{"at": e["at"], "msg": words.to_json(e["msg"])} for e in self.stop_log]
        return data


_KNOWN = {f.name for f in dataclasses.fields(JobState)}


def from_json(data: dict) -> JobState:
    st = JobState(**{k: v for k, v in data.items() if k in _KNOWN})
    st.message, st.error = words.from_json(st.message), words.from_json(st.error)
    st.notes = [words.from_json(n) for n in st.notes]
    st.stop_log = [{"at": e.get("at", ""), "msg": words.from_json(e.get("msg", ""))} if isinstance(e, dict)
                   else {"at": "", "msg": str(e)} for e in st.stop_log]
    return st


def _valid(data: object) -> bool:
    try:
        from_json(data)
    except (TypeError, AttributeError, KeyError, ValueError):
        return False
    return True


def read_state(run_dir: str | Path, held: bool = False) -> JobState | None:
    """The run's state; None when there is none or it cannot be read.  One that is not what a writer of it writes
    is kept aside (:mod:`..files`) when no supervisor holds the state's lock (``held``: the caller holds it):
    a live supervisor writes the truth over it at its next save."""
    path = Path(run_dir) / STATE_FILE
    try:
        data = files.load_state(path, _valid)
    except files.CannotRead:
        return None
    except files.Garbage:
        _keep_aside(path, held)
        return None
    return from_json(data) if data is not None else None


def _keep_aside(path: Path, held: bool) -> None:
    with contextlib.nullcontext(True) if held else writer_gone(path.parent) as free:
        if not free:
            return
        try:
            files.load_state(path, _valid)
        except files.Garbage:  # still: no write of a writer was under way
            with contextlib.suppress(OSError):
                files.keep_aside(path)
        except files.CannotRead:
            pass


def kept_aside(run_dir: str | Path) -> Path | None:
    """The latest copy of the run's state.json kept aside as unreadable, if any."""
    found = files.kept(Path(run_dir) / STATE_FILE)
    return found[-1] if found else None


def read_worker(run_dir: str | Path) -> dict:
    """A chat worker's own word (``worker.json``): status, what it holds, its memory, where it listens; {} if none."""
    try:
        data = json.loads((Path(run_dir) / WORKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def worker_unloads_in(info: dict) -> float | None:
    """Seconds until a chat worker unloads itself if nobody asks it anything, from its worker.json (its idle_s and
    the end of its last request); None while it loads (or for a worker.json that does not say)."""
    last, idle = info.get("last_request"), info.get("idle_s")
    if info.get("status") != "ready" or not isinstance(last, (int, float)) or not isinstance(idle, (int, float)):
        return None
    return max(0.0, last + idle - time.time())


def write_state(state: JobState) -> None:
    """The supervisor's write (it holds the lock). Raises OSError (a full disk, say); the old file stays whole."""
    files.write_text_atomic(state.path / STATE_FILE, json.dumps(state.to_json(), indent=2, ensure_ascii=False) + "\n")


def hold_lock(run_dir: str | Path) -> int:
    """The supervisor's lock on its run's state, held until its process ends (the kernel drops it then, however it
    ends). Returns the descriptor; it is not inherited by the processes the supervisor starts."""
    fd = os.open(Path(run_dir) / STATE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def set_reserve(run_dir: str | Path) -> None:
    """Set room aside in the run folder for the run's last word (nothing when the disk has none to give)."""
    path = Path(run_dir) / STATE_RESERVE
    try:
        with open(path, "wb") as fh:
            fh.write(bytes(RESERVE_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()


def release_reserve(run_dir: str | Path) -> None:
    """Give the room back (just before the last word is written, which may need it)."""
    with contextlib.suppress(OSError):
        (Path(run_dir) / STATE_RESERVE).unlink()


@contextlib.contextmanager
def writer_gone(run_dir: str | Path):
    """Yields True while holding the state's lock when no supervisor holds it (the writer is gone), else False."""
    try:
        fd = os.open(Path(run_dir) / STATE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def settle(state: JobState) -> bool:
    """Write the end of a run whose supervisor is gone into its own state.json; False when it could not (its
    supervisor holds the lock after all, it recorded its own end meanwhile, or the disk refuses)."""
    with writer_gone(state.path) as free:
        if not free:
            return False
        now = read_state(state.path, held=True)  # a damaged one is kept aside before this write
        if now is not None and not now.active:
            return True  # its last word arrived after all
        release_reserve(state.path)  # the room its writer set aside, for this very write
        try:
            write_state(state)
        except OSError:
            return False
        return True
