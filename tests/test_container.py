"""The Dockerfile built and run as the quick start says, with podman on a stand-in for the CUDA base.

The commands are the quick start's own ``docker ...`` lines, run with podman and changed only where this machine
needs it (``here``): no GPU, the test's names, the port on loopback, the stand-in base. The image is built from
this checkout (tests/containers.py holds the machinery); then, as a user would: without a password the container
refuses and says why; with one the page answers after login only; the ZeRO-2 + offload demo trains to finished
inside the container with the ops the build compiled; its run, events and presets lie on the volume and the page
shows them after a restart; ``docker stop`` ends the server and a running job with nothing left.

The figures (build time, sizes, cold start, demo train time) go to a results file, never into assertions:
``$ZEROBOARD_CONTAINER_RESULTS`` (benchmarks/container.py sets it), else a temporary file.

    make test PYTEST_ARGS="-m container"      # on its own (root; `make container-tools` installs the tools)
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import resource
import secrets
import shlex
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import containers
from helpers import wait_until
from zeroboard.job.command import free_port

# the first test that needs the image waits for its build (and on a fresh machine the stand-in base's)
pytestmark = [pytest.mark.container, pytest.mark.e2e, pytest.mark.timeout(3600)]

DOCS = containers.REPO / "docs"
RESULTS = Path(os.environ.get("ZEROBOARD_CONTAINER_RESULTS") or Path(tempfile.gettempdir()) / "zeroboard-container.json")
START_S = 900  # a first start builds the demo model: 15 s on 2 free cores, 9 min here beside other jobs
RUN_S = 900
SLOW_CXX = "/tmp/failing-c++"


# --- the documented commands, as run here ----------------------------------------------------------------------------

def documented(lang: str = "en") -> list[list[str]]:
    """The ``docker ...`` lines of the quick start's code blocks, as argv (comments dropped)."""
    text = (DOCS / lang / "quickstart.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines() if line.startswith("docker ")]


def doc(verb: str, *words: str) -> list[str]:
    """The documented ``docker VERB ...`` line (the first one holding ``words``)."""
    return next(argv for argv in documented() if argv[1] == verb and all(w in argv for w in words))


@dataclass
class Names:
    image: str
    name: str
    volume: str
    port: int
    password: str
    base: str = ""


def option(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with the value after ``flag`` replaced (None: the flag and its value dropped)."""
    i = argv.index(flag)
    return argv[:i] + ([flag, value] if value is not None else []) + argv[i + 2:]


def here(argv: list[str], n: Names) -> list[str]:
    """A documented ``docker`` command as this machine runs it: podman, no GPU, the test's names and port."""
    verb, rest = argv[1], argv[2:]
    if verb == "build":
        return ["podman", "build", *containers.build_flags(n.base), *option(rest, "-t", n.image)]
    if verb == "run":
        rest = option(rest, "--gpus", None)
        rest = option(rest, "--name", n.name)
        rest = option(rest, "-v", f"{n.volume}:{rest[rest.index('-v') + 1].split(':', 1)[1]}")
        rest = option(rest, "-p", f"127.0.0.1:{n.port}:{container_port()}")
        rest = option(rest, "-e", f"ZEROBOARD_PASSWORD={n.password}") if n.password else option(rest, "-e", None)
        return ["podman", "run", *rest[:-1], n.image]
    i = rest.index("zeroboard")  # exec, stop, start: the container's name
    return ["podman", verb, *rest[:i], n.name, *rest[i + 1:]]


def container_port() -> int:
    published = doc("run")[doc("run").index("-p") + 1]
    return int(published.rsplit(":", 1)[1])


def timed(argv: list[str], timeout: float, log: Path | None = None, check: bool = True) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = containers.run(argv, timeout, log, check=check)
    return done, round(time.perf_counter() - started, 1)


# --- the page over HTTP --------------------------------------------------------------------------------------------

def fetch(opener, url: str, data: dict | None = None) -> tuple[int, str]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    try:
        with opener.open(url, data=body, timeout=20) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def serve_after(argv: list[str], url: str, log: Path) -> float:
    """Seconds from the command (run or start) until the page answers through the mapped port."""
    started = time.perf_counter()
    containers.run(argv, 300, log)
    wait_until(lambda: answers(url), START_S, f"the page at {url}", every=0.3)
    return round(time.perf_counter() - started, 1)


def volume_file(n: Names, path: str) -> Path:
    return containers.volume_path(n.volume) / path


def events(n: Names, run: str) -> list[dict]:
    path = volume_file(n, f"{run}/events.jsonl")
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines if line.strip()]


# --- fixtures ------------------------------------------------------------------------------------------------------

INTERFACES: dict[str, list[str]] = {}  # the host's network interfaces before the served container started


def host_interfaces() -> list[str]:
    return sorted(os.listdir("/sys/class/net"))


@pytest.fixture(scope="module")
def figures():
    found: dict = {}
    yield found
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(found, indent=2) + "\n")
    print(f"\ncontainer figures ({RESULTS}): {json.dumps(found)}")


@pytest.fixture(scope="module")
def names():
    tag = secrets.token_hex(4)
    return Names(f"localhost/zeroboard-test:{tag}", f"zeroboard-test-{tag}", f"zeroboard-test-{tag}", free_port(),
                 secrets.token_urlsafe(12))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("container")


@pytest.fixture(scope="module")
def image(names, workdir, figures):
    """The project's image, built from this checkout on the (cached) stand-in base (an image of the same inputs
    built before on this machine is used as it is: containers.project_image); its build log."""
    missing = containers.missing_tools()
    assert not missing, f"the container test needs {missing}: run `make container-tools` (root)"
    log = workdir / "build.log"
    started = time.perf_counter()
    names.base, built = containers.standin_base(workdir / "standin.log")
    figures["standin_base"] = {"built_now": built, "seconds": round(time.perf_counter() - started, 1),
                               "bytes": containers.image_bytes(names.base)}
    figures["context_bytes"], figures["context_files"] = containers.context_bytes_and_files()
    # the files the image's key hashes are the ones the build is sent (buildah's own reading of .dockerignore)
    assert len(containers.context_files()) == figures["context_files"]
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    names.image, built = containers.project_image(names.base, lambda tag: here(doc("build"), replace(names, image=tag)), log)
    figures["image_built_now"] = built
    if built:
        figures["build_s"] = round(time.perf_counter() - started, 1)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the build's own processes: a figure the load leaves alone
        figures["build_cpu_s"] = round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1)
        figures["load_average_1min_after_build"] = round(os.getloadavg()[0], 2)
    figures["image_bytes"] = containers.image_bytes(names.image)
    yield log.read_text(errors="replace")


@pytest.fixture(scope="module")
def served(image, names, workdir, figures):
    """The documented container with a password, serving on the mapped port: (names, url)."""
    url = f"http://127.0.0.1:{names.port}/"
    INTERFACES["before"] = host_interfaces()
    figures["cold_start_s"] = serve_after(here(doc("run"), names), url, workdir / "run.log")
    yield names, url
    containers.podman("rm", "-f", "-t", "0", names.name, check=False)
    containers.podman("volume", "rm", "-f", names.volume, check=False)


# --- tests ---------------------------------------------------------------------------------------------------------

def test_the_docs_show_the_same_commands_in_both_languages():
    assert documented("en") == documented("zh")
    assert {argv[1] for argv in documented()} >= {"build", "run", "exec", "stop", "start"}


def test_the_image_holds_zeroboard_and_no_checkout_state(image, names):
    look = ("ls -A /opt/zeroboard; echo --; ls -A /root; echo --; ls -A /var/lib/apt/lists; echo --;"
            r" find / -xdev \( -name .git -o -name .venv -o -name .pytest_cache \) -print")
    done = containers.podman("run", "--rm", "--entrypoint", "sh", names.image, "-c", look)
    top, home, apt_lists, found = (part.split() for part in done.stdout.split("--"))
    assert set(top) == {"Makefile", "README.md", "app", "docker", "examples", "pyproject.toml"}, top  # no tests, docs
    assert not {".cache", ".triton"} & set(home), home  # no pip, Hugging Face or kernel caches
    assert apt_lists == [], apt_lists
    assert not found, found


def test_the_build_reports_each_op_and_a_failed_prebuild_is_not_swallowed(image, served, names, workdir):
    assert "building DeepSpeed ops for cpu" in image
    assert len(re.findall(r"^  \S+: built in [\d.]+ s$", image, re.M)) == 2, image[-3000:]
    # the Dockerfile's prebuild step again, with a compiler that fails: each op's error is printed, the build goes on
    step = next(line for line in dockerfile_runs() if "build-ops" in line)
    broken = ["-e", "CXX=false", "-e", "TORCH_EXTENSIONS_DIR=/tmp/no-ops"]
    done = containers.podman("run", "--rm", *broken, "--entrypoint", "sh", names.image, "-c", step, timeout=600)
    assert done.returncode == 0
    assert len(re.findall(r"^  \S+: failed: ", done.stdout, re.M)) == 2, done.stdout[-3000:]
    assert "NOT pre-built" in done.stdout
    # ... and the first job that needs an op compiles it first: the compile phase the page shows, then the error.
    # Its compiler works a while before it fails, as one missing a header does (`false` would fail before rank 0,
    # which announces the compile, is even there).
    containers.podman("exec", names.name, "sh", "-c", f"printf '#!/bin/sh\\nsleep 10\\nexit 1\\n' >{SLOW_CXX}; chmod +x {SLOW_CXX}")
    slow = ["-e", f"CXX={SLOW_CXX}", "-e", "TORCH_EXTENSIONS_DIR=/tmp/no-ops"]
    job = ["zeroboard", "train", "examples/lora_z2_offload.yaml", "--set", "output_dir=runs/no-ops"]
    failed = containers.run(["podman", "exec", *slow, names.name, *job], RUN_S, workdir / "no-ops.log", check=False)
    assert failed.returncode != 0
    said = [e["event"] for e in events(names, "runs/no-ops")]
    assert "compile" in said and said[-1] == "error", said


def dockerfile_runs() -> list[str]:
    text = (containers.REPO / "Dockerfile").read_text().replace("\\\n", " ")
    # a RUN's own options (--mount=type=cache,...) are the build's, not the step's
    return [re.sub(r"^(--\S+\s+)*", "", line[4:]) for line in text.splitlines() if line.startswith("RUN ")]


def test_without_a_password_the_container_refuses_and_says_why(image, names, workdir):
    alone = Names(names.image, names.name + "-nopw", names.volume + "-nopw", free_port(), "")
    try:
        containers.run(here(doc("run"), alone), 120, workdir / "nopw.log")
        code = int(containers.podman("wait", alone.name, timeout=300).stdout.strip())
        logs = containers.run(here(doc("logs"), alone), 60)
        said = logs.stdout + logs.stderr
        assert code != 0 and "ZEROBOARD_PASSWORD" in said, said
        assert not answers(f"http://127.0.0.1:{alone.port}/")
    finally:
        containers.podman("rm", "-f", alone.name, check=False)
        containers.podman("volume", "rm", "-f", alone.volume, check=False)


def test_the_page_answers_through_the_port_only_after_login(served):
    n, url = served
    stranger = urllib.request.build_opener()
    assert fetch(stranger, url + "config")[0] == 401
    assert fetch(stranger, url + "login", {"username": "zeroboard", "password": "wrong"})[0] == 400
    user = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    assert fetch(user, url + "login", {"username": "zeroboard", "password": n.password})[0] == 200
    code, config = fetch(user, url + "config")
    assert code == 200 and json.loads(config)["title"] == "ZeroBoard"


def test_a_running_container_leaves_the_hosts_network_interfaces_as_they_were(served):
    """The container's network is user-space (tests/containers.py): a bridge or veth pair appearing on the host makes
    Chromium drop the requests in flight of every page it shows (net::ERR_NETWORK_CHANGED), the browser tests'
    beside this one included."""
    assert host_interfaces() == INTERFACES["before"]


def test_the_demo_trains_to_finished_and_its_run_survives_a_restart(served, workdir, figures, browser):
    n, url = served
    train = here(doc("exec", "train"), n)
    done, figures["demo_train_s"] = timed(train, RUN_S, workdir / "train.log", check=False)
    assert done.returncode == 0, (workdir / "train.log").read_text()[-3000:]
    run = re.search(r"output_dir:\s*(\S+)", (containers.REPO / train[-1]).read_text()).group(1)
    said = [e["event"] for e in events(n, run)]
    assert said[-1] == "end" and "compile" not in said, said  # the ops the build compiled are the ones it loads
    on_volume = ["state.json", "zeroboard_result.json", "command.json", "ds_config.json"]
    assert all(volume_file(n, f"{run}/{f}").is_file() for f in on_volume)
    assert json.loads(volume_file(n, f"{run}/state.json").read_text())["status"] == "finished"
    assert volume_file(n, "cache/ds_z2_offload_config.json").is_file() and volume_file(n, "cache/webui/runs.json").is_file()

    containers.run(here(doc("stop"), n), 120, workdir / "run.log")
    figures["restart_s"] = serve_after(here(doc("start"), n), url, workdir / "run.log")
    context = browser.new_context()  # the session's Chromium (conftest.py): a second sync Playwright cannot start
    try:
        page = context.new_page()
        page.goto(url)
        page.get_by_label("username").fill("zeroboard")
        page.get_by_label("password").fill(n.password)
        page.get_by_role("button", name="Login").click()
        page.wait_for_selector("#zb-status .zb-status[data-status='finished']", timeout=60_000)
        assert run in page.locator("#zb-status").inner_text()  # named as the workspace (/data) names it
    finally:
        context.close()


def test_stop_ends_the_server_and_a_running_job_with_nothing_left(served, workdir, figures):
    n, url = served
    train = here(doc("exec", "train"), n)
    containers.run([*train, "--set", "output_dir=runs/stopped", "--set", "max_steps=5000", "--detach"], 300,
                   workdir / "stop.log")
    wait_until(lambda: "log" in [e["event"] for e in events(n, "runs/stopped")], RUN_S, "the job's first logged step")
    inside = containers.processes(n.name)
    assert any("zeroboard webui" in args for _, args in inside) and any("zeroboard.training.train" in args for _, args in inside), inside
    _, figures["stop_s"] = timed(here(doc("stop"), n), 120, workdir / "stop.log")
    assert not answers(url)
    left = [(pid, args) for pid, args in inside if Path(f"/proc/{pid}").exists()]
    assert not left, left
    state = json.loads(volume_file(n, "runs/stopped/state.json").read_text())
    assert state["status"] == "aborted" and state.get("leftover") == [], state
