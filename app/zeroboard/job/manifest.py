"""What a run wrote: the list of its own files, so that Delete and Archive touch nothing else.

A run's own files are its record files and everything that appeared in its
folder after it claimed the folder, while it ran.  The claim notes what the
folder held then that is not the run's (``launch.json``'s ``foreign``: a new
folder holds nothing, or a stray temporary file; a folder resumed holds what
the run's earlier attempts wrote, its own).  Whoever records the run's end --
its supervisor, or a reader settling a run whose supervisor is gone -- lists
every file and folder in it but those (``state.json``'s ``written``: paths
relative to the folder, folders included; ``files``: the top-level names).
A reader settling a run after the fact leaves out what changed after the
run's last sign of life.  A file added after the end is not on the list;
what a user put into the folder while the run ran cannot be told from what
the trainer wrote, and counts as the run's.

A run recorded before runs kept the list has ``files`` only (the folder's
top-level names when it ended): its own files are those of them that are not
older than its first event, each with everything under it -- a user's file
that was there before the run began stays theirs.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import files
from . import record

NODE_DIR = re.compile(r"^node-(\d+)$")  # node N's part of a job on several machines keeps its record here
OWN_TEMP = re.compile(r"^\.(?:.+\.tmp|zeroboard-disk-probe|zeroboard-probe-.*)$")  # our atomic writes in flight
SLACK_S = 60.0  # clocks and buffered writes: how far a file's time may stray from the run's own
RECORDS = frozenset(record.RECORD_FILES)


def tree(out: Path) -> list[str]:
    """Every file and folder under ``out`` (links not followed), as POSIX paths relative to it, sorted."""
    found: list[str] = []
    stack = [("", Path(out))]
    while stack:
        prefix, folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            rel = prefix + e.name
            found.append(rel)
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append((rel + "/", Path(e.path)))
            except OSError:
                pass
    return sorted(found)


def ancestors(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def topmost(paths) -> list[str]:
    """The paths not inside another of them (a folder stands for what it holds), sorted."""
    given = set(paths)
    return sorted(p for p in given if not any(a in given for a in ancestors(p)))


@dataclass(frozen=True)
class Own:
    """The paths a run wrote: ``paths`` one by one, and ``whole``: top-level names with everything under them."""

    paths: frozenset[str] = frozenset()
    whole: frozenset[str] = RECORDS
    listed: bool = True  # False: a run recorded before runs kept the list (``files`` only)

    def __contains__(self, rel: str) -> bool:
        return rel in self.paths or rel.split("/", 1)[0] in self.whole


def _first_event_time(out: Path) -> float | None:
    try:
        with open(out / record.EVENTS_FILE, "rb") as fh:
            first = json.loads(fh.readline(1 << 20))
        return float(first["time"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _oldest(path: Path) -> float | None:
    """The oldest modification time of a file, or of the files in a folder (an empty folder: its own)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_mtime
    times = []
    for rel in tree(path):
        try:
            s = os.lstat(path / rel)
        except OSError:
            continue
        if not os.path.isdir(path / rel) or os.path.islink(path / rel):
            times.append(s.st_mtime)
    return min(times) if times else st.st_mtime


def of_run(out: Path, state: dict | None) -> Own | None:
    """What the run in ``out`` wrote, by its state (``state.json`` or the outcome in the index, as a dict); None
    when the state lists nothing (a run that never ended, or one of an early ZeroBoard)."""
    if not isinstance(state, dict):
        return None
    if isinstance(state.get("written"), list):
        paths = frozenset(str(p) for p in state["written"])
        nodes = {p for p in paths if "/" not in p and NODE_DIR.match(p)}  # the other machines' parts: theirs wholly
        return Own(paths, RECORDS | nodes)
    if isinstance(state.get("files"), list):
        return legacy(out, state, [str(n) for n in state["files"]])
    return None


def legacy(out: Path, state: dict, names: list[str]) -> Own:
    """A run without the list: ``names`` (its top-level files) but those older than its first event."""
    since = _first_event_time(Path(state.get("trainer_dir") or out)) or state.get("started")
    kept = set()
    for name in names:
        if name in RECORDS or kept_copy(name):
            continue
        oldest = _oldest(out / name) if isinstance(since, (int, float)) else None
        if oldest is None or oldest >= since - SLACK_S:
            kept.add(name)
    return Own(frozenset(), RECORDS | kept, listed=False)


def kept_copy(rel: str) -> bool:
    """A damaged record file kept aside for the user (``files.keep_aside``): not the run's, and no foreign file."""
    return "/" not in rel and files.SUFFIX in rel and rel.split(files.SUFFIX, 1)[0] in RECORDS


def _ours(rel: str) -> bool:
    """Our temporary files in flight, and the kept copies of damaged record files."""
    return bool(OWN_TEMP.match(rel.rsplit("/", 1)[-1])) or kept_copy(rel)


def foreign(out: Path, own: Own) -> list[str]:
    """What in ``out`` the run did not write (topmost paths), but for :func:`_ours`."""
    return topmost(rel for rel in tree(out) if rel not in own and not _ours(rel))


def at_claim(out: Path, own: Own | None, fresh: bool) -> list[str]:
    """What the folder holds as a run claims it that is not the run's: for a fresh folder everything there (a
    stray temporary file, another machine's part of the job), for one of the run's own what its earlier attempts
    did not write (nothing when they left no list)."""
    if fresh:
        return topmost(tree(out))
    return [] if own is None else topmost(rel for rel in tree(out) if rel not in own)


def _launch(run: Path) -> dict:
    try:
        data = json.loads((run / record.LAUNCH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def last_sign_of_life(run: Path, output: Path) -> float | None:
    """When a run whose supervisor is gone last wrote its record: the newest of its logs, events and state."""
    times = []
    for p in (output / record.EVENTS_FILE, run / record.LOG_FILE, output / record.TRAIN_LOG, run / record.SUPERVISOR_LOG,
              run / record.STATE_FILE):
        try:
            times.append(os.stat(p).st_mtime)
        except OSError:
            pass
    return max(times) if times else None


def written(run: Path, until: float | None = None) -> list[str] | None:
    """The run's own paths at its end: everything in ``run`` but what its claim found there (``launch.json``) and,
    with ``until``, what changed after that time (a run recorded after the fact); None without the claim's note
    (a run started by an earlier ZeroBoard, or a chat worker)."""
    theirs = _launch(run).get("foreign")
    if not isinstance(theirs, list):
        return None
    theirs = {str(p) for p in theirs}
    mine = [rel for rel in tree(run) if rel not in theirs and not any(a in theirs for a in ancestors(rel))
            and not kept_copy(rel) and rel != record.STATE_RESERVE]  # the reserve is given back as the end is written
    if until is None:
        return mine
    late, folders_ = set(), {}
    for rel in mine:
        try:
            st = os.lstat(run / rel)
        except OSError:
            late.add(rel)
            continue
        if os.path.isdir(run / rel) and not os.path.islink(run / rel):
            folders_[rel] = st.st_ctime
        elif rel not in RECORDS and st.st_ctime > until + SLACK_S:
            late.add(rel)
    holding = {a for r in mine if r not in late and r not in folders_ for a in ancestors(r)}
    for rel, ctime in folders_.items():  # a folder changes when something is added in it: it is the run's if anything in it is
        if ctime > until + SLACK_S and rel not in holding:
            late.add(rel)
    return [r for r in mine if r not in late]


def at_end(run: Path, output: Path | None = None, settled: bool = False) -> tuple[list[str], list[str] | None]:
    """(``files``, ``written``) for the state of a run that ended: its top-level names and every path it wrote.
    ``settled``: recorded by a reader after the run's supervisor was gone, so only what changed while it ran."""
    until = last_sign_of_life(run, output or run) if settled else None
    paths = written(run, until)
    if paths is None:  # no note of the claim: everything there is taken for the run's, as before
        return sorted(n for n in _names(run) if not OWN_TEMP.match(n) and not kept_copy(n) and n != record.STATE_RESERVE), None
    return sorted(p for p in paths if "/" not in p), paths


def _names(out: Path) -> list[str]:
    try:
        return [p.name for p in out.iterdir()]
    except OSError:
        return []
