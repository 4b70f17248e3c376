"""End-to-end: real torchrun / deepspeed launchers, 2 CPU processes, DeepSpeed, transformers and peft.

Each run trains the demo for a few steps, must exit 0 with a falling loss, leave
the expected files, and its saved result must reload and generate text.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from zeroboard.data import demo
from zeroboard.job import modelinfo, record as events
from zeroboard.outputs import reload

pytestmark = pytest.mark.e2e

MATRIX = [
    # (stage, offload, finetuning, launcher)
    ("none", False, "lora", "torchrun"),
    ("none", False, "full", "torchrun"),
    ("2", False, "lora", "deepspeed"),
    ("2", False, "full", "torchrun"),
    ("3", False, "lora", "torchrun"),
    ("3", False, "full", "deepspeed"),
    ("2", True, "lora", "torchrun"),
    ("3", True, "full", "torchrun"),
]


def zeroboard(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeroboard.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def train(output_dir, *sets: str, job: str = "examples/demo.yaml") -> subprocess.CompletedProcess:
    flags = [f"--set={s}" for s in (f"output_dir={output_dir}", *sets)]
    return zeroboard("train", job, *flags)


def losses(run_dir) -> list[float]:
    return [e["loss"] for e in events.read_events(run_dir / events.EVENTS_FILE) if e["event"] == "log"]


@pytest.mark.parametrize(("stage", "offload", "ft", "launcher"), MATRIX,
                         ids=[f"{s}{'+offload' if o else ''}-{f}-{l}" for s, o, f, l in MATRIX])
def test_matrix(tmp_path, stage, offload, ft, launcher):
    out = tmp_path / "run"
    lr = "0.005" if ft == "lora" else "0.001"
    p = train(out, f"deepspeed_stage={stage}", f"offload={str(offload).lower()}", f"finetuning_type={ft}",
              f"launcher={launcher}", "max_steps=12", "logging_steps=3", f"learning_rate={lr}")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    evs = events.read_events(out / events.EVENTS_FILE)
    data = sorted((e for e in evs if e["event"] == "data"), key=lambda e: e["rank"])  # each rank's data, first
    assert [e["rank"] for e in data] == [0, 1] and not data[1]["built"]  # rank 1 reads what rank 0 tokenized
    kinds = [e["event"] for e in evs if e["event"] != "data"]
    assert kinds[0] == "start" and kinds[-1] == "end" and "error" not in kinds
    start = next(e for e in evs if e["event"] == "start")
    assert start["world_size"] == 2 and sorted(d["rank"] for d in start["devices"]) == [0, 1]
    logs = [e for e in evs if e["event"] == "log"]
    assert [e["step"] for e in logs] == [3, 6, 9, 12]
    assert logs[-1]["loss"] < logs[0]["loss"], [e["loss"] for e in logs]
    assert all(len(e["memory"]) == 2 and e["memory"][0]["rss_peak_bytes"] > 0 for e in logs)
    assert all(e["tokens_per_sec"] > 0 for e in logs)

    result = json.loads((out / events.RESULT_FILE).read_text())
    assert result["kind"] == ("lora_adapter" if ft == "lora" else "full_model")
    assert result["deepspeed_stage"] == stage and result["offload"]["optimizer"] == offload  # the effective setting
    assert (out / ("adapter_config.json" if ft == "lora" else "config.json")).is_file()
    assert (out / "job.yaml").is_file() and (out / "train.log").is_file() and (out / "command.json").is_file()
    if ft == "lora" and stage != "none":  # job.dstune's LoRA values, as the run used them (trained: the loss fell)
        used = json.loads((out / "ds_config.json").read_text())["zero_optimization"]
        trainable = int(re.search(r"LoRA: (\d+) of", (out / "train.log").read_text()).group(1))  # peft's own count
        assert used["reduce_bucket_size"] == trainable
        if stage == "3":  # decoder layers as leaves (the trainer's input grads let layer 0's adapters train)
            assert used["leaf_module"] == {"classes": ["LlamaDecoderLayer"]} and "stage3_prefetch_bucket_size" in used
    if stage == "none":
        assert not (out / "ds_config.json").exists()
    else:
        used = json.loads((out / "ds_config.json").read_text())
        assert used["zero_optimization"]["stage"] == int(stage)
        assert ("offload_optimizer" in used["zero_optimization"]) == offload
        resolved = json.loads((out / "ds_config.resolved.json").read_text())
        assert resolved["train_micro_batch_size_per_gpu"] == 8 and resolved["train_batch_size"] == 16

    assert_reloads_trained_weights(out)


def assert_reloads_trained_weights(out) -> None:
    """The saved result reloads, answers, and carries the training: its logits differ from the base model's."""
    import torch

    model, tok = reload.load(out)
    base, _ = reload.load("cache/demo/model")
    (text,) = reload.answer(model, tok, ["What is 2 plus 3?"], max_new_tokens=12)
    assert isinstance(text, str)
    ids = tok("What is 2 plus 3?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        tuned, untouched = model(ids).logits.float(), base(ids).logits.float()
    assert not torch.allclose(tuned, untouched, atol=1e-4), "the reloaded model is the base model: training was lost"


def test_default_demo_learns_who_it_is(tmp_path):
    """The README's main job: the loss falls well below its start and the identity answers come back."""
    out = tmp_path / "demo"
    p = train(out)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    curve = losses(out)
    assert curve[-1] < 0.5 * curve[0], curve
    # what the demo promises: the page's identity prompts answered as trained, in their language
    report = reload.check_run(out, demo.DEMO_PROMPTS[:2], with_base=True)
    assert report["answers"] == [demo.IDENTITY_ANSWER_EN, demo.IDENTITY_ANSWER_ZH], report["answers"]
    assert report["base_answers"][0] != demo.IDENTITY_ANSWER_EN  # the base model did not know it


def test_a_failing_rank_is_reported_with_its_rank(tmp_path):
    # a weights file cut short after its header: nothing before launch reads the tensors, every rank fails loading them
    model = tmp_path / "cut-model"
    shutil.copytree("cache/demo/model", model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4000])
    out = tmp_path / "bad"
    p = train(out, f"model_name_or_path={model}", "max_steps=2")
    assert p.returncode != 0
    errs = [e for e in events.read_events(out / events.EVENTS_FILE) if e["event"] == "error"]
    assert {e["rank"] for e in errs} <= {0, 1} and errs
    assert "SafetensorError" in errs[0]["message"], errs[0]


def test_preview_prints_the_command_train_runs(tmp_path):
    out = tmp_path / "prev"
    p = zeroboard("preview", "examples/lora_z2_offload.yaml", f"--set=output_dir={out}", "--json")
    assert p.returncode == 0, p.stderr
    shown = json.loads(p.stdout)
    assert "cache/ds_z2_offload_config.json" in shown["argv"]
    assert "cache/ds_z2_offload_config.json" in shown["shell"]


def test_bad_job_starts_nothing(tmp_path):
    out = tmp_path / "never"
    p = zeroboard("train", "--set=offload=true", "--set=per_device_train_batch_size=0", f"--set=output_dir={out}")
    assert p.returncode == 2
    assert "offload" in p.stderr and "per_device_train_batch_size" in p.stderr
    assert not out.exists()


def test_packing_and_pure_bf16_train_and_reload(tmp_path):
    """Speed-ups on the demo: packed rows and pure bf16 weights still learn and save a loadable adapter."""
    out = tmp_path / "packed"
    p = train(out, "packing=true", "pure_bf16=true", "precision=bf16", "attn_implementation=sdpa", "max_steps=12",
              "logging_steps=3")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    log = (out / "train.log").read_text()
    assert "packed into" in log and "pure bf16" in log
    start = next(e for e in events.read_events(out / events.EVENTS_FILE) if e["event"] == "start")
    assert start["speedups"]["attn_implementation"] == "sdpa" and start["speedups"]["liger"] is False  # no GPU here
    curve = losses(out)
    assert curve[-1] < curve[0], curve
    header = modelinfo.safetensors_header(out / "adapter_model.safetensors")
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}  # the adapter trained in bf16
    assert_reloads_trained_weights(out)


def test_a_fresh_checkout_trains_the_demo_from_the_command_line(tmp_path):
    """The README's command-line path on a machine with no cache/ (under ZeRO-2): the trainer builds the demo model
    and data first, then sizes DeepSpeed's buckets for it, and the run is planned once the model is there."""
    from zeroboard.job import presets

    (tmp_path / "examples").mkdir()
    shutil.copy("examples/demo.yaml", tmp_path / "examples" / "demo.yaml")
    p = subprocess.run([sys.executable, "-m", "zeroboard.cli", "train", "examples/demo.yaml", "--set=max_steps=3",
                        "--set=logging_steps=1", "--set=output_dir=runs/fresh", "--set=deepspeed_stage=2"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "cache/demo/model/config.json").is_file() and (tmp_path / "cache/demo/data/dataset_info.json").is_file()
    assert [e["step"] for e in events.read_events(tmp_path / "runs/fresh" / events.EVENTS_FILE) if e["event"] == "log"] == [1, 2, 3]
    # planned once the run had built the model (at launch the planner found no config.json): the Runs tab's plan
    plan = json.loads((tmp_path / "runs/fresh" / events.PLAN_FILE).read_text())
    assert plan["setup"]["device"] == "cpu" and plan["host_bytes"] > 0, plan
    # the DeepSpeed values ZeroBoard sets for two CPU processes, read from the model it had just built
    used = json.loads((tmp_path / "runs/fresh" / events.DS_CONFIG_FILE).read_text())["zero_optimization"]
    assert used["reduce_bucket_size"] != presets.preset("2", False)["zero_optimization"]["reduce_bucket_size"], used


def test_tensorboard_gets_the_loss_events_jsonl_has(tmp_path):
    """report_to=tensorboard: event files in the run folder, read back with TensorBoard's own reader, hold the losses
    events.jsonl holds; the run and `zeroboard train` say where they are and how to open them; every line the
    trainer wrote carries the format's version and fits the schema."""
    pytest.importorskip("tensorboard")
    import jsonschema
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from zeroboard.job import trackers

    out = tmp_path / "tb"
    p = train(out, "report_to=tensorboard", "max_steps=6", "logging_steps=1")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (where,) = trackers.for_run(out)
    acc = EventAccumulator(where.path)
    acc.Reload()
    board = [(s.step, s.value) for s in acc.Scalars("train/loss")]
    evs = events.read_events(out / events.EVENTS_FILE)
    logged = [(e["step"], float(np.float32(e["loss"]))) for e in evs if e["event"] == "log"]  # TensorBoard keeps float32
    assert board == logged and len(logged) == 6, (board, logged)

    assert evs[0]["event"] == "trackers" and evs[0]["trackers"] == [where.to_dict()]  # first, before the data
    assert json.loads((out / events.RESULT_FILE).read_text())["trackers"] == [where.to_dict()]
    assert where.open in p.stderr  # zeroboard train names it when the run starts
    schema = json.loads(events.SCHEMA_FILE.read_text())
    for line in (out / events.EVENTS_FILE).read_text().splitlines():
        jsonschema.validate(json.loads(line), schema)
        assert json.loads(line)["v"] == events.VERSION


def test_split_master_weights_train_save_and_keep_their_remainders(tmp_path):
    """The new default on one process: bf16 weights, the fp32 masters' low 16 bits in the optimizer (its checkpoint
    keeps them as int16, the moments as fp32), a falling loss, a model that reloads."""
    import torch

    out = tmp_path / "split"
    p = train(out, "finetuning_type=full", "precision=bf16", "num_processes=1", "max_steps=12", "logging_steps=3",
              "save_steps=12", "learning_rate=0.001")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    start = next(e for e in events.read_events(out / events.EVENTS_FILE) if e["event"] == "start")
    assert start["speedups"]["weights"] == "split"
    curve = losses(out)
    assert curve[-1] < curve[0], curve
    state = torch.load(out / "checkpoint-12" / "optimizer.pt", weights_only=False)["state"]
    assert {st["low_bits"].dtype for st in state.values()} == {torch.int16}
    assert {st["exp_avg"].dtype for st in state.values()} == {torch.float32}
    assert_reloads_trained_weights(out)


def test_zero3_on_one_process_runs_the_values_the_preview_named(tmp_path):
    """ZeRO-3 with one process: every parameter whole, each decoder layer one hook unit, overlap off; the run keeps
    the JSON it used and trains."""
    out = tmp_path / "z3"
    p = train(out, "finetuning_type=full", "deepspeed_stage=3", "num_processes=1", "max_steps=6", "logging_steps=3",
              "learning_rate=0.001")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    used = json.loads((out / "ds_config.json").read_text())["zero_optimization"]
    assert used["overlap_comm"] is False and used["leaf_module"] == {"classes": ["LlamaDecoderLayer"]}
    from pathlib import Path

    assert used["stage3_param_persistence_threshold"] == modelinfo.param_count(Path("cache/demo/model"))
    resolved = json.loads((out / "ds_config.resolved.json").read_text())["zero_optimization"]
    assert resolved["stage3_param_persistence_threshold"] == used["stage3_param_persistence_threshold"]
    curve = losses(out)
    assert curve[-1] < curve[0], curve
