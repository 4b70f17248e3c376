"""The package's shape: layers that import only downwards, no import cycle, small modules, one catalog of words.

Every import counts, function-level ones included: a cycle hidden inside a
function is still a cycle.  Fast: source parsing only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from zeroboard import words

PKG = Path(__file__).resolve().parents[1] / "app" / "zeroboard"
# each subpackage (or top-level module) and its layer: a module may import its own layer's package and lower layers
LAYERS = {"words": 0, "files": 0, "workspace": 0, "safeload": 0, "data": 1, "job": 2, "planner": 3, "training": 3, "runs": 4,
          "outputs": 5, "webui": 6, "cli": 7}
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def imports(name: str, path: Path) -> set[str]:
    """The zeroboard modules ``name`` imports anywhere in its source (``from . import x`` counts as module x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("zeroboard")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("zeroboard"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m != name}


GRAPH = {name: imports(name, path) for name, path in MODULES.items()}


def layer_of(module: str) -> tuple[str, int] | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package itself
    return parts[1], LAYERS[parts[1]]


def test_every_part_of_the_package_has_a_layer():
    tops = {m.split(".")[1] for m in MODULES if m.count(".") >= 1}
    assert tops <= set(LAYERS), tops - set(LAYERS)


def test_lower_layers_never_import_upper_ones():
    wrong = []
    for src, targets in GRAPH.items():
        here = layer_of(src)
        for dst in targets:
            there = layer_of(dst)
            if here is None or there is None or here[0] == there[0]:
                continue
            if there[1] > here[1] or (there[1] == here[1]):  # up, or sideways into a sibling of the same layer
                wrong.append(f"{src} -> {dst}")
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle_anywhere():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in MODULES:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_sees_function_level_imports():
    """The check above must not be blind to an import inside a function (a cycle hidden that way is still one)."""
    assert "zeroboard.training.demo_model" in GRAPH["zeroboard.training.train"]  # imported inside a function there


def test_no_module_is_over_450_lines():
    long = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in MODULES.items()}
    over = {n: c for n, c in long.items() if c > MAX_LINES}
    assert not over, over


def test_the_screenshot_tool_is_not_in_the_runtime_package():
    assert not any("screenshot" in n for n in MODULES)
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(m.startswith("playwright") for m in mods), name


# --- one catalog of words ----------------------------------------------------------------------

# four words or more, separated by spaces (so CSS, identifiers and paths do not count)
SENTENCE = re.compile(r"(?<![\w-])[A-Za-z][a-z']+[,;:.!?]?(?: +\(?[A-Za-z][a-z']*[,;:.!?)]?){3,}(?![\w-])")
LOG_CALLS = {"debug", "info", "warning", "error", "exception", "critical"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _log_args(tree: ast.AST) -> set[int]:
    """String constants inside logger calls (log.info(...)): the trainer's log, not words shown to a user."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOG_CALLS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("log", "logger", "logging"):
            ids |= {id(c) for arg in node.args for c in ast.walk(arg) if isinstance(c, ast.Constant)}
    return ids


def english_sentences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree) | _log_args(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # an f-string: its literal parts, read together
            text = " ".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if SENTENCE.search(text):
                found.append(f"{path.name}:{node.lineno}: f{text!r}")
            skip |= {id(v) for v in node.values}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if SENTENCE.search(node.value) and not node.value.lstrip().startswith(("import ", "(", "{", "<", "//")):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    return found


# the demo's training data and prompts, and the templates' tool and system prompts: content the model reads (in the
# languages it is taught), not the page's words
CONTENT = ("zeroboard.words", "zeroboard.data.demo", "zeroboard.data.tools")


def test_no_user_visible_english_sentence_outside_the_catalog():
    found = [s for name, p in MODULES.items() if not name.startswith(CONTENT) for s in english_sentences(p)]
    assert not found, "sentences to move into zeroboard.words:\n" + "\n".join(found)


def test_the_sentence_finder_finds_sentences():
    """The scan above must be able to fail: it finds a sentence, in a plain string and in an f-string."""
    tree = 'x = "the job has errors; nothing was started"\ny = f"cannot start {x} because it is late"\n'
    probe = PKG.parent / "_probe_sentences.py"
    probe.write_text(tree)
    try:
        assert len(english_sentences(probe)) == 2
    finally:
        probe.unlink()


def test_every_catalog_entry_has_both_languages_with_the_same_placeholders():
    for key, (en, zh) in words.CATALOG.items():
        assert en.strip() and zh.strip(), key
        assert words.placeholders(en) == words.placeholders(zh), key
    for name, (en_label, zh_label, en_help, zh_help) in words.fields.FIELDS.items():
        assert all((en_label, zh_label, en_help, zh_help)), name


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_catalog_sentences_render_with_their_values(lang):
    import string

    for key, pair in words.CATALOG.items():
        specs = {name: spec for _, name, spec, _ in string.Formatter().parse(pair[0]) if name}
        values = {name: 1234 if spec else "X" for name, spec in specs.items()}  # {n:,} wants a number
        assert words.text(key, lang, **values)  # a bad format string raises here


def _bold_that_markdown_drops(text: str) -> bool:
    """A closing ``**`` after punctuation (``**建议:**改用``) needs a space or punctuation after it, else CommonMark
    shows the asterisks instead of bold: the trap of Chinese text, whose punctuation has no space after it."""
    import unicodedata

    def punct(ch: str) -> bool:
        return unicodedata.category(ch)[0] in "PS"

    marks = [m.start() for m in re.finditer(r"\*\*", text)]
    for close in marks[1::2]:
        after = text[close + 2] if close + 2 < len(text) else " "
        if punct(text[close - 1]) and not (after.isspace() or punct(after)):
            return True
    return False


def test_bold_text_in_the_catalog_renders_as_bold_in_both_languages():
    assert _bold_that_markdown_drops("**建议:**改用") and not _bold_that_markdown_drops("**建议**:改用")
    for key, pair in words.CATALOG.items():
        for template in pair:
            filled = re.sub(r"\{[^}]*\}", "X", template)  # a value is text, not punctuation
            assert not _bold_that_markdown_drops(filled), f"{key}: {template}"
