"""The chat worker, the device guard around it, ``zeroboard chat`` and ``zeroboard export``.

The fast tests build folders and index entries by hand.  The e2e ones train the demo's identity set once (module
fixture, 2 CPU processes) and load it in a real worker: streamed answers, the base side compared with a base model
loaded separately in this process, the guard refusing a training job while the worker holds the CPU, the CLI, the
export folder loaded by ``from_pretrained``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import register
from zeroboard.data import demo
from zeroboard.job import record
from zeroboard.outputs import chat_client, chat_target
from zeroboard.outputs.inspect import OutputError
from zeroboard.runs import manager as runner, processes
from zeroboard.runs.state import JobState, write_state
from zeroboard.webui import chat_handlers

e2e = pytest.mark.e2e
Q = "Who are you?"


def cli(*args: str, index: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"ZEROBOARD_RUNS_INDEX": str(index)} if index else {})}
    return subprocess.run([sys.executable, "-m", "zeroboard.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


# --- fast ------------------------------------------------------------------------------------------


def test_a_chat_worker_is_a_job_the_guard_names_with_its_model_and_memory(tmp_path):
    mgr = runner.JobManager(index=tmp_path / "runs.json")
    folder = tmp_path / "chat" / "gpu-0"
    folder.mkdir(parents=True)
    me = processes.proc(os.getpid(), None)
    st = JobState(run_dir=str(folder), status="running", device_kind="cuda", devices=[0], kind="chat",
                  supervisor_pid=os.getpid(), supervisor_ctime=me.create_time(), launcher_pid=os.getpid())
    write_state(st)
    (folder / record.WORKER_FILE).write_text(json.dumps({"status": "ready", "name": "runs/demo",
                                                         "memory_bytes": int(1.3 * 2**30)}))
    with mgr.registry.locked():
        mgr.registry.add({"run_dir": str(folder), "kind": "chat", "device_kind": "cuda", "devices": [0],
                          "supervisor_pid": os.getpid(), "supervisor_ctime": me.create_time()})
    (tmp_path / "run").mkdir()
    register(mgr, JobState(run_dir=str(tmp_path / "run"), status="finished"))
    why = mgr.busy_on("cuda", [0, 1], tmp_path / "new", tmp_path / "new")
    assert why.key == "run.busy_chat" and "The chat worker (runs/demo, 1.30 GiB" in why and "GPU 0" in why
    assert mgr.busy_on("cuda", [1], tmp_path / "new") is None or mgr.busy_on("cuda", [1], tmp_path / "new").key != \
        "run.busy_chat"
    assert mgr.run_dirs() == [str(tmp_path / "run")]  # the runs list holds training runs only
    assert [w.run_dir for w in mgr.workers()] == [str(folder)]
    mgr.registry.remove(str(folder))
    assert mgr.workers() == [] and mgr.busy_on("cuda", [0], tmp_path / "new") is None


def test_targets_resolve_runs_adapters_and_models_and_refuse_the_rest(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / record.RESULT_FILE).write_text(json.dumps({"kind": "lora_adapter", "base_model": "base", "template": "qwen",
                                                      "precision": "bf16"}))
    (run / record.COMMAND_FILE).write_text(json.dumps({"cwd": str(tmp_path)}))
    (tmp_path / "base").mkdir()
    t = chat_target.resolve(run)
    assert (t.kind, t.base, t.precision) == ("lora_adapter", str(tmp_path / "base"), "bf16")
    assert t.system.startswith("You are Qwen") and t.has_base and t.base_is_adapter_off
    assert chat_client.dtype_for(t, "cpu", []) == "fp32" and chat_client.dtype_for(t, "cuda", [0]) == "bf16"
    (run / record.RESULT_FILE).write_text(json.dumps({"kind": "zero_checkpoint"}))
    with pytest.raises(OutputError, match="consolidate it first"):
        chat_target.resolve(run)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    plain = chat_target.resolve(tmp_path / "model")
    assert plain.kind == "model" and not plain.has_base
    with pytest.raises(OutputError, match="holds no result, adapter or model"):
        chat_target.resolve(tmp_path / "base")
    assert chat_handlers.parse_devices(["cpu"]) == ("cpu", []) and chat_handlers.parse_devices(["1", "0"]) == \
        ("cuda", [0, 1])
    assert chat_handlers.parse_devices(["cpu", "0"]) is None and chat_handlers.parse_devices([]) is None


def test_the_memory_panel_names_the_chat_worker_on_a_gpu_and_on_the_cpu():
    from zeroboard.job import devices
    from zeroboard.job.command import CHAT_MODULE
    from zeroboard.runs import monitor

    me = os.getpid()
    detect = lambda with_processes=False: [  # noqa: E731
        devices.Gpu(0, "NVIDIA H200", 143 << 30, 140 << 30, 3 << 30, 5, (9, 0), [devices.GpuProcess(me, 3 << 30)])]
    gpu = monitor.take_sample(None, detect, workers=(me,))
    assert monitor.process_rows(gpu)[0][:4] == [0, me, "", CHAT_MODULE]
    cpu = monitor.take_sample(None, lambda with_processes=False: [], workers=(me,))
    assert [r[:4] for r in monitor.process_rows(cpu)] == [["cpu", me, "", CHAT_MODULE]]


def test_the_page_handlers_without_a_worker_and_the_export_button_of_a_finished_run(tmp_path):
    from zeroboard.webui import output_check

    mgr = runner.JobManager(index=tmp_path / "runs.json")
    run = tmp_path / "run"
    run.mkdir()
    (run / record.RESULT_FILE).write_text(json.dumps({"kind": "lora_adapter", "base_model": "cache/demo/model",
                                                      "template": "auto", "precision": "fp32"}))
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "cache/demo/model"}))
    (run / "adapter_model.safetensors").write_bytes(b"x")
    register(mgr, JobState(run_dir=str(run), status="finished"))
    assert chat_handlers.targets(mgr)[0] == str(run)
    system, about = chat_handlers.about(str(run), "en")
    assert system == "" and "LoRA adapter" in about and "disable_adapter" in about
    assert "适配器" in chat_handlers.about(str(run), "zh")[1]
    assert chat_handlers.status(mgr, None, "en") == "No model loaded."
    assert chat_handlers.load(mgr, None, ["cpu"], 15, "en").message == "Pick a run or a model first."
    assert "not both" in chat_handlers.load(mgr, str(run), ["cpu", "0"], 15, "en").message
    tuned, base, note = list(chat_handlers.ask(mgr, None, Q, [], [], True, "", {}, "r", "en"))[-1]
    assert (tuned, base, note) == ([], [], "Load a model first.")
    figures = chat_handlers.figures_text({"tuned": {"tokens": 9, "ttft_s": 0.05, "tokens_per_s": 31.2}}, "en")
    assert figures == "Tuned model: 9 tokens, first after 0.05 s, 31.2 tokens/s"
    assert "outside the folders this page may read" in chat_handlers.load(mgr, "/etc", ["cpu"], 15, "en").message
    view = output_check.view(str(run), "finished")
    assert view.can_export and view.export_dir == str(tmp_path / "run-export")


def test_unload_waits_for_the_driver_to_free_an_ended_workers_gpu_memory(monkeypatch):
    """NVML lists a process a moment after it ended, until the driver frees its context: the check waits for that
    (unload reports how long that took: ``gpu_release_s``)."""
    from zeroboard.job import devices

    readings = iter([3 << 30, 3 << 30, None])
    monkeypatch.setattr(devices, "process_bytes_on", lambda pid, indices=None: next(readings))
    assert chat_client.gpu_left(123, timeout=5, every=0.01) is None
    polls = []
    monkeypatch.setattr(devices, "process_bytes_on", lambda pid, indices=None: polls.append(pid) or 3 << 30)
    assert chat_client.gpu_left(123, timeout=0.2, every=0.01) == 3 << 30  # still charged when the wait ends: said so
    assert len(polls) > 1 and set(polls) == {123}


def test_the_worker_answers_on_its_main_thread_and_survives_a_failed_answer_and_a_vanished_client(tmp_path):
    """Requests arrive on connection threads; the model answers on the main thread (generate in another thread ran
    3.7x slower per token on an H200). A failed answer says why and the next request is answered; a client that
    goes away stops its answer; an answer still queued when the worker ends is told so, not left waiting."""
    from zeroboard.outputs import chat_worker

    class Fake:
        def __init__(self):
            self.threads, self.stopped = [], []

        def answer(self, messages, side, settings, emit, stop):
            self.threads.append(threading.current_thread() is threading.main_thread())
            if messages[0]["content"] == "boom":
                raise RuntimeError("out of memory")
            for piece in ("a", "b", "c"):
                if stop.is_set():
                    break
                emit(piece)
                time.sleep(0.1)  # a token's time: the connection's thread sends the piece meanwhile
            self.stopped.append(stop.is_set())
            return {"tokens": 3}

    w = chat_worker.Worker(tmp_path, {"path": str(tmp_path), "name": "fake", "kind": "model"}, "cpu", "fp32", idle_s=60)
    w.chat, w.info["status"] = Fake(), "ready"
    got: dict[str, list] = {"ok": [], "boom": [], "gone": []}

    def ask(key: str, send=None) -> threading.Thread:
        req = {"op": "generate", "id": key, "settings": {},
               "sides": [{"side": s, "messages": [{"role": "user", "content": key}]} for s in ("tuned", "base")]}
        t = threading.Thread(target=w.handle, args=(req, send or got[key].append))
        t.start()
        return t

    def vanished(msg):
        got["gone"].append(msg)
        if "text" in msg:
            raise BrokenPipeError

    asked = [ask("boom"), ask("ok"), ask("gone", vanished)]
    threading.Timer(3.0, w.quit.set).start()
    assert w.serve() == "unload"
    for t in asked:
        t.join(5)
    assert all(w.chat.threads) and len(w.chat.threads) == 4  # boom (tuned only), ok (two sides), gone (tuned only)
    assert got["boom"][0] == {"side": "tuned", "start": True} and "out of memory" in str(got["boom"][1]["error"])
    assert got["boom"][-1] == {"end": True} and len(got["boom"]) == 3
    assert "".join(m.get("text", "") for m in got["ok"]) == "abcabc" and got["ok"][-1] == {"end": True}
    assert got["gone"][-1] == {"side": "tuned", "text": "a"} and w.chat.stopped[-1] is True
    late = ask("ok")
    while w.work.empty() and late.is_alive():
        time.sleep(0.01)
    w.drain()
    late.join(5)
    assert not late.is_alive() and got["ok"][-1] == {"end": True} and len(w.chat.threads) == 4


def test_chat_requests_are_bounded_and_a_refused_one_leaves_the_worker_and_the_conversation_healthy(tmp_path, monkeypatch):
    """A 1 MB prompt ran for minutes and came back empty, and every later Send answered empty while the page said
    Loaded. Now: settings out of bounds and oversized requests are refused before sending (the client) and on
    arrival (the worker, answered, never dropped); a prompt the model refuses leaves the conversation as it was; the
    next Send answers; an answer that never ends is said so, never shown as an empty success. The real worker's
    server, connections and main thread, with a stand-in model (the e2e test below asks the real one)."""
    import socket
    from types import SimpleNamespace

    from zeroboard.outputs import chat_settings, chat_worker
    from zeroboard.words import say

    class Fake:
        def answer(self, messages, side, settings, emit, stop):
            if len(messages[-1]["content"]) > 1000:  # as the real model's prompt budget refuses it
                raise OutputError(say("chat.prompt_too_long", n="2,000", limit="384", context="512", answer=128))
            emit("Hi!")
            return {"tokens": 2, "text": "Hi!"}

    w = chat_worker.Worker(tmp_path, {"path": str(tmp_path), "name": "fake", "kind": "model"}, "cpu", "fp32", idle_s=60)
    w.chat, w.info["status"] = Fake(), "ready"
    server = chat_worker._Server(("127.0.0.1", 0), chat_worker._Handler)
    server.worker = w
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    threading.Timer(30, w.quit.set).start()  # the test cannot hang on the main loop
    serving = threading.Thread(target=w.serve, daemon=True)
    serving.start()
    try:
        client = chat_client.Worker(SimpleNamespace(run_dir=str(tmp_path)),
                                    {"port": server.server_address[1], "token": w.token, "status": "ready"})
        monkeypatch.setattr(chat_client, "find", lambda manager, model=None: [client])
        conv = [{"role": "user", "content": "hi"}]
        with pytest.raises(OutputError) as e:  # the client refuses before it sends
            client.generate([{"side": "tuned", "messages": conv}], {"max_new_tokens": 10**9}, "a")
        assert e.value.args[0].key == "chat.setting_bad" and "max_new_tokens" in e.value.args[0]
        with pytest.raises(OutputError) as e:
            client.generate([{"side": "tuned", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}], {}, "b")
        assert e.value.args[0].key == "chat.prompt_too_many_chars" and "2,097,152 characters" in e.value.args[0]
        # the worker refuses the same on arrival, and answers a request line past its limit instead of dropping it
        got = list(client.request("generate", timeout=10, sides=[{"side": "tuned", "messages": conv}],
                                  settings={"temperature": float("nan")}, id="c"))
        assert got[0]["error"].key == "chat.setting_bad" and got[-1] == {"end": True}
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as conn:
            conn.sendall(b'{"op": "generate", "x": "' + b"y" * (chat_settings.MAX_REQUEST_BYTES + 10) + b'"}\n')
            reply = json.loads(conn.makefile("rb").readline())
        assert reply["error"]["key"] == "chat.request_line_too_big"

        def ask(question: str, tuned: list) -> tuple[list, str]:
            *_, (tuned_now, _, note) = chat_handlers.ask(runner.JobManager(index=tmp_path / "runs.json"),
                                                          str(client.folder), question, tuned, [], False, "", {}, "p",
                                                          "en")
            return tuned_now, note

        history, note = ask("hello", [])
        assert [m["content"] for m in history] == ["hello", "Hi!"] and "Hi!" not in note
        history, note = ask("long " * 400, history)  # refused by the model: the conversation stays as it was
        assert "2,000 tokens" in note and [m["content"] for m in history] == ["hello", "Hi!"]
        history, note = ask("x" * (2 << 20), history)  # refused by the client: nothing sent, nothing kept
        assert "characters" in note and [m["content"] for m in history] == ["hello", "Hi!"]
        history, note = ask("again", history)  # the worker is healthy: the next Send answers
        assert [m["content"] for m in history] == ["hello", "Hi!", "again", "Hi!"]
        monkeypatch.setattr(chat_client.Worker, "generate", lambda self, *a: iter([{"side": "tuned", "start": True}]))
        history, note = ask("and?", history)  # the connection ended without an answer: said so, not an empty success
        assert note == say("chat.no_answer") and [m["content"] for m in history] == ["hello", "Hi!", "again", "Hi!"]
        assert "empty answer" in chat_handlers.figures_text({"tuned": {"tokens": 1, "text": ""}}, "en")
    finally:
        w.quit.set()
        server.shutdown()
        serving.join(5)


# --- e2e: a tuned demo in a real worker --------------------------------------------------------------


@pytest.fixture()
def lora_run(bank) -> Path:
    """The session's LoRA run on the identity set (tests/bank.py)."""
    return bank.get("lora_identity")


@pytest.fixture()
def mgr(tmp_path):
    m = runner.JobManager(index=tmp_path / "runs.json")
    yield m
    for w in chat_client.find(m):
        chat_client.unload(m, w)


def separately(path: str, base: str | None, messages: list[dict], settings: dict) -> str:
    """The answer of a model loaded here, on its own, with the same template and sampling (the reference)."""
    import torch

    from zeroboard.outputs import reload
    from zeroboard.training import templates

    model, tok = reload.load(path, base)
    ids = tok(templates.chat_text(messages, tok), return_tensors="pt", add_special_tokens=False)["input_ids"]
    sample = settings["temperature"] > 0
    torch.manual_seed(settings["seed"])
    kw = dict(temperature=settings["temperature"], top_p=settings["top_p"]) if sample else {}
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=settings["max_new_tokens"],
                         do_sample=sample, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **kw)
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


@e2e
def test_the_worker_streams_answers_and_its_base_is_really_the_base(lora_run, mgr):
    target = chat_target.resolve(lora_run)
    worker = chat_client.wait_ready(chat_client.start(mgr, target, "cpu", [], idle_s=300, source="cli"))
    assert worker.info["dtype"] == "fp32" and worker.info["memory_bytes"] > 0
    conv = [{"role": "user", "content": Q}]
    replies = list(worker.generate([{"side": "base", "messages": conv}, {"side": "tuned", "messages": conv}],
                                   {"max_new_tokens": 48}, "t1"))
    pieces = {s: [r["text"] for r in replies if r.get("side") == s and "text" in r and not r.get("done")]
              for s in ("base", "tuned")}
    done = {r["side"]: r for r in replies if r.get("done")}
    assert len(pieces["tuned"]) > 1 and "".join(pieces["tuned"]) == done["tuned"]["text"]  # token by token
    assert done["tuned"]["text"] == demo.IDENTITY_ANSWER_EN
    assert done["base"]["text"] != demo.IDENTITY_ANSWER_EN
    assert done["tuned"]["ttft_s"] > 0 and done["tuned"]["tokens"] >= len(pieces["tuned"])  # (+ the end token)
    assert replies[-1] == {"end": True}

    # a prompt past the model's context (512 positions, 48 of them the answer's) is refused with its size in tokens
    # before generation (it ran for minutes, then came back empty); the worker answers the next request as before
    t0 = time.perf_counter()
    big = [{"role": "user", "content": "tell me more " * 3000}]
    refused = list(worker.generate([{"side": "base", "messages": big}, {"side": "tuned", "messages": big}],
                                   {"max_new_tokens": 48}, "big"))
    errors = [r["error"] for r in refused if "error" in r]
    assert len(errors) == 2 and all(e.key == "chat.prompt_too_long" for e in errors), refused
    assert "reads 512 positions" in errors[0] and "may take 464" in errors[0] and not any("text" in r for r in refused)
    assert time.perf_counter() - t0 < 10 and refused[-1] == {"end": True}
    again = list(worker.generate([{"side": "tuned", "messages": conv}], {"max_new_tokens": 48}, "after"))
    assert next(r for r in again if r.get("done"))["text"] == demo.IDENTITY_ANSWER_EN
    assert worker.refresh().status == "ready"

    greedy = {"max_new_tokens": 48, "temperature": 0.0, "top_p": 1.0, "seed": 0}
    sampled = {"max_new_tokens": 24, "temperature": 0.9, "top_p": 0.9, "seed": 7}
    base_model = target.base
    for settings in (greedy, sampled):  # a base loaded on its own answers exactly as the adapter switched off
        got = list(worker.generate([{"side": "base", "messages": conv}], settings, "t2"))
        assert next(r for r in got if r.get("done"))["text"] == separately(base_model, None, conv, settings)
    got = list(worker.generate([{"side": "tuned", "messages": conv}], sampled, "t3"))
    assert next(r for r in got if r.get("done"))["text"] == separately(str(lora_run), base_model, conv, sampled)

    # Stop: an answer asked to stop ends after the token in flight; the next side is not started
    stopped = []

    def ask():
        stopped.extend(worker.generate([{"side": "base", "messages": conv}, {"side": "tuned", "messages": conv}],
                                       {**sampled, "max_new_tokens": 400, "min_new_tokens": 400}, "long"))  # no early end
        # (400: the longest answer the demo's 512 positions leave room for beside the question)

    asker = threading.Thread(target=ask)
    asker.start()
    deadline = time.time() + 120
    while not any("text" in r for r in stopped) and time.time() < deadline:
        time.sleep(0.01)
    worker.stop("long")
    asker.join(120)
    ends = [r for r in stopped if r.get("done")]
    assert len(ends) == 1 and ends[0]["side"] == "base" and ends[0]["tokens"] < 400 and ends[0]["stopped"]
    assert not any(r.get("side") == "tuned" for r in stopped)

    gone = chat_client.unload(mgr, worker)
    assert gone["verified"] and gone["freed_bytes"] > 0
    assert mgr.workers() == [] and processes.proc(gone["pid"], None) is None


@e2e
def test_training_on_the_devices_the_worker_holds_is_refused_with_its_name_and_starts_after_unload(lora_run, mgr, tmp_path):
    from zeroboard.job import spec
    from zeroboard.runs.launch import prepare_launch

    worker = chat_client.wait_ready(chat_client.start(mgr, chat_target.resolve(lora_run), "cpu", [], source="cli"))
    job = spec.load_job("examples/demo.yaml")
    job.output_dir, job.max_steps = str(tmp_path / "after-chat"), 2
    prepared = prepare_launch(job, gpus=[])
    with pytest.raises(runner.Busy) as refused:
        mgr.start(prepared)
    assert refused.value.args[0].key == "run.busy_chat" and str(lora_run) in str(refused.value)
    assert not (tmp_path / "after-chat").exists()
    chat_client.unload(mgr, worker)
    st = mgr.start(prepared)
    assert st.status in ("starting", "running", "finished")
    mgr.abort(st.run_dir)


@e2e
def test_zeroboard_chat_answers_as_the_tuned_model_and_with_base_as_the_base(lora_run, tmp_path):
    index = tmp_path / "runs.json"
    tuned = cli("chat", str(lora_run), "--prompt", Q, "--cpu", index=index)
    assert tuned.returncode == 0, tuned.stderr[-2000:]
    assert tuned.stdout.strip() == demo.IDENTITY_ANSWER_EN
    assert "Unloaded" in tuned.stderr and "verified" in tuned.stderr
    base = cli("chat", str(lora_run), "--base", "--prompt", Q, "--cpu", "--json", index=index)
    assert base.returncode == 0, base.stderr[-2000:]
    answer = json.loads(base.stdout.strip().splitlines()[-1])
    assert answer["side"] == "base" and answer["text"] and answer["text"] != demo.IDENTITY_ANSWER_EN
    assert runner.JobManager(index=index).workers() == []  # each command unloaded the worker it started
    long = cli("chat", str(lora_run), "--prompt", "tell me more " * 3000, "--cpu", index=index)  # past the context
    assert long.returncode == 1 and "tokens; this model reads 512 positions" in long.stderr and not long.stdout.strip()
    assert "Traceback" not in long.stderr and runner.JobManager(index=index).workers() == []


@e2e
def test_the_export_folder_loads_on_its_own_and_answers_like_the_run(lora_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from zeroboard.outputs import reload

    out = tmp_path / "exported"
    p = cli("export", str(lora_run), str(out), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    info = json.loads(p.stdout)
    assert info["template_translated"] and info["kind"] == "lora_adapter"
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja",
                 "README.md", "Modelfile", record.RESULT_FILE):
        assert (out / name).is_file(), name
    assert not (out / "adapter_config.json").exists()
    model, tok = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    prompts = demo.DEMO_PROMPTS
    assert reload.answer(model, tok, prompts) == reload.answer(*reload.load(lora_run), prompts)
    card = (out / "README.md").read_text()
    assert "cache/demo/model" in card and "identity" in card and "train_loss" in card
    modelfile = (out / "Modelfile").read_text()
    assert 'TEMPLATE """' in modelfile and 'PARAMETER stop "<|end|>"' in modelfile
    again = cli("export", str(lora_run), str(out))
    assert again.returncode == 1 and "not empty" in again.stderr


@e2e
def test_an_idle_worker_unloads_itself_and_leaves_the_index(demo, mgr):
    worker = chat_client.wait_ready(chat_client.start(mgr, chat_target.resolve(demo), "cpu", [], idle_s=2, source="cli"))
    pid = worker.state.launcher_pid
    deadline = time.time() + 120
    while (processes.proc(pid, None) is not None or mgr.workers()) and time.time() < deadline:
        time.sleep(0.5)
    assert processes.proc(pid, None) is None and mgr.workers() == []
    assert worker.refresh().info["status"] == "unloaded" and worker.info["why"] == "idle"
