"""config.json of a Hugging Face hub id: from the local cache (offline), or that one file fetched.

``huggingface_hub`` is imported only here and only when a hub id is planned, so the web server's cold start does
not grow. Its environment is read at call time, as the trainer's own process will read it: ``HF_HUB_CACHE`` /
``HF_HOME`` (where the cache is), ``HF_HUB_OFFLINE`` (never fetch), ``HF_ENDPOINT`` (a mirror).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..words import say

RETRY_S = 60  # after a failed fetch, the page's panel (redrawn on every change) asks the network again only after this
_failed: dict[str, tuple[float, object]] = {}


def cache_dir() -> str | None:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None  # huggingface_hub's default


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def hub_config(repo_id: str, error) -> tuple[dict, object]:
    """(config mapping, where it came from as a catalog message). ``error``: the exception class to raise."""
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(repo_id, "config.json", cache_dir=cache_dir(), local_files_only=True)
        return json.loads(Path(path).read_text(encoding="utf-8")), say("plan.source.cache", repo=repo_id)
    except (OSError, ValueError, Exception) as e:  # not in the cache (huggingface_hub's own error types)
        cached_miss = e
    if offline():
        raise error(say("plan.hub_offline", repo=repo_id, why=type(cached_miss).__name__))
    seen = _failed.get(repo_id)
    if seen and time.time() - seen[0] < RETRY_S:
        raise error(seen[1])
    try:
        path = hf_hub_download(repo_id, "config.json", cache_dir=cache_dir(), endpoint=os.environ.get("HF_ENDPOINT"),
                               etag_timeout=10)
        return json.loads(Path(path).read_text(encoding="utf-8")), say("plan.source.fetched", repo=repo_id,
                                                                      endpoint=endpoint())
    except Exception as e:  # network, authorisation, a missing repo: say which
        msg = say("plan.hub_failed", repo=repo_id, endpoint=endpoint(), why=f"{type(e).__name__}: {str(e)[:200]}")
        _failed[repo_id] = (time.time(), msg)
        raise error(msg) from None
