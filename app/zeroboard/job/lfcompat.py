"""LLaMA-Factory's training YAML read as a job, through the one table of its keys (:mod:`.lfkeys`).

:func:`translate` reads a mapping (a job file, the form, ``--set``): the job's own names as they are, LLaMA-Factory's
as :data:`~.lfkeys.TABLE` says, any other TrainingArguments name into ``extra_args``; the one-line notes and the
refusals come back by key.  A file that says ``stage`` or ``do_train`` is LLaMA-Factory's: the keys it leaves out
take LLaMA-Factory's defaults where they differ from the job's (:data:`~.lfkeys.LF_DEFAULTS`), and a note lists them.
:func:`converted_yaml` writes the equivalent job file (``zeroboard convert-lf``), :func:`markdown_table` the table
the docs show.

Pure Python: TrainingArguments' names come from ``modelinfo`` (a child process, once per transformers version), asked
only for a key that is none of the others.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..words import Msg, say, tr
from . import modelinfo
from .lfkeys import LF_DEFAULTS, LF_VERSION, MARKERS, NOTE_KEY, TABLE, TRAINER, Refused, shown
from .quoting import refusal


@dataclass
class Translated:
    """A mapping read: the job's fields (values still to be converted by the spec), the notes and the problems,
    each under the key of the file that caused it, and which keys set each field."""

    values: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Msg] = field(default_factory=dict)
    problems: dict[str, Msg] = field(default_factory=dict)
    origin: dict[str, list[str]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)  # LLaMA-Factory's defaults this file took


def is_lf_file(data: dict) -> bool:
    return any(k in data for k in MARKERS)


def translate(data: dict, fields: Collection[str]) -> Translated:
    """Every key of ``data`` as the job's fields (``fields``: their names), LLaMA-Factory's read by :data:`TABLE`."""
    out = Translated()
    for key, value in data.items():
        if not isinstance(key, str) or len(key) > 80 or refusal(key) is not None:  # (a control character: escaped)
            out.problems[shown(key)] = say("spec.unknown")
            continue
        rule = TABLE.get(key)
        if rule is None and key in fields:
            _put(out, key, key, value)
            continue
        if rule is None and key in _trainer_names():
            rule = TRAINER
        if rule is None:
            out.problems[key] = unknown(key, fields)
            continue
        try:
            sets, note = rule.apply(key, value if rule.kind != "trainer" else _typed(key, value), data)
        except Refused as e:
            out.problems[key] = e.args[0]
            continue
        note = sets.pop("_note", note)
        if note is not None:
            out.notes[key] = note
        for name, v in sets.items():
            _put(out, name, key, v)
    if is_lf_file(data):
        _lf_defaults(out)
    return out


def _put(out: Translated, name: str, key: str, value: Any) -> None:
    """Set a field from ``key``; a field two keys set differently is a problem, named on LLaMA-Factory's key.
    TrainingArguments' names gather in ``extra_args`` beside the file's own."""
    if name == "extra_args" and isinstance(out.values.get(name), dict) and isinstance(value, dict):
        clash = [k for k in value if k in out.values[name] and out.values[name][k] != value[k]]
        if not clash:
            out.values[name] = {**out.values[name], **value}
            out.origin[name].append(key)
            return
    if name in out.values and out.values[name] != value:
        other = out.origin[name][0]
        blame, besides = (other, key) if key == name else (key, other)
        out.problems[blame] = say("lf.conflict", key=blame, other=besides, field=name)
        return
    out.values[name] = value
    out.origin.setdefault(name, []).append(key)


def _lf_defaults(out: Translated) -> None:
    for name, value in LF_DEFAULTS.items():
        if out.values.get(name) is None and name not in out.problems:
            out.values[name] = out.defaults[name] = value
    if out.values.get("lora_alpha") is None:  # LLaMA-Factory: twice the rank
        try:
            rank = int(out.values.get("lora_rank") if out.values.get("lora_rank") is not None else 8)
        except (TypeError, ValueError):
            return
        out.values["lora_alpha"] = out.defaults["lora_alpha"] = 2 * rank
    if out.defaults:
        out.notes[NOTE_KEY] = say("lf.defaults", version=LF_VERSION,
                                  values=", ".join(f"{k} {v}" for k, v in out.defaults.items()))


def _typed(key: str, value: Any) -> Any:
    """A TrainingArguments value given as text (``--set ddp_timeout=60``, a form) as the kind the argument takes."""
    kind = modelinfo.training_arguments().get(key, {}).get("kind") if isinstance(value, str) else None
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
    except ValueError:
        return value  # the checks say what it should be
    if kind == "bool" and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value


def field_of(key: str) -> str | None:
    """The job field a LLaMA-Factory key of another name sets (``bf16`` -> ``precision``), else None."""
    rule = TABLE.get(key)
    return rule.field if rule is not None and rule.kind == "field" and rule.field and rule.field != key else None


def _trainer_names() -> frozenset[str]:
    return modelinfo.training_argument_names()


def unknown(key: str, fields: Collection[str]) -> Msg:
    """An unknown key's message, with the nearest name of the job's or LLaMA-Factory's."""
    wanted = key.replace("-", "_").lower()
    names = sorted({*fields, *TABLE})
    near = wanted if wanted in names else next(iter(difflib.get_close_matches(wanted, names, n=1, cutoff=0.75)), None)
    if near is None:
        near = next((n for n in fields if len(wanted) >= 5 and wanted in n), None)
    if near is None:
        return say("spec.unknown")
    rule = TABLE.get(near)
    if rule is not None and near not in fields and rule.kind == "field" and rule.field:
        return say("lf.unknown_near", near=near, field=rule.field)
    return say("spec.unknown_near", near=near)


# --- what the file becomes, written out ----------------------------------------------------------------------------

def converted_yaml(values: dict[str, Any], read: Translated, data: dict, source: str, lang: str = "en") -> str:
    """The job file equivalent to LLaMA-Factory's ``data``: every field the file (or LLaMA-Factory's defaults) sets,
    in the job's order (``values``: the job's fields, converted), each one another key set commented with that key;
    the keys that set nothing listed at the end with their notes."""
    lines = [f"# {tr(say('lf.converted', path=source, version=LF_VERSION), lang)}"]
    for name, value in values.items():
        keys = [k for k in read.origin.get(name, []) if k != name]
        if name not in read.origin and name not in read.defaults:
            continue
        if name in read.defaults:
            lines.append(f"# {tr(say('lf.default_from'), lang)}")
        elif keys:
            lines.append(f"# {tr(say('lf.from', keys=', '.join(f'{k}: {_inline(data[k])}' for k in keys)), lang)}")
        lines.append(yaml.safe_dump({name: value}, sort_keys=False, allow_unicode=True).rstrip("\n"))
    used = {k for keys in read.origin.values() for k in keys}
    quiet = []
    for key, value in data.items():
        if key in used or key == NOTE_KEY:
            continue
        if key in read.notes:
            lines.append(f"# {tr(say('lf.not_used', key=key, value=_inline(value), why=read.notes[key]), lang)}")
        else:
            quiet.append(f"{key}: {_inline(value)}")
    if quiet:
        lines.append(f"# {tr(say('lf.read_only', keys=', '.join(quiet)), lang)}")
    return "\n".join(lines) + "\n"


def _inline(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


KIND_WORDS = {"field": "lf.kind_field", "trainer": "lf.kind_trainer", "no-op": "lf.kind_noop", "refused": "lf.kind_refused"}


def markdown_table(lang: str = "en") -> str:
    """Every key of the table, what it becomes here and why: the table of the docs (``docs/*/llamafactory.md``)."""
    head = tr(say("lf.table_header"), lang).split("|")
    rows = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    order = {"field": 0, "trainer": 1, "no-op": 2, "refused": 3}
    for key, rule in sorted(TABLE.items(), key=lambda kv: (order[kv[1].kind], kv[0])):
        if rule.kind == "field":
            here = f"`{rule.field}`" if rule.field and rule.field != key else tr(say("lf.kind_same"), lang) \
                if rule.field else "—"
        else:
            here = tr(say(KIND_WORDS[rule.kind]), lang)
        why = tr(say(rule.why or "lf.doc_trainer", key=key, value="…"), lang).replace("|", "\\|")
        rows.append(f"| `{key}` | {here} | {why} |")
    return "\n".join(rows) + "\n"
