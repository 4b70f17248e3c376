"""The event stream's format: a version on every line, a JSON Schema shipped in the package that checks a line of any
version, and readers that keep reading run folders an older ZeroBoard wrote (``tests/fixtures/run_v1*``: written by
the trainer of the commit before versions, their lines copied as they were)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from zeroboard.job import record, trackers
from zeroboard.outputs.inspect import inspect
from zeroboard.runs import outcome
from zeroboard.runs.state import JobState

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OLD_RUN, OLD_FAILED = FIXTURES / "run_v1", FIXTURES / "run_v1_failed"


def schema() -> dict:
    return json.loads(record.SCHEMA_FILE.read_text(encoding="utf-8"))


def raw_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_schema_is_package_data(root):
    """pyproject ships it: its package-data patterns match the file, next to the module that names it."""
    import tomllib
    from fnmatch import fnmatch

    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["zeroboard"]
    where = record.SCHEMA_FILE.relative_to(root / "app" / "zeroboard").as_posix()
    assert any(fnmatch(where, p) and p.count("/") == where.count("/") for p in patterns), (where, patterns)
    jsonschema.Draft202012Validator.check_schema(schema())


def written_kinds(root: Path) -> set[str]:
    """Every event kind the package writes: the first argument of each ``emit("...")`` / ``announce("...")`` call."""
    kinds = set()
    for path in (root / "app" / "zeroboard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("emit", "announce"):
                    kinds.add(node.args[0].value)
    return kinds


def test_the_schema_knows_every_kind_the_trainer_writes(root):
    kinds = written_kinds(root)
    assert {"log", "start", "error", "end", "trackers", "compile"} <= kinds  # the scan finds them
    assert set(schema()["properties"]["event"]["enum"]) == kinds


def test_every_line_written_now_carries_the_version_and_fits_the_schema(tmp_path):
    w = record.EventWriter(tmp_path, 0)
    w.emit("save", step=3, path=str(tmp_path / "checkpoint-3"))
    w.emit("trackers", trackers=[t.to_dict() for t in trackers.for_job(_job(tmp_path, "tensorboard"))])
    w.emit("error", rank=1, message="ValueError: x", traceback="")
    for line in raw_lines(tmp_path / record.EVENTS_FILE):
        assert line["v"] == record.VERSION
        jsonschema.validate(line, schema())


def test_the_schema_can_fail():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"v": 2, "event": "log", "time": 1.0, "step": 1}, schema())  # a log without its loss
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"v": 2, "event": "no_such_kind", "time": 1.0}, schema())


@pytest.mark.parametrize("run", [OLD_RUN, OLD_FAILED], ids=lambda p: p.name)
def test_lines_of_the_first_format_fit_the_schema_and_read_as_version_one(run):
    lines = raw_lines(run / record.EVENTS_FILE)
    assert lines and not any("v" in line for line in lines)  # the format before versions, as it was written
    for line in lines:
        jsonschema.validate(line, schema())
    evs = record.read_events(run / record.EVENTS_FILE)
    assert [e["event"] for e in evs] == [line["event"] for line in lines]
    assert all(e["v"] == 1 for e in evs)
    assert all(e["result"]["trackers"] == [] for e in evs if e["event"] == "end")  # in the current format


def test_a_finished_run_of_the_first_format_still_reads_everywhere(tmp_path):
    run = tmp_path / "old"
    shutil.copytree(OLD_RUN, run)
    lines = raw_lines(run / record.EVENTS_FILE)
    evs = record.read_events(run / record.EVENTS_FILE)

    st = JobState(str(run))  # how the runner settles it
    outcome.conclude(st, 0, evs)
    assert st.status == "finished"

    from zeroboard.webui.live import RunReader  # the page's live panels

    reader = RunReader(st)
    reader.poll()
    assert [e["loss"] for e in reader.logs] == [line["loss"] for line in lines if line["event"] == "log"]
    assert reader.start["world_size"] == next(line for line in lines if line["event"] == "start")["world_size"]

    # zeroboard inspect: what it saved, and no tracker (report_to did not exist); the fixture leaves the weights out,
    # inspect looks at their names
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "cache/demo/model"}))
    (run / "adapter_model.safetensors").write_bytes(b"")
    ins = inspect(run)
    assert ins.result["kind"] == json.loads((run / record.RESULT_FILE).read_text())["kind"]
    assert ins.trackers == [] and trackers.for_run(run) == []


def test_a_failed_run_of_the_first_format_names_its_rank_and_reason():
    lines = raw_lines(OLD_FAILED / record.EVENTS_FILE)
    st = JobState(str(OLD_FAILED))
    outcome.conclude(st, 1, record.read_events(OLD_FAILED / record.EVENTS_FILE))
    first = next(line for line in lines if line["event"] == "error")
    assert st.status == "failed" and st.failed_rank == first["rank"] and st.error == first["message"]


def test_a_line_of_the_current_version_reads_unchanged():
    line = {"v": record.VERSION, "event": "save", "time": 1.0, "step": 2, "path": "x"}
    assert record.parse([json.dumps(line), "{cut sh", "[1, 2]"]) == [line]


def _job(out: Path, tracker: str):
    from zeroboard.job.spec import JobSpec

    return JobSpec(output_dir=str(out), report_to=tracker)
