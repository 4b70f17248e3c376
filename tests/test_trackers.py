"""Experiment trackers (``report_to``): offered when installed, writing inside the run folder, started before anything
else so that one that cannot start fails the run with its reason. The loss TensorBoard gets is checked against
events.jsonl end to end in test_train_e2e.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zeroboard.job import checks, modelinfo, record, spec, trackers
from zeroboard.outputs.inspect import inspect

NAMES = [n for n in spec.choices("report_to") if n != "none"]


def test_every_choice_is_a_tracker_of_the_table():
    assert set(NAMES) == set(trackers.TRACKERS)


def test_a_tracker_is_offered_when_its_package_is_installed(monkeypatch):
    here = {"mlflow"}
    monkeypatch.setattr(modelinfo, "installed", lambda module: module in here)
    assert trackers.offered() == ["none", "mlflow"]
    here.add(trackers.TRACKERS["tensorboard"].module)
    assert trackers.offered() == ["none", "tensorboard", "mlflow"]


def test_a_tracker_that_is_not_installed_is_refused_with_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(modelinfo, "installed", lambda module: module != "swanlab")
    job = spec.JobSpec(report_to="swanlab", output_dir=str(tmp_path / "run"))
    errors = checks.validate(job, []).errors
    assert set(errors) == {"report_to"}
    assert trackers.install_hint("swanlab") in errors["report_to"] and "tensorboard" in errors["report_to"]
    assert "report_to" not in checks.validate(spec.JobSpec(report_to="wandb", output_dir=str(tmp_path / "r2")), []).errors


@pytest.mark.parametrize("name", NAMES)
def test_every_tracker_writes_inside_the_run_folder(name, tmp_path):
    run = tmp_path / "run"
    (w,) = trackers.for_job(spec.JobSpec(report_to=name, output_dir=str(run)))
    assert Path(w.path).parent == run and w.path in w.open.replace("/latest-run", "")
    for key, value in w.env.items():  # every folder or URI the integration is pointed at lies in the run folder
        if "/" in value:
            assert str(run) in value, (key, value)
    assert trackers.for_job(spec.JobSpec(output_dir=str(run))) == []


def test_a_run_names_its_tracker_from_its_record(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / record.JOB_FILE).write_text(spec.dump_yaml(spec.JobSpec(report_to="tensorboard", output_dir="elsewhere")))
    (w,) = trackers.for_run(run)
    assert w.tracker == "tensorboard" and w.path == str(run / "tb") and w.open == f"tensorboard --logdir {run / 'tb'}"


def not_installed() -> str:
    missing = [n for n in NAMES if not trackers.installed(n)]
    if not missing:
        pytest.skip("every tracker is installed here")
    return missing[0]


def test_a_tracker_that_cannot_start_stops_the_trainer_before_anything_loads(tmp_path):
    """The trainer itself (one process, past the checks): an error event naming the tracker, before data or start."""
    name = not_installed()
    out = tmp_path / "run"
    job = spec.JobSpec(report_to=name, output_dir=str(out), device_type="cpu", precision="fp32", max_steps=1)
    argv = spec.to_flags({k: v for k, v in spec.to_dict(job).items() if not spec.FIELDS[k].metadata["launch_only"]})
    p = subprocess.run([sys.executable, "-m", "zeroboard.training.train", *argv], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    evs = record.read_events(out / record.EVENTS_FILE)
    assert [e["event"] for e in evs] == ["error"]
    assert name in evs[0]["message"] and "No module named" in evs[0]["message"], evs[0]["message"]


def test_a_tensorboard_that_cannot_write_fails_at_start(tmp_path):
    pytest.importorskip("tensorboard")
    from zeroboard.training import trackers as starting

    out = tmp_path / "run"
    out.mkdir()
    (out / trackers.TRACKERS["tensorboard"].folder).write_text("a file where its folder goes")
    with pytest.raises(starting.TrackerError, match="^the experiment tracker tensorboard could not start"):
        starting.start(spec.JobSpec(report_to="tensorboard", output_dir=str(out)))
    starting.finish(False)


def test_inspect_names_what_a_tracker_wrote_and_how_to_open_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / record.JOB_FILE).write_text(spec.dump_yaml(spec.JobSpec(report_to="mlflow", output_dir=str(run))))
    (run / record.RESULT_FILE).write_text(json.dumps({"kind": "lora_adapter", "path": str(run)}))
    (run / "adapter_config.json").write_text("{}")
    (run / "adapter_model.safetensors").write_bytes(b"")
    assert inspect(run).trackers == []  # it wrote nothing (the run failed before): nothing is named
    (run / "mlruns").mkdir()
    ins = inspect(run)
    assert ins.trackers == [{"tracker": "mlflow", "path": str(run / "mlruns"),
                             "open": f"mlflow ui --backend-store-uri {run / 'mlruns'}"}]
    assert f"mlflow ui --backend-store-uri {run / 'mlruns'}" in ins.text("en") and "实验跟踪" in ins.text("zh")
