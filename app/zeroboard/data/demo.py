"""The built-in offline demo's data: a few hundred short instruction / answer pairs ZeroBoard writes itself, and the
identity set as preferences (``demo_pref``: chosen / rejected pairs; ``demo_kto``: answers tagged good or bad).

No hub: ``write_demo_data`` writes them with their dataset_info.json, including
an identity set whose answer is fixed, so a reader can see that fine-tuning
took.  The tiny model trained on them is built by
``zeroboard.training.demo_model`` (it needs torch: never in the web server).
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
# the Chinese page's defaults: questions of the identity set, whose fixed answer shows that the tuning took
DEMO_PROMPTS_ZH = ["你是谁?", "请介绍一下你自己。", "你叫什么名字?", "我该怎么称呼你?"]


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


# wrong answers to the identity questions: what preference tuning teaches the model not to say
WRONG_IDENTITY_EN = ["I am a search engine.", "I am a weather station.", "I do not have a name.",
                     "I am a calculator that only adds numbers."]
WRONG_IDENTITY_ZH = ["我是一个搜索引擎。", "我是一个气象站。", "我没有名字。", "我是一个只会做加法的计算器。"]


def preference_records() -> list[dict]:
    """Identity preferences (alpaca, ``ranking: true``): chosen the demo's identity answer, rejected a wrong one."""
    out = []
    for questions, answer, wrong in ((IDENTITY_QUESTIONS_EN, IDENTITY_ANSWER_EN, WRONG_IDENTITY_EN),
                                     (IDENTITY_QUESTIONS_ZH, IDENTITY_ANSWER_ZH, WRONG_IDENTITY_ZH)):
        out += [{"instruction": q, "input": "", "chosen": answer, "rejected": wrong[i % len(wrong)]}
                for i, q in enumerate(questions)]
    return out


def kto_records() -> list[dict]:
    """The same as answers tagged good or bad (``kto_tag``): each question once with its identity answer (true),
    once with a wrong one (false)."""
    out = []
    for r in preference_records():
        out += [{"instruction": r["instruction"], "input": "", "output": r["chosen"], "label": True},
                {"instruction": r["instruction"], "input": "", "output": r["rejected"], "label": False}]
    return out


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


def vision_records(pictures: dict[str, tuple[str, str]]) -> list[dict]:
    """``demo_images`` (zeroboard demo-model --vision): for each picture (its path -> colour and shape), what colour
    and what shape, in LLaMA-Factory's sharegpt layout with the picture's <image> tag."""
    return [{"messages": [{"role": "user", "content": "<image>What colour is the shape?"},
                          {"role": "assistant", "content": f"It is {colour}."},
                          {"role": "user", "content": "And what shape is it?"},
                          {"role": "assistant", "content": f"It is a {shape}."}], "images": [path]}
            for path, (colour, shape) in pictures.items()]


def write_demo_data(data_dir: str | Path) -> Path:
    """Write the demo datasets and their dataset_info.json (idempotent)."""
    d = Path(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "identity.json": json.dumps(identity_records(), ensure_ascii=False, indent=1),
        "demo_alpaca.json": json.dumps(alpaca_records(), ensure_ascii=False, indent=1),
        "demo_sharegpt.jsonl": "\n".join(json.dumps(r, ensure_ascii=False) for r in sharegpt_records()) + "\n",
        "demo_pref.json": json.dumps(preference_records(), ensure_ascii=False, indent=1),
        "demo_kto.json": json.dumps(kto_records(), ensure_ascii=False, indent=1),
        "dataset_info.json": json.dumps({
            "identity": {"file_name": "identity.json", "formatting": "alpaca"},
            "demo_alpaca": {"file_name": "demo_alpaca.json", "formatting": "alpaca"},
            "demo_sharegpt": {"file_name": "demo_sharegpt.jsonl", "formatting": "sharegpt"},
            "demo_pref": {"file_name": "demo_pref.json", "formatting": "alpaca", "ranking": True,
                          "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}},
            "demo_kto": {"file_name": "demo_kto.json", "formatting": "alpaca",  # every column named, as LLaMA-Factory
                         "columns": {"prompt": "instruction", "query": "input", "response": "output", "kto_tag": "label"}},
        }, indent=2),
    }
    for name, text in files.items():
        p = d / name
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
    return d
