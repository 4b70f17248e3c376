"""``python -m zeroboard.data.peek FILE parquet|arrow N``: the first N records of a Parquet or Arrow file, as JSON.

The one place the data layer touches pyarrow, and only when asked: the web
server never loads pyarrow, so it reads such files through this module in a
short-lived subprocess (``records.head``).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path


def records(path: Path, kind: str, n: int) -> list[dict]:
    return list(itertools.islice(iter_records(path, kind, batch=max(1, min(n, 1024))), n))


def iter_records(path: Path, kind: str, batch: int = 1024):
    """Every record of a Parquet or Arrow file, batch by batch (memory: one batch)."""
    import pyarrow as pa

    if kind == "parquet":
        import pyarrow.parquet as pq

        for b in pq.ParquetFile(str(path)).iter_batches(batch_size=batch):
            yield from b.to_pylist()
        return
    with pa.memory_map(str(path)) as source:  # the datasets library writes the stream format; files too
        try:
            reader = pa.ipc.open_stream(source)
            batches = iter(reader)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        for b in batches:
            yield from b.to_pylist()


def main(argv: list[str]) -> int:
    path, kind, n = Path(argv[0]), argv[1], int(argv[2])
    print(json.dumps(records(path, kind, n), ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
