"""Data preparation that scales: read with the ``datasets`` library, template and tokenize once, cache, share.

One cache entry per (data, tokenizer, template, cutoff): a folder under
``$ZEROBOARD_DATA_CACHE`` (default: the ``datasets`` cache's ``zeroboard``
folder) named by a hash of the data files (path, size, time) or hub names, the
tokenizer's full definition, the chat template and the settings that change
the tokens.  Only the main process of each node builds it (``main_first``: the
Trainer's ``main_process_first``), with ``map(num_proc=...)`` workers; every
other rank waits, then memory-maps what was built.  A second run with the
same data, tokenizer and template tokenizes nothing.

Each row keeps, besides ``input_ids`` and ``labels``: ``length`` (after the
cutoff), ``full_length`` (before), ``prompt_length`` (tokens before the first
answer), ``learned`` (tokens with a label), ``source`` and ``record`` (which
dataset and which of its records).  A sample longer than ``cutoff_len`` is cut
by the job's ``truncation`` rule (``data.tokens``).  Records that cannot be used are skipped and
counted, with the first few reasons kept in the entry's ``info.json``; so are
samples whose prompt fills the cutoff (nothing left to learn).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import files, words
from ..data import convert, info as datainfo, media, records as datarecords, tokens
from ..data.formats import DataError
from ..data.info import DatasetSource
from ..job import mapping, modelinfo, spec as specmod
from ..words import say
from . import dataload, prefdata, templates

VERSION = 2  # of the rows this module writes: a change here makes new cache entries
CACHE_ENV = "ZEROBOARD_DATA_CACHE"
BATCH = 1000
ROWS_PER_WORKER = 20_000  # fewer rows than this per worker: starting workers costs more than it saves
MAX_WORKERS = 16
PROBLEMS_KEPT = 20
log = logging.getLogger("zeroboard.train")


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / "zeroboard"


def tokenizer_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(f"{type(tokenizer).__name__}\n{text}".encode()).hexdigest()


def cache_key(sources: list[DatasetSource], tokenizer, job: specmod.JobSpec, vision=None) -> str:
    what = {"version": VERSION, "sources": [s.describe() for s in sources], "max_samples": job.max_samples,
            "seed": job.seed, "mix": [job.mix_strategy, job.interleave_probs] if len(sources) > 1 else None,
            "cutoff_len": job.cutoff_len, "truncation": job.truncation, "template": tokenizer.chat_template,
            "sizes": [job.max_cell_bytes, job.max_record_bytes],
            "special": templates.special_tokens(tokenizer), "tokenizer": tokenizer_fingerprint(tokenizer)}
    if job.training_stage != "sft":  # a preference stage's rows (training.prefdata): SFT's keys stay as they were
        what["stage"] = job.training_stage
    if vision is not None:  # a vision-language model's: the image tokens and the files (text-only keys as they were)
        what["vision"] = vision.describe()
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:24]


@contextlib.contextmanager
def environ_kept():
    """``os.environ`` stays the process's own mapping. datasets' ``map(num_proc=N)`` swaps it for a copy it took before
    its workers started (its way of putting TOKENIZERS_PARALLELISM back): whatever held the real one (a later change
    of this process, a caller's saved state to restore) then wrote into a mapping nobody reads, and what it restored
    stayed set.  The copy's values go back into the real mapping, which is os.environ again."""
    real = os.environ
    try:
        yield
    finally:
        if os.environ is not real:
            swapped = dict(os.environ)
            os.environ = real  # noqa: B003 (the real mapping back in its place, not a clearing)
            for key in set(real) - set(swapped):
                del real[key]
            real.update(swapped)


def workers(job: specmod.JobSpec, rows: int) -> int:
    """The job's count, at most this machine's cores (a file written for a bigger node asks for more); 0: one per
    ROWS_PER_WORKER records, up to the cores and MAX_WORKERS."""
    cores = mapping.cores()
    if job.preprocessing_num_workers > 0:
        return min(job.preprocessing_num_workers, cores)
    return max(1, min(cores, MAX_WORKERS, rows // ROWS_PER_WORKER))


# --- one batch of records -> rows ------------------------------------------------------------------


@dataclass
class TokenizeBatch:
    """The map function: records -> chats -> text -> tokens with labels (picklable, for the map's workers)."""

    src: DatasetSource
    source: int
    formatting: str | None
    tokenizer: Any
    renderer: templates.Renderer
    cutoff: int
    truncation: tokens.Rule = "proportional"
    sizes: datarecords.Sizes = datarecords.DEFAULT  # the job's max_cell_bytes and max_record_bytes
    vision: Any = None  # training.vision.Vision: a vision-language model's images (the rows name their files)

    def __call__(self, batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        keys = list(batch)
        layouts, where, problems, images = [], [], {}, {}
        for j, i in enumerate(indices):
            record = {k: batch[k][j] for k in keys}
            try:
                too_big = datarecords.size_problem(record, self.src.kind, self.sizes, i)
                if too_big is not None:
                    raise DataError(too_big)
                c = convert.chat_of(record, self.src, self.formatting)
                messages = c.messages
                if self.vision is not None and self.src.images:  # each <image> tag: the model's image tokens
                    files = media.image_files(record, self.src.images, self.src.media_dir)
                    messages, pads = self.vision.expand(messages, files)
                    images[i] = (files, pads)
                layouts.append(self.renderer.layout(messages, c.tools))
            except Exception as e:  # a record that cannot be used: skipped, counted, its reason kept
                msg = e.args[0] if isinstance(e, DataError) else say("data.template_failed", why=f"{type(e).__name__}: {e}")
                problems[i] = json.dumps(words.to_json(msg), ensure_ascii=False)
                continue
            where.append(i)
        out: dict[str, list] = {k: [] for k in ("input_ids", "labels", "length", "full_length", "prompt_length", "learned",
                                                "source", "record", "problem", "images")}
        encoded = dict(zip(where, templates.encode_layouts(self.tokenizer, layouts)))
        for i in indices:
            ids, ranges = encoded.get(i, ([], []))
            input_ids, labels = tokens.cut(ids, ranges, self.cutoff, self.truncation)
            files, pads = images.get(i, ([], 0))
            if pads and input_ids.count(self.vision.ids[1]) != pads:  # the cut went into an image's tokens
                problems[i] = json.dumps(words.to_json(say("data.image_cut", cutoff=self.cutoff)), ensure_ascii=False)
            out["images"].append(files)
            out["input_ids"].append(input_ids)
            out["labels"].append(labels)
            out["length"].append(len(input_ids))
            out["full_length"].append(len(ids))
            out["prompt_length"].append(ranges[0][0] if ranges else len(ids))
            out["learned"].append(sum(label != tokens.IGNORE for label in labels))
            out["source"].append(self.source)
            out["record"].append(i)
            out["problem"].append(problems.get(i, ""))
        if self.vision is None:
            del out["images"]
        return out


def _features(vision: bool = False):
    import datasets

    seq = getattr(datasets, "List", datasets.Sequence)
    extra = {"images": seq(datasets.Value("string"))} if vision else {}
    ints = {k: datasets.Value("int32") for k in ("length", "full_length", "prompt_length", "learned")}
    return datasets.Features({"input_ids": seq(datasets.Value("int32")), "labels": seq(datasets.Value("int32")), **ints,
                              "source": datasets.Value("int32"), "record": datasets.Value("int64"),
                              "problem": datasets.Value("string"), **extra})


# --- building a cache entry ---------------------------------------------------------------------------


def _formatting(src: DatasetSource, raw) -> str | None:
    if src.formatting != "auto":
        return src.formatting
    try:
        return convert.detect_format(raw[0])
    except DataError as e:
        raise DataError(say("data.record_error", path=src.where, i=0, why=e.args[0])) from None


def build(sources: list[DatasetSource], tokenizer, job: specmod.JobSpec, out: Path, vision=None) -> dict:
    """Read, template and tokenize every source into the cache entry ``out``; returns its info."""
    t0 = time.time()
    staging = out.with_name(f"{out.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    renderer = templates.Renderer.of(tokenizer)
    kind = prefdata.kind_of(job.training_stage)  # a preference stage's rows: a pair, or an answer and its tag
    parts, read, phases = [], 0, {"read": 0.0, "tokenize": 0.0}
    for n, src in enumerate(sources):
        t = time.time()
        raw = dataload.load_source(src, job.seed, job.max_samples)
        phases["read"] += time.time() - t
        t = time.time()
        procs = workers(job, len(raw))
        log.info("dataset %s: %d records from %s, tokenizing with %d process(es)", src.name, len(raw), src.where, procs)
        common = (src, n, _formatting(src, raw), tokenizer, renderer, job.cutoff_len, job.truncation,
                  datarecords.Sizes(job.max_cell_bytes, job.max_record_bytes))
        fn = prefdata.PreferenceBatch(*common, kind=kind) if kind else TokenizeBatch(*common, vision=vision)
        features = prefdata.features(kind) if kind else _features(vision is not None)
        with environ_kept():
            parts.append(raw.map(fn, batched=True, batch_size=BATCH, with_indices=True, remove_columns=raw.column_names,
                                 features=features, num_proc=procs if procs > 1 else None,
                                 cache_file_name=str(staging / f"map-{n}.arrow"), new_fingerprint=f"{out.name}-{n}"))
        phases["tokenize"] += time.time() - t
        read += len(raw)
    ds = mix(parts, job)
    if job.mix_strategy != "concat" and len(parts) > 1:  # the draw is an index over the parts: written out in order
        ds = ds.flatten_indices(cache_file_name=str(staging / "mixed.arrow"), new_fingerprint=f"{out.name}-mixed")
    learned = ds.data.column("learned").to_numpy()
    problem = np.asarray(ds.data.column("problem").to_pylist(), dtype=object) != ""
    full = ds.data.column("full_length").to_numpy()
    keep = (learned > 0) & ~problem
    kept = ds.select(np.flatnonzero(keep).tolist(), keep_in_memory=True).remove_columns("problem")
    first_problems = []
    for i in np.flatnonzero(problem)[:PROBLEMS_KEPT]:
        src = sources[int(ds[int(i)]["source"])]
        first_problems.append({"source": src.name, "where": src.where, "record": int(ds[int(i)]["record"]),
                               "message": json.loads(ds[int(i)]["problem"])})
    lengths = ds.data.column("length").to_numpy()
    info = {
        "version": VERSION, "sources": [{"name": s.name, "where": s.where} for s in sources],
        "records": read, "samples": int(keep.sum()), "tokens": int(lengths[keep].sum()),
        "learned_tokens": int(learned[keep].sum()), "truncated": int(((full > job.cutoff_len) & ~problem).sum()),
        "answer_lost": int(((learned == 0) & ~problem).sum()), "skipped": int(problem.sum()),
        "problems": first_problems, "cutoff_len": job.cutoff_len, "truncation": job.truncation, "template": tokenizer.chat_template,
    }
    t = time.time()
    kept.save_to_disk(str(staging / "data"))
    phases["save"] = time.time() - t
    info["seconds"] = round(time.time() - t0, 3)
    info["phases_s"] = {k: round(v, 3) for k, v in phases.items()}
    for p in [*staging.glob("map-*"), *staging.glob("mixed*")]:
        p.unlink()
    files.write_text_atomic(staging / "info.json", json.dumps(info, indent=1) + "\n")
    if out.exists() and not job.overwrite_cache:  # another process (a node sharing the cache) built it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
        return json.loads((out / "info.json").read_text(encoding="utf-8"))
    if out.exists():  # overwrite_cache: the old entry moves aside first, so no reader ever finds the folder missing
        old = out.with_name(f"{out.name}.old-{os.getpid()}")
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        try:
            staging.rename(out)
        except OSError:  # built by another process between the look and the rename: keep theirs
            if not is_built(out):
                raise
            shutil.rmtree(staging, ignore_errors=True)
    return info


STOPPING = {"interleave_under": "first_exhausted", "interleave_over": "all_exhausted",
            "interleave_once": "all_exhausted_without_replacement"}


def mix(parts: list, job: specmod.JobSpec):
    """Several datasets as one, as LLaMA-Factory's ``merge_dataset`` mixes them: one after another (concat), or drawn
    in turn or with ``interleave_probs`` from the job's seed until the first runs out (interleave_under), until every
    one has (interleave_over: the shorter ones again), or each record once (interleave_once).

    Every record still has its row here (one that cannot be used is left out afterwards), so the draw is the one
    LLaMA-Factory makes on its records: the same rows in the same order."""
    import datasets

    if len(parts) == 1:
        return parts[0]
    if job.mix_strategy == "concat":
        return datasets.concatenate_datasets(parts)
    return datasets.interleave_datasets(parts, probabilities=job.interleave_probs or None, seed=job.seed,
                                        stopping_strategy=STOPPING[job.mix_strategy])


def is_built(path: Path) -> bool:
    return (path / "info.json").is_file() and (path / "data").is_dir()


# --- what the trainer and `zeroboard dataset` call ---------------------------------------------------


@dataclass
class Tokenized:
    dataset: Any  # datasets.Dataset, memory-mapped
    info: dict
    path: Path
    built: bool  # this process tokenized it (False: read from the cache)


def tokenized(names: list[str], job: specmod.JobSpec, tokenizer, main_first=contextlib.nullcontext,
              is_main: bool = True, vision=None) -> Tokenized:
    """The tokenized datasets ``names``: built by the main process if missing, read from the cache by all."""
    import datasets

    datasets.disable_progress_bars()
    sources = [datainfo.resolve(n, job.dataset_dir) for n in names]
    for src in sources:  # pairs for dpo/orpo/simpo, tagged answers for kto, one answer for sft (checked before launch)
        if (unfit := datainfo.stage_problem(src, job.training_stage)) is not None:
            raise DataError(unfit)
        if src.images and vision is None:  # checked before launch too: a text-only model cannot see them
            kind = modelinfo.model_type(Path(job.model_name_or_path)) or "?"
            raise DataError(media.images_problem(src.name, job.model_name_or_path, kind, False))
    path = cache_root() / cache_key(sources, tokenizer, job, vision)
    built = False
    with main_first():
        if is_main and (job.overwrite_cache or not is_built(path)):
            path.parent.mkdir(parents=True, exist_ok=True)
            build(sources, tokenizer, job, path, vision)
            built = True
        elif not is_built(path):  # the main process failed to build it: its error says why
            raise RuntimeError(say("train.data_not_built", path=str(path)))
    info = json.loads((path / "info.json").read_text(encoding="utf-8"))
    if not info["samples"]:
        raise DataError(nothing_to_learn(info))
    return Tokenized(datasets.load_from_disk(str(path / "data")), info, path, built)


def nothing_to_learn(info: dict):
    if info["problems"]:
        p = info["problems"][0]
        return say("data.all_skipped", n=info["skipped"], path=p["where"], i=p["record"], why=words.from_json(p["message"]))
    return say("train.cutoff_every_answer", cutoff=info["cutoff_len"])


@dataclass
class Prepared:
    train: Any
    eval: Any | None
    info: dict
    full: Any = None  # the training data before the validation split, in the order of its records
    eval_info: dict | None = None
    built: bool = False
    seconds: float = 0.0
    paths: list[Path] = field(default_factory=list)


def prepare(job: specmod.JobSpec, tokenizer, main_first=contextlib.nullcontext, is_main: bool = True,
            vision=None) -> Prepared:
    """The training set and the evaluation set (``eval_dataset``, or ``val_size`` of the training data)."""
    t0 = time.time()
    train = tokenized(job.dataset, job, tokenizer, main_first, is_main, vision)
    out = Prepared(train.dataset, None, train.info, train.dataset, built=train.built, paths=[train.path])
    if job.eval_dataset:
        ev = tokenized(job.eval_dataset, job, tokenizer, main_first, is_main, vision)
        out.eval, out.eval_info, out.built = ev.dataset, ev.info, out.built or ev.built
        out.paths.append(ev.path)
    elif job.val_size > 0:
        n = len(train.dataset)
        size = int(job.val_size) if job.val_size >= 1 else max(1, round(job.val_size * n))
        if size >= n:
            raise DataError(say("data.val_too_big", val=job.val_size, n=n))
        # the same seed gives every rank the same split; the indices live in memory, the rows stay on disk
        order = np.random.default_rng(job.seed).permutation(n)
        out.train = train.dataset.select(np.sort(order[size:]).tolist(), keep_in_memory=True)
        out.eval = train.dataset.select(np.sort(order[:size]).tolist(), keep_in_memory=True)
    out.seconds = time.time() - t0
    return out
