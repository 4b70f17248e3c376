"""Placement: where a job runs and with what DeepSpeed setting, resolved once.

:func:`place` turns a job and the detected GPUs into a :class:`Placement`:
the device kind, the device ids (GPU indices, or CPU ranks), the world size,
the precision, and the *effective* ZeRO stage and offload -- from the job's
fields, or read from the user's own DeepSpeed JSON when one is given.  The
checks, the command, the planner, the page's device count and the run record
all use it, so none of them has its own copy of the rule.

Light (stdlib only): the web server calls it on every form change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import safeload
from ..words import Msg, say
from . import devices, presets
from .spec import JobSpec


def cache_dir() -> Path:
    """Where the DeepSpeed presets (and the demo model, the runs index) live: ``$ZEROBOARD_CACHE`` or ``cache``."""
    return Path(os.environ.get("ZEROBOARD_CACHE", "cache"))


@dataclass(frozen=True)
class Placement:
    kind: str  # "cuda" or "cpu"
    ids: tuple[int, ...]  # GPU indices in rank order (as nvidia-smi numbers them), or CPU ranks 0..n-1
    nodes: int  # machines taking part; each runs len(ids) ranks
    precision: str  # resolved: bf16, fp16 or fp32
    stage: str  # effective ZeRO stage: "none" (no DeepSpeed) or "0".."3"
    offload_optimizer: bool
    offload_param: bool
    ds_path: str | None  # the DeepSpeed JSON the command names (a cache/ preset or the user's file)
    ds_config: dict | None = field(default=None, compare=False, hash=False)  # its content, when it could be read
    ds_error: Msg | None = None  # why the user's JSON could not be read
    custom: bool = False  # the JSON is the user's own file, not a cache/ preset
    chosen: tuple[devices.Gpu, ...] = field(default=(), compare=False, hash=False)  # the GPUs in use

    @property
    def per_node(self) -> int:
        return len(self.ids)

    @property
    def world_size(self) -> int:
        return len(self.ids) * self.nodes

    @property
    def deepspeed(self) -> bool:
        return self.stage != "none"

    @property
    def offload(self) -> bool:
        return self.offload_optimizer or self.offload_param

    def setting(self) -> str:
        """The effective setting as the run record stores it: none, 2, 3, 2+offload, ..."""
        return self.stage + ("+offload" if self.offload else "")


def on_cluster(spec: JobSpec) -> bool:
    """A Slurm job: its devices are a cluster's nodes, whatever this machine has."""
    return spec.launcher == "slurm"


def uses_gpu(spec: JobSpec, gpus: list[devices.Gpu]) -> bool:
    if on_cluster(spec):
        return spec.slurm_gpus_per_node > 0
    return spec.device_type == "cuda" or (spec.device_type == "auto" and bool(gpus))


def device_ids(spec: JobSpec, gpus: list[devices.Gpu]) -> list[int]:
    """The GPUs the job uses (those chosen, else all), or its CPU ranks; on a cluster, each node's."""
    if on_cluster(spec):
        return list(range(max(0, spec.slurm_gpus_per_node or spec.num_processes)))
    if uses_gpu(spec, gpus):
        return list(spec.gpu_ids) or [g.index for g in gpus]
    return list(range(max(0, spec.num_processes)))


def resolve_precision(spec: JobSpec, kind: str, chosen: list[devices.Gpu]) -> str:
    if spec.precision != "auto":
        return spec.precision
    if kind == "cpu":
        return "fp32"
    if on_cluster(spec):  # the cluster's GPUs are not seen from here: bf16, as every GPU since Ampere has it
        return "bf16"
    return "bf16" if all(g.supports_bf16 for g in chosen) else "fp16"


def read_config(path: str) -> tuple[dict | None, Msg | None]:
    """A DeepSpeed JSON file's content, or None and why it cannot be used."""
    p = Path(path)
    try:
        cfg = safeload.json_text(safeload.read_text(p, safeload.CONFIG), safeload.CONFIG)
    except safeload.Refused as e:
        return None, say("check.ds_unsafe", path=str(p), why=say(e.key, **e.values))
    except (OSError, UnicodeDecodeError):
        return None, say("check.ds_unreadable", path=str(p))
    except ValueError as e:
        return None, say("check.ds_not_json", path=str(p), why=str(e))
    if not isinstance(cfg, dict):
        return None, say("check.ds_not_object", path=str(p))
    return cfg, None


def zero_setting(cfg: dict | None) -> tuple[str, bool, bool]:
    """(stage, optimizer offloaded, parameters offloaded) of a DeepSpeed config; ("none", ...) without one."""
    if cfg is None:
        return "none", False, False
    zero = cfg.get("zero_optimization") or {}
    stage = str(zero.get("stage", 0)) if isinstance(zero, dict) else "0"
    offloaded = lambda key: str(((zero.get(key) or {}) if isinstance(zero, dict) else {}).get("device") or "none") in (
        "cpu", "nvme")  # noqa: E731
    return stage, offloaded("offload_optimizer"), offloaded("offload_param") and stage == "3"


def place(spec: JobSpec, gpus: list[devices.Gpu]) -> Placement:
    """Where the job runs and how DeepSpeed is set, from the job and what NVML sees (``[]``: CPU processes)."""
    gpu = uses_gpu(spec, gpus)
    kind = "cuda" if gpu else "cpu"
    ids = device_ids(spec, gpus)
    chosen = tuple(g for g in gpus if g.index in ids) if gpu and not on_cluster(spec) else ()
    precision = resolve_precision(spec, kind, list(chosen))
    error = None
    if spec.deepspeed:
        path: str | None = spec.deepspeed
        cfg, error = read_config(spec.deepspeed)
    elif spec.deepspeed_stage != "none":
        path = str(cache_dir() / presets.preset_name(spec.deepspeed_stage, spec.offload))
        cfg = presets.preset(spec.deepspeed_stage, spec.offload)
    else:
        path, cfg = None, None
    stage, off_opt, off_par = zero_setting(cfg)
    if spec.deepspeed and cfg is None:  # unreadable: what the job's own fields say
        stage, off_opt, off_par = spec.deepspeed_stage, spec.offload, spec.offload and spec.deepspeed_stage == "3"
    return Placement(kind, tuple(ids), max(1, spec.num_nodes), precision, stage, off_opt, off_par, path, cfg, error,
                     bool(spec.deepspeed), chosen)
