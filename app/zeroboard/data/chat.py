"""A conversation as text: the tokenizer's chat template, or a named template for a base model that has none.

Pure Python with Jinja (no transformers).  Every template is a Jinja chat
template, rendered as transformers renders one (a sandboxed environment with
``trim_blocks``/``lstrip_blocks``, ``raise_exception``, the loop controls, the
special tokens as variables).  The trainer sets a named template on the
tokenizer and renders with this module; the checks before launch render the
same text here, so both count the same tokens.

Named templates write exactly the text LLaMA-Factory's templates of the same
name write: the same turns, default system prompts, tool descriptions and
tool calls (``data.tools``).  Each lists the special tokens it writes (added
to a tokenizer that lacks them) and the token that ends an answer (the
tokenizer's end of sequence for generation).  ``bos_token`` / ``eos_token``
are the tokenizer's own.  A named template's text is tokenized turn by turn
(``Layout.cuts``), as LLaMA-Factory tokenizes it; a model's own template is
tokenized whole, as ``apply_chat_template`` does.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from ..words import say
from . import tools as toolfmt
from .formats import Conversation


@dataclass(frozen=True)
class Turns:
    """The text of each kind of turn: ``{c}`` is the content, ``{eos}`` the tokenizer's end of sequence."""

    user: str
    assistant: str  # an answer, its header included
    generation: str  # the header that opens an answer (add_generation_prompt)
    system: str
    tool: str  # a tool's result (LLaMA-Factory's observation)
    call: str | None = None  # an answer holding tool calls; None: as ``assistant``
    bos: bool = False  # the text starts with the tokenizer's bos_token
    default_system: str = ""  # the system prompt when the data has none
    fused_system: bool = False  # no system turn: the system text opens the first turn (mistral, gemma)
    tools: str = "default"  # the format of tool descriptions and calls (``data.tools.FORMATS``)
    thought: str = ""  # a reasoning template's empty thought, written (and learned) before an answer that has none


@dataclass(frozen=True)
class Named:
    turns: Turns
    tokens: tuple[str, ...] = ()  # special tokens the template writes
    stop: str | None = None  # the token that ends an answer; None: the tokenizer's eos_token
    jinja: str = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "jinja", _jinja(self.turns))


THINK = ("<think>", "</think>")  # an answer holding either has its own thought (LLaMA-Factory's thought words)


def _expr(fmt: str, content: str = "m['content']") -> str:
    """A turn's text as a Jinja expression: ``{c}`` the content, ``{eos}`` / ``{bos}`` the tokenizer's tokens."""
    parts = []
    for piece in re.split(r"(\{c\}|\{eos\}|\{bos\})", fmt):
        if piece == "{c}":
            parts.append(content)
        elif piece in ("{eos}", "{bos}"):
            parts.append("eos_token" if piece == "{eos}" else "bos_token")
        elif piece:
            parts.append(json.dumps(piece))
    return "{{- " + (" ~ ".join(parts) or "''") + " -}}"


def _answer(t: Turns, content: str) -> str:
    """An answer's content, after the empty thought when the template writes one and the answer has no thought."""
    if not t.thought:
        return content
    has = " or ".join(f"{json.dumps(w)} in ({content})" for w in THINK)
    return f"(({json.dumps(t.thought)} if not ({has}) else '') ~ {content})"


def _jinja(t: Turns) -> str:
    """The chat template of ``t``: system (or the default) plus the tool text, then the turns."""
    pre, _, post = t.system.partition("{c}")
    opening = "{%- set opening = (" + json.dumps(pre) + " ~ system ~ " + json.dumps(post) + ") if given else '' -%}"
    fused = "(opening if loop.first else '') ~ " if t.fused_system else ""
    # as LLaMA-Factory: a system turn when there is a system prompt or the record has tools, even an empty list of them
    return (toolfmt.FORMATS[t.tools] +
            "{%- set has_system = messages and messages[0]['role'] == 'system' -%}"
            "{%- set system = (messages[0]['content'] if has_system else '') or " + json.dumps(t.default_system) + " -%}"
            "{%- set given = system or (tools|default(none))!=none -%}"
            "{%- if tools -%}{%- set system = system ~ tool_text(tools) -%}{%- endif -%}"
            + ("{{- bos_token -}}" if t.bos else "")
            + (opening if t.fused_system else "{%- if given -%}" + _expr(t.system, "system") + "{%- endif -%}")
            + "{%- for m in (messages[1:] if has_system else messages) -%}"
            "{%- if m['role'] == 'assistant' and m.tool_calls -%}"
            + _expr(t.call or t.assistant, _answer(t, "(m['content'] or '') ~ calls(m)"))
            + "{%- elif m['role'] == 'assistant' -%}" + _expr(t.assistant, _answer(t, "m['content']"))
            + "{%- elif m['role'] == 'user' -%}" + _expr(t.user, fused + "m['content']")
            + "{%- else -%}" + _expr(t.tool, fused + "m['content']")
            + "{%- endif -%}{%- endfor -%}"
            "{%- if add_generation_prompt -%}" + _expr(t.generation) + "{%- endif -%}")


_CHATML = dict(user="<|im_start|>user\n{c}<|im_end|>\n", assistant="<|im_start|>assistant\n{c}<|im_end|>\n",
               system="<|im_start|>system\n{c}<|im_end|>\n", tool="<|im_start|>tool\n{c}<|im_end|>\n",
               generation="<|im_start|>assistant\n")
_QWEN = {**_CHATML, "tool": "<|im_start|>user\n<tool_response>\n{c}\n</tool_response><|im_end|>\n", "tools": "qwen"}
_IM = ("<|im_start|>", "<|im_end|>")
QWEN_SYSTEM, ALPACA_SYSTEM = toolfmt.QWEN_SYSTEM, toolfmt.ALPACA_SYSTEM
EMPTY_THOUGHT = "<think>\n\n</think>\n\n"
PLAIN_HEADERS = {"system": "### System:\n", "user": "### User:\n", "assistant": "### Assistant:\n", "tool": "### Tool:\n"}
_ALPACA_USER = "### Instruction:\n{c}\n\n### Response:\n"
_PHI_USER = "<|user|>\n{c}<|end|>\n"
_GEMMA = Named(Turns(
    user="<start_of_turn>user\n{c}<end_of_turn>\n", assistant="<start_of_turn>model\n{c}<end_of_turn>\n",
    generation="<start_of_turn>model\n", system="{c}\n\n", tool="<start_of_turn>tool\n{c}<end_of_turn>\n",
    bos=True, fused_system=True), ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>")


def _headed(user: str, header: str, answer: str, system: str, default_system: str = "", **kw) -> Turns:
    """Turns whose user turn ends in the answer's header (LLaMA-Factory's usual slots); a tool's result is written as a
    user turn, as LLaMA-Factory does for a template without an observation format."""
    return Turns(user=user, assistant=header + answer, generation=header, system=system, tool=user,
                 default_system=default_system, **kw)


# Each writes the text LLaMA-Factory's template of that name writes (its slots, turn by turn), from its definition
NAMED: dict[str, Named] = {
    "chatml": Named(Turns(**_CHATML), _IM, "<|im_end|>"),
    "qwen": Named(Turns(**_QWEN, default_system=QWEN_SYSTEM), _IM, "<|im_end|>"),
    "qwen3_nothink": Named(Turns(**_QWEN), _IM, "<|im_end|>"),
    "qwen3": Named(Turns(**_QWEN, thought=EMPTY_THOUGHT), _IM, "<|im_end|>"),
    # Qwen3-VL's: the text of qwen3_nothink / qwen3; the <image> tags become the model's vision tokens (data.media)
    "qwen3_vl_nothink": Named(Turns(**_QWEN), _IM, "<|im_end|>"),
    "qwen3_vl": Named(Turns(**_QWEN, thought=EMPTY_THOUGHT), _IM, "<|im_end|>"),
    "llama3": Named(Turns(
        user="<|start_header_id|>user<|end_header_id|>\n\n{c}<|eot_id|>",
        assistant="<|start_header_id|>assistant<|end_header_id|>\n\n{c}<|eot_id|>",
        system="<|start_header_id|>system<|end_header_id|>\n\n{c}<|eot_id|>",
        tool="<|start_header_id|>ipython<|end_header_id|>\n\n{c}<|eot_id|>",
        generation="<|start_header_id|>assistant<|end_header_id|>\n\n", bos=True, tools="llama3"),
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), "<|eot_id|>"),
    "llama2": Named(Turns(user="{bos}[INST] {c} [/INST]", assistant="{c}{eos}", generation="", tool="{bos}[INST] {c} [/INST]",
                          system="<<SYS>>\n{c}\n<</SYS>>\n\n", fused_system=True)),
    "mistral": Named(Turns(user="[INST] {c}[/INST]", assistant=" {c}{eos}", call="[TOOL_CALLS] {c}{eos}", generation="",
                           system="{c}\n\n", tool='[TOOL_RESULTS] {"content": {c}}[/TOOL_RESULTS]', bos=True,
                           fused_system=True, tools="mistral")),
    "ministral": Named(Turns(user="[INST]{c}[/INST]", assistant="{c}{eos}", call="[TOOL_CALLS]{c}{eos}", generation="",
                             system="{c}\n\n", tool='[TOOL_RESULTS]{"content": {c}}[/TOOL_RESULTS]', bos=True,
                             fused_system=True, tools="mistral")),
    "gemma": _GEMMA,
    "gemma3": _GEMMA,
    "phi": Named(Turns(user=_PHI_USER, assistant="<|assistant|>\n{c}<|end|>\n", system="<|system|>\n{c}<|end|>\n",
                       tool=_PHI_USER, generation="<|assistant|>\n"),
                 ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<|end|>"),
    "phi4": Named(_headed("<|im_start|>user<|im_sep|>{c}<|im_end|>", "<|im_start|>assistant<|im_sep|>", "{c}<|im_end|>",
                          "<|im_start|>system<|im_sep|>{c}<|im_end|>"), (*_IM, "<|im_sep|>"), "<|im_end|>"),
    "smollm": Named(_headed(_CHATML["user"], _CHATML["generation"], "{c}<|im_end|>\n", _CHATML["system"]), _IM,
                    "<|im_end|>"),
    "smollm2": Named(_headed(_CHATML["user"], _CHATML["generation"], "{c}<|im_end|>\n", _CHATML["system"],
                             toolfmt.SMOLLM2_SYSTEM), _IM, "<|im_end|>"),
    "yi": Named(_headed(_CHATML["user"], _CHATML["generation"], "{c}<|im_end|>\n", _CHATML["system"]), _IM, "<|im_end|>"),
    "granite3": Named(_headed("<|start_of_role|>user<|end_of_role|>{c}<|end_of_text|>\n",
                              "<|start_of_role|>assistant<|end_of_role|>", "{c}<|end_of_text|>\n",
                              "<|start_of_role|>system<|end_of_role|>{c}<|end_of_text|>\n"),
                      ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"), "<|end_of_text|>"),
    "starchat": Named(_headed("<|user|>\n{c}<|end|>\n", "<|assistant|>", "{c}<|end|>\n", "<|system|>\n{c}<|end|>\n"),
                      ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<|end|>"),
    "zephyr": Named(_headed("<|user|>\n{c}{eos}", "<|assistant|>\n", "{c}{eos}", "<|system|>\n{c}{eos}", toolfmt.ZEPHYR_SYSTEM)),
    "deepseek": Named(_headed("User: {c}\n\n", "Assistant:", "{c}{eos}", "{c}\n\n", bos=True)),
    "alpaca": Named(Turns(user=_ALPACA_USER, assistant="{c}{eos}\n\n", system="{c}", tool=_ALPACA_USER, generation="",
                          default_system=ALPACA_SYSTEM)),
    "vicuna": Named(_headed("USER: {c} ", "ASSISTANT:", "{c}{eos}", "{c}", toolfmt.VICUNA_SYSTEM)),
    "default": Named(_headed("Human: {c}{eos}\n", "Assistant:", "{c}{eos}\n", "System: {c}{eos}\n")),
    "empty": Named(_headed("{c}", "", "{c}", "{c}")),
    "plain": Named(Turns(**{role: h + ("{c}{eos}" if role == "assistant" else "{c}") + "\n\n"
                            for role, h in PLAIN_HEADERS.items()}, generation=PLAIN_HEADERS["assistant"])),
}

_PROBE_TOOL = toolfmt.wrapped({"name": "zb_probe_tool", "description": "", "parameters": {"type": "object", "properties": {}}})
_PROBE_CALL = [{"role": "user", "content": "x"},
               {"role": "assistant", "content": "", "tool_calls": [toolfmt.call("zb_probe_call", {})]}]


@dataclass
class Layout:
    """A conversation rendered: its text, the character spans of the answers, and where the text is tokenized
    apart (turn by turn, as LLaMA-Factory tokenizes; None: the text is tokenized whole)."""

    text: str
    answers: list[tuple[int, int]]
    cuts: list[int] | None = None


@dataclass
class Renderer:
    """Renders conversations with one chat template and one set of special tokens (picklable for map workers)."""

    template: str
    special: dict[str, str]
    named: bool  # a named template: tokenized turn by turn
    own_tools: bool = True  # the template writes tool descriptions itself (else: the default format, in the system)
    own_calls: bool = True  # the template writes an answer's tool calls itself (else: the default format, as text)
    thought: str = ""  # a reasoning template's empty thought: tokenized apart from the answer it opens

    @classmethod
    def for_template(cls, template: str, special: dict[str, str]):
        named = next((n for n in NAMED.values() if n.jinja == template), None)
        if named is not None:
            return cls(template, special, True, thought=named.turns.thought)
        return cls(template, special, False, _writes(template, special, [], [_PROBE_TOOL], "zb_probe_tool"),
                   _writes(template, special, _PROBE_CALL, None, "zb_probe_call"))

    def render(self, conv: Conversation, gen: bool = False, tools=None) -> str:
        if (tools and not self.own_tools) or not self.own_calls:
            conv = with_default_tools(conv, None if self.own_tools else tools, calls=not self.own_calls)
            tools = tools if self.own_tools else None
        return render_template(conv, self.template, self.special, gen, tools=tools)

    def layout(self, conv: Conversation, tools=None) -> Layout:
        text = self.render(conv, tools=tools)
        answers, cuts = [], [] if self.named else None
        last = len(conv) - 1
        for i, m in enumerate(conv):
            if m["role"] != "assistant" and (cuts is None or (i == 0 and m["role"] == "system")):
                continue  # (without its system message, a template may write its default one)
            before = self.render(conv[:i], m["role"] == "assistant", tools)
            if not text.startswith(before):
                raise ValueError(say("train.template_unstable"))
            if m["role"] != "assistant":
                cuts.append(len(before))
                continue
            upto = text if i == last else self.render(conv[: i + 1], tools=tools)
            if not text.startswith(upto) or len(upto) < len(before):
                raise ValueError(say("train.template_unstable"))
            answers.append((len(before), len(upto)))
            if self.thought and text.startswith(self.thought, len(before)) and not any(
                    w in (m["content"] or "") for w in THINK):  # LLaMA-Factory tokenizes the thought it adds apart
                cuts.append(len(before) + len(self.thought))
        return Layout(text, answers, cuts)


def _writes(template: str, special: dict[str, str], conv: Conversation, tools, probe: str) -> bool:
    """Whether the template writes what it is given (tools, or an answer's tool calls)."""
    try:
        return probe in render_template(conv or [{"role": "user", "content": "x"}], template, special, tools=tools)
    except Exception:  # a template that cannot take them: ZeroBoard writes them as text
        return False


def with_default_tools(conv: Conversation, tools, calls: bool = True) -> Conversation:
    """For a model's template that ignores tools, as LLaMA-Factory does for it: the tool descriptions appended to the
    system message, tool calls written into the answer's text (its ``default`` format)."""
    out = []
    for m in conv:
        if calls and m["role"] == "assistant" and m.get("tool_calls"):
            m = {"role": "assistant", "content": (m["content"] or "") + _default("{{- calls(messages[0]) -}}", [m])}
        out.append(m)
    if tools:
        text = _default("{{- tool_text(tools) -}}", [], tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


def _default(body: str, conv: Conversation, tools=None) -> str:
    return render_template(conv, toolfmt.DEFAULT + body, {}, tools=tools)


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
    extra = {"tools": tools} if tools is not None else {}  # an empty list too: a named template writes its system turn
    return _compiled(template).render(messages=conv, add_generation_prompt=add_generation_prompt, **special, **extra)
