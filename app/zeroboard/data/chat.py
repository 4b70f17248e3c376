"""A conversation as text: the tokenizer's chat template, or a named template for a base model that has none.

Pure Python with Jinja (no transformers).  Every template is a Jinja chat
template, rendered as transformers renders one (a sandboxed environment with
``trim_blocks``/``lstrip_blocks``, ``raise_exception``, the loop controls, the
special tokens as variables).  The trainer sets a named template on the
tokenizer and renders with this module; the checks before launch render the
same text here, so both count the same tokens.

Named templates write their turns the way LLaMA-Factory's templates of the
same name do.  Each lists the special tokens it writes (added to a tokenizer
that lacks them) and the token that ends an answer (the tokenizer's end of
sequence for generation).  ``bos_token`` / ``eos_token`` are the tokenizer's
own.  Tool descriptions go at the end of the system message as JSON.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from datetime import datetime

from .formats import Conversation


@dataclass(frozen=True)
class Named:
    jinja: str
    tokens: tuple[str, ...] = ()  # special tokens the template writes
    stop: str | None = None  # the token that ends an answer; None: the tokenizer's eos_token


def _expr(fmt: str, system: bool = False) -> str:
    """A turn's text as a Jinja expression: ``{c}`` is the content, ``{eos}`` the tokenizer's end of sequence;
    ``system``: the system message and a blank line open the first turn (models without a system role)."""
    parts = []
    for piece in re.split(r"(\{c\}|\{eos\})", fmt):
        if piece == "{c}":
            if system:
                parts.append("((messages[0]['content'] + '\\n\\n') if has_system and loop.first else '')")
            parts.append("m['content']")
        elif piece == "{eos}":
            parts.append("eos_token")
        elif piece:
            parts.append(json.dumps(piece))
    return "{{- " + (" + ".join(parts) or "''") + " -}}"


def _turns(user: str, assistant: str, system: str, tool: str, generation: str, prefix: str = "''") -> str:
    """A template from the text of each kind of turn."""
    return ("{{- @prefix -}}{%- for m in messages -%}{%- if m['role'] == 'user' -%}@user"
            "{%- elif m['role'] == 'assistant' -%}@assistant{%- elif m['role'] == 'system' -%}@system"
            "{%- else -%}@tool{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}@generation{%- endif -%}"
            .replace("@prefix", prefix).replace("@user", _expr(user)).replace("@assistant", _expr(assistant))
            .replace("@system", _expr(system)).replace("@tool", _expr(tool)).replace("@generation", _expr(generation)))


def _first_user_system(user: str, assistant: str, tool: str, generation: str, prefix: str) -> str:
    """Models without a system role: the system message opens the first turn."""
    return ("{%- set has_system = messages and messages[0]['role'] == 'system' -%}{{- @prefix -}}"
            "{%- for m in (messages[1:] if has_system else messages) -%}{%- if m['role'] == 'assistant' -%}@assistant"
            "{%- elif m['role'] == 'user' -%}@user{%- else -%}@tool{%- endif -%}{%- endfor -%}"
            "{%- if add_generation_prompt -%}@generation{%- endif -%}"
            .replace("@prefix", prefix).replace("@assistant", _expr(assistant)).replace("@user", _expr(user, True))
            .replace("@tool", _expr(tool, True)).replace("@generation", _expr(generation)))


_CHATML = dict(user="<|im_start|>user\n{c}<|im_end|>\n", assistant="<|im_start|>assistant\n{c}<|im_end|>\n",
               system="<|im_start|>system\n{c}<|im_end|>\n", tool="<|im_start|>tool\n{c}<|im_end|>\n",
               generation="<|im_start|>assistant\n")
# the default system prompts of the qwen and alpaca templates (model text, as LLaMA-Factory writes it)
QWEN_SYSTEM = ("{%- if not messages or messages[0]['role'] != 'system' -%}{{- '<|im_start|>system\\n"
               "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' -}}{%- endif -%}")
ALPACA_SYSTEM = ("{%- if not messages or messages[0]['role'] != 'system' -%}{{- 'Below is an instruction that describes "
                 "a task. Write a response that appropriately completes the request.\\n\\n' -}}{%- endif -%}")
PLAIN_HEADERS = {"system": "### System:\n", "user": "### User:\n", "assistant": "### Assistant:\n", "tool": "### Tool:\n"}

NAMED: dict[str, Named] = {
    "chatml": Named(_turns(**_CHATML), ("<|im_start|>", "<|im_end|>"), "<|im_end|>"),
    "qwen": Named(
        QWEN_SYSTEM + _turns(**{**_CHATML, "tool": "<|im_start|>user\n<tool_response>\n{c}\n</tool_response><|im_end|>\n"}),
        ("<|im_start|>", "<|im_end|>"), "<|im_end|>"),
    "llama3": Named(_turns(
        user="<|start_header_id|>user<|end_header_id|>\n\n{c}<|eot_id|>",
        assistant="<|start_header_id|>assistant<|end_header_id|>\n\n{c}<|eot_id|>",
        system="<|start_header_id|>system<|end_header_id|>\n\n{c}<|eot_id|>",
        tool="<|start_header_id|>ipython<|end_header_id|>\n\n{c}<|eot_id|>",
        generation="<|start_header_id|>assistant<|end_header_id|>\n\n", prefix="bos_token"),
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), "<|eot_id|>"),
    "mistral": Named(_first_user_system(user="[INST] {c}[/INST]", assistant=" {c}{eos}",
                                        tool="[INST] {c}[/INST]", generation="", prefix="bos_token")),
    "gemma": Named(_first_user_system(
        user="<start_of_turn>user\n{c}<end_of_turn>\n", assistant="<start_of_turn>model\n{c}<end_of_turn>\n",
        tool="<start_of_turn>tool\n{c}<end_of_turn>\n", generation="<start_of_turn>model\n", prefix="bos_token"),
        ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>"),
    "phi": Named(_turns(user="<|user|>\n{c}<|end|>\n", assistant="<|assistant|>\n{c}<|end|>\n",
                        system="<|system|>\n{c}<|end|>\n", tool="<|tool|>\n{c}<|end|>\n", generation="<|assistant|>\n"),
                 ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<|end|>"),
    "alpaca": Named(
        ALPACA_SYSTEM + _turns(user="### Instruction:\n{c}\n\n### Response:\n", assistant="{c}{eos}\n\n",
                 system="{c}\n\n", tool="### Instruction:\n{c}\n\n### Response:\n", generation="")),
    "plain": Named(_turns(**{role: h + ("{c}{eos}" if role == "assistant" else "{c}") + "\n\n"
                             for role, h in PLAIN_HEADERS.items()}, generation=PLAIN_HEADERS["assistant"])),
}


def with_tools(conv: Conversation, tools) -> Conversation:
    """Tool descriptions for a named template: appended to the system message as JSON (one is made if missing)."""
    if not tools:
        return conv
    listed = json.dumps(tools, ensure_ascii=False)
    if conv and conv[0]["role"] == "system":
        return [{"role": "system", "content": f"{conv[0]['content']}\n\n{listed}"}, *conv[1:]]
    return [{"role": "system", "content": listed}, *conv]


def render_plain(conv: Conversation, eos: str, add_generation_prompt: bool = False) -> str:
    return render_template(conv, NAMED["plain"].jinja, {"eos_token": eos}, add_generation_prompt)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=16)
def _compiled(template: str):
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False, ensure_ascii=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


def render_template(conv: Conversation, template: str, special: dict[str, str], add_generation_prompt: bool = False,
                    tools=None) -> str:
    """A chat template applied as transformers applies it (a sandboxed Jinja environment, the special tokens as
    variables)."""
    extra = {"tools": tools} if tools else {}
    return _compiled(template).render(messages=conv, add_generation_prompt=add_generation_prompt, **special, **extra)
