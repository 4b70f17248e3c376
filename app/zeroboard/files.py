"""Writing files whole or not at all; reading state files that are not whole.

Every state file ZeroBoard keeps (a run's state, the runs index, the queue,
presets) is written to a temporary file with a unique name in the same
folder, flushed, then renamed over the old one: a reader never sees half a
file, two writers never share a temporary name, and a full disk leaves the
old file as it was (the temporary one is removed and the OSError raised to
the caller).

So a state file that is there but is not what its writer writes (garbage
bytes, JSON cut short, a list where an object belongs, an empty file) is no
write in flight: something else damaged it.  Its owner then moves it aside,
under the file's lock (no write of its own can be under way), by a rename in
the same folder -- byte for byte -- as ``NAME.unreadable-YYYYMMDD-HHMMSS``
(:func:`keep_aside`); the next write starts a new file, and every look at
the file says where the copy went until the user removes it.  A file that is
there but cannot be opened (its permissions, a disk error, not a regular
file) is not moved: it may be whole; reads say why, and writes are refused
until it can be read.  The queue, the runs index and ``state.json`` do so.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def is_disk_error(e: BaseException) -> bool:
    """A full, read-only or failing disk (as opposed to a missing file or a permission)."""
    return isinstance(e, OSError) and e.errno in DISK_ERRORS


# --- reading state files -----------------------------------------------------------------------------------------

SUFFIX = ".unreadable-"
MAX_BYTES = 256 << 20  # a state file is kilobytes; the runs index of thousands of runs a few megabytes


class Garbage(ValueError):
    """The file is there but is not what its writer writes (the message says how)."""


class CannotRead(OSError):
    """The file is there but cannot be opened or read (``why``: the system's word; None: not a regular file)."""

    def __init__(self, why: str | None):
        super().__init__(why)
        self.why = why


def load_state(path: str | Path, valid: Callable[[object], bool] = lambda data: isinstance(data, dict)) -> object | None:
    """The parsed JSON of a state file; None when there is none. Raises Garbage or CannotRead."""
    try:
        data = _read(path)
    except FileNotFoundError:
        return None
    except CannotRead:
        raise
    except OSError as e:
        raise CannotRead(e.strerror or str(e)) from None
    if len(data) > MAX_BYTES:
        raise Garbage(f"larger than {MAX_BYTES >> 20} MiB")
    if not data.strip():
        raise Garbage("empty")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Garbage(f"not JSON: {e}") from None
    if not valid(parsed):
        raise Garbage(f"not what ZeroBoard writes there (a JSON {type(parsed).__name__})")
    return parsed


def _read(path: str | Path) -> bytes:
    """The bytes of a regular file (a FIFO or a device is refused without waiting on it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO does not wait for a writer
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CannotRead(None)
        chunks, size = [], 0
        while size <= MAX_BYTES and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def keep_aside(path: str | Path) -> Path:
    """Rename the file to ``NAME.unreadable-YYYYMMDD-HHMMSS`` beside it (``-2``, ``-3``... when taken); the new
    name. Call under the file's lock."""
    path = Path(path)
    stem = f"{path.name}{SUFFIX}{time.strftime('%Y%m%d-%H%M%S')}"
    dest, n = path.with_name(stem), 2
    while dest.exists():
        dest, n = path.with_name(f"{stem}-{n}"), n + 1
    os.rename(path, dest)
    return dest


def kept(path: str | Path) -> list[Path]:
    """The copies of ``path`` kept aside, oldest first."""
    path = Path(path)
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(path.name + SUFFIX)]
    except OSError:
        return []
    return [path.with_name(n) for n in sorted(names)]
