"""The run record: the files a run folder holds, and its event stream.

A run folder (the job's ``output_dir``) keeps everything about one run next to
its outputs: the job as asked for and as resolved, the exact command, the
DeepSpeed config, the plan, the supervisor's state, the launcher's log, the
event stream and the result.  Their names live here, in one place.

The event stream is JSON lines in ``OUTPUT_DIR/events.jsonl``, written by the trainer (rank 0 for progress, any
rank for its own error), read incrementally by the CLI and the web UI.  Each line is one JSON object: ``v`` (the
format's version), ``event`` (its kind), ``time`` (seconds since the epoch), and the kind's fields:

- ``compile``: op (a DeepSpeed op rank 0 compiles before training; first use on this machine only)
- ``compiled``: op, seconds
- ``stale_lock``: op (the build lock a stopped compile left was removed)
- ``trackers``: trackers (one per experiment tracker: tracker, path, open -- where it writes, the command that
  shows it), before anything else is loaded
- ``data``: rank, built (this rank tokenized; False: it read the cache), seconds, samples, eval_samples, tokens,
  truncated, answer_lost, skipped, cache (one per rank)
- ``start``: world_size, devices (one entry per rank), total_steps, since_launch, speedups
- ``log``: step, total_steps, loss, lr, epoch, grad_norm, tokens_per_sec, tokens, elapsed, eta, memory (per rank)
- ``eval``: step, total_steps, eval_loss, runtime, samples_per_second
- ``save``: step, path
- ``stop``: step, total_steps ("save and stop" was asked for: a checkpoint, then the final result)
- ``memory``: step, memory (per rank), at the end of training: the run's peaks
- ``end``: status ("finished"), result (what was saved)
- ``error``: rank, message, traceback

``events.schema.json`` (next to this module) checks a line of any version; ``docs/en/events.md`` describes the
format for readers of their own.  Versions:

- 1: no ``v`` field (ZeroBoard up to commit c5a4bbe).
- 2: ``v`` on every line; the ``trackers`` kind, and ``trackers`` in the end's result.

Readers go through :func:`parse` (or :func:`read_events`), which reads every version this project has written
and hands each event over in the current format, its ``v`` saying which version it was written in.  A new version
adds kinds or fields; one that renames or removes a field adds a step to ``UPGRADES`` that rewrites older lines.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

EVENTS_FILE = "events.jsonl"
VERSION = 2  # of the event lines this ZeroBoard writes (see above)
SCHEMA_FILE = Path(__file__).with_name("events.schema.json")
JOB_FILE = "job.yaml"  # the job as the trainer resolved it
SPEC_FILE = "job.requested.yaml"  # the job as it was asked for
OWNER_FILE = "zeroboard_run.json"  # the ownership marker: written first, names the run id the runs index holds
COMMAND_FILE = "command.json"  # the exact argv, environment and working folder
LAUNCH_FILE = "launch.json"  # who asked for the run, and what its supervisor needs to know
SUPERVISOR_LOG = "supervisor.log"  # the supervisor's own output
STATE_FILE = "state.json"  # the run's state: its supervisor writes it, or -- once that is gone -- whoever settles it
STATE_LOCK = "state.lock"  # held by the supervisor for its life: whoever else writes state.json must take it first
STATE_RESERVE = "state.reserve"  # room the supervisor sets aside for the run's last word (freed to write it on a full disk)
HEARTBEAT_FILE = "heartbeat"  # each rank's sign of life and progress, one fixed slot per rank (job.heartbeat)
LOG_FILE = "launcher.log"  # everything the launcher and its ranks printed
TRAIN_LOG = "train.log"  # rank 0's own log
PLAN_FILE = "plan.json"  # the memory plan made at launch
RESULT_FILE = "zeroboard_result.json"  # what was saved, written last by a finished run
STOP_REQUEST = "stop.request"  # "save and stop": asked for by a manager, read by every rank at its next log
SBATCH_FILE = "job.sbatch"  # a Slurm job: the script submitted
DS_CONFIG_FILE = "ds_config.json"
DS_RESOLVED_FILE = "ds_config.resolved.json"
WORKER_FILE = "worker.json"  # a chat worker's own word: loading or ready, what it holds, its memory, where it listens
# every file ZeroBoard itself writes into a run folder: a folder holding only these (and checkpoints) is a run's
RECORD_FILES = (OWNER_FILE, EVENTS_FILE, JOB_FILE, SPEC_FILE, COMMAND_FILE, LAUNCH_FILE, SUPERVISOR_LOG, STATE_FILE, STATE_LOCK,
                STATE_RESERVE, HEARTBEAT_FILE, LOG_FILE, TRAIN_LOG, PLAN_FILE, RESULT_FILE, STOP_REQUEST, DS_CONFIG_FILE,
                DS_RESOLVED_FILE, SBATCH_FILE)


class EventWriter:
    def __init__(self, output_dir: str | Path, rank: int):
        self.path = Path(output_dir) / EVENTS_FILE
        self.rank = rank

    def emit(self, kind: str, **fields) -> dict:
        event = {"v": VERSION, "event": kind, "time": time.time(), **fields}
        line = json.dumps(event, ensure_ascii=False, default=str) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write() of an O_APPEND file: lines of different ranks do not interleave.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return event


class Tail:
    """Reads new complete lines of a growing file, remembering its offset.

    A file replaced by a new one (another inode: the supervisor rewrites the launcher log once a run is over)
    or truncated is read again from ``start``; ``restarted`` says so, so a reader can drop what it kept.
    """

    def __init__(self, path: str | Path, start: int = 0):
        self.path = Path(path)
        self.start = self.offset = start
        self._partial = b""
        self._inode: int | None = None
        self.restarted = False

    def read_lines(self, max_bytes: int | None = 4 << 20) -> list[str]:
        """New complete lines since the last call; at most ``max_bytes`` (None: all) are read."""
        try:
            with self.path.open("rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_size < self.offset or (self._inode is not None and st.st_ino != self._inode):
                    self.offset, self._partial, self.restarted = min(self.start, st.st_size), b"", True
                self._inode = st.st_ino
                fh.seek(self.offset)
                chunk = fh.read(-1 if max_bytes is None else max_bytes)
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [ln.decode("utf-8", errors="replace") for ln in lines]


def _v1_to_v2(event: dict) -> dict:
    if event.get("event") == "end" and isinstance(event.get("result"), dict):
        event["result"].setdefault("trackers", [])  # a run before trackers used none
    return event


# version -> how an event of that version becomes one of the next
UPGRADES: dict[int, Callable[[dict], dict]] = {1: _v1_to_v2}


def upgrade(event: dict) -> dict:
    """An event of any version this project wrote, in the current format; ``v``: the version it was written in."""
    written = event.get("v", 1)
    event.setdefault("v", written)
    version = written if isinstance(written, int) else VERSION
    while version < VERSION:
        event = UPGRADES.get(version, lambda e: e)(event)
        version += 1
    return event


def parse(lines: list[str]) -> list[dict]:
    """Events from JSON lines of any version (a malformed line, such as one cut by a crash, is skipped)."""
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(upgrade(event))
    return out


def last_loss(events: list[dict]) -> float | None:
    """The training loss of the last logged step: what the Runs tab and the output check both call a run's train
    loss (the trainer's ``train_loss`` in result.json is the mean over the whole run, a different number)."""
    return next((e["loss"] for e in reversed(events) if e.get("event") == "log" and isinstance(e.get("loss"), (int, float))), None)


def read_events(path: str | Path) -> list[dict]:
    """All events of a finished or running run."""
    return parse(Tail(Path(path)).read_lines(max_bytes=None))
