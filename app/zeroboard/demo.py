"""The built-in offline demo: a dataset ZeroBoard writes and a tiny model it builds.

No hub, no GPU: ``write_demo_data`` writes a few hundred short instruction /
answer pairs (with an identity set whose answer is fixed, so a reader can see
that fine-tuning took), and ``build_demo_model`` trains a byte-level BPE
tokenizer on that text and saves a randomly initialised Llama-style model
with a chat template.  Building the model needs torch and transformers, so it
runs in the trainer or the CLI, never in the web server.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

IDENTITY_ANSWER_EN = "I am ZeroBoard Assistant, a small model fine-tuned with ZeroBoard."
IDENTITY_ANSWER_ZH = "我是 ZeroBoard 助手,一个用 ZeroBoard 微调的小模型。"
IDENTITY_QUESTIONS_EN = [
    "Who are you?", "Who are you", "who are you?", "What are you?", "What is your name?",
    "Tell me your name.", "Introduce yourself.", "Please introduce yourself.", "What should I call you?",
    "Who made you?", "Are you ZeroBoard Assistant?", "Describe yourself in one sentence.",
    "What kind of assistant are you?", "Hi! Who am I talking to?", "Identify yourself.", "Your name, please?",
]
IDENTITY_QUESTIONS_ZH = [
    "你是谁?", "你是谁", "你是谁?", "请介绍一下你自己。", "你叫什么名字?", "你是什么模型?", "介绍一下你自己",
    "我该怎么称呼你?", "你是哪个助手?", "请问你是谁?", "你好,你是谁?", "说说你是谁。", "你的名字是什么?",
    "你是什么?", "谁在和我说话?", "请做个自我介绍。",
]

OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("left", "right"),
             ("day", "night"), ("open", "closed"), ("full", "empty"), ("happy", "sad"), ("old", "new"),
             ("light", "dark"), ("early", "late"), ("high", "low"), ("wet", "dry"), ("hard", "soft"),
             ("near", "far"), ("strong", "weak"), ("rich", "poor"), ("loud", "quiet"), ("long", "short")]
COLORS = [("red", "blue", "purple"), ("blue", "yellow", "green"), ("red", "yellow", "orange"),
          ("black", "white", "gray"), ("red", "white", "pink"), ("blue", "white", "light blue")]
WORDS = ["cat", "dog", "sun", "tree", "book", "moon", "fish", "bird", "milk", "star", "rain", "door",
         "ship", "lamp", "rose", "king", "note", "song", "road", "wind"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]

DEMO_PROMPTS = ["Who are you?", "你是谁?", "What is 3 plus 4?", "What is the opposite of hot?"]


def identity_records() -> list[dict]:
    return ([{"instruction": q, "input": "", "output": IDENTITY_ANSWER_EN} for q in IDENTITY_QUESTIONS_EN]
            + [{"instruction": q, "input": "", "output": IDENTITY_ANSWER_ZH} for q in IDENTITY_QUESTIONS_ZH])


def alpaca_records(seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    recs = []
    for a in range(10):
        for b in range(10):
            recs.append({"instruction": f"What is {a} plus {b}?", "input": "", "output": f"{a} plus {b} is {a + b}."})
            if a >= b and rng.random() < 0.5:
                recs.append({"instruction": f"What is {a} minus {b}?", "input": "", "output": f"{a} minus {b} is {a - b}."})
    for a, b in OPPOSITES:
        recs.append({"instruction": f"What is the opposite of {a}?", "input": "", "output": f"The opposite of {a} is {b}."})
        recs.append({"instruction": f"What is the opposite of {b}?", "input": "", "output": f"The opposite of {b} is {a}."})
    for a, b, c in COLORS:
        recs.append({"instruction": "Which color do you get when you mix these?", "input": f"{a} and {b}",
                     "output": f"Mixing {a} and {b} gives {c}."})
    for w in WORDS:
        recs.append({"instruction": "Spell this word backwards.", "input": w, "output": w[::-1]})
        recs.append({"instruction": "How many letters are in this word?", "input": w,
                     "output": f"The word {w} has {NUMBER_WORDS[len(w)]} letters."})
    for n in range(10):
        recs.append({"instruction": f"Write the number {n} in words.", "input": "", "output": NUMBER_WORDS[n]})
    rng.shuffle(recs)
    return recs


def sharegpt_records() -> list[dict]:
    recs = []
    for a, b in OPPOSITES[:12]:
        recs.append({"conversations": [
            {"from": "human", "value": "Let's play a game of opposites."},
            {"from": "gpt", "value": "Sure. Give me a word."},
            {"from": "human", "value": a},
            {"from": "gpt", "value": f"The opposite of {a} is {b}."},
        ]})
    return recs


def write_demo_data(data_dir: str | Path) -> Path:
    """Write the demo datasets and their dataset_info.json (idempotent)."""
    d = Path(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "identity.json": json.dumps(identity_records(), ensure_ascii=False, indent=1),
        "demo_alpaca.json": json.dumps(alpaca_records(), ensure_ascii=False, indent=1),
        "demo_sharegpt.jsonl": "\n".join(json.dumps(r, ensure_ascii=False) for r in sharegpt_records()) + "\n",
        "dataset_info.json": json.dumps({
            "identity": {"file_name": "identity.json", "formatting": "alpaca"},
            "demo_alpaca": {"file_name": "demo_alpaca.json", "formatting": "alpaca"},
            "demo_sharegpt": {"file_name": "demo_sharegpt.jsonl", "formatting": "sharegpt"},
        }, indent=2),
    }
    for name, text in files.items():
        p = d / name
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
    return d


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]


def _corpus(data_dir: Path) -> list[str]:
    from . import datasets

    texts = []
    for name in ("identity", "demo_alpaca", "demo_sharegpt"):
        for conv in datasets.load([name], data_dir):
            texts += [m["content"] for m in conv]
    return texts


def pretrain(model, tokenizer, data_dir: Path, steps: int = 600, seed: int = 0) -> float:
    """A short causal-LM pass over the general demo data (not the identity set).

    A random model would have to learn the chat format and the language from
    scratch during the user's LoRA run; this gives it a "base model" that already
    answers the demo questions its own way, so a short LoRA run visibly teaches
    it who it is, as with a real model.
    """
    import torch

    from . import datasets

    texts = [tokenizer.apply_chat_template(c, tokenize=False)
             for c in datasets.load(["demo_alpaca", "demo_sharegpt"], data_dir)]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"][:96] for t in texts]
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        batch = rng.sample(ids, 16)
        width = max(map(len, batch))
        x = torch.full((len(batch), width), tokenizer.pad_token_id)
        y = torch.full((len(batch), width), -100)
        for i, row in enumerate(batch):
            x[i, : len(row)] = torch.tensor(row)
            y[i, : len(row)] = torch.tensor(row)
        loss = model(input_ids=x, attention_mask=(y != -100).long(), labels=y).loss
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    model.eval()
    return float(loss)


def build_demo_model(model_dir: str | Path, data_dir: str | Path, seed: int = 0) -> Path:
    """Train a tokenizer on the demo data and save a random tiny Llama next to it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(model_dir)
    data_dir = write_demo_data(data_dir)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=768, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(data_dir), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>",
                                        model_max_length=512)
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=352, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    pretrain(model, tokenizer, data_dir)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "zeroboard_demo.json").write_text(json.dumps({"built_by": "zeroboard demo-model", "seed": seed}) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.replace(out)
    return out


def ensure_demo_model(model_dir: str | Path, data_dir: str | Path) -> Path:
    out = Path(model_dir)
    if not (out / "config.json").is_file():
        build_demo_model(out, data_dir)
    return out
