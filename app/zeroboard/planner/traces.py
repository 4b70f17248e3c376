"""Plans for any causal LM transformers can build: its own code traced in a child process, the result kept on disk.

Pure Python (no torch): the web server plans from here. A model type the planner does not derive by hand
(:class:`~.shapes.Untraced`) is planned from a trace of its own class (:mod:`.tracer`, which runs in a child
process: it imports torch and transformers). The trace is kept in the workspace's cache
(``cache/plan-traces/``), one file per config.json, LoRA targets and transformers version, with an entry per
mode the job's settings need (:mod:`.traced`); later plans read it instantly. How a caller waits for a trace
(``policy``):

- ``"cache"``: only what is kept (the launch's verdict and plan.json: a job never waits for a trace);
- ``"start"``: a missing trace is started in the background and :class:`Tracing` raised (the page says
  "tracing…" and redraws when it is done);
- ``"wait"``: the child runs now, up to ``timeout`` seconds (the command line).

A model that cannot be traced (custom code, a failure on meta tensors, not a decoder) is refused with the reason,
kept too; the job may still start, unplanned, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from .. import files
from ..data import media
from ..job import placement
from ..job.checks import EAGER_ONLY_MODEL_TYPES
from ..job.placement import offloads_parameters
from ..words import Msg, from_json, say
from . import traced
from .memory import Setup, act_mode, with_liger
from .shapes import DTYPE_BYTES, Linear, ModelShape, PlanError, _get

FOLDER = "plan-traces"
TRACER_VERSION = 1  # part of every kept trace's name: a tracer that counts differently traces again
TIMEOUT_S = 600  # the tracer's child: a 70 B config takes well under a minute on two cores
SETTINGS = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]
_running: dict[str, subprocess.Popen] = {}  # cache file -> the child tracing it (the web server's)
_lock = threading.Lock()


class Tracing(PlanError):
    """The model's trace is running: the plan comes when it is done."""


class NotTraced(PlanError):
    """The model has no trace for these settings yet (policy "cache")."""


def transformers_version() -> str:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return ""


def cache_file(cfg: dict, targets: list[str]) -> Path:
    """Where the trace of ``cfg`` with these LoRA targets is kept, for the installed transformers and this tracer."""
    keep = {k: v for k, v in cfg.items() if k not in ("_name_or_path", "transformers_version", "architectures")}
    text = json.dumps([keep, sorted(targets), transformers_version(), TRACER_VERSION], sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return placement.cache_dir() / FOLDER / f"{cfg.get('model_type', 'model')}-{digest}.json"


def read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if data.get("transformers") == transformers_version() else {}


# --- the shape before and after the trace ------------------------------------------------------------------------

def stub(cfg: dict) -> ModelShape:
    """What config.json alone says of an untraced model (enough to settle the job's setting); ``traced`` empty."""
    whole = cfg  # a vision-language model is traced whole (its text config has no causal-LM class of its own)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
    mt = str(cfg.get("model_type") or "")
    h = int(_get(cfg, "hidden_size", "n_embd", "d_model", "dim", default=0) or 0)
    layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers", default=0) or 0)
    heads = int(_get(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads", default=1) or 1)
    vocab = int(_get(cfg, "vocab_size", "padded_vocab_size", default=0) or 0)
    if not (h and vocab):  # the layers the census counts (a hybrid's may be named otherwise)
        raise PlanError(say("plan.config_incomplete", model_type=mt))
    layers = layers or 1
    kv = int(_get(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num", default=heads) or heads)
    hd = int(_get(cfg, "head_dim", "kv_channels", default=h // heads) or h // heads)
    inter = int(_get(cfg, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", "moe_intermediate_size",
                     default=4 * h) or 4 * h)
    return ModelShape(mt, h, layers, heads, kv, hd, inter, vocab, bool(cfg.get("tie_word_embeddings", True)), False,
                      False, (Linear("proj", "in_attn", h, h, False),), eager_default=mt in EAGER_ONLY_MODEL_TYPES,
                      final_softcap=bool(cfg.get("final_logit_softcapping")),
                      config=whole if whole.get("model_type") in media.VISION_TYPES else cfg, traced={})


def traced_shape(base: ModelShape, data: dict) -> ModelShape:
    """The stub completed with the trace: the census's parameters and the fitted modes."""
    c = data["census"]
    lins = tuple(Linear(n, "in_attn", i, o, b) for n, i, o, b in c["lora_linears"]) or base.linears
    dtype = str(_get(base.config, "dtype", "torch_dtype", default="float32")).replace("torch.", "")
    shape = replace(base, layers=c["layers"], tied=c["tied"], linears=lins, census=c, traced=data["modes"],
                    sliding_window=c.get("sliding_window", 0),
                    sliding_layers=sum(c["kind_sliding"][k] for k in c["kinds"]))
    return replace(shape, checkpoint_bytes=shape.checkpoint_bytes or c["params"] * DTYPE_BYTES.get(dtype, 4))


def wanted(shape: ModelShape, s: Setup) -> dict[str, dict]:
    """Every mode the plan, its advice and ``--fit`` ask of this job (stages, offload, micro-batches that keep its
    per-device batch, masked or not): key -> what the tracer plays."""
    from .search import micro_batches

    per_device = s.micro_batch * s.accumulation
    stages = SETTINGS if s.device == "cuda" else [(s.stage, s.offload_optimizer)]
    out = {}
    for stage, off in stages:
        for mb in sorted(set(micro_batches(per_device)) | {s.micro_batch}):
            x = replace(s, stage=stage, offload_optimizer=off, offload_param=offloads_parameters(stage, off),
                        micro_batch=mb, accumulation=max(1, per_device // mb))
            for masked in (False, True):
                m = act_mode(with_liger(shape, replace(x, masked=masked)))
                out[traced.mode_key(m, s.lora_rank, list(s.lora_target))] = traced.mode_request(
                    m, s.lora_rank, list(s.lora_target), s.pure_bf16 and not x.deepspeed)
    return out


def complete(shape: ModelShape, s: Setup, policy: str = "cache", timeout: float = TIMEOUT_S) -> ModelShape:
    """``shape`` (a :func:`stub`) with its trace, by ``policy`` (module notes). Raises PlanError (Tracing while a
    trace runs)."""
    modes = wanted(shape, s)
    if shape.census and all(k in shape.traced for k in modes):  # traced already (a model handed in)
        return shape
    targets = list(s.lora_target) if s.finetuning == "lora" else ["all"]
    path = cache_file(shape.config, targets)
    data = read(path)
    if data.get("error") and not (data.get("transient") and policy == "wait"):  # a crash is tried again on request
        raise PlanError(say("plan.untraceable", model_type=repr(shape.model_type), why=from_json(data["error"])))
    missing = {k: v for k, v in modes.items() if k not in data.get("modes", {})}
    if not missing and data.get("census"):
        return traced_shape(shape, data)
    if policy == "cache":
        raise NotTraced(say("plan.not_traced", model_type=repr(shape.model_type)))
    request = {"config": shape.config, "targets": targets, "modes": missing}
    if policy == "start":
        start(path, request, timeout)
        raise Tracing(say("plan.tracing", model_type=repr(shape.model_type)))
    run(path, request, timeout)
    return complete(shape, s, "cache")


# --- the child ---------------------------------------------------------------------------------------------------

def _command(req: Path, out: Path) -> tuple[list[str], dict]:
    app = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([app, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return [sys.executable, "-m", "zeroboard.planner.tracer", str(req), str(out)], env


def _files(request: dict) -> tuple[Path, Path]:
    folder = Path(tempfile.mkdtemp(prefix="zb-trace-"))
    (folder / "request.json").write_text(json.dumps(request), encoding="utf-8")
    return folder / "request.json", folder / "result.json"


def merge(path: Path, result: dict) -> None:
    """Add a child's result to the kept trace (the one writer of these files)."""
    data = read(path)
    data["transformers"] = result.get("transformers") or transformers_version()
    if result.get("error"):
        data = {"transformers": data["transformers"], "error": result["error"], "transient": result.get("transient", False)}
    else:
        data["census"] = result["census"]
        data.setdefault("modes", {}).update(result["modes"])
        data["traced_layers"] = result.get("traced_layers")
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_text_atomic(path, json.dumps(data) + "\n")


def _finish(path: Path, out: Path, code: int | None, err: str) -> None:
    try:
        result = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        why = say("plan.trace_timeout", s=TIMEOUT_S) if code is None else (err.strip().splitlines() or [str(code)])[-1]
        raise PlanError(say("plan.trace_failed", why=why[:300])) from None
    merge(path, result)


def run(path: Path, request: dict, timeout: float) -> None:
    """Trace now, waiting up to ``timeout`` seconds."""
    req, out = _files(request)
    argv, env = _command(req, out)
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        code, err = done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        code, err = None, ""
    _finish(path, out, code, err)


def start(path: Path, request: dict, timeout: float) -> None:
    """Trace in the background (once per cache file at a time); a thread waits for it and keeps the result."""
    with _lock:
        child = _running.get(str(path))
        if child is not None and child.poll() is None:
            return
        req, out = _files(request)
        argv, env = _command(req, out)
        child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        _running[str(path)] = child

    def wait():
        t0 = time.monotonic()
        try:
            _, err = child.communicate(timeout=timeout)
            code = child.returncode
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            code, err = None, ""
        try:
            _finish(path, out, code, err)
        except PlanError as e:  # kept: the page says why instead of tracing again on every change; `zeroboard plan`
            # (policy "wait") tries a crashed or timed-out child again
            merge(path, {"error": e.args[0].to_json() if isinstance(e.args[0], Msg) else str(e), "transient": True})
        finally:
            with _lock:
                _running.pop(str(path), None)
        return time.monotonic() - t0

    threading.Thread(target=wait, daemon=True).start()


def tracing() -> bool:
    """Whether a trace runs in the background now (the page redraws its plan when it ends)."""
    with _lock:
        return any(c.poll() is None for c in _running.values())
