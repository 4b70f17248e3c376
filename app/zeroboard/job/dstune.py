"""DeepSpeed values ZeroBoard chooses for a run, on top of the course's preset files.

The four files in ``cache/`` keep their readable content; these values are set for the run only, where the placement
or the method makes a preset value cost time or memory for nothing. The preview says which (``note``), the trainer
applies the same (``for_run``), the planner plans them, and each run keeps the JSON it used (``ds_config.json``) and
the one the Trainer filled in (``ds_config.resolved.json``). A value the user edited in a preset file, and a DeepSpeed
file of the user's own, are never changed. Every value comes from the model's checkpoint header (``facts``), never
from loading it. Sources: DeepSpeed 0.19.8, ``runtime/zero/*``; the counts are ``benchmarks/zero_counts.py``'s.

One GPU, no offload (nothing to split and nothing to communicate):

- ``overlap_comm: false`` (ZeRO-2 and 3): overlapping moves each reduction onto a side stream and synchronizes the
  whole device before every bucket (``stage_1_and_2.allreduce_and_copy``); there is no communication to hide.
- ``stage3_param_persistence_threshold`` = the model's parameter count: every parameter stays whole. On one GPU a
  ZeRO-3 partition is the whole parameter, so gathering one only copies it into a second buffer and releasing it frees
  that copy again, for every layer in forward and in backward.
- ``leaf_module.classes`` = the model's decoder layer class (``LlamaDecoderLayer`` for ``LlamaForCausalLM``): ZeRO-3
  hooks each decoder layer as one unit instead of each linear layer, norm and block inside it
  (``parameter_offload._register_deepspeed_module`` stops at a leaf), and reduces the layer's gradients once its
  backward is done (``stage3.create_reduce_and_remove_grad_hooks``: a full backward hook on the layer). Not with
  gradient checkpointing (the layer's backward then runs twice through DeepSpeed's re-entry logic; not tried).
  ``stage3_module_granularity_threshold``, the other way to make leaves, can make the whole model one leaf: its
  backward hook then never fires (the token ids need no gradient) and no gradient is reduced (seen on CPU).

LoRA: only the adapters train.

- ``reduce_bucket_size`` = the adapters' elements: the optimizer and the gradient buckets only ever hold trainable
  parameters (``stage_1_and_2``: ``is_optimized_parameter``; ``stage3``: the Trainer's optimizer groups), but ZeRO-2
  allocates ``reduce_bucket_size`` elements for its bucket at every backward (``setup_buckets``: 500 M in the preset,
  1 GB in bf16 for LoRA's 13 M on the 1.1 B bench, twice with ``overlap_comm``) and ZeRO-3 one at set-up ("auto": H²,
  about 4 flushes a step for the bench's adapters; 5 -> 1 on CPU with the demo model). Sized to the adapters, one
  bucket holds every gradient: one flush a step, and nothing allocated that never fills.
- ZeRO-3 on several GPUs without offload, ``stage3_prefetch_bucket_size`` = one decoder layer's elements: the frozen
  weights are gathered in every forward and backward (that is what ZeRO-3 is for); "auto" (0.9 H²) is smaller than
  one attention projection, so nothing was fetched ahead and small parameters went in calls of their own. A layer's
  worth lets the coordinator gather the next layer's frozen weights and adapters in a few coalesced calls
  (``partitioned_param_coordinator.fetch_sub_module``: one ``all_gather_coalesced`` per prefetch; 23 -> 12 all-gather
  calls a step on CPU), beside this layer's compute with ``overlap_comm``.
- ZeRO-3, the decoder layer as a leaf here too (without gradient checkpointing or offload), and the trainer makes the
  embeddings' output require a gradient (``needs_input_grads``): the first layer's input does not otherwise (frozen
  embeddings), and a full backward hook on a module none of whose inputs requires a gradient fires as soon as the
  output's gradient exists (``torch.utils.hooks.BackwardHook``), before the adapters' gradients: DeepSpeed then
  reduced zeros for them and later met their released partitions ("The size of tensor a (0) must match the size of
  tensor b (16)" on CPU, as issue 26 saw). With it, LoRA's ~10 hooked modules per adapted linear become one per
  layer: ZeRO-3's module hooks a step 329 -> 33 on CPU (the demo model, 2 layers).

Tried and not kept: the adapters persistent on several GPUs (``stage3_param_persistence_threshold`` at least the
largest adapter; "auto" is 10 H, under a rank-16 adapter of any layer wider than 160). A persistent parameter is
gathered after every optimizer step, one call each (``stage3._post_step`` -> ``Init._all_gather``: one
``all_gather_into_tensor`` per parameter), where a partitioned adapter rides along in its layer's coalesced gather:
36 against 12 all-gather calls a step on CPU, the same bytes; with offload 47 against 23.

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
- LoRA's values above apply there too, on top (its gradients are the adapters alone).

``ZEROBOARD_DS_TUNING=off`` in the environment runs every preset exactly as written.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..words import Msg, say
from . import modelinfo, placement, presets

UNKNOWN_PARAMS = 10**12  # a model whose checkpoint cannot be read here: a count above any model's
TUNING_ENV = "ZEROBOARD_DS_TUNING"  # "off": every run uses the preset exactly as written


@dataclass(frozen=True)
class Facts:
    """What the values are derived from, read from config.json and the safetensors header."""
    params: int | None = None  # every element the checkpoint stores
    layer_class: str | None = None  # the decoder layer's class name
    layer_params: int | None = None  # one decoder layer's elements
    lora_numel: int = 0  # the adapters' elements (LoRA: r x (in + out) for every adapted linear)
    lora_largest: int = 0  # the largest adapter matrix


def facts(model_dir: str, lora_rank: int | None = None, lora_target: Sequence[str] = ("all",)) -> Facts:
    path = Path(model_dir)
    shapes = modelinfo.tensor_shapes(path) or {}
    lora_numel = lora_largest = 0
    if lora_rank:
        wanted = set(lora_target)
        for name, shape in shapes.items():
            parts = name.split(".")
            if len(shape) != 2 or parts[-1] != "weight" or len(parts) < 2:
                continue
            leaf = parts[-2]
            if "embed" in leaf or "norm" in leaf or leaf == "lm_head" or ("all" not in wanted and leaf not in wanted):
                continue
            out_f, in_f = shape
            lora_numel += lora_rank * (in_f + out_f)
            lora_largest = max(lora_largest, lora_rank * max(in_f, out_f))
    return Facts(modelinfo.param_count(path), decoder_layer_class(model_dir), first_layer_numel(shapes), lora_numel,
                 lora_largest)


def first_layer_numel(shapes: dict[str, list[int]]) -> int | None:
    """Elements of the first repeated block (``model.layers.0.*``, ``transformer.h.0.*``): one decoder layer."""
    prefixes = {m.group(1) for n in shapes if (m := re.match(r"^(.*?\.)0\.", n))}
    if len(prefixes) != 1:
        return None
    prefix = prefixes.pop() + "0."
    return sum(math.prod(s) for n, s in shapes.items() if n.startswith(prefix)) or None


def chosen(stage: str, offload: bool, world: int, model: Facts, checkpointing: bool = False,
           lora: bool = False, device: str = "cuda", hidden: int | None = None) -> dict[str, Any]:
    """zero_optimization values for this placement and model (empty: the preset as written); the module docstring
    says why each. ``device`` "cpu" with several ranks: :func:`on_host`'s values, LoRA's on top."""
    if stage not in ("2", "3"):
        return {}
    one = world == 1 and not offload
    out: dict[str, Any] = {"overlap_comm": False} if one else {}
    if lora and model.lora_numel:
        out["reduce_bucket_size"] = model.lora_numel
    if stage == "3":
        if one:
            out["stage3_param_persistence_threshold"] = model.params or UNKNOWN_PARAMS
        if lora and not one and not offload and model.layer_params:
            out["stage3_prefetch_bucket_size"] = model.layer_params
        if model.layer_class and not checkpointing and not offload and (one or lora):
            out["leaf_module"] = {"classes": [model.layer_class]}
    if device == "cpu" and world > 1:  # several ranks in one host's memory (issue 33); out here holds LoRA's values only
        return {**on_host(stage, hidden), **out}
    return out


def needs_input_grads(config: dict | None, lora: bool) -> bool:
    """Whether the trainer must make the embeddings' output require a gradient: LoRA with ZeRO-3 leaf modules (the
    module docstring says why)."""
    zero = (config or {}).get("zero_optimization") or {}
    leaf = zero.get("leaf_module") if isinstance(zero, dict) else None
    return lora and str(zero.get("stage")) == "3" and isinstance(leaf, dict) and any(leaf.get(k) for k in leaf)


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
            lora: bool = False, lora_rank: int = 16, lora_target: Sequence[str] = ("all",), device: str = "cuda"
            ) -> tuple[dict, dict[str, Any]]:
    """The config a run uses, and the values ZeroBoard set in it. A key is set only where the file still holds the
    preset's own value (or "auto"): a hand edit wins. ``device``: where the ranks run ("cuda" or "cpu")."""
    if not is_preset(path) or os.environ.get(TUNING_ENV, "").strip().lower() == "off":
        return config, {}
    stage, off_opt, off_par = placement.zero_setting(config)
    zero = config.get("zero_optimization") or {}
    default = presets.preset(stage, off_opt).get("zero_optimization", {}) if stage in ("2", "3") else {}
    on_cpu = device == "cpu" and world > 1
    picked = chosen(stage, off_opt or off_par, world, facts(model_dir, lora_rank if lora else None, lora_target),
                    checkpointing, lora, device, hidden_size(model_dir) if on_cpu else None)
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
