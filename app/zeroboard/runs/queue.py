"""The queue: jobs that wait for their devices (or their folder) instead of being refused.

One JSON file beside the runs index (``queue.json``), read by anyone and
written only through :class:`Queue`, under an exclusive file lock held for one
read-modify-write.  Each entry holds the job as it was asked for (its spec),
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
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import files, words
from ..job.registry import Registry, RegistryError

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


def queue_path(index: Path) -> Path:
    """The queue of a runs index: the file beside it."""
    return Path(index).with_name("queue.json")


class Queue:
    def __init__(self, index: str | Path | None = None):
        self.index = Registry(index).path
        self.path = queue_path(self.index)

    @contextlib.contextmanager
    def locked(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lk = open(self.path.with_suffix(".lock"), "a")  # noqa: SIM115 - closed below
        except OSError as e:
            raise RegistryError(words.say("run.index_unwritable", path=str(self.path), why=e.strerror or str(e))) from None
        with lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            yield

    def entries(self) -> list[Entry]:
        """In queue order (first to start first)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [from_json(e) for e in data.get("queue", []) if isinstance(e, dict)] if isinstance(data, dict) else []

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
            self._write([*self.entries(), entry])
        return entry

    def update(self, entry_id: str, **changes) -> None:
        with self.locked():
            entries = self.entries()
            for e in entries:
                if e.id == entry_id:
                    for k, v in changes.items():
                        setattr(e, k, v)
            self._write(entries)

    def remove(self, entry_id: str) -> Entry | None:
        """Take an entry out of the queue (cancel, or it started); the entry, or None when it is not there."""
        with self.locked():
            entries = self.entries()
            found = next((e for e in entries if e.id == entry_id), None)
            if found is not None:
                self._write([e for e in entries if e.id != entry_id])
        return found

    def move(self, entry_id: str, position: int) -> bool:
        """Put an entry at ``position`` (1 = first); False when it is not there."""
        with self.locked():
            entries = self.entries()
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
