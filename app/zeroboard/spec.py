"""The job spec: one typed description of a fine-tuning run.

Everything else derives from :class:`JobSpec`: the YAML files, the trainer's
command-line flags, the preview command, the saved run record and the web
form.  Each field carries its help text and section in ``metadata``; choices
are ``Literal`` types, read back with :func:`choices`.

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

FinetuningType = Literal["lora", "full"]
Stage = Literal["none", "2", "3"]
Precision = Literal["auto", "bf16", "fp16", "fp32"]
Launcher = Literal["torchrun", "deepspeed"]
DeviceType = Literal["auto", "cuda", "cpu"]
Template = Literal["auto", "chat", "plain"]
OnOff = Literal["auto", "on", "off"]
Attention = Literal["auto", "sdpa", "eager", "flash_attention_2"]
Scheduler = Literal["linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts", "polynomial"]

DEMO_MODEL = "cache/demo/model"
DEMO_DATA_DIR = "cache/demo/data"


def _f(default: Any, help: str, section: str, launch_only: bool = False, **kw: Any) -> Any:
    """A spec field: default, help text, form section; launch_only fields stay with the launcher."""
    meta = {"help": help, "section": section, "launch_only": launch_only}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


@dataclass
class JobSpec:
    # --- model -----------------------------------------------------------------
    model_name_or_path: str = _f(DEMO_MODEL, "Local model directory (with config.json) or a hub id.", "model")
    finetuning_type: FinetuningType = _f("lora", "lora trains a small adapter; full trains every weight.", "model")
    # --- data ------------------------------------------------------------------
    dataset_dir: str = _f(DEMO_DATA_DIR, "Folder holding dataset_info.json and the data files.", "data")
    dataset: list[str] = _f(["identity", "demo_alpaca"], "Dataset names from dataset_info.json, or paths to .json/.jsonl files.", "data")
    template: Template = _f("auto", "auto: the tokenizer's chat template if it has one, else plain text.", "data")
    cutoff_len: int = _f(128, "Longest tokenized sample; longer ones are truncated.", "data")
    max_samples: int = _f(0, "Use at most this many samples per dataset (0 = all).", "data")
    # --- hyperparameters -------------------------------------------------------
    learning_rate: float = _f(5e-5, "Peak learning rate of AdamW.", "train")
    num_train_epochs: float = _f(3.0, "Passes over the data (ignored when max_steps > 0).", "train")
    max_steps: int = _f(0, "Stop after this many optimizer steps (0 = use epochs).", "train")
    lr_scheduler_type: Scheduler = _f("cosine", "Learning-rate schedule after warm-up.", "train")
    warmup_steps: float = _f(0.0, "Warm-up steps, or a fraction of all steps when below 1.", "train")
    per_device_train_batch_size: int = _f(4, "Samples per device per forward pass (micro-batch).", "train")
    gradient_accumulation_steps: int = _f(1, "Micro-batches summed before each optimizer step.", "train")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm (0 = off).", "train")
    weight_decay: float = _f(0.0, "AdamW weight decay.", "train")
    precision: Precision = _f("auto", "auto: bf16 on GPUs that support it, fp16 on older GPUs, fp32 on CPU.", "train")
    gradient_checkpointing: bool = _f(False, "Recompute activations in the backward pass to save memory.", "train")
    logging_steps: int = _f(5, "Log loss, learning rate and speed every N steps.", "train")
    save_steps: int = _f(0, "Save a checkpoint every N steps (0 = only the final result).", "train")
    seed: int = _f(42, "Random seed.", "train")
    # --- speed-ups -------------------------------------------------------------
    liger_kernel: OnOff = _f("auto", "Liger's fused Triton kernels (RMSNorm, SwiGLU, RoPE, linear + cross-entropy) for supported "
                             "models: faster steps, less memory. auto: on for NVIDIA GPUs when liger-kernel is installed.", "speed")
    attn_implementation: Attention = _f("auto", "Attention kernel. auto: the model's default (PyTorch SDPA); flash_attention_2 "
                                        "needs the flash-attn package.", "speed")
    packing: bool = _f(False, "Pack several samples into each cutoff_len row: no padding, fewer steps. Positions restart per "
                       "sample and attention and loss never cross samples.", "speed")
    pure_bf16: bool = _f(False, "Keep weights and AdamW states in bf16, without the fp32 master copy: less memory and faster "
                         "steps, but updates smaller than bf16's precision are lost. Only without DeepSpeed.", "speed")
    # --- LoRA ------------------------------------------------------------------
    lora_rank: int = _f(8, "Rank of the LoRA matrices.", "lora")
    lora_alpha: int = _f(16, "LoRA scaling numerator (scale = alpha / rank).", "lora")
    lora_dropout: float = _f(0.0, "Dropout on the LoRA input.", "lora")
    lora_target: list[str] = _f(["all"], "Module names to adapt, or 'all' for every linear layer but the output head.", "lora")
    # --- output ----------------------------------------------------------------
    output_dir: str = _f("runs/demo", "Where the run writes its record, logs, checkpoints and result.", "output")
    resume: bool = _f(False, "Continue from the last checkpoint in output_dir.", "output")
    # --- devices and DeepSpeed -------------------------------------------------
    device_type: DeviceType = _f("auto", "auto: the selected NVIDIA GPUs if there are any, else CPU processes.", "devices")
    gpu_ids: list[int] = _f([], "GPU indices to use, in order (empty = all detected GPUs).", "devices", launch_only=True)
    num_processes: int = _f(2, "Number of training processes when running on CPU.", "devices", launch_only=True)
    deepspeed_stage: Stage = _f("none", "ZeRO stage: none (plain data parallel), 2 or 3.", "devices")
    offload: bool = _f(False, "Move optimizer states (and, for stage 3, parameters) to CPU memory.", "devices")
    launcher: Launcher = _f("torchrun", "Which launcher starts the processes.", "devices", launch_only=True)
    num_nodes: int = _f(1, "Machines taking part; start the same job on each with its own node_rank (torchrun).", "devices",
                        launch_only=True)
    node_rank: int = _f(0, "This machine's index among num_nodes (0 hosts the rendezvous).", "devices", launch_only=True)
    master_addr: str = _f("127.0.0.1", "Address of node 0, reachable from every node.", "devices", launch_only=True)
    master_port: int = _f(0, "Rendezvous port on node 0 (0 = pick a free one; give a fixed one for several nodes).", "devices",
                          launch_only=True)
    deepspeed: str = _f("", "Path to your own DeepSpeed JSON (empty = the cache/ preset of the chosen stage).", "devices")
    extra_args: dict[str, Any] = _f({}, "More transformers TrainingArguments, as a mapping.", "devices")


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


# --- conversion ----------------------------------------------------------------

class SpecError(ValueError):
    """One or more fields are invalid. ``problems`` maps field name -> message."""

    def __init__(self, problems: dict[str, str]):
        self.problems = dict(problems)
        super().__init__("\n".join(f"{k}: {v}" for k, v in self.problems.items()))


def _is_list(t: Any) -> bool:
    return typing.get_origin(t) is list


def coerce(name: str, value: Any) -> Any:
    """Turn a value from YAML, a form or a command line into the field's type.

    Raises ValueError with a message that says what was expected.
    """
    t = _HINTS[name]
    opts = choices(name)
    if opts is not None:
        s = str(value).strip()
        if s not in opts:
            raise ValueError(f"must be one of {', '.join(opts)} (got {value!r})")
        return s
    if t is bool:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"must be true or false (got {value!r})")
    if t is int:
        if isinstance(value, bool):
            raise ValueError(f"must be a whole number (got {value!r})")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValueError(f"must be a whole number (got {value!r})") from None
    if t is float:
        if isinstance(value, bool):
            raise ValueError(f"must be a number (got {value!r})")
        try:
            return float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
        except ValueError:
            raise ValueError(f"must be a number such as 5e-5 (got {value!r})") from None
    if t is str:
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            raise ValueError(f"must be text (got {value!r})")
        return str(value).strip()
    if _is_list(t):
        (item,) = typing.get_args(t)
        if value is None:
            return []
        if isinstance(value, str):
            value = [v for v in (p.strip() for p in value.split(",")) if v]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"must be a list or comma-separated text (got {value!r})")
        if item is int:
            try:
                return [int(v) for v in value]
            except (TypeError, ValueError):
                raise ValueError(f"must be whole numbers separated by commas (got {value!r})") from None
        return [str(v).strip() for v in value if str(v).strip()]
    if typing.get_origin(t) is dict:
        if value is None or value == "":
            return {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"must be a JSON object such as {{\"optim\": \"adamw_torch\"}} ({e.msg})") from None
        if not isinstance(value, dict):
            raise ValueError(f"must be a mapping of argument names to values (got {value!r})")
        return dict(value)
    raise TypeError(f"unhandled type {t} for {name}")  # pragma: no cover - a schema bug


def from_dict(data: dict[str, Any]) -> JobSpec:
    """Build a spec from a mapping, converting types; unknown keys are errors."""
    problems: dict[str, str] = {}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in FIELDS:
            close = [n for n in FIELDS if key.replace("-", "_") == n or key in n]
            hint = f"; did you mean {close[0]}?" if close else ""
            problems[key] = f"unknown option{hint}"
            continue
        try:
            values[key] = coerce(key, value)
        except ValueError as e:
            problems[key] = str(e)
    if problems:
        raise SpecError(problems)
    return JobSpec(**values)


def to_dict(spec: JobSpec) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def changed(spec: JobSpec) -> dict[str, Any]:
    """Fields whose value differs from the default, in schema order."""
    base = to_dict(JobSpec())
    return {k: v for k, v in to_dict(spec).items() if base[k] != v}


def load_yaml(path: str | Path) -> JobSpec:
    """Read a job file. Raises SpecError naming the file when it cannot be used."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError({"file": f"cannot read {p}: {e.strerror}"}) from None
    return loads_yaml(text, source=str(p))


def loads_yaml(text: str, source: str = "job") -> JobSpec:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError({"file": f"{source} is not valid YAML: {e}"}) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError({"file": f"{source} must hold a mapping of option: value"})
    return from_dict(data)


def dump_yaml(spec: JobSpec, full: bool = True) -> str:
    data = to_dict(spec) if full else changed(spec)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def sections() -> dict[str, list[str]]:
    """Field names grouped by form section, in schema order."""
    out: dict[str, list[str]] = {}
    for f in dataclasses.fields(JobSpec):
        out.setdefault(f.metadata["section"], []).append(f.name)
    return out


def help_text(name: str) -> str:
    return FIELDS[name].metadata["help"]


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
    problems: dict[str, str] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            problems[tok] = "unexpected argument (flags look like --name value)"
            i += 1
            continue
        key, eq, val = tok[2:].partition("=")
        if not eq:
            if i + 1 >= len(argv):
                problems[key] = "flag without a value"
                break
            val = argv[i + 1]
            i += 1
        data[key] = val
        i += 1
    if problems:
        raise SpecError(problems)
    return from_dict(data)
