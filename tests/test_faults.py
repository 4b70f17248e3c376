"""Faults with real processes: a disk that fills mid-run, an abort during a save, a supervisor killed, two sessions
starting at once, the password over real HTTP; and what a run must keep: seeds that repeat, a ZeRO-3 run without
16-bit gathering that still ends finished, "save and stop".

Each fault ends with the run's true status recorded, no process left, and the page still serving.  Where the fault
is the supervisor's to handle (a full disk, a killed supervisor, two starts at once), the ranks run the stand-in
trainer (helpers.standin_env); where it is the trainer's (its saves, its seeds, its ZeRO-3 result), the real one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers import standin_env, start_server, stop_server, wait_until
from test_runner import assert_nothing_left, ended, first_log_event, prepared_for, standin_for
from zeroboard.cli import main as cli_main
from zeroboard.job import command, folders, record, spec
from zeroboard.job.registry import Registry
from zeroboard.outputs.inspect import inspect
from zeroboard.runs import manager as runner, processes
from zeroboard.runs.launch import prepare_launch
from zeroboard.runs.state import read_state
from zeroboard.webui import handlers
from zeroboard.webui.live import Live

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def small_disk(tmp_path):
    """A real 24 MB filesystem (tmpfs), unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a small tmpfs (the fault test needs root): {done.stderr}"
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> None:
    """Write until the filesystem is full (ENOSPC)."""
    with (disk / "filler.bin").open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
                fh.flush()
        except OSError:
            pass


def test_a_disk_filling_mid_run_fails_that_run_with_the_reason_and_the_page_keeps_serving(tmp_path, index, small_disk,
                                                                                          monkeypatch, capsys):
    mgr = runner.JobManager(index=index, grace_s=10)
    st = mgr.start(standin_for(small_disk / "run", max_steps=5000, logging_steps=1))
    first_log_event(st.run_dir)
    fill(small_disk)
    st = ended(mgr, st.run_dir, 120)
    assert st.status == "failed", st.message
    assert "No space left on device" in st.message or "full" in st.message, st.message
    assert_nothing_left(st)
    # every record says so while the disk is still full: the run's own state.json (written into the room its
    # supervisor set aside), the index, `zeroboard runs --json`
    assert shutil.disk_usage(small_disk).free < 1 << 20
    own = read_state(st.run_dir)
    assert own.status == "failed" and own.message == st.message, own.message
    assert not (Path(st.run_dir) / record.STATE_RESERVE).exists()
    assert Registry(index).entry(st.run_dir)["outcome"]["message"] == own.to_json()["message"]
    monkeypatch.setenv("ZEROBOARD_RUNS_INDEX", str(index))
    assert cli_main(["runs", "--json"]) == 0
    listed = [r for r in json.loads(capsys.readouterr().out) if r["run_dir"] == st.run_dir]
    assert [(r["status"], r["message"]) for r in listed] == [("failed", str(st.message))]
    # the page still serves: a snapshot of that run, and a new job on the healthy disk starts
    snap = Live(mgr).snapshot(st.run_dir)
    assert snap.status == "failed" and "space" in snap.final_md.lower()
    other = mgr.start(standin_for(tmp_path / "healthy", max_steps=3))
    assert ended(mgr, other.run_dir).status == "finished"
    (small_disk / "filler.bin").unlink()  # space freed: the recorded reason stays
    assert "space" in str(mgr.state(st.run_dir).message).lower()


def test_an_abort_during_a_save_leaves_only_whole_checkpoints_on_offer(tmp_path, index):
    mgr = runner.JobManager(index=index, grace_s=10)
    out = tmp_path / "run"
    st = mgr.start(prepared_for(out, max_steps=5000, save_steps=1, logging_steps=1, finetuning_type="full"))
    wait_until(lambda: list(out.glob("checkpoint-*")), 180, "the first checkpoint folder")
    mgr.abort(st.run_dir)  # while that checkpoint (or the next) is being written
    st = ended(mgr, st.run_dir, 120)
    assert st.status == "aborted" and st.leftover == []
    assert_nothing_left(st)
    done, partial = folders.checkpoints(out)
    for c in done:  # a marked checkpoint is whole: the trainer state was the last file written before the mark
        assert (c / "trainer_state.json").is_file(), c
    ins = inspect(out)
    offered = {Path(i.path).name for i in ins.items if i.path != str(out)}
    assert offered == {c.name for c in done}
    if partial:
        assert any(p.name in str(x) for x in ins.problems for p in partial)
    job = spec.JobSpec(**{**spec.to_dict(prepared_for(tmp_path / "x").spec), "output_dir": str(out), "resume": True})
    errors = prepare_launch(job, gpus=[]).report.errors
    assert ("resume" in errors) == (not done)


def test_a_save_cut_short_is_never_offered_and_resume_takes_the_last_whole_checkpoint(tmp_path, index):
    """Kill every rank the moment a checkpoint folder exists without its completion mark (the third save)."""
    mgr = runner.JobManager(index=index, grace_s=10)
    out = tmp_path / "run"
    st = mgr.start(prepared_for(out, max_steps=5000, save_steps=1, logging_steps=1, finetuning_type="full"))

    def mid_save():
        for c in out.glob("checkpoint-*"):
            if int(c.name.split("-")[1]) >= 3 and not (c / folders.CHECKPOINT_MARK).exists():
                return c
        return None

    # freeze the ranks (SIGSTOP) the moment a save is seen in progress; a save that completed before they stopped (a
    # busy machine) is let go, and the next one is caught: then every rank is killed in the middle of a save
    while True:
        cut = wait_until(mid_save, 180, "a save in progress", every=0.001)
        ranks = [p for p in processes.job_processes(mgr.state(st.run_dir))
                 if "zeroboard.training.train" in " ".join(p.cmdline())]
        for p in ranks:
            p.suspend()
        if not (cut / folders.CHECKPOINT_MARK).exists():
            break
        for p in ranks:
            p.resume()
    for p in ranks:
        p.kill()
    st = ended(mgr, st.run_dir, 120)
    assert st.status == "failed", st.message
    assert_nothing_left(st)
    done, partial = folders.checkpoints(out)
    assert cut in partial and done and all(int(c.name.split("-")[1]) < int(cut.name.split("-")[1]) for c in done)
    assert folders.last_checkpoint(out) == done[-1]  # what resume continues from
    ins = inspect(out)
    assert cut.name not in {Path(i.path).name for i in ins.items} and any(cut.name in str(p) for p in ins.problems)


def test_a_killed_supervisor_still_gets_the_runs_true_status_recorded(tmp_path, index):
    mgr = runner.JobManager(index=index)
    st = mgr.start(standin_for(tmp_path / "run", max_steps=60))
    first_log_event(st.run_dir)
    os.kill(st.supervisor_pid, signal.SIGKILL)
    st = ended(mgr, st.run_dir)  # the job runs on alone and finishes
    assert st.status == "finished", st.message
    assert Registry(index).entry(st.run_dir)["outcome"]["status"] == "finished"
    assert read_state(st.run_dir).status == "finished"  # the run's own record says so too, not only the index
    assert_nothing_left(st)


def test_two_sessions_starting_at_once_start_one_job(tmp_path, index, monkeypatch):
    for k, v in standin_env().items():  # the page's Start builds the command: the stand-in comes with the environment
        monkeypatch.setenv(k, v)
    mgr_a, mgr_b = runner.JobManager(index=index), runner.JobManager(index=index)  # two sessions (or two servers)
    job = spec.load_yaml(REPO / "examples" / "demo.yaml")
    results, barrier = {}, threading.Barrier(2)

    def session(name, mgr):
        values = {**handlers.spec_to_form(job), "output_dir": str(tmp_path / name), "max_steps": 3}
        values.pop("gpu_ids")
        barrier.wait()
        results[name] = handlers.start(values, [], mgr)

    threads = [threading.Thread(target=session, args=(n, m)) for n, m in (("a", mgr_a), ("b", mgr_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    started = [n for n, (_, state, _) in results.items() if state is not None]
    assert len(started) == 1, results
    refused = next(n for n in results if n not in started)
    assert "already running" in results[refused][2] and str(tmp_path / started[0]) in results[refused][2]
    st = ended(mgr_a, results[started[0]][1].run_dir)
    assert st.status == "finished"
    assert not (tmp_path / refused).exists()


def test_the_same_seed_gives_the_same_losses_bit_for_bit(tmp_path, index):
    mgr = runner.JobManager(index=index)
    losses = []
    for name in ("one", "two"):
        st = mgr.start(prepared_for(tmp_path / name, max_steps=6, logging_steps=2, seed=7))
        assert ended(mgr, st.run_dir).status == "finished"
        losses.append([e["loss"] for e in record.read_events(tmp_path / name / record.EVENTS_FILE) if e["event"] == "log"])
    assert losses[0] == losses[1] and len(losses[0]) == 3


def test_zero3_without_16bit_gathering_ends_finished_with_a_checkpoint_to_consolidate(tmp_path, index):
    cfg = json.loads(Path("cache/ds_z3_config.json").read_text())
    cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = False
    ds = tmp_path / "z3-nogather.json"
    ds.write_text(json.dumps(cfg))
    mgr = runner.JobManager(index=index)
    out = tmp_path / "run"
    st = mgr.start(prepared_for(out, max_steps=4, logging_steps=2, finetuning_type="full", deepspeed=str(ds)))
    st = ended(mgr, st.run_dir)
    assert st.status == "finished", st.message
    result = json.loads((out / record.RESULT_FILE).read_text())
    assert result["kind"] == "zero_checkpoint" and result["deepspeed_stage"] == "3"
    assert result["loads_with"].startswith("zeroboard consolidate")
    assert any(i.kind == "zero_checkpoint" and i.path == str(out) for i in inspect(out).items)


def test_save_and_stop_saves_a_checkpoint_and_the_result_then_ends_finished(tmp_path, index):
    mgr = runner.JobManager(index=index)
    out = tmp_path / "run"
    st = mgr.start(prepared_for(out, max_steps=5000, logging_steps=2))
    first_log_event(st.run_dir)
    mgr.save_and_stop(st.run_dir)
    st = ended(mgr, st.run_dir)
    assert st.status == "finished" and "early" in st.message, st.message
    result = json.loads((out / record.RESULT_FILE).read_text())
    assert result["stopped_early"] and result["global_step"] < 5000
    assert folders.last_checkpoint(out) is not None
    assert_nothing_left(st)


def app_routes(app) -> set[tuple[str, str]]:
    """(path, method) of every route of a gradio app, routers included (GET and POST only)."""
    def walk(routes, prefix=""):
        for r in routes:
            ctx = getattr(r, "include_context", None)
            if ctx is not None:
                yield from walk(ctx.included_router.routes, prefix + ctx.prefix)
            elif getattr(r, "routes", None) is not None and not hasattr(r, "endpoint"):
                yield from walk(r.routes, prefix + getattr(r, "path", ""))
            else:
                for m in getattr(r, "methods", None) or {"GET"}:
                    if m in ("GET", "POST"):
                        yield prefix + r.path, m
    return set(walk(app.routes))


# open without a login: the login page itself and what it needs to draw (no data of the app's), the session's own
# heartbeat/cancel/reset (they need a random session id), and who-am-I answers that say "nobody"
OPEN = {"/", "/login", "/login/", "/logout", "/manifest.json", "/favicon.ico", "/robots.txt", "/theme.css",
        "/openapi.json", "/pwa_icon", "/gradio_api/app_id", "/gradio_api/app_id/", "/gradio_api/theme.css",
        "/gradio_api/startup-events", "/gradio_api/user", "/gradio_api/user/", "/gradio_api/token",
        "/gradio_api/token/", "/gradio_api/runs", "/gradio_api/runs/", "/gradio_api/cancel", "/gradio_api/reset",
        "/gradio_api/reset/"}
OPEN_PREFIXES = ("/assets/", "/static/", "/svelte/", "/pwa_icon/", "/gradio_api/heartbeat/")


def test_every_route_refuses_a_stranger_when_a_password_is_set(tmp_path):
    """Over real HTTP: each route of the served app, without credentials, answers 401/403/404 or the login page."""
    import gradio as gr
    from gradio.routes import App

    from zeroboard.webui import app as webapp

    port = command.free_port()
    env = {"ZEROBOARD_PASSWORD": "s3cret", "ZEROBOARD_USER": "teacher"}
    proc = start_server(port, tmp_path / "runs.json", tmp_path / "server.log", env=env, args=["--host", "0.0.0.0"])
    try:
        routes = app_routes(App.create_app(webapp.build_app(runner.JobManager(index=tmp_path / "r.json"), gpus=[])))
        assert len(routes) > 40 and ("/gradio_api/upload", "POST") in routes  # the walk reaches the API router
        probe = tmp_path / "secret.txt"
        probe.write_text("private")
        gr.set_static_paths([probe])
        leaks = []
        for route, method in sorted(routes):
            if route in OPEN or route.startswith(OPEN_PREFIXES):
                continue
            path = re.sub(r"\{[^}]*\}", "x", route)
            if "file" in route:
                path = route.split("{")[0] + str(probe)
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                         data=b"{}" if method == "POST" else None, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    body, code = r.read().decode("utf-8", "replace"), r.status
            except urllib.error.HTTPError as e:
                body, code = "", e.code
            except (TimeoutError, urllib.error.URLError):
                body, code = "", 200  # it kept the connection open to a stranger: served something
            if "private" in body:
                leaks.append(f"{method} {route}: served the file")
            elif code < 400:
                leaks.append(f"{method} {route}: {code}")
        assert not leaks, leaks
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            page = r.read().decode("utf-8", "replace")
        assert "on_start" not in page and "on_preview" not in page  # the login page lists none of the page's events
    finally:
        stop_server(proc)
