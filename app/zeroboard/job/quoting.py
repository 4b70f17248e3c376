"""How a value is written into text another program reads, and which characters no name or path may hold.

Every script or file ZeroBoard generates writes each value it did not type itself through one of these
functions, never by pasting it into an f-string: :func:`shell` for a bash word (the sbatch script, the preview's
shell line, the commands shown for trackers and exports), :func:`sbatch_value` for the value of an ``#SBATCH``
option, :func:`one_line` for a name shown in a comment or a heading (the Modelfile's header, the model card).
A value that cannot be written so that it reads back as itself raises :class:`Unwritable`; nothing is written
"nearly right".

Names and paths (every text field of the job spec, ``extra_args``' strings, the command line's paths) may not
hold control characters: C0 (tab and newline among them), DEL, C1, and the Unicode line and paragraph separators.
A newline in a folder name ends a comment line of a script or a header line of a Modelfile, and what follows
becomes a command or a directive; :func:`refusal` says which character, where.
"""

from __future__ import annotations

import re
import shlex

from ..words import Msg, say

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SBATCH_PLAIN = re.compile(r"[\w@%+=:,./-]+", re.ASCII)  # written as they are on an #SBATCH line


class Unwritable(ValueError):
    """A value that cannot be written into the text asked for; ``args[0]`` is a catalog Msg."""


def shown(char: str) -> str:
    """A character as Python escapes it in a string: \\n, \\t, \\x1b, \\x85, \\u2028."""
    return repr(char)[1:-1]


def control(text: str) -> tuple[int, str] | None:
    """The first control character of ``text``: (its position counted from 1, the character escaped); else None."""
    found = CONTROL.search(text)
    return (found.start() + 1, shown(found.group())) if found else None


def refusal(text: str) -> Msg | None:
    """Why ``text`` cannot be a name or a path (its first control character, and where); None when it can."""
    found = control(text)
    if found is None:
        return None
    got = repr(text) if len(text) <= 80 else repr(text[:79]) + "…"
    return say("spec.control", char=found[1], pos=found[0], got=got)


def control_within(value: object, where: str = "") -> tuple[str, int, str] | None:
    """The first control character in a mapping's or list's keys and strings, at any depth: (where, as
    ``key.sub[2]``; its position; the character escaped); None when there is none."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        here = (f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]") if where else str(k)
        found = (control(k) if isinstance(k, str) else None) or (control(v) if isinstance(v, str) else None)
        if found is not None:
            return one_line(here), *found
        deeper = control_within(v, here)
        if deeper is not None:
            return deeper
    return None


def one_line(text: str) -> str:
    """``text`` on one line, each control character written as its escape: a name shown in a comment or heading."""
    return CONTROL.sub(lambda m: shown(m.group()), text)


def shell(text: str) -> str:
    """``text`` as one bash word that expands to exactly ``text``, nothing in it run or expanded.

    Single quotes (shlex) where it is printable; where it holds control characters, bash's $'...' with each such
    character written as its UTF-8 bytes (\\xHH), so a shown command stays on one line and a terminal reading it
    is sent no escape sequence.  A NUL cannot be in an argument at all."""
    if "\x00" in text:
        raise Unwritable(say("quote.nul"))
    if not CONTROL.search(text):
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif CONTROL.fullmatch(ch):
            out.extend(f"\\x{b:02x}" for b in ch.encode())
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def shell_line(env: dict[str, str], argv: list[str]) -> str:
    """A bash command line: the environment's assignments, then the argv, each value one :func:`shell` word."""
    for name in env:
        if not SHELL_NAME.fullmatch(name):
            raise Unwritable(say("quote.env_name", name=one_line(name)))
    return " ".join([*(f"{k}={shell(v)}" for k, v in env.items()), *map(shell, argv)])


def sbatch_value(text: str) -> str:
    """A value for an ``#SBATCH`` line, as sbatch reads it back.

    sbatch splits the line at blanks outside quotes, reads an unquoted ``#`` as the start of a comment and a
    backslash as an escape (inside quotes too), and ends the option at the line's end: a value of other characters
    than SBATCH_PLAIN goes in double quotes with ``\\`` and ``"`` escaped.  A line break cannot be written there at
    all (nor another control character): Unwritable."""
    found = control(text)
    if found is not None:
        raise Unwritable(say("quote.sbatch_control", char=found[1], pos=found[0]))
    if SBATCH_PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
