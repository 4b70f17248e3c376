"""A job as an sbatch script: the exact script Preview shows and Start submits, and Slurm's own verdict on it.

One task per node; each task runs torchrun, which starts that node's ranks and
meets the other nodes through c10d rendezvous on the first node of the
allocation::

    srun --ntasks-per-node=1 bash -c 'torchrun --nnodes "$SLURM_NNODES" --rdzv_backend c10d
        --rdzv_endpoint "$ZB_HEAD:PORT" --rdzv_id "$SLURM_JOB_ID" ... -m zeroboard.training.train ...'

The run folder and the Python environment must be on a filesystem every node
shares (as home and project folders are on a cluster): the ranks write events
and checkpoints there, and the page (on the login node) reads them.  The
batch script's output is the run's ``launcher.log``.

Before anything is submitted, ``sbatch --test-only`` asks the cluster whether
it would run the script; a refusal (a partition that does not exist, more
GPUs than a node has) is shown in Slurm's own words, on the field it concerns.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..words import Msg, say
from .quoting import Unwritable, one_line, sbatch_value, shell, shell_line
from .spec import JobSpec

SCRIPT_FILE = "job.sbatch"  # in the run folder: what was submitted (record.SBATCH_FILE)
TEST_TIMEOUT_S = 20
TIME_LIMIT = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^\d+-\d+$")
NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# words of Slurm's refusals -> the field to mark
FIELDS_OF_REASONS = (("partition", "slurm_partition"), ("account", "slurm_account"), ("time limit", "slurm_time"),
                     ("gres", "slurm_gpus_per_node"), ("gpu", "slurm_gpus_per_node"), ("node", "num_nodes"),
                     ("cpu", "slurm_cpus_per_task"), ("processor", "slurm_cpus_per_task"))
# the variables the node's shell fills in for ZeroBoard's own rendezvous options (see OnNode)
NODE_VARS = ("SLURM_NNODES", "ZB_HEAD", "SLURM_JOB_ID")

# The extra #SBATCH options a job may add (slurm_extra), read from sbatch(1): where it runs, what more it is given,
# when it starts, and who is told.  Refused: whatever runs code (--wrap, --container, burst buffers), reads or writes
# files (--output, --error, --input, --export-file, --nodefile), changes the folder or the environment (--chdir,
# --export, --get-user-env, --uid), changes what sbatch answers ZeroBoard (--parsable, --test-only, --wait, --array,
# --hold, --clusters), and what ZeroBoard sets itself from the job's fields (OWNED).
EXTRA_ALLOWED = frozenset({
    "mem", "mem-per-cpu", "mem-per-gpu", "tmp", "constraint", "prefer", "qos", "reservation", "exclusive",
    "oversubscribe", "gres", "gres-flags", "gpus", "cpus-per-gpu", "gpu-bind", "hint", "threads-per-core", "licenses",
    "nodelist", "exclude", "contiguous", "mincpus", "mail-type", "mail-user", "comment", "wckey", "signal", "requeue",
    "no-requeue", "begin", "deadline", "time-min", "nice", "priority", "dependency"})
EXTRA_SWITCHES = frozenset({"exclusive", "oversubscribe", "contiguous", "requeue", "no-requeue", "nice"})  # no value needed
SHORT = {"C": "constraint", "q": "qos", "w": "nodelist", "x": "exclude", "G": "gpus", "L": "licenses", "d": "dependency",
         "b": "begin", "s": "oversubscribe", "J": "job-name", "N": "nodes", "n": "ntasks", "p": "partition", "t": "time",
         "A": "account", "c": "cpus-per-task", "o": "output", "e": "error", "i": "input", "D": "chdir", "a": "array",
         "H": "hold", "M": "clusters", "W": "wait"}
# what ZeroBoard writes itself -> the field that sets it
OWNED = {"job-name": "output_dir", "nodes": "num_nodes", "ntasks": "num_nodes", "ntasks-per-node": "num_nodes",
         "partition": "slurm_partition", "time": "slurm_time", "account": "slurm_account",
         "cpus-per-task": "slurm_cpus_per_task", "gpus-per-node": "slurm_gpus_per_node",
         "output": "output_dir", "error": "output_dir", "open-mode": "output_dir"}


@dataclass(frozen=True)
class OnNode:
    """An argument the node's shell fills in: one of NODE_VARS, then ZeroBoard's own suffix (a port).

    Only :func:`torchrun_args` makes them, so what is expanded on the node is marked where it is made; every other
    argument, whatever it holds (``$ZB_HEAD`` typed into a folder name), is one literally quoted word."""

    var: str
    suffix: str = ""

    def __post_init__(self):
        if self.var not in NODE_VARS or not re.fullmatch(r"(:\d+)?", self.suffix):
            raise ValueError(self.var + self.suffix)

    def word(self) -> str:
        return f'"${self.var}{self.suffix}"'

    def value(self, env: dict[str, str]) -> str:
        """What the node's shell makes of it, given the node's variables."""
        return env[self.var] + self.suffix


def extra_option(item: str) -> tuple[str, str | None] | Msg:
    """One entry of slurm_extra as (the long option, its value or None), or why it is refused."""
    text = item.strip()
    m = re.fullmatch(r"--([a-z][a-z-]*)(?:[= ](.*))?|-([A-Za-z])(?:[= ]?(.+))?", text, re.S)
    if m is None:
        return say("slurm.extra_form", got=one_line(text[:60]))
    flag = m.group(1) or SHORT.get(m.group(3), m.group(3))
    value = m.group(2) if m.group(1) else m.group(4)
    value = value.strip() if value is not None else None
    if flag in ("output", "error", "open-mode"):
        return say("slurm.extra_output", got=one_line(text[:60]))
    if flag == "chdir":
        return say("slurm.extra_chdir", got=one_line(text[:60]))
    if flag in OWNED:
        return say("slurm.extra_owned", got=one_line(text[:60]), flag="--" + flag, field=OWNED[flag])
    if flag not in EXTRA_ALLOWED:
        return say("slurm.extra_refused", got=one_line(text[:60]), allowed=", ".join(f"--{f}" for f in sorted(EXTRA_ALLOWED)))
    if not value and flag not in EXTRA_SWITCHES:
        return say("slurm.extra_value", got=one_line(text[:60]), flag="--" + flag)
    try:
        sbatch_value(value or "")
    except Unwritable as e:
        return say("slurm.extra_unwritable", got=one_line(text[:60]), why=e.args[0])
    return flag, value or None


def problems(spec: JobSpec) -> dict[str, Msg]:
    """What in the job's Slurm fields cannot be submitted as written (before the cluster is asked)."""
    out: dict[str, Msg] = {}
    if shutil.which("sbatch") is None:
        out["launcher"] = say("slurm.no_sbatch")
    for name in ("slurm_partition", "slurm_account"):
        value = getattr(spec, name)
        if value and not NAME.match(value):
            out[name] = say("slurm.bad_name", got=one_line(value[:60]))
    if spec.slurm_time and not TIME_LIMIT.match(spec.slurm_time):
        out["slurm_time"] = say("slurm.bad_time", got=one_line(spec.slurm_time[:40]))
    refused = [m for m in map(extra_option, spec.slurm_extra) if isinstance(m, str)]
    if refused:
        out["slurm_extra"] = refused[0]
    run = str((Path(os.getcwd()) / spec.output_dir).resolve())
    if "\\" in run:
        out["output_dir"] = say("slurm.backslash", path=one_line(run))
    for where, path in (("output_dir", run), ("launcher", os.getcwd())):
        try:
            sbatch_value(path)
        except Unwritable as e:
            out.setdefault(where, say("slurm.path_unwritable", path=one_line(path), why=e.args[0]))
    return out


def log_file(path: str) -> str:
    """The batch job's output file for an #SBATCH line.  Slurm replaces %j, %N... in it; where the name holds a
    backslash, it drops every backslash and replaces nothing: each % written as \\% keeps the name as it is (a
    backslash of the name's own could not be kept: :func:`problems` refuses it)."""
    if "\\" in path:
        raise Unwritable(say("slurm.backslash", path=one_line(path)))
    return sbatch_value(path.replace("%", "\\%"))


def render(spec: JobSpec, argv: list[str | OnNode], env: dict[str, str], run_dir: Path, cwd: str,
           ranks_per_node: int) -> str:
    """The sbatch script: #SBATCH lines from the job's Slurm fields, the environment, then one srun of torchrun.
    Every value is quoted for where it goes (raises Unwritable where it cannot be: :func:`problems` says so first)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(spec.output_dir).name)[:40] or "run"
    lines = ["#!/bin/bash", f"#SBATCH --job-name=zeroboard-{name}", f"#SBATCH --nodes={spec.num_nodes}",
             "#SBATCH --ntasks-per-node=1"]
    if spec.slurm_gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.slurm_gpus_per_node}")
    lines.append(f"#SBATCH --cpus-per-task={spec.slurm_cpus_per_task or ranks_per_node}")
    for flag, value in (("partition", spec.slurm_partition), ("time", spec.slurm_time), ("account", spec.slurm_account)):
        if value:
            lines.append(f"#SBATCH --{flag}={sbatch_value(value)}")
    lines += [f"#SBATCH --output={log_file(str(run_dir / 'launcher.log'))}", "#SBATCH --open-mode=append",
              f"#SBATCH --chdir={sbatch_value(cwd)}"]
    for item in spec.slurm_extra:
        option = extra_option(item)
        if isinstance(option, str):
            raise Unwritable(option)
        flag, value = option
        lines.append(f"#SBATCH --{flag}" + (f"={sbatch_value(value)}" if value is not None else ""))
    lines += ["", "# " + one_line(say("slurm.script_note", run=str(run_dir))), "set -euo pipefail"]
    lines += ["export " + shell_line({k: v}, []) for k, v in env.items()]
    lines += ["# " + say("slurm.script_head"),
              # (sed reads the whole list: head would leave scontrol writing a long one into a closed pipe, and
              # pipefail would end the job there)
              'ZB_HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
              """ZB_HEAD=$(scontrol show node "$ZB_HEAD_NODE" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')""",
              'export ZB_HEAD="${ZB_HEAD:-$ZB_HEAD_NODE}"',
              f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {shell(node_command(argv))}", ""]
    return "\n".join(lines)


def node_command(argv: list[str | OnNode]) -> str:
    """What each node's task runs: ZeroBoard's own rendezvous options as the node's variables, every other argument
    one literal word."""
    return " ".join(a.word() if isinstance(a, OnNode) else shell(a) for a in argv)


def torchrun_args(spec: JobSpec, port: int, ranks_per_node: int) -> list[str | OnNode]:
    """torchrun's options on a Slurm allocation: every node finds the first one through c10d, which also numbers
    the nodes (a --node_rank is only read by the static rendezvous; torchrun ignores it here, with a warning)."""
    return ["--nnodes", OnNode("SLURM_NNODES"), "--rdzv_backend", "c10d", "--rdzv_endpoint", OnNode("ZB_HEAD", f":{port}"),
            "--rdzv_id", OnNode("SLURM_JOB_ID"), "--nproc_per_node", str(ranks_per_node)]


def test_only(script: str, timeout: float = TEST_TIMEOUT_S) -> tuple[str, Msg] | None:
    """Slurm's own verdict on the script (``sbatch --test-only``), as (field, message) when it refuses; None when
    it would run it."""
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", delete=False) as fh:
        fh.write(script)
        path = fh.name
    try:
        done = subprocess.run(["sbatch", "--test-only", path], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "launcher", say("slurm.no_answer", seconds=round(timeout))
    except OSError as e:
        return "launcher", say("slurm.cannot_run", why=e.strerror or str(e))
    finally:
        Path(path).unlink(missing_ok=True)
    said = (done.stderr + done.stdout).strip()
    if done.returncode == 0 and "error" not in said.lower():
        return None
    reason = " ".join(ln.strip() for ln in said.splitlines() if ln.strip())[:500] or f"exit {done.returncode}"
    low = reason.lower()
    field = next((f for word, f in FIELDS_OF_REASONS if word in low), "launcher")
    return field, say("slurm.refused", why=reason)
