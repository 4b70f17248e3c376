"""Which executor runs a job: the one its command names, or the one a recorded run used."""

from __future__ import annotations

from .executor import Executor, LocalExecutor
from .slurm import SlurmExecutor
from .state import JobState

KINDS: dict[str, type[Executor]] = {"local": LocalExecutor, "slurm": SlurmExecutor}


def for_state(st: JobState) -> Executor:
    """The executor of a recorded run (a fresh one: it follows the run from what was recorded)."""
    return KINDS.get(st.executor, LocalExecutor)()


def for_command(cmd: dict) -> Executor:
    return KINDS.get(cmd.get("executor", "local"), LocalExecutor)()
