"""The launch entry point: a job checked, its presets written, its exact command built, its memory judged.

:func:`prepare_launch` is the one way a job becomes something to run: the command line's ``preview``, ``validate``
and ``train``, the page's Preview and Start, and the benchmarks call it, and :meth:`JobManager.start
<zeroboard.runs.manager.JobManager.start>` runs only what it returns.  In order:

1. the checks, every problem at once (``job.checks``), on the job's placement;
2. the DeepSpeed presets written into cache/, hand edits kept (``job.presets``);
3. the command: argv + environment (``job.command``);
4. the memory verdict (``planner.verdict``): a job the plan is sure cannot fit is refused, one that is close flagged.
"""

from __future__ import annotations

from ..job import command, devices
from ..job.command import Prepared
from ..job.spec import JobSpec
from ..planner import verdict

__all__ = ["Prepared", "prepare_launch"]


def prepare_launch(job: JobSpec, gpus: list[devices.Gpu] | None = None, port: int | None = None) -> Prepared:
    """Check, write the presets, build the command, then judge the memory; ``gpus``: what NVML sees, by default."""
    gpus = devices.detect_gpus() if gpus is None else gpus
    prepared = command.check_and_build(job, gpus, port=port)
    if not prepared.report.ok:
        return prepared
    found = verdict.verdict(job, gpus)
    if found is not None:
        field, msg, sure = found
        if sure:
            prepared.report.errors[field] = msg
            prepared.command = None
        else:
            prepared.report.warnings.setdefault(field, msg)
    return prepared
