"""A DeepSpeed JSON of one's own, checked by DeepSpeed's own config model before launch.

DeepSpeed reads its config when the engine starts, in every rank: ``"stage": 7`` failed on rank 0 with pydantic's
ValidationError, after the launch.  Here the file goes through DeepSpeed's own models first, in short child processes
(``python -m zeroboard.job.dscheck``): ``import deepspeed`` imports torch, which the web server never does.  Two:

1. the ``zero_optimization`` section, where most mistakes are, by DeepSpeed's ``DeepSpeedZeroConfig`` loaded from
   its own files with a stand-in for torch (its config modules import torch for one type annotation): 0.7 s here;
2. the whole file, by the very constructor the ranks run (``deepspeed.runtime.config.DeepSpeedConfig``), in a
   child that imports DeepSpeed for real, started beside the first and ended when that one refuses: 5-11 s on these
   2 shared cores (importing torch is most of it).

The values the Trainer fills in (``"auto"``, ``transformers.integrations.deepspeed``) get stand-ins first: the batch
sizes 1 (their agreement with the job is :func:`disagreements`' check, with the real world
size), the precision flags off, the bucket sizes DeepSpeed's defaults.  An ``"auto"`` the Trainer does not fill
stays, and DeepSpeed refuses it here as it would in the ranks.  Each answer is kept per content and DeepSpeed
version (``cache/library``): Preview asks once per file.  A child that cannot answer (no DeepSpeed, a timeout, a
DeepSpeed whose files moved) leaves a note, not a refusal.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from .. import files
from ..words import Msg, say
from . import modelinfo, placement

TIMEOUT_S = 60
_CACHE_FILE = "ds_checked-v1-{version}.json"
_LOCK = threading.Lock()
_SEEN: dict[str, str | None] = {}

# (path, stand-in) for what the Trainer fills when the file says "auto" (None: the key is dropped, DeepSpeed's default)
TRAINER_FILLS = (
    ("gradient_clipping", 1.0), ("fp16.enabled", False), ("bf16.enabled", False),
    ("optimizer.params.lr", 1e-3), ("optimizer.params.betas", [0.9, 0.999]), ("optimizer.params.eps", 1e-8),
    ("optimizer.params.weight_decay", 0.0), ("scheduler.params.warmup_min_lr", 0.0),
    ("scheduler.params.warmup_max_lr", 1e-3), ("scheduler.params.warmup_num_steps", 1),
    ("scheduler.params.total_num_steps", 100), ("zero_optimization.reduce_bucket_size", None),
    ("zero_optimization.stage3_prefetch_bucket_size", None), ("zero_optimization.stage3_param_persistence_threshold", None),
)
# one world of one sample: the file's own batch sizes are checked against the job, with its world size, apart
BATCH = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": 1}
# DeepSpeed's config models, as a user's file names their sections
SECTIONS = {"DeepSpeedZeroConfig": "zero_optimization", "DeepSpeedZeroOffloadParamConfig": "zero_optimization.offload_param",
            "DeepSpeedZeroOffloadOptimizerConfig": "zero_optimization.offload_optimizer"}


def stand_ins(cfg: dict) -> dict:
    """The config as the ranks' DeepSpeedConfig will see it, with stand-ins where the Trainer fills "auto"."""
    out = {**copy.deepcopy(cfg), **BATCH}
    for path, value in TRAINER_FILLS:
        *parents, key = path.split(".")
        here = out
        for p in parents:
            here = here.get(p) if isinstance(here, dict) else None
        if isinstance(here, dict) and here.get(key) == "auto":
            if value is None:
                del here[key]
            else:
                here[key] = value
    return out


def check(cfg: dict) -> tuple[str | None, Msg | None]:
    """(why DeepSpeed refuses ``cfg``, in its own words, or None; a note when it could not be asked, or None)."""
    version = modelinfo.version("deepspeed")
    if version is None:
        return None, say("check.ds_unchecked", why=say("check.ds_not_installed"))
    text = json.dumps(stand_ins(cfg), sort_keys=True)
    key = hashlib.sha256(f"{version}\n{text}".encode()).hexdigest()
    cache = placement.cache_dir() / "library" / _CACHE_FILE.format(version=version)
    with _LOCK:
        if key in _SEEN:
            return _why(_SEEN[key])
        known = _read(cache)
        if key in known:
            _SEEN[key] = known[key]
            return _why(known[key])
    answer = _ask(text)
    if not answer.get("asked"):
        return None, say("check.ds_unchecked", why=answer.get("error") or say("check.ds_timeout", seconds=TIMEOUT_S))
    with _LOCK:
        _SEEN[key] = answer["why"]
        known = _read(cache)
        known[key] = answer["why"]
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            files.write_text_atomic(cache, json.dumps(known) + "\n")
        except OSError:  # a read-only cache: asked again next time
            pass
    return _why(answer["why"])


def _ask(text: str) -> dict:
    """DeepSpeed's answer: the ZeRO section's, or the whole file's when that one passes. Both children start at once
    (the whole file's import of torch is most of the time); the second is ended when the first refuses."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}  # no device is probed for a config
    with tempfile.TemporaryDirectory(prefix="zb-dscheck-") as tmp:
        path = os.path.join(tmp, "ds.json")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        procs = []
        try:
            for flags in (["--zero"], []):
                procs.append(subprocess.Popen([sys.executable, "-m", __name__, path, *flags], stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env))
            deadline = time.monotonic() + TIMEOUT_S
            answer: dict = {}
            for proc in procs:
                answer = _answer(proc, deadline)
                if answer.get("why") is not None:  # refused: the other child's word is not needed
                    break
            return answer
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()


def _answer(proc: subprocess.Popen, deadline: float) -> dict:
    try:
        out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        return json.loads(out.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"asked": False, "error": say("check.ds_timeout", seconds=TIMEOUT_S)}
    except (ValueError, IndexError) as e:
        return {"asked": False, "error": f"{type(e).__name__}: {e}"[:300]}


def _why(why: str | None) -> tuple[str | None, None]:
    return why, None


def _read(cache) -> dict:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def explain(e: Exception) -> str:
    """A refusal of DeepSpeed's as one line: pydantic's errors by section and key, else the exception's text."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        section = SECTIONS.get(getattr(e, "title", ""), getattr(e, "title", ""))
        parts = []
        for err in errors()[:3]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            where = ".".join(p for p in (section, loc) if p)
            parts.append(f"{where}: {err.get('msg')} (got {json.dumps(err.get('input'), default=str)[:60]})")
        return "; ".join(parts)
    return f"{type(e).__name__}: {str(e).strip()[:300] or '-'}"


def _zero_model():
    """DeepSpeed's own DeepSpeedZeroConfig, loaded from its files without torch: its package's ``__init__`` and
    ``deepspeed.utils`` (both import torch) are stood in for, and torch by a module holding the one name the config
    modules use. Only ever in this child process."""
    import importlib.util
    import logging
    import types

    found = importlib.util.find_spec("deepspeed")
    if found is None or not found.submodule_search_locations:
        raise ImportError("deepspeed")
    root = found.submodule_search_locations[0]
    torch = types.ModuleType("torch")
    torch.dtype = type("dtype", (), {})
    sys.modules["torch"] = torch
    for name in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.zero", "deepspeed.runtime.zenflow"):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(root, *name.split(".")[1:])]
        sys.modules[name] = package
    utils = types.ModuleType("deepspeed.utils")
    utils.logger = logging.getLogger("deepspeed")
    sys.modules["deepspeed.utils"] = utils
    from deepspeed.runtime.zero.config import get_zero_config

    return get_zero_config

def disagreements(spec, where: placement.Placement) -> list[str]:
    """Values a DeepSpeed file of one's own fixes that the job sets otherwise ("auto" agrees with anything).

    The Trainer fills "auto" from the job and refuses a number that differs, after the ranks started; the batch
    identity train_batch_size = micro-batch x accumulation x world size is DeepSpeed's own check.
    """
    cfg = where.ds_config or {}
    mbs, gas = spec.per_device_train_batch_size, spec.gradient_accumulation_steps
    wanted = {"train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": gas,
              "train_batch_size": mbs * gas * where.world_size, "gradient_clipping": spec.max_grad_norm}
    out = []
    for key, want in wanted.items():
        have = cfg.get(key, "auto")
        if have != "auto" and not _same(have, want):
            out.append(f"{key} {have} ≠ {want}")
    for half in ("fp16", "bf16"):
        enabled = (cfg.get(half) or {}).get("enabled", "auto") if isinstance(cfg.get(half), dict) else "auto"
        if enabled != "auto" and bool(enabled) != (where.precision == half):
            out.append(f"{half}.enabled {str(enabled).lower()} ≠ precision {where.precision}")
    params = ((cfg.get("optimizer") or {}).get("params") or {}) if isinstance(cfg.get("optimizer"), dict) else {}
    for key, want in (("lr", spec.learning_rate), ("weight_decay", spec.weight_decay)):
        if params.get(key, "auto") != "auto" and not _same(params[key], want):
            out.append(f"optimizer.params.{key} {params[key]} ≠ {want}")
    return out


def _same(have, want) -> bool:
    try:
        return abs(float(have) - float(want)) <= 1e-12 * max(1.0, abs(float(want)))
    except (TypeError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    """``python -m zeroboard.job.dscheck CONFIG.json [--zero]``: one JSON line, {"asked", "why"}."""
    args = sys.argv[1:] if argv is None else argv
    zero_only = "--zero" in args
    with open(next(a for a in args if not a.startswith("--")), encoding="utf-8") as fh:
        cfg = json.load(fh)
    try:
        if zero_only:
            get_zero_config = _zero_model()
            check = lambda: get_zero_config(cfg)  # noqa: E731
        else:
            from deepspeed.runtime.config import DeepSpeedConfig

            check = lambda: DeepSpeedConfig(cfg)  # noqa: E731
    except Exception as e:  # no DeepSpeed, or one that does not load this way: not asked
        print(json.dumps({"asked": False, "why": None, "error": f"{type(e).__name__}: {e}"[:300]}))
        return 0
    try:
        check()
    except Exception as e:  # pydantic's ValidationError, DeepSpeed's asserts and ValueErrors: its own refusal
        print(json.dumps({"asked": True, "why": explain(e)}))
        return 0
    print(json.dumps({"asked": True, "why": None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
