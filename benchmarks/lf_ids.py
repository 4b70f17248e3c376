"""Token ids, row by row, of ZeroBoard and LLaMA-Factory on the same LLaMA-Factory-style data (``data_prep.py --ids``).

The data is written fresh, as LLaMA-Factory's data/README.md describes it:
alpaca with system and history, sharegpt with custom tags, OpenAI-style
messages (sharegpt with role/content tags), tool calling (function_call and
observation turns, a tools column), samples longer than the cutoff, and the
plain alpaca rows as CSV, Parquet and a folder of JSON shards.

Each template both tools name is used with its model family's tokenizer: the
demo model's byte-level BPE with the template's marker tokens as special
tokens, and a begin-of-sequence token for the templates that write one, as
the real families' tokenizers have them.  ZeroBoard tokenizes through the
trainer's own path (``templates.apply``, ``dataprep.tokenized``); LLaMA-Factory
through its own (``run_lf_prep.py``, in its environment).  A row is identical
when its input_ids and its labels are.
"""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import tempfile
from pathlib import Path

SHARED = ["alpaca", "chatml", "gemma", "llama3", "mistral", "phi", "qwen"]  # named by both tools
BOS = {"llama3": "<|begin_of_text|>", "mistral": "<s>", "gemma": "<bos>"}
DATASETS = ["alpaca_system_history", "sharegpt_custom_tags", "openai_messages", "tool_calls", "over_cutoff",
            "plain_csv", "plain_parquet", "plain_folder"]
TOOLS = [{"name": "get_weather", "description": "The weather in a city today.",
          "parameters": {"type": "object", "properties": {
              "city": {"type": "string", "description": "the city"},
              "unit": {"type": "string", "description": "degrees", "enum": ["celsius", "fahrenheit"]}},
              "required": ["city"]}},
         {"type": "function", "function": {"name": "add", "description": "Add numbers.", "parameters": {
             "type": "object", "properties": {"numbers": {"type": "array", "description": "the numbers",
                                                          "items": {"type": "number"}}}, "required": ["numbers"]}}}]
CITIES = ["Paris", "Lima", "Oslo", "Cairo", "Hanoi", "Quito", "Perth", "Bern"]


def _words(rng: random.Random, lo: int, hi: int) -> str:
    syl = "ka lo mi ne ru sa te vo zi pa qu xe bi do fu ga hi ja ko le ma no pe ri so tu va we yo ze".split()
    return " ".join("".join(rng.choice(syl) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(lo, hi))
                    ).capitalize() + rng.choice([".", "?", "!"])


def _tool_row(rng: random.Random, i: int) -> dict:
    city = CITIES[i % len(CITIES)]
    call = {"name": "get_weather", "arguments": {"city": city}}
    if i % 3 == 2:  # two calls in one turn
        call = [call, {"name": "add", "arguments": {"numbers": [i, 2 * i]}}]
    turns = [{"from": "human", "value": f"What is the weather in {city}? {_words(rng, 2, 8)}"},
             {"from": "function_call", "value": json.dumps(call)},
             {"from": "observation", "value": json.dumps({"temperature": 10 + i, "sky": "clear"})},
             {"from": "gpt", "value": f"It is {10 + i} degrees and clear in {city}."}]
    if i % 2:
        turns += [{"from": "human", "value": _words(rng, 3, 9)}, {"from": "gpt", "value": _words(rng, 3, 12)}]
    row = {"conversations": turns, "tools": json.dumps(TOOLS if i % 4 else TOOLS[:1])}
    if i % 4 == 1:
        row["system"] = "You check the weather."
    return row


def write(d: Path, seed: int = 0) -> Path:
    """The benchmark's data folder: one dataset_info.json, every format."""
    rng = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    alpaca = [{"instruction": _words(rng, 3, 20), "input": _words(rng, 0, 12) if i % 3 else "",
               "output": _words(rng, 3, 30), "system": ["", "Answer briefly.", "You are a careful tutor."][i % 3],
               "history": [[_words(rng, 2, 10), _words(rng, 2, 14)] for _ in range(i % 3)]} for i in range(12)]
    sharegpt = []
    for i in range(10):
        chat = [{"speaker": "sys", "text": "Speak plainly."}] if i % 2 else []
        for _ in range(1 + i % 3):
            chat += [{"speaker": "asker", "text": _words(rng, 2, 15)}, {"speaker": "helper", "text": _words(rng, 2, 20)}]
        sharegpt.append({"chat": chat})
    openai = [{"messages": ([{"role": "system", "content": "You are terse."}] if i % 2 == 0 else []) + [
        {"role": "user", "content": _words(rng, 2, 15)}, {"role": "assistant", "content": _words(rng, 2, 20)}]}
        for i in range(8)]
    tools = [_tool_row(rng, i) for i in range(8)]
    long = []  # over the cutoff: a long prompt, a long answer, both, and long multi-turn chats
    for i, (p, r) in enumerate([(1800, 20), (20, 1800), (1000, 1000), (600, 120), (120, 600), (1400, 400)] * 2):
        long.append({"instruction": _words(rng, p // 2, p), "input": "", "output": _words(rng, r // 2, r), "system": "",
                     "history": [[_words(rng, 40, 120), _words(rng, 40, 120)]] if i >= 6 else []})
    plain = [{"instruction": _words(rng, 3, 12), "input": _words(rng, 0, 6) if i % 2 else "",
              "output": _words(rng, 2, 10)} for i in range(9)]
    (d / "alpaca.json").write_text(json.dumps(alpaca, indent=1))
    (d / "sharegpt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sharegpt))
    (d / "openai.json").write_text(json.dumps(openai))
    (d / "tools.json").write_text(json.dumps(tools))
    (d / "long.json").write_text(json.dumps(long))
    with (d / "plain.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["instruction", "input", "output"])
        w.writeheader()
        w.writerows(plain)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(plain), d / "plain.parquet")
    (d / "folder").mkdir(exist_ok=True)
    for k in range(3):
        (d / "folder" / f"part-{k}.json").write_text(json.dumps(plain[3 * k:3 * k + 3]))
    alpaca_cols = {"prompt": "instruction", "query": "input", "response": "output", "system": "system",
                   "history": "history"}
    (d / "dataset_info.json").write_text(json.dumps({
        "alpaca_system_history": {"file_name": "alpaca.json", "columns": alpaca_cols},
        "sharegpt_custom_tags": {"file_name": "sharegpt.jsonl", "formatting": "sharegpt", "columns": {"messages": "chat"},
                                 "tags": {"role_tag": "speaker", "content_tag": "text", "user_tag": "asker",
                                          "assistant_tag": "helper", "system_tag": "sys"}},
        "openai_messages": {"file_name": "openai.json", "formatting": "sharegpt", "columns": {"messages": "messages"},
                            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                     "assistant_tag": "assistant", "system_tag": "system"}},
        "tool_calls": {"file_name": "tools.json", "formatting": "sharegpt",
                       "columns": {"messages": "conversations", "system": "system", "tools": "tools"}},
        "over_cutoff": {"file_name": "long.json", "columns": alpaca_cols},
        "plain_csv": {"file_name": "plain.csv"}, "plain_parquet": {"file_name": "plain.parquet"},
        "plain_folder": {"file_name": "folder"}}, indent=1))
    return d


def family_tokenizer(base: Path, name: str, out: Path) -> Path:
    """The demo tokenizer as the template's model family has it: its marker tokens special, its bos token."""
    from transformers import AutoTokenizer

    from zeroboard.data import chat

    tok = AutoTokenizer.from_pretrained(base)
    extra = [t for t in (*chat.NAMED[name].tokens, BOS.get(name)) if t and t not in tok.get_vocab()]
    if extra:
        tok.add_special_tokens({"additional_special_tokens": extra}, replace_extra_special_tokens=False)
    if name in BOS:
        tok.bos_token = BOS[name]
    tok.save_pretrained(out)
    return out


def zeroboard_rows(data_dir: Path, model: Path, name: str, cutoff: int, cache: Path, truncation: str = "proportional"
                   ) -> dict[str, dict[int, dict]]:
    """ZeroBoard's rows of each dataset, by record, through the trainer's own path."""
    from transformers import AutoTokenizer

    from zeroboard.data.formats import DataError
    from zeroboard.job import spec
    from zeroboard.training import dataprep, templates

    os.environ[dataprep.CACHE_ENV] = str(cache)
    tok = AutoTokenizer.from_pretrained(model)
    templates.apply(tok, name)
    job = spec.JobSpec(model_name_or_path=str(model), dataset_dir=str(data_dir), template=name, cutoff_len=cutoff,
                       truncation=truncation)
    out = {}
    for ds in DATASETS:
        try:
            rows = dataprep.tokenized([ds], job, tok).dataset
        except DataError:  # every record skipped: no rows
            out[ds] = {}
            continue
        out[ds] = {r["record"]: {"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows}
    return out


def lf_rows(lf_python: Path, script: Path, data_dir: Path, model: Path, name: str, cutoff: int) -> dict[str, list]:
    """LLaMA-Factory's rows of each dataset, in the order of its records, from its own pipeline."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        subprocess.run([str(lf_python), str(script), "--data-dir", str(data_dir), "--dataset", ",".join(DATASETS),
                        "--model", str(model), "--template", name, "--cutoff-len", str(cutoff), "--ids", f.name],
                       check=True, capture_output=True, text=True)
        out: dict[str, list] = {ds: [] for ds in DATASETS}
        for line in Path(f.name).read_text().splitlines():
            r = json.loads(line)
            out[r["dataset"]].append({"input_ids": r["input_ids"], "labels": r["labels"]})
    return out


def lf_order(data_dir: Path, records: dict[str, int]) -> dict[str, list[int]]:
    """ZeroBoard's record number of each of LLaMA-Factory's rows: the same, except in a folder, which LLaMA-Factory
    reads in ``os.listdir`` order where ZeroBoard reads it in name order."""
    order = {ds: list(range(n)) for ds, n in records.items()}
    shards = sorted((data_dir / "folder").iterdir())
    first = dict(zip(shards, [sum(len(json.loads(p.read_text())) for p in shards[:k]) for k in range(len(shards))]))
    order["plain_folder"] = [first[data_dir / "folder" / name] + j for name in os.listdir(data_dir / "folder")
                             for j in range(len(json.loads((data_dir / "folder" / name).read_text())))]
    return order


def compare(zb: dict[str, dict[int, dict]], lf: dict[str, list], order: dict[str, list[int]]) -> dict:
    """Rows, identical rows and the first differing row (dataset, record, first differing token) of one template."""
    out = {"rows": 0, "identical": 0, "first_difference": None, "by_dataset": {}}
    for ds in DATASETS:
        same = 0
        by_record = dict(zip(order[ds], lf[ds]))
        for i in range(len(order[ds])):
            z, lrow = zb[ds].get(i), by_record.get(i)
            if z is not None and z == lrow:
                same += 1
            elif out["first_difference"] is None:
                out["first_difference"] = {"dataset": ds, "record": i, **_where(z, lrow)}
        out["rows"] += len(order[ds])
        out["identical"] += same
        out["by_dataset"][ds] = [same, len(order[ds])]
    return out


def _where(z, lrow) -> dict:
    if z is None or lrow is None:
        return {"missing_in": "zeroboard" if z is None else "llamafactory"}
    for key in ("input_ids", "labels"):
        a, b = z[key], lrow[key]
        if a != b:
            k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return {"field": key, "position": k, "lengths": [len(a), len(b)], "zeroboard": a[k:k + 8],
                    "llamafactory": b[k:k + 8]}
    return {}
