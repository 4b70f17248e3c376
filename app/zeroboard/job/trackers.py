"""Experiment trackers: where each one writes in the run folder, how it is set up to write there, how to open it.

``report_to`` names one: none, tensorboard, wandb, mlflow or swanlab, each offered when its package is installed
(the checks refuse one that is not, with the command that installs it).  Every tracker writes into the run folder,
nothing leaves the machine:

- TensorBoard: event files in ``RUN/tb`` (``tensorboard --logdir RUN/tb``);
- Weights & Biases in offline mode: ``RUN/wandb`` (``wandb sync`` uploads a run later, if one wants);
- MLflow: a local file store, ``RUN/mlruns`` (``mlflow ui --backend-store-uri RUN/mlruns``);
- SwanLab in local mode: ``RUN/swanlog`` (``swanlab watch RUN/swanlog``).

The trainer starts the tracker before anything else (``training.trackers``): one that cannot start fails the run
with its reason, before the data and the model are loaded.  Light (no tracker is imported here): the checks, the
command line and the run view ask :func:`for_run` where a run's tracker wrote.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import safeload
from . import modelinfo, record, spec as specmod
from .quoting import shell


@dataclass(frozen=True)
class Tracker:
    name: str
    module: str  # what `import` finds when it is installed
    package: str  # what pip installs
    folder: str  # where it writes, inside the run folder


TRACKERS = {t.name: t for t in (
    Tracker("tensorboard", "tensorboard", "tensorboard", "tb"),
    Tracker("wandb", "wandb", "wandb", "wandb"),
    Tracker("mlflow", "mlflow", "mlflow", "mlruns"),
    Tracker("swanlab", "swanlab", "swanlab[dashboard]", "swanlog"),  # local mode shows its runs with the dashboard
)}
PROJECT = "zeroboard"  # the W&B / MLflow / SwanLab project every run goes into


def installed(name: str) -> bool:
    return name == "none" or modelinfo.installed(TRACKERS[name].module)


def offered() -> list[str]:
    """The choices of ``report_to`` that can be used here: none, and each tracker whose package is installed."""
    return [name for name in specmod.choices("report_to") if installed(name)]


def install_hint(name: str) -> str:
    return f"pip install {shell(TRACKERS[name].package)}"


@dataclass(frozen=True)
class Written:
    """Where one tracker of a run writes, and the command that shows it."""

    tracker: str
    path: str  # the folder, as the run names it (relative to where it was started, like output_dir)
    open: str  # the command that opens it
    env: dict[str, str] = field(default_factory=dict, compare=False)  # what makes the integration write there

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "env"}


def where(name: str, run_dir: str | Path) -> Written | None:
    """Where tracker ``name`` writes for a run in ``run_dir`` (None for "none")."""
    if name not in TRACKERS:
        return None
    run = Path(run_dir)
    path = run / TRACKERS[name].folder
    q = shell(str(path))
    if name == "tensorboard":
        return Written(name, str(path), f"tensorboard --logdir {q}", {"TENSORBOARD_LOGGING_DIR": str(path)})
    if name == "wandb":  # W&B makes RUN/wandb/offline-run-*/ itself, under the folder it is given
        return Written(name, str(path), f"wandb sync {shell(str(path / 'latest-run'))}",
                       {"WANDB_MODE": "offline", "WANDB_DIR": str(run), "WANDB_PROJECT": PROJECT})
    if name == "mlflow":  # an absolute URI: the file store of this run, whatever the working folder; MLflow 3 keeps
        # the file store (in "maintenance mode") only when asked to: a database would need mlflow's server packages
        return Written(name, str(path), f"mlflow ui --backend-store-uri {q}",
                       {"MLFLOW_TRACKING_URI": path.absolute().as_uri(), "MLFLOW_EXPERIMENT_NAME": PROJECT,
                        "MLFLOW_ALLOW_FILE_STORE": "true"})
    # the project is given to swanlab.init: SwanLab 0.10 reads SWANLAB_PROJECT as a settings object, not a name
    return Written(name, str(path), f"swanlab watch {q}", {"SWANLAB_MODE": "local", "SWANLAB_LOG_DIR": str(path)})


def for_job(job: specmod.JobSpec) -> list[Written]:
    found = where(job.report_to, job.output_dir)
    return [found] if found is not None else []


def for_run(run_dir: str | Path) -> list[Written]:
    """Where the trackers of the run in ``run_dir`` wrote (from its job record): [] when it used none."""
    run = Path(run_dir)
    for name in (record.JOB_FILE, record.SPEC_FILE):
        try:
            data = specmod.read_mapping(safeload.read_text(run / name, safeload.JOB), str(run / name))
        except (OSError, ValueError):  # UnicodeDecodeError, SpecError and safeload.Refused are ValueErrors
            continue
        found = where(str(data.get("report_to") or "none"), run)
        return [found] if found is not None else []
    return []
