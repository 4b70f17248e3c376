"""A battery of bad inputs, each refused before anything starts, through the command line and through the page.

Each case names the field that must carry the refusal.  For every case and
both paths: no process is started, nothing is registered, and every file in
every folder the input pointed at keeps its content (hashed before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from zeroboard.cli import main as cli_main
from zeroboard.job import folders, record, spec
from zeroboard.runs import manager as runner, processes
from zeroboard.webui import handlers

REPO = Path(__file__).resolve().parents[1]
LONG = " ".join(["a very long question that goes on"] * 40)


def long_prompt_data(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "long.json").write_text(json.dumps([{"instruction": LONG, "input": "", "output": "yes"}] * 8))
    (d / "dataset_info.json").write_text(json.dumps({"long": {"file_name": "long.json"}}))
    return d


def user_folder(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "README.md").write_text("my notes\n")
    (d / "tokenizer_config.json").write_text("{}\n")
    return d


def finished_run(d: Path) -> Path:
    (d / "checkpoint-5").mkdir(parents=True)
    (d / "checkpoint-5" / folders.CHECKPOINT_MARK).write_text("{}")
    (d / record.COMMAND_FILE).write_text("{}")
    (d / record.RESULT_FILE).write_text("{}")
    return d


def half_saved_run(d: Path) -> Path:
    (d / "checkpoint-9").mkdir(parents=True)  # an abort during the save: no completion mark
    (d / "checkpoint-9" / "rng_state_0.pth").write_bytes(b"x")
    (d / record.COMMAND_FILE).write_text("{}")
    return d


def ds_file(d: Path, **fields) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, **fields}))
    return path


def bad_info(d: Path, entry: str) -> Path:
    d.mkdir(parents=True)
    (d / "dataset_info.json").write_text(json.dumps({"x": {"file_name": entry}}))
    return d


# (case, field that must be named, builder: tmp -> (overrides, folders the input points at))
CASES = [
    ("output is the model's folder", "output_dir",
     lambda t: ({"output_dir": str(t / "model"), "model_name_or_path": str(t / "model"), "finetuning_type": "full"},
                [t / "model"])),
    ("output inside the model's folder", "output_dir",
     lambda t: ({"output_dir": str(t / "model" / "run"), "model_name_or_path": str(t / "model")}, [t / "model"])),
    ("output is the data folder", "output_dir",
     lambda t: ({"output_dir": str(t / "data"), "dataset_dir": str(t / "data")}, [t / "data"])),
    ("output is a user's folder", "output_dir",
     lambda t: ({"output_dir": str(user_folder(t / "mine"))}, [t / "mine"])),
    ("output climbs out of the workspace", "output_dir", lambda t: ({"output_dir": "../../etc/zb"}, [Path("/etc")])),
    ("output in /etc", "output_dir", lambda t: ({"output_dir": "/etc/zb"}, [Path("/etc")])),
    ("output is /", "output_dir", lambda t: ({"output_dir": "/"}, [Path("/")])),
    ("output is the workspace itself", "output_dir", lambda t: ({"output_dir": "."}, [REPO])),
    ("output cannot be created", "output_dir",
     lambda t: (t.joinpath("afile").write_text("x") and {"output_dir": str(t / "afile" / "run")}, [t])),
    ("output holds a finished run", "output_dir",
     lambda t: ({"output_dir": str(finished_run(t / "done"))}, [t / "done"])),
    ("output is a file", "output_dir",
     lambda t: (t.joinpath("plain.txt").write_text("mine") and {"output_dir": str(t / "plain.txt")}, [t])),
    ("resume with nothing to resume", "resume", lambda t: ({"output_dir": str(t / "new"), "resume": "true"}, [t])),
    ("resume from a half-saved checkpoint", "resume",
     lambda t: ({"output_dir": str(half_saved_run(t / "half")), "resume": "true"}, [t / "half"])),
    ("model outside the workspace", "model_name_or_path", lambda t: ({"model_name_or_path": "/etc"}, [Path("/etc")])),
    ("model through a link out of the workspace", "model_name_or_path",
     lambda t: (os.symlink("/etc", t / "link") or {"model_name_or_path": str(t / "link")}, [Path("/etc")])),
    ("data folder outside the workspace", "dataset_dir", lambda t: ({"dataset_dir": "/etc"}, [Path("/etc")])),
    ("dataset_info entry climbing out", "dataset",
     lambda t: ({"dataset_dir": str(bad_info(t / "d", "../../../../../../etc/passwd")), "dataset": "x"}, [Path("/etc")])),
    ("dataset file linked out of the workspace", "dataset",
     lambda t: (os.symlink("/etc/passwd", t / "x.json") or {"dataset": str(t / "x.json")}, [Path("/etc")])),
    ("DeepSpeed file outside the workspace", "deepspeed", lambda t: ({"deepspeed": "/etc/hostname"}, [Path("/etc")])),
    ("DeepSpeed train_batch_size disagrees", "deepspeed",
     lambda t: ({"deepspeed": str(ds_file(t / "ds", train_batch_size=7))}, [t / "ds"])),
    ("DeepSpeed micro-batch disagrees", "deepspeed",
     lambda t: ({"deepspeed": str(ds_file(t / "ds", train_micro_batch_size_per_gpu=3))}, [t / "ds"])),
    ("DeepSpeed bf16 on an fp32 job", "deepspeed",
     lambda t: ({"deepspeed": str(ds_file(t / "ds", bf16={"enabled": True}))}, [t / "ds"])),
    ("DeepSpeed file that is not JSON", "deepspeed",
     lambda t: (t.joinpath("bad.json").write_text("{oops") and {"deepspeed": str(t / "bad.json")}, [t])),
    ("epochs nan", "num_train_epochs", lambda t: ({"num_train_epochs": "nan"}, [])),
    ("epochs inf", "num_train_epochs", lambda t: ({"num_train_epochs": "inf"}, [])),
    ("learning rate -inf", "learning_rate", lambda t: ({"learning_rate": "-inf"}, [])),
    ("seed 1e20", "seed", lambda t: ({"seed": "1e20"}, [])),
    ("seed below zero", "seed", lambda t: ({"seed": "-1"}, [])),
    ("max_steps absurd", "max_steps", lambda t: ({"max_steps": "1e12"}, [])),
    ("every answer cut by the cutoff", "cutoff_len",
     lambda t: ({"dataset_dir": str(long_prompt_data(t / "long")), "dataset": "long", "cutoff_len": "16",
                "truncation": "end"}, [t / "long"])),
    ("LoRA rank 1e9", "lora_rank", lambda t: ({"lora_rank": "1e9"}, [])),
    ("a micro-batch no memory holds", "per_device_train_batch_size",
     lambda t: ({"per_device_train_batch_size": "100000", "cutoff_len": "100000"}, [])),
    ("offload without a stage", "offload", lambda t: ({"offload": "true"}, [])),
    ("an extra argument a field owns", "extra_args", lambda t: ({"extra_args": '{"learning_rate": 1}'}, [])),
    ("an unknown LoRA module", "lora_target", lambda t: ({"lora_target": "q_projj"}, [])),
    ("a dataset file that is not JSON", "dataset",
     lambda t: (t.joinpath("bad.jsonl").write_text("a,b\n1,2\n") and {"dataset": str(t / "bad.jsonl")}, [t])),
    ("a learning rate of 7", "learning_rate", lambda t: ({"learning_rate": "7"}, [])),
]


def fingerprint(folders_: list[Path]) -> dict[str, str]:
    """Content hashes of every file under each folder (for / and /etc: what they list at their top)."""
    out = {}
    for d in folders_:
        if str(d) in ("/", "/etc") or d == REPO:
            out |= {str(p): str(p.stat().st_mtime_ns) for p in d.iterdir() if not p.is_symlink()}
            continue
        for p in sorted(d.rglob("*")):
            if p.is_file() and not p.is_symlink():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir():
                out[str(p)] = "dir"
    return out


@pytest.fixture()
def setting(tmp_path, request, demo):
    name, field, build = request.param
    shutil.copytree("cache/demo/model", tmp_path / "model")
    shutil.copytree("cache/demo/data", tmp_path / "data")
    overrides, pointed = build(tmp_path)
    return name, field, {k: str(v) for k, v in overrides.items()}, pointed


def _no_job_started(index: Path, trainers_before: set[int]) -> None:
    assert runner.JobManager(index=index).run_dirs() == []
    assert {p.pid for p, _ in processes.live_trainers()} <= trainers_before


@pytest.mark.parametrize("setting", CASES, ids=[c[0] for c in CASES], indirect=True)
def test_bad_input_is_refused_before_launch(setting, tmp_path, monkeypatch, capsys):
    name, field, overrides, pointed = setting
    index = tmp_path / "runs.json"
    monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(index))
    before, trainers = fingerprint(pointed), {p.pid for p, _ in processes.live_trainers()}
    base = {"output_dir": str(tmp_path / "fresh-run"), "max_steps": "5"}
    # the command line: zeroboard train, as typed
    argv = ["train", "examples/demo.yaml", *[a for k, v in {**base, **overrides}.items() for a in ("--set", f"{k}={v}")]]
    assert cli_main(argv) == 2, name
    err = capsys.readouterr().err
    assert f"  {field}:" in err, f"{name}: {err}"
    # the page: the same values typed into the form, then Start
    job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    values = {**handlers.spec_to_form(job), **base, **overrides}
    values.pop("gpu_ids")
    checked, state, message = handlers.start(values, [], runner.JobManager(index=index))
    assert state is None and field in checked.errors, f"{name}: {checked.errors}"
    _no_job_started(index, trainers)
    assert fingerprint(pointed) == before, name
    assert not (tmp_path / "fresh-run").exists()


def test_the_battery_is_large_enough():
    assert len(CASES) >= 30


def test_a_taken_fixed_port_is_refused_by_the_cli_and_the_page(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(tmp_path / "runs.json"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert cli_main(["validate", "--set", f"master_port={port}", "--set", f"output_dir={tmp_path / 'r'}"]) == 2
        assert "master_port" in capsys.readouterr().err
        job = spec.load_yaml(REPO / "examples" / "demo.yaml")
        values = {**handlers.spec_to_form(job), "master_port": port, "output_dir": str(tmp_path / "r")}
        values.pop("gpu_ids")
        checked = handlers.check(values, [])
        assert "master_port" in checked.errors and "in use" in checked.errors["master_port"]


def test_save_arguments_never_replaces_a_foreign_file_and_asks_before_replacing_its_own(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    adapter = run / "adapter_config.json"
    adapter.write_text('{"r": 8}')
    values = handlers.spec_to_form(spec.load_yaml(REPO / "examples" / "demo.yaml"))
    message, confirm = handlers.save_args(values, str(adapter))
    assert "Not saved" in message and adapter.read_text() == '{"r": 8}' and not confirm
    mine = run / "job.yaml"
    mine.write_text("learning_rate: 1\n")  # a YAML that was not saved by the page: left alone
    assert "Not saved" in handlers.save_args(values, str(mine))[0] and mine.read_text() == "learning_rate: 1\n"
    saved = tmp_path / "saved.yaml"
    assert handlers.save_args(values, str(saved))[0].startswith("Saved")
    message, confirm = handlers.save_args(values, str(saved))
    assert confirm and "again" in message  # a second save asks first
    assert handlers.save_args(values, str(saved), replace=True)[0].startswith("Saved")
    assert "Not saved" in handlers.save_args(values, "/etc/zb.yaml")[0]
    assert handlers.load_args("/etc/hostname")[0] is None
