"""No creep: what the server kept for each run it showed and each open page, now bounded (benchmarks/soak.py finds them).

Each test pins one cause: the live readers of past runs, gradio's copies of updated components in a page's
session, gradio's queue records.  No timing: counts of what is kept.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import register
from zeroboard.job import record as events
from zeroboard.runs import manager as runner
from zeroboard.runs.state import JobState
from zeroboard.webui import live
from zeroboard.webui.live import Live


@pytest.fixture()
def manager(tmp_path):
    return runner.JobManager(index=tmp_path / "runs.json")


def finished_run(manager: runner.JobManager, run: Path, started: float) -> JobState:
    run.mkdir(parents=True, exist_ok=True)
    (run / events.LOG_FILE).write_text("[rank0]:hello\n")
    events.EventWriter(run, 0).emit("log", step=1, total_steps=10, loss=2.0, lr=1e-3, memory=[])
    return register(manager, JobState(run_dir=str(run), status="aborted", started=started, ended=started + 1))


def test_the_live_view_keeps_readers_for_the_latest_runs_only(manager, tmp_path):
    view = Live(manager)
    runs = [str(finished_run(manager, tmp_path / f"run-{i}", 1000.0 + i).run_dir) for i in range(live.READERS_KEPT * 3)]
    for run in runs:
        assert view.snapshot(run).loss == [{"step": 1, "loss": 2.0}]
    kept = [key[0] for key in view._readers]
    assert kept == runs[-live.READERS_KEPT:]  # the most recently shown, not every run ever shown
    assert view.snapshot(runs[0]).loss == [{"step": 1, "loss": 2.0}]  # a dropped run is read afresh when shown again
    assert len(view._readers) == live.READERS_KEPT and next(reversed(view._readers))[0] == runs[0]


def test_a_new_attempt_in_the_same_folder_replaces_the_earlier_attempts_reader(manager, tmp_path):
    view = Live(manager)
    run = str(finished_run(manager, tmp_path / "run", 1000.0).run_dir)
    view.snapshot(run)
    finished_run(manager, tmp_path / "run", 2000.0)  # resumed: the same folder, a later start
    view.snapshot(run)
    assert list(view._readers) == [(run, 2000.0)]


def _skip_then_value(gr, demo, fn, state, times: int) -> None:
    """What a live panel gets from a tick that skips it, then from one that sends it a value, ``times`` over."""
    async def go():
        for i in range(times):
            await demo.postprocess_data(fn, gr.skip(), state)
            await demo.postprocess_data(fn, f"value {i}", state)
    asyncio.run(go())


def test_gradio_copies_of_updated_components_are_dropped_from_each_session():
    """In an interpreter of its own, as a server is: whether gradio files a copy depends on its context variables,
    which other tests in this worker may have left set (calling a page's handlers outside a request)."""
    done = subprocess.run([sys.executable, "-c", "import test_soak; test_soak.check_gradio_copies()"],
                          cwd=Path(__file__).parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]


def check_gradio_copies() -> None:
    import gradio as gr
    from gradio.state_holder import StateHolder

    from zeroboard.webui import sessions

    with gr.Blocks() as demo:
        shown = gr.Markdown("start")
        gr.Button().click(lambda: "clicked", None, shown)
    holder = StateHolder()
    holder.set_blocks(demo)
    state = holder["tab"]
    own = sessions.session_size(demo, "tab")
    fn = next(iter(demo.fns.values()))

    _skip_then_value(gr, demo, fn, state, 20)
    grown = sessions.session_size(demo, "tab")
    assert grown >= own + 20  # the cause, in this gradio: one copy kept per update followed by a value
    assert sessions.drop_copies(demo, "tab") >= 2 * (grown - own)  # each copy and its config
    assert sessions.session_size(demo, "tab") == own and set(state.config_values) <= set(demo.blocks)
    assert shown._id in state.blocks_config.blocks  # the page's own component stays
    assert sessions.drop_copies(demo, "no such tab") == 0


def test_every_open_page_drops_gradios_copies_on_a_timer(tmp_path):
    import gradio as gr

    from zeroboard.webui import app, sessions

    demo = app.build_app(runner.JobManager(index=tmp_path / "runs.json"), lang="en", gpus=[])
    upkeep = [fn for fn in demo.fns.values() if fn.name == "upkeep"]
    assert len(upkeep) == 1 and not upkeep[0].queue
    timer = demo.blocks[upkeep[0].targets[0][0]]
    assert isinstance(timer, gr.Timer) and timer.value == sessions.UPKEEP_S
    assert asyncio.iscoroutinefunction(upkeep[0].fn)  # on the event loop, where gradio files its copies


def test_gradios_queue_keeps_few_event_records():
    import gradio as gr

    import zeroboard.webui  # noqa: F401 - sets gradio's environment before any app is built

    with gr.Blocks() as demo:
        gr.Markdown()
    assert demo._queue.ANALYTICS_MAX_EVENTS <= 100  # records for a monitoring dashboard the page never serves


def test_a_finished_runs_reader_is_not_kept_after_it_is_dropped(manager, tmp_path):
    view = Live(manager)
    first = str(finished_run(manager, tmp_path / "first", time.time()).run_dir)
    reader = view.reader(manager.state(first))
    for i in range(live.READERS_KEPT):
        view.snapshot(str(finished_run(manager, tmp_path / f"later-{i}", time.time() + i).run_dir))
    assert all(r is not reader for r in view._readers.values())
