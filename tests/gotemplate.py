"""A small interpreter of Go's text/template, for the subset Ollama's chat templates use (tests only).

Text and actions with trim markers (``{{-`` / ``-}}``); ``range`` (with ``$i, $x :=``), ``if`` / ``else if`` /
``else`` / ``end``; variables (``$x := ...``, ``$x = ...``, ``$`` the data); fields (``.A.B``, ``$x.A``); string,
number and boolean literals; parentheses; the builtins ``eq ne lt gt and or not len slice index``.  Enough to render
the Modelfile's TEMPLATE exactly as Ollama's Go would, so a test can compare it with the tokenizer's chat template.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
TOKEN = re.compile(r'\s*(?:(?P<str>"(?:\\.|[^"\\])*")|(?P<raw>`[^`]*`)|(?P<num>-?\d+)|(?P<op>:=|=|,|\(|\))'
                   r"|(?P<var>\$[A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)|(?P<field>(?:\.[A-Za-z_][A-Za-z_0-9]*)+|\.)"
                   r"|(?P<ident>[A-Za-z_][A-Za-z_0-9]*))")


class GoTemplateError(ValueError):
    pass


def _tokens(src: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    src = src.strip()
    while pos < len(src):
        m = TOKEN.match(src, pos)
        if not m or m.end() == pos:
            raise GoTemplateError(f"cannot read {src[pos:pos + 20]!r}")
        out.append((m.lastgroup, m.group(m.lastgroup)))
        pos = m.end()
        while pos < len(src) and src[pos].isspace():
            pos += 1
    return out


@dataclass
class Node:
    kind: str  # text, print, set, if, range
    text: str = ""
    tokens: list = field(default_factory=list)  # the pipeline
    names: list = field(default_factory=list)  # set / range variables
    declare: bool = True
    branches: list = field(default_factory=list)  # if: [(tokens, body)]; range: [(tokens, body)]
    other: list | None = None  # else


def _lex(src: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", s) pieces, trim markers applied."""
    out, pos = [], 0
    for m in ACTION.finditer(src):
        text = src[pos:m.start()]
        if m.group(1):
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", m.group(2)))
        pos = m.end()
        if m.group(3):
            while pos < len(src) and src[pos].isspace():
                pos += 1
    out.append(("text", src[pos:]))
    return [p for p in out if p != ("text", "")]


def parse(src: str) -> list[Node]:
    pieces = _lex(src)
    body, stop = _parse(pieces, 0, ())
    if stop is not None:
        raise GoTemplateError(f"unexpected {{{{{pieces[stop[1]][1]}}}}}")
    return body


def _parse(pieces, i, stops):
    """(nodes, None) at the end, or (nodes, (keyword, index, tokens)) at a stop keyword (end / else)."""
    nodes = []
    while i < len(pieces):
        kind, s = pieces[i]
        if kind == "text":
            nodes.append(Node("text", text=s))
            i += 1
            continue
        toks = _tokens(s)
        word = toks[0][1] if toks and toks[0][0] == "ident" else None
        if word in ("end", "else"):
            if word not in stops:
                raise GoTemplateError(f"unexpected {word}")
            return nodes, (word, i, toks[1:])
        if word in ("if", "range"):
            node, i = _block(word, toks[1:], pieces, i + 1)
            nodes.append(node)
            continue
        if len(toks) >= 2 and toks[0][0] == "var" and toks[1][1] in (":=", "="):
            nodes.append(Node("set", names=[toks[0][1]], tokens=toks[2:], declare=toks[1][1] == ":="))
        else:
            nodes.append(Node("print", tokens=toks))
        i += 1
    return nodes, None


def _block(word, toks, pieces, i):
    node = Node(word)
    if word == "range" and any(t[1] == ":=" for t in toks):
        k = next(n for n, t in enumerate(toks) if t[1] == ":=")
        node.names = [t[1] for t in toks[:k] if t[0] == "var"]
        toks = toks[k + 1:]
    while True:
        body, stop = _parse(pieces, i, ("end", "else"))
        if stop is None:
            raise GoTemplateError(f"{word} without end")
        node.branches.append((toks, body))
        keyword, i, rest = stop
        i += 1
        if keyword == "end":
            return node, i
        if rest and rest[0][1] == "if" and word == "if":  # else if
            toks = rest[1:]
            continue
        other, stop = _parse(pieces, i, ("end",))
        if stop is None:
            raise GoTemplateError(f"{word} without end")
        node.other = other
        return node, stop[1] + 1


def truth(v) -> bool:
    return bool(v) if not isinstance(v, (int, float)) or isinstance(v, bool) else v != 0


def _get(obj, name):
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


class Scope:
    def __init__(self, data):
        self.frames = [{"$": data}]

    def lookup(self, name):
        for f in reversed(self.frames):
            if name in f:
                return f[name]
        raise GoTemplateError(f"undefined variable {name}")

    def assign(self, name, value, declare):
        if declare:
            self.frames[-1][name] = value
            return
        for f in reversed(self.frames):
            if name in f:
                f[name] = value
                return
        raise GoTemplateError(f"undefined variable {name}")


FUNCS = {
    "eq": lambda a, *bs: any(a == b for b in bs), "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "gt": lambda a, b: a > b, "not": lambda a: not truth(a), "len": len, "index": lambda x, *ks: _index(x, ks),
    "slice": lambda x, i=0, j=None: x[i:j],
}


def _index(x, keys):
    for k in keys:
        x = x[k]
    return x


def _operand(toks, k, dot, scope):
    kind, s = toks[k]
    if kind == "op" and s == "(":
        depth, j = 1, k + 1
        while depth:
            depth += {"(": 1, ")": -1}.get(toks[j][1], 0) if toks[j][0] == "op" else 0
            j += 1
        return _pipe(toks[k + 1:j - 1], dot, scope), j
    if kind == "str":
        return json.loads(s), k + 1
    if kind == "raw":
        return s[1:-1], k + 1
    if kind == "num":
        return int(s), k + 1
    if kind == "ident" and s in ("true", "false"):
        return s == "true", k + 1
    if kind == "field":
        value = dot
        for name in s.split(".")[1:]:
            value = _get(value, name)
        return value, k + 1
    if kind == "var":
        head, *rest = s.split(".")
        value = scope.lookup(head)
        for name in rest:
            value = _get(value, name)
        return value, k + 1
    raise GoTemplateError(f"unexpected {s!r}")


def _pipe(toks, dot, scope):
    if toks and toks[0][0] == "ident" and toks[0][1] in ("and", "or"):  # short-circuit, returning an operand
        args, k = [], 1
        while k < len(toks):
            v, k = _operand(toks, k, dot, scope)
            args.append(v)
        for v in args:
            if truth(v) != (toks[0][1] == "and"):
                return v
        return args[-1]
    if toks and toks[0][0] == "ident" and toks[0][1] in FUNCS:
        args, k = [], 1
        while k < len(toks):
            v, k = _operand(toks, k, dot, scope)
            args.append(v)
        return FUNCS[toks[0][1]](*args)
    value, k = _operand(toks, 0, dot, scope)
    if k != len(toks):
        raise GoTemplateError(f"cannot call {toks}")
    return value


def _show(v) -> str:
    if v is None:
        return "<no value>"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _run(nodes, dot, scope, out):
    for n in nodes:
        if n.kind == "text":
            out.append(n.text)
        elif n.kind == "print":
            out.append(_show(_pipe(n.tokens, dot, scope)))
        elif n.kind == "set":
            scope.assign(n.names[0], _pipe(n.tokens, dot, scope), n.declare)
        elif n.kind == "if":
            for toks, body in n.branches:
                if truth(_pipe(toks, dot, scope)):
                    scope.frames.append({})
                    _run(body, dot, scope, out)
                    scope.frames.pop()
                    break
            else:
                if n.other is not None:
                    _run(n.other, dot, scope, out)
        elif n.kind == "range":
            toks, body = n.branches[0]
            items = _pipe(toks, dot, scope) or []
            pairs = list(items.items()) if isinstance(items, dict) else list(enumerate(items))
            if not pairs and n.other is not None:
                _run(n.other, dot, scope, out)
            for key, value in pairs:
                frame = {}
                if len(n.names) == 1:
                    frame[n.names[0]] = value
                elif len(n.names) == 2:
                    frame[n.names[0]], frame[n.names[1]] = key, value
                scope.frames.append(frame)
                _run(body, value, scope, out)
                scope.frames.pop()


def render(src: str, data) -> str:
    out: list[str] = []
    _run(parse(src), data, Scope(data), out)
    return "".join(out)
