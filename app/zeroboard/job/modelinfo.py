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
import struct
import subprocess
import sys
from pathlib import Path

from . import placement

# What a child process prints: TrainingArguments' field names, one JSON list.
_ARG_NAMES = ("import dataclasses, json; from transformers import TrainingArguments; "
              "print(json.dumps(sorted(f.name for f in dataclasses.fields(TrainingArguments))))")


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


def model_config(model_dir: Path | None) -> dict | None:
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8")) if model_dir else None
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def model_type(model_dir: Path | None) -> str | None:
    cfg = model_config(model_dir)
    return cfg.get("model_type") if cfg else None


@functools.lru_cache(maxsize=1)
def training_argument_names() -> frozenset[str]:
    """Field names of transformers.TrainingArguments: asked of transformers once per version, then read from a cache."""
    ver = version("transformers")
    if ver is None:
        return frozenset()
    cache = placement.cache_dir() / "library" / f"training_arguments-{ver}.json"
    try:
        return frozenset(json.loads(cache.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    try:
        done = subprocess.run([sys.executable, "-c", _ARG_NAMES], capture_output=True, text=True, timeout=300)
        names = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else []
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        names = []
    if names:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(names), encoding="utf-8")
        except OSError:  # a read-only or full cache: ask again next time
            pass
    return frozenset(names)
