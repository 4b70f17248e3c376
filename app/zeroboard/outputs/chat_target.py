"""What a chat loads: a run's result (a LoRA adapter on its base, or a full model), or a model folder.

Light (no torch): the web server and the CLI resolve a target before they
start a chat worker, and the worker receives the resolved paths.  Relative
paths in a run's record are resolved against the folder the run was launched
from, so the worker may run anywhere.  The defaults come from the run: the
chat template is the one its tokenizer saved (the worker reads it), the system
prompt is that template's default (LLaMA-Factory's, for the named templates),
the precision is the run's.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import safeload
from ..data import chat as chatmod
from ..job import record
from ..words import say
from .inspect import OutputError

KINDS = ("lora_adapter", "full_model", "model")  # model: a plain model folder, no base beside it


@dataclass
class Target:
    path: str  # what to load, absolute: the adapter or model folder
    kind: str  # one of KINDS
    name: str  # how the user named it (the run folder or the model path)
    base: str | None = None  # the base model: an adapter's base, a full run's starting model
    precision: str = "auto"  # the run's (bf16, fp16, fp32), or auto for a model folder
    template: str = "auto"  # the template the run trained with (its tokenizer carries it)
    system: str = ""  # the default system prompt: the named template's default, else none

    @property
    def has_base(self) -> bool:
        """Whether "base" means something here: the adapter switched off, or the starting model loaded beside."""
        return self.kind == "lora_adapter" or (self.kind == "full_model" and bool(self.base))

    @property
    def base_is_adapter_off(self) -> bool:
        return self.kind == "lora_adapter"

    def to_dict(self) -> dict:
        return asdict(self)


def _launch_dir(run: Path) -> Path:
    """The folder the run was launched from (its command record), where its relative paths point."""
    try:
        return Path(json.loads(safeload.read_text(run / record.COMMAND_FILE, safeload.CONFIG))["cwd"])
    except (OSError, ValueError, KeyError, TypeError):
        return Path.cwd()


def _absolute(path: str | None, here: Path) -> str | None:
    if not path:
        return None
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        return str(p)
    for base in (here, Path.cwd()):
        if (base / p).exists():
            return str((base / p).resolve())
    return path  # a hub name, as the run recorded it


def resolve(value: str | Path) -> Target:
    """The target for a run folder, an adapter folder or a model folder. Raises OutputError saying why not."""
    name = str(value)
    path = Path(os.path.expanduser(name))
    if not path.is_dir():
        raise OutputError(say("chat.not_found", path=name))
    path = path.resolve()
    result_file = path / record.RESULT_FILE
    if result_file.is_file():
        try:
            result = json.loads(safeload.read_text(result_file, safeload.CONFIG))
        except (OSError, ValueError):
            raise OutputError(say("out.result_not_json", path=str(result_file))) from None
        kind = result.get("kind")
        if kind == "zero_checkpoint":
            raise OutputError(say("out.nothing_final_zero", run=name, file=record.RESULT_FILE))
        if kind not in ("lora_adapter", "full_model"):
            raise OutputError(say("chat.unknown_result", path=name, kind=str(kind)))
        here = _launch_dir(path)
        template = str(result.get("template") or "auto")
        named = chatmod.NAMED.get(template)
        return Target(str(path), kind, name, _absolute(result.get("base_model"), here),
                      str(result.get("precision") or "auto"), template, named.turns.default_system if named else "")
    if (path / "adapter_config.json").is_file():
        try:
            base = json.loads(safeload.read_text(path / "adapter_config.json", safeload.CONFIG)).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            base = None
        if not base:
            raise OutputError(say("out.merge_base", base=repr(base)))
        return Target(str(path), "lora_adapter", name, _absolute(base, path))
    if (path / "config.json").is_file():
        return Target(str(path), "model", name)
    raise OutputError(say("chat.not_a_model", path=name))


def from_dict(data: dict) -> Target:
    return Target(**{k: data[k] for k in Target.__dataclass_fields__ if k in data})
