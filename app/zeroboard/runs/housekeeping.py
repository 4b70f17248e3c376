"""Deleting and archiving runs: never a running run, never anything the run did not write.

A run may be deleted or archived only when it is a run of this workspace's
index that has ended (its state, as the manager finds it, is not active) and
its folder is one ZeroBoard made for it (``job.folders.ownership``: its
marker, its record and the index agree), inside the folders this workspace
may write, not a symbolic link, and holding no other registered run.  The
check runs again under the index's lock right before anything is touched.

- **Delete** removes exactly what the run wrote (``job.manifest``: its record
  files and every file and folder that appeared in its folder while it ran),
  deepest first, its marker and state last; a folder the run wrote goes only
  once it is empty, and the run folder itself only when the run made it.
  Anything else -- a file put there before the run or after it ended -- stays,
  and the message names it.  Then its index entry goes (through the index's
  one writer, :class:`..job.registry.Registry`).
- **Archive** moves the folder into ``.archive/`` beside it (``runs/demo`` ->
  ``runs/.archive/demo``; one rename on the same disk, nothing copied), points
  its marker, its ``state.json`` and its index entry at the new place, and
  marks the entry ``archived`` (with where it came from).  A folder holding
  files the run did not write is refused, naming them: the move is of one
  folder, whole, and would take them along (Delete leaves them).  The Runs
  page lists archived runs apart; **Restore** moves one back when its old
  name is free.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .. import workspace
from ..job import folders, manifest, record
from ..job.registry import RegistryError
from ..words import Msg, say
from .manager import JobManager
from .state import read_state, write_state, writer_gone

ARCHIVE_DIR = ".archive"


class Refused(RuntimeError):
    """The run cannot be deleted or archived now; the message (a catalog Msg) says why. Nothing was touched."""


def _inside(path: Path, other: Path) -> bool:
    return path != other and path in other.parents


def why_not(manager: JobManager, run_dir: str, action: str = "delete") -> Msg | None:
    """Why ``run_dir`` must not be deleted (or, ``action`` "archive" or "restore", moved) now, or None when it may."""
    entry = manager.registry.entry(run_dir)
    if entry is None:
        return say("runs.not_registered", run=run_dir)
    st = manager.state_of(entry)
    if st.active:
        return say("runs.refuse_active", run=run_dir, status=say(f"status.{st.status}"))
    path = Path(run_dir)
    if path.is_symlink():
        return say("runs.refuse_link", run=run_dir)
    if not path.is_dir():
        return None  # nothing left on disk: only the index entry goes
    ws = workspace.current()
    if not ws.writable(path) or any(path.resolve() == root for root, _ in ws.roots()):
        return say("runs.refuse_outside", run=run_dir, roots=ws.describe())
    own = folders.ownership(path, manager.registry)
    if own.kind != "owned":
        return say("runs.refuse_not_owned", run=run_dir, why=own.why or "")
    if own.foreign and action != "delete":
        return say("runs.refuse_foreign", run=run_dir, files=_names(own.foreign))
    resolved = path.resolve()
    nested = [e["run_dir"] for e in manager.registry.entries()
              if e.get("run_dir") and _inside(Path(e["run_dir"]).resolve(), resolved)]
    if nested:
        return say("runs.refuse_nested", run=run_dir, other=nested[0])
    return None


def _names(paths: list[str], n: int = 6) -> str:
    return ", ".join(paths[:n]) + (", …" if len(paths) > n else "")


def split(manager: JobManager, run_dir: str) -> tuple[list[str], list[str]]:
    """(what the run wrote, what else its folder holds: topmost paths), both relative to the folder."""
    path = Path(run_dir)
    own = folders.ownership(path, manager.registry).own
    if own is None:  # a run that left no list (one of an early ZeroBoard): its files not older than the run
        state = folders.read_record(path / record.STATE_FILE)
        own = manifest.legacy(path, state if isinstance(state, dict) else {}, [p.name for p in path.iterdir()])
    paths = manifest.tree(path)
    return [p for p in paths if p in own], manifest.topmost(p for p in paths if p not in own)


def _last(rel: str) -> tuple:
    """Deepest first; the record files at the top after the rest, the marker and the state the very last (a
    deletion cut short leaves a folder still known as the run's, to delete again)."""
    final = {record.OWNER_FILE: 3, record.STATE_FILE: 2}.get(rel, 1 if rel in manifest.RECORDS else 0)
    return (final, -rel.count("/"), rel)


def _remove(path: Path, mine: list[str]) -> list[str]:
    """Remove the run's own paths (a folder only once empty); the ones that could not be removed."""
    failed = []
    for rel in sorted(mine, key=_last):
        p = path / rel
        try:
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            if not (p.is_dir() and any(p.iterdir())):  # a folder of the run's still holding what it did not write
                failed.append(f"{rel} ({e.strerror or e})")
    return failed


def delete(manager: JobManager, run_dir: str) -> Msg:
    """Remove what the run wrote and its index entry; the message names what stayed. Raises Refused (nothing
    touched) with the reason."""
    left: list[str] = []
    kept_folder = False
    try:
        with manager.registry.locked():
            why = why_not(manager, run_dir)
            if why is not None:
                raise Refused(why)
            path = Path(run_dir)
            if path.is_dir():
                made = (folders.marker(path) or {}).get("made", True)  # read before the marker goes
                mine, left = split(manager, run_dir)
                failed = _remove(path, mine)
                if failed:
                    raise Refused(say("runs.delete_partial", run=run_dir, files=_names(failed, 4)))
                if made and not left:
                    try:
                        path.rmdir()
                    except OSError:  # something was put there meanwhile: it stays, named
                        left = manifest.topmost(manifest.tree(path))
                kept_folder = not made and not left
            manager.registry.remove(run_dir)
    except RegistryError as e:
        raise Refused(e.args[0]) from None
    except OSError as e:
        raise Refused(say("runs.delete_partial", run=run_dir, files=e.strerror or str(e))) from None
    if left:
        return say("runs.deleted_left", run=run_dir, files=_names(left))
    return say("runs.deleted_kept_folder", run=run_dir) if kept_folder else say("runs.deleted", run=run_dir)


def archive_path(run: Path) -> Path:
    dest = run.parent / ARCHIVE_DIR / run.name
    return dest if not dest.exists() else folders.free_dir_name(dest)


def _move(manager: JobManager, old: str, new: Path, **fields) -> None:
    """Rename the folder, then point its state and its index entry at the new place (the lock is held)."""
    new.parent.mkdir(parents=True, exist_ok=True)
    os.rename(old, new)
    folders.moved(new)
    with writer_gone(new) as free:  # no supervisor holds an ended run's lock
        st = read_state(new)
        if free and st is not None:
            st.run_dir = str(new)
            if not st.trainer_dir or Path(st.trainer_dir) == Path(old):
                st.trainer_dir = str(new)
            write_state(st)
    manager.registry.update(old, run_dir=str(new), trainer_dir=str(new), **fields)


def archive(manager: JobManager, run_dir: str) -> tuple[Msg, str]:
    """Move the run into ``.archive/`` beside it. Returns (message, the new folder). Raises Refused."""
    try:
        with manager.registry.locked():
            why = why_not(manager, run_dir, "archive")
            if why is None and not Path(run_dir).is_dir():
                why = say("runs.refuse_gone", run=run_dir)
            if why is not None:
                raise Refused(why)
            dest = archive_path(Path(run_dir))
            if not workspace.current().writable(dest):
                raise Refused(say("runs.refuse_outside", run=str(dest), roots=workspace.current().describe()))
            _move(manager, run_dir, dest, archived=time.time(), archived_from=run_dir)
    except RegistryError as e:
        raise Refused(e.args[0]) from None
    except OSError as e:
        raise Refused(say("runs.move_failed", run=run_dir, why=e.strerror or str(e))) from None
    return say("runs.archived", run=run_dir, to=str(dest)), str(dest)


def restore(manager: JobManager, run_dir: str) -> tuple[Msg, str]:
    """Move an archived run back where it was (when that name is free). Returns (message, its folder)."""
    try:
        with manager.registry.locked():
            entry = manager.registry.entry(run_dir)
            back = (entry or {}).get("archived_from")
            why = why_not(manager, run_dir, "restore") if entry is not None and back else say("runs.not_archived", run=run_dir)
            if why is None and Path(back).exists():
                why = say("runs.restore_taken", run=run_dir, to=back)
            if why is not None:
                raise Refused(why)
            _move(manager, run_dir, Path(back), archived=None, archived_from=None)
    except RegistryError as e:
        raise Refused(e.args[0]) from None
    except OSError as e:
        raise Refused(say("runs.move_failed", run=run_dir, why=e.strerror or str(e))) from None
    return say("runs.restored", run=run_dir, to=back), back
