"""dataset_dir on the hub, as LLaMA-Factory reads it: REMOTE:owner/name (a dataset repository holding the
dataset_info.json, its files fetched into the hub cache) and ONLINE (each name a hub dataset).

Here without the hub: the repository lies in a hub cache of the test's own, as a download leaves it, and
HF_HUB_OFFLINE=1 keeps a miss from trying the network (its message is what a user offline reads)."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers import hub_dataset
from zeroboard import words
from zeroboard.cli import main as cli_main
from zeroboard.data import hubdir, info as datainfo
from zeroboard.data.formats import DataError

REPO_ID = "someone/chat_data"
RECORDS = [{"instruction": f"Question {i}?", "input": "", "output": f"Answer {i}."} for i in range(5)]
INFO = {"mine": {"file_name": "mine.json"},
        "shards": {"file_name": "shards", "formatting": "sharegpt", "columns": {"messages": "conversations"}},
        "on_hub": {"hf_hub_url": "someone/other_data", "subset": "en"}}
TURNS = [{"conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}]}]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_dataset(root, REPO_ID, {"dataset_info.json": json.dumps(INFO), "mine.json": json.dumps(RECORDS),
                                "shards/part-0.json": json.dumps(TURNS), "shards/part-1.json": json.dumps(TURNS)})
    return root


def test_a_remote_folder_reads_its_entries_from_the_hub_cache(cache):
    src = datainfo.resolve("mine", f"REMOTE:{REPO_ID}")
    assert src.load_from == "file" and src.kind == "json"
    assert src.files[0].name == "mine.json" and cache in src.files[0].parents
    folder = datainfo.resolve("shards", f"REMOTE:{REPO_ID}")  # a folder of the repository: every file of it
    assert [p.name for p in folder.files] == ["part-0.json", "part-1.json"] and folder.formatting == "sharegpt"
    hub = datainfo.resolve("on_hub", f"REMOTE:{REPO_ID}")  # an entry naming a hub dataset: loaded at launch
    assert (hub.load_from, hub.hub, hub.subset) == ("hf_hub", "someone/other_data", "en")
    with pytest.raises(DataError, match="not_there"):
        datainfo.resolve("not_there", f"REMOTE:{REPO_ID}")


def test_a_remote_folder_missing_offline_says_how_to_fetch_it(cache):
    with pytest.raises(DataError) as e:
        datainfo.resolve("mine", "REMOTE:someone/never_fetched")
    text = words.tr(e.value.args[0], "en")
    assert "someone/never_fetched" in text and "dataset_info.json" in text
    assert "huggingface-cli download --repo-type dataset someone/never_fetched" in text and "dataset_dir" in text
    with pytest.raises(DataError, match="owner/name"):
        hubdir.local_folder("REMOTE:")


def test_online_takes_each_name_as_a_hub_dataset():
    src = datainfo.resolve("someone/other_data", "ONLINE")
    assert (src.load_from, src.hub, src.formatting) == ("hf_hub", "someone/other_data", "alpaca")


def test_a_job_on_a_remote_folder_validates_and_previews(cache, tmp_path, monkeypatch, demo, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZEROBOARD_WORKSPACE", str(tmp_path))
    shutil.copytree(demo, tmp_path / "model")  # inside the workspace
    job = tmp_path / "job.yaml"
    job.write_text(f"model_name_or_path: model\ndataset_dir: REMOTE:{REPO_ID}\ndataset: mine,shards\n"
                   "template: chatml\noutput_dir: out\nmax_steps: 2\n")
    assert cli_main(["validate", str(job)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert cli_main(["preview", str(job)]) == 0
    assert f"--dataset_dir REMOTE:{REPO_ID}" in capsys.readouterr().out
    job.write_text(job.read_text().replace(REPO_ID, "someone/never_fetched"))
    assert cli_main(["validate", str(job)]) == 2
    err = capsys.readouterr().err
    assert "  dataset_dir:" in err and "someone/never_fetched" in err and "Traceback" not in err, err
