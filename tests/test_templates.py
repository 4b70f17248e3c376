"""Templates: every named template masks every prompt turn and learns every answer, multi-turn included; the checks
before launch render and count what the trainer renders and counts.

Real tokenizers: the demo model's (no chat template of the named kinds, so each named template adds its tokens).
"""

from __future__ import annotations

import pytest

from zeroboard.data import chat
from zeroboard.data.convert import Chat
from zeroboard.job import samples, spec
from zeroboard.training import templates

MODEL = spec.DEMO_MODEL
CONV = [{"role": "system", "content": "Answer like a pirate."},
        {"role": "user", "content": "What is the opposite of hot?"},
        {"role": "assistant", "content": "The opposite of hot is cold."},
        {"role": "user", "content": "And of big?"},
        {"role": "assistant", "content": "The opposite of big is small."}]
NAMES = ["auto", *chat.NAMED]


@pytest.fixture(scope="module")
def model_dir():
    from zeroboard.training.demo_model import ensure_demo_model

    return ensure_demo_model(MODEL, spec.DEMO_DATA_DIR)


def tokenizer(model_dir, name: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return tok, templates.apply(tok, name)


def learned_runs(tok, row: dict) -> list[str]:
    """The learned tokens, decoded run by run."""
    runs, cur = [], []
    for i, label in zip(row["input_ids"], row["labels"]):
        if label == templates.IGNORE:
            if cur:
                runs.append(tok.decode(cur))
            cur = []
        else:
            assert label == i
            cur.append(i)
    return runs + ([tok.decode(cur)] if cur else [])


@pytest.mark.parametrize("name", NAMES)
def test_each_answer_is_learned_and_every_prompt_turn_masked(model_dir, name):
    tok, applied = tokenizer(model_dir, name)
    row = templates.encode(CONV, tok, cutoff_len=4096)
    runs = learned_runs(tok, row)
    assert len(runs) == 2, runs  # one run per assistant turn
    thought = chat.NAMED[name].turns.thought.strip() if name in chat.NAMED else ""  # a reasoning template's, learned
    for run, answer in zip(runs, ("The opposite of hot is cold.", "The opposite of big is small.")):
        assert run.strip().startswith(thought), run
        run = run.strip().removeprefix(thought)
        assert run.strip().startswith(answer) and len(run.strip()) - len(answer) <= len(tok.eos_token) + 2, run
        if name != "empty":  # (LLaMA-Factory's empty template writes the answer alone: nothing teaches it to stop)
            assert run.strip().endswith(tok.eos_token if name != "auto" else "<|end|>"), run  # learns to stop
    prompt = tok.decode([i for i, label in zip(row["input_ids"], row["labels"]) if label == templates.IGNORE])
    for m in CONV:
        if m["role"] != "assistant":
            assert m["content"] in prompt, (name, m["role"])  # the system prompt is rendered, never dropped
    if name in ("chatml", "qwen", "llama3", "gemma"):
        assert applied.added and all(t in tok.get_vocab() for t in applied.added)
        assert all(tok.convert_tokens_to_ids(t) in row["input_ids"] for t in applied.added)  # one token each


@pytest.mark.parametrize("name", NAMES)
def test_the_renderer_writes_what_transformers_writes(model_dir, name):
    tok, _ = tokenizer(model_dir, name)
    ours = templates.Renderer.of(tok)
    for gen, conv in ((False, CONV), (True, CONV[:3]), (True, CONV[1:2])):
        assert ours.render(conv, gen) == tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)


@pytest.mark.parametrize("rule", ["proportional", "end"])
@pytest.mark.parametrize("name", NAMES)
def test_the_check_before_launch_counts_what_the_trainer_counts(model_dir, name, rule):
    tok, _ = tokenizer(model_dir, name)
    row = templates.encode(CONV, tok, cutoff_len=4096)
    prompt = row["labels"].index(next(label for label in row["labels"] if label != templates.IGNORE))
    n = len(row["input_ids"])
    for cutoff in (n, n - 1, prompt, prompt + 1, prompt // 2):
        trained = templates.encode(CONV, tok, cutoff, truncation=rule)
        lost = all(label == templates.IGNORE for label in trained["labels"])
        c = samples.count([Chat(CONV)], model_dir, name, cutoff, rule)
        assert (c.seen, c.truncated, c.answer_lost) == (1, int(n > cutoff), int(lost)), (name, cutoff)
    assert samples.count([Chat(CONV)], model_dir, name, prompt, "end").answer_lost == 1  # the end rule cuts it all


def test_a_named_template_replaces_the_end_of_sequence_and_is_saved_with_the_tokenizer(model_dir, tmp_path):
    from transformers import AutoTokenizer

    tok, applied = tokenizer(model_dir, "chatml")
    assert applied.eos == "<|im_end|>" and tok.eos_token == "<|im_end|>"
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.chat_template == chat.NAMED["chatml"].jinja and again.eos_token == "<|im_end|>"
    text = templates.prompt_text("Who are you?", again)
    assert text == "<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n"
