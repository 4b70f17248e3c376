"""A few samples tokenized before launch, with the model's own tokenizer, to see what cutoff_len leaves of them.

The ``tokenizers`` library reads ``tokenizer.json`` directly (no transformers,
so the web server stays light); the chat template is rendered with the same
Jinja rules transformers uses (``data.chat``), a named template (chatml,
llama3, ...) with its special tokens added as the trainer adds them, and
tokenized and cut as the trainer does (``data.tokens``).  A sample "loses its
answer" when the cut leaves none of its answers: the trainer would then learn
nothing from it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from .. import safeload
from ..data import chat, tokens
from ..data.convert import Chat
from . import modelinfo

SAMPLE = 64  # samples per dataset looked at before launch


@dataclass
class CutoffCount:
    seen: int = 0
    truncated: int = 0  # longer than cutoff_len: cut
    answer_lost: int = 0  # the cut leaves no answer: nothing left to learn


@functools.lru_cache(maxsize=4)
def _load(model_dir: str, mtime: float):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    cfg_path = Path(model_dir) / "tokenizer_config.json"
    cfg = safeload.json_text(safeload.read_text(cfg_path, modelinfo.TOKENIZER_CONFIG), modelinfo.TOKENIZER_CONFIG) \
        if cfg_path.is_file() else {}
    template = cfg.get("chat_template")
    jinja = Path(model_dir) / "chat_template.jinja"
    if not template and jinja.is_file():
        template = safeload.read_text(jinja, safeload.CONFIG)
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    special = {k: _token(cfg.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    return tok, template, special


def _token(value) -> str:
    return value.get("content", "") if isinstance(value, dict) else (value or "")


def tokenizer_for(model_dir: Path | None):
    """(tokenizer, chat template or None, special tokens), or None when the model folder has no tokenizer.json."""
    if model_dir is None or not (model_dir / "tokenizer.json").is_file():
        return None
    try:
        return _load(str(model_dir.resolve()), (model_dir / "tokenizer.json").stat().st_mtime)
    except Exception:  # a tokenizer file this library cannot read: the trainer will say so
        return None


def _template(loaded, template: str):
    """(tokenizer, chat template text, special tokens) as the trainer will have them, or None."""
    tok, own, special = loaded
    if template == "chat" and not own:
        return None
    if template in ("auto", "chat") and own:
        return tok, own, special, False
    named = chat.NAMED["plain" if template in ("auto", "chat") else template]
    missing = [t for t in named.tokens if tok.token_to_id(t) is None]
    if missing:
        tok = _with_tokens(tok, tuple(missing))
    if named.stop:
        special = {**special, "eos_token": named.stop}
    return tok, named.jinja, special, True


@functools.lru_cache(maxsize=8)
def _with_tokens(tok, tokens: tuple[str, ...]):
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tok.to_str())
    copy.add_special_tokens(list(tokens))
    return copy


def count(convs: list[Chat], model_dir: Path, template: str, cutoff_len: int,
          truncation: tokens.Rule = "proportional") -> CutoffCount | None:
    """How many of these samples the cutoff truncates, and how many lose their whole answer (None: no tokenizer)."""
    loaded = tokenizer_for(model_dir)
    resolved = _template(loaded, template) if loaded is not None else None
    if resolved is None:
        return None
    tok, jinja, special, _ = resolved
    out = CutoffCount()
    try:
        renderer = chat.Renderer.for_template(jinja, special)
        layouts = [renderer.layout(c.messages, c.tools) for c in convs
                   if any(m["role"] == "assistant" for m in c.messages)]
        encoded = tokens.encode(layouts, lambda texts: tok.encode_batch(texts, add_special_tokens=False))
    except Exception:  # a template this renderer cannot follow: leave the verdict to the trainer
        return None
    for ids, ranges in encoded:
        out.seen += 1
        out.truncated += len(ids) > cutoff_len
        out.answer_lost += not any(learn for _, _, learn in tokens.kept(len(ids), ranges, cutoff_len, truncation))
    return out
