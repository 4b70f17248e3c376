"""Named templates as LLaMA-Factory writes and tokenizes them: the alpaca system prompt, turn-by-turn tokenization,
the proportional cut at cutoff_len, and tools (the model's own tool format when its template has one).

The expectations come from the rules themselves (written out here), never from a copy of outputs; the side-by-side
comparison with LLaMA-Factory's own code lives in benchmarks/data_prep.py --ids (CI has no LLaMA-Factory).
Real tokenizers: the demo model's.
"""

from __future__ import annotations

import json
import typing

import pytest

from zeroboard.data import chat, convert, tokens
from zeroboard.data.info import DatasetSource
from zeroboard.job import spec
from zeroboard.training import templates

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "description": "first"}}, "required": ["a"]}}}]
CALL = {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                            "function": {"name": "add", "arguments": {"a": 1}}}]}
TOOL_CONV = [{"role": "user", "content": "Add one."}, CALL, {"role": "tool", "content": "1"},
             {"role": "assistant", "content": "It is 1."}]
# a model's own template that writes tools and calls (the shape of Qwen 2.5's, shortened)
OWN_TOOLS = ("{%- if tools %}<|system|>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|end|>\n{% endif %}"
             "{%- for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% if m.tool_calls %}"
             "{% for c in m.tool_calls %}<call>{{ c.function | tojson }}</call>{% endfor %}{% endif %}<|end|>\n{% endfor %}"
             "{%- if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="module")
def model_dir():
    from zeroboard.training.demo_model import ensure_demo_model

    return ensure_demo_model(spec.DEMO_MODEL, spec.DEMO_DATA_DIR)


def tok(model_dir, name: str):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(model_dir)
    templates.apply(t, name)
    return t


def render(name: str, conv, tools=None) -> str:
    return chat.Renderer.for_template(chat.NAMED[name].jinja, {"eos_token": "</s>", "bos_token": "<s>"}).render(
        conv, tools=tools)


# --- the alpaca system prompt --------------------------------------------------------------------------


def test_alpaca_writes_a_custom_system_prompt_as_it_is_and_the_default_one_with_its_blank_line():
    turn = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi."}]
    rest = "### Instruction:\nSay hi.\n\n### Response:\nHi.</s>\n\n"
    assert render("alpaca", [{"role": "system", "content": "Be brief."}, *turn]) == "Be brief." + rest
    assert render("alpaca", turn) == chat.ALPACA_SYSTEM + rest
    assert chat.ALPACA_SYSTEM.endswith("request.\n\n")


# --- tokenized turn by turn ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["alpaca", "chatml", "mistral", "plain"])
def test_a_named_template_is_tokenized_turn_by_turn(model_dir, name):
    t = tok(model_dir, name)
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "One\n\n"},
            {"role": "assistant", "content": "Two\n\n"}, {"role": "user", "content": "Three"},
            {"role": "assistant", "content": "Four"}]
    lay = templates.Renderer.of(t).layout(conv)
    assert lay.cuts and all(0 <= c <= len(lay.text) for c in lay.cuts)
    # each turn on its own, then put together: the ids the trainer uses
    apart = [i for a, b in tokens.pieces(lay) for i in t(lay.text[a:b], add_special_tokens=False)["input_ids"]]
    assert templates.encode(conv, t, 10_000)["input_ids"] == apart
    own = templates.Renderer.of(tok(model_dir, "auto")).layout(conv)
    assert own.cuts is None  # a model's own template is tokenized whole, as apply_chat_template does


# --- the proportional cut --------------------------------------------------------------------------------


def rule(source: int, target: int, left: int) -> tuple[int, int]:
    """LLaMA-Factory's rule in words: a pair that fits is kept; else an answer under half of what is left is kept
    whole, a prompt under half keeps itself and the answer takes the rest, and otherwise the answer gets its share
    int(left * target / (source + target)); the prompt has what the answer leaves."""
    if source + target <= left:
        return source, target
    if 2 * target < left:
        return left - target, target
    if 2 * source < left:
        return source, left - source
    t = int(left * (target / (source + target)))
    return left - t, t


@pytest.mark.parametrize("source,target,cutoff", [(50, 10, 40), (10, 50, 40), (30, 30, 40), (100, 3, 9), (7, 90, 33),
                                                  (64, 64, 64), (5, 5, 100), (1, 200, 2)])
def test_one_pair_is_cut_in_proportion(source, target, cutoff):
    ids = list(range(source + target))
    input_ids, labels = tokens.cut(ids, [(source, source + target)], cutoff)
    s, t = rule(source, target, cutoff)
    assert input_ids == ids[:s] + ids[source:source + t]  # both parts keep their starts
    assert labels == [tokens.IGNORE] * s + ids[source:source + t]
    assert len(input_ids) == min(cutoff, source + target)
    end_ids, end_labels = tokens.cut(ids, [(source, source + target)], cutoff, "end")
    assert end_ids == ids[:cutoff] and end_labels == ([tokens.IGNORE] * source + ids[source:])[:cutoff]


def test_the_pairs_share_the_cutoff_in_order_and_the_later_ones_are_dropped():
    pairs = [(20, 6), (9, 30), (12, 12), (4, 4)]
    ids, answers, at = list(range(sum(s + t for s, t in pairs))), [], 0
    for s, t in pairs:
        answers.append((at + s, at + s + t))
        at += s + t
    for cutoff in (10, 26, 40, 60, 90, 97, 200):
        want, left, at = [], cutoff, 0
        for s, t in pairs:
            if left <= 0:
                break
            ks, kt = rule(s, t, left)
            want += ids[at:at + ks] + ids[at + s:at + s + kt]
            left -= ks + kt
            at += s + t
        assert tokens.cut(ids, answers, cutoff)[0] == want, cutoff


def test_the_trainer_cuts_a_long_sample_by_the_rule(model_dir):
    t = tok(model_dir, "chatml")
    conv = [{"role": "user", "content": "word " * 80}, {"role": "assistant", "content": "answer " * 60}]
    full = templates.encode(conv, t, 10_000)
    source = full["labels"].index(next(x for x in full["labels"] if x != tokens.IGNORE))
    target = len(full["input_ids"]) - source
    for cutoff in (40, source, target + 3, len(full["input_ids"]) - 1):
        row = templates.encode(conv, t, cutoff)
        s, k = rule(source, target, cutoff)
        assert row["input_ids"] == full["input_ids"][:s] + full["input_ids"][source:source + k]
        assert sum(x != tokens.IGNORE for x in row["labels"]) == k > 0


# --- tools -----------------------------------------------------------------------------------------------


def test_named_templates_write_tools_in_llamafactorys_format_of_that_name():
    qwen = render("qwen", TOOL_CONV, TOOLS)
    assert qwen.startswith("<|im_start|>system\n" + chat.QWEN_SYSTEM + "\n\n# Tools\n")
    assert "\n" + json.dumps(TOOLS[0], ensure_ascii=False) + "\n</tools>" in qwen
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call><|im_end|>' in qwen
    assert "<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>" in qwen
    chatml = render("chatml", TOOL_CONV, TOOLS)
    assert chatml.startswith("<|im_start|>system\nYou have access to the following tools:\n> Tool Name: add\n"
                             "Tool Description: Add two numbers.\nTool Args:\n  - a (integer, required): first\n\n")
    assert "Action: tool name (one of [add])" in chatml
    assert '<|im_start|>assistant\nAction: add\nAction Input: {"a": 1}<|im_end|>' in chatml
    mistral = render("mistral", TOOL_CONV, TOOLS)
    assert mistral.startswith("<s>[INST] [AVAILABLE_TOOLS] " + json.dumps([TOOLS[0]]) + "[/AVAILABLE_TOOLS]\n\nAdd one.")
    assert '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}]</s>[TOOL_RESULTS] {"content": 1}' in mistral
    llama3 = render("llama3", TOOL_CONV, TOOLS)
    assert json.dumps(TOOLS[0], indent=4) + "\n\n<|eot_id|>" in llama3
    assert '{"name": "add", "parameters": {"a": 1}}<|eot_id|>' in llama3


@pytest.mark.parametrize("name", sorted(chat.NAMED))
def test_a_named_template_renders_tools_as_transformers_does_with_it(model_dir, name):
    t = tok(model_dir, name)
    ours = templates.Renderer.of(t).render(TOOL_CONV, tools=TOOLS)
    assert ours == t.apply_chat_template(TOOL_CONV, tools=TOOLS, tokenize=False)  # the saved tokenizer writes the same


def test_a_model_template_that_writes_tools_is_used_as_it_is(model_dir):
    t = tok(model_dir, "auto")
    t.chat_template = OWN_TOOLS
    r = templates.Renderer.of(t)
    assert r.own_tools and r.own_calls
    assert r.render(TOOL_CONV, tools=TOOLS) == t.apply_chat_template(TOOL_CONV, tools=TOOLS, tokenize=False)
    row = templates.encode(TOOL_CONV, t, 10_000, TOOLS)
    learned = t.decode([i for i, x in zip(row["input_ids"], row["labels"]) if x != tokens.IGNORE])
    assert '<call>{"name": "add", "arguments": {"a": 1}}</call>' in learned  # the call is an answer, learned


def test_a_model_template_without_tools_gets_llamafactorys_default_format(model_dir):
    t = tok(model_dir, "auto")  # the demo model's template knows no tools
    r = templates.Renderer.of(t)
    assert not r.own_tools and not r.own_calls
    text = r.render(TOOL_CONV, tools=TOOLS)
    assert text.startswith("<|system|>\nYou have access to the following tools:\n> Tool Name: add\n")
    row = templates.encode(TOOL_CONV, t, 10_000, TOOLS)
    learned = t.decode([i for i, x in zip(row["input_ids"], row["labels"]) if x != tokens.IGNORE])
    assert 'Action: add\nAction Input: {"a": 1}' in learned and "It is 1." in learned
    assert "You have access" not in learned


def test_function_call_and_observation_turns_become_tool_calls_and_tool_results():
    src = DatasetSource(name="t", load_from="file", formatting="sharegpt", columns={"tools": "tools"})
    record = {"conversations": [{"from": "human", "value": "Add one."},
                                {"from": "function_call", "value": json.dumps({"name": "add", "arguments": {"a": 1}})},
                                {"from": "observation", "value": "1"}, {"from": "gpt", "value": "It is 1."}],
              "tools": json.dumps([TOOLS[0]["function"]])}
    c = convert.chat_of(record, src)
    assert c.messages == TOOL_CONV and c.tools == TOOLS  # a bare function description is wrapped as transformers does
    bad = {**record, "conversations": [record["conversations"][0], {"from": "function_call", "value": "add(1)"}]}
    with pytest.raises(ValueError, match="function call"):
        convert.chat_of(bad, src)


# --- LLaMA-Factory's template names: the text each writes, from its definitions (template.py of 0.9.5) ------------
# A system prompt and two turns; bos "<s>", eos "</s>".  Each string is LLaMA-Factory's slots put together by its
# rules (turn 0: prefix, the system format, the user format; a Llama2Template fuses the system into the first user
# turn), written out by hand from the definitions; benchmarks/lf_templates.py runs its code on its demo data.
_S, _Q1, _A1, _Q2, _A2 = "S", "Q1", "A1", "Q2", "A2"
CONV5 = [{"role": "system", "content": _S}, {"role": "user", "content": _Q1}, {"role": "assistant", "content": _A1},
         {"role": "user", "content": _Q2}, {"role": "assistant", "content": _A2}]
_IM = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n{t}A1<|im_end|>\n" \
      "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n{t}A2<|im_end|>\n"
_GEMMA = ("<s><start_of_turn>user\nS\n\nQ1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
          "<start_of_turn>user\nQ2<end_of_turn>\n<start_of_turn>model\nA2<end_of_turn>\n")
LF_TEXT = {
    "default": "System: S</s>\nHuman: Q1</s>\nAssistant:A1</s>\nHuman: Q2</s>\nAssistant:A2</s>\n",
    "empty": "SQ1A1Q2A2",
    "alpaca": "S### Instruction:\nQ1\n\n### Response:\nA1</s>\n\n### Instruction:\nQ2\n\n### Response:\nA2</s>\n\n",
    "vicuna": "SUSER: Q1 ASSISTANT:A1</s>USER: Q2 ASSISTANT:A2</s>",
    "chatml": _IM.format(t=""), "qwen": _IM.format(t=""), "qwen3_nothink": _IM.format(t=""),
    "smollm": _IM.format(t=""), "smollm2": _IM.format(t=""), "yi": _IM.format(t=""),
    "qwen3": _IM.format(t="<think>\n\n</think>\n\n"),
    "qwen3_vl_nothink": _IM.format(t=""), "qwen3_vl": _IM.format(t="<think>\n\n</think>\n\n"),  # the text of qwen3
    "llama2": "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nQ1 [/INST]A1</s><s>[INST] Q2 [/INST]A2</s>",
    "llama3": "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
              "Q1<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|><|start_header_id|>user"
              "<|end_header_id|>\n\nQ2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA2<|eot_id|>",
    "mistral": "<s>[INST] S\n\nQ1[/INST] A1</s>[INST] Q2[/INST] A2</s>",
    "ministral": "<s>[INST]S\n\nQ1[/INST]A1</s>[INST]Q2[/INST]A2</s>",
    "gemma": _GEMMA, "gemma3": _GEMMA,
    "phi": "<|system|>\nS<|end|>\n<|user|>\nQ1<|end|>\n<|assistant|>\nA1<|end|>\n<|user|>\nQ2<|end|>\n<|assistant|>\n"
           "A2<|end|>\n",
    "phi4": "<|im_start|>system<|im_sep|>S<|im_end|><|im_start|>user<|im_sep|>Q1<|im_end|><|im_start|>assistant"
            "<|im_sep|>A1<|im_end|><|im_start|>user<|im_sep|>Q2<|im_end|><|im_start|>assistant<|im_sep|>A2<|im_end|>",
    "granite3": "<|start_of_role|>system<|end_of_role|>S<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Q1"
                "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>A1<|end_of_text|>\n<|start_of_role|>user"
                "<|end_of_role|>Q2<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>A2<|end_of_text|>\n",
    "starchat": "<|system|>\nS<|end|>\n<|user|>\nQ1<|end|>\n<|assistant|>A1<|end|>\n<|user|>\nQ2<|end|>\n<|assistant|>"
                "A2<|end|>\n",
    "zephyr": "<|system|>\nS</s><|user|>\nQ1</s><|assistant|>\nA1</s><|user|>\nQ2</s><|assistant|>\nA2</s>",
    "deepseek": "<s>S\n\nUser: Q1\n\nAssistant:A1</s>User: Q2\n\nAssistant:A2</s>",
}
# its default system prompts, written when the data has none (with the system format of the template)
LF_DEFAULT_SYSTEM = {"qwen": "<|im_start|>system\n" + chat.QWEN_SYSTEM + "<|im_end|>\n",
                     "alpaca": chat.ALPACA_SYSTEM + "### Instruction:", "vicuna": "A chat between a curious user",
                     "smollm2": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face.",
                     "zephyr": "<|system|>\nYou are Zephyr, a helpful assistant.</s>"}


def test_every_llamafactory_name_written_here_is_one_of_its_names():
    from zeroboard.job import lfkeys

    assert set(LF_TEXT) == set(chat.NAMED) - {"plain"} and set(LF_TEXT) <= lfkeys.LF_TEMPLATES
    assert set(typing.get_args(spec.Template)) == {"auto", "chat", *chat.NAMED}


@pytest.mark.parametrize("name", sorted(LF_TEXT))
def test_a_llamafactory_name_writes_its_text(name):
    special = {"eos_token": "</s>", "bos_token": "<s>"}
    r = chat.Renderer.for_template(chat.NAMED[name].jinja, special)
    assert r.render(CONV5) == LF_TEXT[name]
    alone = r.render(CONV5[1:])
    if name in LF_DEFAULT_SYSTEM:
        assert LF_DEFAULT_SYSTEM[name] in alone
    else:  # no system prompt, or an empty one: no system text at all
        assert alone == r.render([{"role": "system", "content": ""}, *CONV5[1:]]) and len(alone) < len(LF_TEXT[name])


def test_a_record_with_an_empty_tools_list_gets_an_empty_system_turn_as_in_llamafactory():
    """Its templates write the system turn when the record has tools, even "[]" (LLaMA-Factory's glaive demo data)."""
    special = {"eos_token": "</s>", "bos_token": "<s>"}
    r = chat.Renderer.for_template(chat.NAMED["default"].jinja, special)
    turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    assert r.render(turn, tools=[]) == "System: </s>\nHuman: Hi</s>\nAssistant:Yo</s>\n"
    assert r.render(turn) == "Human: Hi</s>\nAssistant:Yo</s>\n"
    src = DatasetSource(name="t", load_from="file", formatting="sharegpt", columns={"tools": "tools"})
    record = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}], "tools": "[]"}
    assert convert.chat_of(record, src).tools == []


def test_a_reasoning_template_learns_an_empty_thought_tokenized_apart(model_dir):
    t = tok(model_dir, "qwen3")
    conv = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"},
            {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "<think>\nwhy\n</think>\n\nB"}]
    lay = templates.Renderer.of(t).layout(conv)
    first = lay.answers[0][0]
    assert lay.text[first:].startswith(chat.EMPTY_THOUGHT + "A") and first + len(chat.EMPTY_THOUGHT) in lay.cuts
    assert lay.text.count("<think>") == 2  # the second answer has its own thought: none added
    row = templates.encode(conv, t, 10_000)
    learned = t.decode([i for i, x in zip(row["input_ids"], row["labels"]) if x != tokens.IGNORE])
    assert learned.startswith(chat.EMPTY_THOUGHT + "A<|im_end|>")
