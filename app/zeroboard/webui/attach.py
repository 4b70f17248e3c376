"""What a page shows when it opens, and when its run starts or ends.

On load the page picks its language (``?lang=`` in the URL, then the reader's
earlier choice, kept in the browser, then ``$ZEROBOARD_LANG``, then the
browser's language) and attaches to the current run: the form shows that
run's job, the command box its command, the JSON box the DeepSpeed config it
uses.  While the run is going the form is read-only; **New job from these
settings** makes an editable copy in a new output folder.  When the run ends,
the form becomes editable again and its output folder moves on to a free one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import gradio as gr

from .. import words
from ..job import folders, record, spec
from ..job.command import Command
from ..runs.manager import JobManager
from . import handlers, train_page

LANG_KEY = "zeroboard-lang"
LANG_SECRET = "zeroboard-lang"  # fixed: the choice must survive a server restart (a language is no secret)
FORM_TICK_S = 2.0


def run_view(run_dir: str | None) -> dict | None:
    """The run's own job (as form values), command and DeepSpeed JSON, from its record; None without a record."""
    if not run_dir:
        return None
    run = Path(run_dir)
    try:
        job = spec.load_yaml(run / record.SPEC_FILE)
        cmd = json.loads((run / record.COMMAND_FILE).read_text(encoding="utf-8"))
    except (spec.SpecError, OSError, ValueError):
        return None
    ds = run / record.DS_CONFIG_FILE
    if ds.is_file():
        ds_text = ds.read_text(encoding="utf-8")
    elif cmd.get("deepspeed_config"):
        ds_text = handlers.deepspeed_json(_command(cmd))
    else:
        ds_text = ""
    return {"job": job, "values": handlers.spec_to_form(job), "command": _command(cmd), "ds_json": ds_text}


def _command(cmd: dict) -> Command:
    return Command(cmd["argv"], cmd.get("env", {}), cmd.get("cwd", os.getcwd()), cmd.get("deepspeed_config"),
                   cmd.get("device_kind", "cpu"), list(cmd.get("devices", [])), cmd.get("master_port", 0))


def free_output(current: str, run_dir: str | None) -> str | None:
    """A free folder to propose instead of ``current`` when it is the run's own (or holds any earlier run)."""
    out = Path(current or "runs/demo")
    same = run_dir and out.resolve() == Path(run_dir).resolve()
    if same or folders.run_marks(out) or folders.foreign_files(out):
        return str(folders.free_dir_name(out))
    return None


def wire_attach(page: train_page.TrainPage, manager: JobManager, session: gr.State, lang_radio: gr.Radio,
                demo: gr.Blocks) -> None:
    f = page.form
    names = f.names
    stored = gr.BrowserState(None, storage_key=LANG_KEY, secret=LANG_SECRET)
    view = gr.State({})  # what the form shows: {"run": run dir, "locked": bool}
    outputs = [lang_radio, stored, *f.inputs, page.command, page.ds_json, page.new_job, view]

    def locked_form(values: dict | None, locked: bool, output: str | None) -> list:
        out = []
        for name in names:
            upd = {"interactive": not locked}
            if values is not None and name in values:
                upd["value"] = values[name]
            if name == "output_dir" and output is not None:
                upd["value"] = output
            out.append(gr.update(**upd))
        return out

    def on_load(stored_lang, current_output, request: gr.Request):
        query = dict(request.query_params).get("lang") if request else None
        accept = request.headers.get("accept-language") if request else None
        lang = words.pick_lang(query, stored_lang, os.environ.get(words.LANG_ENV), accept)
        keep = lang if query else gr.skip()  # a language asked for in the URL is the reader's choice too
        st = manager.current()
        v = run_view(st.run_dir) if st is not None else None
        if v is None:
            fresh = free_output(current_output, None)
            return [lang, keep, *[gr.update(value=fresh) if n == "output_dir" and fresh else gr.skip() for n in names],
                    gr.skip(), gr.skip(), gr.update(visible=False), {}]
        locked = st.active
        output = None if locked else free_output(v["values"]["output_dir"], st.run_dir)
        values = {k: v["values"][k] for k in names if k in v["values"]}
        return [lang, keep, *locked_form(values, locked, output), handlers.command_html(v["command"], lang), v["ds_json"],
                gr.update(visible=locked), {"run": st.run_dir, "locked": locked}]

    def on_new_job(current_output, state):
        out = free_output(current_output, state.get("run_dir")) or current_output
        return [*locked_form(None, False, out), gr.update(visible=False), {"run": state.get("run_dir"), "locked": False}]

    def on_tick(state, shown, current_output):
        """A run started here (lock the form on its job) or ended (unlock, and move the output folder on)."""
        run_dir = state.get("run_dir")
        st = manager.state(run_dir) if run_dir else None
        active = bool(st and st.active)
        if shown.get("run") == run_dir and shown.get("locked") == active:
            return [gr.skip()] * (len(names) + 2)
        if active and shown.get("run") != run_dir:
            return [*locked_form(None, True, None), gr.update(visible=True), {"run": run_dir, "locked": True}]
        if not active and shown.get("locked"):
            out = free_output(current_output, run_dir)
            return [*locked_form(None, False, out), gr.update(visible=False), {"run": run_dir, "locked": False}]
        return [*[gr.skip()] * len(names), gr.skip(), {"run": run_dir, "locked": shown.get("locked", False)}]

    io = dict(show_progress="hidden")
    loaded = demo.load(on_load, [stored, f.fields["output_dir"]], outputs, **io)
    # a mark on the page once the form is settled: tests and the screenshot tool wait for it, not for a while
    loaded.then(None, js="() => { document.body.dataset.zbLoaded = '1'; }", show_progress="hidden")
    lang_radio.input(lambda value: value, [lang_radio], [stored], **io)
    page.new_job.click(on_new_job, [f.fields["output_dir"], session], [*f.inputs, page.new_job, view], **io)
    gr.Timer(FORM_TICK_S).tick(on_tick, [session, view, f.fields["output_dir"]], [*f.inputs, page.new_job, view],
                               concurrency_limit=None, queue=False, **io)
