"""Datasets read by the ``datasets`` library: files (JSON, JSON lines, CSV, Parquet, Arrow, folders of them) and
hub datasets, as memory-mapped Arrow tables.

The library converts a file to Arrow once and keeps it in its cache (keyed on
the file's path, size and time), so a dataset of any size costs a rank the
pages it touches, not a copy in Python objects.  Hub datasets come from the
library's cache when the machine is offline (``HF_DATASETS_OFFLINE=1``) and
from the hub otherwise; ModelScope needs its ``modelscope`` package.
Datasets 4 and later no longer run loading scripts: a ``script_url`` entry
names a local folder the library reads by itself (data files, or a README
that lists them).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..data.formats import DataError
from ..data.info import DatasetSource
from ..data.records import iter_json_list
from ..words import say


def as_json_lines(path: Path) -> Path:
    """A file holding one JSON list of records, as JSON lines: converted once, record by record.

    The datasets library would read such a file whole into Python objects first (about 8 times its size in
    memory, in the process whose map workers then fork from it); JSON lines it reads in chunks.  The copy is
    kept in the datasets cache, named by the file's path, size and time.
    """
    with path.open(encoding="utf-8") as fh:
        head = fh.read(4096).lstrip()
        if not head.startswith("["):
            return path
        import datasets

        st = path.stat()
        key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:20]
        out = Path(datasets.config.HF_DATASETS_CACHE) / "zeroboard-jsonl" / f"{path.stem}-{key}.jsonl"
        if out.is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
        with tmp.open("w", encoding="utf-8") as w:
            for record in iter_json_list(fh, head[1:], path):
                w.write(json.dumps(record, ensure_ascii=False))
                w.write("\n")
        tmp.replace(out)
        return out


def _load(src: DatasetSource, num_proc: int | None):
    import datasets

    if src.load_from == "file":
        files = [as_json_lines(p) if src.kind == "json" else p for p in src.files]
        # one split, "train", for files: the entry's split names a hub dataset's split
        return datasets.load_dataset(src.kind, data_files=[str(p) for p in files], split="train", num_proc=num_proc)
    if src.load_from == "ms_hub":
        try:
            from modelscope import MsDataset  # type: ignore[import-not-found]
        except ImportError:
            raise DataError(say("data.ms_hub_missing", name=src.name, hub=src.hub)) from None
        ds = MsDataset.load(dataset_name=src.hub, subset_name=src.subset, data_dir=src.folder, split=src.split)
        return ds.to_hf_dataset() if hasattr(ds, "to_hf_dataset") else ds
    return datasets.load_dataset(src.hub, name=src.subset, data_dir=src.folder, split=src.split, num_proc=num_proc)


def load_source(src: DatasetSource, seed: int, max_samples: int = 0, num_proc: int | None = None):
    """The records of one dataset as a ``datasets.Dataset``, sampled as the entry and the job ask.

    ``num_samples`` (the entry) draws that many records at random (each once before any twice, as
    LLaMA-Factory does), ``max_samples`` (the job) then keeps the first so many.
    """
    try:
        ds = _load(src, num_proc)
    except DataError:
        raise
    except Exception as e:  # the library's own errors: a file it cannot parse, a hub dataset not in the cache
        why = f"{type(e).__name__}: {e}".strip()
        raise DataError(say("data.load_failed", name=src.name, where=src.where, why=why[-600:])) from None
    if len(ds) == 0:
        raise DataError(say("data.empty", path=src.where))
    if src.num_samples:
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(ds))[: src.num_samples]
        if len(order) < src.num_samples:
            order = np.concatenate([order, rng.choice(len(ds), src.num_samples - len(order))])
        ds = ds.select(order.tolist())
    if max_samples > 0 and len(ds) > max_samples:
        ds = ds.select(range(max_samples))
    return ds
