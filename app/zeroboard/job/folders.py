"""Output folders that cannot destroy anything, and checkpoints that are whole or absent.

A run writes only into a new folder, or into a folder that already holds a
ZeroBoard run (to resume it).  A folder with anything else in it -- a model,
a dataset, a user's files -- is refused, and so is the model's or the data's
own folder (or one inside them), a folder outside the workspace, and a
folder that cannot be created.  Each refusal says why and proposes a free
name.

A checkpoint is complete once the trainer has marked it (``CHECKPOINT_MARK``,
written after every rank finished its part); resume, ``inspect`` and the page
offer only complete ones.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from .. import workspace
from ..words import Msg, say
from . import record
from .spec import JobSpec

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
CHECKPOINT_MARK = "zeroboard_checkpoint.json"  # written last, by rank 0, when every rank has saved its part


def checkpoints(out: Path) -> tuple[list[Path], list[Path]]:
    """(complete, incomplete) ``checkpoint-N`` folders of a run, each list by step."""
    found = sorted((p for p in out.glob("checkpoint-*") if p.is_dir() and CHECKPOINT.match(p.name)),
                   key=lambda p: int(CHECKPOINT.match(p.name).group(1)))
    done = [p for p in found if (p / CHECKPOINT_MARK).is_file()]
    return done, [p for p in found if p not in done]


def last_checkpoint(out: Path) -> Path | None:
    done, _ = checkpoints(out)
    return done[-1] if done else None


def run_marks(out: Path) -> list[str]:
    """What in ``out`` shows an earlier run: a result file or checkpoints (complete or not)."""
    if not out.is_dir():
        return []
    done, partial = checkpoints(out)
    marks = [p.name for p in done + partial]
    if (out / record.RESULT_FILE).is_file():
        marks.insert(0, record.RESULT_FILE)
    return marks


def is_run_folder(out: Path) -> bool:
    """Whether ``out`` holds a ZeroBoard run: its record files (and what the trainer saves) only."""
    try:
        names = {p.name for p in out.iterdir()}
    except OSError:
        return False
    return bool(names & {record.STATE_FILE, record.COMMAND_FILE})  # written before anything else of a run


def foreign_files(out: Path) -> list[str]:
    """Names in an existing folder that ZeroBoard did not write (a non-run folder: all of them)."""
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError:
        return []
    if not is_run_folder(out):
        return names
    return []  # a run folder: what the trainer saved (weights, tokenizer, checkpoints) is the run's own


def free_dir_name(out: Path) -> Path:
    i = 2
    while (candidate := out.with_name(f"{out.name}-{i}")).exists():
        i += 1
    return candidate


def _creatable(path: Path) -> bool:
    """Whether ``path`` (missing) can be made: probe-create a folder in its nearest existing ancestor."""
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return False
    try:
        probe = tempfile.mkdtemp(prefix=".zeroboard-probe-", dir=parent)
    except OSError:
        return False
    os.rmdir(probe)
    return True


def _within(p: Path, other: str, ws: workspace.Workspace) -> bool:
    if not other:
        return False
    o = ws.path(other)
    return p == o or o in p.parents or (p in o.parents and o.exists())


def output_problem(spec: JobSpec) -> tuple[str, Msg] | None:
    """Why the job's output folder cannot be used, as (field, message); None when it can."""
    if not spec.output_dir:
        return "output_dir", say("check.output_empty")
    ws = workspace.current()
    out = ws.path(spec.output_dir)
    shown = spec.output_dir
    if not ws.writable(out):
        return "output_dir", say("check.output_outside", path=shown, roots=ws.describe())
    if _within(out, spec.model_name_or_path, ws):
        return "output_dir", say("check.output_is_model", path=shown)
    if _within(out, spec.dataset_dir, ws):
        return "output_dir", say("check.output_is_data", path=shown)
    if out.exists() and not out.is_dir():
        return "output_dir", say("check.output_is_file", path=shown)
    if not out.exists():
        if spec.resume:
            return "resume", say("check.resume_nothing", path=shown)
        return None if _creatable(out) else ("output_dir", say("check.output_uncreatable", path=shown))
    if not os.access(out, os.W_OK | os.X_OK):
        return "output_dir", say("check.output_unwritable", path=shown)
    free = free_dir_name(out)
    others = foreign_files(out)
    if others:
        listed = ", ".join(others[:4]) + (", …" if len(others) > 4 else "")
        return "output_dir", say("check.output_foreign", path=shown, files=listed, free=str(free))
    marks = run_marks(out)
    if spec.resume:
        done, partial = checkpoints(out)
        if not done:
            why = say("check.resume_partial", names=", ".join(p.name for p in partial)) if partial else ""
            return "resume", say("check.resume_none", path=shown, why=why)
        return None
    if marks:
        return "output_dir", say("check.output_has_run", path=shown, marks=", ".join(marks[:3]), free=str(free))
    return None
