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


def test_checkpointing_keeps_zero3_hooks_per_module(model_dir, cache):
    path, params, _ = model_dir
    _, values = dstune.for_run(presets.preset("3", False), str(cache / presets.preset_name("3", False)), 1, str(path),
                               checkpointing=True)
    assert values == {"overlap_comm": False, "stage3_param_persistence_threshold": params}


# --- LoRA: only the adapters train ----------------------------------------------------------

def adapters(path, rank=16, target="all-linear"):
    """What peft itself makes of the model: the adapters' elements, the largest adapter matrix, one decoder layer's
    elements, the hidden size."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    layer = sum(p.numel() for p in model.model.layers[0].parameters())
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=target))
    lora = [p for n, p in peft.named_parameters() if p.requires_grad]
    return sum(p.numel() for p in lora), max(p.numel() for p in lora), layer, model.config.hidden_size


def tuned(cache, path, stage, offload, world, **kw):
    cfg = presets.preset(stage, offload)
    return dstune.for_run(cfg, str(cache / presets.preset_name(stage, offload)), world, str(path), lora=True, **kw)


def test_lora_zero3_on_one_gpu_adds_adapter_buckets_and_decoder_leaves(model_dir, cache):
    path, params, layer = model_dir
    numel, _, _, _ = adapters(path)
    used, values = tuned(cache, path, "3", False, 1)
    assert values == {"overlap_comm": False, "reduce_bucket_size": numel, "stage3_param_persistence_threshold": params,
                      "leaf_module": {"classes": [layer]}}
    assert dstune.needs_input_grads(used, lora=True) and not dstune.needs_input_grads(used, lora=False)


def test_lora_zero3_on_several_gpus_prefetches_a_layer_and_leaves_the_adapters_partitioned(model_dir, cache):
    """Partitioned adapters ride along in their layer's coalesced gather; persistent ones would be gathered one call
    each after every step."""
    path, _, layer = model_dir
    numel, _, layer_numel, _ = adapters(path)
    _, values = tuned(cache, path, "3", False, 4)
    assert values == {"reduce_bucket_size": numel, "stage3_prefetch_bucket_size": layer_numel,
                      "leaf_module": {"classes": [layer]}}


def test_on_the_bench_model_the_bucket_holds_the_adapters_and_the_prefetch_a_layer(tmp_path, cache):
    """The 1.1 B Llama of docs/en/gpu-results.md, built on the meta device and saved as a safetensors header: the
    adapters' bucket and a layer's prefetch, as peft and the model count them."""
    import struct

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    header = {n: {"dtype": "BF16", "shape": list(p.shape), "data_offsets": [0, 0]} for n, p in model.state_dict().items()}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.save_pretrained(tmp_path)
    frozen = {n: p.numel() for n, p in model.named_parameters()}
    peft = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    lora = [p.numel() for p in peft.parameters() if p.requires_grad]
    _, values = tuned(cache, tmp_path, "3", False, 8)
    assert values["reduce_bucket_size"] == sum(lora) == 12_615_680
    assert values["stage3_prefetch_bucket_size"] == sum(n for name, n in frozen.items() if ".layers.0." in name)
    assert "stage3_param_persistence_threshold" not in values  # the adapters ride along in their layer's gather


@pytest.mark.parametrize(("world", "offload"), [(1, False), (2, False), (1, True), (2, True)])
def test_lora_zero2_sizes_its_bucket_to_the_adapters(model_dir, cache, world, offload):
    path, _, _ = model_dir
    numel, _, _, _ = adapters(path)
    _, values = tuned(cache, path, "2", offload, world)
    assert values == {"reduce_bucket_size": numel, **({"overlap_comm": False} if world == 1 and not offload else {})}


def test_lora_zero3_with_offload_or_checkpointing_keeps_hooks_per_module(model_dir, cache):
    path, _, _ = model_dir
    numel, _, _, _ = adapters(path)
    for world in (1, 2):
        _, values = tuned(cache, path, "3", True, world)
        assert values == {"reduce_bucket_size": numel}
    _, values = tuned(cache, path, "3", False, 2, checkpointing=True)
    assert set(values) == {"reduce_bucket_size", "stage3_prefetch_bucket_size"}


def test_lora_targets_and_rank_size_the_buckets(model_dir, cache):
    path, _, _ = model_dir
    numel, _, _, _ = adapters(path, rank=4, target=["q_proj", "v_proj"])
    _, values = tuned(cache, path, "3", True, 2, lora_rank=4, lora_target=["q_proj", "v_proj"])
    assert values == {"reduce_bucket_size": numel}


@pytest.mark.parametrize("offload", [False, True])
def test_lora_on_several_cpu_processes_gets_the_hosts_values_and_its_own_on_top(model_dir, cache, offload):
    """Several CPU processes: issue 33's values (H² buckets, ZeRO-3's weights released once used); LoRA's bucket holds
    its adapters alone, and ZeRO-3 without offload keeps its layer prefetch and leaves."""
    path, _, layer = model_dir
    numel, _, layer_numel, _ = adapters(path)
    hidden = json.loads((path / "config.json").read_text())["hidden_size"]
    _, two = tuned(cache, path, "2", offload, 2, device="cpu")
    assert two == {"reduce_bucket_size": numel, "allgather_bucket_size": hidden**2}
    _, three = tuned(cache, path, "3", offload, 2, device="cpu")
    layerwise = {} if offload else {"stage3_prefetch_bucket_size": layer_numel, "leaf_module": {"classes": [layer]}}
    assert three == {"stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0, "reduce_bucket_size": numel,
                     **layerwise}


def test_the_preview_names_the_lora_values_on_several_processes(model_dir, cache):
    path, _, layer = model_dir
    numel, _, _, _ = adapters(path, rank=8)
    spec = JobSpec(model_name_or_path=str(path), device_type="cpu", num_processes=2, deepspeed_stage="3", lora_rank=8,
                   output_dir="runs/dstune-preview")
    note = str(command.check_and_build(spec, [], write_presets=False).report.warnings.get("deepspeed", ""))
    assert f"reduce_bucket_size={numel}" in note and layer in note and "overlap_comm" not in note


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
