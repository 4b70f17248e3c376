"""End-to-end: issue 14's table of LLaMA-Factory datasets trains through `zeroboard train` and through the page.

One short CLI run over every row at once (JSON with columns, sharegpt with columns and with custom tags, CSV, Parquet,
a folder of JSON files), with a named template, an evaluation split and packing: real launcher, 2 CPU ranks, the
datasets library.  The page path: the same form through the handlers (the tokenized preview, then Start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lf_fixtures as lf
from helpers import stop_jobs, wait_until
from zeroboard.job import record, spec
from zeroboard.runs import manager as runner
from zeroboard.training import dataprep
from zeroboard.webui import data_view, handlers

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def setting(tmp_path, monkeypatch):
    index = tmp_path / "runs.json"
    monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(index))
    monkeypatch.setenv(dataprep.CACHE_ENV, str(tmp_path / "cache"))  # inherited by the runs and the subprocesses
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    yield lf.write(tmp_path / "data"), index
    stop_jobs(index)


def test_every_row_of_the_table_trains_from_the_command_line(setting, tmp_path):
    data, index = setting
    out = tmp_path / "run"
    # beside the table, records LLaMA-Factory skips (turns out of order) and keeps (an empty answer): the run skips
    # and counts the first, trains the second, and its data event names the first skipped
    turns = [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "Hi."}]
    (data / "skips.json").write_text(json.dumps([{"conversations": turns}, {"conversations": turns[:1] + turns[:1]},
                                                 {"conversations": [turns[0], {"from": "gpt", "value": ""}]}]))
    info = json.loads((data / "dataset_info.json").read_text())
    (data / "dataset_info.json").write_text(json.dumps({**info, "skips": {"file_name": "skips.json",
                                                                          "formatting": "sharegpt"}}))
    sets = {"output_dir": out, "dataset_dir": data, "dataset": ",".join([*lf.TABLE, "skips"]), "template": "chatml",
            "val_size": 6,
            "eval_steps": 3, "max_steps": 6, "logging_steps": 3, "packing": "true", "cutoff_len": 96}
    done = subprocess.run([sys.executable, "-m", "zeroboard.cli", "train", "examples/demo.yaml",
                           *[f"--set={k}={v}" for k, v in sets.items()]], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    evs = record.read_events(out / record.EVENTS_FILE)
    data_events = sorted((e for e in evs if e["event"] == "data"), key=lambda e: e["rank"])
    assert [(e["rank"], e["built"]) for e in data_events] == [(0, True), (1, False)]  # rank 1 read rank 0's cache
    assert all((e["samples"], e["eval_samples"], e["skipped"]) == (47, 6, 1) for e in data_events)
    assert data_events[0]["first_skipped"]["source"] == "skips" and data_events[0]["first_skipped"]["record"] == 1
    assert data_events[0]["first_skipped"]["message"]["key"] == "data.skip_same_role"
    evals = [e for e in evs if e["event"] == "eval"]
    assert [e["step"] for e in evals] == [3, 6] and all(e["eval_loss"] > 0 for e in evals)
    result = json.loads((out / record.RESULT_FILE).read_text())
    assert result["eval_loss"] == evals[-1]["eval_loss"] and result["template"] == "chatml"
    assert result["added_tokens"] == ["<|im_start|>", "<|im_end|>"]
    log = (out / record.TRAIN_LOG).read_text()
    assert "added special tokens <|im_start|>, <|im_end|>" in log and "of 47 samples packed into" in log
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"


def test_the_page_previews_and_trains_the_same_data(setting, tmp_path):
    data, index = setting
    values = handlers.spec_to_form(spec.load_yaml(REPO / "examples" / "demo.yaml"))
    values.pop("gpu_ids")
    values.update(output_dir=str(tmp_path / "page-run"), dataset_dir=str(data), dataset=", ".join(lf.TABLE),
                  template="qwen", max_steps=2, logging_steps=1, val_size=0.1)
    view = data_view.tokenized_view(values, n=60)
    assert "**51 samples** (46 to train, 5 to evaluate)" in view, view[:2000]
    for system in (lf.SYSTEM["lf_alpaca_cols"], lf.SYSTEM["lf_sharegpt_cols"]):
        assert f"&lt;&#124;im_start&#124;&gt;system↵<br>{system}" in view
    assert "<mark>tac&lt;&#124;im_end&#124;&gt;↵<br></mark>" in view  # custom tags: the answer is what is learned
    assert "You are Qwen" in view  # the template's default system prompt where the data has none
    checked, state, message = handlers.start(values, [], runner.JobManager(index=index))
    assert state is not None and checked.ok, message
    mgr = runner.JobManager(index=index)
    st = wait_until(lambda: (s := mgr.state(state.run_dir)) is not None and not s.active and s, 600, "the page's run")
    assert st.status == "finished", (st.message, (Path(state.run_dir) / record.LOG_FILE).read_text()[-3000:])
    built = [e for e in record.read_events(Path(state.run_dir) / record.EVENTS_FILE) if e["event"] == "data"]
    assert built and not any(e["built"] for e in built)  # the preview had tokenized it: the run read the cache
    assert os.path.isfile(Path(state.run_dir) / record.RESULT_FILE)
