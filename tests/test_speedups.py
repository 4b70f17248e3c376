"""The trainer's own resolution of the speed-up options (speedups.Speedups), on this CPU machine."""

from __future__ import annotations

import pytest

from helpers import liger_installed
from zeroboard.job.spec import JobSpec
from zeroboard.training import speedups


@pytest.fixture
def model_dir(tmp_path):
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def liger_here(monkeypatch):
    """A GPU and an installed Liger whose table knows llama and granite: what the trainer sees on the H200."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    liger_installed(monkeypatch)


def test_auto_says_why_liger_stays_off(model_dir, no_gpu):
    speed = speedups.Speedups(JobSpec(model_name_or_path=model_dir, liger_kernel="auto", attn_implementation="sdpa"), None)
    assert not speed.liger and speed.attn == "sdpa"
    assert "Liger kernels off (no CUDA device)" in speed.notes


def test_liger_on_without_what_it_needs_stops_naming_the_field(model_dir, monkeypatch, no_gpu):
    with pytest.raises(ValueError, match="^liger_kernel: is on but no CUDA device"):
        speedups.Speedups(JobSpec(model_name_or_path=model_dir, liger_kernel="on"), None)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    liger_installed(monkeypatch, False)
    with pytest.raises(ValueError, match="liger-kernel is not installed"):
        speedups.Speedups(JobSpec(model_name_or_path=model_dir, liger_kernel="on"), None)


def test_the_weights_line_says_what_the_job_keeps(model_dir):
    def notes(ds=None, **kw):
        return speedups.Speedups(JobSpec(model_name_or_path=model_dir, **kw), ds).notes

    assert "weights: bf16 (pure bf16, no fp32 master copy)" in notes(precision="bf16", pure_bf16=True)
    split = "weights: bf16; the optimizer keeps the low 16 bits of each fp32 master weight (updates exactly as with fp32 master weights)"
    assert split in notes(precision="bf16", finetuning_type="full")  # the default on one process
    assert "weights: frozen base in bf16, LoRA adapters fp32 + bf16 autocast" in notes(precision="bf16")  # LoRA
    assert "weights: fp32 master + bf16 autocast" in notes(precision="bf16", finetuning_type="full", master_weights="fp32")
    assert "weights: fp32 master + bf16 autocast" in notes(precision="bf16", finetuning_type="full",
                                                            gradient_accumulation_steps=2)  # bf16 grads would add up
    assert "weights: bf16 (DeepSpeed ZeRO-2 keeps the fp32 master copy)" in notes({"zero_optimization": {"stage": 2}},
                                                                                  precision="bf16")
    # an fp32 run under DeepSpeed holds fp32 weights: no 16-bit copy is claimed
    assert "weights: fp32 (DeepSpeed ZeRO-3, no 16-bit copy)" in notes({"zero_optimization": {"stage": 3}}, precision="fp32")
    assert "weights: fp32" in notes(precision="fp32")


def test_liger_keeps_its_fused_loss_off_where_it_would_be_wrong(model_dir, liger_here):
    def speed(ds=None, **kw):
        return speedups.Speedups(JobSpec(model_name_or_path=model_dir, **kw), ds)

    plain = speed()
    assert plain.liger and plain.liger_config == {} and "fused linear cross-entropy" in plain.notes[0]
    assert plain.to_dict()["liger_kernels"] == ["rms_norm", "swiglu", "rope", "fused_linear_cross_entropy"]
    # ZeRO-3 shards lm_head; a LoRA on lm_head would be skipped by the fused loss
    assert speed({"zero_optimization": {"stage": 3}}).liger_config == {"fused_linear_cross_entropy": False}
    assert speed(lora_target=["q_proj", "lm_head"]).liger_config == {"fused_linear_cross_entropy": False}
    assert speed({"zero_optimization": {"stage": 2}}).liger_config == {}


def test_liger_skips_model_types_it_does_not_know(tmp_path, liger_here):
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=16, n_head=2).save_pretrained(tmp_path)
    auto = speedups.Speedups(JobSpec(model_name_or_path=str(tmp_path)), None)
    assert not auto.liger and "no Liger kernels for model type 'gpt2'" in auto.notes[0]
    with pytest.raises(ValueError, match="^liger_kernel: is on but no Liger kernels for model type 'gpt2'"):
        speedups.Speedups(JobSpec(model_name_or_path=str(tmp_path), liger_kernel="on"), None)


def test_pure_bf16_refuses_a_job_that_is_not_bf16(model_dir):
    with pytest.raises(ValueError, match="^pure_bf16: needs bf16 compute but this job runs in fp16"):
        speedups.Speedups(JobSpec(model_name_or_path=model_dir, pure_bf16=True, precision="fp16"), None)
