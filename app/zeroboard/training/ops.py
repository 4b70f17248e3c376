"""DeepSpeed's compiled ops: which a job loads, built ahead of time, and announced when a job must build one.

DeepSpeed compiles its C++ ops the first time a process loads them (ninja + g++, nvcc for CUDA ops) into
torch's extension folder, and a job waits silently meanwhile: on a 2-core machine about a minute for the CPU
communication op and two for CPU Adam.  ``zeroboard build-ops`` (part of ``make run``) builds the ones this
machine's jobs will load, each in its own process and side by side; a job that still has to build one says so
first (a ``compile`` event and a log line), so the page can show the phase instead of "waiting for the first step".

The ops are created through DeepSpeed's accelerator with the job's own environment (CPU accelerator on CPU,
the same cleaned ``TORCH_CUDA_ARCH_LIST``), so what is built ahead is exactly what a job loads.

Where they are built: torch's extension folder is one per user (``~/.cache/torch_extensions``), shared by every
Python environment, and two environments (two venvs, two checkouts each with its own) rebuilt each other's ops in
turn, 160 s a start on a 2-core machine.  So ZeroBoard gives each environment a folder of its own,
:func:`extensions_dir` (keyed by the environment's resolved ``sys.prefix``, its Python, torch and DeepSpeed
versions), set as ``TORCH_EXTENSIONS_DIR`` in the processes that build or load an op: every rank of a job
(:func:`load_for_job`, whoever started it: the page, the CLI, the queue, Slurm on its node) and ``zeroboard
build-ops`` (:func:`job_env`).  A ``TORCH_EXTENSIONS_DIR`` the user set wins (the container image's
``/opt/torch-extensions``).  It is set in those processes, not in the job's command: the command box shows no
machine's folder, and a command copied to another machine computes that machine's own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from ..job import command, devices, modelinfo
from ..words import DEFAULT, text

# what `zeroboard build-ops` builds: every op a job of this kind can load
MACHINE_OPS = {"cpu": ("ShareMemCommBuilder", "CPUAdamBuilder"), "cuda": ("FusedAdamBuilder", "CPUAdamBuilder")}
# the op each builder makes (its NAME), for the progress lines before the child has loaded DeepSpeed
OP_NAMES = {"ShareMemCommBuilder": "deepspeed_shm_comm", "CPUAdamBuilder": "cpu_adam", "FusedAdamBuilder": "fused_adam"}
HEARTBEAT_S = 15.0
STALE_AFTER_S = 10.0  # a build lock this old with nobody compiling was left by a stopped compile


EXTENSIONS_ENV = "TORCH_EXTENSIONS_DIR"


def extensions_dir(prefix: str | Path | None = None) -> Path:
    """This Python environment's own folder for compiled ops, under torch's (``$XDG_CACHE_HOME/torch_extensions``):
    named by the Python, torch and DeepSpeed versions it builds with, and a hash of the environment's folder
    (resolved: a checkout whose ``.venv`` links to another's shares that one's builds)."""
    where = Path(prefix or sys.prefix).resolve()
    versions = f"py{sys.version_info.major}{sys.version_info.minor}-torch{modelinfo.version('torch') or 'none'}" \
               f"-ds{modelinfo.version('deepspeed') or 'none'}"
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torch_extensions"
    return root / f"zeroboard-{versions}-{hashlib.sha256(str(where).encode()).hexdigest()[:10]}"


def extensions_env() -> dict[str, str]:
    """``{TORCH_EXTENSIONS_DIR: extensions_dir()}``, or nothing where the user set that variable (theirs wins)."""
    return {} if os.environ.get(EXTENSIONS_ENV) else {EXTENSIONS_ENV: str(extensions_dir())}


def own_extensions() -> None:
    """This environment's extension folder for every op torch builds or loads in this process from here on."""
    os.environ.update(extensions_env())


def job_env(kind: str) -> dict[str, str]:
    """The part of a job's environment that decides how and where DeepSpeed builds an op: the accelerator (see
    job.command.build) and the extension folder (:func:`extensions_env`, which a job's ranks set themselves).

    CUDA is named, not left to DeepSpeed: where it sees no GPU (``docker build``) it picks its CPU accelerator, whose
    builders make CPU ops under the same names (``fused_adam``): a GPU job would then compile its own at start, unannounced."""
    if kind == "cpu":
        return {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", **extensions_env()}
    return {"DS_ACCELERATOR": "cuda", **command.arch_env(), **extensions_env()}


def needed(device_type: str, ds_config: dict | None) -> list[str]:
    """The ops a job loads: the CPU communication op whenever DeepSpeed starts on CPU, CPU Adam with an offloaded
    optimizer (accelerate swaps the Trainer's AdamW for DeepSpeed's CPU Adam then)."""
    if ds_config is None:
        return []
    zero = ds_config.get("zero_optimization") or {}
    offload = (zero.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme")
    ops = ["ShareMemCommBuilder"] if device_type == "cpu" else []
    return ops + (["CPUAdamBuilder"] if offload else [])


def builder(class_name: str):
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().create_op_builder(class_name)


def is_built(op) -> bool:
    """Installed with DeepSpeed, or compiled before into torch's extension folder by this installation.

    A folder the user set (``TORCH_EXTENSIONS_DIR``) may be shared by several Python environments: a build from
    another one (another venv) names that one's torch in its ``build.ninja`` (headers and libraries), and loading it
    here compiles again; so does a library older than its recipe.  (DeepSpeed's sources are not checked: a source
    checkout names them by another path than an installed package.)"""
    from deepspeed.git_version_info import installed_ops

    if installed_ops.get(op.name):
        return True
    folder = build_folder(op)
    libraries = list(folder.glob(f"{op.name}*.so"))
    ninja = folder / "build.ninja"
    if not libraries or not ninja.is_file():
        return False
    # torch rewrites the recipe only when it changes, and the library comes after it: a recipe newer than every
    # library is a rebuild that was stopped
    newer = max(lib.stat().st_mtime for lib in libraries) >= ninja.stat().st_mtime
    return newer and f"{torch_folder()}{os.sep}include" in ninja.read_text(errors="replace")


def torch_folder() -> str:
    """This environment's torch package, as a build recipe names it (its headers and libraries)."""
    import torch

    return str(Path(torch.__file__).parent)


def build_folder(op) -> Path:
    from torch.utils import cpp_extension

    return Path(cpp_extension._get_build_directory(op.name, verbose=False))


def wait_out_lock(op, clear: bool = True) -> bool:
    """Wait while another process holds the op's build lock; with ``clear``, remove a lock a stopped compile left
    behind (torch would wait on it forever).  True when this process removed a stale lock.

    A lock is stale when it is older than STALE_AFTER_S and no process works in the build folder: whoever holds a
    live lock runs ninja and the compiler there within a moment of taking it.  Of a job's ranks on one machine only
    one clears (the others wait for it), so the job hears of the stale lock once, from the rank that removed it."""
    import psutil

    folder = build_folder(op)
    lock = folder / "lock"
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return False
        busy = any(p.info.get("cwd") and Path(p.info["cwd"]) == folder for p in psutil.process_iter(["cwd"]))
        if clear and age >= STALE_AFTER_S and not busy:
            lock.unlink(missing_ok=True)
            return True
        time.sleep(1.0)


def own_ninja() -> None:
    """This environment's ninja first on this process's PATH, for every op torch builds or checks from here on.

    torch runs whichever ``ninja`` PATH finds, and ninja versions record a build's command under different hashes:
    a job whose PATH found the system's ninja 1.11 and one that found the environment's 1.13 (a launcher started
    with the venv's bin first) each took the other's build for a changed one and compiled it again, minutes a job."""
    scripts = sysconfig.get_path("scripts")
    path = os.environ.get("PATH", "")
    if (Path(scripts) / "ninja").is_file() and path.split(os.pathsep)[0] != scripts:
        os.environ["PATH"] = os.pathsep.join([scripts, path]) if path else scripts


def load_for_job(device_type: str, ds_config: dict | None, announce, clear_stale: bool = True) -> None:
    """Load the job's ops before DeepSpeed does; ``announce(kind, **fields)`` hears of each one this process
    compiles (ranks that find another rank compiling wait for it inside ``load``).  ``clear_stale``: this process
    is the one of its machine that removes a stale build lock (see wait_out_lock)."""
    own_ninja()  # also for the ops DeepSpeed loads itself later in this process
    own_extensions()  # the folder build-ops built them in, whoever started this job
    for name in needed(device_type, ds_config):
        op = builder(name)
        if op is None or not op.is_compatible(False):
            continue  # DeepSpeed falls back (gloo instead of the shm op) or says why itself
        fresh = not is_built(op)
        started = time.time()
        if fresh:
            announce("compile", op=op.name)
        # also where a library is there: torch takes the build lock before it looks at it, and waits for ever on
        # one that a stopped rebuild left beside the old library
        if wait_out_lock(op, clear=clear_stale):
            announce("stale_lock", op=op.name)
        op.load(verbose=False)
        if fresh:
            announce("compiled", op=op.name, seconds=round(time.time() - started, 1))


# --- zeroboard build-ops: one process per op, side by side -------------------------------------------------

def machine_kind() -> str:
    return "cuda" if devices.detect_gpus() else "cpu"


def build_one(class_name: str) -> dict:
    """In a child process: build one op; the result as a dict (op, status: there | built | skipped | failed)."""
    started = time.time()
    own_ninja()
    own_extensions()  # build_all's environment names it already; run by hand, the same folder
    try:
        op = builder(class_name)
        if op is None or not op.is_compatible(False):
            why = "; ".join(getattr(op, "error_log", None) or []) if op is not None else ""
            return {"op": class_name, "status": "skipped", "why": str(why or class_name)[-300:]}
        there = is_built(op)
        wait_out_lock(op)  # a lock a stopped build left: torch would wait on it for ever, library there or not
        op.load(verbose=False)
        return {"op": op.name, "status": "there" if there else "built", "seconds": round(time.time() - started, 1)}
    except Exception as e:  # a compiler error: the job would meet it too; say it here, first
        return {"op": class_name, "status": "failed", "why": f"{type(e).__name__}: {e}"[-600:]}


def build_all(kind: str, lang: str = DEFAULT, out=None, only: list[str] | None = None) -> int:
    """Build this machine's ops (or ``only`` these builders) side by side, with a progress line every few seconds
    (flushed: a build log shows them as they come); 0 when all are usable."""
    out = out or functools.partial(print, flush=True)
    env = {**os.environ, **job_env(kind), "PYTHONUNBUFFERED": "1"}
    names = tuple(only) if only else MACHINE_OPS[kind]
    out(text("ops.start", lang, kind=kind, ops=", ".join(OP_NAMES.get(n, n) for n in names),
             folder=env.get(EXTENSIONS_ENV) or "?"))
    started = time.time()
    children = {n: subprocess.Popen([sys.executable, "-m", __name__, n], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for n in names}
    results: dict[str, dict] = {}
    last_beat = started
    while len(results) < len(children):
        time.sleep(0.2)
        for name, child in children.items():
            if name in results or child.poll() is None:
                continue
            stdout, stderr = child.communicate()
            lines = [line for line in stdout.splitlines() if line.startswith("{")]
            result = json.loads(lines[-1]) if lines else {"op": name, "status": "failed", "why": stderr[-600:]}
            results[name] = result
            out(text(f"ops.{result['status']}", lang, op=result["op"], seconds=result.get("seconds", 0),
                    why=result.get("why", "")))
        if time.time() - last_beat >= HEARTBEAT_S and len(results) < len(children):
            last_beat = time.time()
            waiting = ", ".join(OP_NAMES.get(n, n) for n in names if n not in results)
            out(text("ops.still", lang, ops=waiting, wall=f"{int(last_beat - started)}"))
    failed = [r for r in results.values() if r["status"] == "failed"]
    out(text("ops.done", lang, wall=f"{time.time() - started:.0f}") if not failed else text("ops.some_failed", lang))
    return 1 if failed else 0


if __name__ == "__main__":
    print(json.dumps(build_one(sys.argv[1])), flush=True)
