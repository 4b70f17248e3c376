"""Every key LLaMA-Factory 0.9.5 knows, in one table: what it becomes in a job (read by :mod:`.lfcompat`).

Users bring their LLaMA-Factory files unchanged (``zeroboard validate / preview / train FILE``, the page's Load
arguments, ``zeroboard convert-lf FILE``).  :data:`TABLE` says what each of LLaMA-Factory's keys (its data, model,
fine-tuning, training and generating arguments) becomes here:

- ``field``: a field of the job, under the same name (``learning_rate``, ``dataset``, ``lora_rank``; LLaMA-Factory's
  ``null`` for "unset" read too) or another one (``bf16: true`` -> ``precision: bf16``, ``warmup_ratio`` ->
  ``warmup_steps``, ``flash_attn`` -> ``attn_implementation``);
- ``trainer``: a transformers TrainingArguments name no field has (``ddp_timeout``, ``save_only_model``): passed to
  the Trainer through ``extra_args``, as LLaMA-Factory passes it.  Any TrainingArguments name the table does not
  list goes the same way (``optim``, ``adam_beta2``, ...); the checks then read it as they read ``extra_args``;
- ``no-op``: accepted; a one-line note says why nothing changes when the value would have done something there
  (``plot_loss: true``: ZeroBoard draws the loss on its Runs page);
- ``refused``: named with the reason (``stage: rm``: a stage ZeroBoard does not train; a switch such as
  ``use_dora: true`` that has no equivalent here).  A switch left off is LLaMA-Factory's default: nothing to say.

A key of neither the job, LLaMA-Factory nor TrainingArguments is unknown, with the nearest name of the first two.
A file that says ``stage`` or ``do_train`` is LLaMA-Factory's: the keys it leaves out take LLaMA-Factory's defaults
where they differ from the job's (:data:`LF_DEFAULTS`), and a note lists them.  Adding a training stage is one
edit of :data:`STAGES`.

Pure Python (the web server reads job files with it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ..data import chat
from ..words import Msg, say

LF_VERSION = "0.9.5"
MARKERS = ("stage", "do_train")  # keys every LLaMA-Factory training file has, and no job file of ours
NOTE_KEY = "llamafactory"  # the name the defaults' note goes under

# LLaMA-Factory's defaults (its hparams and transformers' TrainingArguments) where the job's differ
LF_DEFAULTS: dict[str, Any] = {"dataset_dir": "data", "cutoff_len": 2048, "lr_scheduler_type": "linear",
                               "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8, "logging_steps": 500,
                               "save_steps": 500, "gradient_checkpointing": True}

# the training stages: None where ZeroBoard trains it, else the catalog key saying why not (one edit adds a stage)
STAGES: dict[str, str | None] = {"sft": None, "dpo": None, "kto": None, "pt": "lf.stage_pt", "rm": "lf.stage_rm",
                                 "ppo": "lf.stage_ppo"}
# LLaMA-Factory trains ORPO and SimPO as stage dpo with that pref_loss; here they are training stages of their own
LOSS_STAGES = ("orpo", "simpo")

# LLaMA-Factory 0.9.5's template names (src/llamafactory/data/template.py); ours render the same name as it does
LF_TEMPLATES = frozenset("""
alpaca bailing bailing_v2 breeze chatglm3 chatml chatml_de cohere cpm4 dbrx deepseek deepseek3 deepseekr1 hy3
deepseekcoder default dots_ocr empty ernie ernie_nothink ernie_vl exaone falcon falcon_h1 fewshot gemma gemma2 gemma3
gemma3n gemma4 gemma4n glm4 glm4_moe glm4v glm4_5v glm_ocr glm4_7 glmz1 gpt_oss granite3 granite3_vision granite4
index hunyuan hunyuan_small intern2 intern_vl intern_s1 keye_vl kimi_vl lfm2 lfm2_vl llama2 llama2_zh llama3 llama4
mllama moonlight llava llava_next llava_next_llama3 llava_next_mistral llava_next_qwen llava_next_yi llava_next_video
llava_next_video_mistral llava_next_video_yi mimo mimo_v2 mimo_vl minicpm_v minicpm_v_4_6 minicpm_o minimax1 minimax2
ministral mistral mistral_small ministral3 olmo openchat openchat-3.6 opencoder paligemma paligemma_chat phi phi_small
phi4 phi4_mini pixtral qwen qwen3 qwen3_nothink qwen2_audio qwen2_omni qwen3_omni qwen3_omni_nothink qwen2_vl qwen3_vl
qwen3_vl_nothink qwen3_5 qwen3_5_nothink qwen3_6 sailor seed_coder seed_oss smollm smollm2 solar starchat telechat2
vicuna video_llava xuanyuan yi yi_vl youtu youtu_vl yuan zephyr aeva""".split())


class Refused(ValueError):
    """A value of LLaMA-Factory's this job cannot take; ``args[0]`` (a catalog Msg) says why."""


Sets = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    kind: str  # "field", "trainer", "no-op" or "refused"
    field: str = ""  # the job field it sets (kind "field")
    why: str = ""  # catalog key: the note of a no-op, or the reason of a refusal; for a field, what it reads (docs)
    read: Callable[[Any, dict], Sets | None] | None = None  # (value, the whole file) -> job fields; raises Refused
    when: Callable[[Any], bool] | None = None  # no-op: noted when it holds; refused: refused when it holds

    def apply(self, key: str, value: Any, data: dict) -> tuple[Sets, Msg | None]:
        """(the job fields it sets, its note) for ``key: value``; Refused when the value cannot be taken."""
        if self.kind == "refused":
            if (self.when or _given)(value):
                raise Refused(say(self.why, key=key, value=shown(value)))
            return {}, None
        if self.kind == "no-op":
            return {}, say(self.why, key=key, value=shown(value)) if (self.when or _given)(value) else None
        if self.kind == "trainer":
            return {"extra_args": {key: value}}, None
        return self.read(value, data) or {}, None


# --- values as LLaMA-Factory writes them -----------------------------------------------------------------------

def shown(value: Any) -> str:
    """A value as a message quotes it (cut)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _bool(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip().lower() if isinstance(value, (str, int, float)) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise Refused(say("spec.bool", got=shown(value)))


def _number(value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise Refused(say("spec.number", got=shown(value))) from None


def _given(value: Any) -> bool:
    """Set to something: not null, empty, false or 0."""
    if value is None or value in ("", [], {}):
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "off", "0")
    return not (isinstance(value, (int, float)) and value == 0)


def _same(name: str) -> Callable[[Any, dict], Sets | None]:
    """The same field, LLaMA-Factory's ``null`` meaning "unset"."""
    return lambda v, _: None if v is None else {name: v}


def _half(kind: str) -> Callable[[Any, dict], Sets | None]:
    return lambda v, _: {"precision": kind} if _bool(v) else None


def _stage(value: Any, data: dict) -> Sets:
    if value not in STAGES:
        raise Refused(say("spec.choice", options=", ".join(STAGES), got=shown(value)))
    if STAGES[value] is not None:
        raise Refused(say(STAGES[value], stage=value))
    if value == "dpo" and data.get("pref_loss") in LOSS_STAGES:
        return {"training_stage": data["pref_loss"]}
    return {"training_stage": value}


def _pref_loss(value: Any, _: dict) -> Sets | None:
    if value is None or value in LOSS_STAGES:  # orpo, simpo: the training stage (read with stage: dpo)
        return None
    if value == "kto_pair":
        raise Refused(say("lf.kto_pair"))
    return {"pref_loss": value}


def _do_train(value: Any, _: dict) -> None:
    if not _bool(value):
        raise Refused(say("lf.do_train_off"))


def _strategy(name: str, steps: str) -> Callable[[Any, dict], Sets | None]:
    """eval_strategy / save_strategy: "steps" (every ``steps``), "no"; evaluating or saving per epoch has no field."""
    def read(value, data):
        if value in ("steps", None):
            if value == "steps" and name == "eval_strategy" and data.get(steps) is None:  # transformers: logging's
                return {steps: data.get("logging_steps") or LF_DEFAULTS["logging_steps"]}
            return None
        if value == "no":
            return {steps: 0}
        raise Refused(say("lf.per_epoch", key=name, value=shown(value), field=steps))
    return read


def _logging(value: Any, _: dict) -> None:
    if value not in ("steps", None):
        raise Refused(say("lf.per_epoch", key="logging_strategy", value=shown(value), field="logging_steps"))


def _warmup_ratio(value: Any, data: dict) -> Sets | None:
    ratio = _number(value) if value is not None else 0.0
    if not 0 <= ratio < 1:
        raise Refused(say("lf.warmup_ratio", value=shown(value)))
    if ratio and _number(data.get("warmup_steps") or 0) > 0:  # transformers: warmup_steps wins
        return None
    return {"warmup_steps": ratio} if ratio else None


def _resume(value: Any, data: dict) -> Sets | None:
    if value is None or (isinstance(value, bool) and not value):
        return None
    if isinstance(value, bool) or str(value).strip().lower() == "true":
        return {"resume": True}
    out = str(data.get("output_dir") or "")
    if not out or PurePath(str(value)).parent != PurePath(out):
        raise Refused(say("lf.resume_elsewhere", value=shown(value), output=out or "-"))
    return {"resume": True}


def _report_to(value: Any, _: dict) -> Sets | None:
    names = [value] if isinstance(value, str) else list(value or ["none"])
    names = [str(n).strip() for n in names if str(n).strip() not in ("", "none")]
    if not names:
        return None  # the job's default, none (so that use_swanlab may set it)
    if names == ["all"] or len(names) > 1:
        raise Refused(say("lf.report_many", value=shown(value)))
    return {"report_to": names[0]}


def _template(value: Any, _: dict) -> Sets | None:
    if value is None:
        return None
    name = str(value).strip()
    if name in chat.NAMED or name in ("auto", "chat") or name not in LF_TEMPLATES:
        return {"template": name}  # ours (an unknown name is refused by the field's choices)
    return {"template": "chat", "_note": say("lf.template_own", name=name)}


def _dataset_dir(value: Any, _: dict) -> Sets | None:
    return None if value is None else {"dataset_dir": value}  # REMOTE: and ONLINE as well (data/hubdir.py)


def _finetuning(value: Any, _: dict) -> Sets | None:
    if value in ("freeze", "oft"):
        raise Refused(say("lf.finetuning_type", value=value))
    return None if value is None else {"finetuning_type": value}


ATTENTION = {"auto": "auto", "disabled": "eager", "sdpa": "sdpa", "fa2": "flash_attention_2"}


def _flash_attn(value: Any, _: dict) -> Sets | None:
    if value not in ATTENTION:
        raise Refused(say("lf.flash_attn", value=shown(value), options=", ".join(ATTENTION)))
    return {"attn_implementation": ATTENTION[value]}


def _liger(value: Any, _: dict) -> Sets:
    return {"liger_kernel": "on" if _bool(value) else "off"}


def _packing(neat: bool) -> Callable[[Any, dict], Sets | None]:
    def read(value, _):
        if value is None or not _bool(value):
            return None
        return {"packing": True, **({} if neat else {"_note": say("lf.packing_neat")})}
    return read


def _probs(value: Any, _: dict) -> Sets | None:
    return None if value is None else {"interleave_probs": value}


def _no_checkpointing(value: Any, _: dict) -> Sets | None:
    return {"gradient_checkpointing": False} if _bool(value) else None


def _on(field_name: str, on: Any) -> Callable[[Any, dict], Sets | None]:
    return lambda v, _: {field_name: on} if _bool(v) else None


def _false(value: Any) -> bool:
    return value is not None and not _bool(value)


def _not(expected: Any) -> Callable[[Any], bool]:
    return lambda v: v is not None and v != expected


# --- the table -------------------------------------------------------------------------------------------------

def same(name: str) -> Rule:
    return Rule("field", name, "lf.doc_same", _same(name))


def maps(name: str, read: Callable[[Any, dict], Sets | None], doc: str) -> Rule:
    return Rule("field", name, doc, read)


def noop(why: str, when: Callable[[Any], bool] | None = None) -> Rule:
    return Rule("no-op", why=why, when=when)


def refused(why: str = "lf.unsupported", when: Callable[[Any], bool] | None = None) -> Rule:
    return Rule("refused", why=why, when=when)


TRAINER = Rule("trainer")


def _each(names: str, rule: Rule) -> dict[str, Rule]:
    return dict.fromkeys(names.split(), rule)


TABLE: dict[str, Rule] = {
    # the job's own names, LLaMA-Factory's null read as unset
    **{n: same(n) for n in ("model_name_or_path dataset eval_dataset cutoff_len max_samples val_size overwrite_cache "
                            "preprocessing_num_workers mix_strategy lora_rank lora_dropout lora_target pure_bf16 "
                            "learning_rate num_train_epochs max_steps lr_scheduler_type warmup_steps "
                            "per_device_train_batch_size per_device_eval_batch_size gradient_accumulation_steps "
                            "max_grad_norm weight_decay gradient_checkpointing logging_steps save_steps eval_steps seed "
                            "output_dir deepspeed master_addr master_port dataloader_num_workers").split()},
    "lora_alpha": maps("lora_alpha", _same("lora_alpha"), "lf.doc_lora_alpha"),
    "template": maps("template", _template, "lf.doc_template"),
    "dataset_dir": maps("dataset_dir", _dataset_dir, "lf.doc_dataset_dir"),
    "finetuning_type": maps("finetuning_type", _finetuning, "lf.doc_finetuning_type"),
    "interleave_probs": maps("interleave_probs", _probs, "lf.doc_same"),
    "report_to": maps("report_to", _report_to, "lf.doc_report_to"),
    # other names of the job's fields
    "stage": maps("training_stage", _stage, "lf.doc_stage"),
    "pref_loss": maps("pref_loss", _pref_loss, "lf.doc_pref_loss"),
    **{n: same(n) for n in ("pref_beta", "pref_ftx", "simpo_gamma", "quantization_bit")},
    "do_train": maps("", _do_train, "lf.doc_do_train"),
    "bf16": maps("precision", _half("bf16"), "lf.doc_bf16"),
    "fp16": maps("precision", _half("fp16"), "lf.doc_fp16"),
    "use_cpu": maps("device_type", _on("device_type", "cpu"), "lf.doc_cpu"),
    "no_cuda": maps("device_type", _on("device_type", "cpu"), "lf.doc_cpu"),
    "warmup_ratio": maps("warmup_steps", _warmup_ratio, "lf.doc_warmup_ratio"),
    "eval_strategy": maps("eval_steps", _strategy("eval_strategy", "eval_steps"), "lf.doc_eval_strategy"),
    "evaluation_strategy": maps("eval_steps", _strategy("eval_strategy", "eval_steps"), "lf.doc_eval_strategy"),
    "save_strategy": maps("save_steps", _strategy("save_strategy", "save_steps"), "lf.doc_save_strategy"),
    "logging_strategy": maps("logging_steps", _logging, "lf.doc_logging_strategy"),
    "resume_from_checkpoint": maps("resume", _resume, "lf.doc_resume"),
    "flash_attn": maps("attn_implementation", _flash_attn, "lf.doc_flash_attn"),
    "enable_liger_kernel": maps("liger_kernel", _liger, "lf.doc_liger"),
    "use_liger_kernel": maps("liger_kernel", _liger, "lf.doc_liger"),
    "packing": maps("packing", _packing(neat=False), "lf.doc_packing"),
    "neat_packing": maps("packing", _packing(neat=True), "lf.doc_neat_packing"),
    "disable_gradient_checkpointing": maps("gradient_checkpointing", _no_checkpointing, "lf.doc_no_checkpointing"),
    "use_swanlab": maps("report_to", _on("report_to", "swanlab"), "lf.doc_swanlab"),
    # TrainingArguments without a field of the job: passed to the Trainer (any other of its names too)
    **_each("ddp_timeout save_only_model save_total_limit optim adam_beta1 adam_beta2 adam_epsilon run_name "
            "gradient_checkpointing_kwargs ddp_find_unused_parameters dataloader_pin_memory lr_scheduler_kwargs "
            "logging_first_step data_seed", TRAINER),
    # accepted, nothing to change here
    "do_eval": noop("lf.noop_here", lambda v: False),
    "plot_loss": noop("lf.plot_loss"),
    "overwrite_output_dir": noop("lf.overwrite_output_dir"),
    "trust_remote_code": noop("lf.trust_remote_code"),
    "tokenized_path": noop("lf.tokenized_path"),
    "cache_dir": noop("lf.cache_dir"),
    "include_effective_tokens_per_second": noop("lf.tokens_per_second"),
    "ray_num_workers": noop("lf.ray"),
    "ray_init_kwargs": noop("lf.ray"),
    "enable_thinking": refused("lf.enable_thinking", _false),
    **_each("preserve_thinking low_cpu_mem_usage print_param_status resize_vocab preprocessing_batch_size buffer_size "
            "data_shared_file_system create_new_adapter use_reentrant_gc local_rank", noop("lf.noop_here", lambda v: False)),
    "use_fast_tokenizer": refused("lf.unsupported", _false),
    "ignore_pad_token_for_loss": refused("lf.unsupported", _false),
    "model_revision": refused("lf.unsupported", _not("main")),
    **_each("video_max_pixels video_min_pixels video_fps video_maxlen use_audio_in_video audio_sampling_rate",
            noop("lf.noop_media")),
    **_each("image_do_pan_and_scan crop_to_patches", noop("lf.noop_image_option")),
    "media_dir": refused("lf.media_dir", lambda v: v not in (None, "")),
    **_each("infer_backend offload_folder use_kv_cache use_v1_kernels infer_dtype vllm_maxlen vllm_gpu_util "
            "vllm_enforce_eager vllm_max_lora_rank vllm_config sglang_maxlen sglang_mem_fraction sglang_tp_size "
            "sglang_config sglang_lora_backend do_sample temperature top_p top_k num_beams max_length max_new_tokens "
            "repetition_penalty length_penalty skip_special_tokens eval_num_beams generation_max_length "
            "generation_num_beams generation_config sortish_sampler", noop("lf.noop_inference")),
    **_each("export_dir export_size export_device export_quantization_bit export_quantization_dataset "
            "export_quantization_nsamples export_quantization_maxlen export_legacy_format export_hub_model_id",
            noop("lf.noop_export")),
    **_each("ppo_buffer_size ppo_epochs ppo_score_norm ppo_target ppo_whiten_rewards reward_model reward_model_adapters "
            "reward_model_quantization_bit reward_model_type", noop("lf.noop_stage")),
    # preference tuning's other settings: TRL's defaults here, which are LLaMA-Factory's; another value is refused
    **_each("pref_bco_weight dpo_label_smoothing", refused("lf.pref_unsupported", _not(0))),
    **_each("kto_chosen_weight kto_rejected_weight", refused("lf.pref_unsupported", _not(1))),
    **_each("ld_alpha ref_model ref_model_adapters ref_model_quantization_bit", refused("lf.pref_unsupported")),
    **_each("freeze_trainable_layers freeze_trainable_modules freeze_extra_modules oft_rank oft_block_size oft_target "
            "module_dropout galore_target galore_rank galore_update_interval galore_scale galore_proj_type "
            "galore_layerwise apollo_target apollo_rank apollo_update_interval apollo_scale apollo_proj "
            "apollo_proj_type apollo_scale_type apollo_layerwise apollo_scale_front badam_mode badam_start_block "
            "badam_switch_mode badam_switch_interval badam_update_ratio badam_mask_mode badam_verbose pissa_iter "
            "pissa_convert loraplus_lr_embedding hyper_parallel_args asft_alpha eaft_alpha kt_weight_path "
            "kt_expert_checkpoint_path kt_use_lora_experts kt_lora_expert_num kt_lora_expert_intermediate_size "
            "quantization_method quantization_type double_quantization quantization_device_map fp8_backend "
            "fp8_enable_fsdp_float8_all_gather", noop("lf.noop_method", lambda v: False)),
    **_each("swanlab_project swanlab_workspace swanlab_run_name swanlab_mode swanlab_logdir", noop("lf.swanlab")),
    **_each("enable_torch_profiler profiler_output_dir profiler_wait_steps profiler_warmup_steps profiler_active_steps "
            "profiler_repeat profiler_record_shapes profiler_profile_memory profiler_with_stack profile_modules",
            noop("lf.noop_profiler")),
    # refused: what ZeroBoard cannot do (yet)
    **_each("hf_hub_token ms_hub_token om_hub_token hub_token swanlab_api_key swanlab_lark_webhook_url "
            "swanlab_lark_secret", refused("lf.token_in_file")),
    "do_predict": refused("lf.predict"),
    "predict_with_generate": refused("lf.predict"),
    "streaming": refused("lf.streaming"),
    "fp8": refused("lf.fp8"),
    **_each("train_on_prompt mask_history eval_on_each_dataset shift_attn use_unsloth use_unsloth_gc upcast_layernorm "
            "upcast_lmhead_output train_from_scratch use_rslora use_dora pissa_init use_galore use_apollo use_badam "
            "use_llama_pro use_adam_mini use_mca use_hyper_parallel use_muon use_dft_loss use_asft_loss use_eaft_loss "
            "use_kt disable_shuffling compute_accuracy split_special_tokens", refused()),
    **_each("adapter_name_or_path adapter_folder additional_target loraplus_lr_ratio rope_scaling mixture_of_depths "
            "moe_aux_loss_coef add_tokens add_special_tokens new_special_tokens_config init_special_tokens tool_format "
            "default_system early_stopping_steps", refused()),
}
