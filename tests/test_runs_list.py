"""The runs of a workspace without a browser: their summaries (cached), comparisons, deletion and archiving, the CLI.

Runs here are written directly (``helpers.synthetic_run``): a run folder as ZeroBoard leaves one, no training.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest

from helpers import owned_run, seal, synthetic_run
from zeroboard.job import folders, manifest, record
from zeroboard.runs import compare, housekeeping, summary
from zeroboard.runs.manager import JobManager
from zeroboard.runs.state import read_state


@pytest.fixture()
def manager(index):
    return JobManager(index=index)


def four_settings(tmp_path: Path, index: Path) -> list[Path]:
    """The course's comparison: the same job under stage none, 2, 3 and 3 + offload."""
    return [synthetic_run(tmp_path / f"z{stage}{'-off' if off else ''}", index, seed=i, deepspeed_stage=stage, offload=off)
            for i, (stage, off) in enumerate((("none", False), ("2", False), ("3", False), ("3", True)))]


def test_a_summary_reads_the_state_the_job_the_plan_and_the_end_of_the_events(tmp_path, index, manager):
    run = synthetic_run(tmp_path / "run", index, steps=60, every=5, deepspeed_stage="2", learning_rate=0.01)
    with (run / record.EVENTS_FILE).open("a") as fh:  # a newer event format: an extra "v" key is read past
        fh.write(json.dumps({"v": 2, "event": "eval", "step": 60, "eval_loss": 0.75}) + "\n")
    (s,) = summary.summaries(manager)
    events = record.read_events(run / record.EVENTS_FILE)
    logs = [e for e in events if e["event"] == "log"]
    assert (s.run_dir, s.status, s.stage, s.offload, s.method, s.lora_rank) == (str(run.resolve()), "finished", "2", False,
                                                                               "lora", 16)
    assert (s.step, s.total_steps, s.loss, s.eval_loss) == (60, 60, logs[-1]["loss"], 0.75)
    first, last = logs[0], logs[-1]
    assert s.step_time == pytest.approx((last["elapsed"] - first["elapsed"]) / (last["step"] - first["step"]))
    assert s.tokens_per_sec == pytest.approx((last["tokens"] - first["tokens"]) / (last["elapsed"] - first["elapsed"]))
    assert s.peaks == summary.peaks_of(events, "rss_peak_bytes") and len(s.peaks) == 2
    plan = json.loads((run / record.PLAN_FILE).read_text())
    assert s.planned_bytes == plan["host_bytes"]  # CPU processes: the plan's RSS per process
    assert s.duration() == pytest.approx(s.ended - s.started)


def test_a_resumed_run_is_summed_up_by_its_last_attempt(tmp_path, index, manager):
    run = synthetic_run(tmp_path / "run", index, steps=40, every=10)
    later = [{"event": "start", "total_steps": 40},  # resumed from checkpoint-20: its clock starts again
             {"event": "log", "step": 30, "total_steps": 40, "loss": 0.5, "elapsed": 3.0, "tokens": 3000, "memory": []},
             {"event": "log", "step": 40, "total_steps": 40, "loss": 0.4, "elapsed": 5.0, "tokens": 7000, "memory": []}]
    with (run / record.EVENTS_FILE).open("a") as fh:
        fh.write("".join(json.dumps(e) + "\n" for e in later))
    (s,) = summary.summaries(manager)
    assert (s.step, s.loss, s.step_time, s.tokens_per_sec) == (40, 0.4, 0.2, 2000.0)
    loss = compare.points(record.read_events(run / record.EVENTS_FILE))["loss"]
    assert [step for step, _ in loss] == sorted({step for step, _ in loss})  # a step logged twice: once, the later
    assert dict(loss)[40] == 0.4


def test_the_duration_leaves_the_ops_compile_out_and_names_it_apart(tmp_path, index, manager):
    """A run that compiled DeepSpeed's ops first (2:40 of its 6:40): the Runs tab and ``zeroboard runs`` say 4:00 of
    training and the compile apart, from the end event's sum, or each op's event when the run ended otherwise."""
    run = synthetic_run(tmp_path / "run", index)
    state = json.loads((run / record.STATE_FILE).read_text())
    (run / record.STATE_FILE).write_text(json.dumps({**state, "ended": state["started"] + 400}))
    events = record.read_events(run / record.EVENTS_FILE)
    compiled = [{"event": "compile", "op": "cpu_adam"}, {"event": "compiled", "op": "cpu_adam", "seconds": 100.0},
                {"event": "compiled", "op": "deepspeed_shm_comm", "seconds": 60.0}]
    for end_says in (None, 160.0):
        end = [{**events[-1], "compile_s": end_says}] if end_says else []
        lines = events[:1] + compiled + events[1:-1] + end
        (run / record.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in lines))
        (s,) = summary.summaries(JobManager(index=index))
        assert s.compile_s == 160.0 and s.duration() == 240.0
        assert summary.duration_text(s, "en") == "4:00 (+ 2:40 compiling DeepSpeed ops)"
        assert summary.duration_text(s, "zh") == "4:00(另有 2:40 编译 DeepSpeed 算子)"
    (run / record.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))  # nothing compiled
    (s,) = summary.summaries(JobManager(index=index))
    assert s.compile_s == 0 and summary.duration_text(s, "en") == "6:40"


def test_listings_are_cached_by_file_and_read_only_the_tail(tmp_path, index, manager, monkeypatch):
    run = synthetic_run(tmp_path / "run", index, steps=400, every=1)
    cache = summary.FileCache()
    reads = []
    real = summary._tail
    monkeypatch.setattr(summary, "_tail", lambda path: reads.append(path) or real(path))
    entry = manager.registry.entries()[0]
    first = summary.summarize(manager.state_of(entry), entry, cache)
    again = summary.summarize(manager.state_of(entry), entry, cache)
    assert first == again and len(reads) == 1  # the second listing: a stat per file, nothing read
    assert (run / record.EVENTS_FILE).stat().st_size > summary.TAIL_BYTES  # and the first read only the end
    with (run / record.EVENTS_FILE).open("a") as fh:
        fh.write(json.dumps({"event": "log", "step": 401, "total_steps": 400, "loss": 0.1}) + "\n")
    assert summary.summarize(manager.state_of(entry), entry, cache).loss == 0.1 and len(reads) == 2  # it grew: read again
    small = summary.FileCache(size=3)
    for i in range(5):
        (tmp_path / f"f{i}").write_text("{}")
        small.get(tmp_path / f"f{i}", "x", lambda p: p.read_text())
    assert len(small) == 3  # bounded: the server's memory does not grow with the runs it has listed


def test_filters_find_runs_by_words_status_and_archive(tmp_path, index, manager):
    four_settings(tmp_path, index)
    every = summary.summaries(manager)
    assert len(every) == 4 and every[0].name == "z3-off"  # newest first
    assert [s.name for s in every if summary.matches(s, "offload")] == ["z3-off"]
    assert [s.name for s in every if summary.matches(s, "stage 2")] == ["z2"]
    assert [s.name for s in every if summary.matches(s, "", "finished")] == [s.name for s in every]
    assert not [s for s in every if summary.matches(s, "", "", archived=True)]


def test_compare_shows_exactly_the_fields_that_differ_and_the_course_table(tmp_path, index, manager):
    runs = four_settings(tmp_path, index)
    diff = compare.spec_diff([str(r.resolve()) for r in runs])
    assert [name for name, _ in diff.fields] == ["deepspeed_stage", "offload"]  # not output_dir: the runs' names
    assert dict(diff.fields)["deepspeed_stage"] == ["none", "2", "3", "3"]
    rows = compare.course_rows(summary.summaries(manager))
    assert [(r.stage, r.offload) for r in rows] == [("none", False), ("2", False), ("3", False), ("3", True)]
    for r in rows:
        assert len(r.peaks) == 2 and r.planned and r.tokens_per_sec and r.step_time
        assert r.error == pytest.approx((r.planned - max(r.peaks)) / max(r.peaks))
    curves = compare.curves(summary.summaries(manager))
    assert all(len(c["loss"]) == 12 and len(c["lr"]) == 12 and c["eval_loss"] == [] for c in curves.values())


def test_compare_overlays_the_rewards_of_preference_runs_and_tables_their_last(tmp_path, index, manager):
    """Two DPO-like runs beside two SFT ones: the margin and accuracy curves of the first two, their last rewards in
    a table in both languages; the SFT runs have none (their cells say so)."""
    from zeroboard.webui import runs_view

    runs = four_settings(tmp_path, index)[:3]
    for k, run in enumerate(runs[:2]):
        path = run / record.EVENTS_FILE
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for i, e in enumerate(x for x in lines if x["event"] == "log"):
            e["rewards"] = {"chosen": 0.1 * i, "rejected": -0.1 * i, "margins": 0.2 * i + k, "accuracies": 0.5}
        path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    summary.CACHE._data.clear()
    chosen = summary.summaries(manager)
    curves = compare.curves(chosen)
    have = [r for r, c in curves.items() if c["margins"]]
    assert len(have) == 2 and all(len(curves[r]["margins"]) == 12 for r in have)
    last = compare.last_rewards(curves[have[0]])
    assert set(last) == set(compare.REWARDS)
    rows = runs_view.curve_rows(chosen)
    assert {r["run"] for r in rows["margins"]} and len(rows["accuracies"]) == 24
    en, zh = runs_view.rewards_markdown(chosen, "en"), runs_view.rewards_markdown(chosen, "zh")
    table = [line for line in en.splitlines() if line.startswith(("| chosen", "| rejected", "| margin", "| accuracy"))]
    assert len(table) == 4 and all(line.count("| - ") == 2 for line in table)  # the two SFT runs: no rewards
    assert "差值" in zh and "准确率" in zh
    sft_only = [s for s in chosen if not curves[s.run_dir]["margins"]]
    assert runs_view.rewards_markdown(sft_only, "en") == ""


def _running(run: Path) -> None:
    """Make the run look alive: its state says running, its supervisor is this very process."""
    me = psutil.Process()
    state = json.loads((run / record.STATE_FILE).read_text())
    state.update(status="running", supervisor_pid=me.pid, supervisor_ctime=me.create_time(), ended=None)
    (run / record.STATE_FILE).write_text(json.dumps(state))


def test_delete_removes_only_an_ended_run_folder_of_its_own_and_its_entry(tmp_path, index, manager):
    run = synthetic_run(tmp_path / "runs" / "done", index)
    keep = synthetic_run(tmp_path / "runs" / "busy", index, seed=1)
    ended = (keep / record.STATE_FILE).read_text()
    _running(keep)
    try:
        with pytest.raises(housekeeping.Refused, match="abort it first"):
            housekeeping.delete(manager, str(keep.resolve()))
        with pytest.raises(housekeeping.Refused, match="abort it first"):
            housekeeping.archive(manager, str(keep.resolve()))
    finally:  # its "supervisor" is this test: the teardown must not stop it
        (keep / record.STATE_FILE).write_text(ended)
    assert keep.is_dir() and manager.is_registered(str(keep.resolve()))

    (run / "notes.txt").write_text("mine")  # a user's file inside the run folder: archiving would take it along
    with pytest.raises(housekeeping.Refused, match="notes.txt"):
        housekeeping.archive(manager, str(run.resolve()))
    (run / "notes.txt").unlink()
    assert housekeeping.delete(manager, str(run.resolve())) == f"Deleted {run.resolve()}."
    assert not run.exists() and not manager.is_registered(str(run.resolve()))
    assert (tmp_path / "runs").is_dir() and keep.is_dir()  # nothing beside it

    with pytest.raises(housekeeping.Refused, match="not a run of this workspace"):
        housekeeping.delete(manager, str(tmp_path))


def test_delete_removes_what_the_run_wrote_and_names_what_it_left(tmp_path, index, manager):
    """Through the page's own path (confirm, then act -> housekeeping.delete): files put into the run folder after
    the run ended -- beside its files and inside a folder it wrote -- stay, and the messages name them."""
    from zeroboard.webui import runs_view as rv

    run = synthetic_run(tmp_path / "runs" / "done", index)
    (run / "checkpoint-5").mkdir()
    (run / "checkpoint-5" / "model.pt").write_text("weights")
    wrote = manifest.tree(seal(run))  # the checkpoint was written while it ran
    (run / "notes.txt").write_text("mine")
    (run / "checkpoint-5" / "comments.md").write_text("mine too")
    asked, ok = rv.confirm_text(manager, "delete", str(run.resolve()), "en")
    assert ok and "These stay" in asked and "notes.txt" in asked and "checkpoint-5/comments.md" in asked
    message, now = rv.act(manager, "delete", str(run.resolve()), "en")
    assert now is None and "left checkpoint-5/comments.md, notes.txt" in message and "not written by ZeroBoard" in message
    assert manifest.tree(run) == ["checkpoint-5", "checkpoint-5/comments.md", "notes.txt"]  # all the run wrote is gone
    assert (run / "notes.txt").read_text() == "mine" and (run / "checkpoint-5" / "comments.md").read_text() == "mine too"
    assert record.OWNER_FILE in wrote and not manager.is_registered(str(run.resolve()))
    assert folders.ownership(run, manager.registry).kind == "foreign"  # the user's folder now: no marker left


def test_a_user_file_an_earlier_zeroboard_let_a_run_adopt_survives_its_delete(tmp_path, index, manager):
    """The issue's folder as an earlier ZeroBoard left it: a marker a user wrote beside their thesis, adopted, trained
    into; its state lists the thesis among its files and keeps no list of what the run wrote.  The thesis was there
    before the run's first event: it stays, named; so does a file put there after the run ended."""
    run = tmp_path / "thesis"
    run.mkdir()
    (run / "thesis.tex").write_text("chapter 1\n")
    os.utime(run / "thesis.tex", (time.time() - 7200,) * 2)  # written two hours before the run
    run_id = "1" * 32
    (run / record.OWNER_FILE).write_text(json.dumps({"run_id": run_id, "folder": str(run.resolve())}))
    started = time.time() - 3600
    (run / record.EVENTS_FILE).write_text(json.dumps({"event": "start", "time": started}) + "\n")
    (run / "adapter_model.safetensors").write_text("w")
    (run / "checkpoint-2").mkdir()
    (run / "checkpoint-2" / "model.pt").write_text("w")
    (run / record.STATE_FILE).write_text(json.dumps({"run_dir": str(run.resolve()), "status": "finished",
                                                     "started": started, "files": sorted(os.listdir(run))}))
    with manager.registry.locked():
        manager.registry.add({"run_dir": str(run.resolve()), "run_id": run_id})
    (run / "notes.txt").write_text("after the end")
    message = housekeeping.delete(manager, str(run.resolve()))
    assert "left notes.txt, thesis.tex" in message
    assert sorted(os.listdir(run)) == ["notes.txt", "thesis.tex"] and (run / "thesis.tex").read_text() == "chapter 1\n"


def test_delete_leaves_the_empty_folder_a_user_made_before_the_run(tmp_path, index, manager):
    mine = tmp_path / "mine"
    mine.mkdir()  # made by the user, empty: a run may take it
    run = owned_run(mine, index, files=["adapter_model.safetensors"])
    assert folders.marker(run)["made"] is False
    assert "was there before the run and stays" in housekeeping.delete(manager, str(run.resolve()))
    assert mine.is_dir() and not any(mine.iterdir())


def test_a_folder_that_is_not_the_runs_own_is_never_deleted(tmp_path, index, manager):
    run = synthetic_run(tmp_path / "run", index)
    (run / record.OWNER_FILE).write_text(json.dumps({"run_id": "0" * 32, "folder": str(run)}))  # another run's marker
    with pytest.raises(housekeeping.Refused, match="not a folder ZeroBoard made"):
        housekeeping.delete(manager, str(run.resolve()))
    assert run.is_dir()
    link = tmp_path / "link"
    link.symlink_to(run)
    with manager.registry.locked():
        manager.registry.add({"run_dir": str(link)})
    with pytest.raises(housekeeping.Refused, match="symbolic link"):
        housekeeping.delete(manager, str(link))
    assert run.is_dir() and link.is_symlink()


def test_archive_moves_the_run_beside_it_and_restore_brings_it_back(tmp_path, index, manager):
    run = synthetic_run(tmp_path / "runs" / "demo", index)
    old = str(run.resolve())
    message, new = housekeeping.archive(manager, old)
    assert Path(new) == (tmp_path / "runs" / ".archive" / "demo").resolve() and not run.exists()
    entry = manager.registry.entry(new)
    assert entry["archived"] and entry["archived_from"] == old and manager.registry.entry(old) is None
    assert read_state(new).run_dir == new and read_state(new).output == Path(new)  # its record follows it
    assert folders.ownership(Path(new), manager.registry).kind == "owned"
    assert folders.marker(Path(new))["folder"] == new  # the marker follows too
    (s,) = summary.summaries(manager)
    assert s.archived and s.step == 60 and not summary.matches(s) and summary.matches(s, archived=True)
    message, back = housekeeping.restore(manager, new)
    assert back == old and run.is_dir() and not manager.registry.entry(old).get("archived")


def test_the_cli_lists_filters_compares_and_shows(tmp_path, index, manager, monkeypatch, capsys):
    from zeroboard import cli

    runs = four_settings(tmp_path, index)
    monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(index))
    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out
    assert all(r.name in out for r in runs) and "4 of 4 runs" in out
    assert cli.main(["runs", "--filter", "offload"]) == 0
    out = capsys.readouterr().out
    assert "z3-off" in out and "znone" not in out
    assert cli.main(["runs", "compare", str(runs[0]), "z3-off"]) == 0
    out = capsys.readouterr().out
    assert "deepspeed_stage" in out and "offload" in out and "learning_rate" not in out and "MiB" in out
    assert cli.main(["runs", "show", "z2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["summary"]["stage"] == "2" and shown["job"]["deepspeed_stage"] == "2" and shown["command"]["argv"]
    assert cli.main(["runs", "show", "z"]) == 1  # several match: say which
    assert "several runs" in capsys.readouterr().err


def test_a_listing_of_150_runs_is_quick_once_cached(tmp_path, index, manager, monkeypatch):
    """The page's list must answer within a second; the figure itself is benchmarks/runs_page.py's (a shared
    2-core machine cannot bound wall time): here, that a warm listing reads no file whole and stats each once."""
    for i in range(150):
        synthetic_run(tmp_path / f"r{i:03d}", index, seed=i, steps=20)
    cache = summary.FileCache()
    assert len(summary.summaries(manager, cache)) == 150
    calls = []
    monkeypatch.setattr(summary, "_stat", lambda p: calls.append(p) or os.stat(p))
    monkeypatch.setattr(summary, "_tail", lambda p: pytest.fail(f"{p} read again"))
    t0 = time.perf_counter()
    assert len(summary.summaries(manager, cache)) == 150
    warm = time.perf_counter() - t0
    assert len(calls) == 150 * 4  # state, job, plan, events: one stat each, nothing read
    print(f"warm listing of 150 runs: {warm * 1000:.0f} ms")


def test_a_listing_piped_into_head_ends_quietly(tmp_path, index):
    """`zeroboard runs | head` ended in a BrokenPipeError traceback. A reader that goes away ends any command
    quietly, as git's do: no traceback, status 141 (what a shell reports for SIGPIPE). A real pipe through bash,
    with more to print than the pipe holds (64 KiB), so the writer always meets the closed end."""
    import subprocess
    import sys

    for i in range(100):
        synthetic_run(tmp_path / f"r{i:03d}", index, seed=i, steps=10)
    env = {**os.environ, "ZEROBOARD_RUNS_INDEX": str(index)}
    zb = f"{sys.executable} -m zeroboard.cli"
    whole = subprocess.run(f"{zb} runs --json", shell=True, capture_output=True, text=True, env=env, timeout=120)
    assert whole.returncode == 0 and len(whole.stdout.encode()) > 1 << 16
    for cmd in ("runs --json", "runs"):
        done = subprocess.run(["bash", "-c", f"{zb} {cmd} | head -1; echo status=${{PIPESTATUS[0]}} >&2"],
                              capture_output=True, text=True, env=env, timeout=120)
        status = done.stderr.strip().splitlines()[-1]
        assert done.stdout.count("\n") == 1 and "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
        assert status in ("status=141", "status=0"), done.stderr  # 0: the table (17 kB) may fit the pipe whole
        if cmd == "runs --json":
            assert status == "status=141"


# --- the Runs page's functions (plain values; the browser test drives the page itself) -----------------------


def test_the_page_lists_pages_and_filters(tmp_path, index, manager, monkeypatch):
    from zeroboard.webui import runs_view as rv

    monkeypatch.setattr(rv, "PAGE_SIZE", 2)
    four_settings(tmp_path, index)
    first = rv.listing(manager, "", "", 0, "en")
    assert len(first.rows) == 2 and first.count == "4 of 4 runs · page 1 of 2" and len(first.choices) == 4
    second = rv.listing(manager, "", "", 1, "zh")
    assert [r[0] for r in second.rows] == [str((tmp_path / n).resolve()) for n in ("z2", "znone")]
    assert second.rows[0][1] == "已完成" and "第 2/2 页" in second.count
    assert rv.listing(manager, "offload", "", 5, "en").count == "1 of 4 runs · page 1 of 1"  # a page past the end
    assert rv.listing(manager, None, None, 0, "en").runs == first.runs  # a tab not shown yet sends no values
    assert rv.toggle(rv.toggle([], "a"), "b") == ["a", "b"] and rv.toggle(["a", "b"], "a") == ["b"]


def test_the_list_shown_is_known_by_its_key_so_an_unchanged_read_sends_nothing(tmp_path, index, manager):
    from zeroboard.webui import runs_view as rv

    runs = four_settings(tmp_path, index)
    first = rv.listing(manager, "", "", 0, "en")
    key = rv.shown_key(first, [], "en")
    assert rv.shown_key(rv.listing(manager, None, None, 0, "en"), [], "en") == key  # the same list, read again
    assert rv.shown_key(first, [str(runs[0].resolve())], "en") != key  # a run selected
    assert rv.shown_key(rv.listing(manager, "", "", 0, "zh"), [], "zh") != key  # another language
    assert rv.shown_key(rv.listing(manager, "offload", "", 0, "en"), [], "en") != key  # filtered
    synthetic_run(tmp_path / "z-new", index, seed=9)  # a new run
    assert rv.shown_key(rv.listing(manager, "", "", 0, "en"), [], "en") != key


def test_the_page_compares_in_both_languages(tmp_path, index, manager):
    from zeroboard.webui import runs_view as rv

    runs = [str(r.resolve()) for r in four_settings(tmp_path, index)]
    diff = rv.diff_markdown(runs, "zh")
    assert "不同的任务字段" in diff and "`deepspeed_stage`" in diff and "是" in diff and "learning_rate" not in diff
    course = rv.course_markdown(rv.chosen(manager, runs), "zh")
    assert "| 运行 | DeepSpeed stage | 使用 offload |" in course and course.count("MiB ·") == 4  # two ranks each
    lines = [ln for ln in rv.course_markdown(rv.chosen(manager, runs), "en").splitlines() if ln.startswith("| `")]
    assert [ln.split("|")[2].strip() for ln in lines] == ["none", "2", "3", "3"]  # by setting
    rows = rv.curve_rows(rv.chosen(manager, runs[:2]))
    assert {r["run"] for r in rows["loss"]} == {"znone", "z2"} and rows["eval_loss"] == []  # short legend names
    assert rv.names(["/a/x/demo", "/b/y/demo", "/c/z"]) == {"/a/x/demo": "/a/x/demo", "/b/y/demo": "/b/y/demo",
                                                              "/c/z": "z"}  # the same name twice: said in full


def test_resume_needs_a_whole_checkpoint_and_start_again_a_new_folder(tmp_path, index, manager):
    from zeroboard.webui import runs_view as rv

    run = synthetic_run(tmp_path / "run", index)
    values, message, state = rv.resume(manager, [], str(run.resolve()), "en")
    assert values is None and state is None and "no whole checkpoint" in message
    half = run / "checkpoint-20"
    half.mkdir()
    assert "no whole checkpoint" in rv.resume(manager, [], str(run.resolve()), "en")[1]  # not marked whole
    values, message = rv.start_again(str(run.resolve()), "en")
    assert values["deepspeed_stage"] == "none" and values["resume"] is False
    assert values["output_dir"] == str((tmp_path / "run-2").resolve()) and "run-2" in message
    detail = rv.detail_markdown(manager, str(run.resolve()), "zh")
    assert "没有完整的检查点" in detail and "日志最后 30 行" in detail and "内存估算与实测峰值对比" in detail


def test_delete_and_archive_ask_first_and_refuse_in_words(tmp_path, index, manager):
    from zeroboard.webui import runs_view as rv

    run = synthetic_run(tmp_path / "runs" / "demo", index)
    asked, ok = rv.confirm_text(manager, "delete", str(run.resolve()), "zh")
    assert ok and "无法撤销" in asked and "MiB" in asked
    asked, ok = rv.confirm_text(manager, "archive", str(run.resolve()), "en")
    assert ok and ".archive/demo" in asked
    message, new = rv.act(manager, "archive", str(run.resolve()), "en")
    assert "Archived" in message and new.endswith(".archive/demo")
    message, back = rv.act(manager, "restore", new, "en")
    assert "Restored" in message and back == str(run.resolve())
    (run / "mine.txt").write_text("x")
    asked, ok = rv.confirm_text(manager, "archive", str(run.resolve()), "en")
    assert not ok and "mine.txt" in asked and "Delete leaves them" in asked
    message, still = rv.act(manager, "archive", str(run.resolve()), "en")
    assert "mine.txt" in message and still == str(run.resolve()) and run.is_dir()
    asked, ok = rv.confirm_text(manager, "delete", str(run.resolve()), "zh")
    assert ok and "mine.txt" in asked and "会保留" in asked
    message, gone = rv.act(manager, "delete", str(run.resolve()), "en")
    assert "left mine.txt" in message and gone is None and os.listdir(run) == ["mine.txt"]


def test_resume_checks_as_start_does_from_the_last_whole_checkpoint(tmp_path, index, manager, monkeypatch):
    """Resume hands the run's own job, resume on, to the Train page's start (its check, then the launch)."""
    from zeroboard.webui import handlers, runs_view as rv

    run = synthetic_run(tmp_path / "run", index, steps=40)
    for step, whole in ((10, True), (20, True), (30, False)):  # checkpoint-30: cut short by an abort
        (run / f"checkpoint-{step}").mkdir()
        if whole:
            (run / f"checkpoint-{step}" / folders.CHECKPOINT_MARK).write_text("{}")
    seal(run)  # the checkpoints are the run's: written while it ran
    asked = {}

    def start(values, gpus, manager_, port=None, lang="en"):
        asked.update(values)
        return handlers.check(values, gpus), None, "checked"

    monkeypatch.setattr(handlers, "start", start)
    values, message, _ = rv.resume(manager, [], str(run.resolve()), "en")
    assert asked.items() <= values.items() and values["resume"] is True and values["output_dir"] == str(run.resolve())
    checked = handlers.check(values, [])
    assert checked.ok, checked.errors  # the folder is the run's own, with a whole checkpoint: it may resume
    assert folders.last_checkpoint(run).name == "checkpoint-20"  # where the trainer goes on from
    assert "--resume true" in checked.command.shell()
    _, refused = rv.resume(manager, [], str(tmp_path / "elsewhere"), "en")[:2]
    assert "not a run of this workspace" in refused
