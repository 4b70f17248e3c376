"""The ZeRO lesson without a browser or a training run: where each setting keeps the states, the same job planned on
GPUs beside a CPU run, the loss curves that draw as one line, and what a CPU rank's RSS peak measures.

Runs here are written directly (``helpers.synthetic_run``); the lesson's runs themselves are trained by the
documentation screenshots (tools/screenshots.py), whose test reads the comparison from the page
(test_screenshots.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import synthetic_run
from zeroboard.job import dstune, placement, presets, record
from zeroboard.runs import compare
from zeroboard.runs.manager import JobManager
from zeroboard.training.demo_model import LESSON_SIZES
from zeroboard.webui import runs_view as rv

SETTINGS = (("none", False), ("2", False), ("3", False), ("2", True))  # the chapter's four, in the table's order


@pytest.fixture()
def lesson_model(tmp_path) -> Path:
    """The lesson model's config.json alone (the planner and the DeepSpeed values read nothing else)."""
    d = tmp_path / "lesson-model"
    d.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 768, "max_position_embeddings": 512,
              "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-6, "torch_dtype": "float32",
              **LESSON_SIZES}
    (d / "config.json").write_text(json.dumps(config))
    return d


def lesson_runs(tmp_path: Path, index: Path, model: Path, same_seed: bool = True, **job) -> list[Path]:
    """The chapter's four settings of the lesson's job on two CPU processes, each with the DeepSpeed config the trainer
    would keep (its preset with the values ZeroBoard sets for two CPU processes)."""
    runs = []
    for i, (stage, off) in enumerate(SETTINGS):
        run = synthetic_run(tmp_path / f"lesson-{stage}{'-offload' if off else ''}", index, seed=0 if same_seed else i,
                            model_name_or_path=str(model), finetuning_type="full", deepspeed_stage=stage, offload=off,
                            **job)
        if stage != "none":  # what the trainer keeps: the preset, with the values set for two CPU processes
            preset = str(placement.cache_dir() / presets.preset_name(stage, off))
            used, _ = dstune.for_run(presets.preset(stage, off), preset, 2, str(model), device="cpu")
            (run / record.DS_CONFIG_FILE).write_text(json.dumps(used))
        runs.append(run)
    return runs


@pytest.fixture()
def manager(index):
    return JobManager(index=index)


# --- where each setting keeps the states ------------------------------------------------------------------

def test_each_setting_places_weights_gradients_and_optimizer_states_as_the_course_says():
    r, p, o = compare.REPLICATED, compare.PARTITIONED, compare.OFFLOADED
    table = {("none", False, False): (r, r, r), ("1", False, False): (r, r, p), ("2", False, False): (r, p, p),
             ("3", False, False): (p, p, p), ("2", True, False): (r, o, o), ("3", True, True): (o, o, o)}
    for setting, where in table.items():
        assert tuple(compare.parts_placed(*setting)[k] for k in compare.PARTS) == where, setting


def test_one_sentence_per_setting_says_what_moved_in_both_languages(tmp_path, index, manager, lesson_model):
    runs = [str(r.resolve()) for r in lesson_runs(tmp_path, index, lesson_model)]
    rows = compare.course_rows(rv.chosen(manager, runs))
    en, zh = rv.moved_sentences(rows, "en"), rv.moved_sentences(rows, "zh")
    assert en == [
        "**none** (16Ψ): weights, gradients and optimizer states replicated on every GPU; activations stay with each GPU.",
        "**2** (2Ψ+14Ψ/N): weights replicated on every GPU, gradients and optimizer states partitioned over the 2 GPUs; "
        "activations stay with each GPU.",
        "**2 + offload**: weights replicated on every GPU, gradients and optimizer states offloaded to CPU memory; "
        "activations stay with each GPU.",
        "**3** (16Ψ/N): weights, gradients and optimizer states partitioned over the 2 GPUs; activations stay with each GPU.",
    ]  # the table's order: by stage, then offload
    assert zh[1] == "**2**(2Ψ+14Ψ/N):权重每张 GPU 各存一份;梯度和优化器状态分片到 2 张 GPU;激活值留在各自的 GPU 上。"
    assert zh[3].startswith("**3**(16Ψ/N):权重、梯度和优化器状态分片到 2 张 GPU")
    assert "卸载到 CPU 内存" in zh[2]


def test_a_cpu_run_shows_the_same_job_planned_on_gpus_where_offload_is_lowest(tmp_path, index, manager, lesson_model):
    runs = [str(r.resolve()) for r in lesson_runs(tmp_path, index, lesson_model)]
    rows = compare.course_rows(rv.chosen(manager, runs))
    on_gpu = {(r.stage, r.offload): r.on_gpu for r in rows}
    assert all(f is not None and f.gpus == 2 for f in on_gpu.values())
    peaks = {k: f.peak for k, f in on_gpu.items()}
    # the course's order on GPUs, and offload below every other setting: it moves the states off the GPU
    assert peaks[("none", False)] > peaks[("2", False)] > peaks[("3", False)] > peaks[("2", True)], peaks
    assert (on_gpu[("2", True)].offload_optimizer, on_gpu[("3", False)].formula) == (True, "16Ψ/N")

    course = rv.course_markdown(rv.chosen(manager, runs), "en")
    head = next(ln for ln in course.splitlines() if ln.startswith("| run |"))
    assert "plan per GPU (2 × H200)" in head
    assert "offload moves the optimizer states from host memory to host memory and saves nothing" in course
    assert course.count("activations stay with each GPU") == 4
    zh = rv.course_markdown(rv.chosen(manager, runs), "zh")
    assert "每张 GPU 的估算(2 × H200)" in zh and "在这里省不下任何内存" in zh


def test_runs_on_gpus_need_no_second_plan_and_say_what_moved_from_their_own_setting(tmp_path, index, manager, lesson_model):
    runs = lesson_runs(tmp_path, index, lesson_model)
    rows = compare.course_rows(rv.chosen(manager, [str(r.resolve()) for r in runs]))
    for r in rows:  # as the same runs would read on GPUs
        r.device_kind, r.on_gpu = "cuda", None
    # the table's order: none, 2, 2 + offload, 3
    assert [compare.placed(r).parts["weights"] for r in rows] == ["replicated"] * 3 + ["partitioned"]
    assert compare.placed(rows[2]).offload_optimizer and len(rv.moved_sentences(rows, "en")) == 4


def test_a_job_that_cannot_be_planned_on_gpus_leaves_the_cell_empty(tmp_path, index, manager, lesson_model):
    runs = lesson_runs(tmp_path, index, lesson_model)
    (runs[1] / record.SPEC_FILE).write_text("model_name_or_path: [not, a, path]\n")
    (lesson_model / "config.json").write_text("{}")  # no architecture: nothing to plan on a GPU either
    rows = compare.course_rows(rv.chosen(manager, [str(r.resolve()) for r in runs]))
    assert all(r.on_gpu is None for r in rows)
    assert "plan per GPU" not in rv.course_markdown(rv.chosen(manager, [str(r.resolve()) for r in runs]), "en")


# --- curves that draw as one line ------------------------------------------------------------------

def test_the_same_curves_are_found_and_said_under_the_chart(tmp_path, index, manager, lesson_model):
    runs = [str(r.resolve()) for r in lesson_runs(tmp_path, index, lesson_model)]
    note = rv.curves_note(rv.chosen(manager, runs), "en")
    assert note.startswith("The 4 loss curves coincide and draw as one line: the same seed and the same data")
    assert "ZeRO and offload change where the training states are kept" in note
    assert rv.curves_note(rv.chosen(manager, runs), "zh").startswith("这 4 条损失曲线完全重合")


def test_curves_that_differ_are_not_said_to_coincide(tmp_path, index, manager, lesson_model):
    runs = [str(r.resolve()) for r in lesson_runs(tmp_path, index, lesson_model, same_seed=False)]
    assert rv.curves_note(rv.chosen(manager, runs), "en") == ""
    # two of them the same, and their jobs differ in more than the placement: named, with the plain reason
    other = synthetic_run(tmp_path / "lower-lr", index, seed=0, model_name_or_path=str(lesson_model),
                          finetuning_type="full", learning_rate=1e-6)
    note = rv.curves_note(rv.chosen(manager, [runs[0], runs[1], str(other.resolve())]), "en")
    assert note == ("The loss curves of `lesson-none` and `lower-lr` coincide and draw as one line: these runs logged "
                    "the same losses at every step.")


def test_coinciding_groups_curves_by_steps_and_values():
    a = [(1, 6.9475), (2, 4.4482), (3, 3.51)]
    series = {"none": a, "2": [(s, v + 1e-5) for s, v in a], "3": a[:2], "lr": [(s, v * 1.01) for s, v in a], "x": a}
    assert compare.coinciding(series) == [["none", "2", "x"]]
    assert compare.coinciding({"a": [], "b": []}) == []  # no loss logged yet: nothing coincides


# --- DeepSpeed on several CPU processes ------------------------------------------------------------------

@pytest.mark.parametrize("offload", [False, True])
def test_two_cpu_processes_get_model_sized_buckets_and_released_weights(lesson_model, offload):
    hidden = LESSON_SIZES["hidden_size"]
    for stage, values in (("2", {"reduce_bucket_size": hidden**2, "allgather_bucket_size": hidden**2}),
                          ("3", {"stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0})):
        path = str(placement.cache_dir() / presets.preset_name(stage, offload))
        used, tuned = dstune.for_run(presets.preset(stage, offload), path, 2, str(lesson_model), device="cpu")
        assert tuned == values and all(used["zero_optimization"][k] == v for k, v in values.items())
        # several GPUs keep the preset as written
        assert dstune.for_run(presets.preset(stage, offload), path, 2, str(lesson_model), device="cuda")[1] == {}


def test_a_cpu_ranks_freed_tensors_go_back_to_the_system(tmp_path):
    """After a large block is freed, glibc serves blocks below it from the heap: freed there, they stay in the RSS
    while a small block lives above them. The trainer's setting returns them, so a rank's RSS peak is what it needed."""
    probe = """
import sys, torch
from zeroboard.training.callbacks import return_freed_memory
if sys.argv[1] == "fixed":
    assert return_freed_memory()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
del_me = torch.ones(4 << 20)  # 16 MiB, mapped: once freed, glibc's threshold rises to it (32 MiB at most)
del del_me
before = rss()
kept, blocks = [], []
for _ in range(64):
    blocks.append(torch.ones(1 << 18))  # 1 MiB
    kept.append(torch.ones(24 << 10))  # 96 KiB above each: from the heap's top either way (no free list holds it)
blocks.clear()
print((rss() - before) >> 20)
"""
    grown = {how: int(subprocess.run([sys.executable, "-c", probe, how], capture_output=True, text=True, check=True,
                                     timeout=120).stdout.split()[-1]) for how in ("default", "fixed")}
    assert grown["default"] >= 48 and grown["fixed"] <= 8, grown

