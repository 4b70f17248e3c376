"""The job's experiment tracker, started first: one that cannot start fails the run with its reason, never mid-run.

transformers' integration callbacks (``report_to``) start their tracker in ``on_train_begin``: after the data was
tokenized and the model loaded, on the doorstep of the first step.  Each of them takes over a run already started
instead (TensorBoard a writer it is handed, W&B ``wandb.run``, MLflow the active run, SwanLab ``swanlab.get_run()``),
so rank 0 starts it here, before anything else, and the callback writes into it.  The trainer leaves through
``os._exit`` (see ``train.exit_now``), past the trackers' own exit hooks: :func:`finish` closes them first.

Where each tracker writes and how it is opened: :mod:`zeroboard.job.trackers`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..job import trackers
from ..words import say
from .callbacks import RANK

_started: dict[str, object] = {}  # tracker -> what was started (the TensorBoard writer, the module of the others)


class TrackerError(RuntimeError):
    """The job's tracker could not start (the message names it and says why)."""


def start(job) -> list[trackers.Written]:
    """Point the job's tracker at the run folder (every rank), and start it (rank 0). Raises TrackerError."""
    written = trackers.for_job(job)
    for w in written:
        os.environ.update(w.env)
    if RANK != 0:
        return written
    for w in written:
        try:
            _started[w.tracker] = STARTERS[w.tracker](w, Path(job.output_dir).name)
        except Exception as e:  # any failure: an import, a folder, the tracker's own
            raise TrackerError(say("train.tracker_failed", tracker=w.tracker, why=f"{type(e).__name__}: {e}")) from e
    return written


def attach(trainer) -> None:
    """Hand what was started to the Trainer's integration callback that would otherwise start its own."""
    writer = _started.get("tensorboard")
    if writer is None:
        return
    from transformers.integrations import TensorBoardCallback

    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, TensorBoardCallback):
            cb.tb_writer = writer


def finish(ok: bool) -> None:
    """End what was started (flushed and closed; MLflow's run marked finished or failed)."""
    for name, it in list(_started.items()):
        with contextlib.suppress(Exception):  # ending is best effort: the run's own result is already decided
            if name == "tensorboard":
                it.close()
            elif name == "mlflow":
                it.end_run(status="FINISHED" if ok else "FAILED")
            elif name == "wandb":
                it.finish(exit_code=0 if ok else 1)
            else:
                it.finish()
        _started.pop(name, None)


def _tensorboard(w: trackers.Written, _name: str):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=w.path)


def _wandb(w: trackers.Written, name: str):
    import wandb

    wandb.init(project=trackers.PROJECT, name=name, dir=w.env["WANDB_DIR"], mode="offline")
    return wandb


def _mlflow(w: trackers.Written, name: str):
    import mlflow

    mlflow.set_tracking_uri(w.env["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment(trackers.PROJECT)
    mlflow.start_run(run_name=name)
    return mlflow


def _swanlab(w: trackers.Written, _name: str):
    import swanlab

    # the folder comes from SWANLAB_LOG_DIR (set above): init's own name for it changed between SwanLab versions
    swanlab.init(project=trackers.PROJECT, mode="local")
    return swanlab


STARTERS = {"tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow, "swanlab": _swanlab}
