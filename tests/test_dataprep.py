"""Data preparation through the datasets library: every format of the fixtures, the cache, the ranks, the splits,
skipped records, packing over the memory-mapped rows, and `zeroboard dataset --json`.

Real components: the datasets library, the demo model's tokenizer, the CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lf_fixtures as lf
from zeroboard.data.formats import DataError
from zeroboard.job import spec
from zeroboard.training import dataprep, packing, templates

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return lf.write(tmp_path_factory.mktemp("lf") / "data")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(dataprep.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    return tmp_path / "cache"


def tok(name: str = "chatml"):
    from transformers import AutoTokenizer

    from zeroboard.training.demo_model import ensure_demo_model

    t = AutoTokenizer.from_pretrained(ensure_demo_model(spec.DEMO_MODEL, spec.DEMO_DATA_DIR))
    templates.apply(t, name)
    return t


def job(data: Path, names: list[str], **kw) -> spec.JobSpec:
    return spec.JobSpec(dataset_dir=str(data), dataset=names, cutoff_len=kw.pop("cutoff_len", 256), **kw)


def texts(tk, ds) -> list[str]:
    return [tk.decode(r["input_ids"]) for r in ds]


def test_every_format_of_the_table_is_tokenized_with_its_system_prompt(data):
    tk = tok()
    prepared = dataprep.prepare(job(data, [*lf.TABLE, "lf_openai"]), tk)
    counts = {s["name"]: 0 for s in prepared.info["sources"]}
    for r in prepared.full:
        counts[prepared.info["sources"][r["source"]]["name"]] += 1
    assert counts == {"lf_alpaca_cols": 12, "lf_sharegpt_cols": 6, "lf_custom_tags": 6, "lf_csv": 9, "lf_parquet": 9,
                      "lf_folder": 9, "lf_openai": 8}
    assert prepared.info["skipped"] == 0 and prepared.built
    by_source = {}
    for r, text in zip(prepared.full, texts(tk, prepared.full)):
        by_source.setdefault(prepared.info["sources"][r["source"]]["name"], text)
    for name, system in lf.SYSTEM.items():
        assert f"<|im_start|>system\n{system}<|im_end|>" in by_source[name]
    assert "<|im_start|>user\nSpell cat backwards.<|im_end|>\n<|im_start|>assistant\ntac<|im_end|>" in by_source["lf_custom_tags"]


def test_the_main_process_builds_once_and_other_ranks_only_read(data, cache):
    tk = tok()
    j = job(data, ["lf_csv"])
    with pytest.raises(RuntimeError, match="main process"):  # a rank that is not main never tokenizes
        dataprep.tokenized(["lf_csv"], j, tk, is_main=False)
    first = dataprep.tokenized(["lf_csv"], j, tk)
    other = dataprep.tokenized(["lf_csv"], j, tk, is_main=False)
    again = dataprep.tokenized(["lf_csv"], j, tk)
    assert first.built and not other.built and not again.built and first.path == other.path == again.path
    assert other.dataset["input_ids"] == first.dataset["input_ids"]
    assert dataprep.tokenized(["lf_csv"], j, tok("llama3")).path != first.path  # another template, another entry
    (data / "plain.csv").touch()  # the data changed (its time): tokenized again
    try:
        assert dataprep.tokenized(["lf_csv"], j, tk).built
    finally:
        os.utime(data / "plain.csv")


def test_val_size_and_eval_dataset(data):
    tk = tok()
    p = dataprep.prepare(job(data, ["lf_alpaca_cols"], val_size=0.25), tk)
    assert (len(p.train), len(p.eval)) == (9, 3)
    q = dataprep.prepare(job(data, ["lf_alpaca_cols"], val_size=0.25), tk)
    assert q.eval["record"] == p.eval["record"]  # the seed fixes the split on every rank
    assert len(dataprep.prepare(job(data, ["lf_alpaca_cols"], val_size=5), tk).eval) == 5
    e = dataprep.prepare(job(data, ["lf_alpaca_cols"], eval_dataset=["lf_csv"]), tk)
    assert (len(e.train), len(e.eval), e.eval_info["samples"]) == (12, 9, 9)


def test_records_llamafactory_skips_are_skipped_and_named_and_an_empty_answer_is_trained(tmp_path):
    recs = [{"instruction": f"q{i}", "output": f"a{i}"} for i in range(80)]
    recs[70]["output"] = ""  # trained as LLaMA-Factory trains it: the end of the answer only
    recs[75] = {"instruction": "q", "input": "", "answer": "wrong column"}  # no response: skipped
    (tmp_path / "d.json").write_text(json.dumps(recs))
    tk = tok()
    p = dataprep.prepare(spec.JobSpec(dataset_dir=str(tmp_path), dataset=[str(tmp_path / "d.json")]), tk)
    assert (p.info["samples"], p.info["skipped"]) == (79, 1)
    assert [(x["record"], x["message"]["key"]) for x in p.info["problems"]] == [(75, "data.skip_no_response")]
    empty = next(r for r in p.full if r["record"] == 70)
    learned = [i for i, label in zip(empty["input_ids"], empty["labels"]) if label != -100]
    assert learned and tk.decode(learned).strip() == tk.eos_token  # the template's end of the answer, learned


def test_a_record_past_max_record_bytes_is_skipped_and_named_by_the_trainer(tmp_path):
    """The checks refuse such a file before launch; the trainer reads the same limit (a file changed since, a hub
    dataset the checks do not read): the record is skipped and named, never tokenized."""
    recs = [{"instruction": f"q{i}", "output": f"a{i}"} for i in range(20)]
    recs[5]["output"] = "long " * 1000
    (tmp_path / "d.json").write_text(json.dumps(recs))
    job = spec.JobSpec(dataset_dir=str(tmp_path), dataset=[str(tmp_path / "d.json")], max_record_bytes=2048)
    p = dataprep.prepare(job, tok())
    assert (p.info["samples"], p.info["skipped"]) == (19, 1)
    assert [(x["record"], x["message"]["key"]) for x in p.info["problems"]] == [(5, "data.skipped_record")]


def test_the_cutoff_statistics(data):
    tk = tok()
    full = dataprep.prepare(job(data, ["lf_sharegpt_cols"], cutoff_len=4096), tk)
    lengths = sorted(full.full["full_length"])
    prompts = sorted(full.full["prompt_length"])
    cut = lengths[2]  # between the lengths: some samples are cut
    p = dataprep.prepare(job(data, ["lf_sharegpt_cols"], cutoff_len=cut), tk)
    assert p.info["truncated"] == sum(n > cut for n in lengths)
    assert max(p.full["length"]) == cut
    assert p.info["answer_lost"] == 0  # proportional: each cut sample keeps part of its answers
    with pytest.raises(DataError, match="cutoff_len"):  # cut at the end, every prompt fills the cutoff: nothing to learn
        dataprep.prepare(job(data, ["lf_sharegpt_cols"], cutoff_len=min(prompts), truncation="end"), tk)
    end = dataprep.prepare(job(data, ["lf_sharegpt_cols"], cutoff_len=cut, truncation="end"), tk)
    whole = {r["record"]: r["input_ids"] for r in full.full}
    assert end.paths != p.paths and all(r["input_ids"] == whole[r["record"]][:cut] for r in end.full)


def test_packing_reads_the_rows_it_packs_from_the_cache(data):
    tk = tok()
    p = dataprep.prepare(job(data, ["lf_alpaca_cols", "lf_sharegpt_cols"]), tk)
    rows = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in p.train]
    packed = packing.PackedRows(p.train, 128)
    assert [packed[i] for i in range(len(packed))] == packing.pack(rows, 128)
    assert len(packed) < len(rows) and all(len(packed[i]["input_ids"]) <= 128 for i in range(len(packed)))


def test_zeroboard_dataset_json_shows_the_samples_as_trained(data, tmp_path, cache):
    job_file = tmp_path / "job.yaml"
    job_file.write_text(spec.dump_yaml(job(data, lf.TABLE, template="chatml", val_size=0.1)))
    env = {**os.environ, dataprep.CACHE_ENV: str(cache), "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-m", "zeroboard.cli", "dataset", str(job_file), "--json", "-n", "60"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    s = report["stats"]
    assert (s["samples"], s["train_samples"], s["eval_samples"], s["skipped"]) == (51, 46, 5, 0)
    assert report["template"] == "chatml" and report["added_tokens"] == ["<|im_start|>", "<|im_end|>"]
    first = {}
    for smp in report["samples"]:
        first.setdefault(smp["dataset"], smp)
    assert set(first) == set(lf.TABLE)
    for name, system in lf.SYSTEM.items():
        if name in first:  # rendered in the prompt, not learned
            assert any(system in g["text"] and not g["learned"] for g in first[name]["segments"])
    learned = [g["text"] for g in first["lf_sharegpt_cols"]["segments"] if g["learned"]]
    assert learned == ["hello!<|im_end|>\n", "hello, hello!<|im_end|>\n"]


def seed_hub_cache(cache: Path, repo: str, rows: list[dict]) -> None:
    """The datasets cache as a download of hub dataset ``repo`` leaves it (no network here): a prepared Arrow table
    under ``namespace___name/default/0.0.0/<hash>/``, which the library loads offline."""
    from datasets.packaged_modules.json.json import Json

    src = cache / "src.jsonl"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    folder = repo.replace("/", "___")
    b = Json(cache_dir=str(cache), dataset_name=folder, data_files={"train": str(src)}, hash="0" * 16)
    b.download_and_prepare()
    built = Path(b.cache_dir)
    target = cache / folder / "default" / "0.0.0" / built.name
    target.parent.mkdir(parents=True)
    built.rename(target)
    (target / f"{folder}-train.arrow").rename(target / f"{repo.split('/')[1]}-train.arrow")


def test_a_hub_entry_loads_offline_from_the_datasets_cache(tmp_path, monkeypatch):
    import datasets

    hf = tmp_path / "hf-offline"
    seed_hub_cache(hf, "zb/tiny-sft", [{"q": f"Say {w}.", "a": w, "s": "SYSHUB"} for w in ("one", "two", "three")])
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", hf)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    (tmp_path / "dataset_info.json").write_text(json.dumps({
        "hub": {"hf_hub_url": "zb/tiny-sft", "columns": {"prompt": "q", "response": "a", "system": "s"}},
        "missing": {"hf_hub_url": "zb/not-downloaded"}}))
    tk = tok()
    p = dataprep.prepare(spec.JobSpec(dataset_dir=str(tmp_path), dataset=["hub"]), tk)
    assert p.info["samples"] == 3 and "<|im_start|>system\nSYSHUB<|im_end|>" in tk.decode(p.full[0]["input_ids"])
    with pytest.raises(DataError, match="zb/not-downloaded"):
        dataprep.prepare(spec.JobSpec(dataset_dir=str(tmp_path), dataset=["missing"]), tk)


def test_tokenizing_with_workers_leaves_os_environ_the_process_own(tmp_path):
    """datasets' map(num_proc=2) swaps os.environ for a copy; the tokenizing step puts the real mapping back, so that
    what its caller restores afterwards (here a MonkeyPatch, as a test's) reaches the process: nothing is left set."""
    import datasets

    real = os.environ
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZEROBOARD_PROBE", "set")
        with dataprep.environ_kept():
            doubled = datasets.Dataset.from_dict({"a": list(range(8))}).map(
                lambda b: {"a": [2 * x for x in b["a"]]}, batched=True, batch_size=2, num_proc=2,
                cache_file_name=str(tmp_path / "map.arrow"))
        assert doubled["a"] == [2 * x for x in range(8)]
        assert os.environ is real and os.environ["ZEROBOARD_PROBE"] == "set"
    assert "ZEROBOARD_PROBE" not in os.environ and "ZEROBOARD_PROBE" not in real
