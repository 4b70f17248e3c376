"""Web UI figures: cold start, server memory, log latency.

Prints:
- cold start: ``zeroboard webui`` launched -> first page served (HTTP 200 on /), target <= 3 s, and the same for a
  bare three-widget Gradio app started alternately with it: the ratio, target <= 1.2x
- RSS of the web server process after a browser has the Train page open on a running job, target <= 300 MB
- log delay: a line appended to the job's launcher.log -> visible in the browser's log panel, target <= 1 s
- CPU while one tab follows the running job and nobody touches it: the browser's processes (the page's redraws)
  and the web server (its ticks), in % of one core over ``--watch`` seconds; then the same once the job has ended
  (a tab left open on a finished run)

The "running job" is a stand-in (``sleep``) started through the real runner,
so the figures measure the web UI, not a training run.  Needs Chromium.

    python benchmarks/webui_bench.py [--starts 3] [--lines 10] [--json benchmarks/results/webui.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

import psutil  # noqa: E402

from zeroboard.job import checks, command, record, spec  # noqa: E402
from zeroboard.runs import manager as runner  # noqa: E402
from zeroboard.runs.state import JobState  # noqa: E402

CHROMIUM = os.environ.get("ZEROBOARD_CHROMIUM", "/usr/bin/chromium")
ZEROBOARD = Path(sys.executable).parent / "zeroboard"


def launch(port: int, index: Path) -> tuple[subprocess.Popen, float]:
    """Start `zeroboard webui`; seconds until / answers 200."""
    exe = [str(ZEROBOARD)] if ZEROBOARD.exists() else [sys.executable, "-m", "zeroboard.cli"]
    env = {**os.environ, "ZEROBOARD_RUNS_INDEX": str(index)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([*exe, "webui", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, served(proc, port, t0, "zeroboard webui")


BARE_APP = """
import sys
import gradio as gr
with gr.Blocks() as demo:
    box = gr.Textbox(label="prompt")
    button = gr.Button("go")
    out = gr.Markdown()
    button.click(lambda s: s, box, out)
demo.launch(server_port=int(sys.argv[1]))
"""


def served(proc: subprocess.Popen, port: int, t0: float, what: str) -> float:
    """Seconds from t0 until / answers 200."""
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                if r.status == 200:
                    r.read()
                    return time.perf_counter() - t0
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"{what} exited before serving a page") from None
            time.sleep(0.02)


def bare_app_start() -> float:
    """The same cold start for the smallest Gradio app a user could write: a textbox, a button, a markdown."""
    port = command.free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", BARE_APP, str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        return served(proc, port, t0, "the bare Gradio app")
    finally:
        proc.terminate()
        proc.wait()


def bare_gradio_import() -> float:
    """The floor under the cold start: a Python process that only imports gradio."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import gradio"], check=True)
    return time.perf_counter() - t0


def fake_job(tmp: Path, index: Path) -> JobState:
    """A job that runs (a sleep) under the real supervisor, for the page to follow."""
    run = tmp / "run"
    cmd = command.Command(["sleep", "600"], {}, str(ROOT), None, "cpu", [0], command.free_port())
    prepared = command.Prepared(spec.JobSpec(output_dir=str(run)), checks.Report(), cmd)
    return runner.JobManager(index=index).start(prepared)


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def follow_cost(server: int, seconds: float) -> dict:
    """% of one core the browser (every Chromium process under this one) and the web server spend while a tab
    follows the running job, untouched, for ``seconds``."""
    browser = [c for c in psutil.Process().children(recursive=True) if "chromium" in c.name().lower()]
    web = [psutil.Process(server)]
    b0, w0, t0 = cpu_seconds(browser), cpu_seconds(web), time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    return {"browser_cpu_pct": round(100 * (cpu_seconds(browser) - b0) / wall, 1),
            "server_cpu_pct": round(100 * (cpu_seconds(web) - w0) / wall, 1), "watch_s": round(wall, 1)}


def log_delays(url: str, run: Path, lines: int, server: int, watch: float, stop) -> tuple[list[float], dict, dict]:
    from playwright.sync_api import sync_playwright

    delays = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("#zb-status .zb-status[data-status=running]", timeout=60_000)
        time.sleep(2)  # let the first full render settle
        for i in range(lines):
            marker = f"bench-line-{i}-{time.time_ns()}"
            t0 = time.perf_counter()
            with (run / record.LOG_FILE).open("a") as fh:
                fh.write(f"[rank0]:{marker}\n")
            page.wait_for_function(f"() => document.querySelector('#zb-log textarea').value.includes('{marker}')",
                                   polling=10, timeout=30_000)
            delays.append(time.perf_counter() - t0)
            time.sleep(0.37)  # land at different phases of the refresh timer
        cost = follow_cost(server, watch)
        stop()
        page.wait_for_selector("#zb-status .zb-status[data-status=aborted]", timeout=60_000)
        page.wait_for_timeout(3000)  # the tick that saw the end sets the page's pace
        ended = follow_cost(server, watch)
        browser.close()
    return delays, cost, ended


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=3, help="cold starts to time")
    ap.add_argument("--lines", type=int, default=10, help="log lines to time")
    ap.add_argument("--watch", type=float, default=30.0, help="seconds of CPU use to measure while the tab follows")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="zb-webui-bench-") as tmp_name:
        tmp = Path(tmp_name)
        index = tmp / "runs.json"
        starts, bare, floors = [], [], []
        for _ in range(args.starts):  # interleaved, so all see the same machine load
            proc, seconds = launch(command.free_port(), index)
            starts.append(seconds)
            proc.terminate()
            proc.wait()
            bare.append(bare_app_start())
            floors.append(bare_gradio_import())

        job = fake_job(tmp, index)
        port = command.free_port()
        proc, _ = launch(port, index)
        try:
            manager = runner.JobManager(index=index)
            delays, cost, ended = log_delays(f"http://127.0.0.1:{port}/", Path(job.run_dir), args.lines, proc.pid,
                                             args.watch, lambda: manager.abort(job.run_dir))
            rss = psutil.Process(proc.pid).memory_info().rss / 2**20
            torch_loaded = "libtorch" in Path(f"/proc/{proc.pid}/maps").read_text()
        finally:
            proc.terminate()
            proc.wait()
            manager = runner.JobManager(index=index)
            manager.abort(job.run_dir)
            deadline = time.time() + 60  # the run dir goes with the temp dir: let the stop finish first
            while (st := manager.state(job.run_dir)) is not None and st.active and time.time() < deadline:
                time.sleep(0.2)

    figures = {
        "cold_start_s": round(statistics.median(starts), 2), "cold_start_runs_s": [round(s, 2) for s in starts],
        "bare_app_start_s": round(statistics.median(bare), 2), "bare_app_runs_s": [round(s, 2) for s in bare],
        "cold_start_ratio": round(statistics.median(starts) / statistics.median(bare), 2),
        "bare_gradio_import_s": round(statistics.median(floors), 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "rss_mb": round(rss, 1),
        "log_delay_median_s": round(statistics.median(delays), 3), "log_delay_max_s": round(max(delays), 3),
        "torch_loaded_in_server": torch_loaded,
        **cost,
        "ended": ended,
    }
    print(f"cold start to first served page: {figures['cold_start_s']:.2f} s "
          f"(runs: {', '.join(f'{s:.2f}' for s in starts)})   target <= 3 s")
    print(f"a bare three-widget Gradio app, started alternately: {figures['bare_app_start_s']:.2f} s "
          f"(runs: {', '.join(f'{s:.2f}' for s in bare)}); ratio {figures['cold_start_ratio']:.2f}x   target <= 1.2x")
    print(f"  of which a bare `python -c 'import gradio'`: {figures['bare_gradio_import_s']:.2f} s; "
          f"load average {figures['load_average_1min']} on {os.cpu_count()} CPUs")
    print(f"web server RSS with the page open on a running job: {rss:.0f} MB   target <= 300 MB")
    print(f"log line appended -> shown in the browser: median {figures['log_delay_median_s']:.2f} s, "
          f"max {figures['log_delay_max_s']:.2f} s over {len(delays)} lines   target <= 1 s")
    print(f"libtorch mapped into the web server: {'yes' if torch_loaded else 'no'}")
    print(f"one tab following the running job, untouched, {cost['watch_s']:.0f} s: the browser "
          f"{cost['browser_cpu_pct']:.0f}% of a core, the web server {cost['server_cpu_pct']:.0f}%")
    print(f"the same tab once the job has ended: the browser {ended['browser_cpu_pct']:.0f}%, "
          f"the web server {ended['server_cpu_pct']:.0f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
