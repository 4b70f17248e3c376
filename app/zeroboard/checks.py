"""Validation before launch: every problem at once, each naming its field and the fix.

Light on purpose (no torch, no transformers): model facts come from
``config.json`` and the safetensors header, TrainingArguments' field names from
the transformers source file, read as text.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from . import datasets, devices
from .spec import DEMO_DATA_DIR, DEMO_MODEL, JobSpec

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
RESULT_FILE = "zeroboard_result.json"

# TrainingArguments that ZeroBoard sets from its own fields: the job field to use instead.
OWNED_ARGS = {
    "output_dir": "output_dir", "deepspeed": "deepspeed", "learning_rate": "learning_rate",
    "num_train_epochs": "num_train_epochs", "max_steps": "max_steps", "lr_scheduler_type": "lr_scheduler_type",
    "warmup_steps": "warmup_steps", "per_device_train_batch_size": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps", "max_grad_norm": "max_grad_norm",
    "weight_decay": "weight_decay", "bf16": "precision", "fp16": "precision",
    "gradient_checkpointing": "gradient_checkpointing", "logging_steps": "logging_steps",
    "save_steps": "save_steps", "seed": "seed", "use_cpu": "device_type", "use_liger_kernel": "liger_kernel",
    "liger_kernel_config": "liger_kernel",
}

# model types Liger patches (liger-kernel 0.8); the trainer asks Liger itself, this list serves checks and the planner
LIGER_MODEL_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text", "phi3",
                     "granite", "olmo2", "glm4", "smollm3"}
# models with recurrent (state-space or linear-attention) layers: their state would run across packed samples
RECURRENT_MODEL_TYPES = {"mamba", "mamba2", "falcon_mamba", "jamba", "zamba", "zamba2", "bamba", "granitemoehybrid",
                         "qwen3_next", "lfm2", "falcon_h1", "nemotron_h", "rwkv", "recurrent_gemma", "minimax"}


@dataclass
class Report:
    errors: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def text(self) -> str:
        lines = [f"error  {k}: {v}" for k, v in self.errors.items()]
        lines += [f"note   {k}: {v}" for k, v in self.warnings.items()]
        return "\n".join(lines)


def is_demo_model(path: str) -> bool:
    return Path(path).resolve() == Path(DEMO_MODEL).resolve()


def is_demo_data(path: str) -> bool:
    return Path(path).resolve() == Path(DEMO_DATA_DIR).resolve()


# --- model facts without loading weights ---------------------------------------

def safetensors_header(path: Path) -> dict:
    """A safetensors file's header: tensor name -> dtype, shape and offsets (plus ``__metadata__``)."""
    with Path(path).open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(n))


def safetensors_names(model_dir: Path) -> list[str] | None:
    """Tensor names from the safetensors header(s), or None when there are none."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return list(json.loads(index.read_text())["weight_map"])
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    return [k for f in files for k in safetensors_header(f) if k != "__metadata__"]


def linear_module_names(model_dir: Path) -> set[str] | None:
    """Leaf names of 2-D weight matrices (the LoRA-able layers), or None if unknown."""
    names = safetensors_names(model_dir)
    if names is None:
        return None
    leaves = set()
    for n in names:
        parts = n.split(".")
        if parts[-1] == "weight" and len(parts) >= 2 and "embed" not in parts[-2] and "norm" not in parts[-2]:
            leaves.add(parts[-2])
    return leaves - {"lm_head"}


@functools.lru_cache(maxsize=1)
def training_argument_names() -> frozenset[str]:
    """Field names of transformers.TrainingArguments, read from its source without importing it."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    src = Path(list(spec.submodule_search_locations)[0]) / "training_args.py"
    tree = ast.parse(src.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TrainingArguments":
            return frozenset(s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
    return frozenset()


def finished_marks(output_dir: Path) -> list[str]:
    """What in output_dir shows an earlier run: a result file or checkpoints."""
    if not output_dir.is_dir():
        return []
    marks = sorted(p.name for p in output_dir.glob("checkpoint-*") if p.is_dir())
    if (output_dir / RESULT_FILE).is_file():
        marks.insert(0, RESULT_FILE)
    return marks


def free_dir_name(output_dir: Path) -> Path:
    i = 2
    while (candidate := output_dir.with_name(f"{output_dir.name}-{i}")).exists():
        i += 1
    return candidate


# --- the checks ----------------------------------------------------------------

def _check_model(spec: JobSpec, r: Report) -> Path | None:
    m = spec.model_name_or_path
    if not m:
        r.errors["model_name_or_path"] = "is empty; give a model folder (with config.json) or a hub id"
        return None
    p = Path(m).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            r.errors["model_name_or_path"] = f"{m} has no config.json; point to the folder that holds the model's config.json"
            return None
        return p
    if is_demo_model(m):
        r.warnings["model_name_or_path"] = "the demo model will be built on first use (a few seconds)"
        return None
    if p.exists():
        r.errors["model_name_or_path"] = f"{m} is a file; point to the model folder that holds config.json"
    elif HUB_ID.match(m) and not m.startswith((".", "/", "~")):
        r.warnings["model_name_or_path"] = f"{m} is not a local folder; the trainer will fetch it as a hub id"
    else:
        r.errors["model_name_or_path"] = f"folder {m} not found; check the path or use a hub id like org/name"
    return None


def _check_data(spec: JobSpec, r: Report) -> None:
    if not spec.dataset:
        r.errors["dataset"] = "no dataset chosen; pick at least one"
        return
    if is_demo_data(spec.dataset_dir):
        from .demo import write_demo_data

        write_demo_data(spec.dataset_dir)
    for name in spec.dataset:
        try:
            src = datasets.resolve(name, spec.dataset_dir)
            datasets.to_conversations(src, datasets.read_records(src.path))
        except datasets.DataError as e:
            r.errors["dataset"] = str(e)
            return


def _check_numbers(spec: JobSpec, r: Report) -> None:
    e = r.errors
    if not 0 < spec.learning_rate < 1:
        e["learning_rate"] = f"{spec.learning_rate} is out of range; use a small positive number such as 5e-5"
    if spec.max_steps < 0:
        e["max_steps"] = "must be 0 (use epochs) or a positive number of steps"
    elif spec.max_steps == 0 and spec.num_train_epochs <= 0:
        e["num_train_epochs"] = "must be above 0 when max_steps is 0"
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps", "lora_rank", "lora_alpha"):
        if getattr(spec, name) < 1:
            e[name] = f"must be at least 1 (got {getattr(spec, name)})"
    for name in ("save_steps", "max_samples", "warmup_steps", "max_grad_norm", "weight_decay"):
        if getattr(spec, name) < 0:
            e[name] = f"must not be negative (got {getattr(spec, name)})"
    if not 8 <= spec.cutoff_len <= 1_048_576:
        e["cutoff_len"] = f"must be between 8 and 1048576 tokens (got {spec.cutoff_len})"
    if not 0 <= spec.lora_dropout < 1:
        e["lora_dropout"] = f"must be in [0, 1) (got {spec.lora_dropout})"


def _check_lora(spec: JobSpec, model_dir: Path | None, r: Report) -> None:
    if spec.finetuning_type != "lora":
        return
    targets = spec.lora_target
    if not targets:
        r.errors["lora_target"] = "is empty; use all, or module names such as q_proj,v_proj"
        return
    if "all" in targets:
        if len(targets) > 1:
            r.errors["lora_target"] = "use either all or a list of module names, not both"
        return
    if model_dir is None:
        return
    known = linear_module_names(model_dir)
    if known is None:
        r.warnings["lora_target"] = "cannot list this model's layers (no safetensors); targets are checked at start"
        return
    unknown = [t for t in targets if t not in known]
    if unknown:
        r.errors["lora_target"] = (f"{', '.join(unknown)} not found in the model; "
                                   f"its linear layers are: {', '.join(sorted(known))} (or use all)")


def _check_output(spec: JobSpec, r: Report) -> None:
    if not spec.output_dir:
        r.errors["output_dir"] = "is empty; give a folder for this run"
        return
    out = Path(spec.output_dir)
    if out.exists() and not out.is_dir():
        r.errors["output_dir"] = f"{out} is a file; choose a folder name"
        return
    marks = finished_marks(out)
    has_ckpt = any(m.startswith("checkpoint-") for m in marks)
    if spec.resume:
        if not has_ckpt:
            r.errors["resume"] = f"{out} holds no checkpoint-* to resume from; untick resume or pick the run's folder"
    elif marks:
        r.errors["output_dir"] = (f"{out} already holds an earlier run ({', '.join(marks[:3])}); "
                                  f"tick resume to continue it, or use a new folder such as {free_dir_name(out)}")


def _check_devices(spec: JobSpec, gpus: list[devices.Gpu], r: Report) -> None:
    use_gpu = spec.device_type == "cuda" or (spec.device_type == "auto" and gpus)
    if spec.device_type == "cuda" and not gpus:
        r.errors["device_type"] = "no NVIDIA GPU found (NVML sees none); choose cpu or auto"
        return
    if use_gpu:
        have = [g.index for g in gpus]
        wrong = [i for i in spec.gpu_ids if i not in have]
        if wrong:
            r.errors["gpu_ids"] = f"GPU {', '.join(map(str, wrong))} does not exist; this machine has GPU {', '.join(map(str, have))}"
        elif len(set(spec.gpu_ids)) != len(spec.gpu_ids):
            r.errors["gpu_ids"] = "lists a GPU twice; give each index once"
        if spec.precision == "bf16":
            chosen = [g for g in gpus if g.index in (spec.gpu_ids or have)]
            old = [g.index for g in chosen if not g.supports_bf16]
            if old:
                r.errors["precision"] = f"GPU {old} cannot do bf16 (needs compute capability 8.0+); use fp16 or auto"
    else:
        cores = devices.cpu_count()
        if spec.num_processes < 1:
            r.errors["num_processes"] = "must be at least 1"
        elif spec.num_processes > cores:
            r.errors["num_processes"] = f"{spec.num_processes} processes but this machine has {cores} CPU cores; use at most {cores}"
        if spec.precision == "fp16":
            r.errors["precision"] = "fp16 training needs a GPU; use fp32 or bf16 on CPU (or auto)"
        if spec.gpu_ids:
            r.warnings["gpu_ids"] = "ignored: no GPU is used (CPU processes)"


def _check_nodes(spec: JobSpec, r: Report) -> None:
    if spec.num_nodes < 1:
        r.errors["num_nodes"] = "must be at least 1"
    elif not 0 <= spec.node_rank < spec.num_nodes:
        r.errors["node_rank"] = f"must be between 0 and {spec.num_nodes - 1} (num_nodes - 1)"
    if spec.num_nodes > 1:
        if spec.launcher != "torchrun":
            r.errors["launcher"] = "several nodes are started with torchrun here; choose torchrun (or use deepspeed's hostfile yourself)"
        if spec.master_port == 0:
            r.errors["master_port"] = "with several nodes every node must use the same port; give one, e.g. 29500"
    if not 0 <= spec.master_port <= 65535:
        r.errors["master_port"] = "must be a TCP port between 1 and 65535 (or 0 to pick one)"


def _check_deepspeed(spec: JobSpec, r: Report) -> None:
    if spec.offload and spec.deepspeed_stage == "none" and not spec.deepspeed:
        r.errors["offload"] = "needs DeepSpeed stage 2 or 3; choose a stage or untick offload"
    if not spec.deepspeed:
        return
    p = Path(spec.deepspeed)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except OSError:
        r.errors["deepspeed"] = f"{p} cannot be read; check the path or leave it empty to use a preset"
        return
    except ValueError as e:
        r.errors["deepspeed"] = f"{p} is not valid JSON ({e}); fix it or leave the field empty"
        return
    if not isinstance(cfg, dict):
        r.errors["deepspeed"] = f"{p} must hold a JSON object"
        return
    own_stage = str((cfg.get("zero_optimization") or {}).get("stage", 0))
    if spec.deepspeed_stage != "none" and spec.deepspeed_stage != own_stage:
        r.errors["deepspeed_stage"] = (f"is {spec.deepspeed_stage} but {p.name} sets stage {own_stage}; "
                                       "set the stage to none to use your file as it is, or clear the file")


def installed(module: str) -> bool:
    """Whether a package can be imported here, without importing it (the web server stays light)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _model_type(model_dir: Path | None) -> str | None:
    try:
        return json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("model_type") if model_dir else None
    except (OSError, ValueError, AttributeError):
        return None


def _check_speed(spec: JobSpec, gpus: list[devices.Gpu], model_dir: Path | None, r: Report) -> None:
    use_gpu = spec.device_type == "cuda" or (spec.device_type == "auto" and bool(gpus))
    chosen = [g for g in gpus if g.index in (spec.gpu_ids or [g.index for g in gpus])] if use_gpu else []
    model_type = _model_type(model_dir)
    if spec.liger_kernel == "on":
        if not use_gpu:
            r.errors["liger_kernel"] = "Liger's Triton kernels need an NVIDIA GPU; choose auto or off for CPU runs"
        elif not installed("liger_kernel"):
            r.errors["liger_kernel"] = "liger-kernel is not installed; pip install liger-kernel (or zeroboard[gpu]), or choose auto"
        elif model_type and model_type not in LIGER_MODEL_TYPES:
            r.errors["liger_kernel"] = f"Liger has no kernels for model type {model_type}; choose auto or off"
    if spec.attn_implementation == "flash_attention_2":
        old = [g.index for g in chosen if g.compute_capability < (8, 0)]
        if not use_gpu:
            r.errors["attn_implementation"] = "flash_attention_2 needs an NVIDIA GPU; choose auto or sdpa"
        elif not installed("flash_attn"):
            r.errors["attn_implementation"] = "the flash-attn package is not installed; pip install flash-attn, or choose auto"
        elif old:
            r.errors["attn_implementation"] = f"flash_attention_2 needs compute capability 8.0+, GPU {old} has less; choose auto"
        elif spec.precision == "fp32":
            r.errors["attn_implementation"] = "flash_attention_2 runs in bf16 or fp16 only; set Compute type to auto or bf16"
        elif spec.packing and spec.per_device_train_batch_size > 1:
            r.errors["attn_implementation"] = ("flash_attention_2 finds packed samples' boundaries only in a batch of one row; "
                                               "set Batch size to 1 (and raise cutoff_len) or choose auto")
    if spec.packing and model_type in RECURRENT_MODEL_TYPES:
        r.errors["packing"] = (f"{model_type} has recurrent layers whose state would run from one packed sample "
                               "into the next; untick packing")
    if spec.pure_bf16:
        if spec.deepspeed_stage != "none" or spec.deepspeed:
            r.errors["pure_bf16"] = ("DeepSpeed keeps its own fp32 master weights; untick pure_bf16 "
                                     "or set DeepSpeed stage to none and clear the DeepSpeed file")
        elif spec.precision in ("fp16", "fp32") or (spec.precision == "auto" and not use_gpu):
            r.errors["pure_bf16"] = "needs bf16 compute; set Compute type to bf16 (auto means fp32 on CPU)"
        elif spec.precision == "auto" and any(not g.supports_bf16 for g in chosen):
            r.errors["pure_bf16"] = (f"GPU {[g.index for g in chosen if not g.supports_bf16]} cannot do bf16 (auto means fp16 "
                                     "there); untick pure_bf16")


def _check_extra(spec: JobSpec, r: Report) -> None:
    known = training_argument_names()
    for key in spec.extra_args:
        if key in OWNED_ARGS:
            r.errors["extra_args"] = f"{key} is set by the job field {OWNED_ARGS[key]}; set it there"
        elif known and key not in known:
            r.errors["extra_args"] = f"{key} is not a transformers TrainingArguments option; check its spelling"


def validate(spec: JobSpec, gpus: list[devices.Gpu] | None = None) -> Report:
    """Check a job; ``gpus`` defaults to what NVML sees now."""
    r = Report()
    model_dir = _check_model(spec, r)
    _check_data(spec, r)
    _check_numbers(spec, r)
    _check_lora(spec, model_dir, r)
    _check_output(spec, r)
    gpus = devices.detect_gpus() if gpus is None else gpus
    _check_devices(spec, gpus, r)
    _check_nodes(spec, r)
    _check_deepspeed(spec, r)
    _check_speed(spec, gpus, model_dir, r)
    _check_extra(spec, r)
    return r

