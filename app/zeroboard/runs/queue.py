"""The queue: jobs that wait for their devices (or their folder) instead of being refused.

One JSON file beside the runs index (``queue.json``), read by anyone and
written only through :class:`Queue`, under an exclusive file lock held for one
read-modify-write.  A queue file that is not what :class:`Queue` writes is
kept aside under a dated name and the queue starts afresh, said on every look
until the copy is removed; one that cannot be read is never written over
(:mod:`..files`).  Each entry holds the job as it was asked for (its spec),
where it was asked from (working folder, source), the devices its placement
reserved, and -- kept up to date by the dispatcher -- why it still waits.

Queued jobs start in order as their devices free: an entry starts when no job
runs on its devices or in its folder and no earlier waiting entry wants any
of the same devices (so a later, smaller job cannot overtake an earlier one on
the same GPUs forever, while a job on other GPUs goes ahead).  The starting
itself is the one launch path (``JobManager.start``), done by the dispatcher
(:mod:`.dispatcher`), a process of its own that outlives the page and the
terminal that queued the job.

Light (stdlib only): the web server and the CLI import it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import files, words
from ..job.registry import Registry, RegistryError, unreadable
from ..words import Msg, say

STATUSES = ("waiting", "failed")  # a started entry leaves the queue: it is a run from then on


@dataclass
class Entry:
    id: str
    job: dict  # the spec as asked for (spec.to_dict)
    cwd: str  # where it was asked from (relative paths of the job resolve here)
    source: str = "page"
    queued: float = 0.0
    device_kind: str = "cpu"
    devices: list[int] = field(default_factory=list)
    output: str = ""  # the resolved output folder
    status: str = "waiting"
    why: object = ""  # a catalog Msg (as JSON on disk): what it waits for, or why it failed
    allow: str = ""  # $ZEROBOARD_ALLOW_PATHS of whoever queued it (the dispatcher starts it with the same)

    def to_json(self) -> dict:
        data = asdict(self)
        data["why"] = words.to_json(self.why)
        return data


def from_json(data: dict) -> Entry:
    known = {f for f in Entry.__dataclass_fields__}
    e = Entry(**{k: v for k, v in data.items() if k in known})
    e.why = words.from_json(e.why)
    return e


def _valid(data: object) -> bool:
    """Whether ``data`` is a queue as :class:`Queue` writes it."""
    if not isinstance(data, dict) or not isinstance(data.get("queue"), list):
        return False
    try:
        _parse(data)
    except (TypeError, AttributeError, KeyError, ValueError):
        return False
    return True


def _parse(data: dict | None) -> list[Entry]:
    return [] if data is None else [from_json(e) for e in data["queue"]]


def queue_path(index: Path) -> Path:
    """The queue of a runs index: the file beside it."""
    return Path(index).with_name("queue.json")


class Queue:
    def __init__(self, index: str | Path | None = None):
        self.index = Registry(index).path
        self.path = queue_path(self.index)
        self._held = threading.local()

    @contextlib.contextmanager
    def locked(self):
        """Exclusive access for one read-modify-write (re-entrant in a thread: a read under it may keep a file aside)."""
        if getattr(self._held, "on", False):
            yield
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lk = open(self.path.with_suffix(".lock"), "a")  # noqa: SIM115 - closed below
        except OSError as e:
            raise RegistryError(words.say("run.index_unwritable", path=str(self.path), why=e.strerror or str(e))) from None
        with lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            self._held.on = True
            try:
                yield
            finally:
                self._held.on = False

    def entries(self) -> list[Entry]:
        """In queue order (first to start first).  A queue file that is not what this class writes is kept aside
        (under the lock: no write is under way) and reads as empty, as does one that cannot be read; :meth:`problem`
        says which, and where the copy went."""
        try:
            return _parse(files.load_state(self.path, _valid))
        except files.CannotRead:
            return []
        except files.Garbage:
            try:
                with self.locked():
                    return self._current(refuse=False)
            except RegistryError:
                return []

    def _current(self, refuse: bool = True) -> list[Entry]:
        """The entries, read with the lock held: a damaged file is first moved aside; one that cannot be read (or
        moved) refuses the write that asked (RegistryError) -- it is never written over."""
        try:
            return _parse(files.load_state(self.path, _valid))
        except files.Garbage:
            try:
                files.keep_aside(self.path)
            except OSError as e:
                if refuse:
                    raise RegistryError(say("state.cannot_move", path=str(self.path), why=e.strerror or str(e))) from None
            return []
        except files.CannotRead as e:
            if refuse:
                raise RegistryError(unreadable(self.path, e)) from None
            return []

    def problem(self) -> Msg | None:
        """What a look at the queue must say: its file cannot be read, or a damaged one was kept aside (None: neither)."""
        try:
            files.load_state(self.path, _valid)
        except files.CannotRead as e:
            return unreadable(self.path, e)
        except files.Garbage as e:
            return say("state.cannot_move", path=str(self.path), why=str(e))
        aside = files.kept(self.path)
        return say("queue.kept_aside", path=str(self.path), aside=str(aside[-1])) if aside else None

    def _write(self, entries: list[Entry]) -> None:
        try:
            files.write_text_atomic(self.path, json.dumps({"queue": [e.to_json() for e in entries]}, indent=2,
                                                          ensure_ascii=False) + "\n")
        except OSError as e:
            raise RegistryError(words.say("run.index_unwritable", path=str(self.path), why=e.strerror or str(e))) from None

    def add(self, job: dict, cwd: str, source: str, device_kind: str, devices: list[int], output: str,
            why: object = "") -> Entry:
        entry = Entry(uuid.uuid4().hex[:8], job, cwd, source, time.time(), device_kind, list(devices), output,
                      why=why, allow=os.environ.get("ZEROBOARD_ALLOW_PATHS", ""))
        with self.locked():
            self._write([*self._current(), entry])
        return entry

    def update(self, entry_id: str, **changes) -> None:
        with self.locked():
            entries = self._current()
            for e in entries:
                if e.id == entry_id:
                    for k, v in changes.items():
                        setattr(e, k, v)
            self._write(entries)

    def remove(self, entry_id: str) -> Entry | None:
        """Take an entry out of the queue (cancel, or it started); the entry, or None when it is not there."""
        with self.locked():
            entries = self._current()
            found = next((e for e in entries if e.id == entry_id), None)
            if found is not None:
                self._write([e for e in entries if e.id != entry_id])
        return found

    def move(self, entry_id: str, position: int) -> bool:
        """Put an entry at ``position`` (1 = first); False when it is not there."""
        with self.locked():
            entries = self._current()
            found = next((e for e in entries if e.id == entry_id), None)
            if found is None:
                return False
            rest = [e for e in entries if e.id != entry_id]
            rest.insert(max(0, min(len(rest), position - 1)), found)
            self._write(rest)
        return True

    def find(self, prefix: str) -> Entry | None:
        """An entry by its id or an unambiguous start of it."""
        hits = [e for e in self.entries() if e.id.startswith(prefix)]
        return hits[0] if len(hits) == 1 else None


def blocked_by_earlier(entries: list[Entry], entry: Entry) -> Entry | None:
    """An earlier waiting entry that wants any of ``entry``'s devices or its folder (it goes first), or None."""
    for other in entries:
        if other.id == entry.id:
            return None
        if other.status != "waiting":
            continue
        same_devices = other.device_kind == entry.device_kind and entry.device_kind != "slurm" and (
            entry.device_kind == "cpu" or not other.devices or not entry.devices
            or bool(set(other.devices) & set(entry.devices)))
        if same_devices or other.output == entry.output:
            return other
    return None
