"""config.json of a Hugging Face hub id: from the local cache first (offline), else one request on the network.

Validation and the planner both ask here, once per id and process: a model
in the cache answers at once and says so; one that is not is fetched in a
single request bounded by ``NETWORK_S`` (no retries), and a failure -- no
network, a mistyped id, a gated model without a token -- is remembered for
``RETRY_S``, so neither the checks nor the page's panel wait on the network
again.  ``HF_HUB_OFFLINE`` means never to try.

``huggingface_hub`` is imported only here and only when a hub id is named, so
the web server's cold start does not grow.  Its environment is read at call
time, as the trainer's own process will read it: ``HF_HUB_CACHE`` /
``HF_HOME`` (where the cache is), ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` (a mirror).
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from .. import safeload
from ..words import say

RETRY_S = 60  # after a failed fetch, the network is asked again only after this
NETWORK_S = 5.0  # the one network try
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
    """(config mapping, where it came from as a catalog message). ``error``: the exception class to raise, with a
    catalog message saying whether the cache or the network failed, and why."""
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(repo_id, "config.json", cache_dir=cache_dir(), local_files_only=True)
        return _read(path, repo_id, error), say("plan.source.cache", repo=repo_id)
    except error:
        raise
    except Exception as e:  # not in the cache (huggingface_hub's own error types)
        cached_miss = e
    if offline():
        raise error(say("plan.hub_offline", repo=repo_id, why=type(cached_miss).__name__))
    seen = _failed.get(repo_id)
    if seen and time.time() - seen[0] < RETRY_S:
        raise error(seen[1])
    try:
        cfg = _fetch_once(repo_id)
    except _Failed as e:
        msg = say("plan.hub_failed", repo=repo_id, endpoint=endpoint(), why=e.args[0])
        _failed[repo_id] = (time.time(), msg)
        raise error(msg) from None
    return cfg, say("plan.source.fetched", repo=repo_id, endpoint=endpoint())


class _Failed(Exception):
    pass


def _fetch_once(repo_id: str) -> dict:
    """config.json over HTTP in one request (huggingface_hub's own download retries five times with back-off:
    26 s before it gave up on a machine without network)."""
    from huggingface_hub import get_token  # reads the token file or HF_TOKEN; no network

    url = f"{endpoint().rstrip('/')}/{urllib.parse.quote(repo_id)}/resolve/main/config.json"
    req = urllib.request.Request(url, headers={"User-Agent": "zeroboard"})
    token = get_token()
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=NETWORK_S) as resp:
            data = resp.read(4 << 20)
    except urllib.error.HTTPError as e:
        why = {401: say("plan.hub_private"), 403: say("plan.hub_private"), 404: say("plan.hub_missing")}.get(e.code)
        raise _Failed(why or f"HTTP {e.code}") from None
    except (OSError, ValueError) as e:  # no network, a refused connection, a timeout
        raise _Failed(f"{type(e).__name__}: {str(getattr(e, 'reason', e))[:200]}") from None
    try:
        cfg = safeload.json_text(data.decode("utf-8", errors="replace"))
    except safeload.Refused as e:
        raise _Failed(say(e.key, **e.values)) from None
    except ValueError as e:
        raise _Failed(str(e)[:200]) from None
    if not isinstance(cfg, dict):
        raise _Failed(type(cfg).__name__)
    return cfg


def _read(path: str, repo_id: str, error) -> dict:
    try:
        cfg = safeload.json_text(safeload.read_text(path, safeload.CONFIG))
    except safeload.Refused as e:  # past the limits, a key twice, a number that is not finite
        raise error(say("check.config_unsafe", path=str(path), why=say(e.key, **e.values))) from None
    except (OSError, ValueError) as e:
        raise error(say("plan.config_not_json", path=str(path), why=str(e)[:200])) from None
    if not isinstance(cfg, dict):
        raise error(say("plan.config_not_json", path=str(path), why=type(cfg).__name__))
    return cfg
