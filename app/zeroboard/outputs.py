"""After a run: what was saved, turning it into a loadable model, and checking that it answers.

- :func:`inspect` says what a run dir holds and what each thing is for: a LoRA
  adapter (needs its base model), a full model, or a ZeRO checkpoint
  (``global_stepN/``, ``latest``, ``zero_to_fp32.py``) that is no plain model
  until consolidated.
- :func:`consolidate` turns a ZeRO checkpoint into a NEW model dir (fp32
  weights, config and tokenizer copied); :func:`merge` folds a LoRA adapter
  into its base and exports a NEW model dir.  Neither touches the run; on bad
  input they raise :class:`OutputError` before writing anything, and they
  write into a temporary sibling that is renamed only when complete.
- :func:`check` = inspect + reload and answer (``reload.check_run``), printed by
  ``zeroboard check RUN_DIR`` or ``python -m zeroboard.outputs check RUN_DIR``.

Inspecting is light (no torch); consolidate, merge and check import torch,
transformers, peft and DeepSpeed inside the functions, so the web server runs
them as a subprocess: ``python -m zeroboard.outputs check RUN_DIR --json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import checks, planner

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "vocab.txt")
CONFIG_FILES = ("config.json", "generation_config.json")
STEP_DIR = re.compile(r"^global_step(\d+)$")


class OutputError(ValueError):
    """The input cannot be used; the message says why and what to do. Nothing was written."""


@dataclass
class Item:
    kind: str  # "lora_adapter" | "full_model" | "zero_checkpoint" | "trainer_checkpoint"
    path: str
    step: int | None
    loadable: bool  # by from_pretrained as it is (an adapter: on top of its base)
    what: str  # what it is and what it is for, in a sentence


@dataclass
class Inspection:
    run_dir: str
    result: dict | None
    base_model: str | None
    items: list[Item] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        lines = [f"Run {self.run_dir}"]
        if self.result:
            r = self.result
            how = (f"made by {r['made_by']}" if r.get("made_by") else
                   f"train loss {r.get('train_loss', float('nan')):.4f}, DeepSpeed stage {r.get('deepspeed_stage')}")
            lines.append(f"  result: {r.get('kind')} after {r.get('global_step')} steps, {how}")
        for i in self.items:
            step = f" (step {i.step})" if i.step is not None else ""
            lines.append(f"  - {i.kind}{step}: {i.path}\n      {i.what}")
        lines += [f"  ! {p}" for p in self.problems]
        return "\n".join(lines)


# --- what is there ----------------------------------------------------------------------------

def _weights(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("*") if p.suffix in (".safetensors", ".bin") and "training_args" not in p.name)


def zero_checkpoint_dir(d: Path) -> Path | None:
    """The folder that holds ``latest`` and ``global_stepN/`` (d itself), or None."""
    if any(STEP_DIR.match(p.name) and p.is_dir() for p in d.glob("global_step*")):
        return d
    return None


def zero_step(d: Path) -> int | None:
    latest = d / "latest"
    tag = latest.read_text().strip() if latest.is_file() else ""
    steps = [int(m.group(1)) for p in d.glob("global_step*") if (m := STEP_DIR.match(p.name))]
    m = STEP_DIR.match(tag)
    return int(m.group(1)) if m else (max(steps) if steps else None)


def _describe(d: Path, base: str | None, step: int | None, final: bool) -> list[Item]:
    items = []
    where = str(d)
    names = _weights(d)
    if (d / "adapter_config.json").is_file() and any(n.startswith("adapter_model") for n in names):
        if not base:
            try:
                base = json.loads((d / "adapter_config.json").read_text())["base_model_name_or_path"]
            except (OSError, ValueError, KeyError):
                base = None
        items.append(Item("lora_adapter", where, step, True,
                          f"a LoRA adapter: it needs its base model ({base or 'unknown base'}) to load "
                          "(peft.PeftModel.from_pretrained(base, path)); merge it to get a standalone model"))
    elif (d / "config.json").is_file() and any(n.startswith(("model", "pytorch_model")) for n in names):
        items.append(Item("full_model", where, step, True,
                          "a full model: transformers.AutoModelForCausalLM.from_pretrained(path) loads it"))
    if zero_checkpoint_dir(d):
        zstep = zero_step(d)
        items.append(Item("zero_checkpoint", where, zstep, False,
                          f"a DeepSpeed ZeRO checkpoint (global_step{zstep}/, latest, zero_to_fp32.py): per-rank "
                          "shards of weights and optimizer states for resuming; not a model from_pretrained can "
                          "load until consolidated (zeroboard consolidate)"))
    if not items and not final:
        items.append(Item("trainer_checkpoint", where, step, False,
                          "a trainer checkpoint without loadable weights (optimizer and scheduler state only)"))
    return items


def inspect(run_dir: str | Path) -> Inspection:
    """What a run dir holds. Raises OutputError if it is no run dir at all."""
    d = Path(run_dir)
    if not d.is_dir():
        raise OutputError(f"{d} is not a folder; give the output_dir of a run")
    result = None
    if (d / checks.RESULT_FILE).is_file():
        try:
            result = json.loads((d / checks.RESULT_FILE).read_text())
        except ValueError:
            raise OutputError(f"{d / checks.RESULT_FILE} is not valid JSON; the run did not finish writing it") from None
    base = (result or {}).get("base_model") or _job_model(d)
    ins = Inspection(str(d), result, base)
    ins.items += _describe(d, base, (result or {}).get("global_step"), final=True)  # the dir itself
    ckpts = sorted((p for p in d.glob("checkpoint-*") if p.is_dir()), key=lambda p: _num(p.name))
    for c in ckpts:
        ins.items += _describe(c, base, _num(c.name), final=False)
    if result is None:
        ins.problems.append(f"no {checks.RESULT_FILE}: the run did not finish saving a result"
                            + (" (it has checkpoints)" if ckpts else ""))
    elif not any(i.path == str(d) and i.kind in ("lora_adapter", "full_model") for i in ins.items):
        ins.problems.append(f"{checks.RESULT_FILE} says {result.get('kind')}, but no weights were found in {d}")
    if not ins.items:
        raise OutputError(f"{d} holds no result, model or checkpoint: is it the output_dir of a run?")
    return ins


def _num(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _job_model(d: Path) -> str | None:
    for name in ("job.yaml", "job.requested.yaml"):
        p = d / name
        if p.is_file():
            m = re.search(r"^model_name_or_path:\s*(.+)$", p.read_text(encoding="utf-8"), re.M)
            if m:
                return m.group(1).strip().strip("'\"")
    return None


# --- writing a new model dir ----------------------------------------------------------------------

def _new_dir(out_dir: str | Path, run_dir: Path) -> Path:
    out = Path(out_dir).resolve()
    run = run_dir.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputError(f"{out} already exists and is not empty; choose a new folder")
    if out == run or run in out.parents:
        raise OutputError(f"{out} is inside the run folder; choose a folder outside {run}")
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


def consolidate(path: str | Path, out_dir: str | Path) -> dict:
    """Turn a ZeRO checkpoint (a checkpoint-N dir, or a run dir: its latest) into a loadable fp32 model dir."""
    path = Path(path)
    if not path.is_dir():
        raise OutputError(f"{path} is not a folder")
    ckpt = zero_checkpoint_dir(path)
    run = path
    if ckpt is None:
        found = sorted((c for c in path.glob("checkpoint-*") if zero_checkpoint_dir(c)), key=lambda c: _num(c.name))
        if not found:
            raise OutputError(f"{path} holds no ZeRO checkpoint (global_stepN/ with latest); it was saved "
                              "without DeepSpeed or without save_steps")
        ckpt = found[-1]
    else:
        run = path.parent if path.name.startswith("checkpoint-") else path
    result = run / checks.RESULT_FILE
    base = (json.loads(result.read_text()).get("base_model") if result.is_file() else None) or _job_model(run)
    sources = _model_sources(ckpt, run, base)
    cfg_src = next((s / "config.json" for s in sources if (s / "config.json").is_file()), None)
    if cfg_src is None:
        raise OutputError(f"no config.json in {ckpt}, {run} or the base model {base}: cannot build a loadable model")
    if (ckpt / "adapter_config.json").is_file() or (run / "adapter_config.json").is_file():
        raise OutputError(f"{ckpt} is the ZeRO checkpoint of a LoRA run: its adapter is already saved as "
                          "adapter_model.safetensors; merge that instead (zeroboard merge)")
    try:
        shape = planner.read_model(cfg_src.parent)
    except planner.PlanError as e:
        raise OutputError(str(e)) from None
    out = _new_dir(out_dir, run)

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from safetensors.torch import save_file

    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed prints progress; stdout may carry --json
        state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt))
    seen: dict[int, str] = {}
    for k, t in list(state.items()):  # tied weights share storage; safetensors stores each once
        ptr = t.data_ptr()
        if ptr in seen:
            state[k] = t.clone()
        seen.setdefault(ptr, k)
    state = {k: v.contiguous() for k, v in state.items()}
    tmp = _staging(out)
    try:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        copied = _copy_files(sources, CONFIG_FILES + TOKENIZER_FILES, tmp)
        _set_dtype(tmp / "config.json", "float32")
        _write_result(tmp, out, base, zero_step(ckpt), f"zeroboard consolidate {ckpt}")
        _finish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n = sum(v.numel() for v in state.values())
    return {"path": str(out), "from": str(ckpt), "step": zero_step(ckpt), "tensors": len(state), "parameters": n,
            "expected_parameters": shape.params, "copied": copied}


def _write_result(tmp: Path, out: Path, base: str | None, step: int | None, made_by: str) -> None:
    """The new dir's own result record, so `zeroboard check` reloads it next to its base like a run."""
    record = {"kind": "full_model", "path": str(out), "base_model": base,
              "weights": _weights(tmp), "global_step": step, "made_by": made_by,
              "loads_with": "transformers.AutoModelForCausalLM.from_pretrained(path)"}
    (tmp / checks.RESULT_FILE).write_text(json.dumps(record, indent=2) + "\n")


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
        raise OutputError(f"{path} is not a folder")
    if not (path / "adapter_config.json").is_file():
        what = "a full model: nothing to merge" if (path / "config.json").is_file() else "no LoRA adapter"
        raise OutputError(f"{path} holds {what} (no adapter_config.json)")
    result = {}
    if (path / checks.RESULT_FILE).is_file():
        result = json.loads((path / checks.RESULT_FILE).read_text())
    base = base_model or result.get("base_model") or json.loads(
        (path / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base or not (Path(base) / "config.json").is_file():
        raise OutputError(f"the adapter's base model {base!r} is not a local folder with config.json; "
                          "give it with --base")
    try:
        planner.read_model(base)
    except planner.PlanError as e:
        raise OutputError(str(e)) from None
    out = _new_dir(out_dir, path)

    from .reload import load

    model, tokenizer = load(path, base)
    merged = model.merge_and_unload()
    tmp = _staging(out)
    try:
        merged.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _write_result(tmp, out, base, result.get("global_step"), f"zeroboard merge {path}")
        _finish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"path": str(out), "adapter": str(path), "base_model": base,
            "parameters": sum(p.numel() for p in merged.parameters())}


# --- the check: inspect + reload and answer --------------------------------------------------------

def check(run_dir: str | Path, prompts: list[str] | None = None, with_base: bool = True) -> dict:
    """What was saved, and the final output's answers next to the base model's (reload.check_run)."""
    from .demo import DEMO_PROMPTS, IDENTITY_ANSWER_EN, IDENTITY_ANSWER_ZH, IDENTITY_QUESTIONS_EN, IDENTITY_QUESTIONS_ZH
    from .reload import check_run

    ins = inspect(run_dir)
    if ins.result is None:
        raise OutputError(f"{run_dir} holds no {checks.RESULT_FILE}: nothing final to reload"
                          + ("; consolidate its ZeRO checkpoint first" if any(
                              i.kind == "zero_checkpoint" for i in ins.items) else ""))
    prompts = prompts or DEMO_PROMPTS
    report = check_run(run_dir, prompts, with_base=with_base)
    expected = {**{q: IDENTITY_ANSWER_EN for q in IDENTITY_QUESTIONS_EN},
                **{q: IDENTITY_ANSWER_ZH for q in IDENTITY_QUESTIONS_ZH}}
    report["expected"] = [expected.get(q) for q in prompts]
    report["matches"] = [None if e is None else a.strip() == e for a, e in zip(report["answers"], report["expected"])]
    report["inspection"] = ins.to_dict()
    return report


def check_text(report: dict) -> str:
    ins = Inspection(**{**report["inspection"], "items": [Item(**i) for i in report["inspection"]["items"]]})
    lines = [ins.text(), "", "Reload and answer (greedy):"]
    base = report.get("base_answers") or [None] * len(report["prompts"])
    for q, a, b, ok in zip(report["prompts"], report["answers"], base, report["matches"]):
        mark = "" if ok is None else ("  [matches the training answer]" if ok else "  [differs from the training answer]")
        lines.append(f"  Q: {q}\n     tuned: {a}{mark}")
        if b is not None:
            lines.append(f"     base:  {b}")
    return "\n".join(lines)


# --- command line ----------------------------------------------------------------------------

def cmd_check(args) -> int:
    """``zeroboard check RUN_DIR [--prompt Q]... [--no-base] [--json]``."""
    try:
        report = check(args.run_dir, args.prompt, with_base=not args.no_base)
    except (OutputError, FileNotFoundError, OSError) as e:
        print(json.dumps({"error": str(e)}) if args.json else f"check: {e}", file=sys.stdout if args.json else sys.stderr)
        return 1
    print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else check_text(report))
    return 0


def cmd_inspect(args) -> int:
    try:
        ins = inspect(args.run_dir)
    except OutputError as e:
        print(f"inspect: {e}", file=sys.stderr)
        return 1
    print(json.dumps(ins.to_dict(), indent=2) if args.json else ins.text())
    return 0


def cmd_consolidate(args) -> int:
    try:
        info = consolidate(args.path, args.out)
    except OutputError as e:
        print(f"consolidate: {e}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2) if args.json else
          f"wrote {info['path']}: {info['parameters']:,} parameters (fp32) from {info['from']} "
          f"(step {info['step']}); copied {', '.join(info['copied'])}")
    return 0


def cmd_merge(args) -> int:
    try:
        info = merge(args.path, args.out, args.base)
    except OutputError as e:
        print(f"merge: {e}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2) if args.json else
          f"wrote {info['path']}: {info['base_model']} + adapter {info['adapter']} merged "
          f"({info['parameters']:,} parameters)")
    return 0


def add_commands(sub) -> None:
    """Add check / inspect / consolidate / merge to an argparse subparsers object (the zeroboard CLI's too)."""
    s = sub.add_parser("check", help="say what a run saved, reload it and let it answer next to its base")
    s.add_argument("run_dir")
    s.add_argument("--prompt", action="append", help="a question to ask (repeatable; default: the demo prompts)")
    s.add_argument("--no-base", action="store_true", help="skip the base model's answers")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_check)
    s = sub.add_parser("inspect", help="say what a run dir holds and what each part is for")
    s.add_argument("run_dir")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_inspect)
    s = sub.add_parser("consolidate", help="turn a ZeRO checkpoint into a loadable model dir (a new folder)")
    s.add_argument("path", help="a run dir (its latest ZeRO checkpoint) or a checkpoint-N dir")
    s.add_argument("out", help="the new model folder")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_consolidate)
    s = sub.add_parser("merge", help="merge a LoRA adapter into its base and export a new model dir")
    s.add_argument("path", help="a LoRA run dir or adapter dir")
    s.add_argument("out", help="the new model folder")
    s.add_argument("--base", help="the base model folder (default: the one the run used)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_merge)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zeroboard.outputs")
    add_commands(p.add_subparsers(dest="cmd", required=True))
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
