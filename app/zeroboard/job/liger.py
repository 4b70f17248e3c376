"""Which of Liger's kernels a model type really gets, read from the installed liger_kernel's own source.

Transformers' Trainer calls ``_apply_liger_kernel_to_instance``, which looks the model type up in Liger's
``MODEL_TYPE_TO_APPLY_LIGER_FN`` and calls that ``apply_liger_kernel_to_*`` function with the Trainer's
``liger_kernel_config`` filtered to the parameters its signature has: a kernel the signature lacks is never
asked for, and one it has keeps its default unless the config sets it. A kernel whose branch raises (Granite's
``fused_linear_cross_entropy``: "not available for Granite models") is not available, whatever the default.

The source is parsed with :mod:`ast` (no import: the web server never imports torch, and Liger imports it), once
per file version. The planner, the trainer's log line and the run's events all take their answer from here.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SOURCE = "transformers/monkey_patch.py"  # inside the liger_kernel package
KERNELS = ("rms_norm", "swiglu", "geglu", "layer_norm", "rope", "fused_linear_cross_entropy", "cross_entropy")
# where to read Liger from instead of the installed package: a liger_kernel folder, its monkey_patch.py, or a wheel
# (the benchmarks plan the GPU machine's runs on a machine without Liger, from the wheel those runs installed)
SOURCE_ENV = "ZEROBOARD_LIGER_SOURCE"


@dataclass(frozen=True)
class Coverage:
    """What Liger replaces in one model type, for the config the trainer passes."""

    model_type: str
    kernels: tuple[str, ...]  # the kernels applied, in KERNELS order

    def has(self, kernel: str) -> bool:
        return kernel in self.kernels

    @property
    def norm(self) -> bool:
        return self.has("rms_norm")

    @property
    def mlp(self) -> bool:
        return self.has("swiglu") or self.has("geglu")

    @property
    def fused_loss(self) -> bool:
        return self.has("fused_linear_cross_entropy")


def source_text() -> tuple[str, str] | None:
    """(monkey_patch.py's text, where it came from), or None when Liger is neither installed nor pointed at."""
    where = os.environ.get(SOURCE_ENV, "")
    if where:
        p = Path(where)
        if p.suffix == ".whl":
            with zipfile.ZipFile(p) as z:
                return z.read(f"liger_kernel/{SOURCE}").decode("utf-8"), str(p)
        p = p / SOURCE if p.is_dir() else p
        return p.read_text(encoding="utf-8"), str(p)
    try:
        spec = importlib.util.find_spec("liger_kernel")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(next(iter(spec.submodule_search_locations))) / SOURCE
    return (p.read_text(encoding="utf-8"), str(p)) if p.is_file() else None


def _branch_raises(fn: ast.FunctionDef, name: str) -> bool:
    """Whether ``if <name>:`` in the function's body raises (the kernel exists in the signature but not for it)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == name:
            if any(isinstance(n, ast.Raise) for stmt in node.body for n in ast.walk(stmt)):
                return True
    return False


@lru_cache(maxsize=8)
def parse(text: str) -> dict[str, dict[str, tuple[bool, bool]]]:
    """model type -> {kernel parameter: (default, branch raises)} of its apply function."""
    tree = ast.parse(text)
    fns = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    table: dict[str, str] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "MODEL_TYPE_TO_APPLY_LIGER_FN" and isinstance(node.value, ast.Dict):
            for k, v in zip(node.value.keys, node.value.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Name):
                    table[str(k.value)] = v.id
    out: dict[str, dict[str, tuple[bool, bool]]] = {}
    for model_type, fn_name in table.items():
        fn = fns.get(fn_name)
        if fn is None:
            continue
        args = fn.args.args + fn.args.kwonlyargs
        defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + list(fn.args.defaults) + list(fn.args.kw_defaults)
        params = {}
        for a, d in zip(args, defaults):
            if a.arg in KERNELS:
                params[a.arg] = (bool(d.value) if isinstance(d, ast.Constant) else False, _branch_raises(fn, a.arg))
        out[model_type] = params
    return out


def patched_types() -> set[str] | None:
    """The model types the installed Liger patches (None: Liger is not there)."""
    src = source_text()
    return None if src is None else set(parse(src[0]))


def coverage(model_type: str, config: dict | None = None) -> Coverage | None:
    """The kernels ``model_type`` gets when the Trainer passes ``config`` as ``liger_kernel_config``; None when the
    installed Liger (or none) does not patch it."""
    src = source_text()
    if src is None:
        return None
    params = parse(src[0]).get(model_type)
    if params is None:
        return None
    config = config or {}
    on = [k for k in KERNELS if k in params and bool(config.get(k, params[k][0])) and not params[k][1]]
    return Coverage(model_type, tuple(on))


def trainer_config(model_type: str, stage3: bool, lora_on_head: bool) -> dict:
    """The ``liger_kernel_config`` ZeroBoard's trainer passes: the fused loss off where it cannot work (ZeRO-3
    shards lm_head, which the fused loss reads directly; a LoRA on lm_head would be skipped) or where this
    model type's function raises for it."""
    src = source_text()
    params = parse(src[0]).get(model_type, {}) if src else {}
    raises = params.get("fused_linear_cross_entropy", (False, False))[1]
    return {"fused_linear_cross_entropy": False} if stage3 or lora_on_head or raises else {}
