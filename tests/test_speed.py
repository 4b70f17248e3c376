"""The step-time model (planner/speed.py) against what was measured on the H200: its constants derived again from
the results files, its ranking and step times on the --fit grids (benchmarks/results/fit_grid.json), the words of
its reasons, and the plan's note on one GPU. CPU only: GPUs are NVML-shaped records, models config dicts."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from helpers import as_measured_before_26, liger_installed  # noqa: E402
from zeroboard import planner, words
from zeroboard.job.devices import Gpu
from zeroboard.job.spec import JobSpec
from zeroboard.planner import reasons, report, speed

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
import heldout_sets as hsets  # noqa: E402
import planner_heldout as harness  # noqa: E402

GIB = 1 << 30
PICK_WITHIN = 0.03  # issue 22: --fit's pick within 3% of the fastest setting a grid measured
# The model's step time against each measured grid row: it reads 6-28% under the measured step on the two grids kept
# (the elementwise work of models without Liger's kernels, and a per-micro-batch cost it does not know: see
# docs/en/gpu-results.md, "The step-time model"); never over. The bounds hold that with a little room, no more.
UNDER, OVER = -0.30, 0.10


@pytest.fixture(autouse=True)
def _liger_layout(monkeypatch):
    """Liger installed as on the H200; the runs replayed here kept fp32 master weights and ran the DeepSpeed presets as
    written (measured before issue 26): the jobs below say master_weights fp32, ZeroBoard's one-GPU values are off."""
    liger_installed(monkeypatch)
    as_measured_before_26(monkeypatch)


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def h200(n: int = 1) -> list[Gpu]:
    return [Gpu(i, "NVIDIA H200", 143771 << 20, 139 << 30, 0, 0, (9, 0)) for i in range(n)]


# --- (b) the constants, derived again from the results files -------------------------------------------------------

def test_measured_constants_are_the_step_components_file():
    c = load("step_components.json")
    assert c["device"] == "NVIDIA H200"
    by_tokens: dict[int, list[float]] = {}
    for m in c["matmul"]:
        by_tokens.setdefault(m["tokens"], []).append(m["tflops"] * 1e12)
    assert [t for t, _ in speed.MATMUL_FLOPS] == sorted(by_tokens)
    for tokens, rate in speed.MATMUL_FLOPS:
        assert rate == pytest.approx(sum(by_tokens[tokens]) / len(by_tokens[tokens]), rel=1e-4), tokens
    for a in c["attention"]:
        assert a["heads"] * a["head_dim"] == speed.ATTENTION_WIDTH
        assert dict(speed.ATTENTION_S[a["masked"]])[a["seq"]] == pytest.approx(a["s_per_sequence"], rel=1e-4)
    assert sum(len(v) for v in speed.ATTENTION_S.values()) == len(c["attention"])
    assert speed.COPY_BYTES_S == pytest.approx(c["copy_gbps"] * 1e9, rel=1e-4)
    assert speed.ADAMW_S == pytest.approx(c["adamw_ns_per_param"] * 1e-9, rel=1e-3)


LLAMA = {**load("h200.json")["model"], "model_type": "llama", "tie_word_embeddings": False}


def matrix_setup(config: str, world: int = 1, liger: str = "on"):
    """A row of the 1.1 B matrix (benchmarks/gpu_matrix.py's job: 8 x 1024, LoRA r16) as the planner sets it up."""
    ft, rest = config.split("-", 1)
    job = JobSpec(model_name_or_path="/x", finetuning_type=ft, cutoff_len=1024, per_device_train_batch_size=8,
                  precision="bf16", lora_rank=16, lora_alpha=32, device_type="cuda", num_processes=world,
                  deepspeed_stage=rest.split("+")[0], offload="offload" in rest, liger_kernel=liger,
                  master_weights="fp32")
    return planner.estimate(job, h200(world), model=planner.shape_from_config(LLAMA)).setup


def rest_of(config_or_setup, measured: float, part: str) -> tuple[float, float]:
    """(what the measured step leaves for ``part`` once the model's other parts are taken off, the model's part)."""
    s = matrix_setup(config_or_setup) if isinstance(config_or_setup, str) else config_or_setup
    t = speed.step_time(planner.shape_from_config(LLAMA), s)
    return measured - (t.seconds - t.parts[part]), t.parts[part]


def test_derived_constants_come_back_from_the_whole_steps():
    """Each constant not timed alone is the measured step minus the model's other parts (docs: gpu-results.md)."""
    matrix = {r["config"]: r["zeroboard"]["step_s"] for r in load("h200.json")["rows"]}
    plain = next(r["step_s"] for r in load("h200_speedups.json")["rows"] if r["variant"].startswith("before"))
    ddp = next(r["zeroboard"]["step_s"] for r in load("h200-x2.json")["rows"] if r["config"] == "full-none")
    for const, config, part in ((speed.TRAFFIC_FUSED, "full-none", "elementwise"),
                                (speed.ZERO_STEP_S, "lora-2", "deepspeed"), (speed.ZERO3_S_PER_PARAM, "full-3", "zero3")):
        left, modelled = rest_of(config, matrix[config], part)
        assert const * left / modelled == pytest.approx(const, rel=0.01), (config, part)
    left, modelled = rest_of(matrix_setup("full-none", liger="off"), plain, "elementwise")
    assert speed.TRAFFIC_PLAIN * left / modelled == pytest.approx(speed.TRAFFIC_PLAIN, rel=0.01)
    left, modelled = rest_of(matrix_setup("full-none", world=2), ddp, "communication")
    assert speed.NCCL_BYTES_S * modelled / left == pytest.approx(speed.NCCL_BYTES_S, rel=0.01)
    for stage in ("2", "3"):  # a fixed cost a step and one per trainable parameter: the full and the LoRA row
        full, lora = (matrix_setup(f"{ft}-{stage}+offload") for ft in ("full", "lora"))
        p_full, p_lora = (planner.plan_one(planner.shape_from_config(LLAMA), s).trainable for s in (full, lora))
        rf = rest_of(full, matrix[f"full-{stage}+offload"], "offload")[0]
        rl = rest_of(lora, matrix[f"lora-{stage}+offload"], "offload")[0]
        per = (rf - rl) / (p_full - p_lora)
        assert (rf - per * p_full, per) == pytest.approx(speed.OFFLOAD_S[stage], rel=0.01), stage


# --- (a) the ranking and the step times on the measured grids ---------------------------------------------------------

GRID = load("fit_grid.json")
GRIDS = sorted({r["grid"] for r in GRID["rows"] if r.get("tokens_per_s")})


def fit_for(grid: str, gpus: list[Gpu], liger: bool) -> list:
    """--fit for the grid's job on ``gpus``, as benchmarks/fit_grid.py --picks asks it."""
    model, seq, ft, batch, _ = hsets.GRIDS[grid]
    job = harness.job_of(model, seq, batch, f"{ft}-none", Path("/tmp/zb-grid"), 10, False)
    job = dataclasses.replace(job, gradient_accumulation_steps=1, liger_kernel="on" if liger else "off",
                              master_weights="fp32")
    return planner.fit(job, gpus, model=planner.shape_from_config(harness.MODELS[model][1]))


def grid_choices(grid: str) -> tuple[list, dict]:
    """--fit for the grid's job on an H200, and the measured rows by setting."""
    measured = [r for r in GRID["rows"] if r["grid"] == grid and r.get("tokens_per_s")]
    liger = any((r.get("speedups") or {}).get("liger") for r in measured)
    by = {(r["stage"], r["offload"], r["mbs"], r["checkpointing"]): r for r in measured}
    return fit_for(grid, h200(), liger), by


def key(c) -> tuple:
    return c.stage, c.offload, c.micro_batch, c.checkpointing


@pytest.mark.parametrize("grid", GRIDS)
def test_among_the_measured_settings_the_model_picks_one_within_3_percent_of_the_fastest(grid):
    choices, by = grid_choices(grid)
    fastest = max(r["tokens_per_s"] for r in by.values())
    ranked = [c for c in choices if key(c) in by]
    assert ranked[0].fits and not ranked[0].tight
    assert by[key(ranked[0])]["tokens_per_s"] >= (1 - PICK_WITHIN) * fastest


@pytest.mark.parametrize("grid", GRIDS)
def test_the_fit_pick_is_within_3_percent_of_the_fastest_measured(grid):
    choices, by = grid_choices(grid)
    pick = choices[0]
    if key(pick) not in by:
        pytest.skip(f"{grid}: --fit picks {key(pick)}, which the grid has not measured (benchmarks/h200_run.sh grid)")
    assert by[key(pick)]["tokens_per_s"] >= (1 - PICK_WITHIN) * max(r["tokens_per_s"] for r in by.values())


H100_GRID = load("fit_grid_h100.json")
H100_WITHIN = 0.10  # the two orders of the H100 grid differ by up to 20% on a row: a pick within 10% is among the fastest


def test_on_an_h100_the_fit_pick_is_measured_and_within_10_percent_of_the_fastest():
    """The H100, a card the speed model only scales from the H200 by its data sheet: the grid whose H200 rows lack
    --fit's pick, measured there whole, in both orders.  --fit's pick for that card (its memory as measured) was
    measured, and its mean over the two orders is within 10% of the fastest setting's (5.3% on 2026-12-07)."""
    gpu = Gpu(0, H100_GRID["gpu"], 81559 << 20, 79 << 30, 0, 0, (9, 0))
    pick = fit_for("starcoder-1b lora 4096 x4", [gpu], liger=False)[0]
    means: dict[tuple, list[float]] = {}
    for r in H100_GRID["rows"]:
        means.setdefault((r["stage"], r["offload"], r["mbs"], r["checkpointing"]), []).append(r["tokens_per_s"])
    assert {len(v) for v in means.values()} == {2}  # every setting in both orders
    assert key(pick) in means, f"--fit picks {key(pick)} on the H100, which its grid has not measured"
    mean = {k: sum(v) / len(v) for k, v in means.items()}
    assert mean[key(pick)] >= (1 - H100_WITHIN) * max(mean.values()), (key(pick), mean)


@pytest.mark.parametrize("grid", GRIDS)
def test_the_fit_pick_meets_the_memory_rule(grid):
    """Issue 22: the pick's "needed" is never below the peak NVML measured for it, and at most 15% over it (Phi-2 full
    at 4 x 2048 was 12.5% under until gelu_new's fp32 tensors under CUDA autocast were planned)."""
    choices, by = grid_choices(grid)
    ranked = [c for c in choices if key(c) in by]
    nvml = by[key(ranked[0])]["nvml_peak_gib"] * GIB
    assert nvml <= ranked[0].plan.needed_bytes <= 1.15 * nvml


def test_the_step_time_of_every_measured_grid_row_is_within_the_stated_bounds():
    errors = {}
    for grid in GRIDS:
        choices, by = grid_choices(grid)
        for c in choices:
            if key(c) in by:
                errors[(grid, by[key(c)]["config"])] = c.step_s / by[key(c)]["step_s"] - 1
    assert len(errors) == sum(1 for r in GRID["rows"] if r.get("tokens_per_s"))
    assert all(UNDER <= e <= OVER for e in errors.values()), errors


def test_other_gpus_are_scaled_by_their_data_sheet_and_said_so():
    assert speed.rates_for("NVIDIA H200") == speed.Rates("NVIDIA H200")
    a100 = speed.rates_for("NVIDIA A100-SXM4-80GB")
    assert a100.source == "scaled" and a100.compute < 0.5 and a100.memory < 0.5
    # names are matched whole: an A10G is not an A10, an L40S not an L4
    assert speed.rates_for("NVIDIA A10G").source == "unknown"
    assert speed.rates_for("NVIDIA L40S").compute > speed.rates_for("NVIDIA L4").compute
    shape = planner.shape_from_config(LLAMA)
    s = matrix_setup("full-none")
    assert speed.step_time(shape, s, a100).seconds > 2 * speed.step_time(shape, s).seconds
    gpus = [Gpu(0, "NVIDIA A100-SXM4-80GB", 80 * GIB, 79 * GIB, 0, 0, (8, 0))]
    job = JobSpec(model_name_or_path="/x", finetuning_type="lora", cutoff_len=1024, per_device_train_batch_size=8,
                  precision="bf16", device_type="cuda")
    md = report.fit_markdown(planner.fit(job, gpus, model=shape))
    assert "an estimate from H200 measurements, scaled to NVIDIA A100-SXM4-80GB" in md
    assert "H200 实测按 NVIDIA A100-SXM4-80GB" in report.fit_markdown(planner.fit(job, gpus, model=shape), "zh")
    plan = planner.estimate(job, [dataclasses.replace(gpus[0], name="Mystery GPU")], model=shape)
    assert "no figures for Mystery GPU" in report.render_markdown(plan)


# --- (c) the reasons say what their numbers say --------------------------------------------------------------------

SAID = re.compile(r"(?:(?P<pct>\d+)% (?P<dir>faster|slower)|(?P<x>[\d.]+)x (?P<xdir>as fast as|slower)|as fast as)"
                  r" .*?(?:, |; )(?:(?P<gib>[\d.]+) GiB (?P<mem>less|more)|it saves (?P<saved>[\d.]+) GiB|about the same)")


def check_reason(text: str, step_s: float, needed: int, other_step_s: float, other_needed: int) -> None:
    """Read the figures back out of an English reason and hold them against the two settings' numbers."""
    m = SAID.search(text)
    assert m, text
    ratio = step_s / other_step_s
    if m["pct"]:
        gain = (1 / ratio - 1) if m["dir"] == "faster" else (ratio - 1)
        assert gain > 0 and abs(100 * gain - int(m["pct"])) <= 0.5 and 100 * gain < 100 * (reasons.TIMES - 1), text
    elif m["x"]:
        x = 1 / ratio if m["xdir"] == "as fast as" else ratio
        assert x >= reasons.TIMES and abs(x - float(m["x"])) <= 0.05, text
    else:
        assert abs(ratio - 1) < reasons.SAME_SPEED, text
    diff = (needed - other_needed) / GIB
    if m["gib"] or m["saved"]:
        said = float(m["gib"] or m["saved"])
        assert abs(abs(diff) - said) <= (0.5 if said >= 10 else 0.05), text
        assert (diff < 0) == (m["mem"] != "more"), text
        assert not m["saved"] or ratio > 1, text  # only a slower setting "saves memory you do not need"
    else:
        assert abs(diff) < 0.5, text


@pytest.mark.parametrize("grid", GRIDS)
def test_each_fit_reason_cites_the_numbers_of_the_two_settings_it_compares(grid):
    choices, _ = grid_choices(grid)
    fitting = [c for c in choices if c.fits][:5]
    said = report.fit_reasons(choices, fitting)
    best, ref = fitting[0], reasons.reference(choices, fitting[0])
    check_reason(said[id(best)], best.step_s, best.plan.needed_bytes, ref.step_s, ref.plan.needed_bytes)
    assert report.choice_label(ref) in said[id(best)]
    for c in fitting[1:]:
        check_reason(said[id(c)], c.step_s, c.plan.needed_bytes, best.step_s, best.plan.needed_bytes)
        assert report.choice_label(best) in said[id(c)]
    assert all(report.fit_reasons(choices, fitting, "zh")[id(c)] for c in fitting)


@pytest.mark.parametrize("pair", [(1.0, 30, 2.2, 42), (1.0, 30, 1.004, 30.2), (1.5, 20, 1.0, 35), (0.6, 50, 1.0, 35),
                                  (1.2, 12, 1.0, 12.3), (0.95, 60, 1.0, 40)])
def test_reason_words_read_back_as_their_numbers(pair):
    step, gib, other_step, other_gib = pair
    c = reasons.compare(step, int(gib * GIB), other_step, int(other_gib * GIB), True)
    check_reason(reasons.words(c, "no DeepSpeed at 4 x 1"), step, int(gib * GIB), other_step, int(other_gib * GIB))
    zh = reasons.words(c, "不用 DeepSpeed(4 × 1)", "zh")
    assert (c.amount in zh) and (c.memory == "same" or c.gib in zh)


def test_the_advice_gives_its_reason_in_both_languages():
    shape = planner.shape_from_config(LLAMA)
    job = JobSpec(model_name_or_path="/x", finetuning_type="full", cutoff_len=1024, per_device_train_batch_size=8,
                  precision="bf16", device_type="cuda", master_weights="fp32")  # fp32 masters: 30 GiB is too little
    gpus = [dataclasses.replace(h200()[0], free_bytes=30 * GIB)]
    plan = planner.estimate(job, gpus, model=shape)
    assert plan.advice["kind"] == "use"
    (step, other_step), (needed, other_needed) = plan.advice["compared"]["step_s"], plan.advice["compared"]["needed_bytes"]
    check_reason(plan.recommendation, step, needed, other_step, other_needed)
    best = next(r for r in plan.alternatives if all(r[k] == v for k, v in plan.advice["setting"].items()))
    assert (step, needed) == (best["step_s"], best["needed_bytes"])
    assert "比「不用 DeepSpeed」" in report.render_markdown(plan, "zh")
    roomy = planner.estimate(job, h200(), model=shape)  # it keeps its setting: against the next fastest that fits
    assert roomy.advice["kind"] == "keep"
    (step, other_step), (needed, other_needed) = (roomy.advice["compared"][k] for k in ("step_s", "needed_bytes"))
    check_reason(roomy.recommendation, step, needed, other_step, other_needed)
    runner = min((r for r in roomy.alternatives if r["fits"] and r["step_s"] > step), key=lambda r: r["step_s"])
    assert report.setting_words(runner, "en") in roomy.recommendation and other_step == runner["step_s"]


# --- 5. the plan's note on one GPU against the measurements ---------------------------------------------------------

def pairs() -> list[tuple[str, dict, dict]]:
    """One-GPU rows measured with and without ZeRO-2 at the same model, fine-tuning and batch split."""
    rows = [{**r, "grid": "1.1 B " + r["config"].split("-")[0], "step_s": r["zeroboard"]["step_s"],
             "torch_peak_gib": r["zeroboard"]["torch_peak_gib"], "stage": r["config"].split("-", 1)[1], "mbs": 8,
             "accum": 1} for r in load("h200.json")["rows"]]
    rows += [r for r in GRID["rows"] if r.get("step_s")]
    out = []
    for r in rows:
        if r["stage"] == "none":
            z2 = next((x for x in rows if x["grid"] == r["grid"] and x["stage"] == "2" and x["mbs"] == r["mbs"]
                       and x["accum"] == r["accum"]), None)
            if z2:
                out.append((r["grid"], r, z2))
    return out


def test_the_one_gpu_note_agrees_with_every_measured_pair():
    note = words.text("plan.note.one_gpu")
    lo, hi = map(float, re.search(r"needed (\d+)-(\d+) GiB less", note).groups())
    slowest, fastest = map(int, re.search(r"from (\d+)% slower .* to (\d+)% faster", note).groups())
    found = pairs()
    assert len(found) >= 6
    for grid, none, z2 in found:
        saved = none["torch_peak_gib"] - z2["torch_peak_gib"]
        assert lo - 0.5 <= saved <= hi + 0.5, (grid, saved)
    # as the reasons say it: "N% slower" is the step's ratio - 1, "N% faster" the inverse ratio - 1
    slower = max(z2["step_s"] / none["step_s"] - 1 for _, none, z2 in found)
    faster = max(none["step_s"] / z2["step_s"] - 1 for _, none, z2 in found)
    assert (round(100 * slower), round(100 * faster)) == (slowest, fastest)
    x_lo, x_hi = map(float, re.search(r"ZeRO-3 gathers every layer: ([\d.]+)-([\d.]+)x", note).groups())
    matrix = {r["config"]: r["zeroboard"]["step_s"] for r in load("h200.json")["rows"]}
    for ft in ("full", "lora"):
        assert x_lo - 0.05 <= matrix[f"{ft}-3"] / matrix[f"{ft}-none"] <= x_hi + 0.05, ft
