"""The exact command: one function turns a job into argv + environment.

``zeroboard preview`` prints it, ``zeroboard train`` and the web UI's Start
run the very same argv (no shell).  The shell line is only a rendering of it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..words import say
from . import checks, devices, dstune, placement as placemod, presets, slurm as slurmmod
from .placement import Placement, cache_dir
from .ports import free_port, port_is_free
from .quoting import shell_line
from .spec import FIELDS, JobSpec, changed, to_flags

__all__ = ["Command", "Prepared", "build", "cache_dir", "check_and_build", "free_port", "port_is_free", "with_port"]

TRAINER_MODULE = "zeroboard.training.train"
# the chat worker (a job like a training run for the device guard): ``--folder`` names its folder, as --output_dir a run's
CHAT_MODULE = "zeroboard.outputs.chat_worker"
# the modules behind the launchers' scripts, for a Python that has no script of its own (see _launcher)
LAUNCHER_MODULES = {"torchrun": "torch.distributed.run", "deepspeed": "deepspeed.launcher.runner"}
# NVLink SHARP / multicast is off for jobs we launch: it needs fabric services
# that many hosts (and containers) lack, and NCCL then hangs at init.
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0"}
# The CUDA allocator grows segments in place instead of caching blocks of every size it was asked for: what
# NVML shows stays close to what torch allocates, so the planner's "needed" figure holds on any shape (with
# fixed-size segments the gap was 1 to 7 GiB on the H200, depending on DeepSpeed and the sequence lengths).
# A value the user set (even empty) is kept.
ALLOC_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]  # only what ZeroBoard sets on top of the inherited environment
    cwd: str
    deepspeed_config: str | None  # path as it appears in argv, or None without DeepSpeed
    device_kind: str  # "cuda" or "cpu"
    devices: list[int] = field(default_factory=list)  # GPU indices, or CPU ranks
    master_port: int = 0
    notes: list[str] = field(default_factory=list)
    executor: str = "local"  # "local": argv runs here; "slurm": argv submits ``script`` to a cluster
    script: str | None = None  # the sbatch script (a Slurm job)

    @property
    def world_size(self) -> int:
        return len(self.devices)

    def shell(self) -> str:
        """A copy-pasteable bash line for the same argv and environment (every value one quoted word)."""
        return shell_line(self.env, self.argv)

    def full_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def to_dict(self) -> dict:
        return {"argv": self.argv, "env": self.env, "cwd": self.cwd, "shell": self.shell(),
                "deepspeed_config": self.deepspeed_config, "device_kind": self.device_kind,
                "devices": self.devices, "master_port": self.master_port, "notes": self.notes,
                "executor": self.executor, "script": self.script}


@dataclass
class Prepared:
    spec: JobSpec
    report: checks.Report
    command: Command | None
    presets: presets.PresetReport | None = None
    placement: Placement | None = None


def _launcher(name: str) -> list[str]:
    """The launcher of this Python: its script next to this interpreter (a bare name when PATH finds that same file),
    else this interpreter running the launcher's module.  A script found elsewhere on PATH belongs to another Python:
    with torch in the system's site-packages and ZeroBoard in a venv (the Docker image), the system's torchrun
    started ranks that could not import ZeroBoard."""
    local = Path(sys.executable).parent / name
    if not local.exists():
        return [sys.executable, "-m", LAUNCHER_MODULES[name]]
    found = shutil.which(name)
    return [name if found and Path(found).resolve() == local.resolve() else str(local)]


def sanitized_arch_list(value: str) -> str:
    """Drop arch suffixes like '9.0a' that DeepSpeed's op builder cannot parse ('9.0a' -> '9.0')."""
    clean: list[str] = []
    for part in value.replace(";", " ").split():
        arch, plus, ptx = part.partition("+")
        item = arch.rstrip("af") + plus + ptx
        if item not in clean:
            clean.append(item)
    return ";".join(clean)


def arch_env() -> dict[str, str]:
    """TORCH_CUDA_ARCH_LIST cleaned for DeepSpeed's op builds when the one inherited would break them; else {}.

    Jobs and ``zeroboard build-ops`` use the same value, so an op built ahead is the one a job loads."""
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch and any(p.partition("+")[0].endswith(("a", "f")) for p in arch.replace(";", " ").split()):
        return {"TORCH_CUDA_ARCH_LIST": sanitized_arch_list(arch)}
    return {}


def build(spec: JobSpec, where: Placement, port: int | None = None) -> Command:
    """argv + environment for a validated spec and its placement (see :func:`check_and_build`)."""
    use_gpu = where.kind == "cuda"
    ids, n = list(where.ids), where.per_node
    port = spec.master_port or port or free_port()  # a port the user fixed wins
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    notes: list[str] = []
    if use_gpu:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # same numbering as NVML and nvidia-smi
        env.update(NCCL_ENV)
        if not any(k in os.environ for k in (*ALLOC_ENV, "PYTORCH_ALLOC_CONF")):
            env.update(ALLOC_ENV)
        arch = arch_env()
        if arch:
            env.update(arch)
            notes.append(say("check.arch_list", given=os.environ["TORCH_CUDA_ARCH_LIST"], used=arch["TORCH_CUDA_ARCH_LIST"]))
        if where.offload and n > 1 and "OMP_NUM_THREADS" not in os.environ:
            # offload runs the optimizer step on the CPU, in OpenMP threads: torchrun would give each of several
            # ranks one thread (and the deepspeed launcher every rank all cores); the ranks share the host's cores
            env["OMP_NUM_THREADS"] = str(max(1, devices.cpu_count() // n))
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["DS_ACCELERATOR"] = "cpu"
        env["OMP_NUM_THREADS"] = str(max(1, devices.cpu_count() // n))

    trainer_values = {k: v for k, v in changed(spec).items() if not FIELDS[k].metadata["launch_only"]}
    trainer_values.update(model_name_or_path=spec.model_name_or_path, output_dir=spec.output_dir, device_type=where.kind,
                          precision=where.precision)
    trainer_values.pop("deepspeed", None)
    if where.ds_path:
        trainer_values["deepspeed"] = where.ds_path
    flags = to_flags({k: trainer_values[k] for k in FIELDS if k in trainer_values})

    if spec.launcher == "slurm":
        return _on_slurm(spec, where, env, flags, port, notes)
    if spec.launcher == "torchrun":
        if use_gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, ids))
        # --tee 3 copies every rank's stdout/stderr to the console with this prefix: a traceback names its rank
        env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[rank${rank}]:"
        nodes = ["--nnodes", str(spec.num_nodes), "--node_rank", str(spec.node_rank), "--master_addr", spec.master_addr]
        argv = [*_launcher("torchrun"), "--tee", "3", *(nodes if spec.num_nodes > 1 else []), "--nproc_per_node", str(n),
                "--master_port", str(port), "-m", TRAINER_MODULE]
    else:
        if use_gpu:
            where_args = ["--include", "localhost:" + ",".join(map(str, ids))]
        else:
            env["LOCAL_SIZE"] = str(n)  # DeepSpeed's CPU accelerator counts devices from this
            where_args = ["--num_gpus", str(n)]
        argv = [*_launcher("deepspeed"), *where_args, "--master_port", str(port), "--no_local_rank", "--module",
                TRAINER_MODULE]
    return Command(argv + flags, env, os.getcwd(), where.ds_path, where.kind, ids, port, notes)


def _on_slurm(spec: JobSpec, where: Placement, env: dict[str, str], flags: list[str], port: int,
              notes: list[str]) -> Command:
    """A Slurm job: the torchrun each node runs, inside the sbatch script that Start submits."""
    n = where.per_node
    if where.kind == "cuda":
        env.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm gives each node's task its GPUs
    else:  # the task's cores (not this machine's) shared by its ranks
        env["OMP_NUM_THREADS"] = str(max(1, (spec.slurm_cpus_per_task or n) // n))
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[rank${rank}]:"
    argv: list[str | slurmmod.OnNode] = [*_launcher("torchrun"), "--tee", "3", *slurmmod.torchrun_args(spec, port, n),
                                          "-m", TRAINER_MODULE, *flags]
    run = (Path(os.getcwd()) / spec.output_dir).resolve()
    script = slurmmod.render(spec, argv, env, run, os.getcwd(), n)
    return Command(["sbatch", "--parsable", str(run / slurmmod.SCRIPT_FILE)], {}, os.getcwd(), where.ds_path, "slurm",
                   [], port, notes, executor="slurm", script=script)


def check_and_build(spec: JobSpec, gpus: list[devices.Gpu] | None = None, port: int | None = None,
                    write_presets: bool = True) -> Prepared:
    """Validate, write the cache/ presets, build the command: the job layer's part of the launch entry point
    (``runs.launch.prepare_launch``, which adds the memory verdict; Preview and Start call that)."""
    gpus = devices.detect_gpus() if gpus is None else gpus
    where = placemod.place(spec, gpus)
    report = checks.validate(spec, gpus, where)
    preset_report = None
    if write_presets and where.deepspeed and not where.custom and report.ok:
        try:
            preset_report = presets.write_presets(cache_dir())
        except OSError as e:
            report.errors["deepspeed_stage"] = say("check.presets_unwritable", path=str(cache_dir()), why=e.strerror or str(e))
        else:
            if preset_report.kept:
                report.warnings["deepspeed_stage"] = preset_report.message()
    cmd = build(spec, where, port) if report.ok else None
    if cmd is not None and cmd.script is not None:  # the cluster's own verdict, before anything is submitted
        refused = slurmmod.test_only(cmd.script)
        if refused is not None:
            report.errors[refused[0]] = refused[1]
            cmd = None
    if cmd is not None:
        for note in cmd.notes:
            report.warnings.setdefault("environment", note)
        if where.deepspeed and where.ds_config is not None:
            values = dstune.for_run(where.ds_config, where.ds_path, where.world_size, spec.model_name_or_path,
                                    spec.gradient_checkpointing, spec.finetuning_type == "lora", spec.lora_rank,
                                    spec.lora_target, device=where.kind)[1]
            if values:
                report.warnings.setdefault("deepspeed", dstune.note(values))
    return Prepared(spec, report, cmd, preset_report, where)


def with_port(cmd: Command, port: int) -> Command:
    argv = list(cmd.argv)
    argv[argv.index("--master_port") + 1] = str(port)
    return replace(cmd, argv=argv, master_port=port)
