"""A conversation as text: the tokenizer's chat template (a Jinja template), or plain headers for a base model.

Pure Python with Jinja (no transformers): the trainer renders through the
tokenizer, the checks before launch render here with the same template and the
same plain headers, so both count the same tokens.
"""

from __future__ import annotations

import functools
import json

from .formats import Conversation

PLAIN_HEADERS = {"system": "### System:\n", "user": "### User:\n", "assistant": "### Assistant:\n"}


def render_plain(conv: Conversation, eos: str, add_generation_prompt: bool = False) -> str:
    parts = []
    for m in conv:
        end = eos if m["role"] == "assistant" else ""
        parts.append(PLAIN_HEADERS[m["role"]] + m["content"] + end + "\n\n")
    if add_generation_prompt:
        parts.append(PLAIN_HEADERS["assistant"])
    return "".join(parts)


@functools.lru_cache(maxsize=8)
def _compiled(template: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def render_template(conv: Conversation, template: str, special: dict[str, str], add_generation_prompt: bool = False) -> str:
    """A chat template applied as transformers applies it (a sandboxed Jinja environment, the special tokens as
    variables)."""
    return _compiled(template).render(messages=conv, add_generation_prompt=add_generation_prompt, **special)
