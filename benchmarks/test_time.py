"""Where the test suite's time goes: every test's setup, call and teardown, per test and per file, from one run.

Runs pytest (the arguments after ``--``, default: what ``make test`` runs) with a small plugin that records each
report's phases, then keeps the figures under a label in a results file, beside the other labels' (``before`` and
``after`` a change: one file holds both):

    python benchmarks/test_time.py --label after [--json benchmarks/results/test_time.json] [-- PYTEST ARGS]

Per test: ``setup``, ``call``, ``teardown`` and ``wall`` (their sum) in seconds, and its outcome.  Per file: the
sums, and ``tests``.  For the run: pytest's own wall time, the machine's load average before and after, the 25
slowest tests, and how busy the processors were (``cores``: the share of the cores' time spent working, from
/proc/stat, and the core-seconds left idle: time a third worker could have used, where the tests wait rather than
compute).  The figures are what this machine measured while it ran; a busy machine makes every one longer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["-n", "auto", "--dist", "loadgroup", "--no-loadscope-reorder", "-q", "-p", "no:cacheprovider"]  # make test's
PLUGIN_ENV = "ZEROBOARD_TEST_TIMES"  # where the plugin writes its records (a JSON-lines file)


def cpu_model() -> str:
    """The processor's name and its widest vector unit: machines of one kind differ in speed, so a run's figures say
    which processor they came from."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "")
    return f"{name}, {'avx512' if ' avx512f' in info else 'avx2' if ' avx2' in info else 'no avx2'}"


def cpu_times() -> tuple[float, float] | None:
    """(busy, idle) seconds of all cores since boot, from /proc/stat (None where there is none)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and waiting for I/O
    return (sum(fields[:8]) - idle) / tick, idle / tick


def cpu_share(before, after) -> dict:
    if not before or not after:
        return {}
    busy, idle = after[0] - before[0], after[1] - before[1]
    return {"busy_share": round(busy / max(busy + idle, 1e-9), 3), "idle_core_s": round(idle, 1)}


# --- the plugin (loaded into pytest with -p test_time) ---------------------------------------------------------------

def pytest_runtest_logreport(report) -> None:
    """Every phase of every test, as pytest (or xdist's controller) reports it."""
    path = os.environ.get(PLUGIN_ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):  # xdist's workers report to the controller, which writes
        return
    line = {"test": report.nodeid, "phase": report.when, "seconds": report.duration, "outcome": report.outcome}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


# --- the run and the results file ------------------------------------------------------------------------------------

def summarize(lines: list[dict]) -> dict:
    tests: dict[str, dict] = {}
    for r in lines:
        t = tests.setdefault(r["test"], {"setup": 0.0, "call": 0.0, "teardown": 0.0, "outcome": "passed"})
        t[r["phase"]] += r["seconds"]
        if r["outcome"] != "passed" and (r["phase"] == "call" or r["outcome"] == "failed"):
            t["outcome"] = r["outcome"]
    for t in tests.values():
        t["wall"] = round(t["setup"] + t["call"] + t["teardown"], 3)
        for k in ("setup", "call", "teardown"):
            t[k] = round(t[k], 3)
    files: dict[str, dict] = {}
    for name, t in tests.items():
        f = files.setdefault(name.split("::")[0], {"tests": 0, "setup": 0.0, "call": 0.0, "teardown": 0.0, "wall": 0.0})
        f["tests"] += 1
        for k in ("setup", "call", "teardown", "wall"):
            f[k] = round(f[k] + t[k], 3)
    slowest = sorted(tests, key=lambda n: -tests[n]["wall"])[:25]
    outcomes: dict[str, int] = {}
    for t in tests.values():
        outcomes[t["outcome"]] = outcomes.get(t["outcome"], 0) + 1
    return {"outcomes": outcomes, "slowest": [[n, tests[n]["wall"]] for n in slowest],
            "files": dict(sorted(files.items(), key=lambda kv: -kv[1]["wall"])), "tests": tests}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True, help="before, after, ...: the key the figures are kept under")
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/test_time.json"))
    ap.add_argument("--note", default="", help="what else ran on the machine, which commit")
    ap.add_argument("pytest", nargs="*", help="pytest's arguments (after --)")
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        records = Path(fh.name)
    env = {**os.environ, PLUGIN_ENV: str(records),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")) if p)}
    argv = [sys.executable, "-m", "pytest", "-p", "test_time", *(args.pytest or DEFAULT)]
    load_before, cpu_before = os.getloadavg(), cpu_times()
    start = time.time()
    done = subprocess.run(argv, cwd=ROOT, env=env)
    wall = time.time() - start
    lines = [json.loads(x) for x in records.read_text(encoding="utf-8").splitlines() if x.strip()]
    records.unlink()
    out = Path(args.json)
    kept = json.loads(out.read_text()) if out.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))  # tests/conftest.py orders by the newest label's
    kept[args.label] = {"pytest_wall_s": round(wall, 1), "exit_code": done.returncode, "argv": argv[3:], "commit": commit,
                        "when": when,
                        "machine": {"cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
                                    "load_before": [round(x, 2) for x in load_before],
                                    "load_after": [round(x, 2) for x in os.getloadavg()],
                                    "cores": cpu_share(cpu_before, cpu_times())},
                        "note": args.note, **summarize(lines)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(kept, indent=1, ensure_ascii=False) + "\n")
    s = kept[args.label]
    print(f"{args.label}: pytest {s['pytest_wall_s']} s, {s['outcomes']}, exit {done.returncode}, "
          f"cores {s['machine']['cores']}; 10 slowest:")
    for name, secs in s["slowest"][:10]:
        print(f"  {secs:8.1f} s  {name}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
