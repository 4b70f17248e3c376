"""The job spec: types, YAML round trips, flags, and every shipped YAML against the schema."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from zeroboard import words
from zeroboard.job import spec


def test_every_field_has_a_section_and_words_in_both_languages():
    for f in dataclasses.fields(spec.JobSpec):
        assert f.metadata["section"] in {"model", "data", "train", "speed", "lora", "output", "devices"}, f.name
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
