"""The planner's per-token terms measured on tiny CPU models: what autograd really saves, counted with
``torch.autograd.graph.saved_tensors_hooks`` (each storage once, parameters left out), against the derivation."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from zeroboard import planner
from zeroboard.planner import activations

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import planner_layer_probe as probe  # noqa: E402 - the GPU probe counts the same way


def saved_bytes(model, ids) -> int:
    return probe.saved_bytes(model, lambda: model(input_ids=ids, labels=ids))


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


GEMMA2 = dict(model_type="gemma2", hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, vocab_size=96, query_pre_attn_scalar=16, sliding_window=4096, hidden_activation="gelu_pytorch_tanh")


@pytest.mark.parametrize("seq", [32, 64])
@pytest.mark.parametrize("softcap", [50.0, None])
def test_eager_attention_and_post_norms_save_what_the_planner_derives(seq, softcap):
    """Gemma 2 (no SDPA path: eager by default): T scores per query head, tanh's output when soft-capped, the
    repeated k and v, and the two norms after attention and MLP. Each Gemma norm also keeps its (1 + w) in fp32,
    4·H bytes a norm whatever the tokens (left out of the plan: 36 KB a layer at H = 2304)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    ids = torch.randint(0, GEMMA2["vocab_size"], (2, seq))
    cfg = {**GEMMA2, "attn_logit_softcapping": softcap}
    counts = []
    for layers in (2, 3):
        kw = {k: v for k, v in cfg.items() if k != "model_type"}
        hf = AutoConfig.for_model("gemma2", num_hidden_layers=layers, **kw)
        assert hf._attn_implementation in (None, "eager")  # what "auto" gets
        model = AutoModelForCausalLM.from_config(hf).train()
        counts.append(saved_bytes(model, ids))
    shape = planner.shape_from_config({**cfg, "num_hidden_layers": 2})
    assert shape.eager_default and shape.post_norms == 2 and shape.attn_softcap == (softcap is not None)
    per_layer = activations.layer_act_bytes(shape, activations.ActMode("fp32", False, seq=seq, eager=True), ["all"], 8)
    norm_weights = 4 * 4 * GEMMA2["hidden_size"]
    assert counts[1] - counts[0] == per_layer * ids.numel() + norm_weights


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_soft_capped_logits_keep_tanhs_output(dtype):
    """Gemma 2's final soft-cap: HF's loss path keeps tanh's output, one logits-sized tensor in the model's dtype."""
    from transformers import AutoConfig, AutoModelForCausalLM

    ids = torch.randint(0, GEMMA2["vocab_size"], (2, 32))
    counts = []
    for cap in (30.0, None):
        torch.manual_seed(0)
        kw = {k: v for k, v in GEMMA2.items() if k != "model_type"}
        hf = AutoConfig.for_model("gemma2", num_hidden_layers=2, final_logit_softcapping=cap, **kw)
        model = AutoModelForCausalLM.from_config(hf).to(getattr(torch, dtype)).train()
        counts.append(saved_bytes(model, ids))
    shape = planner.shape_from_config({**GEMMA2, "num_hidden_layers": 2})
    m = activations.ActMode("fp32" if dtype == "float32" else "pure16", False)
    with_cap = activations.loss_bytes(shape, m, ids.numel(), False, True)["kept"]
    without = activations.loss_bytes(dataclasses.replace(shape, final_softcap=False), m, ids.numel(), False, True)["kept"]
    assert counts[0] - counts[1] == with_cap - without == m.e * ids.numel() * GEMMA2["vocab_size"]


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
