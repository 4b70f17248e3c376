"""The processes of a job: found by recorded pid and start time, stopped for sure, checked afterwards.

A pid is trusted only together with the start time recorded with it (pids get
reused), and a trainer process only when its own command line names this run
folder: nothing here signals a process that is not verified to be the job's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psutil

from ..job.command import CHAT_MODULE, TRAINER_MODULE
from ..words import say
from .state import JobState


def proc(pid: int | None, ctime: float | None) -> psutil.Process | None:
    """The process with this pid if it is still the one we started (pids get reused)."""
    if not pid:
        return None
    try:
        p = psutil.Process(pid)
        if ctime is not None and abs(p.create_time() - ctime) > 0.05:
            return None
        return p if p.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def trainer_output(p: psutil.Process) -> Path | None:
    """The run folder a trainer process writes into (from its own command line), or None for any other process.
    A chat worker counts as a trainer here: it holds devices as one, and its folder is its ``--folder``."""
    try:
        cmd = p.cmdline()
        flag = "--output_dir" if TRAINER_MODULE in cmd else "--folder" if CHAT_MODULE in cmd else None
        if flag is None or flag not in cmd:
            return None
        out = Path(cmd[cmd.index(flag) + 1])
        return (out if out.is_absolute() else Path(p.cwd()) / out).resolve()
    except (psutil.Error, IndexError, OSError):
        return None


def live_trainers() -> list[tuple[psutil.Process, Path]]:
    """Every trainer process on this machine, with its run folder (also those of jobs no registry knows)."""
    me = os.getpid()
    found = []
    for p in psutil.process_iter():
        if p.pid != me and (out := trainer_output(p)) is not None:
            found.append((p, out))
    return found


def owner(p: psutil.Process) -> str:
    """Who runs a process, as "name (uid N)" (just the uid when the name is unknown)."""
    try:
        uid = p.uids().real
    except psutil.Error:
        return "?"
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def trainer_devices(p: psutil.Process) -> tuple[str, list[int]]:
    """("cuda", GPU indices) or ("cpu", []) for a trainer process, from its environment."""
    try:
        env = p.environ()
    except psutil.Error:
        return "cpu", []
    if env.get("DS_ACCELERATOR") == "cpu" or env.get("CUDA_VISIBLE_DEVICES", None) == "":
        return "cpu", []
    ids = [int(x) for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip().isdigit()]
    return "cuda", ids


def _flag(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of a launcher's flag on its command line (``--name value`` or ``--name=value``), or None."""
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name in names:
            return value if eq else args[i + 1] if i + 1 < len(args) else None
    return None


def rendezvous_port(p: psutil.Process) -> int | None:
    """The master port of a trainer process: the launcher's own --master_port, or the MASTER_PORT a rank was given."""
    try:
        port = _flag(p.cmdline(), ("--master_port", "--master-port"))
        return int(port if port is not None else p.environ().get("MASTER_PORT", ""))
    except (psutil.Error, ValueError):
        return None


def node_rank(p: psutil.Process) -> int:
    """Which machine's part of a job a process is: a launcher's own --node_rank, a rank's GROUP_RANK (torchrun gives
    it to each rank); 0 for a job on one machine.  A node's launcher has no GROUP_RANK of its own: read from its
    environment alone, node 1's launcher would pass for node 0's, whose supervisor would stop it as a leftover when
    node 0 ends first (two nodes of one job on one machine, as in a test)."""
    try:
        given = _flag(p.cmdline(), ("--node_rank", "--node-rank"))
        return int(given if given is not None else p.environ().get("GROUP_RANK", "0") or 0)
    except (psutil.Error, ValueError):
        return 0


def job_processes(state: JobState) -> list[psutil.Process]:
    """Every live process of the job: the launcher's tree, every pid recorded, and any trainer of this run dir."""
    found: dict[int, psutil.Process] = {}
    launcher = proc(state.launcher_pid, state.launcher_ctime)
    if launcher is not None:
        found[launcher.pid] = launcher
        with contextlib.suppress(psutil.Error):
            found.update((c.pid, c) for c in launcher.children(recursive=True))
    for r in state.ranks:
        p = proc(r["pid"], r.get("ctime"))
        if p is not None:
            found[p.pid] = p
    run = state.output.resolve()
    for p, out in live_trainers():  # orphans: trainers of this run folder (and of this machine's part of the job)
        if p.pid not in found and out == run and node_rank(p) == state.node_rank:
            found[p.pid] = p
    return [p for p in found.values() if alive(p)]


def rank_processes(state: JobState) -> list[dict]:
    """The launcher's descendants with their rank (from the RANK variable each rank gets)."""
    launcher = proc(state.launcher_pid, state.launcher_ctime)
    if launcher is None:
        return []
    out = []
    with contextlib.suppress(psutil.Error):
        for c in launcher.children(recursive=True):
            try:
                rank = c.environ().get("RANK")
                out.append({"pid": c.pid, "rank": int(rank) if rank is not None else None, "ctime": c.create_time()})
            except (psutil.Error, ValueError):
                continue
    return out


def send(p: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
        p.send_signal(sig)


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_job(state: JobState, log, reap=None) -> list[int]:
    """Graceful stop, SIGKILL after the grace period, then check; returns pids still alive.

    torchrun: SIGTERM to torchrun only (it forwards to the ranks; killing it first
    would orphan them).  deepspeed launcher: SIGTERM to its whole process group.
    ``log`` takes each step's catalog sentence; ``reap`` (the launcher's Popen.poll
    when we are its parent) clears its zombie.
    """
    reap = reap or (lambda: None)
    launcher = proc(state.launcher_pid, state.launcher_ctime)
    procs = job_processes(state)
    if launcher is not None:
        if state.launcher == "deepspeed":
            log(say("run.stop_sigterm_group", pid=launcher.pid))
            _killpg(launcher.pid, signal.SIGTERM)
        elif state.kind == "chat":  # one process, no ranks to forward it to
            log(say("run.stop_sigterm_worker", pid=launcher.pid))
            send(launcher, signal.SIGTERM)
        else:
            log(say("run.stop_sigterm_launcher", launcher=state.launcher, pid=launcher.pid))
            send(launcher, signal.SIGTERM)
    else:
        log(say("run.stop_sigterm_rest", n=len(procs), pids=str([p.pid for p in procs])))
        for p in procs:
            send(p, signal.SIGTERM)
    left = _wait_gone(state, state.grace_s, reap)
    if left:
        log(say("run.stop_sigkill", seconds=round(state.grace_s), pids=str([p.pid for p in left])))
        mine = os.getpgrp()
        for p in left:
            with contextlib.suppress(psutil.Error, OSError):
                if (pg := os.getpgid(p.pid)) != mine:
                    _killpg(pg, signal.SIGKILL)
            send(p, signal.SIGKILL)
        left = _wait_gone(state, 10.0, reap)
    pids = sorted(p.pid for p in left)
    log(say("run.stop_verified") if not pids else say("run.stop_left", pids=str(pids)))
    return pids


def _wait_gone(state: JobState, timeout: float, reap) -> list[psutil.Process]:
    """The job's processes still alive after waiting up to ``timeout`` s for them to exit."""
    deadline = time.time() + timeout
    while True:
        reap()
        left = job_processes(state)
        if not left:
            return left
        if time.time() >= deadline:
            return left
        # a short sleep, not psutil.wait_procs: that would reap the launcher (our child) behind Popen's back
        # and lose its exit code
        time.sleep(0.2)
