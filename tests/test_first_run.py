"""The first run on a fresh machine: DeepSpeed's ops built ahead by ``zeroboard build-ops``, and a job that must
still compile one says so on the page (phase, op, elapsed) instead of "waiting for the first step".

The end-to-end test gives a real web UI an empty torch extension folder, starts a real ZeRO-2 job from the
Chinese page and watches the compile phase of DeepSpeed's CPU communication op, then the run; ``zeroboard
build-ops`` afterwards finds the op the job built (the same build, not a second one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import start_server, stop_jobs, stop_server, wait_until
from test_browser import RUN_S, UI_S, choose, fill, status
from zeroboard.job import command, presets
from zeroboard.runs.state import JobState
from zeroboard.training import ops
from zeroboard.webui import live

COMPILE_S = 600  # one op's compile beside the other worker's tests: 60 s idle, several minutes under load

# --- which ops a job loads --------------------------------------------------------------------------------------

def test_a_job_loads_the_communication_op_on_cpu_and_cpu_adam_with_offload():
    assert ops.needed("cpu", None) == []  # no DeepSpeed, no op
    assert ops.needed("cpu", presets.preset("2", False)) == ["ShareMemCommBuilder"]
    assert ops.needed("cpu", presets.preset("3", True)) == ["ShareMemCommBuilder", "CPUAdamBuilder"]
    assert ops.needed("cuda", presets.preset("2", False)) == []
    assert ops.needed("cuda", presets.preset("2", True)) == ["CPUAdamBuilder"]
    assert set(ops.needed("cpu", presets.preset("2", True))) <= set(ops.MACHINE_OPS["cpu"])  # build-ops covers jobs
    assert set(ops.needed("cuda", presets.preset("3", True))) <= set(ops.MACHINE_OPS["cuda"])


def test_build_ops_uses_the_jobs_own_arch_list(monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/opt/torch-extensions")  # the user's (the image's) folder: kept as it is
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a;8.0")
    assert command.arch_env() == {"TORCH_CUDA_ARCH_LIST": "9.0;8.0"}
    assert ops.job_env("cuda") == {"DS_ACCELERATOR": "cuda", **command.arch_env()}
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    assert ops.job_env("cuda") == {"DS_ACCELERATOR": "cuda"}  # named: without a visible GPU DeepSpeed would pick its CPU ops
    assert ops.job_env("cpu") == {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}


# --- where the ops are built: one folder per Python environment ---------------------------------------------------

def test_each_python_environment_has_an_ops_folder_of_its_own_and_the_users_folder_wins(tmp_path, monkeypatch):
    """torch's extension folder is one per user: two environments rebuilt each other's ops in turn (160 s a start on
    two cores).  Each gets its own, keyed by its resolved folder and its Python, torch and DeepSpeed versions."""
    from zeroboard.job import modelinfo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = tmp_path / "venv-a", tmp_path / "venv-b"
    a.mkdir()
    b.mkdir()
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / ".venv").symlink_to(a)  # a worktree whose .venv links to another's
    folder_a, folder_b = ops.extensions_dir(a), ops.extensions_dir(b)
    assert folder_a != folder_b and folder_a.parent == folder_b.parent == tmp_path / "cache" / "torch_extensions"
    assert ops.extensions_dir(tmp_path / "checkout" / ".venv") == folder_a  # the same environment: its builds shared
    versions = f"py{sys.version_info.major}{sys.version_info.minor}-torch{modelinfo.version('torch')}" \
               f"-ds{modelinfo.version('deepspeed')}"
    assert folder_a.name.startswith(f"zeroboard-{versions}-")
    real = modelinfo.version
    monkeypatch.setattr(modelinfo, "version", lambda dist: "0.99.0" if dist == "deepspeed" else real(dist))
    assert ops.extensions_dir(a) not in (folder_a, folder_b)  # DeepSpeed upgraded in place: a folder of its own
    monkeypatch.setattr(modelinfo, "version", real)

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    mine = {"TORCH_EXTENSIONS_DIR": str(ops.extensions_dir())}
    assert ops.extensions_env() == mine and ops.job_env("cpu") == {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "",
                                                                   **mine}
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "theirs"))
    assert ops.extensions_env() == {} and "TORCH_EXTENSIONS_DIR" not in ops.job_env("cuda")


PROBE = """
from types import SimpleNamespace
from zeroboard.training import ops
for_build_ops = {**ops.job_env('cpu')}.get('TORCH_EXTENSIONS_DIR')  # what build-ops gives the builders it starts
ops.load_for_job('cpu', None, print)  # what each rank of a job does before DeepSpeed loads an op
print(for_build_ops or '-', ops.build_folder(SimpleNamespace(name='deepspeed_shm_comm')).parent)
"""


def test_a_jobs_ranks_and_build_ops_agree_on_the_folder_and_another_venv_gets_its_own(tmp_path):
    """Real interpreters: the shared .venv and a second venv made here (the same packages, through a .pth file)."""
    import site
    import sysconfig

    other = tmp_path / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True, timeout=120)
    purelib = Path(subprocess.run([other / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    shared = [sysconfig.get_path("purelib"), *site.getsitepackages()]
    (purelib / "shared-venv.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in dict.fromkeys(shared)))
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")

    def folders(python, **more) -> tuple[str, str]:
        """(the folder build-ops gives its builders, the one torch builds in for a job's rank) in that interpreter"""
        p = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=300, env={**env, **more})
        assert p.returncode == 0, p.stderr[-2000:]
        build_ops, job = p.stdout.split()[-2:]
        return build_ops, job

    here = folders(sys.executable)
    there = folders(other / "bin" / "python")
    assert here[0] == here[1] == str(tmp_path / "cache" / "torch_extensions" / ops.extensions_dir(sys.prefix).name)
    assert there[0] == there[1] and there[0] != here[0]
    assert Path(there[0]).parent == Path(here[0]).parent == tmp_path / "cache" / "torch_extensions"
    theirs = str(tmp_path / "theirs")  # a folder the user set wins in both (the container image sets one)
    assert folders(other / "bin" / "python", TORCH_EXTENSIONS_DIR=theirs) == ("-", theirs)


def test_build_ops_for_cuda_builds_cuda_ops_where_no_gpu_is_seen():
    """`docker build` sees no GPU: DeepSpeed alone would pick its CPU accelerator and build a CPU fused_adam."""
    probe = "from zeroboard.training import ops; print(type(ops.builder('FusedAdamBuilder')).__module__)"
    found = {}
    for kind in ("cuda", "cpu"):
        env = {**os.environ, **ops.job_env(kind), "CUDA_VISIBLE_DEVICES": ""}
        found[kind] = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                     check=True, timeout=300).stdout.split()[-1]
    assert found == {"cuda": "deepspeed.ops.op_builder.fused_adam", "cpu": "deepspeed.ops.op_builder.cpu.fused_adam"}


class _Reader:
    def __init__(self, others, logs=(), start=None):
        self.others, self.logs, self.start = list(others), list(logs), start


def test_the_progress_line_names_the_op_being_compiled():
    state = JobState(run_dir="/r", status="running", started=100.0)
    compiling = _Reader([{"event": "compile", "op": "cpu_adam", "time": 130.0}])
    html = live.progress_html(compiling, state, "zh")
    assert 'data-phase="compile"' in html and "正在编译 DeepSpeed 算子 cpu_adam(仅首次)" in html
    assert "compiling DeepSpeed op cpu_adam (first time only)" in live.progress_html(compiling, state, "en")
    done = _Reader([*compiling.others, {"event": "compiled", "op": "cpu_adam", "seconds": 90, "time": 220.0}])
    assert 'data-phase="wait"' in live.progress_html(done, state, "en")
    again = _Reader([*done.others, {"event": "compile", "op": "deepspeed_shm_comm", "time": 221.0}])
    assert "deepspeed_shm_comm" in live.progress_html(again, state, "en")
    training = _Reader(again.others, logs=[{"step": 3, "total_steps": 10}], start={"total_steps": 10})
    assert 'data-phase="train"' in live.progress_html(training, state, "en")
    ended = JobState(run_dir="/r", status="failed", started=100.0, ended=300.0)
    assert 'data-phase="wait"' in live.progress_html(compiling, ended, "en")  # a dead run compiles nothing


# --- a real first run ----------------------------------------------------------------------------------------------

def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


@pytest.mark.browser
@pytest.mark.e2e
def test_a_first_run_shows_its_compile_phase_survives_an_abort_and_build_ops_reuses_the_build(tmp_path, browser):
    extensions = tmp_path / "torch_extensions"  # nothing compiled yet: a fresh machine, as far as DeepSpeed knows
    extensions.mkdir()
    port = command.free_port()
    env = {"TORCH_EXTENSIONS_DIR": str(extensions), "ZEROBOARD_LANG": "zh"}
    server = start_server(port, tmp_path / "runs.json", tmp_path / "server.log", env=env)
    stopped, first = tmp_path / "stopped", tmp_path / "first"
    try:
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(UI_S)
        pg.goto(f"http://127.0.0.1:{port}/?lang=zh")
        pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
        choose(pg, "deepspeed_stage", "2")
        fill(pg, "max_steps", 10)

        # 开始, then 中断 while the op compiles: the compile's build lock is left behind
        fill(pg, "output_dir", stopped)
        pg.locator("#zb-start").click()
        phase = pg.wait_for_selector("#zb-progress .zb-progress[data-phase='compile']", timeout=120_000)
        assert "正在编译 DeepSpeed 算子 deepspeed_shm_comm(仅首次)" in phase.inner_text(), phase.inner_text()
        pg.locator("#zb-abort").click()
        wait_until(lambda: status(pg) == "aborted", 120, "the aborted status")
        assert (extensions / "deepspeed_shm_comm" / "lock").exists()

        # the next run removes that stale lock (torch alone would wait on it forever), compiles and trains
        box = pg.locator("#zb-output_dir input, #zb-output_dir textarea").first
        wait_until(box.is_editable, 30, "the form to be editable")
        fill(pg, "output_dir", first)
        pg.locator("#zb-start").click()
        pg.wait_for_selector("#zb-progress .zb-progress[data-phase='compile']", timeout=120_000)
        compiling = pg.locator("#zb-progress .zb-progress[data-phase='compile']")
        # the compile's own budget first (minutes on a 2-core machine busy with other tests), then the run's
        wait_until(lambda: compiling.count() == 0, COMPILE_S, "the compile to end")
        wait_until(lambda: status(pg) in ("finished", "failed"), RUN_S, "the run to end")
        assert status(pg) == "finished", pg.locator("#zb-final").inner_text()
        pg.close()
    finally:
        stop_jobs(tmp_path / "runs.json")
        stop_server(server)

    assert [e["event"] for e in _events(stopped)] == ["compile"]
    events = _events(first)
    kinds = [e["event"] for e in events]
    assert kinds.index("compile") < kinds.index("stale_lock") < kinds.index("compiled") < kinds.index("start")
    compiled = events[kinds.index("compiled")]
    assert compiled["op"] == "deepspeed_shm_comm" and compiled["seconds"] > 1
    log = (first / "launcher.log").read_text()
    assert "compiling DeepSpeed op deepspeed_shm_comm (first time only" in log and "left by a compile that was stopped" in log

    # zeroboard build-ops finds that build: the same op, not a second version of it
    proc = subprocess.run([sys.executable, "-m", "zeroboard.cli", "build-ops", "--device", "cpu",
                           "--op", "ShareMemCommBuilder"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions), "ZEROBOARD_LANG": "en"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "deepspeed_shm_comm: already built" in proc.stdout
    assert sorted(p.name for p in Path(extensions, "deepspeed_shm_comm").glob("*.so")) == ["deepspeed_shm_comm.so"]

    # a rebuild stopped beside that library (a Ctrl-C after torch was upgraded) leaves its lock: a job's ranks and
    # build-ops clear it and load the library; torch alone would wait on the lock for ever.  And they use this
    # environment's ninja whatever PATH finds first (another ninja version takes the build for a changed one and
    # compiles it again): here PATH finds one that fails
    lock = extensions / "deepspeed_shm_comm" / "lock"
    other = tmp_path / "other-bin"
    other.mkdir()
    (other / "ninja").write_text("#!/bin/sh\nexit 1\n")
    (other / "ninja").chmod(0o755)
    library = extensions / "deepspeed_shm_comm" / "deepspeed_shm_comm.so"
    built = library.stat().st_mtime_ns
    env = {**os.environ, **ops.job_env("cpu"), "TORCH_EXTENSIONS_DIR": str(extensions), "ZEROBOARD_LANG": "en",
           "PATH": f"{other}{os.pathsep}{os.environ['PATH']}"}
    job = ("from zeroboard.training import ops\n"
           "ops.load_for_job('cpu', {'zero_optimization': {'stage': 2}}, lambda kind, **f: print('event', kind))")
    said = []
    for argv in ([sys.executable, "-c", job],
                 [sys.executable, "-m", "zeroboard.cli", "build-ops", "--device", "cpu", "--op", "ShareMemCommBuilder"]):
        lock.write_text("")
        old = time.time() - 2 * ops.STALE_AFTER_S
        os.utime(lock, (old, old))
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0 and not lock.exists(), proc.stdout + proc.stderr
        said.append(proc.stdout)
    assert "event stale_lock" in said[0] and "event compile" not in said[0], said[0]  # the library was there
    assert "deepspeed_shm_comm: already built" in said[1]
    assert library.stat().st_mtime_ns == built  # loaded, not compiled again


def test_progress_lines_name_the_ops_a_job_names():
    from deepspeed.ops.op_builder.cpu import CPUAdamBuilder, ShareMemCommBuilder

    assert ops.OP_NAMES["CPUAdamBuilder"] == CPUAdamBuilder.NAME
    assert ops.OP_NAMES["ShareMemCommBuilder"] == ShareMemCommBuilder.NAME


def test_one_rank_per_machine_clears_a_stale_build_lock_the_others_wait_for_it(tmp_path, monkeypatch):
    """Two ranks meet a lock a stopped compile left: the clearing one removes it and says so; the other waits
    while any lock is there (stale or live) and never reports the removal itself."""
    import threading
    from types import SimpleNamespace

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    op = SimpleNamespace(name="zb_test_op")
    lock = ops.build_folder(op) / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    old = time.time() - 2 * ops.STALE_AFTER_S
    os.utime(lock, (old, old))

    waiter: dict = {}
    t = threading.Thread(target=lambda: waiter.update(removed=ops.wait_out_lock(op, clear=False)))
    t.start()
    time.sleep(1.5)
    assert t.is_alive() and lock.exists()  # the waiting rank leaves even a stale lock alone
    assert ops.wait_out_lock(op, clear=True) is True and not lock.exists()
    t.join(10)
    assert not t.is_alive() and waiter["removed"] is False


def test_a_build_from_another_environment_is_not_taken_for_this_ones(tmp_path, monkeypatch):
    """The extension folder is shared by the user's environments: an op built by another venv's torch and DeepSpeed
    is compiled again when a job here loads it, so it is not "built" (the job announces its compile phase); nor is
    a library older than its recipe."""
    from types import SimpleNamespace

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    op = SimpleNamespace(name="zb_test_op")
    folder = ops.build_folder(op)
    folder.mkdir(parents=True, exist_ok=True)
    torch_dir = ops.torch_folder()
    assert not ops.is_built(op)  # nothing there
    (folder / "zb_test_op.so").write_bytes(b"")
    other = "/elsewhere/.venv/lib/python3.11/site-packages"
    (folder / "build.ninja").write_text(f"cflags = -I{other}/deepspeed/ops/csrc/includes -isystem {other}/torch/include\n")
    assert not ops.is_built(op)
    (folder / "build.ninja").write_text(f"cflags = -I{other}/deepspeed/ops/csrc/includes -isystem {torch_dir}/include\n")
    os.utime(folder / "build.ninja", (1e9, 1e9))  # the recipe, then the library built from it
    assert ops.is_built(op)
    os.utime(folder / "zb_test_op.so", (9e8, 9e8))  # a rebuild wrote its recipe and was stopped before linking
    assert not ops.is_built(op)
    (folder / "build.ninja").unlink()  # a library without its recipe: nothing says it is this environment's
    assert not ops.is_built(op)
