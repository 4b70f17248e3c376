"""A battery of bad inputs, each refused before anything starts, through the command line and through the page.

Each case names the field that must carry the refusal.  For every case and
both paths: no process is started, nothing is registered, and every file in
every folder the input pointed at keeps its content (hashed before and after).
"""

from __future__ import annotations

import hashlib
import shutil
import socket
from pathlib import Path

import pytest

from bad_inputs import CASES, REPO, fifos_opened
from zeroboard.cli import main as cli_main
from zeroboard.job import spec
from zeroboard.runs import manager as runner, processes
from zeroboard.webui import handlers


def fingerprint(folders_: list[Path]) -> dict[str, str]:
    """Content hashes of every file under each folder (for / and /etc: what they list at their top)."""
    out = {}
    for d in folders_:
        if str(d) == "/":  # what the root holds (its folders' times move with every file made in /tmp, /run...)
            out |= {str(p): "here" for p in d.iterdir()}
            continue
        if str(d) == "/etc" or d == REPO:
            out |= {str(p): str(p.stat().st_mtime_ns) for p in d.iterdir() if not p.is_symlink()}
            continue
        for p in sorted(d.rglob("*")):
            if p.is_file() and not p.is_symlink():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir():
                out[str(p)] = "dir"
    return out


@pytest.fixture()
def setting(tmp_path, request, demo, monkeypatch):
    name, field, build = request.param
    shutil.copytree("cache/demo/model", tmp_path / "model")
    shutil.copytree("cache/demo/data", tmp_path / "data")
    monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(tmp_path / "runs.json"))
    built = build(tmp_path)
    for k, v in built.env.items():
        monkeypatch.setenv(k, v)
    return name, field, built


def _nothing_started(index: Path, runs_before: list[str], here: Path) -> None:
    assert runner.JobManager(index=index).run_dirs() == runs_before
    assert not [p for p, out in processes.live_trainers() if here in out.parents or out.parent == REPO / "runs"]


@pytest.mark.timeout(120)  # a hang is a failure (benchmarks/bad_input.py times each refusal)
@pytest.mark.parametrize("setting", CASES, ids=[c[0] for c in CASES], indirect=True)
def test_bad_input_is_refused_before_launch(setting, tmp_path, capsys):
    name, field, case = setting
    index = tmp_path / "runs.json"
    runs = runner.JobManager(index=index).run_dirs()
    before = fingerprint(case.pointed)
    overrides = {k: str(v) for k, v in case.overrides.items()}
    base = {"output_dir": str(tmp_path / "fresh-run"), "max_steps": "5"}
    # the command line: zeroboard train, as typed (a job file, or the demo's with --set)
    job_file = str(case.job_file or "examples/demo.yaml")
    sets = ({} if case.job_file else base) | overrides
    argv = ["train", job_file, *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]
    assert cli_main(argv) == 2, name
    err = capsys.readouterr().err
    assert f"  {field}:" in err and "Traceback" not in err, f"{name}: {err}"
    # the page: the file through Load arguments (the form stays as it was), or the values typed in, then Start
    if case.job_file is not None:
        loaded, message = handlers.load_args(str(case.job_file))
        assert loaded is None and field in message, f"{name}: {message}"
    else:
        job = spec.load_yaml(REPO / "examples" / "demo.yaml")
        values = {**handlers.spec_to_form(job), **base, **overrides}
        if "gpu_ids" not in overrides:  # no GPU: the page has no GPU picker (a case may type ids all the same)
            values.pop("gpu_ids")
        checked, state, message = handlers.start(values, [], runner.JobManager(index=index))
        assert state is None and field in checked.errors, f"{name}: {checked.errors}"
    assert not fifos_opened(), f"{name}: a FIFO was opened (it must be refused by its kind first)"
    _nothing_started(index, runs, tmp_path.resolve())
    assert fingerprint(case.pointed) == before, name
    assert not (tmp_path / "fresh-run").exists()
    assert not any(p.exists() for p in case.absent), name


def test_the_battery_is_large_enough():
    assert len(CASES) >= 60  # each goes through the command line and the page


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
