"""The run record: the files a run folder holds, and its event stream.

A run folder (the job's ``output_dir``) keeps everything about one run next to
its outputs: the job as asked for and as resolved, the exact command, the
DeepSpeed config, the plan, the supervisor's state, the launcher's log, the
event stream and the result.  Their names live here, in one place.

The event stream is JSON lines in ``OUTPUT_DIR/events.jsonl``, written by the trainer (rank 0 for progress, any rank for its own error),
read incrementally by the CLI and the web UI.  Kinds:

- ``compile``: op (a DeepSpeed op rank 0 compiles before training; first use on this machine only)
- ``compiled``: op, seconds
- ``stale_lock``: op (the build lock a stopped compile left was removed)
- ``start``: world_size, devices (one entry per rank), total_steps
- ``log``: step, total_steps, loss, lr, epoch, tokens_per_sec, elapsed, eta, memory (per rank)
- ``data``: rank, built (this rank tokenized; False: it read the cache), seconds, samples, eval_samples, tokens,
  truncated, answer_lost, skipped, cache (one per rank)
- ``eval``: step, total_steps, eval_loss, runtime, samples_per_second
- ``save``: step, path
- ``memory``: step, memory (per rank), at the end of training: the run's peaks
- ``end``: status ("finished"), result (what was saved)
- ``error``: rank, message, traceback
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

EVENTS_FILE = "events.jsonl"
JOB_FILE = "job.yaml"  # the job as the trainer resolved it
SPEC_FILE = "job.requested.yaml"  # the job as it was asked for
OWNER_FILE = "zeroboard_run.json"  # the ownership marker: written first, names the run id the runs index holds
COMMAND_FILE = "command.json"  # the exact argv, environment and working folder
LAUNCH_FILE = "launch.json"  # who asked for the run, and what its supervisor needs to know
SUPERVISOR_LOG = "supervisor.log"  # the supervisor's own output
STATE_FILE = "state.json"  # the run's state: its supervisor writes it, or -- once that is gone -- whoever settles it
STATE_LOCK = "state.lock"  # held by the supervisor for its life: whoever else writes state.json must take it first
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
                LOG_FILE, TRAIN_LOG, PLAN_FILE, RESULT_FILE, STOP_REQUEST, DS_CONFIG_FILE, DS_RESOLVED_FILE, SBATCH_FILE)


class EventWriter:
    def __init__(self, output_dir: str | Path, rank: int):
        self.path = Path(output_dir) / EVENTS_FILE
        self.rank = rank

    def emit(self, kind: str, **fields) -> dict:
        event = {"event": kind, "time": time.time(), **fields}
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


def parse(lines: list[str]) -> list[dict]:
    """Events from JSON lines (a malformed line, such as one cut by a crash, is skipped)."""
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def read_events(path: str | Path) -> list[dict]:
    """All events of a finished or running run."""
    return parse(Tail(Path(path)).read_lines(max_bytes=None))
