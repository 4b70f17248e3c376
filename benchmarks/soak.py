"""Soak: start -> first logged step -> abort, N times through the page's own HTTP API; the UI server's RSS stays flat.

1. Starts ``zeroboard webui`` as a subprocess on a free port, in a workspace of its own (a temp folder holding
   ``examples/demo.yaml`` and a copy of the demo model; the model is built by ``zeroboard demo-model`` into this
   checkout's ``cache/demo`` when missing) with its own runs index.
2. Opens one tab's session (the page's load handlers) and, N times: clicks Start through the queue as the browser
   does (the form's values from the page's config, with ``output_dir``, ``max_steps`` and ``logging_steps`` set:
   a distinct output folder per cycle, as a user gets from the page), follows the live panel (the 0.5 s timer's
   handler, with the form's 2 s timer beside it) until it shows the first logged step, clicks Abort, follows it
   until the run is settled, and checks that no process of the run is left (launcher, ranks, trainers naming the
   run folder, supervisor).
3. Samples the server process's RSS, threads and open files after every cycle.

A Start the page refuses because another CPU job runs on this machine (another engineer's test: one CPU job per
machine) is retried after a pause and counted, not failed.

    python benchmarks/soak.py [--cycles 200] [--json benchmarks/results/soak.json]
    python benchmarks/soak.py --cycles 40 --probe benchmarks/results/soak_probe.json   # tracemalloc in the server
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

import psutil  # noqa: E402

from zeroboard import words  # noqa: E402
from zeroboard.job import command, spec  # noqa: E402
from zeroboard.runs import processes  # noqa: E402
from zeroboard.runs.manager import JobManager  # noqa: E402
from zeroboard.runs.state import read_state  # noqa: E402

MiB = 1 << 20
MARKS = (1, 20, 50, 100, 150, 200)
SETTLED = ("finished", "failed", "aborted", "lost")
PROBE_SERVER = ROOT / "benchmarks" / "soak_probe.py"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Page:
    """One browser tab on the page: its events called over HTTP exactly as the browser calls them.

    Queued events (Start, Abort) join the queue and read the result from the session's event stream; the
    timers' handlers (queue=False) are posted directly.  State inputs are the session's, kept by the server.
    """

    def __init__(self, base: str):
        self.base, self.session = base, uuid.uuid4().hex[:11]
        cfg = self._get("/config")
        self.prefix = cfg.get("api_prefix", "/gradio_api")
        comps = cfg["components"]
        self.values = {c["id"]: c.get("props", {}).get("value") for c in comps}
        self.by_elem = {c["props"]["elem_id"]: c["id"] for c in comps if c.get("props", {}).get("elem_id")}
        deps = [d for d in cfg["dependencies"] if d.get("backend_fn")]
        on = lambda elem, what: next(d for d in deps if [self.by_elem[elem], what] in d["targets"])  # noqa: E731
        self.start_dep, self.abort_dep = on("zb-start", "click"), on("zb-abort", "click")
        every = {c["id"]: float(c["props"]["value"]) for c in comps if c["type"] == "timer"}
        self.timed = [(d, every[t[0]]) for d in deps for t in d["targets"] if t[0] in every]  # every timer's handler
        self.due = [0.0] * len(self.timed)
        self.live_dep = next(d for d, _ in self.timed if self.by_elem["zb-status"] in d["outputs"])
        self.loads = [d for d in deps if any(t[1] == "load" for t in d["targets"])]
        self.message_id = self.by_elem["zb-message"]

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(self.base + path, timeout=60) as r:
            return json.loads(r.read())

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.base + self.prefix + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def call(self, dep: dict, overrides: dict | None = None) -> dict:
        """Run one event of this tab; its outputs by component id (the values the page would now show)."""
        data = [(overrides or {}).get(i, self.values.get(i)) for i in dep["inputs"]]
        body = {"data": data, "fn_index": dep["id"], "session_hash": self.session, "event_data": None,
                "trigger_id": dep["targets"][0][0] if dep["targets"] else None}
        out = self._queued(body) if dep.get("queue", True) is not False else self._post(f"/run/{dep['api_name']}", body)
        shown = dict(zip(dep["outputs"], out["data"]))
        for cid, value in shown.items():  # what the browser keeps: values, not the skips and property updates
            if not (isinstance(value, dict) and value.get("__type__") == "update"):
                self.values[cid] = value
        return shown

    def _queued(self, body: dict) -> dict:
        event = self._post("/queue/join", body)["event_id"]
        url = f"{self.base}{self.prefix}/queue/data?session_hash={self.session}"
        with urllib.request.urlopen(url, timeout=300) as stream:
            for raw in stream:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") == event and msg.get("msg") == "process_completed":
                    if not msg.get("success"):
                        raise RuntimeError(f"the page's handler failed: {msg.get('output')}")
                    return msg["output"]
        raise RuntimeError("the event stream closed before the result came")

    def open(self) -> None:
        for dep in self.loads:
            self.call(dep)

    def tick(self) -> None:
        """Each of the page's timers whose time has come (the live panels', the form's, ...), as the browser's."""
        for i, (dep, every) in enumerate(self.timed):
            if time.time() >= self.due[i]:
                self.due[i] = time.time() + every
                self.call(dep)

    def field(self, name: str) -> int:
        return self.by_elem[f"zb-{name}"]

    def shown(self, elem: str) -> str:
        return str(self.values.get(self.by_elem[elem]) or "")

    def status(self) -> tuple[str | None, str | None]:
        """(status, run dir) as the live panel shows them."""
        text = self.shown("zb-status")
        m, run = re.search(r'data-status="(\w+)"', text), re.search(r"<code>(.*?)</code>", text)
        return (m.group(1) if m else None), (html.unescape(run.group(1)) if run else None)

    def step(self) -> int:
        m = re.search(r'data-step="(\d+)"', self.shown("zb-progress"))
        return int(m.group(1)) if m else 0


def follow(page: Page, work: Path, run: Path, until, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        page.tick()
        status, shown = page.status()
        if shown and (work / shown).resolve() == run and until(status):  # the page names runs as the workspace does
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} not shown within {timeout:.0f} s (status {page.status()[0]}, step {page.step()})")


def leftovers(run: Path, wait_s: float = 10.0) -> list[int]:
    """Pids of the run still alive: launcher and ranks, trainers naming the folder, its supervisor."""
    st = read_state(run)
    deadline = time.time() + wait_s
    while True:
        found = {p.pid for p in processes.job_processes(st)} if st else set()
        for p, out in processes.live_trainers():
            if out == run:
                found.add(p.pid)
        if st and processes.proc(st.supervisor_pid, st.supervisor_ctime) is not None:
            found.add(st.supervisor_pid)  # it records the end, then exits: given a moment
        if not found or time.time() >= deadline:
            return sorted(found)
        time.sleep(0.25)


def cycle(page: Page, work: Path, i: int, max_steps: int, busy_word: str) -> dict:
    out = f"runs/soak-{i:03d}"
    run = (work / out).resolve()
    fields = {page.field("output_dir"): out, page.field("max_steps"): max_steps, page.field("logging_steps"): 1}
    t0, busy = time.time(), 0
    while True:
        message = str(page.call(page.start_dep, fields).get(page.message_id, ""))
        if (run / "launch.json").is_file():
            break
        if busy_word in message and busy < 120:  # another CPU job on this machine: try again shortly
            busy += 1
            until = time.time() + 5
            while time.time() < until:  # the open page goes on meanwhile: its timers tick as in a browser
                page.tick()
                time.sleep(0.5)
            continue
        raise RuntimeError(f"not started: {message}")
    follow(page, work, run, lambda s: page.step() >= 1 or s in SETTLED, 600, "the first logged step")
    first_step = time.time() - t0
    page.call(page.abort_dep)
    follow(page, work, run, lambda s: s in SETTLED, 300, "the run settled")
    status = page.status()[0]
    return {"status": status, "first_step_s": round(first_step, 1), "busy_retries": busy,
            "seconds": round(time.time() - t0, 1), "left": leftovers(run)}


def prepare_workspace(work: Path) -> None:
    demo = ROOT / spec.DEMO_MODEL
    if not (demo / "config.json").is_file():
        log("building the demo model (zeroboard demo-model)")
        subprocess.run([sys.executable, "-m", "zeroboard.cli", "demo-model"], cwd=ROOT, check=True)
    shutil.copytree(demo, work / spec.DEMO_MODEL)
    (work / "examples").mkdir()
    shutil.copy(ROOT / spec.DEMO_JOB, work / spec.DEMO_JOB)


def start_server(work: Path, port: int, probe: Path | None) -> subprocess.Popen:
    env = {**os.environ, "ZEROBOARD_RUNS_INDEX": str(work / "runs.json"), "ZEROBOARD_LANG": "en",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "app"), os.environ.get("PYTHONPATH", "")])}
    exe = [sys.executable, str(PROBE_SERVER), str(probe)] if probe else [sys.executable, "-m", "zeroboard.cli"]
    proc = subprocess.Popen([*exe, "webui", "--port", str(port)], cwd=work, env=env, stdin=subprocess.DEVNULL,
                            stdout=(work / "server.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    raise SystemExit(f"the web server did not serve:\n{(work / 'server.log').read_text()[-3000:]}")


def probe_dump(proc: subprocess.Popen, probe: Path) -> dict:
    """Ask the server under tracemalloc for a dump (SIGUSR1) and wait for it: the top growth since its last dump."""
    n = len(probe.read_text().splitlines()) if probe.is_file() else 0
    proc.send_signal(signal.SIGUSR1)
    deadline = time.time() + 300
    while time.time() < deadline:
        lines = probe.read_text().splitlines() if probe.is_file() else []
        if len(lines) > n:
            return json.loads(lines[-1])
        time.sleep(0.5)
    return {"error": "no dump within 300 s"}


def sample(server: psutil.Process) -> dict:
    return {"rss_mb": round(server.memory_info().rss / MiB, 2), "threads": server.num_threads(),
            "fds": server.num_fds()}


def summary(cycles: list[dict], args) -> dict:
    rss = {c["cycle"]: c["rss_mb"] for c in cycles}
    n = len(cycles)
    marks = {str(m): rss[m] for m in (*MARKS, n) if m in rss}
    slope = None
    if n >= 30:  # MB per cycle after the first 20 (a least-squares line: one reading is noisy)
        xs, ys = list(range(20, n + 1)), [rss[c] for c in range(20, n + 1)]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = round(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs), 4)
    return {
        "cycles": n, "cycles_asked": args.cycles, "max_steps": args.max_steps, "logging_steps": 1,
        "output_dir": "a new folder per cycle (runs/soak-NNN), as the page proposes one after each run",
        "seconds_per_cycle": round(sum(c["seconds"] for c in cycles) / max(n, 1), 1),
        "first_step_s_median": sorted(c["first_step_s"] for c in cycles)[n // 2] if n else None,
        "seconds_total": round(sum(c["seconds"] for c in cycles), 1),
        "rss_mb_after_cycle": marks,
        "rss_mb_200_minus_20": round(rss[200] - rss[20], 2) if 200 in rss and 20 in rss else None,
        "rss_mb_last_minus_20": round(rss[n] - rss[20], 2) if n >= 20 else None,
        "rss_mb_per_cycle_after_20": slope,
        "threads_after_cycle": {k: next(c["threads"] for c in cycles if c["cycle"] == int(k)) for k in marks},
        "fds_after_cycle": {k: next(c["fds"] for c in cycles if c["cycle"] == int(k)) for k in marks},
        "leftover_processes_summed": sum(len(c["left"]) for c in cycles),
        "busy_retries": sum(c["busy_retries"] for c in cycles),
        "failures": [{"cycle": c["cycle"], "why": c["error"]} for c in cycles if c.get("error")]
        + [{"cycle": c["cycle"], "why": f"ended {c['status']}"} for c in cycles if c.get("status") not in (None, "aborted")],
        "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }


def stop_runs(work: Path) -> None:
    """An interrupted soak: stop what still runs (the runner's own Abort), so nothing outlives the harness."""
    mgr = JobManager(index=work / "runs.json")
    for st in mgr.active():
        mgr.abort(st.run_dir)
    deadline = time.time() + 120
    while mgr.active() and time.time() < deadline:
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--max-steps", type=int, default=1000, help="long enough that Abort, not the end, stops each run")
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/soak.json"))
    ap.add_argument("--probe", help="run the server under tracemalloc (benchmarks/soak_probe.py) and write the "
                                    "figures with its dumps here (not to --json)")
    ap.add_argument("--probe-at", default="1,10", help="cycles after which the probe dumps (and after the last)")
    ap.add_argument("--keep", action="store_true", help="keep the temp workspace (runs, server.log)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop the run and write what ran
    work = Path(tempfile.mkdtemp(prefix="zb-soak-"))
    prepare_workspace(work)
    probe = work / "probe.jsonl" if args.probe else None
    dump_at = {int(c) for c in args.probe_at.split(",") if c} | {args.cycles}
    port = command.free_port()
    proc = start_server(work, port, probe)
    server = psutil.Process(proc.pid)
    busy_word = words.text("page.busy", "en")
    cycles: list[dict] = []
    dumps = {}
    try:
        page = Page(f"http://127.0.0.1:{port}")
        page.open()
        log(f"server pid {proc.pid}, {sample(server)['rss_mb']} MB; workspace {work}")
        for i in range(1, args.cycles + 1):
            try:
                row = cycle(page, work, i, args.max_steps, busy_word)
            except Exception as e:  # noqa: BLE001 - recorded and counted; the soak goes on
                row = {"status": None, "error": f"{type(e).__name__}: {e}", "seconds": 0.0, "first_step_s": 0.0,
                       "busy_retries": 0, "left": leftovers((work / f"runs/soak-{i:03d}").resolve())}
            row.update(cycle=i, **sample(server))
            cycles.append(row)
            log(f"cycle {i}: {row.get('status')} in {row['seconds']} s (first step {row['first_step_s']} s, "
                f"{row['busy_retries']} busy), left {row['left']}, RSS {row['rss_mb']} MB, threads {row['threads']}, "
                f"fds {row['fds']}" + (f"  ERROR {row['error']}" if row.get("error") else ""))
            if probe and i in dump_at:
                dumps[i] = probe_dump(proc, probe)
    finally:
        stop_runs(work)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        figures = summary(cycles, args)
        print(json.dumps(figures, indent=2))
        target = Path(args.probe or args.json)
        target.parent.mkdir(parents=True, exist_ok=True)
        body = {**figures, "probe": dumps} if probe else {**figures, "per_cycle": cycles}
        target.write_text(json.dumps(body, indent=2) + "\n")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if not figures["failures"] and not figures["leftover_processes_summed"] else 1


if __name__ == "__main__":
    sys.exit(main())
