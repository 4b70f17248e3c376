"""The Ollama Modelfile's TEMPLATE renders a conversation as the tokenizer's chat template does.

The Go template is read back out of the Modelfile text and rendered by a small Go text/template interpreter
(tests/gotemplate.py) with the messages Ollama would give it (its SYSTEM first when the conversation has none);
the expectation is the real tokenizer's ``apply_chat_template`` (the demo model's own template, and the named
templates the project ships applied to it as training applies them).  Fast: no model is loaded.
"""

from __future__ import annotations

import random
import re

import pytest

from gotemplate import render as go_render
from zeroboard.job.quoting import one_line
from zeroboard.outputs import modelfile, standalone
from zeroboard.training import templates

CONVERSATIONS = [
    [{"role": "user", "content": "Who are you?"}],
    [{"role": "system", "content": "Answer in one short sentence."}, {"role": "user", "content": "What is 3 plus 4?"}],
    [{"role": "user", "content": "Let's play a game of opposites."}, {"role": "assistant", "content": "Sure. Give me a word."},
     {"role": "user", "content": "hot"}],
    [{"role": "system", "content": "你是一个助手。\nBe brief."}, {"role": "user", "content": "你是谁?"},
     {"role": "assistant", "content": "我是 ZeroBoard 助手。"}, {"role": "user", "content": 'Quote this: "{{ .Role }}"'}],
]


@pytest.fixture(scope="module")
def demo_tokenizer_dir(demo):
    return demo


def tokenizer_with(model_dir, template: str | None, bos: str | None = None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if bos:
        tok.add_special_tokens({"bos_token": bos})
    if template:
        templates.apply(tok, template)
    return tok


# --- a Modelfile read as Ollama reads it ---------------------------------------------------------------------
INSTRUCTIONS = ("from", "adapter", "parameter", "template", "system", "message", "license", "draft", "renderer",
                "parser", "requires")


def _unquote(text: str) -> str | None:
    """A value as Ollama takes it: inside \"\"\"...\"\"\" or "...", else as it is; None while a quote is still open."""
    if text.startswith('"""'):
        return text[3:-3] if len(text) >= 6 and text.endswith('"""') else None
    if text.startswith('"'):
        return text[1:-1] if len(text) >= 2 and text.endswith('"') else None
    return text


def parse_modelfile(text: str) -> list[tuple[str, str]]:
    """The directives of a Modelfile, following Ollama's documented syntax: ``# comment`` lines, ``INSTRUCTION
    value`` (instructions in any case; PARAMETER takes a name, MESSAGE a role), a value in \"\"\"...\"\"\" or
    "..." running over lines until its quote closes at a line's end, and, as its reader does, characters that are not
    printable (other than blanks and line ends) dropped.  Raises ValueError on what Ollama would refuse."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] in " \t\r\n":
            i += 1
            continue
        if text[i] == "#":
            while i < n and text[i] not in "\r\n":
                i += 1
            continue
        word = re.match(r"[A-Za-z]*", text[i:]).group()
        i += len(word)
        if word.lower() not in INSTRUCTIONS or i >= n or text[i] not in " \t":
            raise ValueError(f"not an instruction: {text[i - len(word):i + 20]!r}")
        name, i = word.upper(), i + 1
        if name in ("PARAMETER", "MESSAGE"):
            sub = re.match(r"[A-Za-z0-9_]*" if name == "PARAMETER" else "[A-Za-z]*", text[i:]).group()
            i += len(sub)
            if not sub or i >= n or text[i] not in " \t":
                raise ValueError(f"{name} without a name: {text[i - len(sub):i + 20]!r}")
            name, i = f"{name} {sub}", i + 1
        buf = ""
        while True:
            if i >= n or text[i] in "\r\n" and _unquote(buf.strip()) is not None:
                value = _unquote(buf.strip())
                if value is None:
                    raise ValueError(f"{name}: a quote left open")
                break
            ch, i = text[i], i + 1
            if ch.isprintable() or ch in "\t\r\n":
                buf += ch
        out.append((name, value))
    return out


def directives(text: str) -> dict[str, str]:
    return dict(parse_modelfile(text))


def template_of(text: str) -> str | None:
    return directives(text).get("TEMPLATE")


def system_of(text: str) -> str:
    return directives(text).get("SYSTEM", "")


def ollama_render(go: str, conv: list[dict], system: str) -> str:
    """As Ollama's chat handler and template.Execute do: SYSTEM first unless the request has a system message, a role's
    consecutive messages joined; the template gets .Messages (each .Role and .Content)."""
    msgs = [{"Role": m["role"], "Content": m["content"]} for m in modelfile.ollama_messages(conv, system)]
    return go_render(go, {"Messages": msgs})


@pytest.mark.parametrize("name, bos", [("own", None), ("chatml", None), ("llama3", "<|begin_of_text|>"), ("qwen", None),
                                       ("phi", None), ("alpaca", None)])
def test_the_modelfile_template_renders_conversations_as_the_tokenizer_does(demo_tokenizer_dir, name, bos):
    tok = tokenizer_with(demo_tokenizer_dir, None if name == "own" else name, bos)
    tr = modelfile.translate(tok.chat_template, templates.special_tokens(tok))
    assert tr.template is not None, tr.why
    text = modelfile.modelfile(tr, tr.shape.default_system, [tok.eos_token], ["test"])
    go, system = template_of(text), system_of(text)
    assert go == tr.template and "FROM ." in text and f'PARAMETER stop "{tok.eos_token}"' in text
    for conv in CONVERSATIONS:
        want = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        got = ollama_render(go, conv, system)
        assert (bos or "") + got == want, (name, conv)


def test_a_default_system_prompt_travels_as_the_modelfiles_system(demo_tokenizer_dir):
    tok = tokenizer_with(demo_tokenizer_dir, "qwen")
    tr = modelfile.translate(tok.chat_template, templates.special_tokens(tok))
    assert tr.shape.default_system.startswith("You are Qwen")
    text = modelfile.modelfile(tr, tr.shape.default_system, [tok.eos_token], [])
    assert system_of(text) == tr.shape.default_system
    conv = CONVERSATIONS[0]  # no system message: the template writes its default, Ollama puts SYSTEM first
    assert ollama_render(template_of(text), conv, system_of(text)) == tok.apply_chat_template(
        conv, tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize("name", ["mistral", "gemma"])
def test_a_template_that_cannot_be_translated_is_left_out_with_the_reason(demo_tokenizer_dir, name):
    tok = tokenizer_with(demo_tokenizer_dir, name)
    tr = modelfile.translate(tok.chat_template, templates.special_tokens(tok))
    assert tr.template is None and "first user turn" in tr.why
    text = modelfile.modelfile(tr, "", [tok.eos_token], [f"No TEMPLATE: {tr.why}"])
    assert "TEMPLATE" not in text.replace("No TEMPLATE", "") and "FROM ." in text


def test_arbitrary_jinja_is_refused_not_faked():
    special = {"bos_token": "", "eos_token": "</s>"}
    trimming = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] | trim }}\n{% endfor %}"
    tr = modelfile.translate(trimming, special)  # fixed text around each turn, except that it trims the content
    assert tr.template is None and "renders a test conversation differently" in tr.why
    shouting = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] | upper }}\n{% endfor %}"
    assert modelfile.translate(shouting, special).template is None
    assert modelfile.translate(None, special).why == "the tokenizer has no chat template"


def test_the_go_interpreter_reads_ollamas_own_style():
    """The interpreter itself, on the constructs Ollama's published templates use (trim markers, else if, $last)."""
    src = ('{{- range $i, $_ := .Messages }}{{- $last := eq (len (slice $.Messages $i)) 1 -}}\n'
           '{{ if eq .Role "user" }}U:{{ .Content }}\n{{ else if eq .Role "assistant" }}A:{{ .Content }}\n{{ else }}'
           'S:{{ .Content }}\n{{ end }}{{ if and $last (ne .Role "assistant") }}A:{{ end }}{{ end }}')
    msgs = [{"Role": "system", "Content": "s"}, {"Role": "user", "Content": "q"}]
    assert go_render(src, {"Messages": msgs}) == "S:s\nU:q\nA:"
    assert go_render('{{ "{{" }}x{{ if not .A }}-{{ end }}', {"A": ""}) == "{{x-"


# --- names and values never become directives (issue 31) ------------------------------------------------------
PIECES = ("FROM /etc/passwd", "ADAPTER ./evil.gguf", "SYSTEM pwned", "PARAMETER stop x", "LICENSE", "\n", "\r", "\r\n",
          '"', '""', '"""', "#", " ", "\t", "\x1b", "\x85", "\u2028", "\x00", "你好", "{{ .Content }}", "'", "run", "\\")


def hostile(rng: random.Random, most: int = 8) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, most)))


def writable(value: str) -> bool:
    try:
        modelfile.quoted(value)
    except modelfile.Untranslatable:
        return False
    return True


def test_a_run_name_and_values_with_newlines_and_directives_parse_as_exactly_what_was_written():
    """The issue's export: a run whose name holds a newline and a FROM (made before names were checked) wrote a header
    that ended at the newline.  Each name is a comment line, each value reads back as itself; a value that cannot
    (three quotes, a character Ollama drops) is left out, and a comment says why."""
    name = "runs/a\nFROM /etc/passwd\nADAPTER ./evil.gguf\r# \u2028SYSTEM x"
    system = 'Be brief.\nFROM /etc/passwd\nADAPTER ./evil.gguf\n"quoted" and # not a comment\n'
    template = '{{ if eq .Role "user" }}U: {{ .Content }}\nFROM /x{{ end }}'
    text = standalone.modelfile_text(name, modelfile.Translation(template, None, None), system, ["</s>", 'say "x"\nFROM y'])
    assert parse_modelfile(text) == [("FROM", "."), ("TEMPLATE", template), ("SYSTEM", system), ("PARAMETER stop", "</s>"),
                                     ("PARAMETER stop", 'say "x"\nFROM y')]
    assert text.splitlines()[0].startswith("# Made by ZeroBoard") and one_line(name) in text.splitlines()[0]
    for value in ('a"""\nFROM /etc/passwd', 'a""\x1b"\nFROM /etc/passwd', "x\x1by"):  # ESC dropped would close the quote
        text = modelfile.modelfile(modelfile.Translation(None, None, None), value, [], ["h"])
        assert parse_modelfile(text) == [("FROM", ".")], value
        assert "# SYSTEM left out: " in text, text


def test_random_names_and_values_never_add_a_directive():
    rng = random.Random(31)
    written = 0
    for _ in range(400):
        name, template, system, stop = (hostile(rng) for _ in range(4))
        text = standalone.modelfile_text(name, modelfile.Translation(template, None, None), system, [stop])
        want = [("FROM", ".")] + [(d, v) for d, v in (("TEMPLATE", template), ("SYSTEM", system), ("PARAMETER stop", stop))
                                  if writable(v)]
        assert parse_modelfile(text) == want, text
        assert text.count("left out: ") == 4 - len(want)
        written += len(want) - 1
    assert written > 300  # most values are written (newlines, quotes, FROM lines and all), not left out
