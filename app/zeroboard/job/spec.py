"""The job spec: one typed description of a fine-tuning run.

Everything else derives from :class:`JobSpec`: the YAML files, the trainer's
command-line flags, the preview command, the saved run record and the web
form.  Each field carries in ``metadata`` its form section and where it goes
(``to``: the Trainer arguments it sets, or the part of ZeroBoard that reads it,
see :mod:`.mapping`); the trainer's arguments and the arguments the job owns
are generated from that (:func:`trainer_arguments`, :func:`owned_arguments`).
Its label and help live in the catalog (``words.fields``), keyed by the
field's name; choices are ``Literal`` types, read back with :func:`choices`.

This module must stay light (no torch, no transformers): the web server
imports it.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from .. import safeload
from ..words import Msg, help_text as _help, say
from . import lfcompat, mapping, values
from .mapping import own, trainer
from .quoting import control_within
from .values import number, shown, text

FinetuningType = Literal["lora", "full"]
# sft: supervised; dpo, orpo, simpo (pairs of a chosen and a rejected answer), kto (answers tagged good or bad):
# preference tuning through TRL's trainers (training.preference)
TrainingStage = Literal["sft", "dpo", "orpo", "simpo", "kto"]
PrefLoss = Literal["sigmoid", "hinge", "ipo"]  # DPO's loss, as LLaMA-Factory's pref_loss names it
Stage = Literal["none", "2", "3"]
Precision = Literal["auto", "bf16", "fp16", "fp32"]
Launcher = Literal["torchrun", "deepspeed", "slurm"]
DeviceType = Literal["auto", "cuda", "cpu"]
# auto/chat: the tokenizer's own; plain: ZeroBoard's; the rest: LLaMA-Factory's templates of those names (data.chat)
Template = Literal["auto", "chat", "plain", "default", "empty", "alpaca", "vicuna", "chatml", "qwen", "qwen3",
                   "qwen3_nothink", "qwen3_vl", "qwen3_vl_nothink",
                   "llama2", "llama3", "mistral", "ministral", "gemma", "gemma3", "phi", "phi4",
                   "granite3", "smollm", "smollm2", "starchat", "yi", "zephyr", "deepseek"]
MixStrategy = Literal["concat", "interleave_under", "interleave_over", "interleave_once"]
OnOff = Literal["auto", "on", "off"]
Truncation = Literal["proportional", "end"]
Attention = Literal["auto", "sdpa", "eager", "flash_attention_2"]
MasterWeights = Literal["auto", "split", "fp32"]
Scheduler = Literal["linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts", "polynomial"]
Tracker = Literal["none", "tensorboard", "wandb", "mlflow", "swanlab"]  # each offered when its package is installed

MAX_TEXT = values.MAX_TEXT  # the longest text a field takes (job.values)
MAX_EXTRA_JSON = 64 << 10
MAX_ITEMS = 1024  # entries of a list field (datasets, GPU ids, LoRA targets)

DEMO_MODEL = "cache/demo/model"
LESSON_MODEL = "cache/demo/lesson"  # the ZeRO lesson's larger model (examples/lesson_zero.yaml), built as the demo's is
DEMO_DATA_DIR = "cache/demo/data"
VISION_MODEL, VISION_DATA_DIR = "cache/demo/vision", "cache/demo/vision_data"  # zeroboard demo-model --vision
DEMO_JOB = "examples/demo.yaml"


def _f(default: Any, section: str, launch_only: bool = False, to: mapping.To | None = None, **kw: Any) -> Any:
    """A spec field: default, form section, and where it goes (``to``: :mod:`.mapping`); launch_only fields stay
    with the launcher (they are no flag of the trainer's)."""
    meta = {"section": section, "launch_only": launch_only, "to": to}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


@dataclass
class JobSpec:
    # --- model -----------------------------------------------------------------
    model_name_or_path: str = _f(DEMO_MODEL, "model", to=own("model"))
    finetuning_type: FinetuningType = _f("lora", "model", to=own("model"))
    training_stage: TrainingStage = _f("sft", "model", to=own("data", "run"))
    quantization_bit: int = _f(0, "model", to=own("model"))  # 4 or 8: QLoRA (bitsandbytes); 0: none
    # --- data ------------------------------------------------------------------
    dataset_dir: str = _f(DEMO_DATA_DIR, "data", to=own("data"))
    dataset: list[str] = _f(["identity", "demo_alpaca"], "data", to=own("data"))
    mix_strategy: MixStrategy = _f("concat", "data", to=own("data"))
    interleave_probs: list[float] = _f([], "data", to=own("data"))
    template: Template = _f("auto", "data", to=own("data"))
    cutoff_len: int = _f(128, "data", to=own("data"))
    truncation: Truncation = _f("proportional", "data", to=own("data"))
    max_samples: int = _f(0, "data", to=own("data"))
    val_size: float = _f(0.0, "data", to=own("data"))
    eval_dataset: list[str] = _f([], "data", to=own("data"))
    preprocessing_num_workers: int = _f(0, "data", to=own("data"))
    dataloader_num_workers: int = _f(0, "data", to=trainer("dataloader_num_workers", value=mapping.dataloader_workers))
    overwrite_cache: bool = _f(False, "data", to=own("data"))
    max_cell_bytes: int = _f(safeload.MAX_CELL_BYTES, "data", to=own("data"))
    max_record_bytes: int = _f(safeload.RECORD.max_bytes, "data", to=own("data"))
    # --- hyperparameters -------------------------------------------------------
    learning_rate: float = _f(5e-5, "train", to=trainer("learning_rate"))
    num_train_epochs: float = _f(3.0, "train", to=trainer("num_train_epochs"))
    max_steps: int = _f(0, "train", to=trainer("max_steps", value=mapping.max_steps))
    lr_scheduler_type: Scheduler = _f("cosine", "train", to=trainer("lr_scheduler_type"))
    warmup_steps: float = _f(0.0, "train", to=trainer("warmup_steps"))
    per_device_train_batch_size: int = _f(4, "train", to=trainer("per_device_train_batch_size"))
    per_device_eval_batch_size: int = _f(4, "train", to=trainer("per_device_eval_batch_size"))
    gradient_accumulation_steps: int = _f(1, "train", to=trainer("gradient_accumulation_steps"))
    max_grad_norm: float = _f(1.0, "train", to=trainer("max_grad_norm"))
    weight_decay: float = _f(0.0, "train", to=trainer("weight_decay"))
    precision: Precision = _f("auto", "train", to=trainer("bf16", "fp16", value=mapping.precision, own="model"))
    gradient_checkpointing: bool = _f(False, "train", to=trainer("gradient_checkpointing", own="model"))
    logging_steps: int = _f(5, "train", to=trainer("logging_steps"))
    save_steps: int = _f(0, "train", to=trainer("save_strategy", "save_steps", value=mapping.save_steps))
    eval_steps: int = _f(0, "train", to=trainer("eval_strategy", "eval_steps", value=mapping.eval_steps))
    seed: int = _f(42, "train", to=trainer("seed", own="data"))
    # --- speed-ups -------------------------------------------------------------
    liger_kernel: OnOff = _f("auto", "speed", to=trainer("use_liger_kernel", "liger_kernel_config", value=mapping.liger))
    attn_implementation: Attention = _f("auto", "speed", to=own("model"))
    packing: bool = _f(False, "speed", to=own("data"))
    pure_bf16: bool = _f(False, "speed", to=own("model"))
    master_weights: MasterWeights = _f("auto", "speed", to=own("model"))
    # --- LoRA ------------------------------------------------------------------
    lora_rank: int = _f(8, "lora", to=own("model"))
    lora_alpha: int = _f(16, "lora", to=own("model"))
    lora_dropout: float = _f(0.0, "lora", to=own("model"))
    lora_target: list[str] = _f(["all"], "lora", to=own("model"))
    # --- images (a dataset with columns.images, a vision-language model: data.media, training.vision) ----------
    image_max_pixels: int = _f(768 * 768, "vision", to=own("data"))
    image_min_pixels: int = _f(32 * 32, "vision", to=own("data"))
    freeze_vision_tower: bool = _f(True, "vision", to=own("model"))
    freeze_multi_modal_projector: bool = _f(True, "vision", to=own("model"))
    freeze_language_model: bool = _f(False, "vision", to=own("model"))
    # --- preference tuning (training_stage dpo, orpo, simpo, kto) ---------------
    pref_beta: float = _f(0.1, "pref", to=own("run"))
    pref_loss: PrefLoss = _f("sigmoid", "pref", to=own("run"))
    pref_ftx: float = _f(0.0, "pref", to=own("run"))
    simpo_gamma: float = _f(0.5, "pref", to=own("run"))
    # --- output ----------------------------------------------------------------
    output_dir: str = _f("runs/demo", "output", to=trainer("output_dir", own="run"))
    resume: bool = _f(False, "output", to=own("run"))
    report_to: Tracker = _f("none", "output", to=trainer("report_to", own="run"))
    stall_factor: float = _f(10.0, "output", launch_only=True, to=own("watch"))
    stall_min_s: float = _f(30.0, "output", launch_only=True, to=own("watch"))
    # --- devices and DeepSpeed -------------------------------------------------
    device_type: DeviceType = _f("auto", "devices", to=trainer("use_cpu", "ddp_backend", value=mapping.device_type,
                                                                   own="launch"))
    gpu_ids: list[int] = _f([], "devices", launch_only=True, to=own("launch"))
    num_processes: int = _f(2, "devices", launch_only=True, to=own("launch"))
    deepspeed_stage: Stage = _f("none", "devices", to=own("launch"))
    offload: bool = _f(False, "devices", to=own("launch"))
    launcher: Launcher = _f("torchrun", "devices", launch_only=True, to=own("launch"))
    num_nodes: int = _f(1, "devices", launch_only=True, to=own("launch"))
    node_rank: int = _f(0, "devices", launch_only=True, to=own("launch"))
    master_addr: str = _f("127.0.0.1", "devices", launch_only=True, to=own("launch"))
    master_port: int = _f(0, "devices", launch_only=True, to=own("launch"))
    deepspeed: str = _f("", "devices", to=trainer("deepspeed", value=mapping.deepspeed, own="launch"))
    extra_args: dict[str, Any] = _f({}, "devices", to=trainer(value=mapping.extra_args, extra=True))
    # --- a Slurm cluster (launcher: slurm) ---------------------------------------
    slurm_partition: str = _f("", "devices", launch_only=True, to=own("launch"))
    slurm_gpus_per_node: int = _f(0, "devices", launch_only=True, to=own("launch"))
    slurm_cpus_per_task: int = _f(0, "devices", launch_only=True, to=own("launch"))
    slurm_time: str = _f("", "devices", launch_only=True, to=own("launch"))
    slurm_account: str = _f("", "devices", launch_only=True, to=own("launch"))
    slurm_extra: list[str] = _f([], "devices", launch_only=True, to=own("launch"))


FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(JobSpec)}
_HINTS = typing.get_type_hints(JobSpec)


def field_type(name: str) -> Any:
    return _HINTS[name]


def choices(name: str) -> tuple[str, ...] | None:
    """The allowed values of a Literal field, else None."""
    t = _HINTS[name]
    return typing.get_args(t) if typing.get_origin(t) is Literal else None


def defaults() -> JobSpec:
    return JobSpec()


def help_text(name: str) -> str:
    return _help(name)


def destination(name: str) -> mapping.To:
    """Where a field goes, as its definition declares (an empty ``To`` when it declares nothing)."""
    return FIELDS[name].metadata["to"] or mapping.To()


def trainer_arguments(job: JobSpec, resolved: mapping.Resolved) -> dict[str, Any]:
    """The TrainingArguments every field sets, in schema order (``extra_args`` last), from the fields' declarations."""
    out: dict[str, Any] = {}
    for name in FIELDS:
        out.update(destination(name).arguments(name, job, resolved))
    return out


def owned_arguments() -> dict[str, str]:
    """TrainingArguments a field of the job sets -> that field (``extra_args`` may not set them)."""
    return {arg: name for name in FIELDS for arg in destination(name).args}


# --- conversion ----------------------------------------------------------------

class SpecError(ValueError):
    """One or more fields are invalid. ``problems`` maps field name -> message (a catalog Msg)."""

    def __init__(self, problems: dict[str, str]):
        self.problems = dict(problems)
        super().__init__("\n".join(f"{k}: {v}" for k, v in self.problems.items()))


def _is_list(t: Any) -> bool:
    return typing.get_origin(t) is list


def coerce(name: str, value: Any) -> Any:
    """Turn a value from YAML, a form or a command line into the field's type.

    Raises ValueError with a message (a catalog Msg) that says what was expected.
    """
    t = _HINTS[name]
    opts = choices(name)
    if opts is not None:
        s = str(value).strip() if isinstance(value, (str, int, float)) else None
        if s not in opts:
            raise ValueError(say("spec.choice", options=", ".join(opts), got=shown(value)))
        return s
    if t is bool:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower() if isinstance(value, (str, int, float)) else None
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(say("spec.bool", got=shown(value)))
    if t in (int, float):
        return number(value, whole=t is int)
    if t is str:
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            raise ValueError(say("spec.text", got=shown(value)))
        return text(value)
    if _is_list(t):
        (item,) = typing.get_args(t)
        if value is None:
            return []
        if isinstance(value, str):
            value = [v for v in (p.strip() for p in text(value, MAX_TEXT * 4).split(",")) if v]
        if not isinstance(value, (list, tuple)):
            raise ValueError(say("spec.list", got=shown(value)))
        if len(value) > MAX_ITEMS:
            raise ValueError(say("spec.too_many", n=len(value), limit=MAX_ITEMS))
        if item in (int, float):
            try:
                return [number(v, whole=item is int) for v in value]
            except ValueError:
                raise ValueError(say("spec.int_list" if item is int else "spec.number_list", got=shown(value))) from None
        if any(isinstance(v, (dict, list)) for v in value):
            raise ValueError(say("spec.list_of_text", got=shown(value)))
        return [t for t in (text(v) for v in value) if t]
    if typing.get_origin(t) is dict:
        if value is None or value == "":
            return {}
        if isinstance(value, str):
            try:
                value = safeload.json_text(value, safeload.Limits(MAX_EXTRA_JSON, max_depth=8))
            except safeload.Refused as e:
                raise ValueError(say(e.key, **e.values)) from None
            except json.JSONDecodeError as e:
                raise ValueError(say("spec.json_object", why=e.msg)) from None
        if not isinstance(value, dict):
            raise ValueError(say("spec.mapping", got=shown(value)))
        if safeload.depth(value) > 8 or len(json.dumps(value, default=str)) > MAX_EXTRA_JSON:
            raise ValueError(say("safe.value_too_big", limit=f"{MAX_EXTRA_JSON >> 10} KiB"))
        found = control_within(value)  # keys and string values at any depth: names, paths, choices
        if found is not None:
            raise ValueError(say("spec.control_in", key=found[0], char=found[2], pos=found[1]))
        return dict(value)
    raise TypeError(f"unhandled type {t} for {name}")  # pragma: no cover - a schema bug


def from_dict(data: dict[str, Any], notes: dict[str, Msg] | None = None) -> JobSpec:
    """Build a spec from a mapping, converting types; unknown keys are errors.

    LLaMA-Factory's keys are read as :mod:`.lfcompat`'s table says (``bf16: true`` is ``precision: bf16``, ...);
    ``notes`` collects its one-line notes (keys accepted with no effect here, defaults taken), by key."""
    read = lfcompat.translate(data, FIELDS)
    problems: dict[str, Msg] = dict(read.problems)
    values: dict[str, Any] = {}
    for key, value in read.values.items():
        try:
            values[key] = coerce(key, value)
        except ValueError as e:
            problems[key] = e.args[0]
    if problems:
        raise SpecError(problems)
    if notes is not None:
        notes.update(read.notes)
    return JobSpec(**values)


def to_dict(spec: JobSpec) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def changed(spec: JobSpec) -> dict[str, Any]:
    """Fields whose value differs from the default, in schema order."""
    base = to_dict(JobSpec())
    return {k: v for k, v in to_dict(spec).items() if base[k] != v}


def load_yaml(path: str | Path, notes: dict[str, Msg] | None = None) -> JobSpec:
    """Read a job file (ours, or LLaMA-Factory's: ``notes`` collects what it says of it). Raises SpecError naming the
    file when it cannot be used."""
    p = Path(path)
    try:
        text = safeload.read_text(p, safeload.JOB)
    except safeload.Refused as e:
        raise SpecError({"file": say("spec.unsafe", path=str(p), why=say(e.key, **e.values))}) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError({"file": say("spec.cannot_read", path=str(p), why=getattr(e, "strerror", None) or str(e))}) from None
    return loads_yaml(text, source=str(p), notes=notes)


def loads_yaml(text: str, source: str = "job", notes: dict[str, Msg] | None = None) -> JobSpec:
    return from_dict(read_mapping(text, source), notes)


def read_mapping(text: str, source: str = "job") -> dict:
    """The option: value mapping of a job file's text (SpecError naming ``source`` when it is none)."""
    try:
        data = safeload.yaml_text(text, safeload.JOB)
    except safeload.Refused as e:  # a key given twice or a number that is not finite names its option
        raise SpecError({e.field or "file": say("spec.unsafe", path=source, why=say(e.key, **e.values))}) from None
    except yaml.YAMLError as e:
        raise SpecError({"file": say("spec.not_yaml", path=source, why=str(e)[:400])}) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError({"file": say("spec.not_mapping", path=source)})
    return data


def dump_yaml(spec: JobSpec, full: bool = True) -> str:
    data = to_dict(spec) if full else changed(spec)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def load_job(path: str | Path | None, notes: dict[str, Msg] | None = None) -> JobSpec:
    """A job file, or with none the offline demo's job (``examples/demo.yaml``, else the defaults)."""
    if path is None:
        return load_yaml(DEMO_JOB) if Path(DEMO_JOB).is_file() else JobSpec()
    return load_yaml(path, notes)


def apply_overrides(job: JobSpec, pairs: list[str]) -> JobSpec:
    """``name=value`` pairs (the command line's ``--set``) on top of a job."""
    data = to_dict(job)
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            raise SpecError({key: say("spec.override_form")})
        data.pop(lfcompat.field_of(key.strip()), None)  # --set bf16=true replaces the job's precision
        data[key.strip()] = value
    return from_dict(data)


def sections() -> dict[str, list[str]]:
    """Field names grouped by form section, in schema order."""
    out: dict[str, list[str]] = {}
    for f in dataclasses.fields(JobSpec):
        out.setdefault(f.metadata["section"], []).append(f.name)
    return out


# --- command-line flags (the trainer's parser and the command builder) ---------

def to_flags(values: dict[str, Any]) -> list[str]:
    """Render field values as ``--name value`` pairs the trainer parses back."""
    argv: list[str] = []
    for key, value in values.items():
        t = _HINTS[key]
        if t is bool:
            text = "true" if value else "false"
        elif _is_list(t):
            text = ",".join(str(v) for v in value)
        elif typing.get_origin(t) is dict:
            text = json.dumps(value, separators=(",", ":"))
        else:
            text = str(value)
        argv += [f"--{key}", text]
    return argv


def from_flags(argv: list[str]) -> JobSpec:
    """Parse ``--name value`` pairs produced by :func:`to_flags`."""
    data: dict[str, Any] = {}
    problems: dict[str, Msg] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            problems[tok] = say("spec.flag_unexpected")
            i += 1
            continue
        key, eq, val = tok[2:].partition("=")
        if not eq:
            if i + 1 >= len(argv):
                problems[key] = say("spec.flag_no_value")
                break
            val = argv[i + 1]
            i += 1
        data[key] = val
        i += 1
    if problems:
        raise SpecError(problems)
    return from_dict(data)
