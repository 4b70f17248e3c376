"""Datasets written the way LLaMA-Factory's data/README.md documents them: one folder, one dataset_info.json.

Each entry is a row of issue 14's table (the system prompts are distinct words, so a test can find them in what
the trainer renders).  Parquet is written with pyarrow, as users make it; the rest with the standard library.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

SYSTEM = {"lf_alpaca_cols": "SYSALPACA be brief", "lf_sharegpt_cols": "SYSSHAREGPT answer kindly",
          "lf_openai": "SYSOPENAI you are terse"}

ALPACA = [{"question": f"What is {a} plus {b}?", "context": "Answer in words." if a % 2 else "",
           "answer": f"{a} plus {b} is {a + b}.", "sys_prompt": SYSTEM["lf_alpaca_cols"]} for a in range(4) for b in range(3)]
SHAREGPT = [{"dialog": [{"from": "human", "value": f"Say {w}."}, {"from": "gpt", "value": f"{w}!"},
                        {"from": "human", "value": f"Again, {w}."}, {"from": "gpt", "value": f"{w}, {w}!"}],
             "sysmsg": SYSTEM["lf_sharegpt_cols"]} for w in ("hello", "yes", "blue", "seven", "north", "tea")]
CUSTOM_TAGS = [{"chat": [{"speaker": "asker", "text": f"Spell {w} backwards."}, {"speaker": "helper", "text": w[::-1]}]}
               for w in ("cat", "dog", "sun", "tree", "book", "moon")]
OPENAI = [{"messages": [{"role": "system", "content": SYSTEM["lf_openai"]}, {"role": "user", "content": f"Double {n}."},
                        {"role": "assistant", "content": str(2 * n)}]} for n in range(8)]
PLAIN = [{"instruction": f"Name a color number {n}.", "input": "", "output": ["red", "green", "blue"][n % 3]}
         for n in range(9)]

INFO = {
    "lf_alpaca_cols": {"file_name": "alpaca_cols.json",
                       "columns": {"prompt": "question", "query": "context", "response": "answer", "system": "sys_prompt"}},
    "lf_sharegpt_cols": {"file_name": "sharegpt_cols.jsonl", "formatting": "sharegpt",
                         "columns": {"messages": "dialog", "system": "sysmsg"}},
    "lf_custom_tags": {"file_name": "custom_tags.json", "formatting": "sharegpt", "columns": {"messages": "chat"},
                       "tags": {"role_tag": "speaker", "content_tag": "text", "user_tag": "asker", "assistant_tag": "helper"}},
    "lf_csv": {"file_name": "plain.csv"},
    "lf_parquet": {"file_name": "plain.parquet"},
    "lf_folder": {"file_name": "folder"},
    "lf_openai": {"file_name": "openai.json", "formatting": "sharegpt", "columns": {"messages": "messages"},
                  "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
                           "system_tag": "system"}},
}
TABLE = ["lf_alpaca_cols", "lf_sharegpt_cols", "lf_custom_tags", "lf_csv", "lf_parquet", "lf_folder"]  # issue 14's rows


def write(d: Path, parquet: bool = True) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "alpaca_cols.json").write_text(json.dumps(ALPACA, indent=1))
    (d / "sharegpt_cols.jsonl").write_text("".join(json.dumps(r) + "\n" for r in SHAREGPT))
    (d / "custom_tags.json").write_text(json.dumps(CUSTOM_TAGS))
    (d / "openai.json").write_text(json.dumps(OPENAI))
    with (d / "plain.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["instruction", "input", "output"])
        w.writeheader()
        w.writerows(PLAIN)
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(PLAIN), d / "plain.parquet")
    (d / "folder").mkdir(exist_ok=True)
    for k in range(3):
        (d / "folder" / f"part-{k}.json").write_text(json.dumps(PLAIN[3 * k:3 * k + 3]))
    (d / "dataset_info.json").write_text(json.dumps(INFO, indent=2))
    return d
