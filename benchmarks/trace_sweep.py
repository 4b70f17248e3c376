"""Every causal-LM model type transformers knows, traced and planned on CPU, against its real saved tensors.

    python benchmarks/trace_sweep.py --out benchmarks/results/trace_sweep.json      # all types (minutes)
    python benchmarks/trace_sweep.py --only llama,olmoe                              # some

For each type of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``: its default config (offline: transformers' own defaults),
shrunk to a tiny model (few layers, narrow, a small vocabulary, few experts); a type whose default config does not
build is left out, as issue 34 asks ("builds from a default config offline"). A tiny model of the traced depth is
built for real on the CPU and run forward and backward with ``saved_tensors_hooks`` (each storage once, parameters
and inputs left out, the head's and loss's part left to the planner), and the tracer counts the same model on the
meta device with the CPU's kernels: they must agree within 3%. Then the planner plans the type from a full trace
(CPU processes, fp32): each type is planned, or refused with the tracer's reason (tests/test_planner_trace.py runs
this on a sample; docs/en/planner.md lists the refused ones).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

SMALL = {  # attribute -> value, set where the config has the attribute (names as transformers' configs spell them)
    "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "num_experts": 4, "num_local_experts": 4,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "qk_head_dim": 16,
    "rotary_dim": 8, "max_position_embeddings": 256, "n_positions": 256, "first_k_dense_replace": 1,
    "num_key_value_groups": 1, "ffn_hidden_size": 128, "d_ff": 128, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16, "sliding_window": 4096,
    "attention_chunk_size": 4096, "d_state": 8, "state_size": 8, "expand": 2, "mamba_d_state": 8, "mamba_n_heads": 4,
    "mamba_d_head": 32, "n_mamba_heads": 2, "time_step_rank": 8, "conv_kernel": 4, "head_dim": 16,
}
ROUTING = ("num_experts_per_tok", "n_routed_experts", "num_experts", "moe_intermediate_size")
TOLERANCE = 0.03
MAX_REAL_PARAMS = 20_000_000  # a tiny model built for real on the CPU stays under this (the machine is shared)
SHAPE = (2, 32)


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def tiny_config(model_type: str, layers: int = 3) -> dict:
    """The type's default config shrunk, as its config.json would say it: what differs from the defaults (as
    ``save_pretrained`` writes it), with the widths, depth, vocabulary and experts made small."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    d = default.to_diff_dict()
    text = default.get_text_config()
    if text is not default:  # a model with a text config: shrink that
        target = d.setdefault("text_config", {})
        target.setdefault("model_type", text.model_type)
    else:
        target = d
    full = text.to_dict()
    for name, small in SMALL.items():
        key = text.attribute_map.get(name, name)
        val = full.get(key)
        if key in full and ((isinstance(val, int) and not isinstance(val, bool) and val) or (val is None and name in ROUTING)):
            target[key] = small
    if "kv_lora_rank" in full:  # multi-head latent attention: as many key/value heads as queries, RoPE's part apart
        target.update({k: v for k, v in (("num_key_value_heads", SMALL["num_attention_heads"]),
                                         ("head_dim", SMALL["qk_rope_head_dim"])) if k in full})
    depth = int(getattr(text, "num_hidden_layers", 0) or 0)
    layer_key = text.attribute_map.get("num_hidden_layers", "num_hidden_layers")
    if layer_key in full or "num_hidden_layers" in full:
        target[layer_key] = layers
    for key, val in full.items():  # a list with one entry a layer (layer_types, mlp_layer_types, ...), or a dict
        if isinstance(val, list) and depth and len(val) == depth:
            target[key] = val[:layers]
        elif isinstance(val, dict) and val and all(str(k).isdigit() for k in val):  # per-layer settings by index
            target[key] = {k: v for k, v in val.items() if int(k) < layers}
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id"):
        if isinstance(full.get(key), int):
            target[key] = min(full[key], 2)
    for key in ("torch_dtype", "dtype", "transformers_version"):
        d.pop(key, None)
        target.pop(key, None)
    return d


def real_count(cfg: dict, k: int) -> dict[str, int]:
    """The saved bytes of a real tiny model of ``k`` layers on the CPU, counted as the tracer counts them."""
    import torch
    from transformers import AutoModelForCausalLM

    from zeroboard.planner import trace_ops, tracer
    from zeroboard.planner.trace_ops import HEAD, OUTSIDE, Recorder

    config = tracer.build_config(cfg, k)
    size = sum(p.numel() for p in tracer.build(config, torch.float32, None).parameters())  # on meta: no memory
    if size > MAX_REAL_PARAMS:  # a sub-model the shrink did not reach (nested configs): not built for real here
        raise ValueError(f"the shrunk model still has {size:,} parameters")
    torch.manual_seed(0)
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").train()
    except (ValueError, ImportError):  # no SDPA: its own attention (a fresh config: the failed call set it)
        model = AutoModelForCausalLM.from_config(tracer.build_config(cfg, k)).train()
    layers = tracer.layer_list(model, tracer.n_layers(config))
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(3, max(4, vocab - 1), SHAPE)
    rec = Recorder({trace_ops.key(p) for p in model.parameters()}, {trace_ops.key(ids)}, "cpu", False, False, play=False)
    hooks = [layer.register_forward_pre_hook(lambda *a, i=i: setattr(rec, "scope", str(i))) for i, layer in enumerate(layers)]
    hooks += [layer.register_forward_hook(lambda *a: setattr(rec, "scope", OUTSIDE)) for layer in layers]
    head = model.get_output_embeddings()
    if head is not None:
        hooks.append(head.register_forward_pre_hook(lambda *a: setattr(rec, "scope", HEAD)))
    with rec.hooks(), rec:
        out = model(input_ids=ids, use_cache=False)
    (out.logits if hasattr(out, "logits") else out[0]).float().sum().backward()
    return rec.totals()


def _why(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def check(model_type: str, plan: bool = True) -> dict:
    """One type: its default config built (else left out), a tiny model of it counted for real and traced at one
    shape, then planned from a full trace, or refused with the tracer's reason. Where no tiny model of it can be
    made or run here (``shrink_fails``), the tracer still traces its default config, on the meta device."""
    import torch
    from transformers import AutoConfig

    from zeroboard.planner import tracer

    row: dict = {"model_type": model_type}
    t0 = time.time()
    try:
        default = AutoConfig.for_model(model_type).to_diff_dict()  # what a checkpoint's config.json would say
        default.pop("transformers_version", None)
        tracer.build(tracer.build_config(default), torch.float32, None)
    except Exception as e:  # noqa: BLE001 - the default config does not build: left out, with why
        row.update(status="does_not_build", why=_why(e))
        return row
    mode = {"kind": "fp32", "cuda": False}
    try:
        cfg = tiny_config(model_type)
        k = tracer.n_layers(tracer.build_config(cfg))
        real = sum(real_count(cfg, k).values())
    except Exception as e:  # noqa: BLE001 - no tiny model of it here: trace its default config instead
        row.update(status="shrink_fails", why=_why(e), **traced_default(default, mode))
        return row
    row["config"] = cfg
    try:
        model, config = tracer.prepared(cfg, k, mode)
        traced = sum(tracer.count(model, config, mode, *SHAPE)[0].values())
    except Exception as e:  # noqa: BLE001 - the tracer's refusal, as the planner will give it
        row.update(status="refused", why=_why(e), seconds=round(time.time() - t0, 2))
        return row
    row.update(traced=traced, real=real, error=traced / real - 1 if real else 0.0)
    row["status"] = "planned" if abs(row["error"]) <= TOLERANCE else "mismatch"
    if plan and row["status"] == "planned":
        row.update(plan_of(cfg))
    row["seconds"] = round(time.time() - t0, 2)
    return row


def traced_default(default: dict, mode: dict) -> dict:
    """The tracer on a type's default config (two layers, the meta device): traced, or refused and why."""
    from zeroboard.planner import tracer

    try:
        model, config = tracer.prepared(default, 2, mode)
        tracer.count(model, config, mode, *SHAPE)
        return {"traced_default": "traced"}
    except Exception as e:  # noqa: BLE001 - the tracer's refusal
        return {"traced_default": "refused", "why_default": _why(e)}


def plan_of(cfg: dict) -> dict:
    """The planner on CPU processes with the type's full trace (run in this process, as the child would)."""
    from zeroboard import planner
    from zeroboard.job.spec import JobSpec
    from zeroboard.planner import tracer, traces

    try:
        shape = traces.stub(cfg)
    except planner.PlanError as e:
        return {"status": "refused", "why": str(e)}
    spec = JobSpec(model_name_or_path="/nonexistent", device_type="cpu", num_processes=1, finetuning_type="full",
                   cutoff_len=64, per_device_train_batch_size=2, precision="fp32")
    s = planner._setup(spec, [], shape)
    result = tracer.trace(cfg, ["all"], traces.wanted(shape, s))
    if result.get("error"):
        from zeroboard.words import from_json

        return {"status": "refused", "why": str(from_json(result["error"]))}
    done = traces.traced_shape(shape, result)
    p = planner.estimate(spec, [], model=done, host_available=1 << 40)
    return {"peak_bytes": p.peak_bytes, "per_token_per_layer": p.activation_detail["per_token_per_layer"]}


def main() -> int:
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    types = a.only.split(",") if a.only else causal_lm_types()
    rows = []
    for mt in types:
        row = check(mt)
        rows.append(row)
        print(f"{mt:<28}{row['status']:<16}{row.get('error', 0):+8.2%}  {row.get('why', '')[:110]}", flush=True)
        if a.out:
            a.out.write_text(json.dumps({"transformers": transformers.__version__, "rows": rows}, indent=1) + "\n")
    counts = {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})}
    print(counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
