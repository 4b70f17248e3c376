"""Writing files whole or not at all.

Every state file ZeroBoard keeps (a run's state, the runs index, presets) is
written to a temporary file with a unique name in the same folder, flushed,
then renamed over the old one: a reader never sees half a file, two writers
never share a temporary name, and a full disk leaves the old file as it was
(the temporary one is removed and the OSError raised to the caller).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
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
