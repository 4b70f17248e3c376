"""The ZeroBoard web app: ``build_app()`` lays out the page, ``serve()`` runs it (``zeroboard webui``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gradio as gr

from .. import words, workspace
from ..job import devices, folders, spec
from ..job.spec import DEMO_MODEL
from ..runs.manager import JobManager
from . import attach, form as formmod, live_panels, sessions, train_page
from .live import Live

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
PASSWORD_ENV = "ZEROBOARD_PASSWORD"
USER_ENV = "ZEROBOARD_USER"

# The last two rules: gradio fits a plot's chart to its card as if the label took no room, which cuts off the legend
# below the chart; the label lies over the card's top padding instead.
CSS = """
.zb-invalid { border: 2px solid #dc2626 !important; border-radius: 8px; }
.zb-invalid .info, .zb-invalid [data-testid="block-info"] { color: #dc2626 !important; }
pre.zb-cmd { white-space: pre-wrap; word-break: break-all; font-size: 0.85em; padding: 8px; margin: 0; }
mark.zb-ds { background: #fde68a; color: inherit; padding: 0 2px; border-radius: 3px; }
.zb-progress .zb-bar { height: 10px; background: #e5e7eb; border-radius: 5px; overflow: hidden; margin: 4px 0; }
.zb-progress .zb-bar > div { height: 100%; background: #2563eb; transition: width 0.4s; }
.zb-badge { font-weight: 700; padding: 1px 8px; border-radius: 10px; background: #e5e7eb; color: #111827; }
.zb-badge.zb-running, .zb-badge.zb-starting, .zb-badge.zb-stopping { background: #dbeafe; color: #1e40af; }
.zb-badge.zb-finished { background: #dcfce7; color: #166534; }
.zb-badge.zb-failed, .zb-badge.zb-lost { background: #fee2e2; color: #991b1b; }
.zb-badge.zb-aborted { background: #fef3c7; color: #92400e; }
#zb-plan table { width: 100%; font-size: 0.9em; }
#zb-plan th, #zb-plan td { white-space: normal; overflow-wrap: anywhere; padding: 4px 6px; }
#zb-plan th:not(:first-child), #zb-plan td:not(:first-child) { white-space: nowrap; }
#zb-loss > span:first-of-type, #zb-history > span:first-of-type { position: absolute; top: 8px; }
#zb-loss, #zb-history { padding-top: 32px !important; }
"""


def fresh_output_dir(job: spec.JobSpec) -> spec.JobSpec:
    """A newcomer's form should preview cleanly: move off an output dir that holds an earlier run."""
    out = Path(job.output_dir)
    if (folders.run_marks(out) or folders.foreign_files(out)) and not job.resume:
        job.output_dir = str(folders.free_dir_name(out))
    return job


def build_app(manager: JobManager | None = None, lang: str | None = None,
              job: spec.JobSpec | None = None, gpus: list[devices.Gpu] | None = None) -> gr.Blocks:
    manager = manager or JobManager()
    lang = words.lang_of(lang) if lang else words.default_lang()
    job = fresh_output_dir(job or spec.load_job(None))
    gpus = devices.detect_gpus() if gpus is None else gpus
    live = Live(manager)

    with gr.Blocks(title="ZeroBoard") as demo:
        session = gr.State({})
        with gr.Row():
            title = gr.Markdown(f"## {words.label('title', lang)}", elem_id="zb-title")
            lang_radio = gr.Radio([(name, code) for code, name in words.LANGS.items()], value=lang,
                                  label=words.label("lang", lang), scale=0, min_width=200, elem_id="zb-lang")
        page = train_page.render_train(job, lang, gpus)
        panels = live_panels.render_live(lang, gpus)

        train_page.wire_train(page, manager, gpus, session, lang_radio)
        live_panels.wire_live(panels, live, session, lang_radio, demo)
        wire_language(page.form, panels, title, lang_radio)
        attach.wire_attach(page, manager, session, lang_radio, demo)
        sessions.wire_upkeep(demo)
    for fn in demo.fns.values():  # the page's own events, not an API: nothing is listed for anyone (not even
        fn.api_visibility = "private"  # on the login page, which shows the API of public events to strangers)
    return demo


def wire_language(form: formmod.Form, panels: live_panels.LivePanels, title: gr.Markdown, radio: gr.Radio) -> None:
    texts = {**form.texts, **panels.texts}

    def relabel(lang: str):
        out = formmod.relabel(form, lang)
        out += [formmod.text_update(key, target, lang) for key, target in texts.items() if key not in form.texts]
        out.append(gr.update(label=words.label("device_count", lang), info=words.label("device_count_info", lang)))
        return [*out, f"## {words.label('title', lang)}", gr.update(label=words.label("lang", lang))]

    outputs = formmod.relabel_outputs(form) + [b for k, (b, _) in texts.items() if k not in form.texts]
    relabelled = radio.change(relabel, [radio], [*outputs, form.device_count, title, radio], show_progress="hidden")
    # a mark on the page once every label is in the new language: tests and the screenshot tool wait for it
    relabelled.then(None, [radio], None, js="(lang) => { document.body.dataset.zbLang = lang; }", show_progress="hidden")


def ensure_demo_model() -> None:
    """First start on a fresh machine: build the offline demo model, in a child process (it needs torch).

    The default job trains it, and the memory plan reads its config.json on the first paint.
    """
    if (Path(DEMO_MODEL) / "config.json").is_file():
        return
    print(words.text("page.demo_building", words.default_lang()), flush=True)
    done = subprocess.run([sys.executable, "-m", "zeroboard.cli", "demo-model"], capture_output=True, text=True)
    if done.returncode:
        print(words.text("page.demo_failed", words.default_lang(), log=done.stderr[-1500:]), file=sys.stderr)


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
                    footer_links=[], quiet=False, run_history=False)
    except OSError as e:
        why = words.text("page.port_in_use", lang) if "empty port" in str(e) else str(e)
        print(words.text("page.cannot_serve", lang, host=host, port=port, why=why), file=sys.stderr)
        return 1
    return 0
