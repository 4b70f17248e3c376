"""The ZeroBoard web app: ``build_app()`` lays out the registered pages as tabs, ``serve()`` runs it (``zeroboard webui``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gradio as gr

from .. import words, workspace
from ..job import devices, folders, spec
from ..job.spec import DEMO_MODEL
from ..runs.manager import JobManager
from . import chat_page, first_paint, pages, queue_page, runs_page, sessions, train_page  # noqa: F401 - pages register themselves
from .live import Live

LANG_KEY = "zeroboard-lang"
LANG_SECRET = "zeroboard-lang"  # fixed: the choice must survive a server restart (a language is no secret)

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
PASSWORD_ENV = "ZEROBOARD_PASSWORD"
USER_ENV = "ZEROBOARD_USER"

# The command wraps between words, never inside one (a flag, a path: see handlers.command_html); the run's status
# strip stays in sight while the form scrolls (gradio's container hides its overflow, which would make it the strip's
# scrolling box: clipping keeps the page's);
# code boxes have no fold markers (whose tooltips gradio does not translate: the JSON is short); gradio's progress
# text ("processing | 8.3/2.4s", its queue position, in English only) never shows, nor reaches a screen reader: the
# page says a run's state itself.
# The last two rules: gradio fits a plot's chart to its card as if the label took no room, which cuts off the legend
# below the chart; the label lies over the card's top padding instead.
CSS = """
.zb-invalid { border: 2px solid #dc2626 !important; border-radius: 8px; }
.zb-invalid .info, .zb-invalid [data-testid="block-info"] { color: #dc2626 !important; }
pre.zb-cmd { white-space: pre-wrap; word-break: normal; overflow-wrap: normal; overflow-x: auto; font-size: 0.85em;
             padding: 8px; margin: 0; }
pre.zb-cmd .zb-arg { white-space: nowrap; }
details.zb-full > summary { cursor: pointer; font-size: 0.85em; padding: 4px 8px; color: var(--body-text-color-subdued); }
#zb-strip { z-index: 20; background: var(--background-fill-primary); border-bottom: 1px solid var(--border-color-primary);
            padding: 4px 0; }
#zb-strip:has(.zb-status[data-status=starting], .zb-status[data-status=running], .zb-status[data-status=stopping])
  { position: sticky; top: 0; }
.gradio-container { overflow: clip !important; }
.cm-foldGutter { display: none !important; }
[data-testid=status-tracker].hide, [data-testid=status-tracker] .progress-text, [data-testid=status-tracker] .meta-text,
[data-testid=status-tracker] .meta-text-center { display: none !important; }
#zb-runs-table .cell-wrap, #zb-queue-table .cell-wrap { font-family: var(--font); font-size: 13px; }
#zb-runs-table .text.wrap, #zb-queue-table .text.wrap { word-break: normal; overflow-wrap: anywhere; }
#zb-queue-table th .text.wrap { word-break: keep-all; overflow-wrap: normal; }
pre.zb-pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.85em; max-height: 420px; overflow: auto;
             padding: 8px; background: var(--background-fill-secondary); border-radius: 6px; }
#zb-runs-course table, #zb-runs-diff table { font-size: 0.9em; }
mark.zb-ds { background: #fde68a; color: inherit; padding: 0 2px; border-radius: 3px; }
.zb-progress .zb-bar { height: 10px; background: #e5e7eb; border-radius: 5px; overflow: hidden; margin: 4px 0; }
.zb-progress .zb-bar > div { height: 100%; background: #2563eb; transition: width 0.4s; }
.zb-badge { font-weight: 700; padding: 1px 8px; border-radius: 10px; background: #e5e7eb; color: #111827; }
.zb-badge.zb-running, .zb-badge.zb-starting, .zb-badge.zb-stopping { background: #dbeafe; color: #1e40af; }
.zb-badge.zb-finished { background: #dcfce7; color: #166534; }
.zb-badge.zb-failed, .zb-badge.zb-lost { background: #fee2e2; color: #991b1b; }
.zb-badge.zb-aborted { background: #fef3c7; color: #92400e; }
.zb-badge.zb-stalled { background: #ffedd5; color: #9a3412; }
#zb-plan table { width: 100%; font-size: 0.9em; }
#zb-plan th, #zb-plan td { white-space: normal; overflow-wrap: anywhere; padding: 4px 6px; }
#zb-plan th:not(:first-child), #zb-plan td:not(:first-child) { white-space: nowrap; }
#zb-loss > span:first-of-type, #zb-history > span:first-of-type, #zb-runs-charts .block > span:first-of-type
  { position: absolute; top: 8px; }
#zb-loss, #zb-history, #zb-runs-charts .block { padding-top: 32px !important; }
.form > .block.padded { display: flex; flex-direction: column; }
.form > .block.padded > .container { display: flex; flex-direction: column; flex: 1 1 auto; }
.form > .block.padded > .container > :last-child { margin-top: auto; }
#zb-preview, #zb-save, #zb-load, #zb-start, #zb-queue, #zb-save-stop, #zb-abort, #zb-new-job, #zb-unload-start
  { white-space: nowrap; }
"""
# The strip stays in sight only while a run is live: at rest and once it ended it is part of the page, so a full-page
# capture (which draws a sticky element where the window was scrolled to) shows it above the form, covering nothing.
# The last three rules: the fields of a row have their inputs on one line, however long the help above each one
# (the help grows upwards, the input stays at the bottom of its box); the action buttons keep their words on one line.


def fresh_output_dir(job: spec.JobSpec) -> spec.JobSpec:
    """A newcomer's form should preview cleanly: move off an output dir that holds an earlier run."""
    out = Path(job.output_dir)
    if (folders.run_marks(out) or folders.foreign_files(out)) and not job.resume:
        job.output_dir = str(folders.free_dir_name(out))
    return job


# Gradio says its own words (Copy, Download, Fullscreen, ...) in the browser's language, and sets <html lang> to it.
# The page's language is the reader's choice (the URL, a stored choice, $ZEROBOARD_LANG, then the browser's), so
# once it is known Gradio is asked to follow it, through the function its own settings panel calls (changeLocale,
# exported by its core module, which the page has loaded already).
GRADIO_LOCALE = {"en": "en", "zh": "zh-CN"}
FOLLOW_LANG_JS = r"""async (lang) => {
  document.body.dataset.zbLang = lang;
  const want = (LOCALES)[lang] || 'en';
  const core = performance.getEntriesByType('resource').map(e => e.name)
    .find(n => /\/assets\/core-[\w-]+\.js$/.test(n));
  if (core) { try { (await import(core)).changeLocale(want); } catch (e) { console.warn('ZeroBoard: locale', e); } }
  document.documentElement.lang = want;
}""".replace("LOCALES", json.dumps(GRADIO_LOCALE))


def build_app(manager: JobManager | None = None, lang: str | None = None,
              job: spec.JobSpec | None = None, gpus: list[devices.Gpu] | None = None) -> gr.Blocks:
    """The app: a title, the language, and one tab per registered page (pages.PAGES), each wired the same way."""
    manager = manager or JobManager()
    lang = words.lang_of(lang) if lang else words.default_lang()
    job = fresh_output_dir(job or spec.load_job(None))
    gpus = devices.detect_gpus() if gpus is None else gpus

    with gr.Blocks(title="ZeroBoard") as demo:
        with gr.Row(elem_id="zb-head", equal_height=True):
            title = gr.Markdown(f"## {words.label('title', lang)}", elem_id="zb-title")
            lang_radio = gr.Radio([(name, code) for code, name in words.LANGS.items()], value=lang, show_label=False,
                                  label=words.label("lang", lang), scale=0, min_width=220, container=False,
                                  elem_id="zb-lang")
        session = gr.State({})
        with gr.Tabs(elem_id="zb-tabs") as tabs:
            ctx = pages.Context(manager, gpus, Live(manager), job, lang, session, lang_radio, tabs, demo)
            for page in pages.ordered():
                with gr.Tab(words.label(page.label, lang), id=page.id, elem_id=f"zb-tab-{page.id}",
                            render_children=page.preload) as tab:
                    ctx.views[page.id] = page.render(ctx)
                ctx.tab_items[page.id] = tab
        for page in pages.ordered():
            page.wire(ctx.views[page.id], ctx)
        outputs, said = wire_language(ctx, title)
        wire_load(ctx)
        sessions.wire_upkeep(demo)
    for fn in demo.fns.values():  # the page's own events, not an API: nothing is listed for anyone (not even
        fn.api_visibility = "private"  # on the login page, which shows the API of public events to strangers)
    # every word the switch says, in both languages, for the first paint; gradio reads its translations from this
    # attribute (launch sets it from its i18n argument: serve passes it back)
    demo.i18n_instance = first_paint.translate(outputs, said)
    return demo


def wire_language(ctx: pages.Context, title: gr.Markdown) -> tuple[list, Callable[[str], list]]:
    """The language switch says every page's words again, and the tabs' labels, then Gradio's own words follow.
    Returns the blocks it relabels and the function that says their words in a language."""
    views = [ctx.views[p.id] for p in pages.ordered()]

    def relabel(lang: str):
        out = [u for view in views for u in view.relabel(lang)]
        out += [gr.update(label=words.label(p.label, lang)) for p in pages.ordered()]
        return [*out, gr.update(value=f"## {words.label('title', lang)}"), gr.update(label=words.label("lang", lang))]

    outputs = [o for view in views for o in view.relabel_outputs()] + [ctx.tab_items[p.id] for p in pages.ordered()]
    radio = ctx.lang_radio
    relabelled = radio.change(relabel, [radio], [*outputs, title, radio], show_progress="hidden")
    # a mark on the page once every label is in the new language: tests and the screenshot tool wait for it
    relabelled.then(None, [radio], None, js=FOLLOW_LANG_JS, show_progress="hidden")
    return [*outputs, title, radio], relabel


def wire_load(ctx: pages.Context) -> None:
    """A page opens (or reloads): its language first (?lang= in the URL, the reader's stored choice,
    $ZEROBOARD_LANG, the browser's), in a quick call of its own (the switch then says every word that gradio's i18n
    did not: the tabs not shown yet, a table's headers); then each page's own load steps -- all in one call, one
    round trip -- then a mark the tests and the screenshot tool wait for."""
    stored = gr.BrowserState(None, storage_key=LANG_KEY, secret=LANG_SECRET)
    steps = [(fn, len(inputs), len(outputs)) for fn, inputs, outputs in ctx.loads]
    inputs = [ctx.lang_radio, *[c for _, ins, _ in ctx.loads for c in ins]]
    outputs = [c for _, _, outs in ctx.loads for c in outs]
    if len(set(map(id, outputs))) != len(outputs) or ctx.lang_radio in outputs:
        raise ValueError("duplicate load outputs")

    def pick_language(request: gr.Request, stored_lang):
        query = dict(request.query_params).get("lang") if request else None
        accept = request.headers.get("accept-language") if request else None
        lang = words.pick_lang(query, stored_lang, os.environ.get(words.LANG_ENV), accept)
        return lang, lang if query else gr.skip()  # a language asked for in the URL is the reader's choice too

    def on_load(lang, *values):
        out = []
        for fn, n_in, n_out in steps:  # as gradio calls a handler: one output takes the value, several a sequence
            got = fn(*values[:n_in], lang)
            out += [got] if n_out == 1 else list(got)
            values = values[n_in:]
        return out

    io = dict(show_progress="hidden")
    picked = ctx.demo.load(pick_language, [stored], [ctx.lang_radio, stored], queue=False, **io)
    loaded = picked.then(on_load, inputs, outputs, **io).then(None, [ctx.lang_radio], None, js=FOLLOW_LANG_JS, **io)
    # a mark on the page once the form is settled: tests and the screenshot tool wait for it, not for a while
    loaded.then(None, js="() => { document.body.dataset.zbLoaded = '1'; }", **io)
    # the reader's choice: kept for the server (stored) and for the first paint of the next visit (first_paint.HEAD)
    ctx.lang_radio.input(lambda value: value, [ctx.lang_radio], [stored], js=first_paint.REMEMBER_JS, **io)


def ensure_demo_model() -> None:
    """First start on a fresh machine: build the offline demo model, in a child process (it needs torch).

    The default job trains it, and the memory plan reads its config.json on the first paint.
    """
    if (Path(DEMO_MODEL) / "config.json").is_file():
        return
    print(words.text("page.demo_building", words.default_lang()), flush=True)
    started = time.monotonic()  # said as measured: on a loaded 2-core machine it took 518 s, not the 15 s once promised
    done = subprocess.run([sys.executable, "-m", "zeroboard.cli", "demo-model"], capture_output=True, text=True)
    if done.returncode:
        print(words.text("page.demo_failed", words.default_lang(), log=done.stderr[-1500:]), file=sys.stderr)
    else:
        print(words.text("page.demo_built", words.default_lang(), seconds=f"{time.monotonic() - started:.0f}"), flush=True)


def serve(host: str = "127.0.0.1", port: int = 7860) -> int:
    """Serve the dashboard; beyond localhost only with a password (ZEROBOARD_PASSWORD)."""
    password = os.environ.get(PASSWORD_ENV, "")
    lang = words.default_lang()
    if host not in LOCAL_HOSTS and not password:
        print(words.text("page.refuse_host", lang, host=host, env=PASSWORD_ENV, user_env=USER_ENV), file=sys.stderr)
        return 2
    auth = (os.environ.get(USER_ENV, "zeroboard"), password) if password else None
    os.environ.setdefault(workspace.WORKSPACE_ENV, os.getcwd())  # the processes it starts confine to the same roots
    ensure_demo_model()
    demo = build_app()
    try:
        # no demo.queue(): it would build the server app once more (~0.2 s of a 3 s start budget)
        demo.launch(server_name=host, server_port=port, auth=auth, css=CSS, show_error=True, ssr_mode=False,
                    footer_links=[], quiet=False, run_history=False, i18n=demo.i18n_instance,
                    head=first_paint.head(os.environ.get(words.LANG_ENV)))
    except OSError as e:
        why = words.text("page.port_in_use", lang) if "empty port" in str(e) else str(e)
        print(words.text("page.cannot_serve", lang, host=host, port=port, why=why), file=sys.stderr)
        return 1
    return 0
