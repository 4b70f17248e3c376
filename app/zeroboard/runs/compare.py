"""Runs side by side: their curves overlaid, the job fields that differ, and the memory/speed table of a course.

The course's lesson is such a comparison -- the same job under DeepSpeed
stage none, 2, 3 and 2 + offload -- so :func:`course_rows` puts, per run, the
measured peak per device, the plan's figure for it, tokens/s and the time of
one step in one row.  A run on CPU processes also gets the plan of the same job
on as many GPUs (:func:`gpu_plan`): where the device is the host, offload has
nowhere to move the states to, and the GPU figure is where the offload row
teaches.  :func:`parts_placed` says, per setting, where the weights, gradients
and optimizer states live; :func:`coinciding` finds the runs whose loss curves
draw as one line.  Curves come from the whole event stream of each chosen run
(cached by file size and time, as the summaries are).  Plain values only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import planner
from ..job import devices, placement, record, spec as specmod
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


# --- the same job planned on GPUs -----------------------------------------------------------------

# The GPU a run of CPU processes is planned on: the card the planner's terms and speeds were measured on. The bytes
# hardly depend on the card (bf16 on every GPU since Ampere; the capacity only decides whether it fits).
REFERENCE_GPU = "NVIDIA H200"
REFERENCE_GPU_BYTES = 141 << 30
REFERENCE_GPU_SHORT = "H200"


def reference_gpus(n: int) -> list[devices.Gpu]:
    return [devices.Gpu(i, REFERENCE_GPU, REFERENCE_GPU_BYTES, REFERENCE_GPU_BYTES, 0, 0, (9, 0)) for i in range(n)]


def gpu_plan(run_dir: str | Path, n: int, output: str | Path | None = None) -> planner.Plan | None:
    """The run's job planned on ``n`` reference GPUs, with the DeepSpeed config the run itself used (its
    ``ds_config.json``: a preset with the values ZeroBoard set for it), so that only the device changes. None when the
    job cannot be read or planned."""
    try:
        job = specmod.load_yaml(Path(run_dir) / record.SPEC_FILE)
    except specmod.SpecError:
        return None
    used = Path(output or run_dir) / record.DS_CONFIG_FILE
    if job.deepspeed_stage != "none" and used.is_file():
        job = replace(job, deepspeed=str(used))
    job = replace(job, device_type="cuda", gpu_ids=[], num_nodes=1, slurm_partition="")
    try:
        return planner.estimate(job, reference_gpus(max(1, n)))
    except planner.PlanError:
        return None


# where each part of the model states lives under a setting (the course's table, and offload's moves)
REPLICATED, PARTITIONED, OFFLOADED = "replicated", "partitioned", "offloaded"
PARTS = ("weights", "gradients", "optimizer states")


def parts_placed(stage: str, offload_optimizer: bool, offload_param: bool) -> dict[str, str]:
    """Per part of the model states: replicated on every device, partitioned over them, or offloaded to CPU memory
    (partitioned there). Activations are not among them: each device keeps those of its own micro-batch."""
    split = {"none": 0, "0": 0, "1": 1, "2": 2, "3": 3}.get(stage, 0)
    where = {"optimizer states": PARTITIONED if split >= 1 else REPLICATED,
             "gradients": PARTITIONED if split >= 2 else REPLICATED,
             "weights": PARTITIONED if split >= 3 else REPLICATED}
    if offload_optimizer:  # the optimizer step runs on the CPU: its states, and the gradient partitions it reads
        where["optimizer states"] = where["gradients"] = OFFLOADED
    if offload_param:
        where["weights"] = OFFLOADED
    return where


@dataclass
class GpuFigure:
    """A run's job planned on GPUs: the allocator peak per GPU and the setting's parts, as the plan has them."""

    gpus: int
    peak: int
    formula: str
    stage: str
    offload_optimizer: bool
    offload_param: bool

    @property
    def parts(self) -> dict[str, str]:
        return parts_placed(self.stage, self.offload_optimizer, self.offload_param)


def gpu_figure(plan: planner.Plan | None) -> GpuFigure | None:
    if plan is None:
        return None
    s = plan.setup
    return GpuFigure(s.world, plan.peak_bytes, plan.formula, s.stage, s.offload_optimizer, s.offload_param)


def placed(r: CourseRow) -> GpuFigure | None:
    """Where a row's setting keeps the states on GPUs: the plan per GPU of a CPU run; a GPU run's own setting."""
    if r.on_gpu is not None:
        return r.on_gpu
    if r.device_kind == "cuda":
        return GpuFigure(r.devices, r.planned or 0, "", r.stage, r.offload and r.stage in ("2", "3"),
                         placement.offloads_parameters(r.stage, r.offload))
    return None


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
    on_gpu: GpuFigure | None = None  # a run of CPU processes: the same job planned on as many GPUs

    @property
    def worst(self) -> int | None:
        return max(self.peaks) if self.peaks else None

    @property
    def error(self) -> float | None:
        """(plan - measured) / measured of the highest device, as the Train page's plan comparison says it."""
        return (self.planned - self.worst) / self.worst if self.planned and self.worst else None


STAGE_ORDER = {"none": 0, "2": 1, "3": 2}


def course_rows(runs: list[RunSummary], by_setting: bool = True) -> list[CourseRow]:
    """One row per run: measured peak per device, planned, tokens/s, step time (by stage, then offload); a run of
    CPU processes with its job planned on as many GPUs."""
    rows = [CourseRow(s.run_dir, s.stage, s.offload, len(s.devices) or 1, s.device_kind, list(s.peaks), s.planned_bytes,
                      s.tokens_per_sec, s.step_time, s.status, s.peak_kind,
                      gpu_figure(gpu_plan(s.run_dir, len(s.devices) or 1, s.output)) if s.device_kind == "cpu" else None)
            for s in runs]
    if by_setting:
        rows.sort(key=lambda r: (STAGE_ORDER.get(r.stage, 9), r.offload))
    return rows


# --- curves that draw as one line ----------------------------------------------------------------------

# Two losses this close draw on the same pixel of a chart (a loss axis of a few units over a few hundred pixels);
# the same job under another ZeRO stage repeats the unsplit run's losses to the last digit on CPU processes.
SAME_LOSS = 1e-3


def same_curve(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return bool(a) and [s for s, _ in a] == [s for s, _ in b] and all(
        abs(x - y) <= SAME_LOSS * max(1.0, abs(x)) for (_, x), (_, y) in zip(a, b))


def coinciding(series: dict[str, list[tuple[int, float]]]) -> list[list[str]]:
    """Groups (two runs or more, in the order given) whose loss curves are the same steps and values."""
    groups: list[list[str]] = []
    for run, pts in series.items():
        home = next((g for g in groups if same_curve(series[g[0]], pts)), None)
        if home is None:
            groups.append([run])
        else:
            home.append(run)
    return [g for g in groups if len(g) > 1]


def last_rewards(curves_of_run: dict[str, list[tuple[int, float]]]) -> dict[str, float] | None:
    """A preference run's last logged rewards (chosen, rejected, margin, accuracy), None for SFT."""
    last = {k: curves_of_run[k][-1][1] for k in REWARDS if curves_of_run.get(k)}
    return last or None
