"""DeepSpeed values ZeroBoard chooses for a run, on top of the course's preset files.

The four files in ``cache/`` keep their readable content; these values are set for the run only, where the placement
makes a preset value cost time for nothing. The preview says which (``note``), the trainer applies the same
(``for_run``) and each run keeps the JSON it used (``ds_config.json``) and the one the Trainer filled in
(``ds_config.resolved.json``). A value the user edited in a preset file, and a DeepSpeed file of the user's own, are
never changed.

One GPU, no offload (nothing to split and nothing to communicate):

- ``overlap_comm: false`` (ZeRO-2 and 3): overlapping moves each reduction onto a side stream and synchronizes the
  whole device before every bucket (``stage_1_and_2.allreduce_and_copy``); there is no communication to hide.
- ``stage3_param_persistence_threshold`` = the model's parameter count: every parameter stays whole. On one GPU a
  ZeRO-3 partition is the whole parameter, so gathering one only copies it into a second buffer and releasing it frees
  that copy again, for every layer in forward and in backward.
- ``leaf_module.classes`` = the model's decoder layer class (``LlamaDecoderLayer`` for ``LlamaForCausalLM``): ZeRO-3
  hooks each decoder layer as one unit instead of each of its linear layers, norms and blocks, and reduces the layer's
  gradients once its backward is done (``stage3.create_reduce_and_remove_grad_hooks``). Full fine-tuning only: with
  LoRA's adapters inside the layer the backward met a released (empty) parameter (seen on CPU); and not with gradient
  checkpointing (the layer's backward then runs twice through DeepSpeed's re-entry logic; not tried).
  ``stage3_module_granularity_threshold``, the other way to make leaves, can make the whole model one leaf: its
  backward hook then never fires (the token ids need no gradient) and no gradient is reduced (seen on CPU).

Several CPU processes (the host's memory is every rank's device memory; gloo, no streams to overlap):

- ZeRO-2: ``reduce_bucket_size`` and ``allgather_bucket_size`` = H² (the hidden size squared, what the Trainer's
  "auto" gives ZeRO-3's bucket). The presets' 5e8 elements are sized for models of billions of parameters; on a
  smaller model one bucket holds every gradient, and reducing it copies them all once more (its flattened copy and
  the partition it is copied into): measured on two CPU processes, a 104 M model's stage-2 peak lay above the
  unsplit run's. Gradients then live as the partition the course's 2Ψ+14Ψ/N counts, plus one small bucket.
- ZeRO-3: ``stage3_max_live_parameters`` and ``stage3_max_reuse_distance`` = 0. The presets' 1e9 keep a gathered
  parameter until a billion others have been used: on a smaller model every layer gathered in the forward pass
  stays whole until its backward, and the rank holds the whole model again on top of its shard. At 0 each layer's
  weights are released once used and gathered again for the backward pass, as 16Ψ/N assumes.

``ZEROBOARD_DS_TUNING=off`` in the environment runs every preset exactly as written.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from ..words import Msg, say
from . import modelinfo, placement, presets

UNKNOWN_PARAMS = 10**12  # a model whose checkpoint cannot be read here: a count above any model's
TUNING_ENV = "ZEROBOARD_DS_TUNING"  # "off": every run uses the preset exactly as written


def chosen(stage: str, offload: bool, world: int, params: int | None, layer_class: str | None = None,
           checkpointing: bool = False, lora: bool = False, device: str = "cuda", hidden: int | None = None
           ) -> dict[str, Any]:
    """zero_optimization values for this placement and model (empty: the preset as written)."""
    if device == "cpu" and world > 1:
        return on_host(stage, hidden)
    if world != 1 or offload or stage not in ("2", "3"):
        return {}
    if stage == "2":
        return {"overlap_comm": False}
    out: dict[str, Any] = {"overlap_comm": False, "stage3_param_persistence_threshold": params or UNKNOWN_PARAMS}
    if layer_class and not checkpointing and not lora:
        out["leaf_module"] = {"classes": [layer_class]}
    return out


def on_host(stage: str, hidden: int | None) -> dict[str, Any]:
    """Several CPU processes: buckets of the model's size, and ZeRO-3's weights released once used (with offload too,
    which on CPU processes moves the states from host memory to host memory)."""
    if stage == "2":
        return {"reduce_bucket_size": hidden * hidden, "allgather_bucket_size": hidden * hidden} if hidden else {}
    if stage == "3":
        return {"stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0}
    return {}


def hidden_size(model_dir: str) -> int | None:
    """The model's hidden size from its config.json (None when it cannot be read)."""
    cfg = modelinfo.model_config(Path(model_dir)) or {}
    value = cfg.get("hidden_size", (cfg.get("text_config") or {}).get("hidden_size"))
    return value if isinstance(value, int) and value > 0 else None


def decoder_layer_class(model_dir: str) -> str | None:
    """The decoder layer's class name by transformers' naming (``LlamaForCausalLM`` -> ``LlamaDecoderLayer``); a
    name no module of the model has is ignored by DeepSpeed."""
    cfg = modelinfo.model_config(Path(model_dir))
    arch = ((cfg or {}).get("architectures") or [None])[0]
    if not isinstance(arch, str) or not arch.endswith("ForCausalLM"):
        return None
    return arch.removesuffix("ForCausalLM") + "DecoderLayer"


def is_preset(path: str | None) -> bool:
    """Whether ``path`` is one of the cache/ presets ZeroBoard writes (not a DeepSpeed file of the user's own)."""
    if not path:
        return False
    p = Path(path)
    names = {presets.preset_name(s, o) for s, o in presets.ALL}
    return p.name in names and p.parent.resolve() == placement.cache_dir().resolve()


def for_run(config: dict, path: str | None, world: int, model_dir: str, checkpointing: bool = False,
            lora: bool = False, device: str = "cuda") -> tuple[dict, dict[str, Any]]:
    """The config a run uses, and the values ZeroBoard set in it. A key is set only where the file still holds the
    preset's own value (or "auto"): a hand edit wins. ``device``: where the ranks run ("cuda" or "cpu")."""
    if not is_preset(path) or os.environ.get(TUNING_ENV, "").strip().lower() == "off":
        return config, {}
    stage, off_opt, off_par = placement.zero_setting(config)
    zero = config.get("zero_optimization") or {}
    default = presets.preset(stage, off_opt).get("zero_optimization", {}) if stage in ("2", "3") else {}
    on_cpu = device == "cpu" and world > 1
    picked = chosen(stage, off_opt or off_par, world, None if on_cpu else modelinfo.param_count(Path(model_dir)),
                    None if on_cpu else decoder_layer_class(model_dir), checkpointing, lora, device,
                    hidden_size(model_dir) if on_cpu else None)
    values = {k: v for k, v in picked.items() if zero.get(k, default.get(k)) in (default.get(k), "auto")}
    if not values:
        return config, {}
    out = copy.deepcopy(config)
    out["zero_optimization"].update(values)
    return out, values


def note(values: dict[str, Any]) -> Msg:
    """What the preview says about the values set."""
    shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in values.items())
    return say("check.ds_tuned", values=shown)


def world_size() -> int:
    """The trainer's world size, as its launcher set it."""
    return int(os.environ.get("WORLD_SIZE", "1"))
