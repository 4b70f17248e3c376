"""The planner's per-token terms measured on tiny CPU models: what autograd really saves, counted with
``torch.autograd.graph.saved_tensors_hooks`` (each storage once, parameters left out), against the derivation."""

from __future__ import annotations

import pytest

from zeroboard import planner
from zeroboard.planner import activations

torch = pytest.importorskip("torch")


def saved_bytes(model, ids) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return sum(seen.values())


@pytest.mark.parametrize("cfg", [
    dict(model_type="llama", hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=4,
         vocab_size=96),
    dict(model_type="qwen2", hidden_size=48, intermediate_size=96, num_attention_heads=4, num_key_value_heads=4,
         head_dim=16, vocab_size=80),
])
def test_one_layer_saves_what_the_planner_derives(cfg):
    """One layer more = the planner's bytes per token and layer more (fp32, SDPA without a mask, HF kernels)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    ids = torch.randint(0, cfg["vocab_size"], (2, 32))
    counts = []
    for layers in (2, 3):
        kw = {k: v for k, v in cfg.items() if k != "model_type"}
        hf = AutoConfig.for_model(cfg["model_type"], num_hidden_layers=layers, attn_implementation="sdpa", **kw)
        model = AutoModelForCausalLM.from_config(hf).train()
        counts.append(saved_bytes(model, ids))
    shape = planner.shape_from_config({**cfg, "num_hidden_layers": 2})
    per_layer = activations.layer_act_bytes(shape, activations.ActMode("fp32", False), ["all"], 8)
    assert counts[1] - counts[0] == per_layer * ids.numel()


def test_the_fused_loss_chunk_follows_liger():
    """c = next_pow2(ceil(t / ceil(V / H))): 8192 tokens of a 32k-vocabulary 2048-wide model in 16 chunks of 512."""
    shape = planner.shape_from_config(dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                           num_attention_heads=32, num_key_value_heads=4, vocab_size=32000))
    assert activations.flce_chunk(8192, shape) == 512
    qwen = planner.shape_from_config(dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                          num_attention_heads=14, num_key_value_heads=2, vocab_size=151936))
    assert activations.flce_chunk(8192, qwen) == 64  # ceil(151936/896) = 170 rows per chunk -> 49 -> 64


def test_hf_loss_buffers_inside_the_loss():
    """HF's causal-LM loss upcasts the logits and keeps the fp32 log-softmax for backward (the planner's 4 of its
    10-12 bytes per token and vocabulary entry that live into backward)."""
    logits = torch.randn(64, 50, dtype=torch.bfloat16, requires_grad=True)
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    labels = torch.randint(0, 50, (64,))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.functional.cross_entropy(logits.float(), labels)
    # what backward keeps: the fp32 log-softmax (4 bytes), the labels and the NLL's total weight (one fp32)
    assert saved.pop(labels.untyped_storage().data_ptr()) == 64 * 8
    assert sum(saved.values()) == 64 * 50 * 4 + 4
