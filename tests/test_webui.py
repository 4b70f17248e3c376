"""The web UI without a browser: the generated form, the handlers, the live view, the server's imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import register
from zeroboard import words, workspace
from zeroboard.job import devices, record as events, spec
from zeroboard.runs import manager as runner
from zeroboard.runs.state import JobState, write_state
from zeroboard.webui import handlers
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


def demo_values(out: Path, **changes) -> dict:
    job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    job.output_dir = str(out)
    values = handlers.spec_to_form(job)
    values.pop("gpu_ids")  # no GPU: the page has no GPU picker
    values.update(changes)
    return values


def app_config(demo) -> str:
    return json.dumps(demo.get_config_file(), ensure_ascii=False, default=str)


# --- the form is the schema -------------------------------------------------------------------


def test_every_field_has_a_widget_of_its_type(gr):
    from zeroboard.webui.form import widget

    kinds = {name: type(widget(name, getattr(spec.JobSpec(), name), "en", FAKE_GPUS)).__name__ for name in spec.FIELDS}
    assert kinds["deepspeed_stage"] == "Dropdown" and kinds["finetuning_type"] == "Dropdown"
    assert kinds["offload"] == "Checkbox" and kinds["resume"] == "Checkbox"
    assert kinds["learning_rate"] == "Number" and kinds["cutoff_len"] == "Number"
    assert kinds["dataset"] == "Textbox" and kinds["lora_target"] == "Textbox" and kinds["model_name_or_path"] == "Textbox"
    assert kinds["extra_args"] == "Code"
    assert kinds["gpu_ids"] == "CheckboxGroup"
    assert widget("cutoff_len", 128, "en", []).precision == 0
    assert list(widget("deepspeed_stage", "none", "en", []).choices) == [(c, c) for c in ("none", "2", "3")]


def test_the_page_renders_every_field_devices_last(gr, manager):
    from zeroboard.webui import form as formmod

    sections = list(formmod.top_sections()) + list(formmod.bottom_sections())
    assert sorted(sections) == sorted(spec.sections())
    assert sections[-1] == "devices"
    with gr.Blocks():
        f = formmod.Form()
        for section, names in spec.sections().items():
            formmod.render_section(f, section, names, spec.JobSpec(), "en", [])
    assert set(f.names) == set(spec.FIELDS) - {"gpu_ids"}  # no GPU: processes instead of a GPU picker
    assert f.device_count is not None and f.device_count.interactive is False
    with gr.Blocks():
        g = formmod.Form()
        formmod.render_section(g, "devices", spec.sections()["devices"], spec.JobSpec(), "en", FAKE_GPUS)
    assert "gpu_ids" in g.names
    assert [label for label, _ in g.fields["gpu_ids"].choices][1].startswith("1: NVIDIA H200 · 100 of 143 GiB free")


def test_labels_exist_in_both_languages_and_use_the_course_words():
    for name in spec.FIELDS:  # each from the catalog's own table: a field it lacks raises, never falls back
        en, zh, en_help, zh_help = words.fields.FIELDS[name]
        assert words.label(name, "en") == en and words.label(name, "zh") == zh != name, name
        assert words.help_text(name, "zh") == zh_help and zh_help != en_help, name
    with pytest.raises(KeyError):
        words.label("no_such_field", "en")
    assert words.label("device_count", "zh") == "设备数量"
    assert words.label("deepspeed_stage", "zh") == "DeepSpeed stage"
    assert words.label("offload", "zh") == "使用 offload"
    assert words.label("preview", "zh") == "预览命令"
    assert words.label("start", "zh") == "开始"
    assert words.label("offload", "en") == "Enable offload"


@pytest.mark.parametrize("lang,words", [("zh", ["设备数量", "DeepSpeed stage", "使用 offload", "预览命令", "开始"]),
                                        ("en", ["Device count", "DeepSpeed stage", "Enable offload", "Preview command",
                                                "Start", "Abort", "Save arguments", "Load arguments"])])
def test_labels_are_in_the_first_paint(gr, manager, lang, words):
    from zeroboard.webui import app

    config = app_config(app.build_app(manager, lang=lang, gpus=[]))
    for w in words:
        assert w in config, w


def test_a_language_switch_relabels_without_touching_values(gr, manager):
    from zeroboard.webui import app

    demo = app.build_app(manager, lang="en", gpus=[])
    fn = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "relabel")
    updates = dict(zip([getattr(o, "elem_id", None) for o in fn.outputs], fn.fn("zh")))
    assert updates["zb-download"] == {"__type__": "update", "label": "下载完整日志"}  # its value is the log file
    assert updates["zb-title"]["value"] == "## ZeroBoard · 用 DeepSpeed ZeRO 微调"
    assert updates["zb-tab-train"]["label"] == "训练" and updates["zb-tab-runs"]["label"] == "运行记录"  # every tab
    assert updates["zb-runs-compare"]["value"] == "对比"  # the Runs page's words too, with no wiring of its own


def test_a_page_is_one_registration(gr, manager, monkeypatch):
    """A page registered once gets its tab, its label in both languages, the language switch and the load steps."""
    from zeroboard.webui import app, pages

    def render(ctx):
        view = pages.View()
        button = gr.Button(words.label("runs.refresh", ctx.lang), elem_id="zb-probe-button")
        view.texts["runs.refresh"] = (button, "value")
        ctx.on_load(lambda lang: f"loaded in {lang}", [], [button])
        return view

    monkeypatch.setitem(pages.PAGES, "probe", pages.Page("probe", "tab.runs", render, lambda view, ctx: None, order=99))
    demo = app.build_app(manager, lang="en", gpus=[])
    config = demo.get_config_file()
    tabs = [c["props"].get("elem_id") for c in config["components"] if c["type"] == "tabitem"]
    assert tabs == [f"zb-tab-{p.id}" for p in pages.ordered()]  # every registered page, in their order
    assert tabs[:2] == ["zb-tab-train", "zb-tab-runs"] and tabs[-1] == "zb-tab-probe" and "zb-tab-chat" in tabs
    relabel = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "relabel")
    updates = dict(zip([getattr(o, "elem_id", None) for o in relabel.outputs], relabel.fn("zh")))
    assert updates["zb-probe-button"] == {"__type__": "update", "value": "刷新"} and updates["zb-tab-probe"]["label"]
    pick = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "pick_language")
    load = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "on_load"
                and any(getattr(o, "elem_id", None) == "zb-probe-button" for o in f.outputs))

    class Request:  # a page opened at ?lang=zh
        query_params, headers = {"lang": "zh"}, {}

    assert pick.fn(Request(), None)[0] == "zh" and not pick.queue  # the language first, in a quick call of its own
    values = [demo.blocks[c._id].value if hasattr(c, "_id") else None for c in load.inputs]
    values[0] = "zh"  # the language radio, as the pick set it
    out = dict(zip([getattr(o, "elem_id", None) for o in load.outputs], load.fn(*values)))
    assert out["zb-probe-button"] == "loaded in zh"  # its load step, in the page's language
    with pytest.raises(ValueError):
        pages.register(pages.Page("probe", "tab.train", render, lambda view, ctx: None))


# --- handlers -------------------------------------------------------------------------------


def test_form_values_round_trip_to_the_same_spec(tmp_path):
    job = spec.JobSpec(dataset=["a", "b"], lora_target=["q_proj", "v_proj"], extra_args={"optim": "adamw_torch"},
                       gpu_ids=[1, 0], output_dir=str(tmp_path))
    back, problems = handlers.form_to_spec(handlers.spec_to_form(job))
    assert problems == {} and back == job


def test_the_form_names_a_path_inside_the_workspace_relative_to_it(tmp_path, monkeypatch):
    """A run shown again or a file loaded: its paths as the workspace names them, which lead to the same folders."""
    monkeypatch.setenv(workspace.WORKSPACE_ENV, str(tmp_path))
    job = spec.JobSpec(output_dir=str(tmp_path / "runs" / "demo"), model_name_or_path=str(tmp_path / "cache" / "m"))
    values = handlers.spec_to_form(job)
    assert values["output_dir"] == "runs/demo" and values["model_name_or_path"] == "cache/m"
    assert workspace.current().path(values["output_dir"]) == (tmp_path / "runs" / "demo").resolve()
    assert handlers.spec_to_form(spec.JobSpec(output_dir="/elsewhere/run"))["output_dir"] == "/elsewhere/run"


def test_every_invalid_field_is_reported_and_nothing_is_built(tmp_path):
    values = demo_values(tmp_path / "run", learning_rate=7, offload=True, cutoff_len=None)
    checked = handlers.check(values, [])
    assert not checked.ok and checked.command is None
    assert "cutoff_len" in checked.errors  # type problems first, all at once
    checked = handlers.check({**values, "cutoff_len": 128}, [])
    assert set(checked.errors) >= {"learning_rate", "offload"}
    assert "Nothing was started" in handlers.report_markdown(checked)


def test_errors_go_next_to_their_fields(gr, tmp_path):
    from zeroboard.webui import form as formmod

    with gr.Blocks():
        f = formmod.Form()
        for section, names in spec.sections().items():
            formmod.render_section(f, section, names, spec.JobSpec(), "en", [])
    updates = dict(zip(f.names, formmod.field_updates(f, {"learning_rate": "out of range", "extra_args": "bad"}, "en"),
                       strict=True))
    assert updates["learning_rate"]["info"] == "Error: out of range"
    assert updates["learning_rate"]["elem_classes"] == ["zb-invalid"]
    assert "bad" in updates["extra_args"]["label"]  # the code box has no help line: the label says it
    assert updates["seed"]["info"] == spec.help_text("seed") and updates["seed"]["elem_classes"] == []


def test_preview_of_stage_2_with_offload_names_the_preset_and_shows_its_json(tmp_path):
    checked = handlers.check(demo_values(tmp_path / "run", deepspeed_stage="2", offload=True), [])
    assert checked.ok, checked.errors
    cmd = checked.command
    page = handlers.command_html(cmd)
    assert '<mark class="zb-ds">cache/ds_z2_offload_config.json</mark>' in page
    assert "CUDA_VISIBLE_DEVICES=&#x27;&#x27;" in page  # the environment is part of what is shown
    cfg = json.loads(handlers.deepspeed_json(cmd))
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    # Start re-checks on the previewed port: the very same argv
    again = handlers.check(demo_values(tmp_path / "run", deepspeed_stage="2", offload=True), [], port=cmd.master_port)
    assert again.command.argv == cmd.argv and again.command.env == cmd.env


def test_device_count(tmp_path):
    assert handlers.device_count({"device_type": "auto", "num_processes": 2}, []) == 2
    assert handlers.device_count({"device_type": "auto", "gpu_ids": []}, FAKE_GPUS) == 2
    assert handlers.device_count({"device_type": "auto", "gpu_ids": [1]}, FAKE_GPUS) == 1
    assert handlers.device_count({"device_type": "cpu", "num_processes": 1}, FAKE_GPUS) == 1


def test_save_then_load_arguments(tmp_path):
    path = tmp_path / "saved" / "job.yaml"
    values = demo_values(tmp_path / "run", learning_rate=0.001, deepspeed_stage="3")
    message, confirm = handlers.save_args(values, str(path))
    assert "Saved" in message and not confirm
    loaded, message = handlers.load_args(str(path))
    assert loaded is not None and "Loaded" in message
    assert loaded["learning_rate"] == 0.001 and loaded["deepspeed_stage"] == "3"
    assert spec.load_yaml(path).learning_rate == 0.001  # the CLI reads the same file


@pytest.mark.parametrize("text,word", [("learning_rate: [oops", "not valid YAML"),
                                       ("learning_rat: 0.1", "did you mean learning_rate"),
                                       ("cutoff_len: lots", "whole number"),
                                       ("- just\n- a list", "mapping")])
def test_loading_a_malformed_file_says_what_is_wrong_and_changes_nothing(tmp_path, text, word):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    values, message = handlers.load_args(str(path))
    assert values is None and word in message and "Nothing was loaded" in message


def test_loading_a_malformed_file_leaves_every_widget_as_it_is(gr, manager, tmp_path):
    from zeroboard.webui import app

    demo = app.build_app(manager, gpus=[])
    path = tmp_path / "bad.yaml"
    path.write_text("deepspeed_stage: 5\n")
    load = next(fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "on_load" and len(fn.inputs) == 2
                and len(fn.outputs) > 10)
    out = load.fn(str(path), "en")
    assert all(o == gr.skip() for o in out[:-1])
    assert "deepspeed_stage" in out[-1] and "must be one of none, 2, 3" in out[-1]


def test_dataset_preview_shows_a_few_samples(demo):
    text = handlers.dataset_preview("cache/demo/data", "identity, demo_alpaca", n=2)
    assert "identity" in text and "demo_alpaca" in text and "**assistant**" in text
    assert "Error" in handlers.dataset_preview("cache/demo/data", "no_such_set")


def _fake_running_job(run_dir: Path) -> JobState:
    """A job record whose supervisor and launcher are this very process: it counts as running."""
    me = psutil.Process()
    run_dir.mkdir(parents=True)
    st = JobState(run_dir=str(run_dir), status="running", device_kind="cpu", devices=[0, 1],
                         supervisor_pid=me.pid, supervisor_ctime=me.create_time(), launcher_pid=me.pid,
                         launcher_ctime=me.create_time(), started=time.time())
    write_state(st)
    return st


def test_a_second_start_says_what_is_running(manager, tmp_path):
    busy = _fake_running_job(tmp_path / "busy")
    register(manager, busy)
    checked, state, message = handlers.start(demo_values(tmp_path / "second"), [], manager)
    assert state is None and checked.ok
    assert "already running on CPU processes" in message and busy.run_dir in message
    assert not (tmp_path / "second").exists()


def test_abort_without_a_run_says_so(manager):
    assert "no run selected" in handlers.abort(manager, None)
    assert "not a run of this page" in handlers.abort(manager, "/etc")  # a typed-in folder is never signalled


# --- live view ------------------------------------------------------------------------------


def test_live_snapshot_reads_new_lines_only_and_renders_a_finished_run(gr, manager, tmp_path):
    from zeroboard.webui import live_panels

    run = tmp_path / "run"
    run.mkdir()
    (run / events.LOG_FILE).write_text("[rank0]:hello\n")
    ev = events.EventWriter(run, 0)
    ev.emit("start", world_size=2, devices=[], total_steps=10)
    ev.emit("log", step=5, total_steps=10, loss=1.5, lr=1e-3, tokens_per_sec=900.0, eta=3.0, memory=[])
    register(manager, JobState(run_dir=str(run), status="finished", message="finished", exit_code=0,
                               started=time.time() - 5, ended=time.time()))
    live = Live(manager)
    snap = live.snapshot(str(run))
    assert snap.log_text == "[rank0]:hello" and snap.loss == [{"step": 5, "loss": 1.5}]
    assert 'data-step="10"' in snap.progress_html and "finished" in snap.final_md
    assert "step 10/10 · elapsed 0:05 · ETA 0:00" in snap.progress_html and "exit code: `0`" in snap.final_md
    zh = live.snapshot(str(run), "zh")
    assert "第 10/10 步 · 已用 0:05 · 预计剩余 0:00" in zh.progress_html and "退出码: `0`" in zh.final_md
    with (run / events.LOG_FILE).open("a") as fh:
        fh.write("[rank1]:world\n")
    snap2 = live.snapshot(str(run))
    assert snap2.log_version == 2 and snap2.log_text.endswith("[rank1]:world")

    with gr.Blocks():
        panels = live_panels.render_live("en", [])
    first, seen = live_panels.render_snapshot(panels, snap2, None, time.time())
    log_at = live_panels.outputs(panels).index(panels.log)
    assert first[0] != gr.skip() and first[log_at] == snap2.log_text
    again, _ = live_panels.render_snapshot(panels, live.snapshot(str(run)), seen, time.time())
    assert again[0] == gr.skip() and again[log_at] == gr.skip()  # nothing new: nothing re-sent
    procs = live_panels.outputs(panels).index(panels.procs)
    assert first[procs]["headers"] == live_panels.PROC_HEADERS and first[procs]["data"] == snap2.proc_rows
    zh, _ = live_panels.render_snapshot(panels, live.snapshot(str(run), "zh"), None, time.time())
    assert zh[procs]["headers"][3:5] == ["进程", "当前占用"]  # the table's headers follow the page's language
    assert panels.procs.postprocess(zh[procs]).headers == zh[procs]["headers"]  # what gradio sends to the page


def test_a_preference_run_draws_its_rewards_and_an_sft_run_hides_the_chart(gr, manager, tmp_path):
    """The log events' rewards (chosen, rejected, margins, accuracies) and KTO's kl, a series each, named in the
    page's language; the chart shows for a preference run only."""
    from zeroboard.webui import live_panels

    runs = {}
    for name, extra in (("dpo", {"rewards": {"chosen": 0.5, "rejected": -0.5, "margins": 1.0, "accuracies": 0.75}}),
                        ("kto", {"rewards": {"chosen": 0.5, "rejected": -0.2, "margins": 0.7}, "kl": 0.1}), ("sft", {})):
        run = runs[name] = tmp_path / name
        run.mkdir()
        events.EventWriter(run, 0).emit("log", step=1, total_steps=2, loss=0.7, lr=1e-3, memory=[], **extra)
        register(manager, JobState(run_dir=str(run), status="finished", started=time.time() - 5, ended=time.time()))
    live = Live(manager)
    assert {r["series"] for r in live.snapshot(str(runs["kto"])).rewards} == {"chosen", "rejected", "margins", "kl"}
    frame = live_panels.rewards_frame(live.snapshot(str(runs["dpo"])).rewards, "zh")
    assert set(frame["series"]) == {"选中", "拒绝", "差值", "准确率"} and frame["value"].max() == 1.0
    with gr.Blocks():
        panels = live_panels.render_live("en", [])
    at = live_panels.outputs(panels).index(panels.rewards)
    dpo, _ = live_panels.render_snapshot(panels, live.snapshot(str(runs["dpo"])), None, time.time())
    sft, _ = live_panels.render_snapshot(panels, live.snapshot(str(runs["sft"])), None, time.time())
    assert dpo[at]["visible"] is True and len(dpo[at]["value"]) == 4
    assert sft[at]["visible"] is False


def test_chart_legends_name_their_series_in_the_page_language_and_are_redrawn_once(gr, manager, tmp_path):
    """No evaluation set: no evaluation series.  New series (a language, a run that evaluates): their rows, then on
    the next tick the legend's title changed invisibly (gradio's LinePlot draws the series it had then)."""
    from zeroboard.webui import live_panels

    assert set(live_panels.loss_frame([{"step": 5, "loss": 1.0}], [], "en")["series"]) == {"train"}
    assert set(live_panels.loss_frame([], [], "zh", has_eval=True)["series"]) == {"训练", "评估"}
    history = live_panels.history_frame([{"seconds": 0.0, "series": "RAM", "MiB": 1.0},
                                         {"seconds": 0.0, "series": "RSS", "MiB": 2.0}], "zh")
    assert set(history["series"]) == {"主机内存", "任务内存"}

    run = tmp_path / "run"
    run.mkdir()
    events.EventWriter(run, 0).emit("log", step=5, total_steps=10, loss=1.5, lr=1e-3, memory=[])
    register(manager, JobState(run_dir=str(run), status="finished", started=time.time() - 5, ended=time.time()))
    with gr.Blocks():
        panels = live_panels.render_live("en", [])
    live = Live(manager)
    loss, history_at = (live_panels.outputs(panels).index(c) for c in (panels.loss, panels.history))

    def tick(seen, lang):
        out, seen = live_panels.render_snapshot(panels, live.snapshot(str(run), lang), seen, time.time())
        return out[loss], out[history_at], seen

    rows, hist, seen = tick(None, "en")
    assert list(rows["series"].unique()) == ["train"] and hist is not gr.skip()
    title, hist_title, seen = tick(seen, "en")
    assert title["color_title"] == "curve\u200b" and hist_title["color_title"] == "memory\u200b"
    retitled, _, seen = tick(seen, "en")  # the axis titles said again (RETITLE_TICKS), an invisible character added
    assert retitled["x_title"] == "step\u200b" and retitled["y_title"] == "Loss" and "value" not in retitled
    assert tick(seen, "en")[0] == gr.skip()  # nothing new: nothing sent
    rows, _, seen = tick(seen, "zh")  # a language switch relabels the titles, then the rows come in Chinese
    assert list(rows["series"].unique()) == ["训练"]
    title, _, seen = tick(seen, "zh")
    assert title["color_title"] == "曲线\u200b"  # the switch reset the title: the redraw adds the character again
    (run / "job.requested.yaml").write_text("val_size: 0.1\n")  # a run that evaluates: its series appear
    from zeroboard.runs import summary

    summary.CACHE._data.clear()
    rows, _, seen = tick(seen, "zh")
    assert set(rows["series"]) == {"训练", "评估"}
    assert tick(seen, "zh")[0]["color_title"] == "曲线"


def test_after_a_language_switch_every_chart_draws_its_axis_titles_again_on_later_ticks(gr, manager, tmp_path):
    """A drawing begun with the old titles may end after the switch's: on the ticks RETITLE_TICKS after a switch each
    chart is sent its axis titles in the new language, changed invisibly each time so that it draws again; a chart
    sent rows on such a tick gets its titles on the next."""
    from zeroboard.webui import live_panels

    run = tmp_path / "run"
    run.mkdir()
    writer = events.EventWriter(run, 0)
    writer.emit("log", step=5, total_steps=10, loss=1.5, lr=1e-3, memory=[])
    register(manager, JobState(run_dir=str(run), status="finished", started=time.time() - 5, ended=time.time()))
    with gr.Blocks():
        panels = live_panels.render_live("en", [])
    live = Live(manager)
    at = {name: live_panels.outputs(panels).index(getattr(panels, name)) for name in live_panels.AXES}
    seen, said = None, []
    for n in range(12):
        if n == 5:  # new rows on the tick the titles are due: the lr chart gets its rows, the titles a tick later
            writer.emit("log", step=6, total_steps=10, loss=1.4, lr=9e-4, memory=[])
        out, seen = live_panels.render_snapshot(panels, live.snapshot(str(run), "zh"), seen, time.time())
        said.append({name: out[i] for name, i in at.items()})
    lr = [(n, u) for n, s in enumerate(said) for u in [s["lr"]] if isinstance(u, dict) and "x_title" in u]
    assert [n for n, _ in lr] == [2, 6, 10]  # the third tick after the switch, the sixth (rows first), the eleventh
    assert [u["x_title"] for _, u in lr] == ["步数\u200b", "步数", "步数\u200b"] and lr[0][1]["y_title"] == "学习率"
    assert type(said[5]["lr"]).__name__ == "DataFrame"  # the rows of step 6
    hist = [n for n, s in enumerate(said) if isinstance(s["history"], dict) and "x_title" in s["history"]]
    assert hist and said[hist[0]]["history"]["x_title"].rstrip("\u200b") == words.label("axis_seconds", "zh")


def test_the_full_log_is_served_as_a_static_path_not_copied(tmp_path):
    from gradio.data_classes import _StaticFiles

    from zeroboard.webui import live_panels

    log = tmp_path / "launcher.log"
    log.write_text("hello\n")
    assert live_panels.downloadable(str(log)) == str(log.resolve())
    assert log.resolve() in _StaticFiles.all_paths and tmp_path.resolve() not in _StaticFiles.all_paths
    assert live_panels.downloadable(None) is None


def test_a_failed_run_shows_exit_code_rank_and_error_lines(manager, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    st = JobState(run_dir=str(run), status="failed", message="failed (exit code 1): rank 1: killed by SIGKILL",
                         exit_code=1, failed_rank=1, error_lines=["Root Cause", "rank : 1"])
    register(manager, st)
    md = Live(manager).snapshot(str(run)).final_md
    assert "exit code: `1`" in md and "failed rank: **1**" in md and "Root Cause" in md


def test_memory_panel_rows_for_gpus_and_for_cpu():
    from zeroboard.runs import monitor

    detect = lambda with_processes=False: [  # noqa: E731
        devices.Gpu(0, "NVIDIA H200", 143 << 30, 100 << 30, 43 << 30, 87, (9, 0), [devices.GpuProcess(4242, 40 << 30)])]
    s = monitor.take_sample(None, detect)
    assert monitor.gpu_rows(s) == [[0, "NVIDIA H200", "43.0 / 143.0 GiB", "87%"]]
    assert monitor.process_rows(s)[0][:3] == [0, 4242, ""]  # not a rank of the job
    assert {r["series"] for r in monitor.history_rows([s, s])} == {"GPU 0"}
    cpu = monitor.take_sample(None, lambda with_processes=False: [])
    cpu.ranks = [{"rank": 0, "pid": 1, "rss_bytes": 300 << 20}]
    assert monitor.process_rows(cpu, {0: {"rss_peak_bytes": 400 << 20}}) == [
        ["cpu", 1, 0, "zeroboard.training.train", "300 MiB", "400 MiB"]]
    assert {r["series"] for r in monitor.history_rows([cpu])} == {monitor.HOST_SERIES, monitor.JOB_SERIES}
    mon = monitor.Monitor(detect=lambda with_processes=False: [])
    assert mon.sample(None) is mon.sample(None)  # one sample per interval however many pages ask


# --- the server process -----------------------------------------------------------------------


def test_the_web_server_never_imports_torch_or_transformers(tmp_path):
    ds = tmp_path / "ds.json"  # a DeepSpeed JSON is checked by DeepSpeed's own model: in a child process
    ds.write_text('{"zero_optimization": {"stage": 7}}')
    code = ("import sys; from zeroboard.webui import app; from zeroboard.runs import manager; "
            "from zeroboard.job import checks, spec; "
            f"app.build_app(manager.JobManager(index={str(tmp_path / 'r.json')!r})); "
            f"r = checks.validate(spec.JobSpec(deepspeed={str(ds)!r}, output_dir={str(tmp_path / 'o')!r}), []); "
            "assert 'DeepSpeed refuses' in r.errors['deepspeed'], r.errors; "
            "bad = [m for m in ('torch', 'transformers', 'deepspeed', 'peft') if m in sys.modules]; "
            "print('heavy:', bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_serving_beyond_localhost_needs_a_password(monkeypatch, capsys):
    from zeroboard.webui import app

    monkeypatch.delenv("ZEROBOARD_PASSWORD", raising=False)
    assert app.serve(host="0.0.0.0", port=1) == 2
    err = capsys.readouterr().err
    assert "ZEROBOARD_PASSWORD" in err and "0.0.0.0" in err


def test_cli_passes_host_and_port(monkeypatch):
    from zeroboard import cli
    from zeroboard.webui import app

    seen = {}
    monkeypatch.setattr(app, "serve", lambda host, port: seen.update(host=host, port=port) or 0)
    assert cli.main(["webui", "--host", "127.0.0.1", "--port", "7999"]) == 0
    assert seen == {"host": "127.0.0.1", "port": 7999}
    assert os.environ.get("GRADIO_ANALYTICS_ENABLED") == "False"


def test_the_run_list_accepts_only_registered_runs(gr, manager, tmp_path):
    from zeroboard.webui import app

    demo = app.build_app(manager, gpus=[])
    pick = next(fn.fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "on_pick")
    assert pick("/etc", {"run_dir": None}) == {"run_dir": None}  # typed in: ignored
    (tmp_path / "run").mkdir()
    run = register(manager, JobState(run_dir=str(tmp_path / "run"), status="finished"))
    assert pick(run.run_dir, {"run_dir": None}) == {"run_dir": run.run_dir}


@pytest.mark.parametrize("tab_run, shown, active, expected", [
    # a page load half-way: the form already locked on the running job, the tab not yet following it
    (None, {"run": "runs/a", "locked": True}, {"runs/a"}, ("runs/a", "same")),
    # ... and the same when that job has ended meanwhile: unlock
    (None, {"run": "runs/a", "locked": True}, set(), ("runs/a", "unlock")),
    ("runs/b", {"run": "runs/a", "locked": False}, {"runs/b"}, ("runs/b", "lock")),  # a run started here
    ("runs/b", {"run": "runs/b", "locked": True}, set(), ("runs/b", "unlock")),  # ... and ended
    ("runs/b", {"run": "runs/b", "locked": False}, {"runs/b"}, ("runs/b", "follow")),  # New job: stays editable
    (None, {}, set(), (None, "same")),  # a fresh tab, nothing running
])
def test_a_form_tick_locks_and_unlocks_on_the_run_it_shows(tab_run, shown, active, expected):
    from zeroboard.webui.attach import form_turn
    assert form_turn(tab_run, shown, lambda d: d in active) == expected
