"""Turning what a run saved into a loadable model, always in a NEW folder.

:func:`consolidate` turns a ZeRO checkpoint into a model folder with
DeepSpeed's own fp32 conversion (safetensors, sharded when large), config and
tokenizer copied; :func:`merge` folds a LoRA adapter into its base.  Neither
touches the run; on bad input they raise :class:`OutputError` before writing
anything, and they write into a temporary sibling that is renamed only when
complete.  Both import torch inside: the web server runs them as a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path

from .. import files, workspace
from ..job import folders, record
from ..job.quoting import shell
from ..planner import shapes
from ..words import say
from .inspect import OutputError, job_model, weights, zero_checkpoint_dir, zero_step

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "vocab.txt")
# a vision-language model's image processor (training.vision.PROCESSOR_FILES) travels with its config
CONFIG_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "processor_config.json",
                "video_preprocessor_config.json")
MAX_SHARD = "5GB"


def _new_dir(out_dir: str | Path, run_dir: Path) -> Path:
    ws = workspace.current()
    out = ws.path(out_dir)
    run = run_dir.resolve()
    if not ws.writable(out):
        raise OutputError(say("check.output_outside", path=str(out_dir), roots=ws.describe()))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputError(say("out.exists", path=str(out)))
    if out == run or run in out.parents:
        raise OutputError(say("out.inside_run", path=str(out), run=str(run)))
    return out


def _staging(out: Path) -> Path:
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _finish(tmp: Path, out: Path) -> Path:
    if out.exists():
        out.rmdir()  # empty, checked before
    tmp.replace(out)
    return out


def _copy_files(sources: list[Path], names: tuple[str, ...], dest: Path) -> list[str]:
    copied = []
    for name in names:
        src = next((s / name for s in sources if (s / name).is_file()), None)
        if src is not None:
            shutil.copyfile(src, dest / name)
            copied.append(name)
    return copied


def _model_sources(ckpt: Path, run: Path, base: str | None) -> list[Path]:
    out = [ckpt, run]
    if base and Path(base).is_dir():
        out.append(Path(base))
    return out


def _find_zero(path: Path) -> tuple[Path, Path]:
    """(the folder holding global_stepN/ and latest, the run folder) for a run folder or a checkpoint-N folder."""
    if folders.CHECKPOINT.match(path.name) and not (path / folders.CHECKPOINT_MARK).is_file():
        whole = [c for c in folders.checkpoints(path.parent)[0] if zero_checkpoint_dir(c)]
        last = say("out.last_whole", name=str(whole[-1])) if whole else say("out.no_whole")
        raise OutputError(say("out.checkpoint_cut", path=str(path), last=last))  # its save never completed
    ckpt = zero_checkpoint_dir(path)
    if ckpt is not None:
        return ckpt, path.parent if path.name.startswith("checkpoint-") else path
    done, partial = folders.checkpoints(path)
    found = [c for c in done if zero_checkpoint_dir(c)]
    if not found:
        if partial:
            raise OutputError(say("out.only_cut", path=str(path), names=", ".join(p.name for p in partial)))
        raise OutputError(say("out.no_zero", path=str(path)))
    return found[-1], path


def consolidate(path: str | Path, out_dir: str | Path) -> dict:
    """Turn a ZeRO checkpoint (a checkpoint-N dir, or a run dir: its latest) into a loadable fp32 model dir."""
    path = Path(path)
    if not path.is_dir():
        raise OutputError(say("out.not_folder", path=str(path)))
    ckpt, run = _find_zero(path)
    result = run / record.RESULT_FILE
    base = (json.loads(result.read_text()).get("base_model") if result.is_file() else None) or job_model(run)
    sources = _model_sources(ckpt, run, base)
    cfg_src = next((s / "config.json" for s in sources if (s / "config.json").is_file()), None)
    if cfg_src is None:
        raise OutputError(say("out.no_config", ckpt=str(ckpt), run=str(run), base=str(base)))
    if (ckpt / "adapter_config.json").is_file() or (run / "adapter_config.json").is_file():
        raise OutputError(say("out.zero_of_lora", ckpt=str(ckpt)))
    try:
        expected = shapes.read_model(cfg_src.parent).params
    except shapes.Untraced:  # a causal LM whose layers the planner traces rather than derives: nothing to check it by
        expected = None
    except shapes.PlanError as e:
        raise OutputError(e.args[0]) from None
    out = _new_dir(out_dir, run)
    tmp = _staging(out)
    try:
        n = _write_fp32_model(ckpt, cfg_src.parent, tmp)
        copied = _copy_files(sources, CONFIG_FILES + TOKENIZER_FILES, tmp)
        _set_dtype(tmp / "config.json", "float32")
        _write_result(tmp, out, base, zero_step(ckpt), "zeroboard consolidate " + shell(str(ckpt)))
        _finish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"path": str(out), "from": str(ckpt), "step": zero_step(ckpt), "parameters": n,
            "expected_parameters": expected, "copied": copied}


def _write_fp32_model(ckpt: Path, config_dir: Path, dest: Path) -> int:
    """DeepSpeed's own fp32 reconstruction of the shards, saved by transformers as (sharded) safetensors.

    transformers' save handles what a bare safetensors dump cannot: weights shared by tied embeddings are
    stored once and tied again on load.  Returns the number of parameters written.
    """
    import torch
    from accelerate import init_empty_weights
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from transformers import AutoConfig

    from ..training import vision

    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed prints progress; stdout may carry --json
        state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt))
    config = AutoConfig.from_pretrained(config_dir)
    with init_empty_weights():
        model = vision.auto_model(config_dir).from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    missing = [k for k in missing if k not in tied and not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise OutputError(say("out.zero_mismatch", missing=", ".join(missing[:5]) or "-",
                              unexpected=", ".join(unexpected[:5]) or "-"))
    model.tie_weights()
    model.save_pretrained(dest, safe_serialization=True, max_shard_size=MAX_SHARD)
    return sum(p.numel() for p in model.parameters())


def _write_result(tmp: Path, out: Path, base: str | None, step: int | None, made_by: str) -> None:
    """The new dir's own result record, so `zeroboard check` reloads it next to its base like a run."""
    from ..training import vision

    rec = {"kind": "full_model", "path": str(out), "base_model": base, "weights": weights(tmp), "global_step": step,
           "made_by": made_by, "loads_with": f"transformers.{vision.auto_model(tmp).__name__}.from_pretrained(path)"}
    files.write_text_atomic(tmp / record.RESULT_FILE, json.dumps(rec, indent=2) + "\n")


def _set_dtype(cfg_path: Path, dtype: str) -> None:
    cfg = json.loads(cfg_path.read_text())
    for key in ("dtype", "torch_dtype"):
        if key in cfg:
            cfg[key] = dtype
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def merge(path: str | Path, out_dir: str | Path, base_model: str | None = None) -> dict:
    """Fold a LoRA adapter (a run dir, or an adapter dir) into its base; export a NEW full model dir."""
    path = Path(path)
    if not path.is_dir():
        raise OutputError(say("out.not_folder", path=str(path)))
    if not (path / "adapter_config.json").is_file():
        raise OutputError(say("out.merge_full" if (path / "config.json").is_file() else "out.merge_none", path=str(path)))
    result = {}
    if (path / record.RESULT_FILE).is_file():
        result = json.loads((path / record.RESULT_FILE).read_text())
    base = base_model or result.get("base_model") or json.loads(
        (path / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base or not (Path(base) / "config.json").is_file():
        raise OutputError(say("out.merge_base", base=repr(base)))
    try:
        shapes.read_model(base)
    except shapes.Untraced:
        pass  # a causal LM of a family the planner traces: merged as any other
    except shapes.PlanError as e:
        raise OutputError(e.args[0]) from None
    out = _new_dir(out_dir, path)

    from .reload import load

    model, tokenizer = load(path, base)
    merged = model.merge_and_unload()
    tmp = _staging(out)
    try:
        merged.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _copy_files([path, Path(base)], CONFIG_FILES[2:], tmp)  # a vision-language model's image processor
        _write_result(tmp, out, base, result.get("global_step"), "zeroboard merge " + shell(str(path)))
        _finish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info = {"path": str(out), "adapter": str(path), "base_model": base,
            "parameters": sum(p.numel() for p in merged.parameters())}
    if result.get("quantization_bit"):  # QLoRA: trained against the quantized base, merged into the full one
        info["note"] = say("outputs.qlora_gap", bits=result["quantization_bit"])
    return info
