"""The dispatcher: ``python -m zeroboard.runs.dispatcher INDEX``, the one process that starts queued jobs.

It lives in a session of its own, so neither the page nor the terminal that
queued a job needs to stay.  One per queue: it holds ``queue.dispatch.lock``
for its life (the kernel drops the lock however it ends).  Whoever starts one
takes that lock first and hands it to the new process (:func:`ensure_running`):
two that race start one dispatcher, never two.  Anyone who adds to the queue
starts one when none holds the lock, and so does any look at the queue that
finds entries waiting and no dispatcher (it was killed, say: :func:`revive`,
called by ``zeroboard queue``, the Queue tab and ``zeroboard train --queue``),
after telling each waiting entry again why it waits: the reasons a dead
dispatcher left may name runs and processes long gone.  Every
``POLL_S`` it walks the queue in order: an entry whose devices and folder are
free, with no earlier entry wanting the same devices, is checked again (its
folder, its data may have changed while it waited) and started through the one
launch path; otherwise the entry is told why it waits.  With nothing left to
wait for, it exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from ..job import command, spec as specmod
from ..words import say
from .manager import Busy, JobManager, StartError
from .queue import Entry, Queue, blocked_by_earlier

POLL_S = 2.0
LOCK_TRIES_S = 3.0
IDLE_EXIT_S = 6.0  # nothing waiting for this long: the dispatcher exits (the next Queue starts a new one)
MODULE = "zeroboard.runs.dispatcher"


def lock_path(q: Queue) -> Path:
    return q.path.with_name("queue.dispatch.lock")


def running(q: Queue) -> bool:
    """Whether a dispatcher holds this queue's lock."""
    try:
        fd = os.open(lock_path(q), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def holder(q: Queue) -> int | None:
    """The pid of the dispatcher serving the queue, when one runs."""
    if not running(q):
        return None
    try:
        return int(lock_path(q).read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def ensure_running(q: Queue, first=None) -> bool:
    """Start the queue's dispatcher unless one runs; True when this call started it.

    The lock is taken here and handed to the new process (its descriptor is passed on, and the lock goes with
    it): no other dispatcher can start between the look and the start, however many look at once. ``first()``
    runs while the lock is held, before the dispatcher starts (nothing else walks the queue meanwhile)."""
    try:
        fd = os.open(lock_path(q), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return False
    try:
        if not _lock_soon(fd):
            return False  # a dispatcher serves the queue (or another look is starting one)
        if first is not None:
            first()
        log = q.path.with_name("queue.dispatch.log")
        with open(log, "ab") as out:
            subprocess.Popen([sys.executable, "-m", MODULE, str(q.index), str(fd)], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=out, start_new_session=True, cwd=os.getcwd(), pass_fds=(fd,))
        return True
    finally:
        os.close(fd)  # the new dispatcher holds the lock through its own copy of the descriptor


def _lock_soon(fd: int, tries: int = 10) -> bool:
    """The lock, tried for a moment: another look's probe (:func:`running`) holds it only that long."""
    for i in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            if i + 1 < tries:
                time.sleep(0.02)
    return False


def revive(q: Queue) -> bool:
    """A look at the queue: when entries wait and no dispatcher serves them, tell each why it waits now and start
    one. Cheap when there is nothing to do (the queue file, then one lock probe): the page calls it on every
    refresh. True when it started a dispatcher."""
    if not any(e.status == "waiting" for e in q.entries()) or running(q):
        return False
    return ensure_running(q, first=lambda: refresh(q, JobManager(q.index)))


def refresh(q: Queue, mgr: JobManager) -> None:
    """Each waiting entry told again why it waits (a run on its devices, an earlier entry), or that it starts next."""
    entries = q.entries()
    for entry in entries:
        if entry.status == "waiting":
            q.update(entry.id, why=why_waiting(entries, entry, mgr) or say("queue.next"))


def why_waiting(entries: list[Entry], entry: Entry, mgr: JobManager):
    """Why ``entry`` cannot start now (an earlier entry on its devices, a run on them or in its folder), or None."""
    ahead = blocked_by_earlier(entries, entry)
    if ahead is not None:
        return say("queue.behind", id=ahead.id)
    probe = command.Command([], {}, entry.cwd, None, entry.device_kind, entry.devices)
    return mgr.busy_with(probe, Path(entry.output), Path(entry.output))


def enqueue(mgr: JobManager, prepared: command.Prepared, source: str) -> Entry:
    """Put a checked job in its index's queue (it starts as soon as its devices are free, maybe now) and make sure
    a dispatcher serves the queue."""
    cmd, job = prepared.command, prepared.spec
    out = (Path(cmd.cwd) / job.output_dir).resolve()
    busy = mgr.busy_with(cmd, out, out)
    q = Queue(mgr.index)
    entry = q.add(specmod.to_dict(job), cmd.cwd, source, cmd.device_kind, list(cmd.devices), str(out),
                  why=busy or say("queue.next"))
    ensure_running(q)
    return entry


@contextlib.contextmanager
def entry_env(entry: Entry):
    """The entry's working folder and allowed paths, as whoever queued it had them."""
    old_cwd, old_allow = os.getcwd(), os.environ.get("ZEROBOARD_ALLOW_PATHS")
    os.chdir(entry.cwd)
    os.environ["ZEROBOARD_ALLOW_PATHS"] = entry.allow
    try:
        yield
    finally:
        os.chdir(old_cwd)
        if old_allow is None:
            os.environ.pop("ZEROBOARD_ALLOW_PATHS", None)
        else:
            os.environ["ZEROBOARD_ALLOW_PATHS"] = old_allow


def step(q: Queue, mgr: JobManager, prepare) -> int:
    """One walk through the queue: start what can start, tell the rest why they wait. Returns how many wait."""
    entries = q.entries()
    waiting = 0
    for entry in entries:
        if entry.status != "waiting":
            continue
        busy = why_waiting(entries, entry, mgr)
        if busy is not None:
            q.update(entry.id, why=busy)
            waiting += 1
            continue
        with entry_env(entry):
            started = _start(q, mgr, prepare, entry)
        waiting += 0 if started else 1
        entries = q.entries()  # a start changes what the next entries wait for
    return waiting


def _start(q: Queue, mgr: JobManager, prepare, entry: Entry) -> bool:
    """Check the job again and start it; True when it left the queue (started, or failed for good)."""
    try:
        job = specmod.from_dict(entry.job)
    except specmod.SpecError as e:
        q.update(entry.id, status="failed", why=next(iter(e.problems.values())))
        return True
    prepared = prepare(job)
    if not prepared.report.ok:
        field, msg = next(iter(prepared.report.errors.items()))
        q.update(entry.id, status="failed", why=say("queue.check_failed", field=field, why=msg))
        return True
    try:
        st = mgr.start(prepared, source=entry.source)
    except Busy as e:  # taken between the look and the start: wait on
        q.update(entry.id, why=e.args[0])
        return False
    except StartError as e:
        q.update(entry.id, status="failed", why=e.args[0])
        return True
    q.remove(entry.id)
    print(f"started {entry.id}: {st.run_dir}", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    q = Queue(argv[0])
    # the lock as handed over by whoever started this process (ensure_running), else taken here
    fd = int(argv[1]) if len(argv) > 1 else os.open(lock_path(q), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    os.set_inheritable(fd, False)  # the jobs it starts must not hold the queue's lock after it is gone
    deadline = time.time() + LOCK_TRIES_S
    while True:  # a moment's probe by running() also takes the lock: try again before giving up
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.time() > deadline:
                return 0  # another dispatcher serves this queue
            time.sleep(0.1)
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())  # who serves the queue (read by holder())
    os.environ.pop("ZEROBOARD_WAIT_FOREIGN_S", None)  # a busy device is what the queue waits for, not the start
    from .launch import prepare_launch as prepare

    mgr = JobManager(q.index)
    idle_since = time.time()
    while True:
        if step(q, mgr, prepare):
            idle_since = time.time()
        elif time.time() - idle_since > IDLE_EXIT_S:
            return 0
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
