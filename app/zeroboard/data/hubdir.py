"""``dataset_dir`` on the Hugging Face hub, as LLaMA-Factory reads it.

``REMOTE:owner/name``: the dataset repository ``owner/name`` holds the ``dataset_info.json``; its entries name hub
datasets (``hf_hub_url``) or files of that repository (``file_name``).  The files are fetched into the hub cache the
first time a job reads them (offline: read from the cache, where a download left them) and read from there, as any
folder is.  ``ONLINE``: there is no ``dataset_info.json``; each dataset name is a hub dataset's id.

Only ``huggingface_hub`` (no torch): the web server resolves a job's data to check and preview it.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import workspace
from ..words import say
from .formats import DataError

REMOTE = "REMOTE:"
ONLINE = "ONLINE"
INFO = "dataset_info.json"


def remote_repo(dataset_dir: str | Path) -> str | None:
    """The repository of a ``REMOTE:owner/name`` dataset_dir (None for a folder)."""
    text = str(dataset_dir).strip()
    return text[len(REMOTE):].strip() if text.startswith(REMOTE) else None


def is_online(dataset_dir: str | Path) -> bool:
    return str(dataset_dir).strip() == ONLINE


def hub_cache() -> Path:
    """Where huggingface_hub keeps what it fetched: $HF_HUB_CACHE, else the hub folder of the Hugging Face home (read
    at each call: the environment may change after huggingface_hub was imported)."""
    return workspace.hf_cache() if os.environ.get("HF_HUB_CACHE") else workspace.hf_cache() / "hub"


def fetch(repo: str, filename: str) -> Path:
    """``filename`` of the dataset repository ``repo``, from the hub cache, else downloaded into it; a folder of the
    repository is fetched whole.  DataError naming the repository, the file and the way to do it by hand."""
    from huggingface_hub import hf_hub_download, snapshot_download

    cache = hub_cache()
    filename = filename.strip("/")
    folder = not Path(filename).suffix  # LLaMA-Factory's file_name may name a folder of data files

    def get(local_only: bool) -> Path:
        if folder:
            root = snapshot_download(repo, repo_type="dataset", cache_dir=cache, local_files_only=local_only,
                                     allow_patterns=[f"{filename}/*", INFO])
            return Path(root) / filename
        return Path(hf_hub_download(repo, filename, repo_type="dataset", cache_dir=cache, local_files_only=local_only))

    try:
        return get(True)
    except Exception as e:  # not in the cache (or only part of it): from the hub, unless told to stay offline
        missed = e
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes", "on"):
        try:
            return get(False)
        except Exception as e:  # offline, no such repository or file, no access: each says its own why
            missed = e
    first = str(missed).strip().split(". ")[0].splitlines()[0][:300] if str(missed).strip() else ""
    raise DataError(say("data.remote_fetch", repo=repo, file=filename, why=first or type(missed).__name__)) from None


def local_folder(dataset_dir: str | Path) -> Path:
    """The folder whose ``dataset_info.json`` and files a job reads: the dataset_dir itself, or for ``REMOTE:`` the
    hub cache's copy of the repository (its dataset_info.json fetched now when it is not there)."""
    repo = remote_repo(dataset_dir)
    if repo is None:
        return Path(dataset_dir)
    if not repo or repo.count("/") != 1:
        raise DataError(say("data.remote_name", value=str(dataset_dir)))
    return fetch(repo, INFO).parent
