"""Finding the setting that fits (``zeroboard plan --fit`` and the page's button), and hub ids planned from the
Hugging Face cache. CPU only: the GPUs are NVML-shaped records, the model a config.json."""

from __future__ import annotations

import json
import os

import pytest

from helpers import liger_installed  # noqa: E402
from zeroboard import planner
from zeroboard.cli import main as cli_main
from zeroboard.job import devices, spec
from zeroboard.webui import handlers, plan_fit, plan_panel


@pytest.fixture(autouse=True)
def _liger_layout(monkeypatch):
    """Plans are made as on the H200: Liger installed, its layout as tests/helpers.LIGER_LAYOUT has it."""
    liger_installed(monkeypatch)


GIB = 1 << 30
LLAMA_1B = dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False)


def h200(free_gib: float) -> list[devices.Gpu]:
    return [devices.Gpu(0, "NVIDIA H200", 143 * GIB, int(free_gib * GIB), 0, 0, (9, 0))]


@pytest.fixture()
def model_dir(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(LLAMA_1B))
    return tmp_path / "m"


def job(model_dir, **kw) -> spec.JobSpec:
    base = dict(model_name_or_path=str(model_dir), precision="bf16", per_device_train_batch_size=8,
                gradient_accumulation_steps=2, cutoff_len=1024, finetuning_type="full", device_type="cuda")
    return spec.JobSpec(**{**base, **kw})


def test_fit_keeps_the_global_batch_and_ranks_what_fits_first(model_dir):
    choices = planner.fit(job(model_dir), h200(24))
    assert {c.micro_batch * c.accumulation for c in choices} == {16}  # 8 x 2 per device, whatever the split
    fitting = [c for c in choices if c.fits]
    assert fitting and all(c.fits for c in choices[: len(fitting)])
    for group in ([c for c in fitting if not c.tight], [c for c in fitting if c.tight]):  # room first, then tight
        assert [c.tokens_per_s for c in group] == sorted((c.tokens_per_s for c in group), reverse=True)
    assert fitting == [c for c in fitting if not c.tight] + [c for c in fitting if c.tight]
    best = fitting[0]
    assert best.plan.needed_bytes <= 24 * GIB
    # the job as asked (no DeepSpeed, micro-batch 8, no checkpointing) does not fit in 24 GiB: the search moved off it
    asked = next(c for c in choices if (c.stage, c.offload, c.micro_batch, c.checkpointing) == ("none", False, 8, False))
    assert asked.fits is False and best is not asked
    roomy = planner.fit(job(model_dir), h200(139))[0]
    assert (roomy.stage, roomy.micro_batch, roomy.checkpointing) == ("none", 16, False)  # the fastest when all fit


def test_fit_and_advice_prefer_headroom_to_a_tight_fit(model_dir):
    """Real peaks came out up to 6.5% above "needed": a setting within 8% of the free memory is offered after those
    with room, marked tight, and the plan's advice moves off it (the verdict warns about it)."""
    from zeroboard.planner import memory, report

    fastest = planner.fit(job(model_dir), h200(139))[0]
    free = fastest.plan.needed_bytes / 0.95 / GIB  # it fits, with 5% to spare
    choices = planner.fit(job(model_dir), h200(free))
    same = next(c for c in choices if c.overrides() == fastest.overrides())
    assert same.fits and same.tight and same is not choices[0]
    assert choices[0].plan.roomy and choices[0].tokens_per_s < same.tokens_per_s
    assert "tight: under 8% headroom" in report.fit_markdown(choices, top=len(choices))
    assert choices[0].plan.needed_bytes <= memory.HEADROOM * free * GIB

    asked = job(model_dir, per_device_train_batch_size=16, gradient_accumulation_steps=1)
    plan = planner.estimate(asked, h200(planner.estimate(asked, h200(139)).needed_bytes / 0.95 / GIB))
    assert plan.fits and not plan.roomy
    assert plan.advice["kind"] == "use" and plan.advice["current_tight"]
    assert "with 8% headroom" in plan.recommendation
    assert "余量" in report.advice_text(plan.advice, "zh")


def test_plan_fit_prints_set_overrides(model_dir, monkeypatch, capsys):
    monkeypatch.setattr(devices, "detect_gpus", lambda with_processes=False: h200(24))
    monkeypatch.setenv("ZEROBOARD_ALLOW_PATHS", os.environ["ZEROBOARD_ALLOW_PATHS"])  # --allow-path adds to it
    path = model_dir.parent / "job.yaml"
    path.write_text(spec.dump_yaml(job(model_dir)))
    # the GPUs are faked: nothing may run on them (--probe-budget 0: the step-time model ranks, as on a laptop)
    assert cli_main(["plan", str(path), "--fit", "--probe-budget", "0", "--allow-path", f"{model_dir.parent}:rw"]) == 0
    out = capsys.readouterr().out
    assert "a prediction, nothing was run" in out
    best = planner.fit(job(model_dir), h200(24))[0]
    assert f"--set deepspeed_stage={best.stage}" in out and f"--set per_device_train_batch_size={best.micro_batch}" in out
    assert f"--set gradient_accumulation_steps={best.accumulation}" in out
    monkeypatch.setattr(devices, "detect_gpus", lambda with_processes=False: h200(1))
    assert cli_main(["plan", str(path), "--fit", "--probe-budget", "0", "--allow-path",
                     f"{model_dir.parent}:rw"]) == 1  # nothing fits in 1 GiB


def test_use_this_setting_writes_a_setting_that_fits(model_dir):
    values = handlers.spec_to_form(job(model_dir))
    values.pop("gpu_ids")
    changes, md = plan_fit.best_setting(values, h200(24), budget_s=0)  # faked GPUs: nothing is measured
    assert set(changes) == set(plan_panel.FIT_FIELDS) and "--set" in md
    after, problems = handlers.form_to_spec({**values, **changes})
    assert not problems
    plan = planner.estimate(after, h200(24))
    assert plan.fits and plan.needed_bytes <= 24 * GIB
    again, md2 = plan_fit.best_setting({**values, **changes}, h200(24), budget_s=0)
    assert again == changes and "already" in md2
    nothing, why = plan_fit.best_setting(values, h200(1), budget_s=0)
    assert nothing == {} and "No setting fits" in why


def test_the_button_is_wired_to_the_form(model_dir):
    """The page's click handler, called as gradio calls it: the form's values in, the new field values out."""
    pytest.importorskip("gradio")
    from zeroboard.webui import app

    demo = app.build_app(job=job(model_dir), gpus=h200(24), lang="en")
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "zb-use-setting")
    fn = next(f for f in demo.fns.values() if any(t[0] == button._id for t in f.targets))
    outputs = [getattr(o, "elem_id", None) for o in fn.outputs]
    assert outputs == [f"zb-{k}" for k in plan_panel.FIT_FIELDS] + ["zb-fit-choices"]
    assert getattr(fn.inputs[-2], "elem_id", None) == "zb-fit-probe-s"  # the probe budget field
    values = [demo.blocks[c._id].value if hasattr(c, "_id") else c.value for c in fn.inputs]
    *_, result = fn.fn(*values[:-2], 0, "en")  # the faked GPUs are not measured: budget 0
    best = planner.fit(job(model_dir), h200(24))[0]
    assert result[: len(plan_panel.FIT_FIELDS)] == [best.stage, best.offload, best.micro_batch, best.accumulation,
                                                   best.checkpointing]
    assert "--set" in result[-1]


# --- hub ids ------------------------------------------------------------------------------------------------

def fake_cache(root, repo: str, cfg: dict) -> None:
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "snapshots" / "0a1b2c").mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0a1b2c")
    (folder / "snapshots" / "0a1b2c" / "config.json").write_text(json.dumps(cfg))


def test_a_hub_id_is_planned_from_the_local_cache(tmp_path, monkeypatch):
    fake_cache(tmp_path, "org/llama-1b", LLAMA_1B)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    plan = planner.estimate(spec.JobSpec(model_name_or_path="org/llama-1b", precision="bf16", finetuning_type="full"), h200(139))
    assert plan.params == planner.shape_from_config(LLAMA_1B).params
    assert "local Hugging Face cache" in plan.model.source
    assert "本地 Hugging Face 缓存" in planner.panel(spec.JobSpec(model_name_or_path="org/llama-1b"), h200(139), "zh")
    with pytest.raises(planner.PlanError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE"):
        planner.read_model("org/not-there")


def test_a_hub_id_not_cached_is_fetched_from_hf_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a mirror that refuses: the message names it
    with pytest.raises(planner.PlanError, match=r"could not be fetched from http://127\.0\.0\.1:9"):
        planner.read_model("org/elsewhere")


# --- the probes (runs/probes.py): what is measured, how it ranks, what is kept ------------------------------------

def write_events(folder, events: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_probe_reads_the_steps_after_the_warm_up_and_an_oom_is_a_result(tmp_path):
    from zeroboard.runs import probes

    logs = [{"event": "log", "step": i, "elapsed": 2.0 * i + (5 if i > 1 else 0), "tokens_per_sec": tps}
            for i, tps in enumerate([50.0, 90.0, 1000.0, 1100.0, 1050.0], start=1)]
    write_events(tmp_path / "ok", logs)
    status, tps, step_s, why = probes.measured(tmp_path / "ok")
    assert status == "measured" and tps == 1050.0 and step_s == 2.0  # the first two steps are the warm-up
    write_events(tmp_path / "oom", logs[:1] + [{"event": "error", "message": "torch.OutOfMemoryError: CUDA out of memory"}])
    assert probes.measured(tmp_path / "oom")[0] == "oom"
    write_events(tmp_path / "short", logs[:2])
    assert probes.measured(tmp_path / "short")[0] == "failed"


def test_probes_rank_what_they_measured_and_the_pick_says_so(model_dir, tmp_path):
    from zeroboard.runs import probes

    choices = planner.fit(job(model_dir), h200(139))
    fitting = [c for c in choices if c.fits][:3]
    measured = {id(fitting[0]): probes.Probe("a", "measured", 10_000.0), id(fitting[1]): probes.Probe("b", "oom"),
                id(fitting[2]): probes.Probe("c", "measured", 29_000.0)}
    order = probes.ranked(choices, measured)
    assert order[0] is fitting[2] and order[1] is fitting[0]  # measured first, fastest first; the OOM with the rest
    assert str(probes.pick_words(order, measured)) == "measured 29.0k tokens/s, 2.9× the next"
    assert probes.pick_words(choices, {}) is None
    md = planner.report.fit_markdown(order, measured={id(c): probes.result_words(measured.get(id(c))) for c in order},
                                     pick=probes.pick_words(order, measured), source="measured")
    assert "| measured tokens/s |" in md and "29,000 tokens/s" in md and "out of memory" in md
    assert "It was measured 29.0k tokens/s" in md and "Ranked by what each setting measured" in md
    store = probes.Store(tmp_path)
    store.add(measured[id(fitting[2])])
    assert probes.Store(tmp_path).read()["c"].tokens_per_s == 29_000.0


def test_probes_run_only_where_the_jobs_devices_are(model_dir):
    from zeroboard.runs import probes

    assert probes.where(job(model_dir, device_type="cpu"), []) == "cpu"
    assert probes.where(job(model_dir), h200(139)) == "NVIDIA H200"
    assert probes.where(job(model_dir), []) is None  # a GPU job planned on a machine without its GPUs
    assert probes.where(job(model_dir, launcher="slurm"), h200(139)) is None  # a cluster's: not here
    key = probes.key_of(job(model_dir), planner.fit(job(model_dir), h200(139))[0], "NVIDIA H200", "{}")
    assert key != probes.key_of(job(model_dir, cutoff_len=2048), planner.fit(job(model_dir), h200(139))[0],
                                "NVIDIA H200", "{}")
