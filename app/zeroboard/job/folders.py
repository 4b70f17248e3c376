"""Output folders that cannot destroy anything, and checkpoints that are whole or absent.

A run folder is one ZeroBoard made: the first thing a run writes into it is
its ownership marker (``zeroboard_run.json``: a run id, the folder it was made
for, whether the run made the folder), and the run's record agrees with it:
its ``state.json`` (or, before its supervisor's first word, its
``launch.json``) names the same run id and folder, and so does the runs index
where it has an entry.  A marker without such a record (copied, or written by
hand beside a user's files), or one its record or the index contradicts, is
not ownership: the folder is foreign.  A run writes only into a new (or
empty) folder, or into a folder it owns -- to resume it, or to run again
where an earlier attempt left nothing.  Any other non-empty folder is refused,
naming what is in it, whatever the names of its files: a folder holding a
user's ``command.json`` or ``state.json`` is still the user's.  Inside a run
folder the run's own files are what it wrote (:mod:`.manifest`: its record
files and ``state.json``'s ``written``); a file added since is foreign, and
the folder is refused again.  Also refused: the model's
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

from .. import files, safeload, workspace
from ..words import Msg, say
from . import manifest, record
from .manifest import NODE_DIR, OWN_TEMP
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



@dataclass
class Ownership:
    """Whose a folder is: "new" (missing or empty), "owned" (a run of this workspace) or "foreign"."""

    kind: str
    run_id: str | None = None
    foreign: list[str] = field(default_factory=list)  # names the run did not write
    why: Msg | None = None  # for "foreign": what makes it so
    own: manifest.Own | None = None  # for "owned": what its runs wrote (None: not known, a run that never ended)


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


UNREADABLE = object()  # a record file that is there but cannot be read


def read_record(path: Path):
    """A run's record file as a dict; None when there is none; UNREADABLE when it is there but not one."""
    try:
        data = safeload.json_text(safeload.read_text(path, safeload.Limits(64 << 20)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return UNREADABLE
    return data if isinstance(data, dict) else UNREADABLE


def _same(folder: object, out: Path) -> bool:
    try:
        return isinstance(folder, str) and Path(folder).resolve() == out.resolve()
    except (OSError, ValueError):
        return False


def _disagreement(out: Path, mark: dict, entry: dict | None, state) -> Msg | None:
    """Why the marker is not this folder's run: the index, the marker's folder or the run's record disagree."""
    run_id = mark["run_id"]
    if entry is not None and entry.get("run_id") != run_id:
        return say("check.folder_other_run", run_id=run_id[:8])
    if entry is None and not _same(mark.get("folder"), out):  # a copy of another run's folder (the index follows moves)
        return say("check.folder_copied", folder=str(mark.get("folder")))
    if state is UNREADABLE:
        return say("check.folder_state_unreadable", file=record.STATE_FILE)
    if state is None:  # before the supervisor's first word: the request it was started with
        launch = read_record(out / record.LAUNCH_FILE)
        if not isinstance(launch, dict) or launch.get("run_id") != run_id:
            return None if entry is not None else say("check.folder_no_state", file=record.STATE_FILE)
        state = launch
    if state.get("run_id") not in (None, "", run_id):  # an older state names no run id: its folder must agree
        return say("check.folder_state_other", run_id=str(state["run_id"])[:8])
    if entry is None and state.get("run_dir") and not _same(state["run_dir"], out):
        return say("check.folder_copied", folder=str(state["run_dir"]))
    return None


def ownership(out: Path, index: Registry | None = None) -> Ownership:
    """Whose ``out`` is: its marker, its run's record and the runs index must agree."""
    names = [n for n in _names(out) if not OWN_TEMP.match(n)]
    if not _is_dir(out) or not (set(names) - _owned_nodes(out)):
        return Ownership("new")
    index = index or Registry()
    mark = marker(out)
    entry = index.entry(out.resolve()) or index.entry(out)
    state = read_record(out / record.STATE_FILE)
    if mark is None:
        legacy = entry is not None and not entry.get("run_id") and isinstance(state, dict)
        if legacy:  # a run of an earlier ZeroBoard, registered here before markers existed
            return _owned(out, None, names, state, entry)
        return Ownership("foreign", foreign=names, why=say("check.folder_unmarked"))
    why = _disagreement(out, mark, entry, state)
    if why is not None:
        return Ownership("foreign", foreign=names, why=why)
    return _owned(out, mark["run_id"], names, state, entry)


def _owned(out: Path, run_id: str | None, names: list[str], state, entry: dict | None) -> Ownership:
    """An owned folder, with what its runs wrote and the names in it they did not (nothing is known of a run that
    never ended: none)."""
    has_list = isinstance(state, dict) and (isinstance(state.get("written"), list) or isinstance(state.get("files"), list))
    listed = state if has_list else (entry or {}).get("outcome")  # a full disk kept the end in the index alone
    own = manifest.of_run(out, listed if isinstance(listed, dict) else None)
    if own is None:
        return Ownership("owned", run_id)
    nodes = _owned_nodes(out)
    if own.listed:
        found = [rel for rel in manifest.foreign(out, own) if rel.split("/", 1)[0] not in nodes]
    else:  # a run recorded before runs kept the list: its top-level names (a checkpoint is its own)
        found = [n for n in names if n not in own and n not in nodes and not CHECKPOINT.match(n) and not manifest.kept_copy(n)]
    return Ownership("owned", run_id, found, own=own)


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


@dataclass
class Claim:
    """A run's hold on its folder: its id, the folders the claim made (deepest first), whether the folder held no
    run before (the claim wrote its marker), and what the folder held that is not the run's (never its own)."""

    run_id: str
    created: list[Path]
    fresh: bool
    foreign: list[str]
    marked: bool = False  # this claim wrote the marker (a new folder, or a run of an earlier ZeroBoard)


def claim(run: Path, index: Registry, version: str = "") -> Claim:
    """Make ``run`` this run's folder, its marker first; call under the index's lock, before anything is written.

    A folder's run keeps its id across attempts.  Raises FolderTaken when the folder holds anything no run here
    wrote, or OSError when it cannot be made.
    """
    own = ownership(run, index)
    if own.kind == "foreign" or own.foreign:
        listed = ", ".join(own.foreign[:4]) + (", …" if len(own.foreign) > 4 else "")
        key = "check.output_foreign" if own.kind == "foreign" else "check.output_foreign_in_run"
        raise FolderTaken(say(key, path=str(run), files=listed, free=str(free_dir_name(run)), why=own.why or ""))
    created = sorted((d for d in (run, *run.parents) if not d.exists()), key=lambda d: len(d.parts), reverse=True)
    run.mkdir(parents=True, exist_ok=True)
    fresh = own.kind == "new"
    foreign = manifest.at_claim(run, own.own, fresh)
    run_id = own.run_id or uuid.uuid4().hex
    if own.run_id is None:  # new (or a legacy run): the marker goes first
        data = {"run_id": run_id, "folder": str(run.resolve()), "created": time.time(), "zeroboard": version,
                "made": run in created}
        try:
            fd = os.open(run / record.OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:  # another start got here first (the lock makes this a folder changed under us)
            raise FolderTaken(say("check.output_foreign", path=str(run), files=record.OWNER_FILE,
                                  free=str(free_dir_name(run)), why="")) from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2) + "\n")
    return Claim(run_id, created, fresh, foreign, marked=own.run_id is None)


def unclaim(run: Path, claimed: Claim) -> None:
    """Undo :func:`claim` after a launch that failed: in a folder that held no run, the record files written so far
    (nothing else of the run's can be there yet) and the folders the claim made; in a run's own folder, the marker
    alone when this claim wrote it (its record stays as it was left)."""
    names = record.RECORD_FILES if claimed.fresh else (record.OWNER_FILE,) if claimed.marked else ()
    for name in names:
        if name in claimed.foreign:
            continue
        with contextlib.suppress(OSError):
            (run / name).unlink()
    for d in claimed.created:
        with contextlib.suppress(OSError):
            d.rmdir()


def moved(run: Path) -> None:
    """Point the marker of a run folder moved by Archive or Restore at its new place (under the index's lock)."""
    mark = marker(run)
    if mark is not None:
        files.write_text_atomic(run / record.OWNER_FILE, json.dumps({**mark, "folder": str(run.resolve())}, indent=2) + "\n")
