"""One catalog of the words a user reads, English and Chinese side by side.

Every sentence ZeroBoard shows (the page, validation, the runner's messages,
the planner, the output check, the command line) is an entry here, keyed by a
message id, with ``{placeholders}`` for its values.  Code never writes a
sentence itself: it asks for one with :func:`say`, which returns a
:class:`Msg`.  A Msg *is* its English text (a ``str``), so logs and exceptions
read as before, and it remembers its key and values, so the page can say it
in Chinese with :func:`tr`.

The catalog is split by area (one module each, a ``WORDS`` mapping of
``key -> (English, Chinese)``); spec fields have their own table in
:mod:`.fields`.  Chinese follows the course's terms: 设备数量, DeepSpeed stage,
使用 offload, 预览命令, 开始, 中断.

The lowest layer of the package: it imports nothing of ZeroBoard's.
"""

from __future__ import annotations

import os
import string
from typing import Any

from . import chat, checks, cli, cluster, data, fields, gradio, lf, outputs, page, plan, pref, runs, runs_page, safety

LANGS = {"en": "English", "zh": "中文"}
DEFAULT = "en"
LANG_ENV = "ZEROBOARD_LANG"


def _merge(*parts: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for part in parts:
        clash = set(out) & set(part)
        if clash:  # pragma: no cover - a catalog bug, caught by the tests on import
            raise KeyError(f"catalog keys defined twice: {sorted(clash)}")
        out.update(part)
    return out


CATALOG: dict[str, tuple[str, str]] = _merge(page.WORDS, checks.WORDS, runs.WORDS, plan.WORDS, outputs.WORDS, cli.WORDS, data.WORDS,
                                           safety.WORDS, runs_page.WORDS, cluster.WORDS, chat.WORDS, lf.WORDS, gradio.WORDS,
                                           pref.WORDS)


def lang_of(value: str | None) -> str:
    """A supported language code from ``zh``, ``zh-CN``, ``en-US``...; the default for anything else."""
    code = (value or "").strip().lower().replace("_", "-").split("-")[0]
    return code if code in LANGS else DEFAULT


def default_lang() -> str:
    """The language asked for by ``$ZEROBOARD_LANG`` (English when unset)."""
    return lang_of(os.environ.get(LANG_ENV))


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _pick(key: str, lang: str) -> str:
    try:
        pair = CATALOG[key]
    except KeyError:
        raise KeyError(f"no catalog entry {key!r}") from None
    return pair[1] if lang == "zh" else pair[0]


def text(key: str, lang: str = DEFAULT, /, **values: Any) -> str:
    """The entry ``key`` in ``lang``, its placeholders filled (Msg values are said in ``lang`` too)."""
    template = _pick(key, lang)
    if not values:
        return template
    return template.format(**{k: tr(v, lang) for k, v in values.items()})


def tr(value: Any, lang: str = DEFAULT) -> Any:
    """A Msg said in ``lang``; lists of them item by item; anything else unchanged."""
    if isinstance(value, Msg):
        return value.say_in(lang)
    if isinstance(value, list):
        return [tr(v, lang) for v in value]
    return value


def clause(value: str) -> str:
    """A message put inside a sentence of its own (``...: {why}.``): its final full stop left off, so the sentence
    ends once (never ``。。`` or ``..``)."""
    return value.rstrip().removesuffix("。").removesuffix(".") if not value.rstrip().endswith("...") else value


class Msg(str):
    """A catalog sentence: its English text, with the key and values to say it in another language."""

    key: str
    values: dict[str, Any]

    def __new__(cls, key: str, /, **values: Any) -> Msg:
        obj = super().__new__(cls, text(key, "en", **values))
        obj.key, obj.values = key, values
        return obj

    def say_in(self, lang: str) -> str:
        return text(self.key, lang, **self.values)

    def to_json(self) -> dict:
        """For state files: the key and values (nested Msgs included), read back by :func:`from_json`."""
        return {"key": self.key, "values": {k: v.to_json() if isinstance(v, Msg) else v for k, v in self.values.items()}}

    def __reduce__(self):  # pickles (and copies) as a Msg, not as a plain str
        return (_rebuild, (self.key, self.values))


def _rebuild(key: str, values: dict) -> Msg:
    return Msg(key, **values)


def say(key: str, /, **values: Any) -> Msg:
    """The sentence ``key`` with its values: English as a str, any language through :func:`tr`."""
    return Msg(key, **values)


def from_json(data: Any) -> Any:
    """A Msg from :meth:`Msg.to_json` output; plain text (or anything else) as it is."""
    if isinstance(data, dict) and set(data) == {"key", "values"} and data["key"] in CATALOG:
        return Msg(data["key"], **{k: from_json(v) for k, v in (data["values"] or {}).items()})
    return data


def to_json(value: Any) -> Any:
    return value.to_json() if isinstance(value, Msg) else value


# --- spec fields: labels and help ------------------------------------------------------------------


def label(name: str, lang: str = DEFAULT) -> str:
    """The label of a spec field, or a page word."""
    if name in fields.FIELDS:
        return fields.FIELDS[name][1 if lang == "zh" else 0]
    return _pick(name, lang)


def help_text(name: str, lang: str = DEFAULT) -> str:
    """The help line of a spec field."""
    return fields.FIELDS[name][3 if lang == "zh" else 2]


def status(key: str, lang: str = DEFAULT) -> str:
    """A run status (running, finished, ...) in words."""
    return _pick(f"status.{key}", lang) if f"status.{key}" in CATALOG else key


def headers(key: str, lang: str = DEFAULT) -> list[str]:
    """A table's column headers."""
    return _pick(f"headers.{key}", lang).split("|")


def accepted(header: str | None) -> str | None:
    """The first supported language of an Accept-Language header (by its q weights), or None."""
    weighted = []
    for i, part in enumerate((header or "").split(",")):
        code, _, q = part.strip().partition(";q=")
        try:
            weight = float(q) if q else 1.0
        except ValueError:
            weight = 0.0
        if code and lang_of(code) == code.strip().lower().replace("_", "-").split("-")[0]:
            weighted.append((-weight, i, lang_of(code)))
    return min(weighted)[2] if weighted else None


def pick_lang(query: str | None, stored: str | None, env: str | None, accept: str | None) -> str:
    """The page's language: ?lang= in the URL, then the reader's own earlier choice, then $ZEROBOARD_LANG, then the
    browser's language, then English."""
    for value in (query, stored, env):
        if value and lang_of(value) == value.strip().lower().split("-")[0]:
            return lang_of(value)
    return accepted(accept) or DEFAULT
