"""An Ollama Modelfile for an exported model: its chat template as Ollama's Go template, its system prompt.

A Jinja chat template cannot be translated in general.  What can be is a
template that writes each turn as fixed text around the message's content --
as every template ZeroBoard ships does (``data.chat.NAMED``, the demo model's),
and most models' own simple ones.  :func:`infer` finds that shape by rendering
probe conversations with the template itself (the text around each role's
content, the header that opens an answer, a leading ``bos_token``, a default
system prompt) and then *checks* it: a set of conversations (multi-turn, with
and without a system prompt, contents with newlines, quotes and braces) must
render exactly as the Jinja template renders them.  A template that fails is
not translated: the Modelfile is written without TEMPLATE and says why.

What Ollama does with the result: a chat request's messages, with the
Modelfile's SYSTEM put first when the request has no system message,
consecutive messages of one role joined, are rendered by the Go template
(``.Messages``, each with ``.Role`` and ``.Content``).  :func:`render_as_ollama`
does the same in Python; the tests render the Go template text itself.  A
leading ``bos_token`` is left to the tokenizer (Ollama's adds it when the
model's tokenizer says so), as Ollama's own templates do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..data import chat as chatmod
from ..job.quoting import one_line, shown
from ..words import Msg, say

MARK = {"system": "ZBSYS7q", "user": "ZBUSR7q", "assistant": "ZBAST7q", "tool": "ZBTOO7q"}
ROLES = ("system", "user", "assistant", "tool")


@dataclass
class Shape:
    """A chat template as fixed text around each turn's content."""

    turns: dict[str, tuple[str, str]]  # role -> (before, after) the content; a role the template ignores is absent
    generation: str  # the header that opens the next answer
    bos: str = ""  # the tokenizer's bos_token, written first
    default_system: str = ""  # the system prompt the template writes when the conversation has none


class Untranslatable(ValueError):
    """The template is not fixed text around each turn; the message says what differs."""


def _render(template: str, special: dict[str, str], conv: list[dict], gen: bool = False) -> str:
    return chatmod.render_template(conv, template, special, gen)


def _split(text: str, mark: str, what: str) -> tuple[str, str]:
    if text.count(mark) != 1:
        raise Untranslatable(say("export.tpl_turn", role=what))
    before, _, after = text.partition(mark)
    return before, after


def _after(longer: str, shorter: str, what: str) -> str:
    if not longer.startswith(shorter):
        raise Untranslatable(say("export.tpl_prefix", role=what))
    return longer[len(shorter):]


def infer(template: str, special: dict[str, str]) -> Shape:
    """The template's shape, checked against the template on probe conversations. Raises Untranslatable."""
    if not template:
        raise Untranslatable(say("export.tpl_none"))
    msg = {r: {"role": r, "content": MARK[r]} for r in ROLES}
    try:
        r_u = _render(template, special, [msg["user"]])
        r_ua = _render(template, special, [msg["user"], msg["assistant"]])
        r_uau = _render(template, special, [msg["user"], msg["assistant"], {"role": "user", "content": MARK["user"]}])
        r_gen = _render(template, special, [msg["user"]], gen=True)
        r_su = _render(template, special, [msg["system"], msg["user"]])
    except Exception as e:  # noqa: BLE001 - a template that raises on plain turns cannot be written for Ollama
        raise Untranslatable(say("export.tpl_raises", why=f"{type(e).__name__}: {e}")) from None
    turns = {"assistant": _split(_after(r_ua, r_u, "assistant"), MARK["assistant"], "assistant")}
    turns["user"] = _split(_after(r_uau, r_ua, "user"), MARK["user"], "user")
    user_text = turns["user"][0] + MARK["user"] + turns["user"][1]
    if not r_u.endswith(user_text) or not r_su.endswith(user_text):
        raise Untranslatable(say("export.tpl_system_fused"))
    opening, sys_part = r_u[: -len(user_text)], r_su[: -len(user_text)]
    bos = special.get("bos_token") or ""
    if bos and opening.startswith(bos) and sys_part.startswith(bos):
        opening, sys_part = opening[len(bos):], sys_part[len(bos):]
    else:
        bos = ""
    default = ""
    if MARK["system"] in sys_part:
        turns["system"] = _split(sys_part, MARK["system"], "system")
        pre, post = turns["system"]
        if opening:
            if not (opening.startswith(pre) and opening.endswith(post) and len(opening) >= len(pre) + len(post)):
                raise Untranslatable(say("export.tpl_opening", text=opening[:80]))
            default = opening[len(pre): len(opening) - len(post)]
    elif opening or sys_part:
        raise Untranslatable(say("export.tpl_opening", text=(opening or sys_part)[:80]))
    try:
        r_uat = _render(template, special, [msg["user"], msg["assistant"], msg["tool"]])
        turns["tool"] = _split(_after(r_uat, r_ua, "tool"), MARK["tool"], "tool")
    except Exception:  # noqa: BLE001 - a template without tool turns: tool messages are left out
        pass
    shape = Shape(turns, _after(r_gen, r_u, "generation"), bos, default)
    check(shape, template, special)
    return shape


PROBE_TEXTS = ("Hello", "two\nlines", "  spaced  ", 'say "hi" {{ x }} {% y %}', "你好,世界", "")


def probe_conversations(with_tool: bool) -> list[list[dict]]:
    """The conversations a translation must render exactly as the template does."""
    t = PROBE_TEXTS
    convs = [[{"role": "user", "content": t[0]}],
             [{"role": "system", "content": t[1]}, {"role": "user", "content": t[3]}],
             [{"role": "user", "content": t[2]}, {"role": "assistant", "content": t[4]}, {"role": "user", "content": t[1]}],
             [{"role": "system", "content": t[3]}, {"role": "user", "content": t[4]},
              {"role": "assistant", "content": t[0]}, {"role": "user", "content": t[5] or "?"},
              {"role": "assistant", "content": t[2]}, {"role": "user", "content": t[3]}]]
    if with_tool:
        convs.append([{"role": "user", "content": t[0]}, {"role": "assistant", "content": t[1]},
                      {"role": "tool", "content": t[3]}])
    return convs


def check(shape: Shape, template: str, special: dict[str, str]) -> None:
    for conv in probe_conversations("tool" in shape.turns):
        want = _render(template, special, conv, gen=True)
        got = shape.bos + render_as_ollama(shape, conv)
        if want != got:
            raise Untranslatable(say("export.tpl_differs", want=json.dumps(want[:160], ensure_ascii=False),
                                     got=json.dumps(got[:160], ensure_ascii=False)))


def ollama_messages(conv: list[dict], system: str) -> list[dict]:
    """The messages Ollama's template sees: SYSTEM first when there is no system message, one role's run joined."""
    msgs = [dict(m) for m in conv]
    if system and (not msgs or msgs[0]["role"] != "system"):
        msgs.insert(0, {"role": "system", "content": system})
    out: list[dict] = []
    for m in msgs:
        if out and out[-1]["role"] == m["role"] and m["role"] != "tool":
            out[-1]["content"] += "\n\n" + m["content"]
        else:
            out.append(m)
    return out


def render_as_ollama(shape: Shape, conv: list[dict]) -> str:
    """What the Go template of :func:`go_template` writes for ``conv`` in Ollama (without the tokenizer's BOS)."""
    msgs = ollama_messages(conv, shape.default_system)
    text = ""
    for i, m in enumerate(msgs):
        if m["role"] in shape.turns:
            pre, post = shape.turns[m["role"]]
            text += pre + m["content"] + post
        if i == len(msgs) - 1 and m["role"] != "assistant":
            text += shape.generation
    return text


def _literal(text: str) -> str:
    """Text for a Go template: as it is, or as a quoted string where it holds what would open an action."""
    if "{{" not in text:
        return text
    return '{{ ' + json.dumps(text, ensure_ascii=False) + ' }}'


def go_template(shape: Shape) -> str:
    """Ollama's Go template for ``shape``: the turns of ``.Messages``, then the answer's header after the last one."""
    branches = []
    for role in ROLES:
        if role in shape.turns:
            pre, post = shape.turns[role]
            branches.append(f'{"if" if not branches else "else if"} eq $m.Role "{role}" }}}}'
                            f'{_literal(pre)}{{{{ $m.Content }}}}{_literal(post)}{{{{ ')
    body = ("{{ " + "".join(branches) + "end }}") if branches else ""
    return ("{{ range $i, $m := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}" + body +
            '{{ if and $last (ne $m.Role "assistant") }}' + _literal(shape.generation) + "{{ end }}{{ end }}")


@dataclass
class Translation:
    template: str | None  # the Go template, or None: not translatable
    why: Msg | None  # why not
    shape: Shape | None


def translate(template: str | None, special: dict[str, str]) -> Translation:
    try:
        shape = infer(template or "", special)
    except Untranslatable as e:
        return Translation(None, e.args[0], None)
    go = go_template(shape)
    try:
        quoted(go)
    except Untranslatable as e:
        return Translation(None, e.args[0], None)
    return Translation(go, None, shape)


# How Ollama reads a Modelfile (its parser.ParseFile): a line starting with # is a comment up to the next \r or \n;
# INSTRUCTION value, where a value ends at the first line end after which it reads as complete: "text" or
# """text""" (or bare); characters that are not printable (Go's strconv.IsPrint, as Python's str.isprintable)
# other than tab, \r and \n are dropped without a word.  So a value is written so that it cannot end early: in
# "..." when it holds no quote, else in """...""" when it holds no three quotes in a row, and never with a
# character Ollama would drop (dropped, it could join two quotes into three).

def quoted(text: str) -> str:
    """A Modelfile value that Ollama reads back as exactly ``text``; Untranslatable (its reason) when none can be."""
    bad = next((i for i, ch in enumerate(text) if not (ch.isprintable() or ch in "\t\r\n")), None)
    if bad is not None:
        raise Untranslatable(say("export.mf_dropped", char=shown(text[bad]), pos=bad + 1))
    if '"' not in text:
        return '"' + text + '"'
    if '"""' in text:
        raise Untranslatable(say("export.mf_quotes"))
    return '"""' + text + '"""'


def comment(text: str) -> str:
    """A comment line: the text on one line, whatever names it holds (a run called "a\\nFROM x" stays a comment)."""
    return "# " + one_line(text)


def modelfile(tr: Translation, system: str, stops: list[str], header: list[str]) -> str:
    """The Modelfile's text: FROM the folder it lies in, TEMPLATE, SYSTEM, the end-of-answer tokens as stops.
    Every value goes through :func:`quoted`, every header line through :func:`comment`; a system prompt or a stop
    that cannot be written is left out with a comment that says why."""
    lines = [comment(h) for h in header]
    lines.append("FROM .")
    values = [("TEMPLATE", tr.template)] if tr.template is not None else []
    values += ([("SYSTEM", system)] if system else []) + [("PARAMETER stop", s) for s in dict.fromkeys(stops) if s]
    for directive, value in values:
        try:
            lines.append(f"{directive} {quoted(value)}")
        except Untranslatable as e:
            lines.append(comment(say("export.mf_left_out", directive=directive, why=e.args[0])))
    return "\n".join(lines) + "\n"
