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
from pathlib import Path

from ..words import say
from .formats import DataError
from .info import DatasetSource

CHUNK = 1 << 16
PEEK_TIMEOUT_S = 120


def head(src: DatasetSource, n: int) -> list[dict]:
    """Up to ``n`` records from the start of a file dataset (a folder: its files in order)."""
    out: list[dict] = []
    for path in src.files:
        if len(out) >= n:
            break
        out += read_head(path, src.kind, n - len(out))
    if not out:
        raise DataError(say("data.empty", path=src.where))
    return out


def read_head(path: Path, kind: str, n: int) -> list[dict]:
    if kind in ("parquet", "arrow"):
        return _peek(path, kind, n)
    try:
        with path.open(encoding="utf-8", newline="" if kind == "csv" else None) as fh:
            if kind == "csv":
                return _csv(fh, n)
            return _json(fh, path, n)
    except UnicodeDecodeError:
        raise DataError(say("data.not_utf8", path=str(path))) from None
    except OSError as e:
        raise DataError(say("data.cannot_read", path=str(path), why=e.strerror or str(e))) from None


def _csv(fh, n: int) -> list[dict]:
    return [dict(row) for _, row in zip(range(n), csv.DictReader(fh))]


def _json(fh, path: Path, n: int) -> list[dict]:
    """JSON lines, or one JSON list of records (parsed record by record, never the whole file)."""
    start = fh.read(CHUNK)
    body = start.lstrip()
    if not body:
        raise DataError(say("data.empty", path=str(path)))
    if body[0] == "[":
        records = _json_list(fh, body[1:], path, n)
    else:
        records = _json_lines(start, fh, path, n)
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise DataError(say("data.not_object", path=str(path), i=bad))
    return records


def _json_lines(start: str, fh, path: Path, n: int) -> list:
    records: list = []
    for lineno, line in enumerate(_lines(io.StringIO(start), fh), 1):
        if len(records) >= n:
            break
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError as e:
            if lineno == 1 and path.suffix.lower() == ".json":  # one JSON value over many lines: what is it?
                try:
                    json.loads(path.read_text(encoding="utf-8"))
                except ValueError:
                    raise DataError(say("data.not_json", path=str(path), why=str(e))) from None
                raise DataError(say("data.not_list", path=str(path))) from None
            raise DataError(say("data.line_not_json", path=str(path), line=lineno, why=str(e))) from None
    return records


def _lines(first: io.StringIO, fh):
    """The lines of what was read so far, then the rest of the file (a line split across the two joined)."""
    carry = ""
    for line in first:
        if line.endswith("\n"):
            yield carry + line
            carry = ""
        else:
            carry += line
    for line in fh:
        yield carry + line
        carry = ""
    if carry:
        yield carry


def iter_json_list(fh, buf: str, path: Path):
    """The values of a JSON list, one by one, from the text after its ``[`` (``buf``, then the rest of ``fh``)."""
    dec = json.JSONDecoder()
    pos = 0
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
            more = fh.read(CHUNK)
            if not more:
                raise DataError(say("data.not_json", path=str(path), why=str(e))) from None
            buf, pos = buf[pos:] + more, 0
            continue
        yield value
        pos = end


def _json_list(fh, buf: str, path: Path, n: int) -> list:
    return list(itertools.islice(iter_json_list(fh, buf, path), n))


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
