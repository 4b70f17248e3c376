"""The first records of a dataset, read directly: for the checks before launch and the quick preview.

Pure Python for JSON, JSON lines and CSV, reading only as far as the records
asked for (a 200 MB file costs the web server no more than its first
records).  Parquet and Arrow files need pyarrow: a process that has it loaded
already reads them itself, any other (the web server, which never loads it)
asks ``python -m zeroboard.data.peek`` in a short-lived subprocess.  Hub
datasets are not read here: the trainer and ``zeroboard dataset`` load them
through the ``datasets`` library.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .. import safeload
from ..words import say
from .formats import DataError
from .info import DatasetSource

CHUNK = 1 << 16
PEEK_TIMEOUT_S = 120
MAX_SIZE = 1 << 30  # the largest cell or record the job's limits may allow (their fields' upper bound)
# csv's own limit (128 KiB a field) raised a bare _csv.Error; the rows are bounded here instead (Sizes), by the job
csv.field_size_limit(max(csv.field_size_limit(), MAX_SIZE))


@dataclass(frozen=True)
class Sizes:
    """How large one CSV cell and one record (a JSON value, a JSON line, a CSV row) may be, in bytes: the job's
    ``max_cell_bytes`` and ``max_record_bytes``. A file is read within them: nothing larger is held in memory."""

    cell: int = safeload.MAX_CELL_BYTES
    record: int = safeload.RECORD.max_bytes


DEFAULT = Sizes()


class _Over(Exception):
    """A record ran past its limit while it was being read."""


class _Meter:
    """The lines of a text file as csv reads them, each read only up to what the record still may take."""

    def __init__(self, fh, limit: int):
        self.fh, self.limit, self.used = fh, limit, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.fh.readline(self.limit - self.used + 1)
        if not line:
            raise StopIteration
        self.used += len(line)
        if self.used > self.limit:
            raise _Over
        return line


def csv_records(fh, path: Path, sizes: Sizes = DEFAULT) -> Iterator[dict]:
    """The rows of a CSV file as records; a row past ``sizes.record`` or a cell past ``sizes.cell`` is a DataError
    naming the file, the record, its line and the limit (the row is never read whole)."""
    meter = _Meter(fh, sizes.record)
    rows = csv.DictReader(meter)
    for i in itertools.count():
        meter.used = 0
        try:
            row = next(rows)
        except StopIteration:
            return
        except _Over:
            raise DataError(say("data.record_too_big", path=str(path), i=i, at=say("data.at_line", line=rows.line_num + 1),
                                limit=_bytes(sizes.record))) from None
        except csv.Error as e:
            raise DataError(say("data.record_error", path=str(path), i=i, why=str(e))) from None
        for v in row.values():
            if isinstance(v, str) and over(v, sizes.cell):
                raise DataError(say("data.cell_too_big", path=str(path), i=i, line=rows.line_num,
                                    size=_bytes(len(v.encode("utf-8"))), limit=_bytes(sizes.cell)))
        yield row


def over(text: str, limit: int) -> bool:
    """Whether ``text`` takes more than ``limit`` bytes as UTF-8 (encoded only when it might)."""
    return len(text) > limit or (len(text) * 4 > limit and len(text.encode("utf-8", errors="replace")) > limit)


def size_problem(record: dict, kind: str, sizes: Sizes, i: int):
    """Why a record read by the ``datasets`` library is past the job's limits (a Msg), or None: the trainer skips it
    as the checks refused it. Its size: the UTF-8 bytes of its text (a CSV cell alone against ``sizes.cell``)."""
    total, stack = 0, [record]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if kind == "csv" and over(v, sizes.cell):
                return say("data.skipped_cell", i=i, limit=_bytes(sizes.cell))
            total += len(v) if len(v) * 4 <= sizes.record else len(v.encode("utf-8", errors="replace"))
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return say("data.skipped_record", i=i, limit=_bytes(sizes.record)) if total > sizes.record else None


def _bytes(n: int) -> str:
    return f"{n:,} bytes"


def head(src: DatasetSource, n: int, sizes: Sizes = DEFAULT) -> list[dict]:
    """Up to ``n`` records from the start of a file dataset (a folder: its files in order)."""
    out: list[dict] = []
    for path in src.files:
        if len(out) >= n:
            break
        out += read_head(path, src.kind, n - len(out), sizes)
    if not out:
        raise DataError(say("data.empty", path=src.where))
    return out


def read_head(path: Path, kind: str, n: int, sizes: Sizes = DEFAULT) -> list[dict]:
    if kind in ("parquet", "arrow"):
        return _peek(path, kind, n)
    try:
        with safeload.open_text(path, newline="" if kind == "csv" else None) as fh:
            if kind == "csv":
                return [dict(row) for _, row in zip(range(n), csv_records(fh, path, sizes))]
            return _json(fh, path, n, sizes)
    except UnicodeDecodeError:
        raise DataError(say("data.not_utf8", path=str(path))) from None
    except safeload.Refused as e:
        raise DataError(say("data.cannot_read", path=str(path), why=say(e.key, **e.values))) from None
    except OSError as e:
        raise DataError(say("data.cannot_read", path=str(path), why=e.strerror or str(e))) from None


def _json(fh, path: Path, n: int, sizes: Sizes) -> list[dict]:
    """JSON lines, or one JSON list of records (parsed record by record, never the whole file)."""
    start = fh.read(CHUNK)
    body = start.lstrip()
    if not body:
        raise DataError(say("data.empty", path=str(path)))
    if body[0] == "[":
        records = list(itertools.islice(iter_json_list(fh, body[1:], path, sizes.record), n))
    else:
        records = _json_lines(start, fh, path, n, sizes)
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise DataError(say("data.not_object", path=str(path), i=bad))
    return records


def _json_lines(start: str, fh, path: Path, n: int, sizes: Sizes) -> list:
    records: list = []
    for lineno, line in enumerate(_lines(io.StringIO(start), fh, path, sizes.record), 1):
        if len(records) >= n:
            break
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError as e:
            if lineno == 1 and path.suffix.lower() == ".json":  # one JSON value over many lines: what is it?
                try:
                    safeload.json_text(safeload.read_text(path, safeload.RECORD), safeload.RECORD)
                except ValueError:
                    raise DataError(say("data.not_json", path=str(path), why=str(e))) from None
                raise DataError(say("data.not_list", path=str(path))) from None
            raise DataError(say("data.line_not_json", path=str(path), line=lineno, why=str(e))) from None
    return records


def _lines(first: io.StringIO, fh, path: Path, limit: int):
    """The lines of what was read so far, then the rest of the file (a line split across the two joined); a line
    longer than ``limit`` characters is a DataError naming it, and is never read whole."""
    carry, lineno = "", 0

    def checked(line: str) -> str:
        if over(line, limit):
            raise DataError(say("data.record_too_big", path=str(path), i=lineno - 1, at=say("data.at_line", line=lineno),
                                limit=_bytes(limit)))
        return line

    for line in first:
        if line.endswith("\n"):
            lineno += 1
            yield checked(carry + line)
            carry = ""
        else:
            carry += line
    while line := fh.readline(max(1, limit + 1 - len(carry))):
        lineno += 1
        yield checked(carry + line)
        carry = ""
    if carry:
        lineno += 1
        yield checked(carry)


def iter_json_list(fh, buf: str, path: Path, limit: int | None = None):
    """The values of a JSON list, one by one, from the text after its ``[`` (``buf``, then the rest of ``fh``); a
    value longer than ``limit`` characters is a DataError naming it (it is not read on past the limit)."""
    dec = json.JSONDecoder()
    pos, i = 0, 0
    while True:
        while True:  # the next value: past blanks and commas, reading on when the buffer runs out
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buf):
                break
            more = fh.read(CHUNK)
            if not more:
                raise DataError(say("data.not_json", path=str(path), why="]"))
            buf, pos = more, 0
        if buf[pos] == "]":
            return
        try:
            value, end = dec.raw_decode(buf, pos)
        except ValueError as e:  # a value cut by the buffer's end, or not JSON at all
            if limit is not None and len(buf) - pos > limit:
                raise DataError(say("data.record_too_big", path=str(path), i=i, at="", limit=_bytes(limit))) from None
            more = fh.read(CHUNK)
            if not more:
                raise DataError(say("data.not_json", path=str(path), why=str(e))) from None
            buf, pos = buf[pos:] + more, 0
            continue
        if limit is not None and over(buf[pos:end] if (end - pos) * 4 > limit else "", limit):
            raise DataError(say("data.record_too_big", path=str(path), i=i, at="", limit=_bytes(limit)))
        yield value
        pos, i = end, i + 1


def _peek(path: Path, kind: str, n: int) -> list[dict]:
    if "pyarrow" in sys.modules and sys.modules["pyarrow"] is not None:
        from .peek import records

        try:
            return records(path, kind, n)
        except Exception as e:  # pyarrow's own errors: not a parquet / arrow file
            raise DataError(say("data.not_readable", path=str(path), kind=kind, why=str(e))) from None
    try:
        out = subprocess.run([sys.executable, "-m", "zeroboard.data.peek", str(path), kind, str(n)],
                             capture_output=True, text=True, timeout=PEEK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DataError(say("data.not_readable", path=str(path), kind=kind, why="timeout")) from None
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise DataError(say("data.not_readable", path=str(path), kind=kind, why=why))
    return json.loads(out.stdout)
