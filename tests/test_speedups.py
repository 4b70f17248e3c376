"""The trainer's own resolution of the speed-up options (train.Speedups), on this CPU machine."""

from __future__ import annotations

import pytest

from zeroboard import checks, train
from zeroboard.spec import JobSpec


@pytest.fixture
def model_dir(tmp_path):
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    return str(tmp_path)


def test_auto_says_why_liger_stays_off(model_dir):
    speed = train.Speedups(JobSpec(model_name_or_path=model_dir, liger_kernel="auto", attn_implementation="sdpa"), None)
    assert not speed.liger and speed.attn == "sdpa"
    assert "Liger kernels off (no CUDA device)" in speed.notes


def test_liger_on_without_what_it_needs_stops_naming_the_field(model_dir, monkeypatch):
    with pytest.raises(ValueError, match="^liger_kernel: is on but no CUDA device"):
        train.Speedups(JobSpec(model_name_or_path=model_dir, liger_kernel="on"), None)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(checks, "installed", lambda module: False)
    with pytest.raises(ValueError, match="liger-kernel is not installed"):
        train.Speedups(JobSpec(model_name_or_path=model_dir, liger_kernel="on"), None)


def test_the_weights_line_says_what_the_job_keeps(model_dir):
    def notes(ds=None, **kw):
        return train.Speedups(JobSpec(model_name_or_path=model_dir, **kw), ds).notes

    assert "weights: bf16 (pure bf16, no fp32 master copy)" in notes(precision="bf16", pure_bf16=True)
    assert "weights: fp32 master + autocast" in notes(precision="bf16")
    assert "weights: 16-bit, DeepSpeed keeps fp32 master" in notes({"zero_optimization": {"stage": 2}}, precision="bf16")
