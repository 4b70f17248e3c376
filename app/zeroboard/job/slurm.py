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

import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..words import Msg, say
from .spec import JobSpec

SCRIPT_FILE = "job.sbatch"  # in the run folder: what was submitted (record.SBATCH_FILE)
TEST_TIMEOUT_S = 20
TIME_LIMIT = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^\d+-\d+$")
NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# words of Slurm's refusals -> the field to mark
FIELDS_OF_REASONS = (("partition", "slurm_partition"), ("account", "slurm_account"), ("time limit", "slurm_time"),
                     ("gres", "slurm_gpus_per_node"), ("gpu", "slurm_gpus_per_node"), ("node", "num_nodes"),
                     ("cpu", "slurm_cpus_per_task"), ("processor", "slurm_cpus_per_task"))
# the variables the per-node shell fills in (kept out of quoting)
NODE_VARS = {"$SLURM_NNODES", "$ZB_HEAD", "$SLURM_JOB_ID"}


def problems(spec: JobSpec) -> dict[str, Msg]:
    """What in the job's Slurm fields cannot be submitted as written (before the cluster is asked)."""
    out: dict[str, Msg] = {}
    if shutil.which("sbatch") is None:
        out["launcher"] = say("slurm.no_sbatch")
    for name in ("slurm_partition", "slurm_account"):
        value = getattr(spec, name)
        if value and not NAME.match(value):
            out[name] = say("slurm.bad_name", got=value[:60])
    if spec.slurm_time and not TIME_LIMIT.match(spec.slurm_time):
        out["slurm_time"] = say("slurm.bad_time", got=spec.slurm_time[:40])
    bad = [x for x in spec.slurm_extra if not x.startswith("-") or any(c in x for c in "\n\r'\"`$;")]
    if bad:
        out["slurm_extra"] = say("slurm.bad_extra", got=bad[0][:60])
    return out


def render(spec: JobSpec, argv: list[str], env: dict[str, str], run_dir: Path, cwd: str, ranks_per_node: int) -> str:
    """The sbatch script: #SBATCH lines from the job's Slurm fields, the environment, then one srun of torchrun."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(spec.output_dir).name)[:40] or "run"
    lines = ["#!/bin/bash", f"#SBATCH --job-name=zeroboard-{name}", f"#SBATCH --nodes={spec.num_nodes}",
             "#SBATCH --ntasks-per-node=1"]
    if spec.slurm_gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.slurm_gpus_per_node}")
    lines.append(f"#SBATCH --cpus-per-task={spec.slurm_cpus_per_task or ranks_per_node}")
    for flag, value in (("partition", spec.slurm_partition), ("time", spec.slurm_time), ("account", spec.slurm_account)):
        if value:
            lines.append(f"#SBATCH --{flag}={value}")
    lines += [f"#SBATCH --output={run_dir / 'launcher.log'}", "#SBATCH --open-mode=append", f"#SBATCH --chdir={cwd}"]
    lines += [f"#SBATCH {x}" for x in spec.slurm_extra]
    lines += ["", "# " + say("slurm.script_note", run=str(run_dir)), "set -euo pipefail"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines += ["# " + say("slurm.script_head"),
              'ZB_HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              """ZB_HEAD=$(scontrol show node "$ZB_HEAD_NODE" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')""",
              'export ZB_HEAD="${ZB_HEAD:-$ZB_HEAD_NODE}"',
              f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {shlex.quote(node_command(argv))}", ""]
    return "\n".join(lines)


def node_command(argv: list[str]) -> str:
    """What each node's task runs: the argv quoted for a shell, the node's own variables left to it."""
    return " ".join(f'"{a}"' if any(v in a for v in NODE_VARS) else shlex.quote(a) for a in argv)


def torchrun_args(spec: JobSpec, port: int, ranks_per_node: int) -> list[str]:
    """torchrun's options on a Slurm allocation: every node finds the first one through c10d, which also numbers
    the nodes (a --node_rank is only read by the static rendezvous; torchrun ignores it here, with a warning)."""
    return ["--nnodes", "$SLURM_NNODES", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", f"$ZB_HEAD:{port}", "--rdzv_id", "$SLURM_JOB_ID", "--nproc_per_node", str(ranks_per_node)]


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
