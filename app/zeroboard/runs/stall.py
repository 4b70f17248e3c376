"""Is the run still moving?  The supervisor's watch over its ranks' heartbeats (``job.heartbeat``).

A run is **stalled** when it has not moved for ``stall_factor`` times its recent step time, and at least
``stall_min_s`` seconds: no rank finished a step, a micro-step or an evaluation batch in that time -- or a rank
gave no sign of life at all for that long (its heartbeat thread did not run: the process is stopped, or stuck
holding the interpreter; then it is that rank which is named, and the others only wait for it).  Nothing is judged
before the ranks know their step time (the first steps: compiling, warming up), and a checkpoint being saved or
the work after the last step (the final evaluation and save) go at their own pace: only a rank that gives no sign
of life is a stall then.  A stalled run is not stopped: it is shown as stalled with the ranks that have not moved,
and goes back to running when it moves again (Abort is the user's to choose).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from ..job import heartbeat, record
from ..words import Msg, say
from .state import JobState

SILENT_BEATS = 5  # a rank is silent after this many missed beats at the least (a loaded machine delays a few)
MOVING = ("train", "eval")  # phases that go at the pace of a step
NOTES_KEPT = 3  # stalls that ended, told in the run's notes


@dataclass(frozen=True)
class Stall:
    ranks: list[int]  # the ranks that have not moved
    silent: bool  # they gave no sign of life (else: alive, but no rank moved)
    step: int  # the last step they finished
    since: float  # when they were last heard of (silent), or when the run last moved
    limit_s: float  # the time without progress that makes a stall, for this run now


def settings(job) -> dict:
    """What the supervisor's watch needs of a job (written into launch.json)."""
    return {"factor": float(job.stall_factor), "min_s": float(job.stall_min_s)}


def judge(beats: list[dict], now: float, factor: float, min_s: float, started: float = 0.0) -> Stall | None:
    """The stall the heartbeats show at ``now`` (None: the run moves, or it is too early to say). Beats older than
    ``started`` are an earlier attempt's."""
    beats = [b for b in beats if b["beat"] >= started]
    times = [b["step_s"] for b in beats if isinstance(b.get("step_s"), (int, float)) and b["step_s"] > 0]
    if factor <= 0 or not times:
        return None
    limit = max(min_s, factor * statistics.median(times))
    silent = [b for b in beats if now - b["beat"] > max(limit, SILENT_BEATS * heartbeat.BEAT_S)]
    if silent:
        return Stall(sorted(b["rank"] for b in silent), True, min(_step(b) for b in silent),
                     min(b["beat"] for b in silent), limit)
    if any(b.get("phase") not in MOVING for b in beats):
        return None
    last = max(_at(b) for b in beats)
    if now - last <= limit:
        return None
    low = min(_step(b) for b in beats)
    return Stall(sorted(b["rank"] for b in beats if _step(b) == low), False, low, last, limit)


def _step(beat: dict) -> int:
    return beat["step"] if isinstance(beat.get("step"), int) else 0


def _at(beat: dict) -> float:
    return beat["at"] if isinstance(beat.get("at"), (int, float)) else beat["beat"]


def message(found: Stall, factor: float) -> Msg:
    ranks = ", ".join(map(str, found.ranks))
    since = time.strftime("%H:%M:%S", time.localtime(found.since))
    if found.silent:
        return say("run.stalled_silent", ranks=ranks, since=since, step=found.step)
    return say("run.stalled", ranks=ranks, since=since, step=found.step, limit=round(found.limit_s),
               factor=f"{factor:g}")


class Watch:
    """The supervisor's look at its run, once a second: running <-> stalled, in the state it writes."""

    def __init__(self, given: dict | None):
        given = given or {}
        self.factor = float(given.get("factor", 0.0))  # a run started before stall watching: not watched
        self.min_s = float(given.get("min_s", 0.0))
        self.before: Msg | str = ""  # the message a stall replaced
        self.named: list[int] = []  # the ranks this stall is about: the first named, or the first silent ones

    def look(self, st: JobState, now: float | None = None) -> bool:
        """Judge the run now and change ``st`` to say so; True when it changed (the state is to be written)."""
        if st.status not in ("running", "stalled") or st.kind != "train":
            return False
        now = now or time.time()
        found = judge(heartbeat.read(st.output / record.HEARTBEAT_FILE), now, self.factor, self.min_s,
                      st.started or 0.0)
        if found is None:
            if st.status != "stalled":
                return False
            over = say("run.stall_over", ranks=", ".join(map(str, self.named or st.stall.get("ranks", []))),
                       since=time.strftime("%H:%M:%S", time.localtime(st.stall.get("since") or now)),
                       until=time.strftime("%H:%M:%S", time.localtime(now)))
            earlier = [i for i, n in enumerate(st.notes) if getattr(n, "key", "") == "run.stall_over"]
            if len(earlier) >= NOTES_KEPT:  # a run that stalls again and again: the latest episodes are told
                del st.notes[earlier[0]]
            st.notes.append(over)
            st.status, st.message, st.stall = "running", self.before or say("run.running"), {}
            return True
        same = st.status == "stalled" and (st.stall.get("ranks"), st.stall.get("silent")) == (found.ranks, found.silent)
        if same and getattr(st.message, "key", "").startswith("run.stalled"):
            return False  # the same stall, told already
        if st.status == "running":
            self.before, self.named = st.message, found.ranks
        if not same:
            if found.silent and not st.stall.get("silent"):
                self.named = found.ranks  # which rank holds the others up, once it is known
            st.stall = asdict(found)
        st.status, st.message = "stalled", message(Stall(**st.stall), self.factor)  # (a message rewritten meanwhile: again)
        return True
