"""One value of a job file, a form or a command line, read as a field's type: numbers, text (a name, a path or an
option: bounded, no control character), and a wrong value as a message quotes it.

Light (stdlib only): the web server reads forms with it.
"""

from __future__ import annotations

import math
from typing import Any

from ..words import say
from .quoting import refusal

# The longest text a field takes: paths (PATH_MAX is 4096 bytes on Linux), names, the extra arguments' JSON.
# A longer value is a mistake (a pasted file), refused by name before anything reads it.
MAX_TEXT = 4096


def number(value: Any, whole: bool) -> int | float:
    kind = "spec.whole" if whole else "spec.number"
    if isinstance(value, bool) or isinstance(value, (dict, list)):
        raise ValueError(say(kind, got=shown(value)))
    if isinstance(value, str):
        try:
            value = float(value.strip()) if not whole or any(c in value for c in ".eE") else int(value.strip())
        except ValueError:
            raise ValueError(say(kind, got=shown(value))) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(say("spec.finite", got=shown(value)))
    if whole:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(say(kind, got=shown(value)))
            value = int(value)
        return int(value)
    return float(value)


def text(value: Any, limit: int = MAX_TEXT) -> str:
    """A scalar as text, refused when longer than ``limit`` characters (before it is stripped or shown)."""
    s = value if isinstance(value, str) else str(value)
    if len(s) > limit:
        raise ValueError(say("spec.too_long", n=f"{len(s):,}", limit=f"{limit:,}"))
    s = s.strip()
    problem = refusal(s)  # every text field is a name, a path or an option: none holds a control character
    if problem is not None:
        raise ValueError(problem)
    return s


def shown(value: Any, limit: int = 80) -> str:
    """A wrong value as a message quotes it: its repr, cut (a pasted megabyte is not echoed back)."""
    if isinstance(value, (dict, list, tuple)):
        return f"a {type(value).__name__} of {len(value)} entries"
    s = repr(value)
    return s if len(s) <= limit else s[: limit - 1] + "…"
