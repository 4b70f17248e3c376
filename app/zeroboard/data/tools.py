"""Tool descriptions and tool calls as text, in the formats LLaMA-Factory writes for its named templates.

Model text, not the page's words: what the model reads (the tool prompts, and
the default system prompts of the qwen, alpaca, vicuna, smollm2 and zephyr templates), as
LLaMA-Factory's templates of the same name write it.

Pure Python with Jinja.  Each format is two Jinja macros that a named
template (``data.chat``) carries inside its chat template, so a tokenizer
saved with it renders ``apply_chat_template(tools=...)`` by itself:
``tool_text(tools)`` (appended to the system message) and ``calls(m)`` (the
text of an assistant message's ``tool_calls``).  The formats: ``default``
(alpaca, chatml, gemma, phi, plain, and a model's own template that ignores
tools), ``qwen``, ``llama3`` and ``mistral``.

A tool is a JSON schema, ``{"type": "function", "function": {...}}`` as
transformers passes them (a bare ``{"name": ..., "parameters": ...}`` is
read the same); a call is ``{"type": "function", "function": {"name": ...,
"arguments": {...}}}``, its arguments written with ``tojson``.
"""

from __future__ import annotations

import json

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
ALPACA_SYSTEM = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                 "request.\n\n")
VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
                 "detailed, and polite answers to the user's questions.")
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face."
ZEPHYR_SYSTEM = "You are Zephyr, a helpful assistant."


def _lit(text: str) -> str:
    return json.dumps(text)


_FN = '{%- set f = t.function if t.type == "function" else t -%}'
_CALL = "{%- set f = c.function if c.function is defined else c -%}"
_WRAPPED = '(t if t.type == "function" else {"type": "function", "function": t})'

DEFAULT = (
    "{%- macro tool_text(tools) -%}"
    "{{- " + _lit("You have access to the following tools:\n") + " -}}"
    "{%- for t in tools -%}" + _FN +
    "{%- set ps = f.parameters if f.parameters is defined else {} -%}"
    '{{- "> Tool Name: " ~ f.name ~ "\\nTool Description: " ~ (f.description if f.description is defined else "")'
    ' ~ "\\nTool Args:\\n" -}}'
    "{%- for name, p in (ps.properties if ps.properties is defined else {}).items() -%}"
    '{{- "  - " ~ name ~ " (" ~ (p.type if p.type is defined else "")'
    ' ~ (", required" if ps.required is defined and name in ps.required else "")'
    ' ~ "): " ~ (p.description if p.description is defined else "")'
    ' ~ ((", should be one of [" ~ p.enum|join(", ") ~ "]") if p.enum else "")'
    " ~ ((\", where each item should be \" ~ (p.get('items').type if p.get('items').type is defined else \"\"))"
    " if p.get('items') else \"\") ~ \"\\n\" -}}"
    "{%- endfor -%}"
    '{{- "\\n" -}}'
    "{%- endfor -%}"
    "{{- " + _lit("Use the following format if using a tool:\n```\nAction: tool name (one of [") + " -}}"
    "{%- for t in tools -%}" + _FN + '{{- f.name ~ (", " if not loop.last else "") -}}{%- endfor -%}'
    "{{- " + _lit("])\nAction Input: the input to the tool, in a JSON format representing the kwargs "
                  '(e.g. ```{"input": "hello world", "num_beams": 5}```)\n```\n') + " -}}"
    "{%- endmacro -%}"
    "{%- macro calls(m) -%}"
    "{%- for c in m.tool_calls -%}" + _CALL +
    '{{- "Action: " ~ f.name ~ "\\nAction Input: " ~ f.arguments|tojson ~ ("\\n" if not loop.last else "") -}}'
    "{%- endfor -%}"
    "{%- endmacro -%}"
)

QWEN = (
    "{%- macro tool_text(tools) -%}"
    "{{- " + _lit("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>") + " -}}"
    '{%- for t in tools -%}{{- "\\n" ~ ' + _WRAPPED + "|tojson -}}{%- endfor -%}"
    "{{- " + _lit("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                  '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>') + " -}}"
    "{%- endmacro -%}"
    "{%- macro calls(m) -%}"
    "{%- for c in m.tool_calls -%}" + _CALL +
    '{{- "<tool_call>\\n" ~ {"name": f.name, "arguments": f.arguments}|tojson ~ "\\n</tool_call>"'
    ' ~ ("\\n" if not loop.last else "") -}}'
    "{%- endfor -%}"
    "{%- endmacro -%}"
)

LLAMA3 = (
    "{%- macro tool_text(tools) -%}"
    '{{- "Cutting Knowledge Date: December 2023\\nToday Date: " ~ strftime_now("%d %b %Y") ~ '
    + _lit("\n\nYou have access to the following functions. To call a function, please respond with JSON for a "
           'function call. Respond in the format {"name": function name, "parameters": dictionary of argument name '
           "and its value}. Do not use variables.\n\n") + " -}}"
    "{%- for t in tools -%}{{- " + _WRAPPED + '|tojson(indent=4) ~ "\\n\\n" -}}{%- endfor -%}'
    "{%- endmacro -%}"
    "{%- macro calls(m) -%}"
    '{%- if m.tool_calls|length > 1 -%}{{- "[" -}}{%- endif -%}'
    "{%- for c in m.tool_calls -%}" + _CALL +
    '{{- {"name": f.name, "parameters": f.arguments}|tojson ~ (", " if not loop.last else "") -}}'
    "{%- endfor -%}"
    '{%- if m.tool_calls|length > 1 -%}{{- "]" -}}{%- endif -%}'
    "{%- endmacro -%}"
)

MISTRAL = (
    "{%- macro tool_text(tools) -%}"
    '{{- "[AVAILABLE_TOOLS] [" -}}'
    "{%- for t in tools -%}{{- " + _WRAPPED + '|tojson ~ (", " if not loop.last else "") -}}{%- endfor -%}'
    '{{- "][/AVAILABLE_TOOLS]" -}}'
    "{%- endmacro -%}"
    "{%- macro calls(m) -%}"
    '{{- "[" -}}'
    "{%- for c in m.tool_calls -%}" + _CALL +
    '{{- {"name": f.name, "arguments": f.arguments}|tojson ~ (", " if not loop.last else "") -}}'
    "{%- endfor -%}"
    '{{- "]" -}}'
    "{%- endmacro -%}"
)

FORMATS = {"default": DEFAULT, "qwen": QWEN, "llama3": LLAMA3, "mistral": MISTRAL}


def wrapped(tool) -> dict:
    """A tool as transformers passes it: ``{"type": "function", "function": {...}}``."""
    if isinstance(tool, dict) and tool.get("type") == "function":
        return tool
    return {"type": "function", "function": tool}


def call(name, arguments) -> dict:
    """One tool call of an assistant message, as transformers' chat templates read it."""
    return {"type": "function", "function": {"name": name, "arguments": arguments}}
