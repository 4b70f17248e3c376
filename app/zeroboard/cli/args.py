"""The command line's own argument types: a path or a run name is a name (no control character in it)."""

from __future__ import annotations

import argparse

from ..job.quoting import refusal
from ..words import default_lang, tr


def path(value: str) -> str:
    """A path or run name as typed: argparse refuses it, naming the argument, when it holds a control character (a
    newline, a tab, an escape): the same rule as the job's own path fields."""
    problem = refusal(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(tr(problem, default_lang()))
    return value
