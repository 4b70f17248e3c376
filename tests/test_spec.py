"""The job spec: types, YAML round trips, flags, and every shipped YAML against the schema."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from zeroboard import words
from zeroboard.job import spec


def test_every_field_has_a_section_and_words_in_both_languages():
    for f in dataclasses.fields(spec.JobSpec):
        assert f.metadata["section"] in {"model", "data", "train", "speed", "lora", "vision", "pref", "output", "devices"}, f.name
        en_label, zh_label, en_help, zh_help = words.fields.FIELDS[f.name]
        assert en_label and zh_label and en_help and zh_help, f.name
        assert zh_help != en_help and zh_label, f.name
    assert set(words.fields.FIELDS) == set(spec.FIELDS)  # no words for a field that is gone


def test_yaml_round_trip_keeps_every_value():
    job = spec.JobSpec(learning_rate=1e-4, dataset=["a", "b.jsonl"], gpu_ids=[1, 0], deepspeed_stage="3",
                       offload=True, extra_args={"optim": "adamw_torch"})
    assert spec.loads_yaml(spec.dump_yaml(job)) == job
    assert spec.loads_yaml(spec.dump_yaml(job, full=False)) == job


def test_flags_round_trip():
    job = spec.JobSpec(finetuning_type="full", lora_target=["q_proj", "v_proj"], gradient_checkpointing=True,
                       extra_args={"optim": "adamw_torch", "adam_beta2": 0.95})
    assert spec.from_flags(spec.to_flags(spec.to_dict(job))) == job


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("learning_rate", "fast", "must be a number"),
        ("per_device_train_batch_size", "2.5", "whole number"),
        ("deepspeed_stage", "1", "must be one of none, 2, 3"),
        ("offload", "maybe", "true or false"),
        ("gpu_ids", "0,x", "whole numbers"),
        ("extra_args", "{not json", "JSON object"),
    ],
)
def test_bad_values_name_the_field(key, value, fragment):
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict({key: value})
    assert key in e.value.problems
    assert fragment in e.value.problems[key]


def test_all_problems_are_reported_together():
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict({"learning_rate": "x", "seed": "y", "lerning_rate": 1})
    assert set(e.value.problems) == {"learning_rate", "seed", "lerning_rate"}


def test_unknown_option_suggests_the_real_one():
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict({"learning-rate": 1e-4})
    assert "learning_rate" in e.value.problems["learning-rate"]


def test_malformed_yaml_is_a_spec_error(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text("model_name_or_path: [unclosed\n")
    with pytest.raises(spec.SpecError) as e:
        spec.load_yaml(p)
    assert "not valid YAML" in str(e.value)


def test_choices_come_from_the_schema():
    assert spec.choices("deepspeed_stage") == ("none", "2", "3")
    assert spec.choices("learning_rate") is None


def test_shipped_examples_match_the_schema(root: Path):
    files = sorted((root / "examples").glob("*.yaml"))
    assert files, "examples/*.yaml missing"
    for f in files:
        spec.load_yaml(f)  # raises on any unknown key or bad type


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), float("inf")])
def test_non_finite_numbers_are_refused(value):
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict({"num_train_epochs": value})
    assert "finite" in e.value.problems["num_train_epochs"]


def test_messages_are_catalog_sentences_in_both_languages():
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict({"deepspeed_stage": "1"})
    msg = e.value.problems["deepspeed_stage"]
    assert msg.say_in("en").startswith("must be one of") and msg.say_in("zh").startswith("必须是")


# --- issue 31: what a job file (and any file a user names) is read as ---------------------------------------------

def test_special_files_are_refused_by_kind_before_they_are_opened(tmp_path, monkeypatch):
    """A FIFO as the job file held `zeroboard validate` for ever (open waits for a writer); a socket or a device is
    no file either. Refused by their kind before any open; a FIFO put in place between the look and the open is
    refused after an open that does not wait."""
    import os
    import socket
    import threading

    from zeroboard import safeload

    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    sock = tmp_path / "job.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
    for path, key in ((fifo, "safe.special_fifo"), (sock, "safe.special_socket"), ("/dev/null", "safe.special_char")):
        assert safeload.special_kind(path) == key
        with pytest.raises(safeload.Refused) as refused:
            safeload.read_text(path, safeload.JOB)
        assert refused.value.key == key
    with pytest.raises(spec.SpecError) as e:
        spec.load_yaml(fifo)
    assert "FIFO" in e.value.problems["file"] and str(fifo) in e.value.problems["file"]
    assert "FIFO" in words.tr(e.value.problems["file"], "en") and "命名管道" in words.tr(e.value.problems["file"], "zh")
    assert safeload.special_kind(tmp_path) is None and safeload.special_kind(tmp_path / "missing") is None
    with pytest.raises(IsADirectoryError):
        safeload.read_text(tmp_path, safeload.JOB)

    regular = os.stat(__file__)  # the race: the look saw a regular file, the open meets a FIFO
    monkeypatch.setattr(safeload.os, "stat", lambda p, *a, **k: regular)
    done = []
    reader = threading.Thread(target=lambda: done.append(pytest.raises(safeload.Refused, safeload.open_binary, fifo)),
                              daemon=True)  # a reader that waits must not hold the test run at its end
    reader.start()
    reader.join(10)
    assert done and done[0].value.key == "safe.special_fifo"  # refused, not waiting for a writer


def test_a_key_given_twice_is_refused_with_its_name_and_lines(tmp_path):
    from zeroboard import safeload

    job = tmp_path / "job.yaml"
    job.write_text("learning_rate: 1.0e-4\nmax_steps: 5\nlearning_rate: 1.0e-3\n")
    with pytest.raises(spec.SpecError) as e:
        spec.load_yaml(job)
    assert list(e.value.problems) == ["learning_rate"]
    assert "learning_rate is given twice" in e.value.problems["learning_rate"] and "lines 1, 3" in e.value.problems["learning_rate"]
    job.write_text("extra_args:\n  adam_beta2: 0.9\n  adam_beta1: 0.8\n  adam_beta2: 0.95\n")  # nested: its option named
    with pytest.raises(spec.SpecError) as e:
        spec.load_yaml(job)
    assert "adam_beta2" in e.value.problems["extra_args"] and "lines 2, 4" in e.value.problems["extra_args"]
    # a merge key may be overridden (that is what it is for), and the same key in two mappings is no repeat
    ok = safeload.yaml_text("base: &b {x: 1, y: 2}\nmine:\n  <<: *b\n  x: 3\nother: {x: 4}\n")
    assert ok["mine"] == {"x": 3, "y": 2} and ok["other"] == {"x": 4}
    with pytest.raises(safeload.Refused) as refused:
        safeload.json_text('{"zero_optimization": {"stage": 2,\n "stage": 3}}')
    assert refused.value.key == "safe.duplicate_key" and refused.value.values == {"key": "stage", "lines": "1, 2"}
    with pytest.raises(spec.SpecError) as e:
        spec.from_dict({"extra_args": '{"adam_beta2": 0.9, "adam_beta2": 0.95}'})
    assert "adam_beta2 is given twice" in e.value.problems["extra_args"]
    assert safeload.json_text('[{"a": 1}, {"a": 2}]', safeload.RECORD) == [{"a": 1}, {"a": 2}]


def test_numbers_that_are_not_finite_are_refused_with_their_key():
    """1e400 is infinity to JSON: int(inf) raised far from the file that said it."""
    from zeroboard import safeload

    for text, key in (('{"hidden_size": 1e400}', "hidden_size"), ('{"a": {"b": [1, NaN]}}', "a.b[1]"),
                      ('{"x": -Infinity}', "x")):
        with pytest.raises(safeload.Refused) as refused:
            safeload.json_text(text)
        assert refused.value.key == "safe.not_finite" and refused.value.values["key"] == key, text
    with pytest.raises(safeload.Refused) as refused:
        safeload.yaml_text("extra_args: {adam_epsilon: .inf}\n")
    assert refused.value.field == "extra_args" and refused.value.values["key"] == "extra_args.adam_epsilon"
    assert safeload.json_text('{"a": 1e300}') == {"a": 1e300}
    assert safeload.json_text('{"a": NaN}', safeload.RECORD)["a"] != 0  # records are data: read as they are


def test_a_path_with_a_nul_byte_is_no_path_anywhere(tmp_path):
    """workspace.resolve raised a bare ValueError (embedded null byte) from deep inside os."""
    from zeroboard import safeload, workspace
    from zeroboard.job import checks

    ws = workspace.current()
    with pytest.raises(workspace.BadPath):
        workspace.resolve("runs/a\0b", tmp_path)
    assert not ws.readable("runs/a\0b") and not ws.writable(f"{tmp_path}/a\0b")
    assert checks.path_too_long("runs/a\0b").key == "safe.nul_in_path"
    with pytest.raises(safeload.Refused):
        safeload.read_text(f"{tmp_path}/a\0b", safeload.JOB)
