"""The memory planner: parameter counts, LoRA sizes, ZeRO formulas, activations, verdicts, bad input.

Fast: no training. The H200 figures are the reference doc's table and this
project's own runs of the real trainer (benchmarks/planner_accuracy.py --gpu-matrix).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from helpers import as_measured_before_26, liger_installed  # noqa: E402
from zeroboard import planner, words
from zeroboard.job import record as runrecord
from zeroboard.job.devices import Gpu
from zeroboard.job.placement import offloads_parameters
from zeroboard.job.spec import JobSpec
from zeroboard.planner import activations, memory, record as plan_record, report, shapes, states as plan_states


@pytest.fixture(autouse=True)
def _liger_layout(monkeypatch):
    """Plans are made as on the H200: Liger installed, its layout as tests/helpers.LIGER_LAYOUT has it."""
    liger_installed(monkeypatch)


GIB = 1 << 30
TINY = dict(model_type="llama", hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, vocab_size=10, tie_word_embeddings=False)
LLAMA_1B = dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False)


def h200(free_gib: float = 139, n: int = 1) -> list[Gpu]:
    return [Gpu(i, "NVIDIA H200", 143 * GIB, int(free_gib * GIB), 0, 0, (9, 0)) for i in range(n)]


def job(**kw) -> JobSpec:
    base = dict(precision="bf16", per_device_train_batch_size=8, cutoff_len=1024, lora_rank=16)
    return JobSpec(**{**base, **kw})


# --- the model from config.json ------------------------------------------------------------

def test_tiny_llama_parameters_by_hand():
    shape = planner.shape_from_config(TINY)
    # head_dim 4; per layer q 8x8 + k 8x4 + v 8x4 + o 8x8 + gate/up/down 3 x 8x16 + 2 norms of 8
    per_layer = 64 + 32 + 32 + 64 + 3 * 128 + 16
    assert shape.layer_params == per_layer == 592
    assert shape.params == 10 * 8 + 2 * per_layer + 8 + 10 * 8 == 1352
    tied = planner.shape_from_config({**TINY, "tie_word_embeddings": True})
    assert tied.params == 1352 - 80


def test_lora_parameters_by_hand():
    shape = planner.shape_from_config(TINY)
    # r x (in + out) per adapted linear: q 2x16, k 2x12, v 2x12, o 2x16, gate/up/down 2x24 each; two layers
    assert shapes.lora_params(shape, 2, ["all"]) == 2 * (32 + 24 + 24 + 32 + 3 * 48) == 512
    assert shapes.lora_params(shape, 2, ["q_proj", "v_proj"]) == 2 * (32 + 24) == 112
    # the reference table's LoRA: r16 on every linear of the 1.1B Llama
    assert shapes.lora_params(planner.shape_from_config(LLAMA_1B), 16, ["all"]) == 12_615_680


CONFIGS = {
    "llama": LLAMA_1B,
    "qwen2": dict(model_type="qwen2", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=300, tie_word_embeddings=True),
    "qwen3": dict(model_type="qwen3", hidden_size=64, intermediate_size=160, num_hidden_layers=2, head_dim=32,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False),
    "gemma": dict(model_type="gemma", hidden_size=64, intermediate_size=160, num_hidden_layers=2, head_dim=16,
                  num_attention_heads=4, num_key_value_heads=1, vocab_size=300),
    "mistral": dict(model_type="mistral", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, vocab_size=300),
    "gpt_bigcode": dict(model_type="gpt_bigcode", n_embd=64, n_layer=2, n_head=4, vocab_size=300, n_positions=128),
    "phi": dict(model_type="phi", hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, vocab_size=300),
    "starcoder2": dict(model_type="starcoder2", hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=300),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameter_count_matches_transformers(name):
    """Count on the meta device (no memory): the planner must agree with the real module tree."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(CONFIGS[name])
    hf = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    expected = sum(p.numel() for p in model.parameters())  # shared (tied) tensors count once
    assert planner.shape_from_config(CONFIGS[name]).params == expected


def test_unknown_architecture_and_missing_config_are_clear(tmp_path):
    with pytest.raises(shapes.Untraced, match="'mamba'.*not one of the families derived by hand.*traced") as e:
        planner.shape_from_config({"model_type": "mamba", "architectures": ["MambaForCausalLM"]})
    assert e.value.config["model_type"] == "mamba"  # what the tracer builds the model from
    with pytest.raises(planner.PlanError, match="unknown architecture.*'\\(missing\\)'.*knows.*llama"):
        planner.shape_from_config({"hidden_size": 64})
    with pytest.raises(planner.PlanError, match="has no config.json"):
        planner.read_model(tmp_path)
    with pytest.raises(planner.PlanError, match="has no config.json"):
        planner.estimate(JobSpec(model_name_or_path=str(tmp_path)), [])
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(planner.PlanError, match="cannot be read as JSON"):
        planner.read_model(tmp_path)


def test_reads_a_model_folder_and_its_checkpoint_size(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "dtype": "bfloat16"}))
    shape = planner.read_model(tmp_path)
    assert shape.params == 1352 and shape.checkpoint_bytes == 2 * 1352
    (tmp_path / "model.safetensors").write_bytes(b"x" * 5000)
    assert planner.read_model(tmp_path).checkpoint_bytes == 5000


# --- model states: the guide's formulas --------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_zero_formulas_against_device_count(n):
    shape = planner.shape_from_config(LLAMA_1B)
    psi = shape.params
    base = memory.Setup("full", "none", False, False, n, "cuda", "bf16", 1, 8, False)

    def states(stage, off=False):
        s = dataclasses.replace(base, stage=stage, offload_optimizer=off, offload_param=offloads_parameters(stage, off))
        return plan_states.states(shape, s, psi, psi)

    z2 = states("2")  # 2Ψ + 14Ψ/N: 16-bit weights everywhere; grads and fp32 master + Adam split
    assert z2.weights == 2 * psi and z2.optimizer == 12 * psi // n and z2.grads_end == 2 * psi // n
    # the step flattens the 16-bit gradient partition (2Ψ/N) and converts it to fp32 (4Ψ/N): 2Ψ + 20Ψ/N at its peak
    assert z2.weights + z2.optimizer + z2.grads_end + z2.step_extra == pytest.approx(2 * psi + 20 * psi / n, abs=8)
    assert z2.backward == 2 * 2 * 500_000_000  # two reduce buckets of the preset's 5e8 elements, in bf16
    z3 = states("3")  # 16Ψ/N, plus the norms every GPU keeps whole and one reduce bucket of H² elements
    small = 2 * (22 * 2 * 2048 + 2048)  # bytes: kept whole among the buffers, so not in the partitions
    assert z3.weights + z3.optimizer + z3.grads == pytest.approx(16 * psi / n - small / n, abs=8)
    assert z3.buffers == plan_states.WORKSPACE + small + 2 * 2048 * 2048
    # ZeroBoard without DeepSpeed, fp32 master weights: fp32 weights + Adam; fp32 grads until the step
    none = plan_states.states(shape, dataclasses.replace(base, master_weights="fp32"), psi, psi)
    assert none.weights + none.optimizer + none.grads_end == 16 * psi
    assert none.buffers - plan_states.WORKSPACE == (0 if n == 1 else 4 * psi)  # DDP's gradient buckets
    # the default: split master weights on one process (bf16 weights and gradients, fp32 moments, 16-bit remainders);
    # several processes keep the fp32 master copy (DDP would average bf16 gradients)
    auto = states("none")
    assert auto.weights + auto.optimizer + auto.grads_end == (14 * psi if n == 1 else 16 * psi)
    off = states("2", off=True)
    assert off.optimizer == 0 and off.host >= 16 * psi // n  # fp32 master, grads and AdamW on the host, pinned
    assert off.host == 2 * plan_states.pow2(4 * psi // n) + plan_states.pow2(2 * psi // n) + 8 * psi // n \
        + plan_states.pow2(2 * shape.largest_param)


def test_lora_trains_only_the_adapter():
    shape = planner.shape_from_config(LLAMA_1B)
    lora = planner.estimate(job(finetuning_type="lora"), h200(), model=shape)
    assert lora.trainable == 12_615_680 and lora.params == shape.params + lora.trainable
    assert lora.breakdown["optimizer states"] == 8 * lora.trainable  # fp32 Adam moments of the adapter only
    assert lora.breakdown["weights"] == 2 * shape.params + 4 * lora.trainable  # bf16 base + fp32 adapter (no DeepSpeed)
    old = planner.estimate(job(finetuning_type="lora", master_weights="fp32"), h200(), model=shape)
    assert old.breakdown["weights"] == 4 * old.params  # fp32 base + fp32 adapter (the old default)


# --- activations: bytes saved per token and layer --------------------------------------------

def test_activation_bytes_per_token_and_layer():
    """Derived op by op; each equals what torch.autograd.graph.saved_tensors_hooks counted."""
    shape = planner.shape_from_config(LLAMA_1B)
    h, kv, inter, heads, r = 2048, 256, 5632, 32, 16

    def per(kind, lora=False, **kw):
        return activations.layer_act_bytes(shape, activations.ActMode(kind, lora, **kw), ["all"], r)

    # norms 2 x (4h fp32 copy + 2h normalized + 2h out), q/k/v/out 4h + 4kv, MLP 4 x 2I, logsumexp, rsqrt
    assert per("pure16") == 20 * h + 4 * kv + 8 * inter + 4 * heads + 8 == 87_176
    assert per("autocast") == 30 * h + 4 * kv + 8 * inter + 4 * heads + 8 == 107_656
    assert per("fp32") == 32 * h + 8 * kv + 16 * inter + 4 * heads + 8 == 157_832
    assert per("pure16", True) == 16 * h + 4 * kv + 8 * inter + 4 * heads + 7 * 2 * r + 8
    assert per("autocast", True) == 95_592
    assert per("fp32", True) == 141_896
    z3 = per("pure16", True, adapters32=True, saves_frozen_inputs=True)
    assert z3 == 40 * h + 4 * kv + 12 * inter + 4 * heads + 7 * 4 * r + 8


def test_gradient_checkpointing_cuts_activations():
    shape = planner.shape_from_config(LLAMA_1B)
    plain = planner.estimate(job(deepspeed_stage="2"), h200(), model=shape)
    ckpt = planner.estimate(job(deepspeed_stage="2", gradient_checkpointing=True), h200(), model=shape)
    assert ckpt.breakdown["activations"] < plain.breakdown["activations"] / 3
    assert ckpt.peak_bytes < plain.peak_bytes


# --- against the H200 -------------------------------------------------------------------------------

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
H200 = [Gpu(0, "NVIDIA H200", 143771 << 20, 139 * GIB, 0, 0, (9, 0))]


def calibration_rows() -> list[dict]:
    return json.loads((RESULTS / "planner_calibration.json").read_text())["rows"]


@pytest.mark.parametrize("row", calibration_rows(), ids=lambda r: f"{r['model']}-{r['seq']}-{r['config']}")
def test_calibration_runs_within_two_percent(row, monkeypatch):
    """benchmarks/planner_heldout.py's calibration set, measured on an H200 through the real trainer."""
    sys.path.insert(0, str(RESULTS.parent))
    import planner_heldout as bench

    liger_installed(monkeypatch, row["speedups"]["liger"])
    spec = bench.job_of(row["model"], row["seq"], row["micro_batch"], row["config"], Path("/tmp"), 4, False)
    spec = as_measured_before_26(monkeypatch, spec)
    plan = planner.estimate(spec, H200, model=planner.shape_from_config(bench.MODELS[row["model"]][1]))
    assert plan.peak_bytes / GIB == pytest.approx(row["torch_peak_gib"], rel=0.02)
    if bench.parse_config(row["config"])["fixed_segments"]:
        return  # ZeroBoard's jobs use expandable segments; this run shows what happens without them
    assert row["nvml_peak_gib"] <= plan.needed_bytes / GIB <= 1.15 * row["nvml_peak_gib"]


@pytest.mark.parametrize("row", json.loads((RESULTS / "h200.json").read_text())["rows"], ids=lambda r: r["config"])
def test_the_first_h200_matrix_within_six_percent(row, monkeypatch):
    """benchmarks/results/h200.json: the 1.1 B Llama, micro-batch 8 x 1024, every sample full (no attention mask)."""
    ft, rest = row["config"].split("-", 1)
    stage, offload = rest.split("+")[0], "offload" in rest
    spec = as_measured_before_26(monkeypatch, job(finetuning_type=ft, deepspeed_stage=stage, offload=offload,
                                                  liger_kernel="on"))
    plan = planner.estimate(spec, H200, model=planner.shape_from_config(LLAMA_1B))
    unmasked = memory.plan_one(plan.model, dataclasses.replace(plan.setup, masked=False))
    assert unmasked.peak_bytes / GIB == pytest.approx(row["zeroboard"]["torch_peak_gib"], rel=0.06)


def test_the_held_out_rows_are_what_the_results_file_says():
    """planner_heldout.json: every valid row's estimate is the frozen planner's; the goals are reported, not assumed."""
    data = json.loads((RESULTS / "planner_heldout.json").read_text())
    valid = [r for r in data["rows"] if "invalid" not in r]
    families = {r["family"] for r in valid}
    assert len(families) >= 2 and {r["seq"] for r in valid} == {1024, 4096}
    for r in valid:
        assert r["error"] == pytest.approx(r["estimate_gib"] / r["torch_peak_gib"] - 1)
        assert abs(r["error"]) <= 0.10, r


# benchmarks/results/h200-x2.json: full fine-tuning, Liger on, full-length samples (no mask); torch peak per GPU on
# 2 GPUs, and how much less that is than the same config on 1 GPU (benchmarks/results/h200.json)
MEASURED_TWO_GPUS = {"2": 20.30, "3": 23.12}
SAVED_PER_GPU = {"2": 6.15, "3": 6.33}


@pytest.mark.parametrize("stage", list(MEASURED_TWO_GPUS))
def test_two_h200_rows_within_ten_percent_and_smaller_per_gpu(stage, monkeypatch):
    monkeypatch.setattr("zeroboard.job.modelinfo.installed", lambda module: True)  # Liger was installed there
    as_measured_before_26(monkeypatch)
    shape = planner.shape_from_config(LLAMA_1B)

    def peak(**kw):
        plan = planner.estimate(job(deepspeed_stage=stage, finetuning_type="full", liger_kernel="auto", **kw),
                                h200(n=kw.get("num_processes", 1)), model=shape)
        return memory.plan_one(shape, dataclasses.replace(plan.setup, masked=False))

    two, one = peak(num_processes=2), peak()
    assert two.peak_bytes / GIB == pytest.approx(MEASURED_TWO_GPUS[stage], rel=0.10)
    # what the second GPU takes over is the sharded model states; the activations stay per GPU
    assert (one.peak_bytes - two.peak_bytes) / GIB == pytest.approx(SAVED_PER_GPU[stage], rel=0.10)
    assert two.activation_detail["layers"] == one.activation_detail["layers"]


# --- verdict and recommendation -------------------------------------------------------------------

def test_recommends_the_fastest_setting_that_fits_on_one_gpu(monkeypatch):
    liger_installed(monkeypatch, False)  # the figures below are the plain path's
    shape = planner.shape_from_config(LLAMA_1B)
    roomy = planner.estimate(job(finetuning_type="full"), h200(139), model=shape)
    assert roomy.fits and roomy.recommendation.startswith("keep no DeepSpeed")
    tight = planner.estimate(job(finetuning_type="full"), h200(30), model=shape)
    assert tight.fits is False
    assert tight.recommendation.startswith("use no DeepSpeed + gradient checkpointing")  # +40% beats offload's 4.5x
    off = planner.estimate(job(finetuning_type="full", gradient_checkpointing=True, per_device_train_batch_size=32),
                           h200(32), model=shape)
    assert off.recommendation.startswith("use ZeRO-2 + offload")  # 28.5 GiB needed: with room in 32
    squeezed = planner.estimate(job(finetuning_type="full", gradient_checkpointing=True, per_device_train_batch_size=32),
                                h200(30), model=shape)
    # HF's loss buffers are freed before ZeRO-2's buckets appear (the first gradient hook): it still fits with room
    assert squeezed.recommendation.startswith("use ZeRO-2 + offload")
    by = {report.setting_words(r, "en"): r for r in tight.alternatives}
    assert by["ZeRO-2"]["peak_bytes"] < by["ZeRO-3"]["peak_bytes"]  # one GPU: ZeRO-3 saves nothing
    hopeless = planner.estimate(job(finetuning_type="full", cutoff_len=65536), h200(30), model=shape)
    assert hopeless.recommendation.startswith("nothing fits")


def test_zero_savings_show_with_several_gpus():
    shape = planner.shape_from_config(LLAMA_1B)
    one = planner.estimate(job(deepspeed_stage="3", finetuning_type="full"), h200(30, 1), model=shape)
    eight = planner.estimate(job(deepspeed_stage="3", finetuning_type="full"), h200(30, 8), model=shape)
    assert eight.setup.world == 8 and eight.peak_bytes < one.peak_bytes - 10 * GIB
    assert eight.fits and not one.fits
    plan = planner.estimate(job(finetuning_type="full"), h200(31, 8), model=shape)
    assert plan.recommendation.startswith("use ZeRO-2:")  # 8 GPUs: 2Ψ+14Ψ/N fits where 16Ψ does not


def test_selected_gpus_decide_the_verdict():
    shape = planner.shape_from_config(LLAMA_1B)
    gpus = [Gpu(0, "H200", 143 * GIB, 139 * GIB, 0, 0, (9, 0)), Gpu(1, "H200", 143 * GIB, 10 * GIB, 0, 0, (9, 0))]
    assert planner.estimate(job(gpu_ids=[0]), gpus, model=shape).fits
    assert planner.estimate(job(gpu_ids=[0, 1]), gpus, model=shape).fits is False


def test_cpu_processes_plan_per_process_ram():
    shape = planner.shape_from_config(TINY)
    plan = planner.estimate(JobSpec(device_type="cpu", num_processes=2, deepspeed_stage="3"), [],
                            model=shape, host_available=8 * GIB)
    assert plan.setup.device == "cpu" and plan.setup.world == 2 and plan.setup.precision == "fp32"
    assert plan.capacity_bytes == 4 * GIB and plan.fits
    assert plan.host_bytes > memory.CPU_RUNTIME_DS > plan.peak_bytes
    assert "RSS" in report.render_markdown(plan) and not plan.alternatives


def test_markdown_explains_the_formula_and_the_activations():
    shape = planner.shape_from_config(LLAMA_1B)
    texts = {stage: report.render_markdown(planner.estimate(job(deepspeed_stage=stage), h200(), model=shape))
             for stage in ("none", "2", "3")}
    assert "**16Ψ**" in texts["none"] and "autocast" in texts["none"]
    assert "**2Ψ+14Ψ/N**" in texts["2"] and "N = 1 nothing is split" in texts["2"]
    assert "**16Ψ/N**" in texts["3"]
    assert "Activations dominate" in texts["2"] and "Recommendation" in texts["2"]
    short = planner.estimate(job(deepspeed_stage="2", cutoff_len=64, per_device_train_batch_size=1), h200(),
                             model=shape)
    assert "Activations dominate" not in report.render_markdown(short)
    assert json.dumps(short.to_dict())  # the web UI and the run record take it as JSON


def test_custom_deepspeed_file_sets_the_stage(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                     "offload_param": {"device": "cpu"}}}))
    plan = planner.estimate(job(deepspeed=str(cfg)), h200(), model=planner.shape_from_config(LLAMA_1B))
    assert plan.setup.stage == "3" and plan.setup.offload_param and plan.formula == "16Ψ/N"


def test_run_record_keeps_estimate_and_measurement(tmp_path):
    from zeroboard.job.record import EventWriter

    shape = planner.shape_from_config(LLAMA_1B)
    plan = planner.estimate(job(deepspeed_stage="2", finetuning_type="full"), h200(), model=shape)
    plan_record.save_plan(plan, tmp_path)
    w = EventWriter(tmp_path, 0)
    measured = int(plan.peak_bytes * 0.995)
    w.emit("log", step=5, memory=[{"rank": 0, "rss_peak_bytes": 3 * GIB, "torch_peak_bytes": measured - GIB,
                                   "nvml_peak_bytes": 45 * GIB}])
    w.emit("log", step=10, memory=[{"rank": 0, "rss_peak_bytes": 3 * GIB, "torch_peak_bytes": measured}])
    cmp = plan_record.measured_vs_estimate(tmp_path)
    assert cmp["what"] == "torch_peak_bytes" and cmp["estimate_bytes"] == plan.peak_bytes
    (rank,) = cmp["ranks"]
    assert rank["measured_bytes"] == measured and abs(rank["error"]) < 0.01 and cmp["worst_error"] == rank["error"]
    assert rank["nvml_peak_bytes"] == 45 * GIB and rank["nvml_error"] < 0
    assert plan_record.measured_vs_estimate(tmp_path / "nothing") is None


def test_plan_command(tmp_path, capsys):
    import argparse

    from zeroboard.cli.jobs import cmd_plan

    args = argparse.Namespace(job=None, set=[f"model_name_or_path={tmp_path}"], json=False, lang=None, allow_path=[], fit=False)
    assert cmd_plan(args) == 2
    assert "has no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    args = argparse.Namespace(job=None, set=[f"model_name_or_path={tmp_path}", "device_type=cpu",
                                             "finetuning_type=full"], json=True, lang=None, allow_path=[], fit=False)
    assert cmd_plan(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == 1352 and out["setting"] == "no DeepSpeed" and out["fits"] is True
    args.json, args.lang = False, "zh"
    assert cmd_plan(args) == 0
    assert capsys.readouterr().out.startswith("### 内存估算:不用 DeepSpeed,")  # CPU processes: host memory


def test_web_panel_and_launch_record_never_raise(tmp_path):
    assert "fix the marked fields" in planner.panel(None, [])
    assert "unavailable" in planner.panel(JobSpec(model_name_or_path=str(tmp_path / "none")), [])
    assert plan_record.record_plan(JobSpec(model_name_or_path=str(tmp_path / "none")), tmp_path / "run", []) is None
    assert not (tmp_path / "run").exists()
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY))
    spec = JobSpec(model_name_or_path=str(tmp_path / "m"), device_type="cpu")
    assert planner.panel(spec, []).startswith("### Memory plan")
    assert plan_record.record_plan(spec, tmp_path / "run", []) is not None
    assert json.loads((tmp_path / "run" / runrecord.PLAN_FILE).read_text())["setup"]["device"] == "cpu"


def test_planner_and_inspect_stay_light():
    """The web server imports both: neither may pull in torch, transformers, peft or DeepSpeed."""
    import subprocess
    import sys

    code = ("import sys, zeroboard.planner, zeroboard.outputs.inspect; "
            "print([m for m in ('torch', 'transformers', 'peft', 'deepspeed') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_pure_bf16_and_the_fused_loss_shrink_the_plan(monkeypatch):
    shape = planner.shape_from_config(LLAMA_1B)
    liger_installed(monkeypatch, False)  # as on a GPU machine without liger-kernel
    base = planner.estimate(job(finetuning_type="full"), h200(), model=shape)
    pure = planner.estimate(job(finetuning_type="full", pure_bf16=True), h200(), model=shape)
    # no fp32 master weights, bf16 AdamW states and gradients: 8 bytes per parameter instead of 16
    assert pure.breakdown["weights"] + pure.breakdown["optimizer states"] == 6 * pure.params
    assert base.breakdown["weights"] + base.breakdown["optimizer states"] == 12 * base.params
    assert "pure bf16" in report.formula_text(pure) and report.formula_text(pure).startswith("**8Ψ**")
    liger_installed(monkeypatch)
    fused = planner.estimate(job(finetuning_type="full", liger_kernel="auto"), h200(), model=shape)
    assert fused.setup.fused_loss and not base.setup.fused_loss
    assert fused.activation_detail["loss_forward"] < base.activation_detail["loss_forward"] / 5
    z3 = planner.estimate(job(finetuning_type="full", liger_kernel="on", deepspeed_stage="3"), h200(), model=shape)
    assert not z3.setup.fused_loss  # ZeRO-3 keeps Liger's loss off (the head is sharded)
    z3_off = planner.estimate(job(finetuning_type="full", liger_kernel="on", deepspeed_stage="3", offload=True), h200(),
                              model=shape)
    says = "at new addresses from one step to the next"
    assert any(says in n for n in z3_off.notes) and not any(says in n for n in z3.notes + fused.notes)


def test_eager_attention_keeps_the_attention_weights():
    """Eager attention keeps H x T scores per token (the fp32 softmax and the 16-bit probabilities) and the repeated
    k and v instead of SDPA's own k, v and log-sum-exp: +34.18 GiB measured on the H200 (h200_speedups.json, full
    rows, fp32 master + autocast, micro-batch 8 x 1024)."""
    shape = planner.shape_from_config(LLAMA_1B)

    def plan(**kw):
        p = planner.estimate(job(finetuning_type="full", **kw), h200(), model=shape)
        return memory.plan_one(shape, dataclasses.replace(p.setup, masked=False))  # full rows: no padding

    sdpa, eager = plan(attn_implementation="sdpa"), plan(attn_implementation="eager")
    t, seq, q, kv, heads = 8 * 1024, 1024, 2048, 256, 32
    per_token = heads * seq * (4 + 2) + 2 * (4 * q) - (2 * (2 * q + 2 * kv) + 4 * heads)
    extra = eager.activation_detail["layers"] - sdpa.activation_detail["layers"]
    assert extra == t * 22 * per_token
    assert extra / GIB == pytest.approx(69.62 - 35.44, rel=0.01)
    ckpt = [plan(attn_implementation=a, gradient_checkpointing=True).activation_detail["recompute"]
            for a in ("sdpa", "eager")]
    assert ckpt[1] - ckpt[0] == t * per_token  # one layer at a time is recomputed


def test_a_model_without_sdpa_is_planned_with_its_eager_default():
    gemma2 = planner.shape_from_config(dict(model_type="gemma2", hidden_size=2304, intermediate_size=9216,
                                            num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                                            head_dim=256, vocab_size=256000))
    assert gemma2.eager_default and gemma2.attn_softcap and gemma2.final_softcap  # the config class's defaults
    auto = planner.estimate(job(finetuning_type="full"), h200(), model=gemma2)
    eager = planner.estimate(job(finetuning_type="full", attn_implementation="eager"), h200(), model=gemma2)
    assert auto.setup.eager_attention and auto.peak_bytes == eager.peak_bytes
    llama = planner.shape_from_config(LLAMA_1B)
    assert not planner.estimate(job(finetuning_type="full"), h200(), model=llama).setup.eager_attention


# --- the plan in Chinese ------------------------------------------------------------------------

def _figures(text: str) -> list[str]:
    return sorted(re.findall(r"\d[\d,]*\.\d+", text))


@pytest.mark.parametrize("kw", [dict(finetuning_type="full"), dict(finetuning_type="lora", deepspeed_stage="3", offload=True),
                                dict(finetuning_type="full", deepspeed_stage="2", num_processes=2),
                                dict(finetuning_type="full", pure_bf16=True)])
def test_the_chinese_plan_has_the_same_figures_and_no_english_sentences(kw):
    shape = planner.shape_from_config(LLAMA_1B)
    plan = planner.estimate(job(**kw), h200(30, n=kw.get("num_processes", 1)), model=shape)
    en, zh = report.render_markdown(plan), report.render_markdown(plan, "zh")
    assert _figures(zh) == _figures(en)
    assert zh.startswith("### 显存估算:") and "峰值出现在" in zh
    for english in ("Memory plan", "Peak at", "Activations", "fits", "Recommendation", "per GPU", "every GPU", "split"):
        assert english not in zh, english


def test_the_chinese_plan_names_the_advice_and_every_note():
    plan_keys = [k for k in words.CATALOG if k.startswith("plan.")]
    assert all(words.text(k, "zh") for k in plan_keys) and {f"plan.phase.{p}" for p in memory.PHASES} <= set(plan_keys)
    tight = planner.estimate(job(finetuning_type="full", master_weights="fp32"), h200(30),
                             model=planner.shape_from_config(LLAMA_1B))
    no_ds = {"stage": "none", "offload": False}
    said = {k: v for k, v in tight.advice.items() if k not in ("compared", "speed")}  # the step times: test_speed.py
    assert said == {"kind": "use", "setting": {**no_ds, "gradient_checkpointing": True, "new_checkpointing": True},
                    "current": {**no_ds, "gradient_checkpointing": False, "new_checkpointing": False},
                    "current_fits": False, "current_tight": False}
    assert tight.advice["speed"] == {"source": "measured", "gpu": "NVIDIA H200"}
    assert "**建议**:改用「不用 DeepSpeed + 梯度检查点」" in report.render_markdown(tight, "zh")
    assert "use no DeepSpeed + gradient checkpointing" in tight.recommendation
    cpu = planner.estimate(job(device_type="cpu", num_processes=2, deepspeed_stage="2", precision="fp32"), [],
                           model=planner.shape_from_config(TINY))
    zh = report.render_markdown(cpu, "zh")
    assert "2 个 CPU 进程" in zh and "GPU" not in zh.replace("CPU", "")
    assert planner.panel(None, [], "zh").startswith("*内存估算")  # no GPU: the host memory
    assert planner.panel(None, h200(30), "zh").startswith("*显存估算")


def test_verdict_refuses_sure_misses_and_warns_when_headroom_is_small(tmp_path):
    from zeroboard.planner import verdict as v
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_1B))
    spec = job(model_name_or_path=str(tmp_path), finetuning_type="full")
    need = planner.estimate(spec, h200()).needed_bytes / GIB
    assert v.verdict(spec, h200(need / 0.80)) is None  # 20% headroom: quiet
    field, msg, is_error = v.verdict(spec, h200(need / 0.96))  # 4% headroom: a warning, not a refusal
    assert field == "per_device_train_batch_size" and not is_error and "headroom" in msg
    assert v.verdict(spec, h200(need / 1.1))[2] is False  # 10% short: may still fit, warned
    assert v.verdict(spec, h200(need / 1.4))[2] is True  # 40% short: refused
