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

import numpy as np

from ..data.formats import DataError
from ..data.info import DatasetSource
from ..words import say


def _load(src: DatasetSource, num_proc: int | None):
    import datasets

    if src.load_from == "file":
        # one split, "train", for files: the entry's split names a hub dataset's split
        return datasets.load_dataset(src.kind, data_files=[str(p) for p in src.files], split="train", num_proc=num_proc)
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
