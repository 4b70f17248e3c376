"""The workspace: the folders a job (and the web page) may read and write.

ZeroBoard works inside one folder, the workspace (the folder it was started
from, or ``$ZEROBOARD_WORKSPACE``).  Whoever starts it may allow more folders
(``--allow-path PATH[:rw]``, kept in ``$ZEROBOARD_ALLOW_PATHS`` so the
processes it starts agree): read-only unless marked ``:rw``.  Models and
datasets may also be read from the Hugging Face cache.

Every path a user types is resolved (``~`` expanded, relative to the
workspace, symbolic links followed) before it is compared, so neither
``../..`` nor a link leads out.  A path no filesystem can hold (a NUL byte)
is :class:`BadPath`, never a bare ``ValueError`` from deep inside ``os``; such
a path is neither readable nor writable here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

WORKSPACE_ENV = "ZEROBOARD_WORKSPACE"
ALLOW_ENV = "ZEROBOARD_ALLOW_PATHS"  # "PATH[:rw|:ro],PATH..."


class BadPath(ValueError):
    """A path no filesystem can hold; ``key`` is the catalog entry saying why (``safe.nul_in_path``)."""

    key = "safe.nul_in_path"


def has_nul(path: str | Path) -> bool:
    return "\0" in str(path)


def resolve(path: str | Path, base: Path) -> Path:
    """An absolute path with every existing link followed; a missing tail is kept as written (``..`` folded).
    Raises BadPath for a path with a NUL byte (``os`` would raise a bare ValueError)."""
    if has_nul(path) or has_nul(base):
        raise BadPath(str(path)[:200])
    p = Path(os.path.expanduser(str(path)))
    return Path(os.path.realpath(p if p.is_absolute() else base / p))


def too_long(value: str | Path, base: Path) -> tuple[str, int, int] | None:
    """The first part of a path longer than the filesystem takes, as (part, its bytes, the limit); the whole
    path as ("", its bytes, the limit) when it is too long. None when every part fits.

    Checked before the path is used at all: on Linux even asking whether such a path exists raises
    ENAMETOOLONG.  The limits are asked of the nearest existing folder's filesystem."""
    text = os.path.expanduser(str(value))
    full = text if os.path.isabs(text) else os.path.join(str(base), text)
    name_max, path_max = _limits(full)
    for part in Path(full).parts:
        n = len(os.fsencode(part))
        if n > name_max:
            return part, n, name_max
    n = len(os.fsencode(full))
    return ("", n, path_max) if n >= path_max else None


def _limits(path: str) -> tuple[int, int]:
    here = path
    while here and len(os.fsencode(here)) < 4096:
        try:
            if os.path.isdir(here):
                return os.pathconf(here, "PC_NAME_MAX"), os.pathconf(here, "PC_PATH_MAX")
        except (OSError, ValueError):
            pass
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return 255, 4096


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def cache_dir() -> Path:
    """Where the DeepSpeed presets (and the demo model, the runs index) live: ``$ZEROBOARD_CACHE`` or ``cache``."""
    return Path(os.environ.get("ZEROBOARD_CACHE", "cache"))


def hf_cache() -> Path:
    """The Hugging Face hub cache, where models and datasets fetched before are kept."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(os.path.expanduser(home))


@dataclass(frozen=True)
class Workspace:
    root: Path
    allowed: tuple[tuple[Path, bool], ...] = field(default=())  # (folder, writable)

    def path(self, value: str | Path) -> Path:
        return resolve(value, self.root)

    def writable(self, value: str | Path) -> bool:
        if has_nul(value):
            return False
        p = self.path(value)
        return any(_inside(p, r) for r, w in self.roots() if w)

    def readable(self, value: str | Path, cache_ok: bool = False) -> bool:
        if has_nul(value):
            return False
        p = self.path(value)
        roots = [r for r, _ in self.roots()] + ([resolve(hf_cache(), self.root)] if cache_ok else [])
        return any(_inside(p, r) for r in roots)

    def roots(self) -> list[tuple[Path, bool]]:
        return [(self.root, True), *self.allowed]

    def describe(self) -> str:
        """The roots as one line: the workspace, then each allowed folder with (rw) or (ro)."""
        return ", ".join([str(self.root)] + [f"{r} ({'rw' if w else 'ro'})" for r, w in self.allowed])


def parse_allowed(text: str, base: Path) -> tuple[tuple[Path, bool], ...]:
    out = []
    for item in (s.strip() for s in (text or "").split(",")):
        if not item:
            continue
        path, _, mode = item.rpartition(":") if item.endswith((":rw", ":ro")) else (item, "", "ro")
        out.append((resolve(path, base), mode == "rw"))
    return tuple(out)


def current() -> Workspace:
    """The workspace of this process: ``$ZEROBOARD_WORKSPACE`` or the working folder, plus ``$ZEROBOARD_ALLOW_PATHS``."""
    root = resolve(os.environ.get(WORKSPACE_ENV) or os.getcwd(), Path.cwd())
    return Workspace(root, parse_allowed(os.environ.get(ALLOW_ENV, ""), root))


def shown(path: str | Path, ws: Workspace | None = None) -> str:
    """A path as the page shows it: relative to the workspace when inside it (``runs/demo``), else as it is.

    The page and the documentation images never show where a checkout happens to live.  A path is inside when it
    is written inside (``/ws/.venv/bin/torchrun`` is ``.venv/bin/torchrun``, though ``.venv`` may link elsewhere)
    or when it leads inside once its links are followed; either way the relative form, read from the workspace
    folder, names the same file."""
    p = Path(path)
    if not p.is_absolute() or has_nul(path):
        return str(path)
    roots = [ws.root] if ws else [current().root, Path(os.path.abspath(os.environ.get(WORKSPACE_ENV) or os.getcwd()))]
    for candidate in (Path(os.path.normpath(p)), Path(os.path.realpath(p.parent)) / p.name, Path(os.path.realpath(p))):
        for root in roots:
            if _inside(candidate, root):
                return candidate.relative_to(root).as_posix() or "."
    return str(path)


def shown_in(text: str, *paths: str | Path | None, ws: Workspace | None = None) -> str:
    """``text`` (a message, a listing) with each of these paths named as the workspace names it (:func:`shown`)."""
    for p in sorted((str(p) for p in paths if p), key=len, reverse=True):
        text = text.replace(p, shown(p, ws))
    return text


# an installed package's file (a library's warning in a log): everything before site-packages/ is the machine's
_INSTALLED = re.compile(r"(?<![\w.~-])/(?:[^\s/:'\"()]+/)*?((?:site|dist)-packages/)")


def shown_log(line: str, ws: Workspace | None = None) -> str:
    """A log line as the page shows it: an installed package's file from ``site-packages/`` on (``site-packages/
    torch/utils/checkpoint.py:86: FutureWarning``), the workspace's own files as the workspace names them."""
    line = _INSTALLED.sub(r"\1", line)
    root = str((ws or current()).root).rstrip("/")
    return line.replace(root + "/", "") if root else line


def allow(paths: list[str]) -> None:
    """Add ``PATH[:rw|:ro]`` entries for this process and the processes it starts (``--allow-path``)."""
    if paths:
        old = os.environ.get(ALLOW_ENV, "")
        os.environ[ALLOW_ENV] = ",".join([p for p in (old, *paths) if p])
