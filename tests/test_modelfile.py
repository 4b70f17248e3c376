"""The Ollama Modelfile's TEMPLATE renders a conversation as the tokenizer's chat template does.

The Go template is read back out of the Modelfile text and rendered by a small Go text/template interpreter
(tests/gotemplate.py) with the messages Ollama would give it (its SYSTEM first when the conversation has none);
the expectation is the real tokenizer's ``apply_chat_template`` (the demo model's own template, and the named
templates the project ships applied to it as training applies them).  Fast: no model is loaded.
"""

from __future__ import annotations

import re

import pytest

from gotemplate import render as go_render
from zeroboard.outputs import modelfile
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


def template_of(text: str) -> str | None:
    m = re.search(r'^TEMPLATE """(.*?)"""$', text, re.S | re.M)
    return m.group(1) if m else None


def system_of(text: str) -> str:
    m = re.search(r'^SYSTEM """(.*?)"""$', text, re.S | re.M)
    return m.group(1) if m else ""


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
