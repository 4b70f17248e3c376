"""Reading data as LLaMA-Factory users have it, without the datasets library: entries, columns, tags, files.

Fixtures: tests/lf_fixtures.py, written as LLaMA-Factory's data/README.md documents the format.  This is the light
path the web server and the checks before launch use.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lf_fixtures as lf
from zeroboard import words
from zeroboard.data import convert, info, records
from zeroboard.data.formats import DataError
from zeroboard.job import checks, spec

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return lf.write(tmp_path_factory.mktemp("lf") / "data")


def first_chats(name: str, d: Path, n: int = 3) -> list[convert.Chat]:
    src = info.resolve(name, d)
    return convert.chats(src, records.head(src, n))


def test_each_entry_resolves_to_its_files_and_loader(data):
    kinds = {name: (info.resolve(name, data).kind, len(info.resolve(name, data).files)) for name in lf.INFO}
    assert kinds == {"lf_alpaca_cols": ("json", 1), "lf_sharegpt_cols": ("json", 1), "lf_custom_tags": ("json", 1),
                     "lf_csv": ("csv", 1), "lf_parquet": ("parquet", 1), "lf_folder": ("json", 3), "lf_openai": ("json", 1)}
    assert [p.name for p in info.resolve("lf_folder", data).files] == ["part-0.json", "part-1.json", "part-2.json"]
    assert info.resolve("lf_sharegpt_cols", data).formatting == "sharegpt"
    assert info.resolve("lf_csv", data).formatting == "alpaca"  # LLaMA-Factory's default


def test_alpaca_columns_are_read_and_the_system_prompt_kept(data):
    c = first_chats("lf_alpaca_cols", data)[1]
    assert c.messages == [{"role": "system", "content": lf.SYSTEM["lf_alpaca_cols"]},
                          {"role": "user", "content": "What is 0 plus 1?"}, {"role": "assistant", "content": "0 plus 1 is 1."}]
    query = first_chats("lf_alpaca_cols", data, 4)[3]  # a = 1: the query column joins the prompt, as instruction\ninput
    assert query.messages[1]["content"] == "What is 1 plus 0?\nAnswer in words."


def test_sharegpt_columns_keep_the_system_column_and_every_turn(data):
    c = first_chats("lf_sharegpt_cols", data)[0]
    assert c.messages[0] == {"role": "system", "content": lf.SYSTEM["lf_sharegpt_cols"]}
    assert [m["role"] for m in c.messages[1:]] == ["user", "assistant", "user", "assistant"]


def test_custom_tags_and_openai_messages(data):
    assert first_chats("lf_custom_tags", data)[0].messages == [{"role": "user", "content": "Spell cat backwards."},
                                                              {"role": "assistant", "content": "tac"}]
    c = first_chats("lf_openai", data)[0]
    assert c.messages[0] == {"role": "system", "content": lf.SYSTEM["lf_openai"]} and c.messages[2]["content"] == "0"


def test_csv_parquet_and_a_folder_read_the_same_records(data, monkeypatch):
    want = [[{"role": "user", "content": r["instruction"]}, {"role": "assistant", "content": r["output"]}] for r in lf.PLAIN[:5]]
    assert [c.messages for c in first_chats("lf_csv", data, 5)] == want
    assert [c.messages for c in first_chats("lf_folder", data, 5)] == want  # across the folder's first two files
    # the web server never loads pyarrow: with it absent, a parquet file is read by a short-lived subprocess
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert [c.messages for c in first_chats("lf_parquet", data, 5)] == want


def test_a_json_list_is_read_only_as_far_as_asked(tmp_path):
    good = ",".join(json.dumps({"instruction": f"q{i}", "output": f"a{i}"}) for i in range(3))
    (tmp_path / "big.json").write_text("[" + good + ', {"instruction": "broken' + " x" * 100_000)
    src = info.resolve(str(tmp_path / "big.json"), tmp_path)
    assert [r["output"] for r in records.head(src, 3)] == ["a0", "a1", "a2"]
    with pytest.raises(DataError, match="not valid JSON"):
        records.head(src, 4)


def test_bad_data_names_the_file_the_record_and_the_fix(data, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "c.json").write_text((data / "custom_tags.json").read_text())
    (d / "a.json").write_text((data / "alpaca_cols.json").read_text())
    (d / "dataset_info.json").write_text(json.dumps({"no_tags": {"file_name": "c.json", "formatting": "sharegpt",
                                                                 "columns": {"messages": "chat"}},
                                                     "no_cols": {"file_name": "a.json"}}))
    with pytest.raises(DataError) as e:
        first_chats("no_tags", d)
    assert "c.json record 0" in e.value.args[0] and "speaker, text" in e.value.args[0] and "role_tag" in e.value.args[0]
    (d / "dataset_info.json").write_text(json.dumps({"no_tags": {"file_name": "c.json", "formatting": "sharegpt",
                                                                 "columns": {"messages": "chat"},
                                                                 "tags": {"role_tag": "speaker", "content_tag": "text"}}}))
    # the keys are right, the speakers' names not yet: each record is skipped, as LLaMA-Factory skips it, and with
    # every record skipped the job is refused, naming the first and why
    skipped: list = []
    assert convert.chats(info.resolve("no_tags", d), records.head(info.resolve("no_tags", d), 3), skipped=skipped) == []
    assert [i for i, _ in skipped] == [0, 1, 2] and "'asker'" in skipped[0][1] and "tags" in skipped[0][1]
    job = spec.JobSpec(dataset_dir=str(d), dataset=["no_tags"], output_dir=str(tmp_path / "out"))
    msg = checks.validate(job, []).errors["dataset"]
    assert "c.json record 0" in msg and "'asker'" in msg and "6 skipped" in msg
    (d / "dataset_info.json").write_text(json.dumps({"no_cols": {"file_name": "a.json"}}))
    msg = checks.validate(dataclasses.replace(job, dataset=["no_cols"]), []).errors["dataset"]
    assert "a.json record 0" in msg and "no response" in msg and "columns.response" in msg


def test_unknown_keys_are_named_in_a_warning(tmp_path):
    d = lf.write(tmp_path / "d", parquet=False)
    entries = json.loads((d / "dataset_info.json").read_text())
    entries["lf_csv"] |= {"ranking": False, "lables": "x", "om_hub_url": "y"}
    (d / "dataset_info.json").write_text(json.dumps(entries))
    assert info.resolve("lf_csv", d).unknown == ["lables", "om_hub_url"]
    job = spec.JobSpec(dataset_dir=str(d), dataset=["lf_csv"], output_dir=str(tmp_path / "out"))
    r = checks.validate(job, [])
    assert "dataset" not in r.errors and "lables" in r.warnings["dataset"] and "om_hub_url" in r.warnings["dataset"]


@pytest.mark.parametrize("extra", [{"columns": {"images": "pics"}}, {"columns": {"videos": "v"}},
                                   {"columns": {"audios": "a"}}])
def test_data_for_other_training_is_refused_naming_the_keys(tmp_path, extra):
    """LLaMA-Factory refuses media columns in a text run; so does ZeroBoard, before launch."""
    d = lf.write(tmp_path / "d", parquet=False)
    entries = json.loads((d / "dataset_info.json").read_text())
    entries["lf_csv"] |= extra
    (d / "dataset_info.json").write_text(json.dumps(entries))
    job = spec.JobSpec(dataset_dir=str(d), dataset=["lf_csv"], output_dir=str(tmp_path / "out"))
    msg = checks.validate(job, []).errors["dataset"]
    named = [f"columns.{k}" for k in extra.get("columns", {})] or ["ranking"]
    assert all(k in msg for k in named) and "lf_csv" in msg


@pytest.mark.parametrize(("extra", "stage", "says"), [
    ({"ranking": True, "columns": {"chosen": "c", "rejected": "r"}}, "sft", "preference data"),
    ({"columns": {"kto_tag": "t"}}, "sft", "preference data"),
    ({}, "dpo", "ranking"),  # SFT data for a pairwise stage
    ({}, "kto", "kto_tag"),  # ... and for kto: no tags
    ({"ranking": True, "columns": {"chosen": "c", "rejected": "r"}}, "kto", "without kto tags"),
])
def test_each_stage_takes_its_own_data_naming_the_dataset(tmp_path, extra, stage, says):
    """SFT learns one answer per prompt, dpo/orpo/simpo pairs (ranking: true), kto tagged answers (kto_tag): another
    kind is refused before launch, naming the dataset and the fix."""
    d = lf.write(tmp_path / "d", parquet=False)
    entries = json.loads((d / "dataset_info.json").read_text())
    entries["lf_csv"] |= extra
    (d / "dataset_info.json").write_text(json.dumps(entries))
    job = spec.JobSpec(dataset_dir=str(d), dataset=["lf_csv"], output_dir=str(tmp_path / "out"), training_stage=stage)
    msg = checks.validate(job, []).errors["dataset"]
    assert says in msg and "lf_csv" in msg and "training_stage" in msg
    assert words.Msg(msg.key, **msg.values).say_in("zh") != msg


def test_chosen_and_rejected_without_ranking_are_named_unused(tmp_path):
    """LLaMA-Factory reads chosen / rejected only with ranking: true; without it the entry is SFT data, and the
    columns are named in a warning."""
    d = lf.write(tmp_path / "d", parquet=False)
    entries = json.loads((d / "dataset_info.json").read_text())
    entries["lf_csv"] |= {"columns": {**entries["lf_csv"].get("columns", {}), "chosen": "c", "rejected": "r"}}
    (d / "dataset_info.json").write_text(json.dumps(entries))
    assert info.resolve("lf_csv", d).preference == "" and "columns.chosen" in info.resolve("lf_csv", d).unknown


def test_a_bare_file_with_images_is_refused_at_its_record(tmp_path):
    data = tmp_path / "mm.json"
    data.write_text(json.dumps([{"instruction": "hi", "input": "", "output": "yo"}] * 3
                               + [{"instruction": "<image>what is it?", "input": "", "output": "a cat", "images": ["c.png"]}]))
    job = spec.JobSpec(dataset=[str(data)], output_dir=str(tmp_path / "out"))
    msg = checks.validate(job, []).errors["dataset"]
    assert "record 3" in msg and "images" in msg


def test_hub_entries_are_left_to_the_datasets_library_with_a_note(tmp_path):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"hub": {"hf_hub_url": "someone/sft-data", "subset": "en",
                                                                    "split": "validation"}}))
    src = info.resolve("hub", tmp_path)
    assert (src.load_from, src.hub, src.subset, src.split) == ("hf_hub", "someone/sft-data", "en", "validation")
    job = spec.JobSpec(dataset_dir=str(tmp_path), dataset=["hub"], output_dir=str(tmp_path / "out"))
    r = checks.validate(job, [])
    assert "dataset" not in r.errors and "someone/sft-data" in r.warnings["dataset"]


def test_eval_settings_are_checked_before_launch(tmp_path):
    base = dict(output_dir=str(tmp_path / "out"))
    assert "val_size" in checks.validate(spec.JobSpec(val_size=1.5, **base), []).errors
    assert "val_size" in checks.validate(spec.JobSpec(val_size=0.1, eval_dataset=["identity"], **base), []).errors
    assert "eval_dataset" in checks.validate(spec.JobSpec(eval_dataset=["nope"], **base), []).errors
    assert "per_device_eval_batch_size" in checks.validate(spec.JobSpec(per_device_eval_batch_size=0, **base), []).errors
    ok = checks.validate(spec.JobSpec(val_size=0.1, **base), [])
    assert not {"val_size", "eval_dataset"} & set(ok.errors)


def test_the_web_server_never_imports_datasets_or_pyarrow(data, tmp_path):
    """The server's own start (without_arrow, then gradio) and its data work: preview and checks, parquet included."""
    code = ("import sys; from zeroboard import webui; light = webui.without_arrow(); light.__enter__(); "
            "from zeroboard.webui import app, handlers; "
            "from zeroboard.runs import manager; from zeroboard.job import checks, spec; "
            f"app.build_app(manager.JobManager(index={str(tmp_path / 'r.json')!r})); "
            f"md = handlers.dataset_preview({str(data)!r}, 'lf_parquet, lf_alpaca_cols', 2); "
            f"job = spec.JobSpec(dataset_dir={str(data)!r}, dataset=['lf_parquet', 'lf_csv'], output_dir={str(tmp_path / 'o')!r}); "
            "r = checks.validate(job, []); "
            "heavy = [m for m in ('pyarrow', 'datasets', 'torch', 'transformers') if sys.modules.get(m) is not None]; "
            "print('heavy:', heavy, 'errors:', dict(r.errors)); "
            "sys.exit(1 if heavy or 'Error' in md or 'dataset' in r.errors or 'SYSALPACA' not in md else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]


def test_the_running_web_server_maps_no_arrow_library(tmp_path):
    """`zeroboard webui` as a user starts it: pyarrow's libraries never enter the process (pandas would load them)."""
    from helpers import start_server, stop_server
    from zeroboard.job.command import free_port

    proc = start_server(free_port(), tmp_path / "runs.json", tmp_path / "server.log")
    try:
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        stop_server(proc)
    assert "libarrow" not in maps and "/pyarrow/" not in maps and "libtorch" not in maps


# --- issue 31: records read within the job's limits ------------------------------------------------------------------

GOOD = {"instruction": "Say hi.", "input": "", "output": "Hi!"}


def words_zh(msg) -> str:
    from zeroboard.words import tr

    return tr(msg, "zh")


def scanned_error(path: Path, **sizes) -> str:
    from zeroboard.data import scan

    src = info.resolve(str(path), path.parent)
    return scan.scan(src, records.Sizes(**sizes) if sizes else records.DEFAULT).error


def test_a_csv_cell_or_a_record_past_its_limit_is_refused_naming_the_file_the_record_and_the_field(tmp_path):
    """csv's own limit (128 KiB a field) raised a bare _csv.Error; the limits are now the job's fields."""
    big = tmp_path / "big.csv"
    big.write_text("instruction,input,output\nSay hi.,,Hi!\n\"" + "a" * 10_000_000 + "\",,yes\n")
    error = scanned_error(big)
    assert str(big) in error and "record 1 (line 3)" in error and "10,000,000 bytes" in error
    assert "max_cell_bytes (4,194,304 bytes)" in error and "max_cell_bytes" in words_zh(error)
    assert scanned_error(big, cell=16 << 20) is None  # raised: read
    wide = tmp_path / "wide.csv"
    wide.write_text("instruction,input,output\n" + ",".join(["w" * 3000] * 3) + "\n")
    assert "max_record_bytes (4,096 bytes)" in scanned_error(wide, record=4096)
    lines = tmp_path / "long.jsonl"
    lines.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "input": "é" * 1500}) + "\n")  # 3,000+ bytes
    error = scanned_error(lines, record=2048)
    assert "record 1 (line 2)" in error and "max_record_bytes (2,048 bytes)" in error
    listed = tmp_path / "long.json"
    listed.write_text(json.dumps([GOOD, {**GOOD, "input": "i" * 200_000}, GOOD]))
    assert "record 1 is larger than max_record_bytes (65,536 bytes)" in scanned_error(listed, record=65536)
    assert scanned_error(listed) is None
    assert records.head(info.resolve(str(big), tmp_path), 1) == [{"instruction": "Say hi.", "input": "", "output": "Hi!"}]
    with pytest.raises(DataError) as e:
        records.head(info.resolve(str(big), tmp_path), 5)
    assert "max_cell_bytes" in e.value.args[0]


def test_a_record_past_the_limit_is_never_read_whole(tmp_path):
    """A 64 MB line with a 1 MiB limit: the reader stops at the limit (memory stays near it), not at the line's end."""
    import tracemalloc

    path = tmp_path / "one.jsonl"
    with path.open("w") as fh:
        fh.write('{"instruction": "' + "x" * (64 << 20) + '"}\n')
    tracemalloc.start()
    error = scanned_error(path, record=1 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "record 0 (line 1)" in error and peak < 16 << 20, peak


def test_the_trainer_skips_a_record_past_the_limits_as_the_checks_refuse_it():
    big = {"instruction": "q", "output": "a" * 5000}
    assert records.size_problem(big, "json", records.Sizes(record=4096), 7).key == "data.skipped_record"
    assert records.size_problem(big, "csv", records.Sizes(cell=4096), 7).key == "data.skipped_cell"
    assert records.size_problem({"messages": [{"content": "é" * 1500}]}, "json", records.Sizes(record=2048), 0) is not None
    assert records.size_problem(GOOD, "csv", records.Sizes(cell=1024, record=1024), 0) is None


def test_special_files_in_place_of_data_are_named_by_kind(tmp_path):
    import os

    os.mkfifo(tmp_path / "x.json")
    with pytest.raises(DataError) as e:
        info.resolve(str(tmp_path / "x.json"), tmp_path)
    assert "FIFO" in e.value.args[0]
    os.mkfifo(tmp_path / "dataset_info.json")
    with pytest.raises(DataError) as e:
        info.resolve("x", tmp_path)
    assert "dataset_info.json was not read" in e.value.args[0] and "FIFO" in e.value.args[0]
