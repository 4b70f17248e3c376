"""The memory verdict before launch: a job the planner is sure cannot fit is refused, one that is close is flagged.

The last step of the launch entry point (``runs.launch.prepare_launch``): after the checks and the command,
the plan's verdict on the chosen devices, as one more field error or note.
"""

from __future__ import annotations

from ..job import devices
from ..job.spec import JobSpec
from ..words import say
from . import PlanError, estimate
from .memory import GIB, HEADROOM
from .report import advice_text

SURE = 1.25  # needed above 125% of what is free: the estimate's error (within 10-15%) cannot save it


def verdict(job: JobSpec, gpus: list[devices.Gpu]) -> tuple[str, object, bool] | None:
    """(field, message, is_error) when the plan says the job will not fit or fits with little headroom; None when it
    fits with room or cannot be planned."""
    try:
        plan = estimate(job, gpus)
    except PlanError:
        return None
    if plan.fits is None or not plan.capacity_bytes:
        return None
    need, have = plan.needed_bytes / GIB, plan.capacity_bytes / GIB
    if plan.fits:
        if plan.roomy:
            return None
        return "per_device_train_batch_size", say("check.fit_close", need=f"{need:.1f}", have=f"{have:.1f}",
                                                  margin=f"{100 * (1 - HEADROOM):.0f}"), False
    advice = advice_text(plan.advice)
    field = "deepspeed_stage" if plan.advice.get("kind") == "use" else "per_device_train_batch_size"
    where = say("check.fit_where_gpu") if plan.setup.device == "cuda" else say("check.fit_where_ram")
    msg = say("check.does_not_fit", need=f"{need:.1f}", have=f"{have:.1f}", where=where, advice=advice)
    return field, msg, plan.needed_bytes > SURE * plan.capacity_bytes
