"""Preference rows as LLaMA-Factory 0.9.5 makes them (issue 37), without training: the pair cut as one, the KTO tag
and its KL answer (the record before), the data preview showing the pair. Fast: the demo tokenizer only."""

from __future__ import annotations

import json

import pytest

from zeroboard.data import convert, info, tokens
from zeroboard.data.demo import write_demo_data
from zeroboard.job import spec
from zeroboard.training import prefdata, preview
from zeroboard.webui import data_view


def test_a_pair_is_cut_as_llamafactory_cuts_it():
    """The prompt and the longer answer share the cutoff (infer_seqlen); both answers keep the same length."""
    prompt, chosen, rejected = list(range(100)), list(range(100, 130)), list(range(200, 260))
    kept, (c, r) = prefdata.cut(prompt, [chosen, rejected], 64)
    source, target = tokens.lf_lengths(100, 60, 64)
    assert (len(kept), len(c), len(r)) == (source, min(30, target), target)
    assert kept == prompt[:source] and c == chosen[:target] and r == rejected[:target]


def test_the_last_answer_is_the_judged_one():
    ids = list(range(20))
    assert prefdata.split_last(ids, [(3, 6), (10, 15)]) == (ids[:10], ids[10:15])


@pytest.mark.parametrize(("stage", "kind"), [("sft", ""), ("dpo", "pairwise"), ("orpo", "pairwise"),
                                             ("simpo", "pairwise"), ("kto", "kto")])
def test_each_stage_reads_its_rows(stage, kind):
    assert prefdata.kind_of(stage) == kind


def test_ranking_records_read_as_llamafactory_reads_them(tmp_path):
    """alpaca: chosen and rejected text columns; sharegpt: the conversation (a prompt last) and two assistant
    messages; a sharegpt conversation ending with an answer is skipped, as LLaMA-Factory skips it."""
    recs = [{"conversations": [{"from": "human", "value": "q"}], "chosen": {"from": "gpt", "value": "good"},
             "rejected": {"from": "gpt", "value": "bad"}},
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}],
             "chosen": {"from": "gpt", "value": "good"}, "rejected": {"from": "gpt", "value": "bad"}}]
    (tmp_path / "p.json").write_text(json.dumps(recs))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"p": {
        "file_name": "p.json", "ranking": True, "formatting": "sharegpt",
        "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}}}))
    src = info.resolve("p", tmp_path)
    skipped: list = []
    (chat,) = convert.chats(src, recs, skipped=skipped)
    assert chat.messages[-1] == {"role": "assistant", "content": "good"}
    assert chat.extra["rejected"] == {"role": "assistant", "content": "bad"}
    assert [i for i, _ in skipped] == [1]


@pytest.fixture(scope="module")
def demo_data(demo, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # a data cache of this module's own
        mp.setenv("ZEROBOARD_DATA_CACHE", str(tmp_path_factory.mktemp("cache")))
        write_demo_data(spec.DEMO_DATA_DIR)
        yield spec.DEMO_DATA_DIR


def test_kto_rows_carry_the_tag_and_the_answer_before(demo_data):
    from zeroboard.training import dataprep

    job = spec.JobSpec(training_stage="kto", dataset=["demo_kto"])
    tokenizer, _ = preview.tokenizer_for(job)
    rows = dataprep.prepare(job, tokenizer).full
    first, second = rows[0], rows[1]
    assert (first["label"], second["label"]) == (True, False)
    assert second["KL_completion_ids"] == first["completion_ids"]  # the record before's answer
    assert first["KL_completion_ids"] == rows[len(rows) - 1]["completion_ids"]  # the first: the batch's last


def test_the_data_preview_shows_a_pair_and_a_tag(demo_data):
    for stage, dataset, says in (("dpo", "demo_pref", "**rejected:**"), ("kto", "demo_kto", "kto_tag true")):
        job = spec.JobSpec(training_stage=stage, dataset=[dataset])
        md = data_view.markdown(preview.report(job, n=2), "en")
        assert says in md and "<mark>I am ZeroBoard Assistant" in md
    zh = data_view.markdown(preview.report(spec.JobSpec(training_stage="dpo", dataset=["demo_pref"]), n=1), "zh")
    assert "**拒绝:**" in zh
