"""The first run of a new user, measured: a fresh clone, ``make run``, then 开始 on a ZeRO-2 + offload demo.

Prints:
- ``make run`` on a fresh clone (new venv, pip without its cache, an empty torch extension folder) until the
  web UI serves its page, with its two parts: the install, and ``zeroboard build-ops`` (target <= 6 min in all);
- 开始 on the page (stage 2, 使用 offload, the demo) -> the first logged step shown on it (target <= 60 s),
  and whether the page ever showed a compile phase (it should not after ``make run``).

    python benchmarks/first_run.py [--json benchmarks/results/first_run.json]

Needs network access to the package index (as a new user has), g++ and Chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("ZEROBOARD_CHROMIUM", "/usr/bin/chromium")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_run(clone: Path, port: int, env: dict, log: Path) -> tuple[subprocess.Popen, dict]:
    """``make run`` until the page is served; the seconds of the whole and of its parts (from its output)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(["make", "run", f"WEBUI_ARGS=--port {port}"], cwd=clone, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    marks: dict[str, float] = {}
    while True:
        text = log.read_text(errors="replace")
        if "building DeepSpeed ops" in text and "install_s" not in marks:
            marks["install_s"] = time.perf_counter() - t0
        if re.search(r"DeepSpeed ops ready|did not build", text) and "build_ops_done_s" not in marks:
            marks["build_ops_done_s"] = time.perf_counter() - t0
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                if r.status == 200:
                    marks["make_run_s"] = time.perf_counter() - t0
                    break
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"make run exited ({proc.returncode}):\n{text[-3000:]}") from None
        time.sleep(0.2)
    marks["build_ops_s"] = marks.get("build_ops_done_s", 0) - marks.get("install_s", 0)
    return proc, {k: round(v, 1) for k, v in marks.items()}


def first_step(url: str) -> dict:
    """开始 on the stage-2 + offload demo; seconds until the page shows a logged step; the phases it showed."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(30_000)
        pg.goto(url + "?lang=zh")
        pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
        pg.locator("#zb-deepspeed_stage input").click()
        pg.get_by_role("option", name="2", exact=True).click()
        pg.locator("#zb-offload input[type=checkbox]").check()
        t0 = time.perf_counter()
        pg.locator("#zb-start").click()
        phases, first = [], None
        while time.perf_counter() - t0 < 900:
            bar = pg.locator("#zb-progress .zb-progress")
            if bar.count():
                phase = bar.get_attribute("data-phase")
                if not phases or phases[-1][0] != phase:
                    phases.append((phase, round(time.perf_counter() - t0, 1), bar.inner_text()))
                if int(bar.get_attribute("data-step") or 0) > 0:
                    first = time.perf_counter() - t0
                    break
            time.sleep(0.1)
        status = ""
        while time.perf_counter() - t0 < 900 and status not in ("finished", "failed", "aborted"):
            status = pg.locator("#zb-status .zb-status").get_attribute("data-status") or ""
            time.sleep(0.5)
        browser.close()
    return {"first_step_s": None if first is None else round(first, 1), "phases": phases, "status": status}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--keep", help="clone into this folder and keep it (default: a temporary one)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="zb-first-run-") as tmp_name:
        tmp = Path(args.keep or tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        clone = tmp / "zeroboard"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                                text=True).stdout.strip()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "ZEROBOARD_"))}
        env.update(TORCH_EXTENSIONS_DIR=str(tmp / "torch_extensions"), PIP_NO_CACHE_DIR="1",
                   PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p))
        port = free_port()
        proc, marks = make_run(clone, port, env, tmp / "make_run.log")
        try:
            run = first_step(f"http://127.0.0.1:{port}/")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)

    figures = {"commit": commit, "cpus": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
               **marks, **run}
    print(f"make run on a fresh clone, until the page is served: {marks['make_run_s']:.0f} s   target <= 360 s")
    print(f"  install {marks.get('install_s', 0):.0f} s, zeroboard build-ops {marks['build_ops_s']:.0f} s")
    shown = run["first_step_s"]
    print(f"开始 (ZeRO-2 + offload demo) -> first logged step on the page: "
          f"{'never' if shown is None else f'{shown:.1f} s'}   target <= 60 s; the run {run['status']}")
    print("  phases on the page: " + "; ".join(f"{p} at {s} s" for p, s, _ in run["phases"]))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
    return 0 if shown is not None and run["status"] == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
