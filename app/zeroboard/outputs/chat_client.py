"""Talking to a chat worker (:mod:`.chat_worker`) from the web server and the CLI: start it, ask, stop, unload.

Light (no torch).  A worker is a job of the runs index (kind ``chat``), started
through :meth:`JobManager.start_worker`: the device guard refuses it where a job
runs and names it to a training job that wants its devices.  One worker per set
of devices, in its own folder next to the runs index (``chat/cpu``,
``chat/gpu-0-1``); the page and the CLI of one workspace find each other's
worker there and share it when it holds the model they want.  Any page (a
reloaded tab, another tab, the Train page's "Unload and start") and
``zeroboard chat --unload`` find a worker by its devices in the runs index
(:func:`on_devices`), never by the session that loaded it.

A worker unloads itself after ``idle_minutes`` without a request (like Ollama's
keep-alive; bounded in :mod:`.chat_settings`); :func:`unload` unloads it now and
escalates when it does not answer (SIGTERM, SIGKILL), saying each step it took.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..job import devices as devmod
from ..job.command import CHAT_MODULE
from ..job.registry import RegistryError
from ..runs import executor, processes
from ..runs.manager import JobManager, StartError
from ..runs.state import JobState, read_state, read_worker, worker_unloads_in
from ..words import Msg, from_json, say
from . import chat_settings
from .chat_target import Target
from .inspect import OutputError

IDLE_S = chat_settings.IDLE_MINUTES * 60  # a worker nobody asked anything for this long unloads itself
READY_S = 900.0  # loading a large model from a slow disk takes minutes
UNLOAD_S = 60.0  # for a worker that said yes to end (it finishes the token in flight, then frees the model)
ASK_S = 5.0  # for its yes: a connection's thread answers at once, even while the model answers someone else
KILL_AFTER_S = 5.0  # beyond its supervisor's grace: a SIGTERM nobody followed up (the supervisor hung too)
GPU_RELEASE_S = 10.0  # after the process ended, for the driver to free its GPU memory
CONNECT_S = 10.0


def folder_for(manager: JobManager, device_kind: str, gpus: list[int]) -> Path:
    name = "cpu" if device_kind == "cpu" else "gpu-" + "-".join(map(str, sorted(gpus)))
    return manager.index.parent / "chat" / name


def dtype_for(target: Target, device_kind: str, gpus: list[int]) -> str:
    """The run's precision on GPUs (bf16 where it trained in fp32 or does not say, fp16 on GPUs without bf16);
    fp32 on the CPU, where 16-bit matrix work is slow."""
    if device_kind == "cpu":
        return "fp32"
    if target.precision in ("bf16", "fp16"):
        return target.precision
    chosen = [g for g in devmod.detect_gpus() if g.index in gpus]
    return "bf16" if all(g.supports_bf16 for g in chosen) else "fp16"


@dataclass
class Worker:
    """A running worker of this runs index: its job state and its own word (worker.json)."""

    state: JobState
    info: dict

    @property
    def folder(self) -> Path:
        return Path(self.state.run_dir)

    @property
    def status(self) -> str:
        return self.info.get("status", "loading")

    @property
    def model(self) -> str | None:
        return self.info.get("model")

    def refresh(self) -> Worker:
        self.info = read_worker(self.folder)
        return self

    # --- requests -------------------------------------------------------------------------------
    def request(self, op: str, timeout: float | None = CONNECT_S, **fields) -> Iterator[dict]:
        """The worker's replies to one request, as they come. Raises OSError when it cannot be reached."""
        info = self.info if self.info.get("port") and self.info.get("token") else self.refresh().info
        if not info.get("port"):
            raise ConnectionRefusedError(say("chat.not_listening", folder=str(self.folder)))
        with socket.create_connection(("127.0.0.1", int(info["port"])), timeout=CONNECT_S) as conn:
            conn.settimeout(timeout)
            conn.sendall((json.dumps({"op": op, "token": info.get("token", ""), **fields}, ensure_ascii=False)
                          + "\n").encode())
            with conn.makefile("rb") as replies:
                for line in replies:
                    reply = json.loads(line)
                    if "error" in reply:
                        reply["error"] = from_json(reply["error"])
                    yield reply

    def ask(self, op: str, timeout: float | None = CONNECT_S, **fields) -> dict:
        return next(iter(self.request(op, timeout=timeout, **fields)), {})

    def unloads_in(self) -> float | None:
        """Seconds until it unloads itself if nobody asks it anything (None while it loads)."""
        return worker_unloads_in(self.info)

    def generate(self, sides: list[dict], settings: dict, rid: str) -> Iterator[dict]:
        """Stream one request's answers: ``sides`` = [{"side": "base"|"tuned", "messages": [...]}, ...]. Raises
        OutputError, before anything is sent, for settings out of bounds or a request no worker takes."""
        problem = chat_settings.request_problem(sides, settings)
        if problem is not None:
            raise OutputError(problem)
        return self.request("generate", timeout=None, sides=sides, settings=settings, id=rid)

    def stop(self, rid: str | None = None) -> None:
        try:
            self.ask("stop", id=rid)
        except OSError:
            pass  # gone already: nothing to stop


def find(manager: JobManager, model: str | None = None) -> list[Worker]:
    """The running workers of this index (holding ``model`` when given), newest first."""
    found = []
    for st in manager.workers():
        if st.active:
            w = Worker(st, read_worker(st.run_dir))
            if model is None or w.model == model:
                found.append(w)
    return found


def holding(manager: JobManager, device_kind: str, gpus: list[int]) -> Worker | None:
    folder = folder_for(manager, device_kind, gpus).resolve()
    return next((w for w in find(manager) if w.folder.resolve() == folder), None)


def on_devices(manager: JobManager, device_kind: str, devices: list[int]) -> list[Worker]:
    """The running workers on (some of) these devices, newest first: those a job there is refused for, found in the
    runs index (any page, any session, the command line)."""
    return [w for w in find(manager) if executor.overlap(w.state.device_kind, list(w.state.devices), device_kind,
                                                         list(devices))]


def start(manager: JobManager, target: Target, device_kind: str, gpus: list[int], idle_s: float = IDLE_S,
          source: str = "page", cwd: str | None = None) -> Worker:
    """Start a worker for ``target`` on the CPU or the GPUs ``gpus``. Raises Busy (the guard, naming the holder)
    or StartError (``idle_s`` out of :func:`chat_settings.idle_minutes`' bounds too). Returns at once: the worker
    loads in the background (:func:`wait_ready`)."""
    try:
        chat_settings.idle_minutes(idle_s / 60)
    except (TypeError, ValueError) as e:
        raise StartError(e.args[0]) from None
    folder = folder_for(manager, device_kind, gpus)
    dtype = dtype_for(target, device_kind, gpus)
    argv = [sys.executable, "-m", CHAT_MODULE, "--folder", str(folder.resolve()), "--target",
            json.dumps(target.to_dict(), ensure_ascii=False), "--device", "cpu" if device_kind == "cpu" else "cuda",
            "--dtype", dtype, "--idle-s", str(float(idle_s))]
    env = {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
           "CUDA_VISIBLE_DEVICES": "" if device_kind == "cpu" else ",".join(map(str, gpus))}
    st = manager.start_worker(folder, argv, env, device_kind, gpus, cwd or os.getcwd(), source)
    return Worker(st, read_worker(folder))


def wait_ready(worker: Worker, timeout: float = READY_S, every: float = 0.2) -> Worker:
    """The worker once its model is loaded. Raises OutputError with the reason when loading failed."""
    deadline = time.time() + timeout
    while True:
        status = worker.refresh().status
        if status == "ready":
            return worker
        if status == "failed":
            raise OutputError(say("chat.load_failed", why=worker.info.get("error") or "?"))
        st = read_state(worker.folder)
        if st is not None and not st.active:
            raise OutputError(say("chat.load_failed", why=st.error or st.message or "?"))
        if time.time() >= deadline:
            raise OutputError(say("chat.load_timeout", seconds=round(timeout)))
        time.sleep(every)


def unload(manager: JobManager, worker: Worker, timeout: float = UNLOAD_S) -> dict:
    """Unload and verify: the worker's process is gone and NVML charges it nothing (its RSS went with it on the CPU).

    Asks the worker first (it says yes from a connection's thread, even mid-answer, then ends).  One that does not
    answer within ASK_S (hung, stopped), or is still there ``timeout`` s after its yes, is stopped as Abort stops a
    job: its supervisor sends SIGTERM, then SIGKILL after the worker's grace; and when even that did not end it
    KILL_AFTER_S later (its supervisor hung too), SIGKILL from here, and its supervisor goes the same way.  ``steps``
    says what it took beyond the request (Msgs, in order); ``forced``: whether it came to that."""
    info = worker.refresh().info
    pid, ctime = worker.state.launcher_pid or info.get("pid"), worker.state.launcher_ctime
    held = info.get("memory_bytes")
    before: list[Msg] = []
    after: list[Msg] = []
    try:
        answered = bool(worker.ask("unload", timeout=ASK_S).get("ok"))
    except OSError:
        answered = False
    if answered:
        _gone_within(pid, ctime, timeout)
    forced = processes.proc(pid, ctime) is not None
    if forced:
        before.append(say("chat.unload_still_there", pid=pid, seconds=round(timeout)) if answered else
                      say("chat.unload_no_answer", pid=pid, seconds=round(ASK_S)))
        manager.abort(worker.state.run_dir)  # its supervisor: SIGTERM, SIGKILL after the grace, verified
        if not _gone_within(pid, ctime, worker.state.grace_s + KILL_AFTER_S):
            after.append(say("chat.unload_killed_here", pid=pid, seconds=round(worker.state.grace_s + KILL_AFTER_S)))
            processes.send(processes.proc(pid, ctime), signal.SIGKILL)
            _gone_within(pid, ctime, 10.0)
    alive = processes.proc(pid, ctime) is not None
    t_gone = time.time()
    gpu_bytes = None if worker.state.device_kind == "cpu" or alive else gpu_left(int(pid or 0), GPU_RELEASE_S)
    released_s = round(time.time() - t_gone, 2)  # how long NVML still charged it after it ended
    sup = worker.state.supervisor_pid, worker.state.supervisor_ctime
    # its supervisor records the end, takes the worker off the index and exits: then nothing of it is left
    ended = _ended_within(manager, worker, 10.0 if forced else timeout) and _gone_within(*sup, 10.0)
    if forced and not alive and not ended:  # the worker is gone and its supervisor says nothing: it hangs too
        after.append(say("chat.unload_supervisor_killed", pid=sup[0]))
        processes.send(processes.proc(*sup), signal.SIGKILL)
        _forget(manager, worker)
    final = read_state(worker.folder)
    stop_log = [e["msg"] for e in final.stop_log] if forced and final is not None else []
    return {"pid": pid, "freed_bytes": held, "gone": not alive, "gpu_bytes_left": gpu_bytes, "gpu_release_s": released_s,
            "verified": not alive and not gpu_bytes, "device_kind": worker.state.device_kind,
            "devices": list(worker.state.devices), "name": info.get("name") or info.get("model"), "forced": forced,
            "steps": before + stop_log + after}


def _gone_within(pid: int | None, ctime: float | None, timeout: float) -> bool:
    deadline = time.time() + timeout
    while processes.proc(pid, ctime) is not None:
        if time.time() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _ended_within(manager: JobManager, worker: Worker, timeout: float) -> bool:
    """Whether the worker's supervisor recorded its end (and took it off the index) within ``timeout`` s."""
    deadline = time.time() + timeout
    while (st := read_state(worker.folder)) is not None and st.active:
        if time.time() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _forget(manager: JobManager, worker: Worker) -> None:
    """A worker ended with no supervisor to say so: what its supervisor would have done (the end found from here,
    its entry off the index)."""
    _gone_within(worker.state.supervisor_pid, worker.state.supervisor_ctime, 10.0)
    manager.state(worker.state.run_dir)  # settles it: the outcome into its state.json, as for any run
    with contextlib.suppress(RegistryError):
        manager.registry.remove(worker.state.run_dir)


def describe(gone: dict) -> list[Msg]:
    """What an unload did, in words: the steps it had to take, then what it freed (or what is left)."""
    mem = f"{(gone['freed_bytes'] or 0) / 2**30:.2f}"
    if not gone["verified"]:
        last = say("chat.unload_left", pid=gone["pid"], memory=mem)
    elif gone["device_kind"] == "cpu":
        last = say("chat.unloaded_cpu", pid=gone["pid"], memory=mem)
    else:
        gpus = {g.index: g for g in devmod.detect_gpus()}
        used = ", ".join(f"GPU {i}: {gpus[i].used_bytes / 2**30:.1f} GiB" for i in gone["devices"] if i in gpus) or "-"
        last = say("chat.unloaded_gpu", pid=gone["pid"], memory=mem, used=used)
    return [*gone["steps"], last]


def gpu_left(pid: int, timeout: float, every: float = 0.1) -> int | None:
    """What NVML still charges an ended process, once it charges nothing or after ``timeout`` s: the driver frees a
    context after its process is gone, and NVML lists the process until then."""
    deadline = time.time() + timeout
    while (left := devmod.process_bytes_on(pid)) and time.time() < deadline:
        time.sleep(every)
    return left


def rss_tree(pid: int | None = None) -> int:
    """RSS of a process and every process below it (the web server, its supervisors and its workers)."""
    try:
        top = psutil.Process(pid or os.getpid())
        procs = [top, *top.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


__all__ = ["IDLE_S", "StartError", "Worker", "describe", "find", "folder_for", "holding", "on_devices", "rss_tree", "start",
           "unload", "wait_ready"]
