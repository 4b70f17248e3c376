"""Datasets as LLaMA-Factory describes them: an entry of ``dataset_dir/dataset_info.json``, or a file path.

Pure Python (no ``datasets``): the web server resolves entries to validate a
job and preview its data; the trainer resolves them the same way and hands
the result to the ``datasets`` library.  An entry reads (every key optional
but one of ``file_name`` / ``hf_hub_url`` / ``ms_hub_url`` / ``script_url``)::

    "mine": {"file_name": "mine.json" | "a_folder",
             "formatting": "alpaca" | "sharegpt" | "openai",
             "columns": {"prompt": ..., "query": ..., "response": ..., "history": ...,
                         "messages": ..., "system": ..., "tools": ...,
                         "chosen": ..., "rejected": ..., "kto_tag": ...},
             "tags": {"role_tag": ..., "content_tag": ..., "user_tag": ..., "assistant_tag": ...,
                      "observation_tag": ..., "function_tag": ..., "system_tag": ...},
             "subset": ..., "split": "train", "folder": ..., "num_samples": 1000, "ranking": true}

Preference data as LLaMA-Factory has it: ``ranking: true`` with a chosen and a rejected answer per prompt (alpaca:
two text columns; sharegpt: two messages beside the conversation) is ``pairwise``; a ``kto_tag`` column (true: a
good answer, false: a bad one) is ``kto`` (:attr:`DatasetSource.preference`).  Which training stage takes which
is :func:`stage_problem`'s rule.  Keys LLaMA-Factory knows that a text model has no use for (images, ...) and keys
nobody knows are collected in ``DatasetSource.unknown`` so the checks can name them in a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import safeload, workspace
from ..words import say
from . import hubdir
from .formats import DataError

# file suffix -> the datasets library's loader (LLaMA-Factory's FILEEXT2TYPE, less plain text)
FILE_TYPES = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
FORMATTINGS = ("alpaca", "sharegpt", "openai")
COLUMNS = ("prompt", "query", "response", "history", "messages", "system", "tools", "images")
TAGS = ("role_tag", "content_tag", "user_tag", "assistant_tag", "observation_tag", "function_tag", "system_tag")
ENTRY_KEYS = ("file_name", "hf_hub_url", "ms_hub_url", "script_url", "formatting", "columns", "tags", "subset", "split",
              "folder", "num_samples", "ranking")
# LLaMA-Factory keys for other inputs: read, then named as not used here
NOT_FOR_SFT = ("cloud_file_name", "om_hub_url", "videos", "audios")
# ...of which these make a dataset one that ZeroBoard cannot train on as meant: media it would learn as the
# placeholder's letters (images are trained, with a vision-language model: data.media)
MEDIA = ("videos", "audios")
PREFERENCE = ("chosen", "rejected", "kto_tag")
REFUSED_FOR_SFT = MEDIA
PAIRWISE_STAGES = ("dpo", "orpo", "simpo")  # training stages that learn from a chosen and a rejected answer


@dataclass
class DatasetSource:
    """One dataset: where it is (files or a hub repository) and how its records read."""

    name: str
    load_from: str  # "file", "hf_hub", "ms_hub" or "script"
    files: list[Path] = field(default_factory=list)  # for "file": every data file (a folder's, sorted)
    kind: str = ""  # for "file": the datasets library's loader (json, csv, parquet, arrow)
    hub: str = ""  # for the hubs: the repository id; for "script": the script's folder
    formatting: str = "auto"  # alpaca, sharegpt, openai; auto: told by the first record (a bare file path)
    columns: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    subset: str | None = None
    split: str = "train"
    folder: str | None = None
    num_samples: int | None = None
    unknown: list[str] = field(default_factory=list)  # keys of the entry this tool does not use
    ranking: bool = False  # pairs of a chosen and a rejected answer (LLaMA-Factory's ranking: true)
    media_dir: str = ""  # where the records' relative image paths start: the dataset folder (LLaMA-Factory's media_dir)

    @property
    def preference(self) -> str:
        """``pairwise`` (ranking: true), ``kto`` (a kto_tag column) or ``""`` (one answer per prompt: SFT data)."""
        return "pairwise" if self.ranking else "kto" if "kto_tag" in self.columns else ""

    @property
    def images(self) -> str | None:
        """The column of the records' image files (``columns.images``), or None: a text dataset."""
        return self.columns.get("images")

    @property
    def where(self) -> str:
        """The file, folder or repository, as a message names it."""
        if self.load_from == "file":
            return str(self.files[0]) if len(self.files) == 1 else str(self.files[0].parent)
        return self.hub

    def describe(self) -> dict:
        """What identifies the data, for a cache key: files with their size and time, or the hub names."""
        out = {"name": self.name, "load_from": self.load_from, "formatting": self.formatting, "columns": self.columns,
               "tags": self.tags, "subset": self.subset, "split": self.split, "folder": self.folder,
               "num_samples": self.num_samples, "hub": self.hub, "ranking": self.ranking}
        if self.load_from == "file":
            out["files"] = [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in self.files]
        return out


def _confined(path: Path) -> Path:
    """A data file may only be read inside the workspace, a folder allowed to it, or the Hugging Face cache."""
    ws = workspace.current()
    if not ws.readable(path, cache_ok=True):
        raise DataError(say("check.read_outside", path=str(path), roots=ws.describe()))
    return path


def data_files(path: Path, name: str) -> tuple[list[Path], str]:
    """The data files of a file or a folder, and their loader; one kind of file per dataset."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise DataError(say("data.folder_empty", name=name, path=str(path)))
    elif path.is_file():
        files = [path]
    elif (kind := safeload.special_kind(path)) is not None:  # a FIFO would hold every read of it for ever
        raise DataError(say("data.special_file", name=name, path=str(path), why=say(kind)))
    else:
        raise DataError(say("data.points_nowhere", name=name, path=str(path)))
    kinds = {FILE_TYPES.get(p.suffix.lower()) for p in files}
    if None in kinds:
        odd = next(p for p in files if p.suffix.lower() not in FILE_TYPES)
        raise DataError(say("data.file_type", path=str(odd), types=", ".join(FILE_TYPES)))
    if len(kinds) > 1:
        raise DataError(say("data.mixed_types", name=name, path=str(path)))
    for p in files:
        _confined(p)  # an entry such as ../../etc/passwd, or a link out of the workspace, is refused
    return files, kinds.pop()


def _from_path(name: str, dataset_dir: str | Path) -> DatasetSource | None:
    """A dataset given as a file path (or a folder of data files) rather than a name."""
    p = Path(name)
    if p.suffix.lower() not in FILE_TYPES:
        return None
    if not p.is_absolute() and not p.exists():
        p = Path(dataset_dir) / p
    if not p.exists():
        raise DataError(say("data.file_missing", name=name, dir=str(dataset_dir)))
    files, kind = data_files(_confined(p), name)
    return DatasetSource(p.stem, "file", files, kind)


def read_info(dataset_dir: str | Path, name: str) -> tuple[dict, Path]:
    info_path = _confined(Path(dataset_dir)) / "dataset_info.json"
    if not info_path.is_file() and safeload.special_kind(info_path) is None:
        raise DataError(say("data.no_info", name=name, info=str(info_path)))
    try:
        info = safeload.json_text(safeload.read_text(info_path, safeload.CONFIG), safeload.CONFIG)
    except safeload.Refused as e:
        raise DataError(say("data.info_unsafe", path=str(info_path), why=say(e.key, **e.values))) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DataError(say("data.info_not_json", path=str(info_path), why=str(e))) from None
    if not isinstance(info, dict):
        raise DataError(say("data.info_not_mapping", path=str(info_path)))
    return info, info_path


def resolve(name: str, dataset_dir: str | Path) -> DatasetSource:
    """The dataset a name of the job's ``dataset`` field stands for (DataError naming the file and the fix)."""
    try:
        return _resolve(name, dataset_dir)
    except OSError as e:  # a name the filesystem cannot hold (too long), a folder it cannot list
        raise DataError(say("data.cannot_read", path=str(Path(dataset_dir) / name)[:200], why=e.strerror or str(e))) from None


def _resolve(name: str, dataset_dir: str | Path) -> DatasetSource:
    if hubdir.is_online(dataset_dir):  # LLaMA-Factory's ONLINE: the name is a hub dataset's id, alpaca unless mapped
        return DatasetSource(name, "hf_hub", hub=name, formatting="alpaca")
    repo = hubdir.remote_repo(dataset_dir)
    dataset_dir = hubdir.local_folder(dataset_dir)  # REMOTE:owner/name: the hub cache's copy
    src = _from_path(name, dataset_dir)
    if src is not None:
        return src
    info, info_path = read_info(dataset_dir, name)
    if name not in info:
        known = ", ".join(sorted(info)) or "none"
        raise DataError(say("data.not_in_info", name=name, info=str(info_path), known=known))
    entry = info[name]
    if not isinstance(entry, dict):
        raise DataError(say("data.entry_not_mapping", info=str(info_path), name=name))
    return _entry(name, entry, Path(dataset_dir), info_path, repo)


def _mapping(entry: dict, key: str, known: tuple[str, ...], info: Path, name: str, unknown: list[str]) -> dict[str, str]:
    value = entry.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise DataError(say("data.entry_field", info=str(info), name=name, field=key))
    unknown += [f"{key}.{k}" for k in value if k not in known]
    return {k: v for k, v in value.items() if k in known}


def _entry(name: str, entry: dict, dataset_dir: Path, info: Path, repo: str | None = None) -> DatasetSource:
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    columns = _mapping(entry, "columns", COLUMNS + PREFERENCE + NOT_FOR_SFT, info, name, unknown)
    media = [k for k in columns if k in MEDIA]
    if media:
        raise DataError(say("data.not_sft", name=name, keys=", ".join(f"columns.{k}" for k in media), info=str(info)))
    unknown += [f"columns.{k}" for k in columns if k in NOT_FOR_SFT]
    columns = {k: v for k, v in columns.items() if k in COLUMNS + PREFERENCE}
    ranking = entry.get("ranking", False)
    if not isinstance(ranking, bool):
        raise DataError(say("data.entry_field", info=str(info), name=name, field="ranking"))
    if not ranking:  # LLaMA-Factory reads chosen / rejected only with ranking: true (named as unused)
        unknown += [f"columns.{k}" for k in ("chosen", "rejected") if k in columns]
        columns = {k: v for k, v in columns.items() if k not in ("chosen", "rejected")}
    tags = _mapping(entry, "tags", TAGS, info, name, unknown)
    formatting = entry.get("formatting")
    if formatting is None:  # LLaMA-Factory's default is alpaca; a mapped messages column says sharegpt
        formatting = "sharegpt" if "messages" in columns or tags else "alpaca"
    if formatting not in FORMATTINGS:
        raise DataError(say("data.bad_formatting", name=name, fmt=repr(formatting)))
    num = entry.get("num_samples")
    if num is not None and (isinstance(num, bool) or not isinstance(num, int) or num < 1):
        raise DataError(say("data.entry_field", info=str(info), name=name, field="num_samples"))
    common = dict(formatting=formatting, columns=columns, tags=tags, subset=entry.get("subset"),
                  split=str(entry.get("split") or "train"), folder=entry.get("folder"), num_samples=num, unknown=unknown,
                  ranking=ranking, media_dir=str(dataset_dir))
    for key, load_from in (("hf_hub_url", "hf_hub"), ("ms_hub_url", "ms_hub")):
        if entry.get(key):
            return DatasetSource(name, load_from, hub=str(entry[key]), **common)
    if entry.get("script_url"):
        script = _confined(dataset_dir / str(entry["script_url"]))
        return DatasetSource(name, "script", hub=str(script), **common)
    file_name = entry.get("file_name")
    if not file_name:
        raise DataError(say("data.no_file_name", info=str(info), name=name))
    if repo is not None:  # a file of the hub repository that holds the dataset_info.json: fetched beside it
        hubdir.fetch(repo, str(file_name))
    files, kind = data_files(dataset_dir / str(file_name), name)
    return DatasetSource(name, "file", files, kind, **common)


def stage_problem(src: DatasetSource, stage: str):
    """Why a training stage cannot learn from this dataset (a catalog Msg), or None: SFT takes one answer per prompt,
    dpo/orpo/simpo a chosen and a rejected answer (``ranking: true``), kto answers tagged good or bad (``kto_tag``)."""
    kind = src.preference
    if src.images and stage != "sft":
        return say("data.images_not_sft", name=src.name, stage=stage)
    if stage == "sft" and kind:
        return say("data.not_sft_pref", name=src.name, kind=kind)
    if stage in PAIRWISE_STAGES and kind != "pairwise":
        return say("data.not_pairwise", name=src.name, stage=stage, kind=kind or "sft")
    if stage == "kto" and kind != "kto":
        return say("data.not_kto", name=src.name, kind=kind or "sft")
    return None
