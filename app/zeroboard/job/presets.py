"""DeepSpeed presets: the four JSON files a course reader looks for in cache/.

Values the HF Trainer knows better (batch sizes, accumulation, clipping,
precision) are ``"auto"``; the Trainer fills them from the job at start.

A preset a user edited by hand is kept: ``cache/.presets.json`` records the
hash of what ZeroBoard last wrote, and a file whose content no longer matches
it is left alone and reported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import files
from ..words import Msg, say

MANIFEST = ".presets.json"


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
        if stage == "3":
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


ALL = [(s, o) for s in ("2", "3") for o in (False, True)]


def render(config: dict) -> str:
    return json.dumps(config, indent=2) + "\n"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class PresetReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # edited by hand, left alone

    def message(self) -> Msg | str:
        if self.written and self.kept:
            return say("check.presets_wrote_kept", written=", ".join(self.written), kept=", ".join(self.kept))
        if self.kept:
            return say("check.presets_kept", kept=", ".join(self.kept))
        if self.written:
            return say("check.presets_wrote", written=", ".join(self.written))
        return ""


def write_presets(folder: str | Path) -> PresetReport:
    """Write the four presets into ``folder`` without clobbering hand edits."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    report = PresetReport()
    for stage, offload in ALL:
        name = preset_name(stage, offload)
        path = folder / name
        text = render(preset(stage, offload))
        if path.exists():
            current = path.read_text(encoding="utf-8")
            if current == text:
                report.unchanged.append(name)
                manifest[name] = _digest(text)
                continue
            if manifest.get(name) != _digest(current):
                report.kept.append(name)
                continue
        files.write_text_atomic(path, text)
        manifest[name] = _digest(text)
        report.written.append(name)
    files.write_text_atomic(manifest_path, json.dumps(manifest, indent=2) + "\n")
    return report
