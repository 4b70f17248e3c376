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

from dataclasses import dataclass, field
from pathlib import Path

from .. import safeload, workspace
from ..words import Msg, say
from ..workspace import cache_dir
from . import bounds, devices
from .spec import JobSpec


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


def offloads_parameters(stage: str, offload: bool) -> bool:
    """Whether offload moves the parameters too, not only the optimizer states: ZeRO-3 alone partitions the
    parameters, so ZeRO-3 alone can offload them (stages 0-2 keep every parameter on every device).

    The one place this rule lives: the presets, the placement of a file of one's own, the planner's settings and
    its words all ask here."""
    return offload and stage == "3"


# --- the presets' content (``presets`` writes them into cache/) ----------------------------------------------

def preset_name(stage: str, offload: bool) -> str:
    return f"ds_z{stage}{'_offload' if offload else ''}_config.json"


def preset(stage: str, offload: bool) -> dict:
    """The DeepSpeed config for ZeRO stage 2 or 3, with or without CPU offload."""
    if stage not in ("2", "3"):
        raise ValueError(stage)  # a caller's bug: the spec only has none, 2 and 3
    zero: dict = {"stage": int(stage)}
    if stage == "2":
        zero.update(
            allgather_partitions=True,
            allgather_bucket_size=500_000_000,
            overlap_comm=True,
            reduce_scatter=True,
            reduce_bucket_size=500_000_000,
            contiguous_gradients=True,
            round_robin_gradients=True,
        )
    else:
        zero.update(
            overlap_comm=True,
            contiguous_gradients=True,
            sub_group_size=1_000_000_000,
            reduce_bucket_size="auto",
            stage3_prefetch_bucket_size="auto",
            stage3_param_persistence_threshold="auto",
            stage3_max_live_parameters=1_000_000_000,
            stage3_max_reuse_distance=1_000_000_000,
            stage3_gather_16bit_weights_on_model_save=True,
        )
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if offloads_parameters(stage, offload):
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_allow_untested_optimizer": True,
        "fp16": {
            "enabled": "auto",
            "loss_scale": 0,
            "loss_scale_window": 1000,
            "initial_scale_power": 16,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        "bf16": {"enabled": "auto"},
        "zero_optimization": zero,
    }



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
    # a count past its bound is refused by the checks; placing it must not build it first
    return list(range(max(0, min(spec.num_processes, int(bounds.BOUNDS["num_processes"].high)))))


def resolve_precision(spec: JobSpec, kind: str, chosen: list[devices.Gpu]) -> str:
    if spec.precision != "auto":
        return spec.precision
    if kind == "cpu":
        return "fp32"
    if on_cluster(spec):  # the cluster's GPUs are not seen from here: bf16, as every GPU since Ampere has it
        return "bf16"
    return "bf16" if all(g.supports_bf16 for g in chosen) else "fp16"


def read_config(path: str) -> tuple[dict | None, Msg | None]:
    """A DeepSpeed JSON file's content, or None and why it cannot be used (nothing outside the workspace is read)."""
    p = Path(path)
    ws = workspace.current()
    if not ws.readable(p):
        return None, say("check.read_outside", path=str(p), roots=ws.describe())
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
    return stage, offloaded("offload_optimizer"), offloads_parameters(stage, offloaded("offload_param"))


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
        path = str(cache_dir() / preset_name(spec.deepspeed_stage, spec.offload))
        cfg = preset(spec.deepspeed_stage, spec.offload)
    else:
        path, cfg = None, None
    stage, off_opt, off_par = zero_setting(cfg)
    if spec.deepspeed and cfg is None:  # unreadable: what the job's own fields say
        stage, off_opt, off_par = spec.deepspeed_stage, spec.offload, offloads_parameters(spec.deepspeed_stage, spec.offload)
    return Placement(kind, tuple(ids), max(1, spec.num_nodes), precision, stage, off_opt, off_par, path, cfg, error,
                     bool(spec.deepspeed), chosen)
