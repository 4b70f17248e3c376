"""Each rank's sign of life and progress: ``OUTPUT_DIR/heartbeat``, one fixed-size slot per rank.

Every rank of a training run has a thread that rewrites its own slot every ``BEAT_S`` seconds
(``training.heartbeat``), in place at ``rank * SLOT``: no temporary file, no rename, no new space after the
first beat (a rank on a full disk still beats), and no two ranks ever write the same byte.  A slot is one JSON
object padded with spaces to ``SLOT`` bytes, the last one a newline; a slot never written reads as NUL bytes and
a slot read while it is being rewritten may come out torn: both are skipped (the next read has it).

A slot's fields: ``rank``, ``pid``, ``host``; ``beat`` -- when the thread last wrote (the process is alive and
runs Python); ``step`` -- the last optimizer step this rank finished; ``at`` -- when it last moved (a step, a
micro-step, an evaluation batch, a finished save); ``phase`` -- train, eval, save or end (after the last step:
the final evaluation and save); ``step_s`` -- the median time of its recent steps (None until a few are known).
The run's supervisor reads them to tell a run that has stopped moving, and which rank has not moved
(``runs.stall``).

Light (stdlib only): the supervisor and the trainer import it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SLOT = 256  # bytes per rank
BEAT_S = 2.0  # seconds between two beats of a rank
MAX_RANKS = 8192  # a file longer than this many slots is not read past them


def write(path: str | Path, rank: int, data: dict) -> None:
    """Rewrite ``rank``'s slot of the heartbeat file at ``path`` (made when missing). Raises OSError or ValueError."""
    raw = json.dumps(data, separators=(",", ":"), default=str).encode()
    if len(raw) >= SLOT:  # (the fields are fixed and short: a schema bug)
        raise ValueError(len(raw), SLOT)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.pwrite(fd, raw.ljust(SLOT - 1) + b"\n", rank * SLOT)
    finally:
        os.close(fd)


def read(path: str | Path) -> list[dict]:
    """The slots of the ranks that have beaten (rank order); a missing file is none."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(SLOT * MAX_RANKS)
    except OSError:
        return []
    beats = []
    for rank, start in enumerate(range(0, len(data), SLOT)):
        try:
            beat = json.loads(data[start:start + SLOT].strip(b"\0 \n") or b"null")
        except ValueError:  # torn by a write in progress (or never written): the next read has it
            continue
        if isinstance(beat, dict) and beat.get("rank") == rank and isinstance(beat.get("beat"), (int, float)):
            beats.append(beat)
    return beats
