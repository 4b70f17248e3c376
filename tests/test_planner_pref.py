"""The planner's terms for preference tuning and QLoRA (issue 37): pairs, the reference model, 4- and 8-bit bases.

Fast: no training. A pair stage forwards the chosen and the rejected answers of each sample in one batch (twice the
activations at a micro-batch); a full fine-tune of dpo or kto keeps a frozen reference copy, placed as the model
(16 bit under DeepSpeed, a partition at ZeRO-3); LoRA's reference is its base (no copy); QLoRA packs every linear
layer of the frozen base (4 bit: half a byte a weight and the 64-block constants, double-quantized).
"""

from __future__ import annotations

import dataclasses

import pytest

from helpers import liger_installed
from zeroboard import planner
from zeroboard.job.devices import Gpu
from zeroboard.job.spec import JobSpec
from zeroboard.planner import memory, states as plan_states

GIB = 1 << 30
LLAMA_1B = dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False)


@pytest.fixture(autouse=True)
def _liger_layout(monkeypatch):
    liger_installed(monkeypatch)


def h200(n: int = 1) -> list[Gpu]:
    return [Gpu(i, "NVIDIA H200", 143 * GIB, 139 * GIB, 0, 0, (9, 0)) for i in range(n)]


def job(**kw) -> JobSpec:
    return JobSpec(**{"precision": "bf16", "per_device_train_batch_size": 4, "cutoff_len": 1024, "lora_rank": 16, **kw})


def plan(n: int = 1, **kw) -> memory.Plan:
    return planner.estimate(job(**kw), h200(n), model=planner.shape_from_config(LLAMA_1B))


@pytest.mark.parametrize("stage", ["dpo", "orpo", "simpo"])
def test_a_pair_takes_twice_the_activations_of_a_sample(stage):
    sft, pair = plan(), plan(training_stage=stage)
    assert pair.setup.tokens == 2 * sft.setup.tokens == 2 * 4 * 1024
    assert pair.activation_detail["layers"] == 2 * sft.activation_detail["layers"]
    assert pair.peak_bytes > sft.peak_bytes and pair.fits  # planned, not refused


def test_kto_forwards_one_answer_a_sample():
    assert plan(training_stage="kto").setup.tokens == plan().setup.tokens


@pytest.mark.parametrize(("n", "deepspeed", "shard"), [(1, "none", 1), (2, "2", 1), (4, "3", 4)])
def test_a_full_preference_run_keeps_a_reference_copy_placed_as_the_model(n, deepspeed, shard):
    # without DeepSpeed, both as the preference trainer holds them: fp32 weights under autocast (TRL's own optimizer)
    sft = plan(n, finetuning_type="full", deepspeed_stage=deepspeed, master_weights="fp32")
    dpo = plan(n, finetuning_type="full", deepspeed_stage=deepspeed, training_stage="dpo")
    psi = sft.params
    held = 2 if deepspeed != "none" else 4
    assert dpo.breakdown["weights"] - sft.breakdown["weights"] == held * psi // shard
    assert dpo.setup.weights == sft.setup.weights
    assert plan(n, finetuning_type="full", deepspeed_stage=deepspeed, training_stage="orpo").breakdown["weights"] \
        == sft.breakdown["weights"]  # reference-free


def test_lora_preference_keeps_no_second_copy():
    assert plan(training_stage="dpo").breakdown["weights"] == plan().breakdown["weights"]


@pytest.mark.parametrize(("bits", "deepspeed", "n"), [(4, "none", 1), (4, "2", 2), (4, "3", 2), (8, "none", 1)])
def test_qlora_counts_the_packed_base_and_its_constants(bits, deepspeed, n):
    shape = planner.shape_from_config(LLAMA_1B)
    lora = plan(n, deepspeed_stage=deepspeed)
    q = plan(n, deepspeed_stage=deepspeed, quantization_bit=bits)
    linear = shape.layers * sum(lin.fan_in * lin.fan_out for lin in shape.linears)
    packed = plan_states.quantized_bytes(linear, bits)
    shard = n if deepspeed == "3" else 1
    assert lora.breakdown["weights"] - q.breakdown["weights"] == (2 * linear - packed) // shard
    if bits == 4:  # half a byte a weight, an 8-bit absmax per 64, an fp32 constant per 256 absmaxes
        assert packed == linear // 2 + linear // 64 + 4 * (linear // 16384 + 1)
        assert 0.51 < packed / linear < 0.52


def test_the_setup_reads_the_stage_and_the_bits_from_the_job():
    s = memory.setup_of(job(training_stage="dpo", finetuning_type="full", quantization_bit=0), h200())
    assert (s.sequences, s.reference, s.quant_bits, s.own_optimizer) == (2, True, 0, True)
    s = dataclasses.replace(memory.setup_of(job(quantization_bit=4), h200()))
    assert (s.sequences, s.reference, s.quant_bits) == (1, False, 4)
