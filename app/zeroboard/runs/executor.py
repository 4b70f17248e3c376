"""Where a job's processes run, behind one interface: start, follow, stop, and identify.

A run's supervisor (:mod:`.supervisor`) starts its job through an executor
and follows it to the end; the manager, Abort and the device guard ask the
executor of a recorded run whether the job still lives and to stop it, never
a pid or a scheduler directly.  Two executors:

- :class:`LocalExecutor`: the launcher (torchrun / deepspeed) as a child
  process in a session of its own, its ranks found through psutil, each pid
  trusted only together with its start time (:mod:`.processes`);
- :class:`~zeroboard.runs.slurm.SlurmExecutor`: an sbatch script submitted to
  a Slurm cluster, followed through squeue / sacct, stopped with scancel.

Which one a run uses is recorded in its ``command.json`` (``executor``) and
its ``state.json``, so a reader that finds the run later asks the right one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from ..words import Msg, say
from . import processes
from .state import JobState

SUPERVISOR_MODULE = "zeroboard.runs.supervisor"
# "1": the CPU is shared between workspaces -- another workspace's CPU job does not hold it for this one (a CI
# machine running several checkouts' tests, a lab server whose CPU runs are small). GPUs are never shared so.
CPU_SHARED_ENV = "ZEROBOARD_CPU_SHARED"


def cpu_shared() -> bool:
    return os.environ.get(CPU_SHARED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class Executor:
    """What every executor does. ``note`` takes a catalog sentence for the run's stop log."""

    name = ""

    def launch(self, st: JobState, cmd: dict, log) -> None:
        """Start the job described by ``cmd`` (command.json), output into ``log``; record its identity in ``st``.
        Raises OSError when it cannot be started."""
        raise NotImplementedError

    def poll(self, st: JobState) -> int | None:
        """The job's exit code once it has ended (negative: killed by that signal); None while it runs."""
        raise NotImplementedError

    def follow(self, st: JobState) -> bool:
        """Refresh what ``st`` knows of the running job (ranks seen, a scheduler's queue position). True: changed."""
        return False

    def stop(self, st: JobState, note) -> list[int]:
        """Stop the job for sure (graceful first); returns what is left of it (pids), [] when nothing is."""
        raise NotImplementedError

    def left(self, st: JobState) -> list:
        """What of the job still lives (its processes, or its scheduler job): empty once it has ended."""
        raise NotImplementedError

    def final_code(self, st: JobState) -> int | None:
        """The exit code of a job that ended while nobody watched, where the executor can still tell (a scheduler's
        accounting); None where it cannot (a local launcher's code went with its dead parent)."""
        return None


class LocalExecutor(Executor):
    """Processes on this machine: the launcher is our child (its exit code is ours to read), its ranks its own."""

    name = "local"

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def launch(self, st: JobState, cmd: dict, log) -> None:
        self.proc = subprocess.Popen(cmd["argv"], env={**os.environ, **cmd["env"]}, cwd=cmd["cwd"],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        st.launcher_pid, st.launcher_ctime = self.proc.pid, psutil.Process(self.proc.pid).create_time()

    def poll(self, st: JobState) -> int | None:
        if self.proc is not None:
            return self.proc.poll()
        return None if processes.proc(st.launcher_pid, st.launcher_ctime) is not None else -1

    def follow(self, st: JobState) -> bool:
        """Record the launcher's new ranks; a process first seen between its fork and its exec (no RANK yet) gets
        its rank once it has one.  True when the record changed."""
        seen = {r["pid"]: r for r in processes.rank_processes(st)}
        named = 0
        for r in st.ranks:
            if r.get("rank") is None and (now := seen.get(r["pid"])) is not None and now["rank"] is not None:
                r["rank"], named = now["rank"], named + 1
        known = {r["pid"] for r in st.ranks}
        new = [r for pid, r in seen.items() if pid not in known]
        st.ranks += new
        return bool(new or named)

    def stop(self, st: JobState, note) -> list[int]:
        return processes.stop_job(st, note, reap=self.proc.poll if self.proc is not None else None)

    def left(self, st: JobState) -> list:
        return processes.job_processes(st)


# --- the supervisor: ZeroBoard's own process, on this machine, whatever executor runs the job ---------------------


def start_supervisor(run: Path, cwd: str, err) -> tuple[subprocess.Popen, float | None]:
    """Start a run's supervisor in a session of its own; (its Popen, its start time)."""
    sup = subprocess.Popen([sys.executable, "-m", SUPERVISOR_MODULE, str(run)], cwd=cwd, stdin=subprocess.DEVNULL,
                           stdout=err, stderr=err, start_new_session=True)
    found = processes.proc(sup.pid, None)
    return sup, found.create_time() if found else None


def supervisor_alive(pid: int | None, ctime: float | None) -> bool:
    return processes.proc(pid, ctime) is not None


def ask_supervisor_to_stop(st: JobState) -> bool:
    """SIGTERM to the run's supervisor (it stops the job and verifies); False when there is none to ask."""
    sup = processes.proc(st.supervisor_pid, st.supervisor_ctime)
    if sup is None:
        return False
    processes.send(sup, signal.SIGTERM)
    return True


# --- the device guard: jobs on this machine that no runs index of this workspace knows -----------------------------


def foreign_holder(device_kind: str, ids: list[int], out: Path, port: int, known: set[Path], peer: bool) -> Msg | None:
    """Why a local job on ``device_kind`` devices ``ids`` writing into ``out`` cannot start because of a trainer
    this workspace does not know: said by the other user's name, never their folder, command line or pid.
    With ``ZEROBOARD_CPU_SHARED``, another workspace's CPU job holds no CPU for this one (its folder still counts)."""
    shared = device_kind == "cpu" and cpu_shared()
    for p, trainer_out in processes.live_trainers():
        if peer and trainer_out == out and processes.rendezvous_port(p) == port:
            continue  # another part of the same job on several machines
        kind, theirs = processes.trainer_devices(p)
        if trainer_out == out:
            return say("run.busy_other_folder", user=processes.owner(p))
        if trainer_out not in known and not shared and overlap(kind, theirs, device_kind, ids):
            return say("run.busy_other", user=processes.owner(p))
    return None


def overlap(kind: str, ids: list[int], want_kind: str, want_ids: list[int]) -> bool:
    """Whether a job on (kind, ids) holds devices that (want_kind, want_ids) needs; the CPU counts as one device.
    A cluster's job holds none of this machine's."""
    if kind != want_kind or kind == "slurm":
        return False
    return kind == "cpu" or bool(set(ids) & set(want_ids)) or not ids
