"""This rank's heartbeat: a thread that writes where the rank is, every ``BEAT_S`` seconds, into its slot of
``OUTPUT_DIR/heartbeat`` (the format: ``job.heartbeat``).

The trainer's callback tells it of every move (:meth:`Heartbeat.step_end` and the others); the thread writes on
its own clock, so a rank that is blocked in a collective, waiting for another, still beats, while a rank that is
stopped (SIGSTOP, a debugger) or stuck holding the interpreter does not: the supervisor can tell which rank has not
moved.  The step time it reports is the median of the recent steps that had no evaluation or save in them, so
the supervisor's limit follows the run's own pace.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from collections import deque
from pathlib import Path

from ..job import heartbeat, record

RECENT = 20  # steps whose times make the median
KNOWN_AFTER = 3  # step times needed before the rank reports one (the first steps warm up)


class Heartbeat(threading.Thread):
    def __init__(self, output_dir: str | Path, rank: int, period: float = heartbeat.BEAT_S):
        super().__init__(name="zeroboard-heartbeat", daemon=True)
        self.path = Path(output_dir) / record.HEARTBEAT_FILE
        self.rank, self.period = rank, period
        now = time.time()
        self.slot = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname()[:40], "beat": now, "step": 0,
                     "at": now, "phase": "train", "step_s": None}
        self.times: deque[float] = deque(maxlen=RECENT)
        self.last_step: float | None = None  # when the last step ended, if nothing but training followed it
        self.pending: set[str] = set()  # after this step: "eval", "save" (the Trainer's own plan for it)
        self._stop_event = threading.Event()

    # --- what the trainer tells it (cheap: no I/O here) -------------------------------------------------------
    def step_end(self, step: int, evaluate: bool, save: bool) -> None:
        now = time.time()
        if self.last_step is not None:
            self.times.append(now - self.last_step)
        self.pending = {p for p, on in (("eval", evaluate), ("save", save)) if on}
        self.last_step = None if self.pending else now  # a step time never includes an evaluation or a save
        known = len(self.times) >= KNOWN_AFTER
        self.slot.update(step=step, at=now, phase="eval" if evaluate else "save" if save else "train",
                         step_s=round(statistics.median(self.times), 4) if known else None)

    def moved(self) -> None:
        """A micro-step of gradient accumulation, or an evaluation batch: progress within a step."""
        self.slot["at"] = time.time()

    def done(self, what: str) -> None:
        """An evaluation or a save is over: what is left of the plan, else training again."""
        self.pending.discard(what)
        now = time.time()
        if self.slot["phase"] == "end":  # the final evaluation, after training
            self.slot["at"] = now
            return
        self.slot.update(at=now, phase="save" if "save" in self.pending else "train")
        if not self.pending:
            self.last_step = now

    def end(self) -> None:
        """Training is over: the final evaluation and save follow (their own pace, not a step's)."""
        self.slot.update(at=time.time(), phase="end")

    # --- the thread -------------------------------------------------------------------------------------------
    def run(self) -> None:
        self.write()
        while not self._stop_event.wait(self.period):
            self.write()

    def write(self) -> None:
        self.slot["beat"] = time.time()
        try:
            heartbeat.write(self.path, self.rank, dict(self.slot))
        except (OSError, ValueError):  # a full disk: the run's end says so, not a missing beat
            pass

    def stop(self) -> None:
        self._stop_event.set()
