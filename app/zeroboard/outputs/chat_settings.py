"""A chat request's settings, each bounded, and how large a request may be: one table the page, ``zeroboard chat``
and the chat worker read.  The worker's own setting is here too: how long it keeps its model unused
(:func:`idle_minutes`, the page's "Unload after idle" and ``zeroboard chat --idle-minutes``).

Light (no torch): the client refuses what no worker would take before it sends anything, and the worker checks the
same table again on what arrives (a request line past :data:`MAX_REQUEST_BYTES` is answered with a refusal, not
dropped).  The prompt's own bound is in tokens and needs the model, so the worker holds it
(``ChatModel.prompt_budget``): the model's context less the answer's ``max_new_tokens``, or ``max_prompt_tokens``
when that is lower.  A megabyte pasted into the box was tokenized into a quarter of a million positions and
generated on for minutes on a model that reads 512; now it is refused with its size, before generation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields

from ..words import Msg, say

MAX_REQUEST_BYTES = 4 << 20  # one request line, as the worker reads it: a long conversation fits
MAX_PROMPT_CHARS = 1 << 20  # the text of one side's conversation (about 250,000 tokens): more is refused unsent


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    whole: bool


# name -> its bounds; the defaults are Settings' own
BOUNDS = {
    "max_new_tokens": Bound(1, 32768, True),  # the answer, in tokens (the model's context bounds it too)
    "min_new_tokens": Bound(0, 32768, True),
    "temperature": Bound(0, 10, False),  # 0: greedy
    "top_p": Bound(0, 1, False),
    "seed": Bound(0, 2**32 - 1, True),
    "max_prompt_tokens": Bound(0, 1 << 24, True),  # 0: the model's context less max_new_tokens
}


@dataclass(frozen=True)
class Settings:
    """How to answer one request. temperature 0: greedy; max_prompt_tokens 0: as much as the model reads."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    min_new_tokens: int = 0  # answers of a fixed length (the speed benchmark); 0: the end token ends an answer
    max_prompt_tokens: int = 0

    @classmethod
    def of(cls, data: dict | None) -> Settings:
        """Settings from a request (missing ones at their defaults). Raises ValueError with a Msg naming the setting
        and its bounds."""
        if data is not None and not isinstance(data, dict):
            raise ValueError(say("chat.setting_bad", name="settings", got=type(data).__name__, low="-", high="-"))
        values = {}
        for f in fields(cls):
            if (data or {}).get(f.name) is None:
                continue
            values[f.name] = _bounded(f.name, data[f.name])
        return cls(**values)


def _bounded(name: str, value) -> int | float:
    b = BOUNDS[name]
    try:
        x = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x) or not b.low <= x <= b.high or (b.whole and not x.is_integer()):
        raise ValueError(say("chat.setting_bad", name=name, got=repr(value)[:40], low=f"{b.low:g}", high=f"{b.high:g}"))
    return int(x) if b.whole else x


def request_problem(sides: list[dict], settings: dict | None) -> Msg | None:
    """Why a request is refused before it is sent (a setting out of bounds, a conversation past
    MAX_PROMPT_CHARS characters, a request past MAX_REQUEST_BYTES), or None."""
    try:
        Settings.of(settings)
    except ValueError as e:
        return e.args[0]
    for side in sides:
        chars = sum(len(str(m.get("content") or "")) for m in side.get("messages") or [])
        if chars > MAX_PROMPT_CHARS:
            return say("chat.prompt_too_many_chars", n=f"{chars:,}", limit=f"{MAX_PROMPT_CHARS:,}")
    size = len(json.dumps({"sides": sides, "settings": settings}, ensure_ascii=False).encode("utf-8"))
    if size > MAX_REQUEST_BYTES - 1024:  # the rest of the line: the op, the token, the id
        return say("chat.request_too_big", n=f"{size:,}", limit=f"{MAX_REQUEST_BYTES:,}")
    return None


# --- the worker's keep-alive: minutes without a request, then it unloads itself ------------------------------------
IDLE_MINUTES = 15.0  # the page's and the CLI's default
MAX_IDLE_MINUTES = 7 * 24 * 60.0  # a week: a worker that never unloads would hold its devices from every job


def idle_minutes(value) -> float:
    """``value`` as the minutes a loaded model may sit unused before its worker unloads it. Raises ValueError with a Msg
    naming the field: 0 (it would unload before the first question), a negative number (Ollama's "forever": here a
    worker that never unloads would hold its devices from every training job), more than a week, not a number.

    Any positive number of minutes, fractions too (0.5: 30 s); the clock starts when the model is loaded and again
    after each answer."""
    try:
        x = float(value) if not isinstance(value, bool) and value is not None and str(value).strip() else math.nan
    except (TypeError, ValueError):
        x = math.nan
    bounds = {"got": str(value).strip()[:40] or '""', "high": f"{MAX_IDLE_MINUTES:g}"}  # as typed
    if not math.isfinite(x):
        raise ValueError(say("chat.idle_not_a_number", **bounds))
    if x == 0:
        raise ValueError(say("chat.idle_zero", **bounds))
    if x < 0:
        raise ValueError(say("chat.idle_negative", **bounds))
    if x > MAX_IDLE_MINUTES:
        raise ValueError(say("chat.idle_too_long", **bounds))
    return x
