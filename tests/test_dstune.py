"""The DeepSpeed values ZeroBoard chooses for a run (job.dstune) and how a job holds its weights (job.weights)."""

from __future__ import annotations

import json

import pytest

from zeroboard.job import command, dstune, presets, weights
from zeroboard.job.spec import JobSpec


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny Llama saved as transformers saves it (safetensors, config with its architecture)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False))
    model.save_pretrained(d)
    return d, sum(p.numel() for p in model.parameters()), type(model.model.layers[0]).__name__


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROBOARD_CACHE", str(tmp_path / "cache"))
    presets.write_presets(tmp_path / "cache")
    return tmp_path / "cache"


def test_one_gpu_zero3_keeps_every_parameter_whole_and_hooks_each_decoder_layer(model_dir, cache):
    path, params, layer = model_dir
    cfg = presets.preset("3", False)
    used, values = dstune.for_run(cfg, str(cache / presets.preset_name("3", False)), 1, str(path))
    assert values == {"overlap_comm": False, "stage3_param_persistence_threshold": params,
                      "leaf_module": {"classes": [layer]}}
    assert used["zero_optimization"]["stage3_param_persistence_threshold"] == params
    assert cfg["zero_optimization"]["overlap_comm"] is True  # the preset itself is left as it is


def test_one_gpu_zero2_turns_overlap_off_and_nothing_else(model_dir, cache):
    path, _, _ = model_dir
    _, values = dstune.for_run(presets.preset("2", False), str(cache / presets.preset_name("2", False)), 1, str(path))
    assert values == {"overlap_comm": False}


@pytest.mark.parametrize(("stage", "offload", "world", "ckpt"), [("3", False, 2, False), ("2", True, 1, False),
                                                                   ("3", True, 1, False)])
def test_several_gpus_and_offload_keep_the_preset(model_dir, cache, stage, offload, world, ckpt):
    path, _, _ = model_dir
    cfg = presets.preset(stage, offload)
    assert dstune.for_run(cfg, str(cache / presets.preset_name(stage, offload)), world, str(path), ckpt) == (cfg, {})


@pytest.mark.parametrize("kw", [{"checkpointing": True}, {"lora": True}])
def test_checkpointing_and_lora_keep_zero3_hooks_per_module(model_dir, cache, kw):
    path, params, _ = model_dir
    _, values = dstune.for_run(presets.preset("3", False), str(cache / presets.preset_name("3", False)), 1, str(path),
                               **kw)
    assert values == {"overlap_comm": False, "stage3_param_persistence_threshold": params}


def test_a_hand_edit_and_a_file_of_ones_own_win(model_dir, cache, tmp_path):
    path, _, _ = model_dir
    cfg = presets.preset("3", False)
    cfg["zero_optimization"]["overlap_comm"] = "maybe"  # edited by hand
    _, values = dstune.for_run(cfg, str(cache / presets.preset_name("3", False)), 1, str(path))
    assert "overlap_comm" not in values and "stage3_param_persistence_threshold" in values
    own = tmp_path / presets.preset_name("3", False)  # the same name, but not in the cache: the user's file
    own.write_text(json.dumps(presets.preset("3", False)))
    assert dstune.for_run(presets.preset("3", False), str(own), 1, str(path))[1] == {}


def test_the_preview_names_the_values(model_dir, cache):
    path, params, _ = model_dir
    spec = JobSpec(model_name_or_path=str(path), device_type="cpu", num_processes=1, deepspeed_stage="3",
                   output_dir="runs/dstune-preview")
    prepared = command.check_and_build(spec, [], write_presets=False)
    note = str(prepared.report.warnings.get("deepspeed", ""))
    assert f"stage3_param_persistence_threshold={params}" in note and "overlap_comm=false" in note


# --- weights modes ------------------------------------------------------------------------

def test_auto_splits_full_bf16_on_one_process_only():
    assert weights.mode("full", "bf16", "none", False, "auto") == "split"
    # bf16 gradients would be summed in bf16 (accumulation, DDP): the fp32 master copy adds fp32 gradients
    assert weights.mode("full", "bf16", "none", False, "auto", accumulation=2) == "autocast"
    assert weights.mode("full", "bf16", "none", False, "auto", world=2) == "autocast"
    assert weights.mode("full", "bf16", "none", False, "split", accumulation=2, world=2) == "split"
    assert weights.mode("full", "bf16", "none", False, "auto", own_optimizer=True) == "autocast"


def test_the_other_modes():
    assert weights.mode("lora", "bf16", "none", False, "auto") == "bf16_base"
    assert weights.mode("lora", "bf16", "none", False, "fp32") == "autocast"
    assert weights.mode("full", "bf16", "none", False, "fp32") == "autocast"
    assert weights.mode("full", "fp16", "none", False, "auto") == "autocast"
    assert weights.mode("full", "bf16", "none", True, "auto") == "pure_bf16"
    assert weights.mode("full", "bf16", "2", False, "auto") == "deepspeed"
    assert weights.mode("full", "fp32", "none", False, "auto") == "fp32"
