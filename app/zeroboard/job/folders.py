"""Output folders that cannot destroy anything, and checkpoints that are whole or absent.

A run folder is one ZeroBoard made: the first thing a run writes into it is
its ownership marker (``zeroboard_run.json``: a run id, the folder it was made
for), and the runs index records the same id.  A run writes only into a new
(or empty) folder, or into a folder it owns -- to resume it, or to run again
where an earlier attempt left nothing.  Any other non-empty folder is refused,
naming what is in it, whatever the names of its files: a folder holding a
user's ``command.json`` or ``state.json`` is still the user's.  Inside a run
folder the run's own files are its record, its checkpoints and what was
there when its last attempt ended (``state.json``'s ``files``); a file added
since is foreign, and the folder is refused again.  Also refused: the model's
or the data's own folder (or one inside them), a folder outside the
workspace, and a folder that cannot be created.  Each refusal says why and
proposes a free name.

A checkpoint is complete once the trainer has marked it (``CHECKPOINT_MARK``,
written after every rank finished its part); resume, ``inspect`` and the page
offer only complete ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import safeload, workspace
from ..words import Msg, say
from . import record
from .registry import Registry
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
    if not _is_dir(out):
        return []
    done, partial = checkpoints(out)
    marks = [p.name for p in done + partial]
    if (out / record.RESULT_FILE).is_file():
        marks.insert(0, record.RESULT_FILE)
    return marks


NODE_DIR = re.compile(r"^node-(\d+)$")  # node N's part of a job on several machines keeps its record here
OWN_TEMP = re.compile(r"^\.(?:.+\.tmp|zeroboard-disk-probe|zeroboard-probe-.*)$")  # our atomic writes in flight


@dataclass
class Ownership:
    """Whose a folder is: "new" (missing or empty), "owned" (a run of this workspace) or "foreign"."""

    kind: str
    run_id: str | None = None
    foreign: list[str] = field(default_factory=list)  # names the run did not write
    why: Msg | None = None  # for "foreign": what makes it so


def marker(out: Path) -> dict | None:
    """The folder's ownership marker, when it holds a well-formed one."""
    try:
        data = safeload.json_text(safeload.read_text(out / record.OWNER_FILE, safeload.Limits(4096)))
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and isinstance(data.get("run_id"), str) and re.fullmatch(r"[0-9a-f]{32}", data["run_id"])
    return data if ok else None


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:  # a name too long to exist
        return False


def _names(out: Path) -> list[str]:
    try:
        return sorted(p.name for p in out.iterdir())
    except OSError:
        return []


def _owned_nodes(out: Path) -> set[str]:
    """``node-N`` subfolders that are run folders of their own (the other machines' parts of a job)."""
    return {n for n in _names(out) if NODE_DIR.match(n) and marker(out / n) is not None}


def ownership(out: Path, index: Registry | None = None) -> Ownership:
    """Whose ``out`` is, by its marker and the runs index (which must agree)."""
    names = [n for n in _names(out) if not OWN_TEMP.match(n)]
    if not _is_dir(out) or not (set(names) - _owned_nodes(out)):
        return Ownership("new")
    index = index or Registry()
    mark = marker(out)
    entry = index.entry(out.resolve()) or index.entry(out)
    if mark is None:
        legacy = entry is not None and not entry.get("run_id") and record.STATE_FILE in names
        if legacy:  # a run of an earlier ZeroBoard, registered here before markers existed: all of it is its own
            return Ownership("owned")
        return Ownership("foreign", foreign=names, why=say("check.folder_unmarked"))
    run_id = mark["run_id"]
    if entry is not None and entry.get("run_id") != run_id:
        return Ownership("foreign", foreign=names, why=say("check.folder_other_run", run_id=run_id[:8]))
    if entry is None and str(mark.get("folder")) != str(out.resolve()):  # a copy of another run's folder
        return Ownership("foreign", foreign=names, why=say("check.folder_copied", folder=str(mark.get("folder"))))
    return Ownership("owned", run_id, _foreign_in_run(out, names))


def _foreign_in_run(out: Path, names: list[str]) -> list[str]:
    """Names in a run folder that its runs did not write (nothing is known of a run that never ended: none)."""
    try:
        listed = json.loads((out / record.STATE_FILE).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        listed = None
    if not isinstance(listed, list):
        return []
    own = set(record.RECORD_FILES) | {record.OWNER_FILE} | set(map(str, listed)) | _owned_nodes(out)
    return [n for n in names if n not in own and not CHECKPOINT.match(n)]


def listing(out: Path) -> list[str]:
    """What a run's folder holds when the run ends (its own files from then on)."""
    return [n for n in _names(out) if not OWN_TEMP.match(n)]


def foreign_files(out: Path, index: Registry | None = None) -> list[str]:
    """Names in an existing folder that no run of this workspace wrote (a folder no run owns: all of them)."""
    return ownership(out, index).foreign


def free_dir_name(out: Path) -> Path:
    """The next free ``NAME-N`` beside ``out`` (``demo-2`` is followed by ``demo-3``, not ``demo-2-2``)."""
    m = re.fullmatch(r"(.+)-(\d+)", out.name)
    stem, i = (m.group(1), int(m.group(2)) + 1) if m else (out.name, 2)
    while (candidate := out.with_name(f"{stem}-{i}")).exists():
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


def output_problem(spec: JobSpec, index: Registry | None = None) -> tuple[str, Msg] | None:
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
    own = ownership(out, index)
    if own.kind == "new":
        return ("resume", say("check.resume_nothing", path=shown)) if spec.resume else None
    free = free_dir_name(out)
    if own.foreign:
        listed = ", ".join(own.foreign[:4]) + (", …" if len(own.foreign) > 4 else "")
        key = "check.output_foreign" if own.kind == "foreign" else "check.output_foreign_in_run"
        return "output_dir", say(key, path=shown, files=listed, free=str(free), why=own.why or "")
    if spec.resume:
        done, partial = checkpoints(out)
        if not done:
            why = say("check.resume_partial", names=", ".join(p.name for p in partial)) if partial else ""
            return "resume", say("check.resume_none", path=shown, why=why)
        return None
    marks = run_marks(out)
    if marks:
        return "output_dir", say("check.output_has_run", path=shown, marks=", ".join(marks[:3]), free=str(free))
    return None


class FolderTaken(RuntimeError):
    """The folder is no longer free for this run (it changed since the check). The message says what is in it."""


def claim(run: Path, index: Registry, version: str = "") -> tuple[str, list[Path]]:
    """Make ``run`` this run's folder, its marker first; call under the index's lock, before anything is written.

    Returns the run id (a folder's run keeps its id across attempts) and the folders it created (for the caller
    to remove should the launch fail).  Raises FolderTaken when the folder holds anything no run here wrote, or
    OSError when it cannot be made.
    """
    own = ownership(run, index)
    if own.kind == "foreign" or own.foreign:
        listed = ", ".join(own.foreign[:4]) + (", …" if len(own.foreign) > 4 else "")
        key = "check.output_foreign" if own.kind == "foreign" else "check.output_foreign_in_run"
        raise FolderTaken(say(key, path=str(run), files=listed, free=str(free_dir_name(run)), why=own.why or ""))
    created = [d for d in (run, *run.parents) if not d.exists()]
    run.mkdir(parents=True, exist_ok=True)
    run_id = own.run_id or uuid.uuid4().hex
    if own.run_id is None:  # new (or a legacy run): the marker goes first
        data = {"run_id": run_id, "folder": str(run.resolve()), "created": time.time(), "zeroboard": version}
        try:
            fd = os.open(run / record.OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:  # another start got here first (the lock makes this a folder changed under us)
            raise FolderTaken(say("check.output_foreign", path=str(run), files=record.OWNER_FILE,
                                  free=str(free_dir_name(run)), why="")) from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2) + "\n")
    return run_id, sorted(created, key=lambda d: len(d.parts), reverse=True)


def unclaim(run: Path, created: list[Path]) -> None:
    """Undo :func:`claim` after a launch that failed, in a folder it created: the record files written so far
    (nothing else can be in it), then the folders themselves."""
    if not created:
        return  # an existing run folder: its record stays as it was left
    for name in record.RECORD_FILES:
        with contextlib.suppress(OSError):
            (run / name).unlink()
    for d in created:
        with contextlib.suppress(OSError):
            d.rmdir()
