"""Every record of a file dataset read as a chat before launch: the first bad one is named, not met mid-run.

The checks used to read a dataset's first records only; a file that breaks
after record 300 then passed, and the run failed at data preparation.  Here
the whole dataset is streamed once -- JSON lists value by value, JSON lines
line by line, CSV row by row, Parquet and Arrow batch by batch -- and each
record goes through the very conversion the trainer's map applies
(``convert.chat_of``); the records LLaMA-Factory skips are counted, the
first one kept to be shown.  Memory stays flat (one record, and the first few
chats kept for the cutoff check); a result is remembered per dataset and
file state (size, modification time), so Preview and Start do not read an
unchanged file again.

Parquet and Arrow need pyarrow, which the web server never loads: it runs
``python -m zeroboard.data.scan`` (this module) in a subprocess.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import safeload
from ..words import Msg, from_json, say, to_json
from .convert import Chat, chat_of, detect_format
from .formats import DataError, Skipped
from .info import DatasetSource
from .records import CHUNK, DEFAULT, Sizes, _lines, csv_records, iter_json_list

KEEP = 64  # chats kept from the start, for the cutoff check
SCAN_TIMEOUT_S = 600
_CACHE: OrderedDict[str, Scanned] = OrderedDict()
_CACHE_SIZE = 32
_LOCK = threading.Lock()


@dataclass
class Scanned:
    """A dataset read whole: how many records, the first chats, the first bad record (None: all good), and the
    records skipped as LLaMA-Factory skips them (the first one: where and why)."""

    records: int = 0
    first: list[Chat] = field(default_factory=list)
    error: Msg | None = None
    skipped: int = 0
    first_skipped: Msg | None = None


def scan(src: DatasetSource, sizes: Sizes = DEFAULT) -> Scanned:
    """Read every record of a file dataset as the trainer will, each within ``sizes`` (cached while the files and
    the sizes do not change)."""
    try:
        key = json.dumps([src.describe(), sizes.cell, sizes.record], sort_keys=True, default=str)
    except OSError as e:  # a file vanished between resolving and now
        return Scanned(error=say("data.cannot_read", path=src.where, why=e.strerror or str(e)))
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    if src.kind in ("parquet", "arrow") and sys.modules.get("pyarrow") is None:
        result = _scan_elsewhere(src)
    else:
        result = scan_here(src, sizes)
    with _LOCK:
        _CACHE[key] = result
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return result


def scan_here(src: DatasetSource, sizes: Sizes = DEFAULT) -> Scanned:
    out = Scanned()
    fmt: str | None = None
    try:
        for path in src.files:
            for i, record in _records(path, src.kind, sizes):
                if fmt is None and src.formatting == "auto":
                    fmt = _detect(src, record, out.records)
                out.records += 1
                try:
                    chat = chat_of(record, src, fmt)
                except Skipped as e:
                    out.skipped += 1
                    if out.first_skipped is None:
                        out.first_skipped = say("data.record_error", path=str(path), i=i, why=e.args[0])
                    continue
                except DataError as e:
                    raise DataError(say("data.record_error", path=str(path), i=i, why=e.args[0])) from None
                if len(out.first) < KEEP:
                    out.first.append(chat)
    except DataError as e:
        out.error = e.args[0]
        return out
    if out.records == 0:
        out.error = say("data.empty", path=src.where)
    elif out.skipped == out.records:
        out.error = say("data.all_skipped_first", n=out.skipped, first=out.first_skipped)
    return out


def _detect(src: DatasetSource, record, i: int) -> str:
    try:
        return detect_format(record) if isinstance(record, dict) else "alpaca"
    except DataError as e:
        raise DataError(say("data.record_error", path=src.where, i=i, why=e.args[0])) from None


def _records(path: Path, kind: str, sizes: Sizes = DEFAULT) -> Iterator[tuple[int, object]]:
    """(index within the file, record) for every record of one file; DataError at the first that cannot be read
    (or is larger than ``sizes`` allows)."""
    if kind in ("parquet", "arrow"):
        from .peek import iter_records  # pyarrow: only in a process that has it (the trainer, this module's main)

        try:
            yield from enumerate(iter_records(path, kind))
        except Exception as e:  # pyarrow's own errors: not a parquet / arrow file
            raise DataError(say("data.not_readable", path=str(path), kind=kind, why=str(e)[:300])) from None
        return
    try:
        with safeload.open_text(path, newline="" if kind == "csv" else None) as fh:
            if kind == "csv":  # an empty cell is missing, as the datasets library reads it
                yield from enumerate({k: v if v != "" else None for k, v in row.items()} for row in csv_records(fh, path, sizes))
                return
            start = fh.read(CHUNK)
            body = start.lstrip()
            if body.startswith("["):
                yield from enumerate(_json_list(fh, body[1:], path, sizes))
            else:
                yield from _json_lines(start, fh, path, sizes)
    except UnicodeDecodeError:
        raise DataError(say("data.not_utf8", path=str(path))) from None
    except safeload.Refused as e:  # a FIFO or a device put where a data file was
        raise DataError(say("data.cannot_read", path=str(path), why=say(e.key, **e.values))) from None
    except OSError as e:
        raise DataError(say("data.cannot_read", path=str(path), why=e.strerror or str(e))) from None
    except RecursionError:
        raise DataError(say("data.not_json", path=str(path), why=say("safe.too_deep", limit=1000))) from None


def _json_list(fh, buf: str, path: Path, sizes: Sizes) -> Iterator[object]:
    i = 0
    values = iter_json_list(fh, buf, path, sizes.record)
    while True:
        try:
            value = next(values)
        except StopIteration:
            return
        except DataError as e:  # the list breaks here: name the record where it broke
            if getattr(e.args[0], "key", None) == "data.record_too_big":
                raise
            raise DataError(say("data.record_error", path=str(path), i=i, why=e.args[0])) from None
        yield value
        i += 1


def _json_lines(start: str, fh, path: Path, sizes: Sizes) -> Iterator[tuple[int, object]]:
    i = 0
    limits = dataclasses.replace(safeload.RECORD, max_bytes=sizes.record)
    for lineno, line in enumerate(_lines(io.StringIO(start), fh, path, sizes.record), 1):
        if not line.strip():
            continue
        try:
            value = safeload.json_text(line, limits)
        except safeload.Refused as e:
            raise DataError(say("data.line_not_json", path=str(path), line=lineno, why=say(e.key, **e.values))) from None
        except ValueError as e:
            raise DataError(say("data.line_not_json", path=str(path), line=lineno, why=str(e))) from None
        yield i, value
        i += 1


def _scan_elsewhere(src: DatasetSource) -> Scanned:
    """Parquet or Arrow from a process that must not load pyarrow: the scan runs in a subprocess."""
    payload = json.dumps({"name": src.name, "files": [str(p) for p in src.files], "kind": src.kind,
                          "formatting": src.formatting, "columns": src.columns, "tags": src.tags})
    try:
        done = subprocess.run([sys.executable, "-m", "zeroboard.data.scan"], input=payload,
                              capture_output=True, text=True, timeout=SCAN_TIMEOUT_S)
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return Scanned(error=say("data.not_readable", path=src.where, kind=src.kind, why="timeout"))
    except (ValueError, IndexError):
        why = (done.stderr.strip().splitlines() or ["?"])[-1]
        return Scanned(error=say("data.not_readable", path=src.where, kind=src.kind, why=why[:300]))
    first = [Chat(c["messages"], c.get("tools")) for c in data["first"]]
    return Scanned(data["records"], first, from_json(data["error"]) if data["error"] else None, data["skipped"],
                   from_json(data["first_skipped"]) if data["first_skipped"] else None)


def scan_request(payload: str) -> dict:
    """What ``python -m zeroboard.data.scan`` answers: the scan of the dataset described on its stdin."""
    req = json.loads(payload)
    src = DatasetSource(req["name"], "file", [Path(p) for p in req["files"]], req["kind"],
                        formatting=req["formatting"], columns=req["columns"], tags=req["tags"])
    result = scan_here(src)
    return {"records": result.records, "first": [{"messages": c.messages, "tools": c.tools} for c in result.first],
            "error": to_json(result.error) if result.error else None, "skipped": result.skipped,
            "first_skipped": to_json(result.first_skipped) if result.first_skipped else None}


def main() -> int:
    print(json.dumps(scan_request(sys.stdin.read()), ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
