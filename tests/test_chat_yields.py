"""The chat worker yields to training (issue 33, item 6): it unloads itself after ``idle_minutes`` unused (bounded:
0, a negative number, more than a week and text refused with the field named), any page finds it in the runs index
and unloads it (a reloaded tab, another tab, the Train page's "Unload and start", ``zeroboard chat --unload``), and a
worker that does not answer the unload is ended with SIGTERM, then SIGKILL, each step said, nothing left.

The fast tests register a stand-in worker entry (this process as its supervisor) or run the worker's own loop with a
stand-in model; the e2e ones load the session's LoRA identity run (tests/bank.py) in a real worker, stop it with
SIGSTOP as a hung worker, and start the job it blocked on the stand-in trainer (the subject is the worker, not the
training).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import standin_env, wait_until
from test_webui import demo_values
from zeroboard.job import record
from zeroboard.outputs import chat_client, chat_settings, chat_target
from zeroboard.runs import manager as runner, processes
from zeroboard.runs.state import JobState, read_state, read_worker, write_state
from zeroboard.webui import chat_handlers, handlers

e2e = pytest.mark.e2e


def cli(index: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeroboard.cli", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "ZEROBOARD_RUNS_INDEX": str(index), "ZEROBOARD_LANG": "en", **(env or {})})


def fake_worker(mgr: runner.JobManager, folder: Path, device_kind: str = "cpu", devices: list[int] | None = None,
                **info) -> Path:
    """A worker entry the guard sees as running (this process as its supervisor and its worker), ready, last asked
    a minute ago with a 15-minute keep-alive."""
    folder.mkdir(parents=True)
    me = processes.proc(os.getpid(), None)
    write_state(JobState(run_dir=str(folder), status="running", device_kind=device_kind, devices=devices or [],
                         kind="chat", supervisor_pid=os.getpid(), supervisor_ctime=me.create_time(),
                         launcher_pid=os.getpid()))
    (folder / record.WORKER_FILE).write_text(json.dumps({
        "status": "ready", "name": "runs/identity", "memory_bytes": int(0.5 * 2**30), "idle_s": 900.0,
        "last_request": time.time() - 60, **info}))
    with mgr.registry.locked():
        mgr.registry.add({"run_dir": str(folder), "kind": "chat", "device_kind": device_kind, "devices": devices or [],
                          "supervisor_pid": os.getpid(), "supervisor_ctime": me.create_time()})
    return folder


# --- fast ----------------------------------------------------------------------------------------------------------


def test_the_idle_timeout_is_minutes_above_0_and_at_most_a_week_and_nonsense_is_refused_naming_the_field():
    assert chat_settings.idle_minutes(15) == 15.0 and chat_settings.idle_minutes("0.5") == 0.5
    assert chat_settings.idle_minutes(chat_settings.MAX_IDLE_MINUTES) == 10080.0
    refused = {}
    for value in (0, "0", -1, -0.5, 10081, 1e12, "soon", "", None, float("nan"), float("inf"), True):
        with pytest.raises(ValueError) as e:
            chat_settings.idle_minutes(value)
        refused[repr(value)] = e.value.args[0]
    assert all(m.startswith("idle_minutes = ") for m in refused.values()), refused
    assert refused["0"].key == "chat.idle_zero" and refused["0"].startswith("idle_minutes = 0 would unload the model "
                                                                              "before the first question")
    assert refused["-1"] == ("idle_minutes = -1: a model that never unloads holds its devices from every training "
                             "job; give the minutes it may sit unused, at most 10080 (a week); Start offers to unload "
                             "it when a job needs its devices")
    assert refused["10081"] == "idle_minutes = 10081 is more than a week (10080 minutes): give at most 10080"
    assert refused["'soon'"].key == refused["''"].key == refused["None"].key == refused["True"].key == \
        refused["nan"].key == "chat.idle_not_a_number"
    assert refused["''"].startswith('idle_minutes = "" is not a number')
    assert "无人使用" in refused["-1"].say_in("zh")


def test_a_refused_idle_timeout_starts_nothing_on_the_page_the_cli_or_the_client(tmp_path):
    mgr = runner.JobManager(index=tmp_path / "runs.json")
    loaded = chat_handlers.load(mgr, "anything", ["cpu"], 0, "en")
    assert loaded.worker is None and loaded.message.startswith("Not loaded: idle_minutes = 0 would unload")
    assert chat_handlers.load(mgr, "x", ["cpu"], -3, "zh").message.startswith("没有加载:idle_minutes = -3:永不卸载")
    with pytest.raises(runner.StartError) as e:
        chat_client.start(mgr, chat_target.Target(path="m", kind="model", name="m"), "cpu", [], idle_s=-60)
    assert e.value.args[0].key == "chat.idle_negative"
    for value, said in (("0", "0 would unload"), ("-5", "-5: a model that never unloads"), ("never", "never is not a")):
        p = cli(tmp_path / "runs.json", "chat", str(tmp_path), "--idle-minutes", value)
        assert p.returncode == 1 and p.stderr.startswith(f"chat: idle_minutes = {said}"), p.stderr
        assert "Traceback" not in p.stderr and "Loading" not in p.stderr
    assert mgr.workers() == [] and not (tmp_path / "chat").exists()
    p = cli(tmp_path / "runs.json", "chat")
    assert p.returncode == 1 and "give RUN_OR_MODEL" in p.stderr and "--unload" in p.stderr
    p = cli(tmp_path / "runs.json", "chat", str(tmp_path), "--unload")
    assert p.returncode == 1 and "--unload takes no RUN_OR_MODEL" in p.stderr
    p = cli(tmp_path / "runs.json", "chat", "--unload")
    assert p.returncode == 0 and p.stderr.strip() == "No chat worker is loaded."


def test_the_idle_clock_starts_when_the_model_is_loaded_and_again_after_each_request(tmp_path):
    """A load longer than the timeout unloaded the model before anyone could ask: the clock ran from the process's
    start.  Now it starts at ready, and worker.json says when it was last asked, so any page can tell when it goes."""
    from zeroboard.outputs import chat_worker

    class SlowLoad:
        load_s = 2.5

        def load(self):
            time.sleep(self.load_s)

        def memory_bytes(self):
            return 1

        def weights_bytes(self):
            return 1

    w = chat_worker.Worker(tmp_path, {"path": str(tmp_path), "name": "slow", "kind": "model"}, "cpu", "fp32", idle_s=2.0)
    w.chat = SlowLoad()
    assert w.run() == 0
    info = read_worker(tmp_path)
    assert info["status"] == "unloaded" and info["why"] == "idle"
    assert info["ended"] - info["last_request"] >= 2.0  # idle_s after the load ended, not 1 s after it (the old clock)

    asked = chat_worker.Worker(tmp_path / "asked", {"path": str(tmp_path), "name": "asked", "kind": "model"}, "cpu",
                               "fp32", idle_s=120.0)
    (tmp_path / "asked").mkdir()
    asked.publish(status="ready", last_request=time.time() - 100)
    assert 15 < chat_client.Worker(None, read_worker(tmp_path / "asked")).unloads_in() <= 20
    asked.touch(+1)  # a request comes and goes: the clock starts again, and worker.json says so
    asked.touch(-1)
    assert 119 < chat_client.Worker(None, read_worker(tmp_path / "asked")).unloads_in() <= 120


def test_start_offers_to_unload_a_chat_worker_any_page_finds_and_the_cli_says_how(tmp_path):
    """The refusal names the worker and when it unloads itself; the page offers "Unload and start" (only for a chat
    worker); a page of another session finds the worker by its devices; ``zeroboard train`` says the command."""
    index = tmp_path / "runs.json"
    mgr = runner.JobManager(index=index)
    folder = fake_worker(mgr, tmp_path / "chat" / "cpu")
    fresh = runner.JobManager(index=index)  # another page: nothing in its session
    checked, state, message = handlers.start(demo_values(tmp_path / "blocked"), [], fresh)
    assert state is None and checked.refused.key == "run.busy_chat"
    assert "The chat worker (runs/identity, 0.50 GiB" in message and "15 min after its last answer (in about 14 min)" in message
    assert "**Unload and start** unloads it" in message and not (tmp_path / "blocked").exists()
    assert "卸载对话并开始" in handlers.start(demo_values(tmp_path / "blocked"), [], fresh, lang="zh")[2]
    assert [w.folder for w in chat_client.on_devices(fresh, "cpu", [])] == [folder]
    assert chat_client.on_devices(fresh, "cuda", [0]) == []
    status = chat_handlers.status(fresh, None, "en", ["cpu"])  # a reloaded Chat tab shows the worker on its devices
    assert status.startswith("**runs/identity** loaded on CPU") and "in about 14 min" in status
    p = cli(index, "train", "examples/demo.yaml", "--set", f"output_dir={tmp_path / 'cli-blocked'}")
    assert p.returncode == 3 and "Not started: The chat worker (runs/identity" in p.stderr, p.stderr[-2000:]
    assert "Unload it with `zeroboard chat --unload --cpu`, then run this command again" in p.stderr
    mgr.registry.remove(str(folder))
    gpu = fake_worker(mgr, tmp_path / "chat" / "gpu-1", "cuda", [1])
    said = chat_handlers.unload(fresh, None, ["cpu"], "en")  # nothing on the page's devices: it says where there is
    assert said == "No model is loaded on CPU; loaded elsewhere: runs/identity (GPU 1). Pick its devices to unload it."
    assert chat_handlers.unload(fresh, None, ["0"], "en").startswith("No model is loaded on GPU 0; loaded elsewhere")
    mgr.registry.remove(str(gpu))
    assert chat_handlers.unload(fresh, None, ["cpu"], "en") == "No model is loaded on CPU."


# --- e2e: a real worker on the session's identity run ----------------------------------------------------------------


@pytest.fixture()
def lora_run(bank) -> Path:
    return bank.get("lora_identity")


def loaded(index: Path, run: Path) -> chat_client.Worker:
    mgr = runner.JobManager(index=index)
    return chat_client.wait_ready(chat_client.start(mgr, chat_target.resolve(run), "cpu", [], source="cli"))


def left_of(worker: chat_client.Worker) -> list[int]:
    """What is left of a worker: its process and its supervisor, if alive."""
    st = worker.state
    return [p.pid for p in (processes.proc(st.launcher_pid, st.launcher_ctime),
                            processes.proc(st.supervisor_pid, st.supervisor_ctime)) if p is not None]


@e2e
def test_a_hung_worker_is_unloaded_from_a_fresh_page_with_sigterm_then_sigkill_and_nothing_is_left(lora_run, index):
    worker = loaded(index, lora_run)
    os.kill(worker.state.launcher_pid, signal.SIGSTOP)  # hung: it answers nothing and acts on no SIGTERM
    try:
        t0 = time.time()
        said = chat_handlers.unload(runner.JobManager(index=index), None, ["cpu"], "en")  # a reloaded tab
        took = time.time() - t0
    finally:
        with_pid = processes.proc(worker.state.launcher_pid, worker.state.launcher_ctime)
        if with_pid is not None:
            with_pid.kill()
    lines = said.split("  \n")
    assert lines[0] == f"The worker (pid {worker.state.launcher_pid}) did not answer the unload request within 5 s " \
                       "(hung or stopped): stopping it as Abort does.", said
    assert any("SIGKILL" in line for line in lines[1:-1]), said  # its supervisor's escalation, each step
    assert lines[-1].startswith("Unloaded: the worker") and lines[-1].endswith("(verified)."), said
    assert took < 25 and left_of(worker) == [] and runner.JobManager(index=index).workers() == []
    assert runner.JobManager(index=index).busy_on("cpu", [], index.parent / "next") is None
    end = read_state(worker.folder)
    assert end.status in ("aborted", "failed", "finished") and not end.active


@e2e
def test_a_worker_whose_supervisor_hangs_too_is_killed_from_here_and_taken_off_the_index(lora_run, index):
    worker = loaded(index, lora_run)
    for pid in (worker.state.launcher_pid, worker.state.supervisor_pid):
        os.kill(pid, signal.SIGSTOP)
    gone = chat_client.unload(runner.JobManager(index=index), worker)
    keys = [m.key for m in gone["steps"]]
    assert keys == ["chat.unload_no_answer", "chat.unload_killed_here", "chat.unload_supervisor_killed"], gone["steps"]
    assert gone["verified"] and gone["forced"] and left_of(worker) == []
    assert runner.JobManager(index=index).workers() == [] and not read_state(worker.folder).active


@e2e
def test_unload_and_start_on_the_train_page_and_zeroboard_chat_unload(lora_run, index, tmp_path, monkeypatch):
    # zeroboard chat --unload: whoever loaded it (here another command), verified
    worker = loaded(index, lora_run)
    p = cli(index, "chat", "--unload", "--cpu")
    assert p.returncode == 0 and f"Unloading {worker.info['name']} (the CPU, pid {worker.state.launcher_pid})" in p.stderr
    assert "has ended and its" in p.stderr and "(verified)" in p.stderr and left_of(worker) == []

    # the Train page of another session: refused, offered, then Unload and start (the job on the stand-in trainer)
    worker = loaded(index, lora_run)
    page = runner.JobManager(index=index)
    checked, state, message = handlers.start(demo_values(tmp_path / "after-chat", max_steps=3), [], page)
    assert state is None and checked.refused.key == "run.busy_chat" and "Unload and start" in message
    for name, value in standin_env().items():
        monkeypatch.setenv(name, value)
    checked, state, message = handlers.start(demo_values(tmp_path / "after-chat", max_steps=3), [], page, unload_chat=True)
    assert state is not None and checked.refused is None, message
    assert message.startswith("Unloaded: the worker") and "(verified)" in message and "Started" in message
    assert left_of(worker) == [] and page.workers() == []
    wait_until(lambda: not (page.state(state.run_dir) or state).active, 120, "the job to end")
    assert page.state(state.run_dir).status == "finished"
