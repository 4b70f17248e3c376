"""The Runs tab with 150 runs in the index: how fast it answers, and the web server's memory.

Writes 150 ended runs directly (``tests/helpers.synthetic_run``: a run folder as ZeroBoard leaves one, with its
job, plan, events and log; nothing is trained), starts ``zeroboard webui`` on that index, and in headless
Chromium measures, each on a fresh page:

- open: a click on the Runs tab -> the table's rows and the count (all 150 runs) on screen, target <= 1 s;
  timed in the page (the click event's time to the first frame showing them); ``open_wall_s`` is the same from
  this process, Playwright's round trips included
- next page, a filter, Compare of four runs: the click -> the new rows / the course table drawn
- the listing itself in this process (``runs.summary.summaries``): cold (files read) and warm (cached)
- the server's RSS after all that, target <= 250 MB

    python benchmarks/runs_page.py [--runs 150] [--opens 5] [--json benchmarks/results/runs_page.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic runs and the server helpers are the tests' own

import psutil  # noqa: E402

from helpers import chromium, start_server, stop_server, synthetic_run  # noqa: E402
from zeroboard.job import command  # noqa: E402
from zeroboard.runs import summary  # noqa: E402
from zeroboard.runs.manager import JobManager  # noqa: E402

SETTINGS = (("none", False), ("2", False), ("3", False), ("2", True), ("3", True))


def write_runs(base: Path, index: Path, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        stage, offload = SETTINGS[i % len(SETTINGS)]
        synthetic_run(base / f"run-{i:03d}", index, steps=200, every=5, seed=i, deepspeed_stage=stage, offload=offload,
                      learning_rate=[0.005, 0.001, 0.0005][i % 3], started=time.time() - 3600 * (n - i))
    return time.perf_counter() - t0


# the click's time as the page's event saw it, then the first frame where the rows and the count are on screen
ON_CLICK = """() => { window.zbClickAt = null;
  document.querySelector('#zb-tab-runs-button').addEventListener('click', e => { window.zbClickAt = e.timeStamp; },
                                                                 {capture: true, once: true}); }"""
SHOWN_AFTER_CLICK = """({n, rows}) => new Promise((resolve, reject) => {
  const shown = eval(rows), t0 = performance.now();
  const frame = () => {
    if (window.zbClickAt !== null && shown(n)) return resolve(performance.now() - window.zbClickAt);
    if (performance.now() - t0 > 60000) return reject(new Error('the rows never showed'));
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
})"""


def timed_click(pg, selector: str, done: str, arg=None) -> float:
    t0 = time.perf_counter()
    pg.locator(selector).click()
    pg.wait_for_function(done, arg=arg, polling=10, timeout=60_000)
    return time.perf_counter() - t0


def open_runs_tab(browser, url: str, n: int) -> dict:
    """One fresh page: the Runs tab opened, then the next page, a filter, four runs compared."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US")
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    pg.goto(url)
    pg.wait_for_selector("body[data-zb-loaded='1']", state="attached")
    # the rows and the count on screen (the tab is laid out with the page: they exist before, hidden)
    rows = """(n) => { const r = document.querySelector('#zb-runs-table .virtual-row'),
                             c = document.querySelector('#zb-runs-count');
                       return !!r && r.getBoundingClientRect().height > 0 && !!c && c.getBoundingClientRect().height > 0
                              && new RegExp('of ' + n + ' runs').test(c.innerText); }"""
    # the tab shows the rows the page was opened with at once, and reads the list again meanwhile: that read is let
    # finish before the next click (a Next clicked while it is in flight is answered, then overwritten by it)
    # open: measured in the page, from the click event to the frame that shows the rows (what a reader waits for);
    # the click is a real mouse click at the tab's place, and Playwright's own wall time around it is kept beside
    button = pg.locator("#zb-tab-runs-button")
    button.wait_for()
    box = button.bounding_box()
    pg.evaluate(ON_CLICK)
    with pg.expect_response(lambda r: r.request.method == "POST" and "/run/" in r.url, timeout=60_000):
        t0 = time.perf_counter()
        pg.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        in_page = pg.evaluate(SHOWN_AFTER_CLICK, {"n": n, "rows": rows})
        out = {"open_s": in_page / 1000, "open_wall_s": time.perf_counter() - t0}
    out["next_page_s"] = timed_click(pg, "#zb-runs-next", "() => /page 2 of/.test(document.querySelector('#zb-runs-count')"
                                                          "?.innerText || '')")
    box = pg.locator("#zb-runs-filter textarea, #zb-runs-filter input").first
    box.fill("offload")
    t0 = time.perf_counter()
    box.press("Enter")
    pg.wait_for_function("() => /^\\d+ of/.test(document.querySelector('#zb-runs-count')?.innerText || '') && "
                         "!/^150 of/.test(document.querySelector('#zb-runs-count').innerText)", polling=10, timeout=60_000)
    out["filter_s"] = time.perf_counter() - t0
    for i in range(4):
        pg.locator("#zb-runs-table .virtual-row").nth(i).locator("[role=gridcell]").first.click()
        pg.wait_for_function("(k) => document.querySelectorAll('#zb-runs-selected .token').length >= k", arg=i + 1)
    out["compare_s"] = timed_click(pg, "#zb-runs-compare", "() => !!document.querySelector('#zb-runs-course table')")
    context.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=150)
    ap.add_argument("--opens", type=int, default=5, help="fresh pages, each opening the Runs tab once")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zb-runs-bench-") as tmp:
        base = Path(tmp)
        os.environ["ZEROBOARD_ALLOW_PATHS"] = f"{base.resolve()}:rw"  # the runs live outside the workspace
        index = base / "runs.json"
        written = write_runs(base / "runs", index, args.runs)
        mgr = JobManager(index=index)
        cache = summary.FileCache()
        t0 = time.perf_counter()
        assert len(summary.summaries(mgr, cache)) == args.runs
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        summary.summaries(mgr, cache)
        warm = time.perf_counter() - t0

        port = command.free_port()
        server = start_server(port, index, base / "server.log")
        try:
            with chromium() as browser:
                pages = [open_runs_tab(browser, f"http://127.0.0.1:{port}/?lang=en", args.runs) for _ in range(args.opens)]
            proc = psutil.Process(server.pid)
            rss = proc.memory_info().rss / 2**20
        finally:
            stop_server(server)
    median = {k: statistics.median(p[k] for p in pages) for k in pages[0]}
    worst = {k: max(p[k] for p in pages) for k in pages[0]}
    result = {"runs": args.runs, "opens": args.opens, "load_avg": os.getloadavg(), "write_runs_s": round(written, 2),
              "listing_cold_s": round(cold, 3), "listing_warm_s": round(warm, 3),
              "median_s": {k: round(v, 3) for k, v in median.items()}, "worst_s": {k: round(v, 3) for k, v in worst.items()},
              "server_rss_mb": round(rss, 1), "targets": {"open_s": 1.0, "server_rss_mb": 250}}
    print(f"{args.runs} runs: listing in this process {cold * 1000:.0f} ms cold, {warm * 1000:.0f} ms warm")
    for k in median:
        print(f"{k:12s} median {median[k]:.2f} s, worst {worst[k]:.2f} s" + ("   target <= 1 s" if k == "open_s" else ""))
    print(f"web server RSS: {rss:.0f} MB   target <= 250 MB   (load average {result['load_avg'][0]:.1f})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if median["open_s"] <= 1.0 and rss <= 250 else 1


if __name__ == "__main__":
    sys.exit(main())
