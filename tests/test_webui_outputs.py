"""The memory plan panel, the plan-vs-measured table and the output check, without a browser.

The fast tests call the plain handlers; the e2e ones run the real subprocesses (reload and answer, merge) against
the session's trained LoRA run (tests/bank.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from helpers import register
from zeroboard import planner, words
from zeroboard.job import devices, record as events, spec
from zeroboard.planner import record as plan_record
from zeroboard.runs import manager as runner
from zeroboard.runs.state import JobState
from zeroboard.webui import handlers, output_check
from zeroboard.webui.live import Live

REPO = Path(__file__).resolve().parents[1]
FAKE_GPUS = [devices.Gpu(0, "NVIDIA H200", 143 << 30, 140 << 30, 3 << 30, 0, (9, 0)),
             devices.Gpu(1, "NVIDIA H200", 143 << 30, 100 << 30, 43 << 30, 87, (9, 0))]


@pytest.fixture(scope="module")
def gr():
    import gradio

    return gradio


@pytest.fixture()
def manager(tmp_path):
    return runner.JobManager(index=tmp_path / "runs.json")


def demo_values(out: Path, gpus: bool = False, **changes) -> dict:
    job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    job.output_dir = str(out)
    values = handlers.spec_to_form(job)
    if not gpus:
        values.pop("gpu_ids")  # no GPU: the page has no GPU picker
    values.update(changes)
    return values


def plan_fn(demo):
    return next(fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "on_plan")


# --- memory plan panel ------------------------------------------------------------------------


def test_the_plan_is_on_the_first_paint_and_labelled_in_both_languages(gr, manager):
    from zeroboard.webui import app

    for lang, word, heading in (("en", "Memory plan (per CPU process)", "### Memory plan: no DeepSpeed on 2 CPU processes"),
                                ("zh", "内存估算(每个 CPU 进程)", "### 内存估算:不用 DeepSpeed,2 个 CPU 进程")):
        demo = app.build_app(manager, lang=lang, gpus=[])
        config = demo.get_config_file()
        plan = next(c for c in config["components"] if c["props"].get("elem_id") == "zb-plan")
        assert plan["props"]["value"].startswith(heading)
        assert word in json.dumps(config, ensure_ascii=False, default=str)


def _other_value(name: str, value, tmp_path: Path):
    """A different valid value for a field (for paths: another model, or a DeepSpeed file of one's own)."""
    t = spec.field_type(name)
    if name == "attn_implementation":
        return "eager"  # sdpa is what auto means
    if spec.choices(name):
        return next(c for c in spec.choices(name) if c != value)
    if t is bool:
        return not value
    if t in (int, float):
        return value * 2 + 1
    if name == "model_name_or_path":
        other = tmp_path / "other-model"
        other.mkdir(exist_ok=True)
        (other / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 96, "intermediate_size": 256,
                                                       "num_hidden_layers": 3, "num_attention_heads": 4,
                                                       "num_key_value_heads": 2, "vocab_size": 1000}))
        return str(other)
    if name == "deepspeed":
        ds = tmp_path / "mine.json"
        ds.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
        return str(ds)
    if name == "lora_target":
        return ["q_proj"]
    if spec._is_list(t):
        return [*value, "x"]
    if t is dict:
        return {"optim": "adamw_torch"}
    return f"{value}-other"


@pytest.mark.parametrize("gpus", [[], FAKE_GPUS], ids=["cpu", "gpu"])
def test_the_plan_follows_every_field_the_planner_reads(gr, manager, tmp_path, gpus, monkeypatch):
    """The expectation is found by behaviour: each field whose change changes the plan must redraw the panel."""
    from zeroboard.webui import app

    # the host's free memory, held still: on a busy machine it moves between two plans, and a field would seem to
    # move the plan when the machine did
    memory = devices.host_memory()
    monkeypatch.setattr(devices, "host_memory", lambda: memory)

    demo = app.build_app(manager, gpus=gpus)
    fn = plan_fn(demo)
    names = [c.elem_id.removeprefix("zb-") for c in fn.inputs]
    assert names[-1] == "lang"
    triggers = {demo.blocks[t[0]].elem_id.removeprefix("zb-") for t in fn.targets}
    base = spec.load_yaml(REPO / "examples" / "demo.yaml")
    base.output_dir = str(tmp_path / "run")
    if gpus:
        base.precision = "bf16"  # so that pure bf16 (GPU only) has something to change
    reference = planner.panel(base, gpus)
    moving = set()
    for name in spec.FIELDS:
        if name == "gpu_ids" and not gpus:  # no GPU here: the page has no picker
            continue
        value = [1] if name == "gpu_ids" else _other_value(name, getattr(base, name), tmp_path)
        changed = spec.JobSpec(**{**spec.to_dict(base), name: value})
        if planner.panel(changed, gpus) != reference:
            moving.add(name)
    assert {"deepspeed_stage", "per_device_train_batch_size", "cutoff_len", "gradient_checkpointing"} <= moving
    gpu_only = {"pure_bf16", "gpu_ids", "attn_implementation"}
    assert gpu_only <= moving if gpus else "precision" in moving, gpu_only - moving
    assert moving <= triggers, f"the plan goes stale when these change: {moving - triggers}"
    assert "lang" in triggers
    if gpus:
        return

    def plan(lang: str = "en", **changes) -> str:
        values = {**dict.fromkeys(names), **demo_values(Path("runs/x"), **changes), "lang": lang}
        shown, _trace_timer = fn.fn(*[values[n] for n in names])  # the plan, and the timer of a trace in the background
        return shown

    assert "no DeepSpeed on 2 CPU processes" in plan()
    assert "ZeRO-3,2 个 CPU 进程" in plan("zh", deepspeed_stage="3")
    assert "ZeRO-3 on 3 CPU processes" in plan(deepspeed_stage="3", num_processes=3)
    assert "micro-batch 4 x 256 tokens; gradient checkpointing" in plan(per_device_train_batch_size=4,
                                                                        cutoff_len=256, gradient_checkpointing=True)
    broken = plan(cutoff_len=None)
    assert "fix the marked fields" in broken and "`cutoff_len`" in broken
    assert "Memory plan unavailable" in plan(model_name_or_path="cache/no/such/model")


def test_the_plan_reads_gpus_offload_and_a_custom_deepspeed_file(tmp_path):
    one = handlers.plan_markdown(demo_values(tmp_path, gpus=True, gpu_ids=[1], deepspeed_stage="2", offload=True),
                                 FAKE_GPUS)
    assert "ZeRO-2 + offload (optimizer) on 1 GPU" in one and "free on the tightest selected GPU" in one
    both = handlers.plan_markdown(demo_values(tmp_path, gpus=True, gpu_ids=[0, 1], deepspeed_stage="3"), FAKE_GPUS)
    assert "ZeRO-3 on 2 GPUs" in both
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    assert "ZeRO-3 on 2 CPU processes" in handlers.plan_markdown(demo_values(tmp_path, deepspeed=str(ds)), [])
    ds.write_text("{oops")
    assert "is not valid JSON" in handlers.plan_markdown(demo_values(tmp_path, deepspeed=str(ds)), [])


# --- estimate vs measured ------------------------------------------------------------------------


def _run_with_plan(run: Path, status: str = "finished") -> dict:
    job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    plan = plan_record.save_plan(planner.estimate(job, []), run)
    ev = events.EventWriter(run, 0)
    ev.emit("start", world_size=2, devices=[], total_steps=10)
    ev.emit("log", step=5, total_steps=10, loss=1.5, memory=[{"rank": 0, "rss_peak_bytes": 400 << 20},
                                                            {"rank": 1, "rss_peak_bytes": 500 << 20}])
    st = JobState(run_dir=str(run), status=status, message=status, exit_code=0, started=time.time() - 5, ended=time.time())
    return json.loads(plan.read_text()), st


def test_estimate_vs_measured_per_rank_in_the_live_view(gr, manager, tmp_path):
    from zeroboard.webui import live_panels

    run = tmp_path / "run"
    plan, st = _run_with_plan(run)
    register(manager, st)
    snap = Live(manager).snapshot(str(run))
    est = plan["host_bytes"]
    assert "| 0 |" in snap.mem_md and "| 1 |" in snap.mem_md and "RSS" in snap.mem_md
    assert f"{100 * (est - (400 << 20)) / (400 << 20):+.1f}%" in snap.mem_md
    zh = Live(manager).snapshot(str(run), "zh").mem_md
    assert "估算" in zh and "实测峰值" in zh

    with gr.Blocks():
        panels = live_panels.render_live("en", [])
    outs = live_panels.outputs(panels)
    first, seen = live_panels.render_snapshot(panels, snap, None, time.time())
    assert first[outs.index(panels.mem)] == snap.mem_md
    again, _ = live_panels.render_snapshot(panels, snap, seen, time.time())
    assert again[outs.index(panels.mem)] == gr.skip()


def test_no_plan_or_no_measurement_shows_nothing(manager, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    register(manager, JobState(run_dir=str(run), status="running", started=time.time()))
    assert Live(manager).snapshot(str(run)).mem_md == ""


# --- output check: the light part ----------------------------------------------------------------------


def _fake_adapter_run(run: Path) -> Path:
    run.mkdir(parents=True)
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "cache/demo/model"}))
    (run / "adapter_model.safetensors").write_bytes(b"x")
    (run / "zeroboard_result.json").write_text(json.dumps({"kind": "lora_adapter", "path": str(run),
                                                           "base_model": "cache/demo/model", "global_step": 3}))
    return run


def test_the_panel_shows_for_a_finished_run_with_the_right_buttons(gr, manager, tmp_path):
    from zeroboard.webui import live_panels, output_panel

    run = _fake_adapter_run(tmp_path / "run")
    assert output_check.view(str(run), "running").visible is False
    v = output_check.view(str(run), "finished")
    assert v.visible and v.can_merge and not v.can_consolidate and "a LoRA adapter" in v.saved
    assert "LoRA 适配器" in output_check.view(str(run), "finished", "zh").saved
    (tmp_path / "run-merged").mkdir()
    assert v.merge_dir == str(tmp_path / "run-merged") and output_check.new_dir_name(run, "merge").endswith("-merged-2")
    zero = tmp_path / "zero"
    (zero / "global_step4").mkdir(parents=True)
    (zero / "latest").write_text("global_step4")
    z = output_check.view(str(zero), "finished")
    assert z.visible and z.can_consolidate and not z.can_merge and "ZeRO checkpoint (step 4)" in z.saved

    register(manager, JobState(run_dir=str(run), status="finished", message="finished", exit_code=0,
                               started=time.time() - 5, ended=time.time()))
    with gr.Blocks():
        panels = live_panels.render_live("en", [])
    outs = live_panels.outputs(panels)
    first, seen = live_panels.render_snapshot(panels, Live(manager).snapshot(str(run)), None, time.time())
    assert first[outs.index(panels.check.box)]["visible"] is True
    assert first[outs.index(panels.check.merge_row)]["visible"] is True
    assert first[outs.index(panels.check.consolidate_row)]["visible"] is False
    again, _ = live_panels.render_snapshot(panels, Live(manager).snapshot(str(run), "zh"), seen, time.time())
    assert again[outs.index(panels.check.merge_dir)] == gr.skip()  # a language switch keeps a typed folder
    assert "LoRA 适配器" in again[outs.index(panels.check.saved)]  # and says what was saved in the new language
    assert len(output_panel.updates(v)) == len(output_panel.outputs(panels.check))


def test_answers_table_escapes_cells_and_counts_identity_matches():
    report = {"prompts": ["Who are you?", "a | b"], "answers": ["I am X", ""], "base_answers": ["?", "line\nbreak"],
              "matches": [True, None]}
    md = output_check.answers_markdown(report, "en")
    assert md.splitlines()[0] == "| Prompt | Tuned answer | Base answer | Matches the training answer |"
    assert "a &#124; b" in md and "*(empty)*" in md and "line<br>break" in md and "| ✓ |" in md
    assert "1 of 1" in md
    plain = output_check.answers_markdown({"prompts": ["q"], "answers": ["a"]}, "zh")
    assert plain.splitlines()[0] == "| 问题 | 微调后回答 | 原模型回答 |" and "| q | a | - |" in plain
    assert output_check.parse_prompts(" Who?\n\n  你是谁?\n") == ["Who?", "你是谁?"]
    assert output_check.DEFAULT_PROMPTS.splitlines()[0] == "Who are you?"


def test_export_refuses_a_used_folder_before_starting_anything(tmp_path, monkeypatch):
    run = _fake_adapter_run(tmp_path / "run")
    monkeypatch.setattr(output_check, "run_cli", lambda *a, **k: pytest.fail("no subprocess for a refused folder"))
    used = tmp_path / "used"
    used.mkdir()
    (used / "file").write_text("x")
    assert "already exists" in output_check.export("merge", str(run), str(used))[0]
    assert "Give a new folder" in output_check.export("consolidate", str(run), " ")[0]
    assert "`" + str(used) + "` 已经存在" in output_check.export("merge", str(run), str(used), lang="zh")[0]
    assert "No run selected" in output_check.not_ready(runner.JobManager(index=tmp_path / "r.json"), None)


def test_a_stuck_subprocess_is_stopped_at_the_time_limit(tmp_path, monkeypatch):
    stuck = tmp_path / "python"
    stuck.write_text("#!/bin/sh\nsleep 120 &\nwait\n")  # a child that holds the pipes: the whole group must go
    stuck.chmod(0o755)
    monkeypatch.setattr(output_check.sys, "executable", str(stuck))
    t0 = time.time()
    text, message, report = output_check.reload_and_answer(str(tmp_path), "Who are you?", timeout=1)
    assert text == "" and report is None and "time limit" in message and time.time() - t0 < 30


def test_the_buttons_refuse_a_run_that_has_not_finished_and_a_language_switch_redraws_answers(gr, manager, tmp_path):
    from zeroboard.webui import app

    demo = app.build_app(manager, gpus=[])
    fns = {getattr(fn.fn, "__name__", ""): fn.fn for fn in demo.fns.values()}
    assert "No run selected" in list(fns["on_reload"]({}, "Who are you?", "en"))[-1][1]
    run = tmp_path / "run"
    run.mkdir()
    me = psutil.Process()  # its supervisor: this process, alive
    register(manager, JobState(run_dir=str(run), status="running", started=time.time(), supervisor_pid=me.pid,
                               supervisor_ctime=me.create_time()))
    assert "has not finished (running)" in list(fns["on_reload"]({"run_dir": str(run)}, "Who?", "en"))[-1][1]
    assert "has not finished" in list(fns["on_export"]({"run_dir": str(run)}, str(tmp_path / "new"), "en"))[-1][0]
    report = {"prompts": ["Who are you?"], "answers": ["I am"], "base_answers": ["?"]}
    assert fns["on_lang"](report, "zh").startswith("| 问题 | 微调后回答 | 原模型回答 |")
    assert fns["on_lang"](None, "zh") == gr.skip()


def test_labels_for_the_new_parts_exist_in_both_languages():
    keys = ("plan", "mem_vs_plan", "output_check", "saved", "prompts", "reload", "consolidate", "consolidate_dir",
            "merge", "merge_dir", "prompt", "tuned_answer", "base_answer", "matches", "identity")
    for key in keys:
        assert key in words.CATALOG and words.label(key, "en") != words.label(key, "zh"), key
    assert words.label("reload") == "Reload and answer" and words.label("merge", "zh") == "合并 LoRA"


# --- output check: the real subprocesses against a trained demo ------------------------------------------


@pytest.fixture()
def trained(bank) -> Path:
    """The session's LoRA run on the identity set (tests/bank.py)."""
    return bank.get("lora_identity")


def _listing(d: Path) -> dict:
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in d.rglob("*")}


@pytest.mark.e2e
def test_reload_and_answer_a_trained_demo(trained, manager):
    before = _listing(trained)
    report, error = output_check.check_report(str(trained), ["Who are you?", "What is 3 plus 4?"])
    assert report is not None, error
    assert len(report["answers"]) == 2 and all(isinstance(a, str) and a for a in report["answers"])
    assert len(report["base_answers"]) == 2 and all(isinstance(a, str) for a in report["base_answers"])
    assert report["matches"][0] is not None  # "Who are you?" is an identity question: the check judges it
    table, message, again = output_check.reload_and_answer(str(trained), "Who are you?", lang="zh", with_base=False)
    assert again["prompts"] == ["Who are you?"] and "base_answers" not in again
    assert table.startswith("| 问题 | 微调后回答 |") and "Who are you?" in table and "重新加载 LoRA 适配器" in message
    assert _listing(trained) == before  # the check never writes into the run


@pytest.mark.e2e
def test_merge_writes_a_new_folder_and_consolidate_explains_why_not(trained, tmp_path):
    before = _listing(trained)
    out = tmp_path / "merged"
    message, next_dir = output_check.export("merge", str(trained), str(out))
    assert message.startswith("Wrote"), message
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert next_dir and not Path(next_dir).exists()
    message, next_dir = output_check.export("consolidate", str(trained), str(tmp_path / "cons"))
    assert "holds no complete ZeRO checkpoint" in message and next_dir is None and not (tmp_path / "cons").exists()
    assert _listing(trained) == before
