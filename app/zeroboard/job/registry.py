"""The runs index: which run folders this workspace's jobs live in, shared by the page and the command line.

One JSON file (``cache/webui/runs.json``, or ``$ZEROBOARD_RUNS_INDEX``), read
by anyone, written only through :class:`Registry`, under an exclusive file
lock held for the read-modify-write alone (never across a wait).  Each entry
knows its run folder, who started it, its supervisor (pid and start time),
the devices it reserved, and -- only when its supervisor is gone without
recording the end itself -- the outcome a manager found.  An index that is not
what :class:`Registry` writes is kept aside under a dated name and a new one
is started, said on every look until the copy is removed; one that cannot be
read is never written over (:mod:`..files`).  An entry's ``kind``
is ``train`` (a training run; older entries have none) or ``chat`` (a chat
worker: a job that holds devices like a run, listed apart and removed when it ends).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from pathlib import Path

from .. import files, words
from .placement import cache_dir

INDEX_ENV = "ZEROBOARD_RUNS_INDEX"


def index_path() -> Path:
    return Path(os.environ.get(INDEX_ENV) or cache_dir() / "webui" / "runs.json")


class RegistryError(RuntimeError):
    """The index cannot be written (a full or read-only disk): the message says where and why."""


class Registry:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else index_path()
        self._lock = threading.RLock()  # threads of one process; the file lock covers processes
        self._held = threading.local()

    @contextlib.contextmanager
    def locked(self):
        """Exclusive access for one read-modify-write (re-entrant in a thread). Raises RegistryError when the
        lock file cannot be made."""
        with self._lock:
            if getattr(self._held, "depth", 0):
                self._held.depth += 1
                try:
                    yield
                finally:
                    self._held.depth -= 1
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                lk = open(self.path.with_suffix(".lock"), "a")  # noqa: SIM115 - closed below
            except OSError as e:
                raise RegistryError(words.say("run.index_unwritable", path=str(self.path),
                                              why=e.strerror or str(e))) from None
            with lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                self._held.depth = 1
                try:
                    yield
                finally:
                    self._held.depth = 0

    def entries(self) -> list[dict]:
        """Newest first. Entries of older versions (plain folder names) become ``{"run_dir": ...}``.  An index that
        is not what this class writes is kept aside (under the lock) and reads as empty, as does one that cannot be
        read; :meth:`problem` says which, and where the copy went."""
        try:
            return _runs(files.load_state(self.path, _valid))
        except files.CannotRead:
            return []
        except files.Garbage:
            try:
                with self.locked():
                    return self._current(refuse=False)
            except RegistryError:
                return []

    def _current(self, refuse: bool = True) -> list[dict]:
        """The entries, read with the lock held: a damaged index is first moved aside; one that cannot be read (or
        moved) refuses the write that asked (RegistryError) -- it is never written over."""
        try:
            return _runs(files.load_state(self.path, _valid))
        except files.Garbage:
            try:
                files.keep_aside(self.path)
            except OSError as e:
                if refuse:
                    raise RegistryError(words.say("state.cannot_move", path=str(self.path),
                                                  why=e.strerror or str(e))) from None
            return []
        except files.CannotRead as e:
            if refuse:
                raise RegistryError(unreadable(self.path, e)) from None
            return []

    def problem(self) -> words.Msg | None:
        """What a look at the runs must say: the index cannot be read, or a damaged one was kept aside (None: neither)."""
        try:
            files.load_state(self.path, _valid)
        except files.CannotRead as e:
            return unreadable(self.path, e)
        except files.Garbage as e:
            return words.say("state.cannot_move", path=str(self.path), why=str(e))
        aside = files.kept(self.path)
        return words.say("index.kept_aside", path=str(self.path), aside=str(aside[-1])) if aside else None

    def entry(self, run_dir: str | Path) -> dict | None:
        key = str(run_dir)
        return next((e for e in self.entries() if e.get("run_dir") == key), None)

    def run_dirs(self, kind: str = "train") -> list[str]:
        """The folders of this kind's jobs (training runs by default), newest first."""
        return [e["run_dir"] for e in self.entries() if e.get("run_dir") and e.get("kind", "train") == kind]

    def _write(self, runs: list[dict]) -> None:
        try:
            files.write_text_atomic(self.path, json.dumps({"runs": runs}, indent=2, ensure_ascii=False) + "\n")
        except OSError as e:
            raise RegistryError(words.say("run.index_unwritable", path=str(self.path), why=e.strerror or str(e))) from None

    def add(self, entry: dict) -> None:
        """Put a run first (replacing an older entry of the same folder). Call under :meth:`locked`."""
        runs = [e for e in self._current() if e.get("run_dir") != entry["run_dir"]]
        self._write([entry, *runs])

    def update(self, run_dir: str | Path, /, **fields) -> None:
        """Change one run's entry (take the lock first, or let this take it); ``run_dir=`` among the fields moves it."""
        with self.locked():
            runs = self._current()
            for e in runs:
                if e.get("run_dir") == str(run_dir):
                    e.update({k: words.to_json(v) for k, v in fields.items()})
            self._write(runs)

    def remove(self, run_dir: str | Path) -> None:
        """Drop one run's entry (its folder was deleted, a chat worker ended); take the lock first (with the check
        that allowed it), or let this take it."""
        with self.locked():
            self._write([e for e in self._current() if e.get("run_dir") != str(run_dir)])


def _valid(data: object) -> bool:
    """Whether ``data`` is an index as :class:`Registry` writes it (an older one's plain folder names included)."""
    return isinstance(data, dict) and isinstance(data.get("runs"), list) and all(isinstance(r, (dict, str))
                                                                                 for r in data["runs"])


def _runs(data: dict | None) -> list[dict]:
    return [] if data is None else [r if isinstance(r, dict) else {"run_dir": str(r)} for r in data["runs"]]


def unreadable(path: Path, e: files.CannotRead) -> words.Msg:
    """What to say of a state file that cannot be read."""
    return words.say("state.cannot_read", path=str(path), why=e.why or words.say("state.not_regular"))
