"""Documentation screenshots of the Train, Runs, Queue and Chat pages: ``python tools/screenshots.py [--out docs/images]
[--lang en,zh]`` (also ``make screenshots`` or ``zeroboard screenshots``; ``--help`` lists the options).

Starts its own web UI on the offline demo, in a workspace of its own (a temporary folder holding a copy of the
demo model and data, and its own runs index, so a user's runs are never touched and every path on the page is
one of that workspace: ``runs/stage-2-offload``, ``cache/ds_z2_offload_config.json``), drives it in headless
Chromium and writes, for each language, the images docs/*/train-page.md and runs-page.md show:

    train_{lang}.png            the Train page at rest (the form, down to the devices)
    stage_dropdown_{lang}.png   the DeepSpeed stage dropdown open: none / 2 / 3
    preview_offload_{lang}.png  stage 2 + offload, after Preview command: the command and the JSON
    running_{lang}.png          a demo run in progress: status, progress, charts, log, memory panel
    finished_{lang}.png         the same run finished, with the output check when the page has one
    runs_list_{lang}.png        the Runs tab: the demo run and the four runs of the course's comparison
    runs_compare_{lang}.png     the ZeRO lesson (examples/lesson_zero.yaml) under stage none, 2, 3 and 2 + offload,
                                compared: curves overlaid, memory and speed per setting, the fields that differ
    queue_{lang}.png            the Queue tab: a job waiting, and why, while the demo run holds the CPU processes
    chat_{lang}.png             the Chat tab: the demo run loaded, asked the chapter's first question, its answer

and, cut for the course chapter (each exactly one thing the chapter shows, for a course author to embed):

    chapter_controls_{lang}.png  the bottom controls: device count, processes, DeepSpeed stage, use offload
    chapter_stage_{lang}.png     the DeepSpeed stage dropdown open
    chapter_preview_{lang}.png   Preview command over the command, the DeepSpeed config path highlighted
    chapter_json_{lang}.png      the generated DeepSpeed JSON (stage 2 + offload)
    chapter_procs_{lang}.png     the processes per device while the run trains
    chapter_output_{lang}.png    the finished run's status and what it saved (the output kind)
    chapter_answer_{lang}.png    Reload and answer: the tuned and the base model's answers
    chapter_compare_{lang}.png   the lesson's job under stage none, 2, 3 and 2 + offload: peak per device, plan, speed

``chapter_text.json`` beside them holds the text each chapter image shows, read from the page as it was shot
(alt text for the images, and what the tests check).  The comparison each language's Runs tab showed is printed
(``compared (en): {...}``), with a warning where its measured peaks do not fall none > 2 > 3 as the chapter teaches.

One server serves every language: each language gets its own tab, switched by its address (``?lang=``).  The
viewport, scale, locale, time zone and fonts are fixed, each shot is cropped to its part of the page, the
preview names a fixed master port, and paths are the workspace's own, so reruns give the same pictures -- but
for live figures (times, tokens/s, memory in use, pids), which differ from run to run.  So an image is only
rewritten when it differs from the one already there by more than ``TOLERANCE`` (the share of pixels whose
colour changed by more than ``PIXEL_DELTA``; both in tools/shots_page.py, which drives the page): a second run
changes no image it does not have to.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server and wait helpers are the tests' own

from shots_page import Tab, Written, tolerance  # noqa: E402
from shots_tabs import lesson_problem, shoot_chat, shoot_queue, shoot_runs  # noqa: E402

from helpers import held, start_on_page, start_server, stop_jobs, stop_server, wait_until  # noqa: E402
from zeroboard import words  # noqa: E402
from zeroboard.job import presets  # noqa: E402
from zeroboard.job.command import free_port, port_is_free  # noqa: E402

SHOTS = ("train", "stage_dropdown", "preview_offload", "running", "finished", "runs_list", "runs_compare", "queue", "chat")
PREVIEW_PORT = 29500  # the master port the preview names (the first free one from here): not a random one
DEMO_RUN = "runs/stage-2-offload"  # the chapter's run: ZeRO-2 + offload, followed live
# the course's comparison: the ZeRO lesson's job (a model whose states outweigh the runtime, so the measured peaks
# fall none > 2 > 3 on two CPU processes) under its four settings, as docs/*/zero-stages.md trains it
LESSON_JOB = "examples/lesson_zero.yaml"
COMPARED = (("none", False), ("2", False), ("3", False), ("2", True))
BUSY_EXIT = 3  # zeroboard train: not started, another job holds the devices
BUSY_S = 900  # how long the tool waits for them
CHAPTER_TEXT = "chapter_text.json"
HOLD_S = 3600  # the demo run's stall_min_s: longer than the pause of its running shots
DRAWN_BY = "drawn_by.json"  # the Chromium version that drew the images (see write_drawn_by)
VIEWPORT = {"width": 1440, "height": 1000}
CHROMIUM = os.environ.get("ZEROBOARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--font-render-hinting=none"]
RUN_S = 420  # the demo run, start to finish
ANSWER_S = 300  # Reload and answer loads the trained model and generates

@dataclass
class Options:
    out: Path
    langs: list[str]
    # the running shots hold the run (held()) at a quarter of its steps, so it cannot end under them however busy
    # the machine: the length only sets the points on the charts (about 30) and the wait for the finished shots
    max_steps: int = 300
    chromium: str = CHROMIUM

    @property
    def logging_steps(self) -> int:
        return max(1, self.max_steps // 30)  # about 30 points on each chart


# --- the server ------------------------------------------------------------------------------------


def repo_root() -> Path:
    """Where the demo job and cache/ live: the checkout this tool sits in, else the current dir."""
    return ROOT if (ROOT / "examples" / "demo.yaml").is_file() else Path.cwd()


def make_workspace(work: Path) -> Path:
    """A workspace of the tool's own: the demo job and a copy of the demo model and data (the server builds them
    when the checkout has none yet); its runs go in its runs/, its presets in its cache/."""
    ws = work / "workspace"
    (ws / "examples").mkdir(parents=True)
    for job in ("examples/demo.yaml", LESSON_JOB):
        shutil.copy(repo_root() / job, ws / job)
    demo = repo_root() / "cache" / "demo"
    if (demo / "model" / "config.json").is_file() and (demo / "data" / "dataset_info.json").is_file():
        shutil.copytree(demo, ws / "cache" / "demo")  # the lesson's model too where it was built (else its first run builds it)
    return ws


def build_ops(ws: Path, log: Path) -> None:
    """DeepSpeed's ops the demo run loads, built (or found built) before the browser opens, as ``make run`` does:
    a first build takes minutes on 2 cores, longer beside two tabs drawing, and the running shot needs steps."""
    from zeroboard.training import ops

    argv = [sys.executable, "-m", "zeroboard.cli", "build-ops", "--device", "cpu"]
    for op in ops.needed("cpu", presets.preset("2", True)):
        argv += ["--op", op]
    with log.open("ab") as fh:
        code = subprocess.run(argv, cwd=ws, stdout=fh, stderr=fh).returncode
    if code:
        print(f"warning: zeroboard build-ops failed (see below); the demo run builds its ops itself\n{tail(log)}",
              file=sys.stderr)


def tail(path: Path, chars: int = 1500) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-chars:] if path.is_file() else f"({path} missing)"


def report(ws: Path, log: Path, tabs: list) -> str:
    """What the tool saw when it failed: each tab's status and step, the demo run's state and logs, the server's."""
    lines = []
    for t in tabs:
        try:
            lines.append(f"{t.lang} tab: status {t.status()!r}, step {t.step()}, "
                         f"progress {t.pg.locator('#zb-progress').inner_text(timeout=5000)!r}")
        except Exception as exc:  # the page itself may be what broke
            lines.append(f"{t.lang} tab: unreadable ({exc})")
    run = ws / DEMO_RUN
    state = json.loads((run / "state.json").read_text()) if (run / "state.json").is_file() else {}
    lines.append(f"{DEMO_RUN}: status {state.get('status')!r}, message {state.get('message')!r}, "
                 f"error {state.get('error')!r}")
    for name in ("train.log", "launcher.log", "supervisor.log"):
        lines.append(f"--- {DEMO_RUN}/{name} (end)\n{tail(run / name)}")
    lines.append(f"--- server log (end)\n{tail(log)}")
    return "\n".join(lines)


def server_env(index: Path) -> dict:
    """The launcher named by its bare name (torchrun found on PATH), as an installed ZeroBoard shows it."""
    return {"ZEROBOARD_RUNS_INDEX": str(index), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


# --- the shots -------------------------------------------------------------------------------------


def preview_port() -> int:
    port = PREVIEW_PORT
    while not port_is_free(port):
        port += 1
    return port


def shoot_form(tab: Tab, out: Path, port: int) -> None:
    """At rest, the stage dropdown open, then stage 2 + offload previewed (on a fixed master port)."""
    tab.open()
    tab.shoot(out, "train")
    tab.open_dropdown("deepspeed_stage")
    tab.shoot(out, "stage_dropdown")
    tab.shoot(out, "chapter_stage")
    tab.pick("deepspeed_stage", "2")
    tab.pg.locator("#zb-offload input[type=checkbox]").check()
    tab.pg.locator("#zb-offload input[type=checkbox]").blur()
    tab.shoot(out, "chapter_controls")
    more = tab.pg.locator("#zb-more-devices .label-wrap")
    more.click()  # the master port is one of the folded device options
    tab.fill("master_port", port)
    more.click()
    tab.pg.locator("#zb-preview").click()
    tab.pg.locator("#zb-command mark.zb-ds >> nth=0").wait_for()
    tab.pg.wait_for_function("() => document.querySelector('#zb-ds-json').innerText.includes('offload_optimizer')")
    tab.pg.mouse.move(0, 0)  # no hover colour on the button
    for name in ("preview_offload", "chapter_preview", "chapter_json"):
        tab.shoot(out, name)


def start_demo_run(tab: Tab, opts: Options, index: Path, ws: Path) -> None:
    """The chapter's demo run, ZeRO-2 + offload, with a loss point every few steps."""
    tab.open()
    tab.open_dropdown("deepspeed_stage")
    tab.pick("deepspeed_stage", "2")
    tab.pg.locator("#zb-offload input[type=checkbox]").check()
    tab.fill("output_dir", DEMO_RUN)
    tab.fill("max_steps", opts.max_steps)
    tab.fill("logging_steps", opts.logging_steps)
    tab.fill("stall_min_s", HOLD_S)  # held while the tabs shoot it (held()): not a stall
    start_on_page(tab.pg, index, ws / DEMO_RUN, lang=tab.lang)  # another workspace's job may hold the CPU a while
    tab.wait_status(lambda s: s in ("starting", "running", "finished", "failed"), 120)


def shoot_running(tabs: list[Tab], out: Path, opts: Options, index: Path, ws: Path) -> None:
    run_dir = ws / DEMO_RUN
    lead = tabs[0]
    enough = max(1, opts.max_steps // 4)  # some points on the charts, and time left to shoot every tab

    def progressed():
        if lead.status() in ("finished", "failed", "aborted", "lost"):
            raise RuntimeError(f"the demo run ended before the running shot: {lead.status()}\n"
                               f"{lead.pg.locator('#zb-final').inner_text()}")
        return all(t.step() >= enough for t in tabs)

    wait_until(progressed, RUN_S, f"step {enough} of the demo run")
    with held(run_dir):
        seen: list[tuple[int, ...]] = []

        def settled() -> bool:  # every tab at the last step the ranks logged, the same in each, two ticks running
            seen.append(tuple(t.step() for t in tabs))
            return len(seen) > 1 and seen[-1] == seen[-2] and len(set(seen[-1])) == 1

        wait_until(settled, 60, "every tab at the held run's last step", every=2)
        shoot_running_tabs(tabs, out)
        shoot_queue(tabs, out, index, ws, server_env(index))


def shoot_running_tabs(tabs: list[Tab], out: Path) -> None:
    for t in tabs:  # first, in every tab: the process table has its rows only while the run goes on
        t.pg.wait_for_function("() => Number(document.querySelector('#zb-procs [role=grid]')"
                               "?.getAttribute('aria-rowcount')) >= 3")  # the header and a row per rank
        t.shoot(out, "chapter_procs")
    for t in tabs:
        t.pg.wait_for_function("() => document.querySelector('#zb-log textarea').value.length > 0")
        t.pg.evaluate("() => { const a = document.querySelector('#zb-log textarea'); a.scrollTop = a.scrollHeight; }")
        t.shoot(out, "running")
        if t.status() != "running":
            print(f"warning: the run had ended when running_{t.lang}.png was taken: it shows the {t.status()} state; "
                  f"a larger --max-steps keeps it running longer", file=sys.stderr)


def shoot_finished(tabs: list[Tab], out: Path) -> None:
    for t in tabs:
        status = t.wait_status(lambda s: s in ("finished", "failed", "aborted", "lost"), RUN_S)
        if status != "finished":
            raise RuntimeError(f"the demo run {status}:\n{t.pg.locator('#zb-final').inner_text()}")
    for t in tabs:
        t.pg.locator("#zb-output-check").wait_for(state="visible")  # shown by the tick once the run has finished
        t.pg.wait_for_function("() => document.querySelector('#zb-saved textarea')?.value.length > 0")
        t.shoot(out, "chapter_output")
        reload_and_answer(t)
        t.shoot(out, "finished")
        t.shoot(out, "chapter_answer")


def reload_and_answer(t: Tab) -> None:
    """Click Reload and answer and wait for the answers (not the pending timer gradio shows in their place)."""
    t.pg.locator("#zb-reload-btn").click()

    def answered():
        text = t.pg.locator("#zb-answers .prose").first.inner_text().strip() if t.has("#zb-answers .prose") else ""
        message = t.pg.locator("#zb-output-message").inner_text() if t.has("#zb-output-message") else ""
        if "failed" in message.lower() or "失败" in message:
            raise RuntimeError(f"Reload and answer failed on the {t.lang} page: {message}")
        return text

    wait_until(answered, ANSWER_S, "the reloaded model's answers")


def run_compared(ws: Path, index: Path, log: Path) -> list[str]:
    """The course's comparison -- the lesson's job under stage none, 2, 3 and 2 + offload -- through ``zeroboard
    train``, one after another (one job at a time on the CPU processes). Returns their folders."""
    runs = []
    for stage, offload in COMPARED:
        out = f"runs/lesson-{stage}" + ("-offload" if offload else "")
        sets = [f"deepspeed_stage={stage}", f"offload={str(offload).lower()}", f"output_dir={out}"]
        argv = [sys.executable, "-m", "zeroboard.cli", "train", LESSON_JOB, *[a for s in sets for a in ("--set", s)]]
        deadline = time.time() + BUSY_S
        while True:
            with log.open("ab") as fh:
                done = subprocess.run(argv, cwd=ws, env={**os.environ, **server_env(index)}, stdout=fh, stderr=fh,
                                      timeout=RUN_S)
            if done.returncode != BUSY_EXIT or time.time() > deadline:
                break
            time.sleep(5)  # another job holds the CPU processes (another workspace's, on a shared machine)
        if done.returncode != 0:
            raise RuntimeError(f"the compared run {out} failed (exit {done.returncode}): see {log}\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
        runs.append(out)
    return runs


# --- the command -----------------------------------------------------------------------------------


def generate(opts: Options) -> Written:
    from playwright.sync_api import sync_playwright

    done = Written()
    with tempfile.TemporaryDirectory(prefix="zb-shots-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        ws = make_workspace(work)
        index, log = work / "runs.json", work / "server.log"
        port = free_port()
        build_ops(ws, log)
        server = start_server(port, index, log, ws, env=server_env(index))
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=opts.chromium, args=CHROMIUM_ARGS)
                done.browser = browser.version
                context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1, locale="en-US",
                                              timezone_id="UTC", reduced_motion="reduce")
                tabs = [Tab(context, f"http://127.0.0.1:{port}/", lang, done) for lang in opts.langs]
                try:
                    shoot_all(tabs, opts, index, ws, log)
                except BaseException:
                    print(report(ws, log, tabs), file=sys.stderr)  # while the tabs can still be read
                    raise
                browser.close()
            done.written.append(write_chapter_text(opts.out, tabs))
            if write_drawn_by(opts.out, done.browser):
                done.written.append(opts.out / DRAWN_BY)
        finally:
            stop_jobs(index)
            stop_server(server)
    return done


def shoot_all(tabs: list[Tab], opts: Options, index: Path, ws: Path, log: Path) -> None:
    master_port = preview_port()
    for t in tabs:
        shoot_form(t, opts.out, master_port)
    for t in tabs[1:]:
        t.open()  # ready before the run starts: a short run leaves no time for a page load
    start_demo_run(tabs[0], opts, index, ws)
    for t in tabs[1:]:
        t.follow(str((ws / DEMO_RUN).resolve()), DEMO_RUN)
    shoot_running(tabs, opts.out, opts, index, ws)
    shoot_finished(tabs, opts.out)
    shoot_chat(tabs, opts.out, index, DEMO_RUN, ANSWER_S)
    for t in tabs:  # nothing to shoot while the compared runs train: an open page's ticks take CPU they need
        t.pg.goto("about:blank")
    names = run_compared(ws, index, log)
    for t in tabs:
        t.open()  # the Runs tab's shots are of that tab alone: a fresh page shows them as the one left open did
        t.done.compared[t.lang] = shoot_runs(t, opts.out, names)


def write_chapter_text(out: Path, tabs: list[Tab]) -> Path:
    """The text each chapter image shows (of the images written now), merged into what the file held before."""
    path = out / CHAPTER_TEXT
    texts = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    for t in tabs:
        texts.update(t.texts)
    body = json.dumps(dict(sorted(texts.items())), ensure_ascii=False, indent=1) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != body:
        path.write_text(body, encoding="utf-8")
    return path


def write_drawn_by(out: Path, browser: str) -> bool:
    """Name the Chromium that drew the images (``DRAWN_BY``): another version draws text a pixel apart, so the
    tests compare their own run with these images only when their Chromium is this one. True when written."""
    path = out / DRAWN_BY
    body = json.dumps({"chromium": browser}) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == body:
        return False
    path.write_text(body, encoding="utf-8")
    return True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="docs/images", help="folder for the PNGs (default: docs/images)")
    p.add_argument("--lang", default=",".join(words.LANGS), help="languages, comma-separated (default: en,zh)")
    p.add_argument("--max-steps", type=int, default=Options.max_steps,
                   help=f"length of the demo run (default: {Options.max_steps})")
    p.add_argument("--chromium", default=CHROMIUM, help=f"Chromium to drive (default: {CHROMIUM}, or $ZEROBOARD_CHROMIUM)")


def run(args: argparse.Namespace) -> int:
    langs = [s.strip() for s in args.lang.split(",") if s.strip()]
    bad = [lang for lang in langs if lang not in words.LANGS]
    if bad or not langs:
        print(f"--lang: unknown {', '.join(bad) or '(none)'}; choose from {', '.join(words.LANGS)}", file=sys.stderr)
        return 2
    if not Path(args.chromium).is_file() or not os.access(args.chromium, os.X_OK):
        print(f"No Chromium at {args.chromium}: install it with `make chromium` (Debian's chromium and fonts-noto-cjk, "
              "for the Chinese pages), or pass --chromium PATH or set ZEROBOARD_CHROMIUM to one you have.", file=sys.stderr)
        return 2
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        print("Screenshots need playwright: `make screenshots` installs it (pip install -e '.[shots]'); it drives the "
              "Chromium above.", file=sys.stderr)
        return 2
    opts = Options(out=Path(args.out).resolve(), langs=langs, max_steps=args.max_steps, chromium=args.chromium)
    started = time.time()
    from PIL import Image

    done = generate(opts)
    for path in done.written:
        if path.suffix != ".png":
            print(f"wrote {path}")
            continue
        with Image.open(path) as im:
            size = f"{im.width}x{im.height}"
        print(f"wrote {path} ({size}, {path.stat().st_size // 1024} KiB; {done.why.get(path, 'new')})")
    for path, changed in done.kept:
        allowed = tolerance(path.stem.rsplit("_", 1)[0])
        print(f"unchanged {path} ({100 * changed:.2f}% of its pixels differ: live figures, within {100 * allowed:.0f}%)")
    for lang, shown in done.compared.items():  # the comparison the compare images show, as read from the page
        print(f"compared ({lang}): {json.dumps(shown, ensure_ascii=False)}")
        if problem := lesson_problem(shown, lang):
            print(f"warning: the {lang} comparison does not show the lesson: {problem}", file=sys.stderr)
    print(f"done in {time.time() - started:.0f} s: {len([p for p in done.written if p.suffix == '.png'])} images written, "
          f"{len(done.kept)} unchanged")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/screenshots.py", description=__doc__.splitlines()[0])
    add_arguments(p)
    # a stop (timeout, kill, a closed terminal) ends as Ctrl-C does: the tool's server and demo run are stopped too
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
