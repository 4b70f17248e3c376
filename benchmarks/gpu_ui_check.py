"""The web UI on a GPU machine, end to end: server, a real job, the GPU panel against nvidia-smi, abort.

1. Starts ``python -m zeroboard.cli webui`` in a fresh work dir; times the cold start (first HTTP 200),
   reads the server's RSS and checks it maps no libtorch and holds no GPU memory.
2. Starts a training job through zeroboard.runs.manager (what the Start button calls) with the server's
   runs index, so the server finds it as a fresh page would.
3. While the job trains, reads the GPU panel back over HTTP the way a browser does: a new gradio
   session runs the page-load handler (which picks the running job), then one timer tick; the tick's
   GPU table (used / total per GPU) and process table (pid, MiB per GPU) are compared with
   ``nvidia-smi --query-gpu`` and ``--query-compute-apps`` read right after.  The same NVML sample
   taken in this process (monitor.take_sample, what the tick renders) is recorded next to it.
4. Aborts through the page's Abort handler over HTTP (runner.JobManager.abort as a fallback), then
   checks that no process of the job is left and that the GPU gives its memory back (idle level
   measured before the job).
5. Stops the server; prints ``UI_CHECK {json}`` and writes the JSON to --out.

    python benchmarks/gpu_ui_check.py --model /tmp/zb-matrix/model-1b --data /tmp/zb-matrix/data-1024.json --out ui.json
    python benchmarks/gpu_ui_check.py --cpu --out /tmp/ui_cpu.json      # the demo model on CPU: no nvidia-smi checks
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

import psutil  # noqa: E402

from zeroboard import workspace  # noqa: E402
from zeroboard.data.demo import write_demo_data  # noqa: E402
from zeroboard.job import command, devices, record as events, spec as specmod  # noqa: E402
from zeroboard.runs import manager as runner, monitor, processes  # noqa: E402
from zeroboard.runs.launch import prepare_launch  # noqa: E402
from zeroboard.runs.state import GRACE_S, JobState  # noqa: E402

MiB = 1 << 20
USED_TOL_MIB = 512
GPU_HEADERS = ["GPU", "name", "used / total", "util"]
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


class Budget:
    """One deadline for the whole check: every wait takes the smaller of its own limit and what is left."""

    def __init__(self, seconds: float):
        self.end = time.time() + seconds

    def left(self, cap: float) -> float:
        return max(0.0, min(cap, self.end - time.time()))


# --- nvidia-smi ----------------------------------------------------------------------

def smi(*query: str, timeout: float = 15) -> list[list[str]]:
    out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode:
        raise RuntimeError(f"nvidia-smi {' '.join(query)}: {out.stderr.strip() or out.stdout.strip()}")
    return [[c.strip() for c in ln.split(",")] for ln in out.stdout.strip().splitlines() if ln.strip()]


def smi_view() -> dict:
    """Per-GPU used/total MiB and the compute processes per GPU, read back to back."""
    t = time.time()
    gpus = {int(i): {"uuid": u, "used_mib": int(used), "total_mib": int(total)}
            for i, u, used, total in smi("--query-gpu=index,uuid,memory.used,memory.total")}
    by_uuid = {g["uuid"]: i for i, g in gpus.items()}
    procs = []
    for row in smi("--query-compute-apps=gpu_uuid,pid,used_memory"):
        u, pid, mem = row[0], row[1], row[2]
        procs.append({"gpu": by_uuid.get(u, -1), "pid": int(pid), "mib": int(mem) if mem.isdigit() else None})
    return {"gpus": gpus, "procs": procs, "read_s": round(time.time() - t, 3)}


# --- the server ----------------------------------------------------------------------

def start_server(work: Path, port: int, env: dict, budget: Budget) -> tuple[subprocess.Popen, float]:
    logf = open(work / "server.log", "wb")  # noqa: SIM115 - the server writes into it until it stops
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "zeroboard.cli", "webui", "--port", str(port)], cwd=work, env=env,
                            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + budget.left(90)
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                if r.status == 200:
                    r.read()
                    return proc, time.perf_counter() - t
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the web server exited ({proc.returncode}):\n{tail(work / 'server.log')}")
        time.sleep(0.05)
    raise RuntimeError(f"the web server did not answer within the time limit:\n{tail(work / 'server.log')}")


def stop_server(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def server_facts(pid: int) -> dict:
    maps = Path(f"/proc/{pid}/maps").read_text()
    p = psutil.Process(pid)
    rss = p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
    return {"rss_mb": round(p.memory_info().rss / 1e6, 1), "rss_with_children_mb": round(rss / 1e6, 1),
            "libtorch_mapped": "libtorch" in maps, "libcudart_mapped": "libcudart" in maps,
            "libcuda_mapped": bool(re.search(r"/libcuda\.so", maps)), "libnvidia_ml_mapped": "libnvidia-ml" in maps,
            "children": [c.pid for c in p.children(recursive=True)]}


class Page:
    """The page's own handlers, called over HTTP with a session of our own (as a browser tab does)."""

    def __init__(self, base: str):
        self.base = base
        cfg = self._get("/config")
        self.prefix = cfg.get("api_prefix", "/gradio_api")
        comps = {c["id"]: c for c in cfg["components"]}
        elem = {c.get("props", {}).get("elem_id"): c["id"] for c in cfg["components"] if c.get("props", {}).get("elem_id")}
        self.ids = {"run": elem["zb-run"], "status": elem["zb-status"], "procs": elem["zb-procs"], "host": elem["zb-host"],
                    "abort": elem["zb-abort"], "final": elem.get("zb-final")}
        self.ids["gpus"] = next((i for i, c in comps.items() if c["type"] == "dataframe"
                                 and _headers(c.get("props", {})) == GPU_HEADERS), None)
        deps = cfg["dependencies"]
        timer = next(i for i, c in comps.items() if c["type"] == "timer")
        self.tick = next(d for d in deps if any(t[0] == timer for t in d["targets"]))
        self.load = next(d for d in deps if self.ids["run"] in d["outputs"] and any(t[1] == "load" for t in d["targets"]))
        self.abort_fn = next(d for d in deps if any(t[0] == self.ids["abort"] for t in d["targets"]))

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(self.base + path, timeout=20) as r:
            return json.loads(r.read())

    def call(self, dep: dict, data: list, session: str) -> dict:
        """POST /run/<api_name>: one direct call of the handler; State inputs come from the session."""
        body = json.dumps({"data": data, "session_hash": session, "fn_index": dep["id"]}).encode()
        req = urllib.request.Request(f"{self.base}{self.prefix}/run/{dep['api_name']}", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def open(self) -> str:
        """A new tab: its load handler picks the job (a running one first) into the session."""
        session = uuid.uuid4().hex[:11]
        self.call(self.load, [None] * len(self.load["inputs"]), session)
        return session

    def read(self) -> dict:
        """One tick of a freshly opened tab: status, GPU table, process table, host line."""
        session = self.open()
        t = time.time()
        out = self.call(self.tick, [None, None, "en"], session)
        values = dict(zip(self.tick["outputs"], out["data"]))
        status_html = values.get(self.ids["status"])
        m = re.search(r'data-status="(\w+)"', status_html or "")
        run = re.search(r"<code>(.*?)</code>", status_html or "")
        gpus = values.get(self.ids["gpus"]) if self.ids["gpus"] is not None else None
        procs = values.get(self.ids["procs"])
        return {"at": t, "status": m.group(1) if m else None, "run_dir": html.unescape(run.group(1)) if run else None,
                "gpu_rows": gpus.get("data") if isinstance(gpus, dict) else None,
                "proc_rows": procs.get("data") if isinstance(procs, dict) else None, "host": values.get(self.ids["host"])}

    def abort(self) -> str:
        session = self.open()
        out = self.call(self.abort_fn, [None] * len(self.abort_fn["inputs"]), session)
        return str(out["data"][0])


def _headers(props: dict) -> list | None:
    value = props.get("value")
    return props.get("headers") or (value.get("headers") if isinstance(value, dict) else None)


# --- the comparisons -----------------------------------------------------------------

def gib_pair(text: str) -> tuple[float, float]:
    m = re.match(r"\s*([\d.]+)\s*/\s*([\d.]+)\s*GiB", text)
    if not m:
        raise ValueError(f"unexpected used/total cell {text!r}")
    return float(m.group(1)) * 1024, float(m.group(2)) * 1024


def mib_cell(text) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*MiB", str(text))
    return float(m.group(1)) if m else None


def compare_gpu(panel: dict, nv: dict, job_pids: set[int], server_pid: int) -> dict:
    """The panel's used/total per GPU (0.1 GiB resolution) and (gpu, pid) set against nvidia-smi's."""
    problems = []
    gpus = []
    for row in panel["gpu_rows"] or []:
        idx, used, total = int(row[0]), *gib_pair(row[2])
        s = nv["gpus"].get(idx)
        if s is None:
            problems.append(f"GPU {idx} is in the panel but not in nvidia-smi")
            continue
        d_used, d_total = used - s["used_mib"], total - s["total_mib"]
        gpus.append({"gpu": idx, "panel_used_mib": round(used), "smi_used_mib": s["used_mib"], "panel_total_mib": round(total),
                     "smi_total_mib": s["total_mib"], "used_diff_mib": round(d_used)})
        if abs(d_used) > USED_TOL_MIB:
            problems.append(f"GPU {idx}: used {used:.0f} MiB in the panel vs {s['used_mib']} MiB in nvidia-smi")
        if abs(d_total) > 0.05 * 1024 + 1:
            problems.append(f"GPU {idx}: total {total:.0f} MiB in the panel vs {s['total_mib']} MiB in nvidia-smi")
    if len(gpus) != len(nv["gpus"]):
        problems.append(f"the panel lists {len(panel['gpu_rows'] or [])} GPU(s), nvidia-smi {len(nv['gpus'])}")
    ours = {(int(r[0]), int(r[1])): {"rank": r[2], "name": r[3], "mib": mib_cell(r[4])} for r in panel["proc_rows"] or []}
    theirs = {(p["gpu"], p["pid"]): p["mib"] for p in nv["procs"]}
    if set(ours) != set(theirs):
        problems.append(f"process sets differ: panel {sorted(ours)} vs nvidia-smi {sorted(theirs)}")
    mem = []
    for key in sorted(set(ours) & set(theirs)):
        a, b = ours[key]["mib"], theirs[key]
        mem.append({"gpu": key[0], "pid": key[1], "rank": ours[key]["rank"], "panel_mib": a, "smi_mib": b})
        if a is not None and b is not None and abs(a - b) > USED_TOL_MIB:
            problems.append(f"pid {key[1]} on GPU {key[0]}: {a:.0f} MiB in the panel vs {b} MiB in nvidia-smi")
    on_gpu = {pid for _, pid in theirs}
    if not job_pids & on_gpu:
        problems.append(f"no process of the job {sorted(job_pids)} is on a GPU per nvidia-smi {sorted(on_gpu)}")
    ranked = {pid for (_, pid), v in ours.items() if str(v["rank"]) != ""}
    if not ranked or not ranked <= job_pids:
        problems.append(f"the panel names ranks for pids {sorted(ranked)}; the job's processes are {sorted(job_pids)}")
    if server_pid in on_gpu:
        problems.append("the web server itself holds GPU memory")
    return {"agree": not problems, "problems": problems, "gpus": gpus, "procs": mem,
            "panel_pids": sorted(ours), "smi_pids": sorted(theirs)}


def placement(procs: list[dict], gpus: list[int]) -> dict:
    """Each rank's process on the GPU chosen for it: rank r on gpus[r] (nvidia-smi's numbering)."""
    where = {int(p["rank"]): p["gpu"] for p in procs if str(p["rank"]).strip().isdigit()}
    want = dict(enumerate(gpus))
    return {"ok": where == want, "rank_to_gpu": where, "chosen": want}


def compare_cpu(panel: dict, state: JobState) -> dict:
    """CPU: the panel's rank rows (pid, RSS) against the job's trainer processes seen through psutil."""
    trainers = monitor.rank_map(state)
    rows = {int(r[1]): {"rank": r[2], "mib": mib_cell(r[4])} for r in panel["proc_rows"] or []}
    problems = []
    if set(rows) != set(trainers):
        problems.append(f"panel pids {sorted(rows)} vs the job's trainers {sorted(trainers)}")
    procs = []
    for pid in sorted(set(rows) & set(trainers)):
        with contextlib.suppress(psutil.Error):
            rss = psutil.Process(pid).memory_info().rss / MiB
            procs.append({"pid": pid, "rank": rows[pid]["rank"], "panel_rss_mib": rows[pid]["mib"], "psutil_rss_mib": round(rss)})
            if rows[pid]["mib"] is None or abs(rows[pid]["mib"] - rss) > max(USED_TOL_MIB, 0.25 * rss):
                problems.append(f"pid {pid}: RSS {rows[pid]['mib']} MiB in the panel vs {rss:.0f} MiB now")
            if rows[pid]["rank"] != trainers[pid]:
                problems.append(f"pid {pid}: rank {rows[pid]['rank']} in the panel vs {trainers[pid]}")
    return {"agree": not problems, "problems": problems, "procs": procs}


def in_process_sample(state: JobState) -> dict:
    """What the tick renders, sampled here through the same code (exact bytes, no rounding)."""
    s = monitor.take_sample(state)
    return {"gpus": [{"gpu": g["index"], "used_mib": g["used_bytes"] // MiB, "total_mib": g["total_bytes"] // MiB}
                     for g in s.gpus],
            "procs": [{"gpu": p["gpu"], "pid": p["pid"], "rank": p["rank"], "mib": p["used_bytes"] // MiB} for p in s.gpu_procs],
            "ranks": [{"rank": r["rank"], "pid": r["pid"], "rss_mib": r["rss_bytes"] // MiB} for r in s.ranks]}


# --- the job -------------------------------------------------------------------------

def prepare_demo(a, work: Path, budget: Budget) -> dict:
    """work/cache/demo for the server, which builds the demo model at start when it is missing (a minute of CPU).

    The repo's cache/demo when it is there (carried); with --model, the server's default form may as well point
    at that model; otherwise (the demo is the job) it is built first, outside the cold-start figure.
    """
    link = work / "cache" / "demo"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists() or link.is_symlink():
        return {"source": "already in the work dir"}
    if (ROOT / specmod.DEMO_MODEL / "config.json").is_file():
        link.symlink_to(ROOT / "cache" / "demo")
        return {"source": "the repo's cache/demo", "built_s": 0.0}
    if a.model:
        (link / "model").parent.mkdir(parents=True)
        (link / "model").symlink_to(Path(a.model).resolve())
        write_demo_data(link / "data")
        return {"source": "no demo model here: the server's default form points at --model; nothing built"}
    built = build_demo(budget)
    link.symlink_to(ROOT / "cache" / "demo")
    return {"source": "built into the repo's cache/demo", "built_s": built}


def build_demo(budget: Budget) -> float:
    t = time.time()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "app"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "zeroboard.cli", "demo-model"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=budget.left(120))
    if done.returncode:
        raise RuntimeError(f"building the demo model failed:\n{done.stderr[-2000:]}")
    return round(time.time() - t, 1)


def make_job(a, work: Path) -> specmod.JobSpec:
    out = str(work / "runs" / "ui-check")
    kind = "cpu" if a.cpu else "cuda"
    if a.model:
        data = Path(a.data).resolve()
        return specmod.JobSpec(
            model_name_or_path=str(Path(a.model).resolve()), finetuning_type=a.finetuning, dataset_dir=str(data.parent),
            dataset=[str(data)], cutoff_len=a.seq or 1024, per_device_train_batch_size=a.batch or 8,
            learning_rate=1e-5, lr_scheduler_type="constant", max_steps=a.steps, logging_steps=1, precision="auto",
            output_dir=out, device_type=kind, num_processes=len(a.gpus), gpu_ids=[] if a.cpu else a.gpus,
            deepspeed_stage=a.stage)
    return specmod.JobSpec(
        model_name_or_path=str(ROOT / specmod.DEMO_MODEL), finetuning_type=a.finetuning,
        dataset_dir=str(ROOT / specmod.DEMO_DATA_DIR), dataset=["identity", "demo_alpaca"], cutoff_len=a.seq or 128,
        per_device_train_batch_size=a.batch or 8, max_steps=a.steps, logging_steps=1, output_dir=out, device_type=kind,
        num_processes=len(a.gpus), gpu_ids=[] if a.cpu else a.gpus, deepspeed_stage=a.stage)


def first_step(state: JobState, manager: runner.JobManager, budget: Budget, cap: float) -> tuple[JobState, int]:
    """Wait for the trainer's first logged step (the model is on the device and training)."""
    path = Path(state.run_dir) / events.EVENTS_FILE
    deadline = time.time() + budget.left(cap)
    while time.time() < deadline:
        st = manager.state(state.run_dir)
        if st is None or not st.active:
            raise RuntimeError(f"the job ended before its first step: {st and st.message}\n"
                               f"{tail(Path(state.run_dir) / events.LOG_FILE)}")
        logs = [e for e in events.read_events(path) if e.get("event") == "log" and e.get("time", 0) >= (st.started or 0)]
        if logs:
            return st, int(logs[-1].get("step", 0))
        time.sleep(0.5)
    raise RuntimeError(f"no training step within {cap:.0f} s:\n{tail(Path(state.run_dir) / events.LOG_FILE)}")


def job_pids(state: JobState) -> set[int]:
    return {p.pid for p in processes.job_processes(state)}


def pid_alive(pid: int, ctime: float | None) -> bool:
    try:
        p = psutil.Process(pid)
        if ctime is not None and abs(p.create_time() - ctime) > 0.05:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def summary(res: dict) -> dict:
    """The headline figures of ``res`` on one short line."""
    srv, ab = res.get("server", {}), res.get("abort", {})
    reads = [{"agree": r["compare"]["agree"], "gpus": r["compare"].get("gpus"), "panel_pids": r["compare"].get("panel_pids"),
              "smi_pids": r["compare"].get("smi_pids"), "procs": r["compare"].get("procs")} for r in res.get("reads", [])]
    return {"ok": res["ok"], "mode": res["mode"], "failures": res["failures"], "cold_start_s": res.get("cold_start_s"),
            "server_rss_mb": srv.get("rss_with_running_job_mb", srv.get("rss_mb")), "libtorch_in_server": srv.get("libtorch_mapped"),
            "first_step_s": res.get("job", {}).get("first_step_s"), "reads": reads, "abort_path": ab.get("path"),
            "abort_status": ab.get("status"), "abort_stopped_s": ab.get("stopped_s"), "left": ab.get("recorded_pids_alive"),
            "gpu_released": ab.get("gpu_released"), "gpu_release_s": ab.get("gpu_release_s"),
            "idle_used_mib": ab.get("idle_used_mib"), "used_after_mib": ab.get("used_after_mib"), "total_s": res.get("total_s")}


# --- main ----------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="write the JSON summary here")
    ap.add_argument("--cpu", action="store_true", help="train on CPU (no GPU comparisons): a dry run of the harness")
    ap.add_argument("--model", help="local model dir to train (default: the offline demo model)")
    ap.add_argument("--data", help="alpaca .json file for --model")
    ap.add_argument("--finetuning", default="full", choices=["full", "lora"])
    ap.add_argument("--steps", type=int, default=100000, help="max_steps: the job must still run when it is aborted")
    ap.add_argument("--seq", type=int, default=0, help="cutoff_len (default 1024 with --model, 128 for the demo)")
    ap.add_argument("--batch", type=int, default=0, help="micro-batch (default 8)")
    ap.add_argument("--gpus", default="0", help="the GPUs the job uses, in rank order: 1,0 puts rank 0 on GPU 1")
    ap.add_argument("--stage", default="none", choices=["none", "2", "3"], help="DeepSpeed stage of the job")
    ap.add_argument("--reads", type=int, default=3, help="panel vs nvidia-smi comparisons while the job trains")
    ap.add_argument("--budget", type=float, default=150, help="hard limit on the whole check, seconds")
    ap.add_argument("--workdir", help="work dir (default: a fresh temp dir, removed at the end)")
    a = ap.parse_args()
    if a.model and not a.data:
        ap.error("--model needs --data")
    a.gpus = [int(g) for g in a.gpus.split(",")]
    a.out = str(Path(a.out).resolve())  # the check changes into its work dir
    a.model, a.data = (str(Path(p).resolve()) if p else None for p in (a.model, a.data))

    budget = Budget(a.budget)
    gpu = not a.cpu
    work = Path(a.workdir or tempfile.mkdtemp(prefix="zb-ui-check-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    workspace.allow([f"{work}:rw", f"{ROOT}:ro"])  # its own folder (the workspace of its server) and the demo in the checkout
    index = work / "cache" / "webui" / "runs.json"
    os.environ["ZEROBOARD_RUNS_INDEX"] = str(index)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "app"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "ZEROBOARD_LANG": "en", "GRADIO_ANALYTICS_ENABLED": "False"}
    res: dict = {"ok": False, "mode": "gpu" if gpu else "cpu", "work_dir": str(work), "failures": [],
                 "panel_path": "http: /gradio_api/run/<page-load handler> then /gradio_api/run/<timer tick>, one fresh session "
                               "per read (what a newly opened browser tab receives)"}
    fail = res["failures"].append
    server: subprocess.Popen | None = None
    manager = runner.JobManager(index=index)
    state: JobState | None = None
    try:
        if gpu and not devices.detect_gpus():
            raise RuntimeError("no GPU through NVML; use --cpu for a dry run")
        res["python"] = sys.version.split()[0]
        with contextlib.suppress(Exception):
            res["gradio"] = importlib.metadata.version("gradio")  # the server's; this process never imports it
        res["demo_model"] = prepare_demo(a, work, budget)

        # 1. the server
        port = command.free_port()
        log(f"starting the web server on port {port} in {work}")
        server, cold = start_server(work, port, env, budget)
        res["cold_start_s"] = round(cold, 2)
        res["server"] = {"pid": server.pid, "port": port, **server_facts(server.pid)}
        log(f"served in {cold:.2f} s; {res['server']}")
        if res["server"]["libtorch_mapped"]:
            fail("the web server maps libtorch")
        page = Page(f"http://127.0.0.1:{port}")
        res["page"] = {"gpu_table": page.ids["gpus"] is not None, "tick_api": page.tick["api_name"],
                       "load_api": page.load["api_name"], "abort_api": page.abort_fn["api_name"]}
        if gpu and page.ids["gpus"] is None:
            fail("the page has no GPU table on a GPU machine")
        idle = smi_view() if gpu else None
        res["idle"] = idle
        if gpu:
            log(f"idle GPUs {a.gpus}: {[idle['gpus'][g]['used_mib'] for g in a.gpus]} MiB used, processes {idle['procs']}")

        # 2. the job, through the runner the Start button uses
        os.chdir(work)  # the command's cwd, as the server's Start would have it
        job = make_job(a, work)
        prepared = prepare_launch(job)
        if prepared.command is None:
            raise RuntimeError(f"the job does not validate: {prepared.report.errors}")
        res["job"] = {"argv": prepared.command.shell(), "model": job.model_name_or_path, "device_kind": prepared.command.device_kind,
                      "devices": prepared.command.devices, "max_steps": job.max_steps}
        t = time.time()
        state = manager.start(prepared)
        res["job"]["start_call_s"] = round(time.time() - t, 2)
        res["job"]["launcher_pid"] = state.launcher_pid
        log(f"job started: {state.run_dir} launcher pid {state.launcher_pid} ({state.status})")
        state, step = first_step(state, manager, budget, 120)
        res["job"]["first_step_s"] = round(time.time() - t, 1)
        log(f"first logged step {step} after {time.time() - t:.1f} s")

        # 3. the panel while it trains
        reads = []
        seen_pids: dict[int, float | None] = {}
        for i in range(a.reads):
            if budget.left(60) < 45:
                fail(f"stopped after {i} reads: the time budget is nearly spent")
                break
            st = manager.state(state.run_dir)
            pids = job_pids(st)
            for pid in pids:
                with contextlib.suppress(psutil.Error):
                    seen_pids[pid] = psutil.Process(pid).create_time()
            panel = page.read()
            nv = smi_view() if gpu else None
            here = in_process_sample(st)
            row = {"panel_status": panel["status"], "panel_run_dir": panel["run_dir"], "panel_gpu_rows": panel["gpu_rows"],
                   "panel_proc_rows": panel["proc_rows"], "panel_host": panel["host"], "job_pids": sorted(pids),
                   "in_process_sample": here}
            if panel["status"] not in ("running", "starting") or panel["run_dir"] != st.run_dir:
                fail(f"read {i}: a fresh page shows {panel['status']} {panel['run_dir']}, not the running job {st.run_dir}")
            if gpu:
                row["nvidia_smi"] = nv
                row["compare"] = compare_gpu(panel, nv, pids, server.pid)
                row["placement"] = placement(row["compare"]["procs"], a.gpus)
                if not row["placement"]["ok"]:
                    fail(f"read {i}: ranks not on the GPUs chosen: {row['placement']}")
                row["smi_s_after_panel"] = round(time.time() - panel["at"], 2)
            else:
                row["nvidia_smi"] = "skipped: --cpu (no GPU)"
                row["compare"] = compare_cpu(panel, st)
            if not row["compare"]["agree"]:
                fail(f"read {i}: " + "; ".join(row["compare"]["problems"]))
            log(f"read {i}: agree={row['compare']['agree']} {row['compare'].get('gpus') or row['compare'].get('procs')}")
            reads.append(row)
            time.sleep(2)
        res["reads"] = reads
        res["server"].update({"rss_with_running_job_mb": server_facts(server.pid)["rss_mb"]})
        if gpu and server.pid in {p["pid"] for p in smi_view()["procs"]}:
            fail("the web server holds GPU memory")

        # 4. abort through the page's Abort handler
        st = manager.state(state.run_dir)
        for r in [{"pid": st.launcher_pid, "ctime": st.launcher_ctime}, {"pid": st.supervisor_pid, "ctime": st.supervisor_ctime},
                  *st.ranks]:
            if r.get("pid"):
                seen_pids.setdefault(r["pid"], r.get("ctime"))
        t_abort = time.time()
        try:
            msg = page.abort()
            res["abort"] = {"path": "http: the page's Abort handler (" + page.abort_fn["api_name"] + ")", "message": msg}
        except (OSError, ValueError, KeyError) as e:
            manager.abort(state.run_dir)
            res["abort"] = {"path": f"runner.JobManager.abort (HTTP abort failed: {e})"}
        log(f"abort asked: {res['abort']}")
        deadline = time.time() + budget.left(GRACE_S + 20)
        while (st := manager.state(state.run_dir)) is not None and st.active and time.time() < deadline:
            time.sleep(0.2)
        res["abort"].update(status=st.status, message_after=st.message, stopped_s=round(time.time() - t_abort, 2),
                            leftover=st.leftover, stop_log=st.stop_log, exit_code=st.exit_code)
        if st.status != "aborted":
            fail(f"after abort the job is {st.status}: {st.message}")
        deadline = time.time() + budget.left(10)  # the supervisor writes the final state, then exits
        while True:
            left_runner = sorted(p.pid for p in processes.job_processes(st))
            left_any = sorted(pid for pid, ct in seen_pids.items() if pid_alive(pid, ct))
            if not (left_runner or left_any) or time.time() >= deadline:
                break
            time.sleep(0.1)
        res["abort"]["all_gone_s"] = round(time.time() - t_abort, 2)
        res["abort"].update(job_processes_left=left_runner, recorded_pids=sorted(seen_pids), recorded_pids_alive=left_any)
        if left_runner or left_any:
            fail(f"processes of the job left after abort: {left_runner or left_any}")
        if gpu:
            idle_used = {g: idle["gpus"][g]["used_mib"] for g in a.gpus}
            deadline = time.time() + budget.left(30)
            while True:
                nv = smi_view()
                held = [p for p in nv["procs"] if p["pid"] in seen_pids]
                used = {g: nv["gpus"][g]["used_mib"] for g in a.gpus}
                released = not held and all(used[g] <= idle_used[g] + USED_TOL_MIB for g in a.gpus)
                if released or time.time() >= deadline:
                    break
                time.sleep(0.5)
            res["abort"].update(gpu_released=released, gpu_release_s=round(time.time() - t_abort, 2), idle_used_mib=idle_used,
                                used_after_mib=used, job_pids_on_gpu_after=held, gpu_procs_after=nv["procs"])
            if not released:
                fail(f"GPUs {a.gpus} after abort: {used} MiB used (idle {idle_used}), job processes on them {held}")
        else:
            res["abort"]["gpu_released"] = "skipped: --cpu (no GPU)"
        after = page.read()
        res["abort"]["panel_after"] = {"status": after["status"], "proc_rows": after["proc_rows"], "gpu_rows": after["gpu_rows"]}
        if after["status"] != "aborted":
            fail(f"a fresh page shows {after['status']} after the abort")
        if {int(r[1]) for r in after["proc_rows"] or []} & set(seen_pids):
            fail("the panel still lists a process of the job after the abort")
        log(f"abort done: {st.status} in {res['abort']['stopped_s']} s; left {left_runner or left_any or 'none'}")
    except Exception as e:  # record what went wrong; the finally below still cleans up
        fail(f"{type(e).__name__}: {e}")
    finally:
        if state is not None and (st2 := manager.state(state.run_dir)) is not None and st2.active:
            manager.abort(state.run_dir)
            for _ in range(200):
                if not (st2 := manager.state(state.run_dir)) or not st2.active:
                    break
                time.sleep(0.2)
        if server is not None:
            res.setdefault("server", {})["exit_code"] = stop_server(server)
            res["server"]["log_tail"] = tail(work / "server.log", 8)
        os.chdir(ROOT)
        if not a.workdir and state is not None and not res["failures"]:
            shutil.rmtree(work, ignore_errors=True)
    res["ok"] = not res["failures"]
    res["total_s"] = round(time.time() - T0, 1)
    line = json.dumps(res, default=str)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2, default=str) + "\n")
    print("SUMMARY " + json.dumps(summary(res), default=str), flush=True)
    print("UI_CHECK " + line, flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
