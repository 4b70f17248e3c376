"""Reading YAML and JSON that a user hands us, in bounded time and memory.

A job file, **Load arguments**, a dataset_info.json, a DeepSpeed JSON and a
model's config.json all come from users.  Parsed naively, a few hundred bytes
of YAML anchors expand to billions of nodes (eight levels of nine aliases:
9**8 leaves), a deeply nested list exhausts the recursion limit, and a huge
file holds the server.  So every such file is read here, with limits:

- its size, before anything is parsed;
- YAML: the nesting depth, checked on the parser's event stream (iterative,
  so a deep file cannot overflow anything), then the number of nodes the
  document stands for once every alias is expanded (counted on the composed
  graph, one visit per distinct node) and alias cycles;
- JSON: the nesting depth, counted on the text before it is decoded;
- a special file (a FIFO, a device, a socket) is refused by its kind before it
  is opened, and opened without waiting (a FIFO swapped in after the look is
  still refused, never waited on: ``open`` of a FIFO blocks until a writer comes);
- a key given twice in one mapping (YAML or JSON) is refused by name, with its
  lines: the last would silently win;
- a number that is not finite (``1e400``, ``NaN``, ``.inf``) is refused with its
  key: ``int(inf)`` raises far from where the value came from.

A refusal is a :class:`Refused` carrying a catalog key (``safe.*``) and its
values; callers turn it into their own message naming the file and field.
The lowest layer: nothing of ZeroBoard's is imported here.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

try:  # libyaml's parser: about 10x faster than the pure-Python one, same results
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _Loader


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_depth: int = 64  # the deepest job file or DeepSpeed JSON is 4 levels; dataset records a few more
    max_nodes: int = 100_000  # scalars, lists and mappings once every alias is expanded
    strict: bool = True  # keys given twice and numbers that are not finite are refused (settings files, not data)


JOB = Limits(max_bytes=256 << 10)  # a job file: a few kB in practice
CONFIG = Limits(max_bytes=4 << 20, max_nodes=1_000_000)  # DeepSpeed JSON, dataset_info.json, a model's config.json
# one dataset record (JSON lines): the job's max_record_bytes bounds its size (the default here)
RECORD = Limits(max_bytes=64 << 20, max_depth=100, max_nodes=10_000_000, strict=False)
MAX_CELL_BYTES = 4 << 20  # one CSV cell, by default (the job's max_cell_bytes)

# what a special file is -> its refusal (catalog keys)
KINDS = {stat.S_IFIFO: "safe.special_fifo", stat.S_IFCHR: "safe.special_char", stat.S_IFBLK: "safe.special_block",
         stat.S_IFSOCK: "safe.special_socket"}


class Refused(ValueError):
    """The input is outside the limits. ``key`` is a catalog entry (``safe.*``), ``values`` fills it;
    ``field``: the top-level key of the document it is about, when it is about one."""

    def __init__(self, key: str, /, field: str | None = None, **values: Any):
        self.key, self.values, self.field = key, values, field
        super().__init__(f"{key}: {values}")


# --- special files -------------------------------------------------------------------------------------------

def special_kind(path: str | Path) -> str | None:
    """The refusal (a catalog key) of a path that is no regular file nor folder (a FIFO, a device, a socket), else
    None (missing and unreadable paths included: opening them says why). Links are followed."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return KINDS.get(stat.S_IFMT(mode))


def _regular(st: os.stat_result, path: str | Path) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, os.strerror(21), str(path))
    if not stat.S_ISREG(st.st_mode):
        raise Refused(KINDS.get(stat.S_IFMT(st.st_mode), "safe.special_other"))


def open_binary(path: str | Path) -> io.BufferedReader:
    """A regular file opened for reading; a special file refused by its kind, before it is opened and again after
    (opened without waiting: a FIFO put in its place between the two looks is refused, never waited on).
    OSError passes through."""
    if "\0" in str(path):
        raise Refused("safe.nul_in_path")
    _regular(os.stat(path), path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        _regular(os.fstat(fd), path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_text(path: str | Path, newline: str | None = None) -> io.TextIOWrapper:
    """:func:`open_binary` as UTF-8 text."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", newline=newline)


def read_text(path: str | Path, limits: Limits) -> str:
    """A UTF-8 text file, refused (before reading it) when it is larger than the limit or no regular file.
    OSError and UnicodeDecodeError pass through for the caller to word."""
    with open_binary(path) as fh:
        data = fh.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise Refused("safe.too_big", limit=_size(limits.max_bytes))
    return data.decode("utf-8")


def yaml_text(text: str, limits: Limits = JOB) -> Any:
    """The value of a YAML document (``yaml.safe_load`` semantics), within ``limits``.

    yaml.YAMLError passes through for the caller to word."""
    if len(text.encode("utf-8", errors="ignore")) > limits.max_bytes:
        raise Refused("safe.too_big", limit=_size(limits.max_bytes))
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > limits.max_depth:
                raise Refused("safe.too_deep", limit=limits.max_depth)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count_expanded(node, limits)
        if limits.strict:
            _unique_keys(node)
        value = loader.construct_document(node)
    finally:
        loader.dispose()
    if limits.strict:
        finite(value)
    return value


_MERGE = "tag:yaml.org,2002:merge"


def _unique_keys(root: yaml.Node) -> None:
    """Every mapping of the document gives each key once (a merge ``<<`` may be overridden: that is its use)."""
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, str | None]] = [(root, None)]
    while stack:
        node, top = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], yaml.Node] = {}
            for k, v in node.value:
                name = top if top is not None else (str(k.value) if isinstance(k, yaml.ScalarNode) else None)
                if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE:
                    if (k.tag, k.value) in first:
                        lines = f"{first[(k.tag, k.value)].start_mark.line + 1}, {k.start_mark.line + 1}"
                        raise Refused("safe.duplicate_key", field=name, key=_cut(k.value), lines=lines)
                    first[(k.tag, k.value)] = k
                stack.append((v, name))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((c, top) for c in node.value)


def _count_expanded(root: yaml.Node, limits: Limits) -> None:
    """Nodes the document stands for with every alias expanded; an alias that contains itself is refused.

    Iterative (no recursion), each distinct node visited once: a node's size is one plus its children's."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            if total > limits.max_nodes:
                raise Refused("safe.too_many_nodes", limit=f"{limits.max_nodes:,}")
            size[key] = total
            continue
        if key in size:
            continue
        if key in on_path:
            raise Refused("safe.recursive")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def json_text(text: str, limits: Limits = CONFIG) -> Any:
    """``json.loads`` within ``limits`` (size, nesting depth; strict: keys once, finite numbers). ValueError passes
    through for the caller."""
    if len(text) > limits.max_bytes:
        raise Refused("safe.too_big", limit=_size(limits.max_bytes))
    try:
        value = json.loads(text, object_pairs_hook=_once(text)) if limits.strict else json.loads(text)
    except RecursionError:  # the C decoder stops at the interpreter's recursion limit
        raise Refused("safe.too_deep", limit=limits.max_depth) from None
    if depth(value) > limits.max_depth:
        raise Refused("safe.too_deep", limit=limits.max_depth)
    if limits.strict:
        finite(value)
    return value


def _once(text: str):
    """json's object hook refusing a key given twice in one object, naming it and the lines that write it."""

    def pairs(items: list[tuple[str, Any]]) -> dict:
        out = dict(items)
        if len(out) == len(items):
            return out
        seen: set[str] = set()
        key = next(k for k, _ in items if k in seen or seen.add(k))
        where = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
        raise Refused("safe.duplicate_key", key=_cut(key), lines=", ".join(map(str, sorted(set(where))[:6])) or "?")

    return pairs


def finite(value: Any) -> None:
    """Every number of a decoded document is finite, else Refused naming its key (``a.b[2]``) and ``field`` its
    top-level key. Iterative: any depth is walked safely."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, where = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            top = re.split(r"[.\[]", where, maxsplit=1)[0] or None
            raise Refused("safe.not_finite", field=top, key=_cut(where or "(the document)"), got=repr(v))
        if isinstance(v, dict):
            stack.extend((c, f"{where}.{k}" if where else str(k)) for k, c in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((c, f"{where}[{i}]") for i, c in enumerate(v))


def _cut(text: Any, limit: int = 80) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def depth(value: Any) -> int:
    """How deeply lists and mappings nest in a decoded value (iterative: any depth is measured safely)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, (list, tuple)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in v if isinstance(c, (list, tuple, dict)))
    return deepest


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
