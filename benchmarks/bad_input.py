"""How fast each bad input is refused: the test battery (``tests/bad_inputs.py``), timed through the command line
(``zeroboard validate``, in a fresh process as a user runs it) and through the page's Start (or Load arguments).

The goal: every refusal within 2 s, 0 tracebacks, nothing started.  The CLI time includes starting Python and
importing ZeroBoard (about 0.5 s here); the page time is the handler's alone, as the server spends it.

    python benchmarks/bad_input.py [--json benchmarks/results/bad_input.json] [--only TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "app"), str(ROOT / "tests")]
os.chdir(ROOT)
os.environ.setdefault("ZEROBOARD_ALLOW_PATHS", f"{Path(tempfile.gettempdir()).resolve()}:rw")  # its own work folders

from bad_inputs import CASES, fifos_opened  # noqa: E402
from zeroboard.job import spec  # noqa: E402
from zeroboard.runs import manager as runner  # noqa: E402
from zeroboard.webui import handlers  # noqa: E402


def one(name: str, field: str, build, work: Path) -> dict:
    t = work / f"case-{abs(hash(name)) % 10**8}"
    t.mkdir()
    shutil.copytree("cache/demo/model", t / "model")
    shutil.copytree("cache/demo/data", t / "data")
    index = t / "runs.json"
    saved = dict(os.environ)
    os.environ["ZEROBOARD_RUNS_INDEX"] = str(index)
    try:
        case = build(t)
        os.environ.update(case.env)
        sets = ({} if case.job_file else {"output_dir": str(t / "fresh"), "max_steps": "5"})
        sets |= {k: str(v) for k, v in case.overrides.items()}
        argv = [sys.executable, "-m", "zeroboard.cli", "validate", str(case.job_file or "examples/demo.yaml")]
        argv += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
        via = "--set"
        # over the kernel's limit for one argument, or a NUL byte (no argument can hold one): a user writes a file
        if any(len(a) > 100_000 or "\0" in a for a in argv):
            job = spec.load_yaml("examples/demo.yaml")
            for k, v in sets.items():
                setattr(job, k, v)
            (t / "job.yaml").write_text(spec.dump_yaml(job))
            argv, via = [sys.executable, "-m", "zeroboard.cli", "validate", str(t / "job.yaml")], "job file"
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": "app"})
        cli_s = time.perf_counter() - start
        start = time.perf_counter()
        if case.job_file is not None:
            loaded, message = handlers.load_args(str(case.job_file))
            page_ok = loaded is None and field in message
        else:
            values = {**handlers.spec_to_form(spec.load_yaml("examples/demo.yaml")), **sets}
            if "gpu_ids" not in case.overrides:  # no GPU: the page has no GPU picker (a case may type ids all the same)
                values.pop("gpu_ids")
            checked, state, _ = handlers.start(values, [], runner.JobManager(index=index))
            page_ok = state is None and field in checked.errors
        page_s = time.perf_counter() - start
        opened = fifos_opened()  # a FIFO opened before it was refused (the watch ends the wait, and tells)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"case": name, "field": field, "cli_via": via, "cli_s": round(cli_s, 3), "page_s": round(page_s, 4),
            # through a file, a value this large is refused with the file (over the size a job file may have)
            "cli_refused": done.returncode == 2 and any(f"  {f}:" in done.stderr
                                                       for f in ([field] if via == "--set" else [field, "file"])),
            "page_refused": page_ok and not opened, "traceback": "Traceback" in done.stderr + done.stdout}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="zb-bad-input-") as work:
        for name, field, build in CASES:
            if args.only and args.only not in name:
                continue
            rows.append(one(name, field, build, Path(work)))
            r = rows[-1]
            print(f"{r['cli_s']:6.2f} s  {r['page_s']:7.4f} s  {'ok ' if r['cli_refused'] and r['page_refused'] else 'BAD'}"
                  f"  {name}", flush=True)
    summary = {"cases": len(rows), "refused_cli": sum(r["cli_refused"] for r in rows),
               "refused_page": sum(r["page_refused"] for r in rows), "tracebacks": sum(r["traceback"] for r in rows),
               "max_cli_s": max(r["cli_s"] for r in rows), "max_page_s": max(r["page_s"] for r in rows),
               "over_2s": [r["case"] for r in rows if max(r["cli_s"], r["page_s"]) > 2.0],
               "over_10s": [r["case"] for r in rows if max(r["cli_s"], r["page_s"]) > 10.0],
               "load_average": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                         "summary": summary, "cases": rows}, indent=2) + "\n")
    ok = summary["refused_cli"] == summary["refused_page"] == len(rows) and not summary["tracebacks"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
