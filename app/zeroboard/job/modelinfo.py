"""Facts about a model and the installed libraries, without loading either.

The web server must stay light, so these read files: a model's config.json
and the safetensors header(s); transformers' TrainingArguments field names
are asked of transformers once, in a child process, and cached per version.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

from .. import files, safeload
from ..words import Msg, say
from ..workspace import cache_dir

HEADER_LIMIT = 100_000_000  # the safetensors format's own bound on its JSON header

# What a child process prints: TrainingArguments' fields, each with the kind of value it takes (and an enum's values),
# one JSON object.  Enum-typed arguments (optim, save_strategy, ...) are converted in TrainingArguments.__post_init__,
# which raises for a name it does not know -- in every rank, after the launch.
_ARG_FIELDS = """
import dataclasses, enum, json, typing
from transformers import TrainingArguments
hints = typing.get_type_hints(TrainingArguments)
out = {}
for f in dataclasses.fields(TrainingArguments):
    t = hints.get(f.name, f.type)
    args = [a for a in (typing.get_args(t) or (t,)) if a is not type(None)]
    enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
    plain = {a for a in args if a in (bool, int, float)}
    if enums:
        kind = {"kind": "enum", "choices": sorted(str(m.value) for e in enums for m in e)}
    elif plain and len(plain) == len(args):
        kind = {"kind": "float" if float in plain else "int" if int in plain and bool not in plain else "bool"}
        if plain == {bool}:
            kind = {"kind": "bool"}
    else:
        kind = {"kind": "any"}
    kind["optional"] = type(None) in (typing.get_args(t) or ())
    out[f.name] = kind
print(json.dumps(out))
"""


def installed(module: str) -> bool:
    """Whether a package can be imported here, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def safetensors_header(path: Path) -> dict:
    """A safetensors file's header: tensor name -> dtype, shape and offsets (plus ``__metadata__``)."""
    with safeload.open_binary(path) as fh:  # a FIFO named *.safetensors is refused, not waited on
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > HEADER_LIMIT:
            raise ValueError(n)  # not a safetensors file: read as having no names
        return json.loads(fh.read(n))


def safetensors_names(model_dir: Path) -> list[str] | None:
    """Tensor names from the safetensors header(s), or None when there are none (or they cannot be read)."""
    try:
        index = model_dir / "model.safetensors.index.json"
        if index.is_file():
            return list(safeload.json_text(safeload.read_text(index, safeload.CONFIG))["weight_map"])
        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            return None
        return [k for f in files for k in safetensors_header(f) if k != "__metadata__"]
    except (OSError, ValueError, KeyError, TypeError, struct.error):  # a damaged file: the checks that need names skip
        return None


def param_count(model_dir: Path) -> int | None:
    """Elements of every tensor the checkpoint stores (its parameters, a tied pair once), or None if unknown."""
    try:
        files = sorted(Path(model_dir).glob("*.safetensors"))
        total = 0
        for f in files:
            for k, v in safetensors_header(f).items():
                if k != "__metadata__":
                    total += math.prod(v["shape"])
        return total or None
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


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


def model_config(model_dir: Path | None) -> dict | None:
    try:
        cfg = safeload.json_text(safeload.read_text(model_dir / "config.json", safeload.CONFIG)) if model_dir else None
    except (OSError, ValueError):  # safeload.Refused is a ValueError: a config past the limits is no config
        return None
    return cfg if isinstance(cfg, dict) and size_problem(cfg) is None else None


# config.json's sizes, which the checks, the planner and the model's own code compute with: whole numbers, at most
# 2**31 (no layer, vocabulary or context of a model that exists comes near; a larger one is a typo or an attack --
# "hidden_size": 1e400 is infinity to JSON, and int(infinity) raised in the checks)
SIZE_KEYS = ("hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "num_layers", "num_attention_heads",
             "n_head", "num_key_value_heads", "num_kv_heads", "head_dim", "intermediate_size", "n_inner", "ffn_dim",
             "ffn_hidden_size", "vocab_size", "max_position_embeddings", "n_positions", "sliding_window",
             "max_window_layers")
MAX_SIZE = 1 << 31
TOKENIZER_CONFIG = safeload.Limits(max_bytes=32 << 20, max_nodes=10_000_000)  # added tokens can make it large


def size_problem(cfg: dict) -> tuple[str, object] | None:
    """The first size of a config (its text_config's too) that is no whole number from 0 to MAX_SIZE, as
    (key, value); None when all are."""
    for where, part in (("", cfg), ("text_config.", cfg.get("text_config"))):
        if not isinstance(part, dict):
            continue
        for key in SIZE_KEYS:
            v = part.get(key)
            if v is None:
                continue
            whole = isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
            if not whole or not 0 <= v <= MAX_SIZE:
                return where + key, v
    return None


def config_problem(model_dir: Path) -> Msg | None:
    """Why a model folder's config.json (and tokenizer_config.json, when there is one) cannot be used: a special
    file, past the limits, a key given twice, a number that is not finite, a size out of range, not JSON. None when
    both read well (a folder without config.json is the caller's to word)."""
    for name, limits in (("config.json", safeload.CONFIG), ("tokenizer_config.json", TOKENIZER_CONFIG)):
        path = Path(model_dir) / name
        if not path.exists() and safeload.special_kind(path) is None:
            continue
        try:
            cfg = safeload.json_text(safeload.read_text(path, limits), limits)
        except safeload.Refused as e:
            return say("check.config_unsafe", path=str(path), why=say(e.key, **e.values))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return say("plan.config_not_json", path=str(path), why=getattr(e, "strerror", None) or str(e)[:200])
        if not isinstance(cfg, dict):
            return say("plan.config_not_json", path=str(path), why=type(cfg).__name__)
        wrong = size_problem(cfg) if name == "config.json" else None
        if wrong is not None:
            return say("check.config_size", path=str(path), key=wrong[0], got=repr(wrong[1])[:40], limit=f"{MAX_SIZE:,}")
    return None


def model_type(model_dir: Path | None) -> str | None:
    cfg = model_config(model_dir)
    return cfg.get("model_type") if cfg else None


@functools.lru_cache(maxsize=1)
def training_arguments() -> dict[str, dict]:
    """transformers.TrainingArguments' fields and the kind of value each takes: asked of transformers once per
    version (in a child process: the web server never imports it), then read from a cache."""
    ver = version("transformers")
    if ver is None:
        return {}
    cache = cache_dir() / "library" / f"training_arguments-v2-{ver}.json"
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data:
            return data
    except (OSError, ValueError):
        pass
    try:
        done = subprocess.run([sys.executable, "-c", _ARG_FIELDS], capture_output=True, text=True, timeout=300)
        fields = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        fields = {}
    if fields:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            files.write_text_atomic(cache, json.dumps(fields))
        except OSError:  # a read-only or full cache: ask again next time
            pass
    return fields


def training_argument_names() -> frozenset[str]:
    return frozenset(training_arguments())


def argument_problem(name: str, value) -> tuple[str, dict] | None:
    """Why ``value`` cannot be given to TrainingArguments' ``name``, as (catalog key, values); None when it can."""
    kind = training_arguments().get(name)
    if kind is None or (value is None and kind.get("optional")):
        return None
    k = kind["kind"]
    if k == "enum" and str(value) not in kind["choices"]:
        return "check.extra_choice", {"key": name, "got": str(value)[:80], "options": ", ".join(kind["choices"])}
    if k == "bool" and not isinstance(value, bool):
        return "check.extra_type", {"key": name, "got": repr(value)[:80], "want": "true / false"}
    if k == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        return "check.extra_type", {"key": name, "got": repr(value)[:80], "want": "a whole number"}
    if k == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return "check.extra_type", {"key": name, "got": repr(value)[:80], "want": "a number"}
    return None
