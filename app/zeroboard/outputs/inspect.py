"""What a run saved, and what each thing is for: a LoRA adapter, a full model, or a ZeRO checkpoint.

A LoRA adapter needs its base model; a full model loads with from_pretrained;
a ZeRO checkpoint (``global_stepN/``, ``latest``, ``zero_to_fp32.py``) is no
plain model until consolidated.  Checkpoints count only when complete (the
trainer marks them once every rank saved its part): incomplete ones are named
as skipped.  Light (no torch): the web server calls it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import safeload
from ..job import folders, record, spec as specmod, trackers as jobtrackers
from ..words import say, tr

STEP_DIR = re.compile(r"^global_step(\d+)$")


class OutputError(ValueError):
    """The input cannot be used; the message says why and what to do. Nothing was written."""


@dataclass
class Item:
    kind: str  # "lora_adapter" | "full_model" | "zero_checkpoint" | "trainer_checkpoint"
    path: str
    step: int | None
    loadable: bool  # by from_pretrained as it is (an adapter: on top of its base)
    what: str  # what it is and what it is for, in a sentence (a catalog Msg)


@dataclass
class Inspection:
    run_dir: str
    result: dict | None
    base_model: str | None
    items: list[Item] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    trackers: list[dict] = field(default_factory=list)  # tracker, path, open: where each tracker wrote, how to open it
    last_loss: float | None = None  # the last logged step's loss (record.last_loss), as the Runs tab says it

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self, lang: str = "en") -> str:
        t = lambda key, **kw: say(key, **kw).say_in(lang)  # noqa: E731
        lines = [t("out.run", run=self.run_dir)]
        if self.result:
            r = self.result
            mean = r.get("train_loss", float("nan"))
            how = (t("out.made_by", by=r["made_by"]) if r.get("made_by") else
                   t("out.trained", loss=f"{mean if self.last_loss is None else self.last_loss:.4f}", mean=f"{mean:.4f}",
                     stage=r.get("deepspeed_stage")))
            if r.get("eval_loss") is not None:
                how += t("out.eval_loss", loss=f"{r['eval_loss']:.4f}")
            if r.get("training_stage") not in (None, "sft"):  # a preference stage: reloads as SFT's result does
                how += t("out.pref_stage", stage=r["training_stage"])
            if r.get("quantization_bit"):
                how += t("out.qlora", bits=r["quantization_bit"])
            lines.append(t("out.result", kind=t(f"out.kind.{r.get('kind')}") if r.get("kind") in KINDS else r.get("kind"),
                           steps=r.get("global_step"), how=how))
        for i in self.items:
            step = t("out.step", step=i.step) if i.step is not None else ""
            lines.append(f"  - {t(f'out.kind.{i.kind}')}{step}: {i.path}\n      {tr(i.what, lang)}")
        lines += [t("out.tracker", tracker=w["tracker"], path=w["path"], open=w["open"]) for w in self.trackers]
        lines += [f"  ! {tr(p, lang)}" for p in self.problems]
        return "\n".join(lines)


KINDS = ("lora_adapter", "full_model", "zero_checkpoint", "trainer_checkpoint")


def weights(d: Path) -> list[str]:
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
    names = weights(d)
    if (d / "adapter_config.json").is_file() and any(n.startswith("adapter_model") for n in names):
        if not base:
            try:
                base = json.loads((d / "adapter_config.json").read_text())["base_model_name_or_path"]
            except (OSError, ValueError, KeyError):
                base = None
        items.append(Item("lora_adapter", where, step, True, say("out.what.lora", base=base or "?")))
    elif (d / "config.json").is_file() and any(n.startswith(("model", "pytorch_model")) for n in names):
        items.append(Item("full_model", where, step, True, say("out.what.full")))
    if zero_checkpoint_dir(d):
        zstep = zero_step(d)
        items.append(Item("zero_checkpoint", where, zstep, False, say("out.what.zero", step=zstep, path=where)))
    if not items and not final:
        items.append(Item("trainer_checkpoint", where, step, False, say("out.what.trainer")))
    return items


def inspect(run_dir: str | Path) -> Inspection:
    """What a run dir holds. Raises OutputError if it is no run dir at all."""
    d = Path(run_dir)
    if not d.is_dir():
        raise OutputError(say("out.not_folder", path=str(d)))
    result = None
    if (d / record.RESULT_FILE).is_file():
        try:
            result = json.loads((d / record.RESULT_FILE).read_text())
        except ValueError:
            raise OutputError(say("out.result_not_json", path=str(d / record.RESULT_FILE))) from None
    base = (result or {}).get("base_model") or job_model(d)
    ins = Inspection(str(d), result, base, trackers=written_trackers(d))
    if (d / record.EVENTS_FILE).is_file():
        ins.last_loss = record.last_loss(record.read_events(d / record.EVENTS_FILE))
    ins.items += _describe(d, base, (result or {}).get("global_step"), final=True)  # the dir itself
    done, partial = folders.checkpoints(d)
    for c in done:
        ins.items += _describe(c, base, int(c.name.split("-")[1]), final=False)
    if partial:
        ins.problems.append(say("out.partial_skipped", names=", ".join(p.name for p in partial)))
    if result is None:
        ins.problems.append(say("out.no_result_ckpt" if done else "out.no_result"))
    elif result.get("kind") == "zero_checkpoint":
        if not any(i.path == str(d) and i.kind == "zero_checkpoint" for i in ins.items):
            ins.problems.append(say("out.result_no_weights", kind=result.get("kind"), path=str(d)))
    elif not any(i.path == str(d) and i.kind in ("lora_adapter", "full_model") for i in ins.items):
        ins.problems.append(say("out.result_no_weights", kind=result.get("kind"), path=str(d)))
    if not ins.items:
        raise OutputError(say("out.nothing_there", path=str(d)))
    return ins


def written_trackers(d: Path) -> list[dict]:
    """Where the run's experiment trackers wrote (those whose folder is there), and the command that opens each."""
    return [w.to_dict() for w in jobtrackers.for_run(d) if Path(w.path).exists()]


def job_model(d: Path) -> str | None:
    """The base model a run used, from its job record (read with the spec's own loader)."""
    for name in (record.JOB_FILE, record.SPEC_FILE):
        p = d / name
        try:
            model = specmod.read_mapping(safeload.read_text(p, safeload.JOB), str(p)).get("model_name_or_path")
        except (OSError, ValueError):  # UnicodeDecodeError, SpecError and safeload.Refused are ValueErrors
            continue
        if model:
            return str(model)
    return None
