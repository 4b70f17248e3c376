"""How a command reads to a person: the page's command box, ``zeroboard preview`` and ``zeroboard train``.

The argv runs as it is (``command.build``); a person reads the same argv in lines that paste into bash as one
command, run from the workspace folder:

- a path inside the workspace is written relative to it (``runs/demo``, ``.venv/bin/torchrun``: the same file from
  there), so neither the page nor a picture of it shows where a checkout lives; a tool PATH finds is already a bare
  name (``torchrun``, see ``command._launcher``);
- one unit per line: an environment assignment, the tool, or a flag with its value (``--learning_rate 0.005``),
  each line but the last ending in `` \\``, so a long command wraps between arguments, never inside one (a short
  one stays on one line).

``full=True`` keeps every path as the process receives it (absolute where it was), for a shell somewhere else.
"""

from __future__ import annotations

import re

from .. import workspace
from ..words import say, text as say_in
from .quoting import SHELL_NAME, Unwritable, shell

NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?")
INDENT = "  "
ONE_LINE = 100  # a command this short (``sbatch --parsable FILE``) stays one line


def units(argv: list[str]) -> list[list[str]]:
    """The argv in units: the tool, then each flag with its value (``-m zeroboard.training.train``, ``--tee 3``)."""
    out: list[list[str]] = []
    for arg in argv:
        is_value = not arg.startswith("-") or NUMBER.fullmatch(arg)  # a negative number is a value too
        if out and len(out[-1]) == 1 and out[-1][0].startswith("-") and is_value:
            out[-1].append(arg)
        else:
            out.append([arg])
    return out


def shown_arg(arg: str, full: bool = False) -> str:
    """One argument as a person reads it: a path inside the workspace relative to it (unless ``full``)."""
    return arg if full or not arg.startswith("/") else workspace.shown(arg)


def lines(env: dict[str, str], argv: list[str], full: bool = False) -> list[list[str]]:
    """The command's lines, each a list of bash words (quoted): the environment's assignments one a line, then the
    argv's units (:func:`units`); a short command on one line."""
    for name in env:
        if not SHELL_NAME.fullmatch(name):
            raise Unwritable(say("quote.env_name", name=name))
    out = [[f"{k}={shell(v)}"] for k, v in env.items()]
    out += [[shell(shown_arg(a, full)) for a in unit] for unit in units(argv)]
    flat = [w for line in out for w in line]
    return [flat] if len(" ".join(flat)) <= ONE_LINE else out


def text(env: dict[str, str], argv: list[str], full: bool = False, word=lambda w: w) -> str:
    """:func:`lines` as bash text: continuation lines indented, each line but the last ending in `` \\``;
    ``word`` dresses each word (the page wraps it in markup)."""
    rows = lines(env, argv, full)
    return " \\\n".join((INDENT if i else "") + " ".join(map(word, ws)) for i, ws in enumerate(rows))


def run_from(cwd: str, lang: str, full: bool = False) -> str:
    """The comment line above a shown command: the folder it runs from, as the workspace names it (unless ``full``)."""
    shown = cwd if full else workspace.shown(cwd)
    return say_in("page.run_from_workspace", lang) if shown == "." else say_in("cli.run_from", lang, cwd=shown)
