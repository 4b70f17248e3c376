"""After a run: inspect, consolidate a ZeRO-3 checkpoint, merge a LoRA adapter, reload and answer.

The e2e tests read two runs of the session's bank (tests/bank.py, trained once for the whole suite): a ZeRO-3
full run that saves a checkpoint at its last step, and a LoRA run on the identity set long enough to learn it.
The bad-input tests build their folders by hand and run in a blink.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zeroboard import planner
from zeroboard.cli import main as cli_main
from zeroboard.data import demo
from zeroboard.job import folders, record as events
from zeroboard.job.spec import load_job
from zeroboard.outputs import export, reload
from zeroboard.outputs.inspect import OutputError, inspect

e2e = pytest.mark.e2e


@pytest.fixture()
def zero3_run(bank) -> Path:
    """Full fine-tuning under ZeRO-3 of a model with tied embeddings, with a ZeRO checkpoint at step 10."""
    return bank.get("zero3_full_tied")


@pytest.fixture()
def lora_run(bank) -> Path:
    return bank.get("lora_identity")


def snapshot(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


# --- real runs ------------------------------------------------------------------------------------

@e2e
def test_inspect_says_what_was_saved(zero3_run, lora_run):
    ins = inspect(zero3_run)
    kinds = {(Path(i.path).name, i.kind): i for i in ins.items}
    assert kinds[(zero3_run.name, "full_model")].loadable
    zero = kinds[("checkpoint-10", "zero_checkpoint")]
    assert zero.step == 10 and not zero.loadable and "consolidate" in zero.what
    assert not ins.problems
    lora = inspect(lora_run)
    (item,) = lora.items
    assert item.kind == "lora_adapter" and "needs its base model (cache/demo/model)" in item.what


@e2e
def test_consolidated_zero3_checkpoint_reloads_with_the_same_weights(zero3_run, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    before = snapshot(zero3_run)
    info = export.consolidate(zero3_run, tmp_path / "consolidated")
    assert snapshot(zero3_run) == before  # the run is untouched
    assert info["step"] == 10 and info["parameters"] == info["expected_parameters"]
    assert {"config.json", "tokenizer.json"} <= set(info["copied"])

    assert (tmp_path / "consolidated" / "model.safetensors").is_file()  # DeepSpeed's own conversion, as safetensors
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "consolidated")
    assert loaded.config.tie_word_embeddings and loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    fresh = loaded.state_dict()
    gathered = AutoModelForCausalLM.from_pretrained(zero3_run).state_dict()  # the 16-bit gathered final save
    assert fresh.keys() == gathered.keys()
    for k in fresh:
        assert torch.equal(fresh[k].float(), gathered[k].float()), k

    report = reload.check(tmp_path / "consolidated", ["What is 2 plus 3?"], with_base=False)
    assert report["answers"] == reload.answer(*reload.load(zero3_run), ["What is 2 plus 3?"])  # the same weights answer alike


@e2e
def test_merged_lora_reloads_and_answers_like_the_adapter(lora_run, tmp_path):
    before = snapshot(lora_run)
    info = export.merge(lora_run, tmp_path / "merged")
    assert snapshot(lora_run) == before
    assert info["base_model"] == "cache/demo/model"
    assert not (tmp_path / "merged" / "adapter_config.json").exists()

    prompts = demo.DEMO_PROMPTS
    adapter = reload.answer(*reload.load(lora_run), prompts)
    merged = reload.answer(*reload.load(tmp_path / "merged"), prompts)
    assert merged == adapter


@e2e
def test_check_on_the_tuned_demo_reproduces_the_identity_answers(lora_run, capsys):
    assert cli_main(["check", str(lora_run), "--json", "--prompt", "Who are you?", "--prompt", "你是谁?"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["answers"] == [demo.IDENTITY_ANSWER_EN, demo.IDENTITY_ANSWER_ZH]
    assert report["matches"] == [True, True]
    assert report["base_answers"][0] != demo.IDENTITY_ANSWER_EN
    assert "matches the training answer" in reload.check_text(report)


@e2e
def test_estimate_vs_measured_on_the_demo_runs(zero3_run, lora_run):
    """CPU: the planner's per-process RSS (runtime + states + activations) against the trainer's peak."""
    for run, overrides in ((zero3_run, dict(deepspeed_stage="3", finetuning_type="full",
                                            model_name_or_path=str(zero3_run.parent / "tied-model"))),
                           (lora_run, dict(dataset=["identity"]))):
        plan = planner.estimate(replace(load_job("examples/demo.yaml"), device_type="cpu", **overrides), [])
        measured = max(m["rss_peak_bytes"] for e in events.read_events(run / events.EVENTS_FILE)
                       if e["event"] == "log" for m in e["memory"])
        err = (plan.host_bytes - measured) / measured
        print(f"{run.parent.name}: estimate {plan.host_bytes / 2**30:.3f} GiB, measured {measured / 2**30:.3f} GiB, "
              f"error {err:+.1%}")
        assert abs(err) < 0.25


# --- bad input: a clear message, nothing written --------------------------------------------------

def fake_zero_checkpoint(d: Path, config: dict | None) -> Path:
    (d / "global_step5").mkdir(parents=True)
    (d / "latest").write_text("global_step5")
    (d / folders.CHECKPOINT_MARK).write_text("{}")
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    return d


def test_consolidate_refuses_bad_input_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(OutputError, match="no config.json"):
        export.consolidate(fake_zero_checkpoint(tmp_path / "noconfig", None), out)
    with pytest.raises(OutputError, match="unknown architecture"):  # no model_type: no family to load it as
        export.consolidate(fake_zero_checkpoint(tmp_path / "typeless", {"architectures": ["Whatever"]}), out)
    (tmp_path / "plain").mkdir()
    with pytest.raises(OutputError, match="holds no complete ZeRO checkpoint"):
        export.consolidate(tmp_path / "plain", out)
    llama = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
             "num_attention_heads": 2, "vocab_size": 10}
    run = fake_zero_checkpoint(tmp_path / "run", llama)
    with pytest.raises(OutputError, match="inside the run folder"):
        export.consolidate(run, run / "model")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    with pytest.raises(OutputError, match="not empty"):
        export.consolidate(run, tmp_path / "taken")
    assert not out.exists() and not (run / "model").exists()
    assert (tmp_path / "taken" / "x").read_text() == "mine"


def test_merge_and_check_refuse_bad_input(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "config.json").write_text("{}")
    with pytest.raises(OutputError, match="nothing to merge"):
        export.merge(full, tmp_path / "out")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(OutputError, match="not a local folder with config.json"):
        export.merge(adapter, tmp_path / "out")
    assert not (tmp_path / "out").exists()

    (tmp_path / "empty").mkdir()
    with pytest.raises(OutputError, match="holds no result, model or checkpoint"):
        inspect(tmp_path / "empty")
    ckpt_only = tmp_path / "ckpt_only"
    fake_zero_checkpoint(ckpt_only / "checkpoint-5", {"model_type": "llama"})
    with pytest.raises(OutputError, match="holds a ZeRO checkpoint, not a model: consolidate it first"):
        reload.check(ckpt_only)
    ins = inspect(ckpt_only)
    assert ins.problems and "did not finish" in ins.problems[0]


def test_cli_check_reports_errors_as_json(tmp_path, capsys):
    assert cli_main(["check", str(tmp_path / "nowhere"), "--json"]) == 1
    assert "not a folder" in json.loads(capsys.readouterr().out)["error"]


def test_the_output_check_and_the_runs_tab_say_the_same_train_loss(tmp_path):
    """The trainer's train_loss (result.json) is the mean over the run; both the Runs tab and the output check call
    the last logged step's loss a run's train loss, and the check names the mean as the mean."""
    from helpers import synthetic_run
    from zeroboard import words
    from zeroboard.runs.manager import JobManager
    from zeroboard.webui import runs_view

    run = synthetic_run(tmp_path / "run", tmp_path / "runs.json")
    (run / events.RESULT_FILE).write_text(json.dumps({"kind": "lora_adapter", "global_step": 60, "train_loss": 0.6278,
                                                      "deepspeed_stage": "2", "base_model": "cache/demo/model"}))
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "cache/demo/model"}))
    (run / "adapter_model.safetensors").write_bytes(b"")  # what the check lists; its weights are not the subject
    last = events.last_loss(events.read_events(run / events.EVENTS_FILE))
    assert last is not None and f"{last:.4f}" != "0.6278"
    listed = runs_view.listing(JobManager(index=tmp_path / "runs.json")).rows
    assert listed[0][words.headers("runs", "en").index("train loss")] == f"{last:.4f}", listed
    for lang in ("en", "zh"):
        said = inspect(run).text(lang)
        assert f"loss {last:.4f}" in said and "0.6278" in said, said
