"""What the Train page shows when it opens, and when its run starts or ends.

On load (a load step, after the app picked the page's language) the page
attaches to the current run: the form shows that
run's job, the command box its command, the JSON box the DeepSpeed config it
uses.  While the run is going the form is read-only; **New job from these
settings** makes an editable copy in a new output folder.  When the run ends,
the form becomes editable again and its output folder moves on to a free one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import gradio as gr

from .. import safeload
from ..job import folders, record, spec
from ..job.command import Command
from ..runs.manager import JobManager
from . import handlers, pages

FORM_TICK_S = 2.0


def run_view(run_dir: str | None) -> dict | None:
    """The run's own job (as form values), command and DeepSpeed JSON, from its record; None without a record."""
    if not run_dir:
        return None
    run = Path(run_dir)
    try:
        job = spec.load_yaml(run / record.SPEC_FILE)
        cmd = json.loads(safeload.read_text(run / record.COMMAND_FILE, safeload.CONFIG))
    except (spec.SpecError, OSError, ValueError):
        return None
    ds = run / record.DS_CONFIG_FILE
    if ds.is_file():
        try:
            ds_text = safeload.read_text(ds, safeload.CONFIG)
        except (OSError, ValueError):
            ds_text = ""
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


def form_turn(tab_run: str | None, shown: dict, active: Callable[[str], bool]) -> tuple[str | None, str]:
    """What a form tick does: ``(run, "lock" | "unlock" | "same" | "follow")``.

    ``tab_run``: the run this browser tab follows; ``shown``: what the form shows (``{"run", "locked"}``).  Without
    a run of its own the tab judges the run the form shows: a tick that reads the tab's state half-way through a
    page load (the form already on the running job, the tab not yet following it) must not take that run for
    ended and unlock its form."""
    run_dir = tab_run or shown.get("run")
    is_active = bool(run_dir) and active(run_dir)
    if shown.get("run") == run_dir and bool(shown.get("locked")) == is_active:
        return run_dir, "same"
    if is_active and shown.get("run") != run_dir:
        return run_dir, "lock"
    if not is_active and shown.get("locked"):
        return run_dir, "unlock"
    return run_dir, "follow"


def wire_attach(page, manager: JobManager, session: gr.State, ctx: pages.Context) -> None:
    """The form on a page (re)load (a load step: after the language is picked), on New job, and when a run ends.

    ``page``: the Train page's blocks (``train_page.TrainPage``: its form, command, JSON and New job button)."""
    f = page.form
    names = f.names
    view = gr.State({})  # what the form shows: {"run": run dir, "locked": bool}

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

    def attach_form(current_output, lang):
        st = manager.current()
        v = run_view(st.run_dir) if st is not None else None
        if v is None:
            fresh = free_output(current_output, None)
            return [*[gr.update(value=fresh) if n == "output_dir" and fresh else gr.skip() for n in names],
                    gr.skip(), gr.update(visible=False), gr.update(visible=False), {}]
        locked = st.active
        output = None if locked else free_output(v["values"]["output_dir"], st.run_dir)
        values = {k: v["values"][k] for k in names if k in v["values"]}
        return [*locked_form(values, locked, output), handlers.command_html(v["command"], lang),
                gr.update(value=v["ds_json"], visible=bool(v["ds_json"])), gr.update(visible=locked),
                {"run": st.run_dir, "locked": locked}]

    def on_new_job(current_output, state):
        out = free_output(current_output, state.get("run_dir")) or current_output
        return [*locked_form(None, False, out), gr.update(visible=False), {"run": state.get("run_dir"), "locked": False}]

    def on_tick(state, shown, current_output):
        """A run started here (lock the form on its job) or ended (unlock, and move the output folder on)."""
        run_dir, turn = form_turn(state.get("run_dir"), shown, lambda d: bool((st := manager.state(d)) and st.active))
        if turn == "lock":
            return [*locked_form(None, True, None), gr.update(visible=True), {"run": run_dir, "locked": True}]
        if turn == "unlock":
            out = free_output(current_output, run_dir)
            return [*locked_form(None, False, out), gr.update(visible=False), {"run": run_dir, "locked": False}]
        if turn == "same":
            return [gr.skip()] * (len(names) + 2)
        return [*[gr.skip()] * len(names), gr.skip(), {"run": run_dir, "locked": shown.get("locked", False)}]

    io = dict(show_progress="hidden")
    ctx.on_load(attach_form, [f.fields["output_dir"]], [*f.inputs, page.command, page.ds_json, page.new_job, view])
    page.new_job.click(on_new_job, [f.fields["output_dir"], session], [*f.inputs, page.new_job, view], **io)
    gr.Timer(FORM_TICK_S).tick(on_tick, [session, view, f.fields["output_dir"]], [*f.inputs, page.new_job, view],
                               concurrency_limit=None, queue=False, **io)
