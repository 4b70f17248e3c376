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
- JSON: the nesting depth, counted on the text before it is decoded.

A refusal is a :class:`Refused` carrying a catalog key (``safe.*``) and its
values; callers turn it into their own message naming the file and field.
The lowest layer: nothing of ZeroBoard's is imported here.
"""

from __future__ import annotations

import json
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


JOB = Limits(max_bytes=256 << 10)  # a job file: a few kB in practice
CONFIG = Limits(max_bytes=4 << 20, max_nodes=1_000_000)  # DeepSpeed JSON, dataset_info.json, a model's config.json
RECORD = Limits(max_bytes=64 << 20, max_depth=100, max_nodes=10_000_000)  # one dataset record (JSON lines)


class Refused(ValueError):
    """The input is outside the limits. ``key`` is a catalog entry (``safe.*``), ``values`` fills it."""

    def __init__(self, key: str, **values: Any):
        self.key, self.values = key, values
        super().__init__(f"{key}: {values}")


def read_text(path: str | Path, limits: Limits) -> str:
    """A UTF-8 text file, refused (before reading it) when it is larger than the limit. OSError and
    UnicodeDecodeError pass through for the caller to word."""
    p = Path(path)
    with p.open("rb") as fh:
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
        return loader.construct_document(node)
    finally:
        loader.dispose()


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
    """``json.loads`` within ``limits`` (size and nesting depth). ValueError passes through for the caller."""
    if len(text) > limits.max_bytes:
        raise Refused("safe.too_big", limit=_size(limits.max_bytes))
    try:
        value = json.loads(text)
    except RecursionError:  # the C decoder stops at the interpreter's recursion limit
        raise Refused("safe.too_deep", limit=limits.max_depth) from None
    if depth(value) > limits.max_depth:
        raise Refused("safe.too_deep", limit=limits.max_depth)
    return value


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
