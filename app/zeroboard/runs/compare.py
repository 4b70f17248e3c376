"""Runs side by side: their curves overlaid, the job fields that differ, and the memory/speed table of a course.

The course's lesson is such a comparison -- the same job under DeepSpeed
stage none, 2, 3 and 3 + offload -- so :func:`course_rows` puts, per run, the
measured peak per device, the plan's figure for it, tokens/s and the time of
one step in one row.  Curves come from the whole event stream of each chosen
run (cached by file size and time, as the summaries are).  Plain values only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..job import spec as specmod
from .summary import CACHE, FileCache, RunSummary, all_events, job_values

# the run's name (its folder) heads each column; output_dir is that name again, and resume says how it was started
NOT_COMPARED = ("output_dir",)


# a preference run's rewards (its log events' ``rewards``): the margin and the accuracy are what runs are judged by
REWARDS = ("chosen", "rejected", "margins", "accuracies")


def points(events: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """(step, value) of the training loss, the evaluation loss, the learning rate and (preference stages) the
    rewards of the chosen and the rejected answers, their margin and accuracy, by step.

    A resumed run logs again from its checkpoint: a step logged twice keeps its later value."""
    series: dict[str, dict[int, float]] = {"loss": {}, "eval_loss": {}, "lr": {}, **{k: {} for k in REWARDS}}
    for e in events:
        kind, step = e.get("event"), e.get("step")
        if not isinstance(step, int):
            continue
        if kind == "log":
            for key in ("loss", "lr"):
                if isinstance(e.get(key), (int, float)):
                    series[key][step] = float(e[key])
            rewards = e.get("rewards") if isinstance(e.get("rewards"), dict) else {}
            for key in REWARDS:
                if isinstance(rewards.get(key), (int, float)):
                    series[key][step] = float(rewards[key])
        elif kind == "eval" and isinstance(e.get("eval_loss"), (int, float)):
            series["eval_loss"][step] = float(e["eval_loss"])
    return {k: sorted(v.items()) for k, v in series.items()}


def curves(runs: list[RunSummary], cache: FileCache = CACHE) -> dict[str, list[tuple[int, float]]]:
    """For each run (by its folder), its points: ``{run_dir: {"loss": [...], "eval_loss": [...], "lr": [...]}}``."""
    return {s.run_dir: points(all_events(Path(s.output or s.run_dir), cache)) for s in runs}


@dataclass
class Diff:
    names: list[str]  # the runs' folders, in the order asked
    fields: list[tuple[str, list]] = field(default_factory=list)  # (field, its value in each run), only where they differ
    unreadable: list[str] = field(default_factory=list)  # runs without a readable job record


def spec_diff(run_dirs: list[str], cache: FileCache = CACHE) -> Diff:
    """The job fields whose values differ between the runs (their requested jobs, defaults filled in)."""
    jobs, diff = [], Diff(list(run_dirs))
    for r in run_dirs:
        values = job_values(r, cache)
        if values is None:
            diff.unreadable.append(r)
        jobs.append(values or {})
    readable = [j for j in jobs if j]
    for name in specmod.FIELDS:
        if name in NOT_COMPARED:
            continue
        values = [j.get(name) for j in jobs]
        if len(readable) > 1 and any(j.get(name) != readable[0].get(name) for j in readable):
            diff.fields.append((name, values))
    return diff


@dataclass
class CourseRow:
    run_dir: str
    stage: str
    offload: bool
    devices: int
    device_kind: str
    peaks: list[int]  # measured, per device (bytes)
    planned: int | None  # the plan's per-device figure (bytes)
    tokens_per_sec: float | None
    step_time: float | None
    status: str
    peak_kind: str

    @property
    def worst(self) -> int | None:
        return max(self.peaks) if self.peaks else None

    @property
    def error(self) -> float | None:
        """(plan - measured) / measured of the highest device, as the Train page's plan comparison says it."""
        return (self.planned - self.worst) / self.worst if self.planned and self.worst else None


STAGE_ORDER = {"none": 0, "2": 1, "3": 2}


def course_rows(runs: list[RunSummary], by_setting: bool = True) -> list[CourseRow]:
    """One row per run: measured peak per device, planned, tokens/s, step time (by stage, then offload)."""
    rows = [CourseRow(s.run_dir, s.stage, s.offload, len(s.devices) or 1, s.device_kind, list(s.peaks), s.planned_bytes,
                      s.tokens_per_sec, s.step_time, s.status, s.peak_kind) for s in runs]
    if by_setting:
        rows.sort(key=lambda r: (STAGE_ORDER.get(r.stage, 9), r.offload))
    return rows


def last_rewards(curves_of_run: dict[str, list[tuple[int, float]]]) -> dict[str, float] | None:
    """A preference run's last logged rewards (chosen, rejected, margin, accuracy), None for SFT."""
    last = {k: curves_of_run[k][-1][1] for k in REWARDS if curves_of_run.get(k)}
    return last or None
