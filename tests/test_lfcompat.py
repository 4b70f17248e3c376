"""LLaMA-Factory's training YAML read as a job: every key it knows accounted for, each mapping, note and refusal,
its defaults for a file of its own, the nearest name for an unknown key, and convert-lf's file.

The key names below are facts of LLaMA-Factory 0.9.5 (its data, model, fine-tuning, training and generating
arguments, src/llamafactory/hparams/*.py), kept here to check the table against; no code of it is used.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zeroboard import words
from zeroboard.cli import main as cli_main
from zeroboard.job import lfcompat, lfkeys, modelinfo, spec

DOCS = Path(__file__).resolve().parents[1] / "docs"

LF_KEYS = """
template dataset eval_dataset dataset_dir media_dir cutoff_len train_on_prompt mask_history streaming buffer_size
mix_strategy interleave_probs overwrite_cache preprocessing_batch_size preprocessing_num_workers max_samples
eval_num_beams ignore_pad_token_for_loss val_size eval_on_each_dataset packing neat_packing tool_format default_system
enable_thinking preserve_thinking tokenized_path data_shared_file_system
freeze_trainable_layers freeze_trainable_modules freeze_extra_modules additional_target lora_alpha lora_dropout
lora_rank lora_target loraplus_lr_ratio loraplus_lr_embedding use_rslora use_dora pissa_init pissa_iter pissa_convert
create_new_adapter module_dropout oft_rank oft_block_size oft_target pref_beta pref_ftx pref_bco_weight pref_loss
dpo_label_smoothing kto_chosen_weight kto_rejected_weight simpo_gamma ppo_buffer_size ppo_epochs ppo_score_norm
ppo_target ppo_whiten_rewards ref_model ref_model_adapters ref_model_quantization_bit reward_model
reward_model_adapters reward_model_quantization_bit reward_model_type ld_alpha use_galore galore_target galore_rank
galore_update_interval galore_scale galore_proj_type galore_layerwise use_apollo apollo_target apollo_rank
apollo_update_interval apollo_scale apollo_proj apollo_proj_type apollo_scale_type apollo_layerwise apollo_scale_front
use_badam badam_mode badam_start_block badam_switch_mode badam_switch_interval badam_update_ratio badam_mask_mode
badam_verbose use_swanlab swanlab_project swanlab_workspace swanlab_run_name swanlab_mode swanlab_api_key
swanlab_logdir swanlab_lark_webhook_url swanlab_lark_secret pure_bf16 stage finetuning_type use_llama_pro
use_adam_mini use_mca use_hyper_parallel hyper_parallel_args use_muon use_dft_loss use_asft_loss asft_alpha
use_eaft_loss eaft_alpha freeze_vision_tower freeze_multi_modal_projector freeze_language_model compute_accuracy
disable_shuffling early_stopping_steps plot_loss include_effective_tokens_per_second
model_name_or_path adapter_name_or_path adapter_folder cache_dir use_fast_tokenizer resize_vocab split_special_tokens
add_tokens add_special_tokens new_special_tokens_config init_special_tokens model_revision low_cpu_mem_usage
rope_scaling flash_attn shift_attn mixture_of_depths use_unsloth use_unsloth_gc enable_liger_kernel moe_aux_loss_coef
disable_gradient_checkpointing use_reentrant_gc upcast_layernorm upcast_lmhead_output train_from_scratch infer_backend
offload_folder use_kv_cache use_v1_kernels infer_dtype hf_hub_token ms_hub_token om_hub_token print_param_status
trust_remote_code quantization_method quantization_bit quantization_type double_quantization quantization_device_map
image_max_pixels image_min_pixels image_do_pan_and_scan crop_to_patches video_max_pixels video_min_pixels video_fps
video_maxlen use_audio_in_video audio_sampling_rate export_dir export_size export_device export_quantization_bit
export_quantization_dataset export_quantization_nsamples export_quantization_maxlen export_legacy_format
export_hub_model_id vllm_maxlen vllm_gpu_util vllm_enforce_eager vllm_max_lora_rank vllm_config sglang_maxlen
sglang_mem_fraction sglang_tp_size sglang_config sglang_lora_backend use_kt kt_weight_path kt_expert_checkpoint_path
kt_use_lora_experts kt_lora_expert_num kt_lora_expert_intermediate_size
ray_num_workers ray_init_kwargs master_addr master_port enable_torch_profiler profiler_output_dir profiler_wait_steps
profiler_warmup_steps profiler_active_steps profiler_repeat profiler_record_shapes profiler_profile_memory
profiler_with_stack profile_modules fp8 fp8_backend fp8_enable_fsdp_float8_all_gather overwrite_output_dir
do_sample temperature top_p top_k num_beams max_length max_new_tokens repetition_penalty length_penalty
skip_special_tokens sortish_sampler predict_with_generate generation_max_length generation_num_beams generation_config
""".split()

# qwen3_lora_sft.yaml of LLaMA-Factory's examples, as a user brings it
TYPICAL = {"model_name_or_path": "Qwen/Qwen3-4B-Instruct-2507", "trust_remote_code": True, "stage": "sft",
           "do_train": True, "finetuning_type": "lora", "lora_rank": 8, "lora_target": "all",
           "dataset": "identity,alpaca_en_demo", "template": "qwen3_nothink", "cutoff_len": 2048, "max_samples": 1000,
           "preprocessing_num_workers": 16, "dataloader_num_workers": 4, "output_dir": "saves/qwen3-4b/lora/sft",
           "logging_steps": 10, "save_steps": 500, "plot_loss": True, "overwrite_output_dir": True,
           "save_only_model": False, "report_to": "none", "per_device_train_batch_size": 1,
           "gradient_accumulation_steps": 8, "learning_rate": 1.0e-4, "num_train_epochs": 3.0,
           "lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "bf16": True, "ddp_timeout": 180000000,
           "resume_from_checkpoint": None}


def read(data: dict) -> tuple[spec.JobSpec, dict]:
    notes: dict = {}
    return spec.from_dict(data, notes), notes


def problems(data: dict) -> dict:
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict(data)
    return e.value.problems


def test_every_llamafactory_key_is_in_the_table_or_a_trainer_argument():
    """Each key maps to a field, goes to the Trainer, is a no-op or is refused: none is unknown."""
    known = modelinfo.training_argument_names()
    missing = [k for k in LF_KEYS if k not in lfkeys.TABLE and k not in spec.FIELDS and k not in known]
    assert not missing, missing
    for key, rule in lfkeys.TABLE.items():
        assert rule.kind in ("field", "trainer", "no-op", "refused"), key
        assert rule.kind != "field" or rule.field in spec.FIELDS or key in ("stage", "do_train"), key
        assert rule.kind == "trainer" or rule.why in words.CATALOG, key  # a note, a reason, or what it reads


def test_a_typical_lora_sft_file_is_accepted_as_it_is():
    job, notes = read(TYPICAL)
    assert (job.precision, job.warmup_steps, job.template, job.dataset) == ("bf16", 0.1, "qwen3_nothink",
                                                                            ["identity", "alpaca_en_demo"])
    assert job.extra_args == {"save_only_model": False, "ddp_timeout": 180000000}  # to the Trainer, as there
    assert (job.preprocessing_num_workers, job.dataloader_num_workers, job.resume) == (16, 4, False)
    # keys it leaves out: LLaMA-Factory's defaults, and a note says which
    assert (job.dataset_dir, job.per_device_eval_batch_size, job.gradient_checkpointing, job.lora_alpha) == (
        "data", 8, True, 16)
    assert "dataset_dir data" in notes[lfkeys.NOTE_KEY] and "lora_alpha 16" in notes[lfkeys.NOTE_KEY]
    assert set(notes) == {"trust_remote_code", "plot_loss", "overwrite_output_dir", lfkeys.NOTE_KEY}
    assert all(isinstance(n, words.Msg) and n.say_in("zh") != n for n in notes.values())


def test_a_key_the_file_sets_is_not_overwritten_by_a_default():
    assert read({"stage": "sft"})[0].save_steps == 500 and read({"stage": "sft", "save_strategy": "no"})[0].save_steps == 0
    assert read({"stage": "sft", "lora_rank": 32})[0].lora_alpha == 64  # LLaMA-Factory: twice the rank


def test_a_job_file_of_ours_takes_no_llamafactory_default():
    job, notes = read({"bf16": True, "dataset": "a"})  # LLaMA-Factory's names, but no stage: our defaults
    assert (job.precision, job.dataset_dir, job.cutoff_len, notes) == ("bf16", spec.DEMO_DATA_DIR, 128, {})


@pytest.mark.parametrize(("data", "want"), [
    ({"fp16": True}, {"precision": "fp16"}),
    ({"bf16": False}, {}),
    ({"use_cpu": True}, {"device_type": "cpu"}),
    ({"eval_strategy": "steps", "eval_steps": 50}, {"eval_steps": 50}),
    ({"eval_strategy": "steps", "logging_steps": 7}, {"eval_steps": 7, "logging_steps": 7}),  # transformers' rule
    ({"eval_strategy": "no", "eval_steps": None}, {}),
    ({"resume_from_checkpoint": True}, {"resume": True}),
    ({"resume_from_checkpoint": "out/checkpoint-20", "output_dir": "out"}, {"resume": True, "output_dir": "out"}),
    ({"flash_attn": "fa2"}, {"attn_implementation": "flash_attention_2"}),
    ({"flash_attn": "disabled"}, {"attn_implementation": "eager"}),
    ({"enable_liger_kernel": True}, {"liger_kernel": "on"}),
    ({"enable_liger_kernel": False}, {"liger_kernel": "off"}),
    ({"neat_packing": True}, {"packing": True}),
    ({"disable_gradient_checkpointing": True}, {}),
    ({"use_swanlab": True}, {"report_to": "swanlab"}),
    ({"report_to": ["wandb"]}, {"report_to": "wandb"}),
    ({"mix_strategy": "interleave_over", "interleave_probs": "0.3, 0.7"},
     {"mix_strategy": "interleave_over", "interleave_probs": [0.3, 0.7]}),
    ({"max_samples": None, "deepspeed": None, "template": None}, {}),
    ({"dataset_dir": "REMOTE:llamafactory/demo_data"}, {"dataset_dir": "REMOTE:llamafactory/demo_data"}),  # hubdir.py
    ({"dataset_dir": "ONLINE"}, {"dataset_dir": "ONLINE"}),
    ({"optim": "adamw_torch", "adam_beta2": 0.95, "extra_args": {"weight_decay_x": 1}},  # any TrainingArguments name
     {"extra_args": {"optim": "adamw_torch", "adam_beta2": 0.95, "weight_decay_x": 1}}),
])
def test_llamafactory_keys_map_to_the_fields(data, want):
    changed = spec.changed(spec.from_dict(data))
    if "stage" in data:  # a LLaMA-Factory file: its defaults besides
        changed = {k: v for k, v in changed.items() if k not in lfkeys.LF_DEFAULTS or k in want}
        changed.pop("lora_alpha", None)
    assert changed == want


@pytest.mark.parametrize(("data", "key", "fragment"), [
    ({"stage": "rm"}, "stage", "reward model"),
    ({"stage": "dpo", "pref_loss": "kto_pair"}, "pref_loss", "kto_pair"),
    ({"dpo_label_smoothing": 0.1}, "dpo_label_smoothing", "TRL's default"),
    ({"kto_chosen_weight": 2.0}, "kto_chosen_weight", "TRL's default"),
    ({"ref_model": "other/model"}, "ref_model", "TRL's default"),
    ({"stage": "pt"}, "stage", "pre-training"),
    ({"stage": "ppo"}, "stage", "reward model"),
    ({"do_train": False}, "do_train", "no training"),
    ({"use_dora": True}, "use_dora", "no equivalent"),
    ({"finetuning_type": "freeze"}, "finetuning_type", "lora or full"),
    ({"eval_strategy": "epoch"}, "eval_strategy", "every N steps"),
    ({"warmup_ratio": 1.5}, "warmup_ratio", "not including) 1"),
    ({"hf_hub_token": "hf_xxx"}, "hf_hub_token", "environment"),
    ({"resume_from_checkpoint": "elsewhere/checkpoint-5", "output_dir": "out"}, "resume_from_checkpoint", "output_dir"),
    ({"report_to": ["wandb", "tensorboard"]}, "report_to", "one tracker"),
    ({"bf16": True, "precision": "fp32"}, "bf16", "keep one"),
    ({"bf16": True, "fp16": True}, "fp16", "keep one"),
    ({"flash_attn": "fa3"}, "flash_attn", "attn_implementation"),
    ({"enable_thinking": False}, "enable_thinking", "not supported yet"),
])
def test_what_cannot_be_done_here_is_refused_naming_the_llamafactory_key(data, key, fragment):
    found = problems(data)
    assert key in found and fragment in found[key], found
    assert words.Msg(found[key].key, **found[key].values).say_in("zh")


def test_a_switch_left_off_and_a_no_op_say_nothing_or_one_line():
    job, notes = read({"use_dora": False, "quantization_bit": None, "video_max_pixels": 16384, "plot_loss": False})
    assert spec.changed(job) == {} and set(notes) == {"video_max_pixels"} and "video" in notes["video_max_pixels"]


def test_the_image_keys_are_the_jobs_fields_and_media_dir_is_refused_naming_where_images_are_read():
    job, notes = read({"image_max_pixels": 262144, "freeze_vision_tower": False, "image_do_pan_and_scan": True})
    assert spec.changed(job) == {"image_max_pixels": 262144, "freeze_vision_tower": False}
    assert set(notes) == {"image_do_pan_and_scan"} and "Qwen-VL" in notes["image_do_pan_and_scan"]
    assert "dataset_dir" in problems({"media_dir": "data/media"})["media_dir"]
    assert read({"media_dir": None})[1] == {}


def test_template_names_are_ours_or_the_tokenizers_own_with_a_note():
    assert read({"template": "qwen3_nothink"}) == (spec.JobSpec(template="qwen3_nothink"), {})
    job, notes = read({"template": "glm4"})  # LLaMA-Factory's, not written here: the model's own template
    assert job.template == "chat" and "glm4" in notes["template"]
    assert "must be one of" in problems({"template": "nope"})["template"]


def test_adding_a_stage_is_one_entry():
    assert set(lfkeys.STAGES) == {"pt", "sft", "rm", "ppo", "dpo", "kto"}  # LLaMA-Factory 0.9.5's stages
    assert [s for s, why in lfkeys.STAGES.items() if why is None] == ["sft", "dpo", "kto"]


@pytest.mark.parametrize(("data", "stage"), [({"stage": "sft"}, "sft"), ({"stage": "dpo"}, "dpo"), ({"stage": "kto"}, "kto"),
                                             ({"stage": "dpo", "pref_loss": "orpo"}, "orpo"),
                                             ({"stage": "dpo", "pref_loss": "simpo"}, "simpo"),
                                             ({"stage": "kto", "pref_loss": "sigmoid"}, "kto")])
def test_the_stage_key_sets_the_training_stage(data, stage):
    """LLaMA-Factory's stage is the job's training_stage; its ORPO and SimPO (stage dpo with that pref_loss) are
    stages of their own here; pref_beta, pref_ftx, simpo_gamma and quantization_bit are the job's fields."""
    job, _ = read({**data, "pref_beta": 0.2, "pref_ftx": 0.5, "simpo_gamma": 0.3, "quantization_bit": 4})
    assert (job.training_stage, job.pref_beta, job.pref_ftx, job.simpo_gamma, job.quantization_bit) == (stage, 0.2, 0.5, 0.3, 4)


@pytest.mark.parametrize(("key", "near"), [("bf61", "bf16"), ("warmup_ration", "warmup_ratio"), ("stag", "stage"),
                                           ("lerning_rate", "learning_rate"), ("learning-rate", "learning_rate"),
                                           ("lora-rank", "lora_rank")])
def test_an_unknown_key_gets_the_nearest_name_of_ours_or_llamafactorys(key, near):
    msg = problems({key: 1})[key]
    assert f"did you mean {near}" in msg
    if near in ("bf16", "warmup_ratio"):  # LLaMA-Factory's name: which field it sets
        assert ("precision" if near == "bf16" else "warmup_steps") in msg


def test_set_takes_llamafactorys_names_over_a_job():
    job = spec.apply_overrides(spec.JobSpec(precision="fp32"), ["bf16=true", "warmup_ratio=0.05", "ddp_timeout=60"])
    assert (job.precision, job.warmup_steps, job.extra_args) == ("bf16", 0.05, {"ddp_timeout": 60})


def test_a_key_of_nobody_is_unknown():
    assert problems({"zzz_nothing_like_it": 1})["zzz_nothing_like_it"] == "unknown option"


def test_convert_lf_writes_the_equivalent_job_file_commented(tmp_path, capsys):
    src = tmp_path / "qwen3_lora_sft.yaml"
    src.write_text(yaml.safe_dump(TYPICAL, sort_keys=False))
    assert cli_main(["convert-lf", str(src)]) == 0
    out = capsys.readouterr().out
    assert "# LLaMA-Factory: bf16: true\nprecision: bf16" in out
    assert "# LLaMA-Factory: warmup_ratio: 0.1\nwarmup_steps: 0.1" in out
    assert "# LLaMA-Factory's default\ndataset_dir: data" in out
    assert "# not used here: plot_loss: true" in out and "stage: sft" in out
    assert spec.loads_yaml(out) == spec.load_yaml(src)  # the same job, with no LLaMA-Factory key left
    assert not lfcompat.is_lf_file(yaml.safe_load(out))
    target = tmp_path / "job.yaml"
    assert cli_main(["convert-lf", str(src), "-o", str(target)]) == 0 and spec.load_yaml(target) == spec.load_yaml(src)
    target.write_text("mine\n")
    assert cli_main(["convert-lf", str(src), "-o", str(target)]) == 2  # never over a file
    assert target.read_text() == "mine\n"
    bad = tmp_path / "rm.yaml"
    bad.write_text("stage: rm\n")
    assert cli_main(["convert-lf", str(bad)]) == 2 and "reward model" in capsys.readouterr().err


def test_validate_prints_the_notes(tmp_path, capsys, demo):
    job = tmp_path / "lf.yaml"
    job.write_text(yaml.safe_dump({**TYPICAL, "model_name_or_path": str(demo), "dataset_dir": "cache/demo/data",
                                   "dataset": "identity", "template": "qwen3_nothink", "cutoff_len": 256,
                                   "output_dir": str(tmp_path / "out"), "bf16": False, "max_steps": 1}))
    cli_main(["validate", str(job)])
    err = capsys.readouterr().err
    assert "plot_loss: not needed" in err and "preprocessing_num_workers: is 16" in err


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_docs_have_the_table_of_keys(lang):
    assert lfcompat.markdown_table(lang) in (DOCS / lang / "llamafactory.md").read_text(encoding="utf-8"), \
        "regenerate the table: python -c 'from zeroboard.job import lfcompat; print(lfcompat.markdown_table(\"en\"))'"
