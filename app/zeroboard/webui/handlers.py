"""What the Train page's buttons do, as plain functions of plain values.

No gradio here: the page modules turn these results into component updates,
and the tests call these directly.  Form values arrive as ``{field: value}``
straight from the widgets (numbers as numbers, lists as comma-separated text,
mappings as JSON text) and go through the spec's own conversion.  Every path
typed in the browser is confined to the workspace (``job.workspace``).
"""

from __future__ import annotations

import html
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import files, planner, safeload, words, workspace
from ..data import convert, info as datainfo, records
from ..data.formats import DataError
from ..job import checks, cmdline, command, devices, placement, quoting, spec
from ..job.registry import RegistryError
from ..runs import dispatcher, manager as runmgr
from ..runs.launch import prepare_launch
from ..runs.queue import Queue
from ..words import Msg, say, text, tr
from . import chat_handlers

SAVED_MARK = "# zeroboard job arguments"  # the first line of a saved-arguments file: Save replaces only these

# --- form <-> spec ---------------------------------------------------------------------


def to_form_value(name: str, value):
    """A spec value as its widget shows it."""
    t = spec.field_type(name)
    if getattr(t, "__origin__", None) is list and name != "gpu_ids":
        return ", ".join(str(v) for v in value)
    if getattr(t, "__origin__", None) is dict:
        return json.dumps(value, indent=2)
    return value


def spec_to_form(job: spec.JobSpec) -> dict:
    """The form's values for a job; a path inside the workspace as the workspace names it (``runs/demo``): a run
    shown again, a file loaded, never show where the checkout lives."""
    return {name: workspace.shown(value) if isinstance(value, str) and value.startswith("/") else to_form_value(name, value)
            for name, value in spec.to_dict(job).items()}


def form_to_spec(values: dict) -> tuple[spec.JobSpec | None, dict[str, Msg]]:
    """Build the spec from widget values; fields the page does not show keep their defaults."""
    problems: dict[str, Msg] = {}
    data: dict = {}
    for name, value in values.items():
        if name not in spec.FIELDS:
            continue
        if value is None and spec.field_type(name) in (int, float):
            problems[name] = say("check.empty_number")
            continue
        data[name] = value
    try:
        job = spec.from_dict(data)
    except spec.SpecError as e:
        return None, {**e.problems, **problems}
    return (None, problems) if problems else (job, {})


def device_count(values: dict, gpus: list[devices.Gpu]) -> int:
    """How many GPUs (or CPU processes) the job will use, as the launcher will count them (its placement)."""
    job, _ = form_to_spec({k: v for k, v in values.items() if k in ("device_type", "gpu_ids", "num_processes")})
    return len(placement.device_ids(job, gpus)) if job is not None else 0


# --- preview ---------------------------------------------------------------------------


@dataclass
class Checked:
    """The result of validating the form and building the command (what Preview shows)."""

    job: spec.JobSpec | None
    errors: dict[str, Msg] = field(default_factory=dict)
    warnings: dict[str, Msg] = field(default_factory=dict)
    prepared: command.Prepared | None = None
    refused: Msg | None = None  # why Start was refused though the job is valid (a job or a chat worker on its devices)

    @property
    def ok(self) -> bool:
        return not self.errors and self.prepared is not None and self.prepared.command is not None

    @property
    def command(self) -> command.Command | None:
        return self.prepared.command if self.prepared is not None else None


def check(values: dict, gpus: list[devices.Gpu], port: int | None = None) -> Checked:
    """Validate everything at once and build the exact command (Preview and Start both use this)."""
    job, problems = form_to_spec(values)
    if job is None:
        return Checked(None, problems)
    prepared = prepare_launch(job, gpus, port=port)
    return Checked(job, dict(prepared.report.errors), dict(prepared.report.warnings), prepared)


def command_html(cmd: command.Command, lang: str = "en") -> str:
    """The command as the box shows it (``cmdline``): paths as the workspace names them, one argument (a flag with
    its value) a line, each word unbreakable (a line wraps between words, never inside ``--learning_rate``), the
    DeepSpeed config marked; under it, folded, the same command with its paths as they are (to run elsewhere).
    What a reader copies from either box pastes into bash as this one command."""
    return _command_pre(cmd, lang, full=False) + (
        f'<details class="zb-full"><summary>{html.escape(text("page.full_paths", lang))}</summary>'
        f"{_command_pre(cmd, lang, full=True)}</details>")


def _command_pre(cmd: command.Command, lang: str, full: bool) -> str:
    ds = cmdline.shown_arg(cmd.deepspeed_config, full) if cmd.deepspeed_config else None

    def word(w: str) -> str:
        inner = f'<mark class="zb-ds">{html.escape(w)}</mark>' if ds is not None and w == quoting.shell(ds) else html.escape(w)
        return f'<span class="zb-arg">{inner}</span>'

    body = cmdline.text(cmd.env, cmd.argv, full, word)
    where = html.escape(cmdline.run_from(cmd.cwd, lang, full))  # where it runs, as the workspace names it
    if cmd.script is not None:  # a Slurm job: the script Start writes and submits, then the submitting line
        path = cmdline.shown_arg(cmd.argv[-1], full)
        script = html.escape(text("cli.sbatch_script", lang, path=path)) + "\n" + html.escape(cmd.script)
        return f'<pre class="zb-cmd">{where}\n{script}\n{body}</pre>'
    return f'<pre class="zb-cmd">{where}\n{body}</pre>'


def deepspeed_json(cmd: command.Command | None) -> str:
    if cmd is None or not cmd.deepspeed_config:
        return ""
    path = Path(cmd.cwd) / cmd.deepspeed_config
    try:
        return safeload.read_text(path, safeload.CONFIG)
    except safeload.Refused as e:
        return f"// {text('page.cannot_read', 'en', path=str(path), why=text(e.key, 'en', **e.values))}"
    except (OSError, UnicodeDecodeError) as e:
        return f"// {text('page.cannot_read', 'en', path=str(path), why=getattr(e, 'strerror', None) or str(e))}"


def report_markdown(checked: Checked, lang: str = "en") -> str:
    lines = []
    if checked.errors:
        lines.append(f"**{text('page.fix_fields', lang)}**")
        lines += [f"- **`{k}`**: {html.escape(tr(v, lang))}" for k, v in checked.errors.items()]
    lines += [f"- {text('page.note_field', lang, field=k)}: {html.escape(tr(v, lang))}" for k, v in checked.warnings.items()]
    return "\n".join(lines)


# --- memory plan -----------------------------------------------------------------------


_PROBE_CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}


def plan_fields(gpus: list[devices.Gpu]) -> list[str]:
    """The spec fields the planner reads, found by running it on specs that record every field read.

    The plan panel is redrawn when one of them changes: a field added to the planner later is wired without
    anyone keeping a list.  The probes cover CPU and GPU placements, LoRA and full, each DeepSpeed setting
    and a DeepSpeed file of one's own, so every branch of the planner is taken.
    """
    reads: set[str] = set()

    class Recording(spec.JobSpec):
        def __getattribute__(self, name):
            if name in spec.FIELDS:
                reads.add(name)
            return super().__getattribute__(name)

    fake_gpu = [devices.Gpu(0, "probe", 80 << 30, 80 << 30, 0, 0, (9, 0))]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(_PROBE_CONFIG))
        (Path(tmp) / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
        for gpu in (fake_gpu, []):
            for ft in ("lora", "full"):
                for stage, off, ds in (("none", False, ""), ("2", True, ""), ("3", True, ""), ("none", False, "ds.json")):
                    job = Recording(model_name_or_path=tmp, finetuning_type=ft, deepspeed_stage=stage, offload=off,
                                    deepspeed=str(Path(tmp) / ds) if ds else "", pure_bf16=not off)
                    try:
                        planner.estimate(job, gpu, host_available=1 << 40)
                    except planner.PlanError:
                        pass
    return [name for name in spec.FIELDS if name in reads]


def plan_markdown(values: dict, gpus: list[devices.Gpu], lang: str = "en") -> str:
    """The memory plan of the form as it stands, or which fields keep it from being planned (never raises)."""
    job, problems = form_to_spec(values)
    if job is not None:  # the plan reads the model's config and a DeepSpeed file: only where the job may read
        outside = checks.Report()
        if not checks.check_paths(job, outside):
            job, problems = None, outside.errors
    md = planner.panel(job, gpus, lang)
    if job is None and problems:
        md += "\n\n" + "\n".join(f"- `{k}`: {html.escape(tr(v, lang))}" for k, v in problems.items())
    return md


# --- save / load arguments -------------------------------------------------------------


def save_args(values: dict, path: str, lang: str = "en", replace: bool = False) -> tuple[str, bool]:
    """Write the form as a job file. Returns (message, whether it asks to confirm replacing a saved file)."""
    job, problems = form_to_spec(values)
    if job is None:
        return text("page.not_saved", lang, why="; ".join(f"{k}: {tr(v, lang)}" for k, v in problems.items())), False
    if not (path or "").strip():
        return text("page.not_saved_name", lang), False
    ws = workspace.current()
    if (long := checks.path_too_long(path.strip())) is not None:
        return text("page.not_saved", lang, why=tr(long, lang)), False
    p = ws.path(path.strip())
    if not ws.writable(p):
        return text("page.not_saved", lang, why=text("check.output_outside", lang, path=path, roots=ws.describe())), False
    if p.suffix not in (".yaml", ".yml"):
        return text("page.not_saved_yaml", lang, path=path), False
    if p.exists():
        if not _saved_args_file(p):
            return text("page.not_saved_foreign", lang, path=path), False
        if not replace:
            return text("page.confirm_replace", lang, path=path), True
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        files.write_text_atomic(p, f"{SAVED_MARK}\n{spec.dump_yaml(job)}")
    except OSError as e:
        return text("page.not_saved", lang, why=text("page.cannot_write", lang, path=path, why=e.strerror or str(e))), False
    return text("page.saved", lang, path=path), False


def _saved_args_file(p: Path) -> bool:
    try:
        with safeload.open_text(p) as fh:  # a FIFO in its place is no saved file (and is not waited on)
            return fh.readline(len(SAVED_MARK) + 2).strip() == SAVED_MARK
    except (OSError, UnicodeDecodeError, safeload.Refused):
        return False


def load_args(path: str, lang: str = "en") -> tuple[dict | None, str]:
    """Form values from a saved job file, or None and what is wrong (then the form stays as it is)."""
    ws = workspace.current()
    if (long := checks.path_too_long((path or "").strip())) is not None:
        return None, text("page.not_loaded", lang, path=path[:80], why=tr(long, lang))
    if not (path or "").strip() or not ws.readable(path.strip()):
        return None, text("page.not_loaded", lang, path=path, why=text("check.read_outside", lang, path=path,
                                                                       roots=ws.describe()))
    notes: dict[str, Msg] = {}
    try:
        job = spec.load_yaml(ws.path(path.strip()), notes)
    except spec.SpecError as e:
        problems = "; ".join(f"{k}: {tr(v, lang)}" for k, v in e.problems.items())
        return None, text("page.not_loaded", lang, path=path, why=problems)
    said = "".join(f"\n- **{text('check.note_word', lang)}** {html.escape(k)}: {html.escape(tr(v, lang))}"
                   for k, v in notes.items())  # what a LLaMA-Factory file's keys became here
    return spec_to_form(job), text("page.loaded", lang, path=path) + ("\n" + said if said else "")


# --- dataset preview -------------------------------------------------------------------


def dataset_preview(dataset_dir: str, names: str, n: int = 3, lang: str = "en") -> str:
    """The first records of each chosen dataset, as chat turns (Markdown; read directly, nothing tokenized)."""
    try:
        chosen = spec.coerce("dataset", names)
    except ValueError as e:
        return f"**{text('page.error', lang)}** dataset: {html.escape(tr(e.args[0], lang))}"
    ws = workspace.current()
    if (unusable := checks.path_too_long(dataset_dir or "")) is not None:
        return f"**{text('page.error', lang)}** dataset_dir: {html.escape(tr(unusable, lang))}"
    if not ws.readable(dataset_dir, cache_ok=True):
        why = text("check.read_outside", lang, path=dataset_dir, roots=ws.describe())
        return f"**{text('page.error', lang)}** dataset_dir: {html.escape(why)}"
    if checks.is_demo_data(dataset_dir):
        from ..data.demo import write_demo_data  # pure Python: writes the demo JSON files if missing

        write_demo_data(dataset_dir)
    out = []
    for name in chosen:
        try:
            src = datainfo.resolve(name, dataset_dir)  # confined: files outside the workspace are refused
            if src.load_from != "file":
                out.append(text("page.samples_hub", lang, name=html.escape(name), where=html.escape(src.where)))
                continue
            skipped: list = []
            chats = convert.chats(src, records.head(src, n), skipped=skipped)
        except DataError as e:
            out.append(f"**{text('page.error', lang)}** {html.escape(name)}: {html.escape(tr(e.args[0], lang))}")
            continue
        out.append(text("page.samples_first", lang, name=html.escape(name), path=html.escape(src.where), shown=len(chats)))
        if skipped:  # the records LLaMA-Factory skips: left out of training too, the first one named
            i, why = skipped[0]
            out.append("> " + html.escape(tr(say("data.skipped_shown", n=len(skipped), i=i, why=why), lang)))
        if src.unknown:
            out.append("> " + html.escape(tr(say("data.unknown_keys", name=name, keys=", ".join(src.unknown)), lang)))
        for c in chats:
            out.append("\n".join(f"> **{m['role']}**: {html.escape(m['content'])}  " for m in c.messages))
    return "\n\n".join(out)


# --- start / abort ---------------------------------------------------------------------


def start(values: dict, gpus: list[devices.Gpu], manager: runmgr.JobManager, port: int | None = None,
          lang: str = "en", unload_chat: bool = False):
    """Check, then launch exactly the command the check built. Returns (check, state or None, message).

    Refused because a chat worker holds the job's devices (``checked.refused``, ``run.busy_chat``): the message offers
    "Unload and start", which calls this again with ``unload_chat``: the workers on the job's devices are unloaded
    (found in the runs index, whoever loaded them), then the job starts."""
    checked = check(values, gpus, port)
    if not checked.ok:
        return checked, None, report_markdown(checked, lang)
    unloaded = chat_handlers.unload_on(manager, checked.command.device_kind, checked.command.devices, lang) \
        if unload_chat else []
    said = "".join(f"{html.escape(line)}  \n" for line in unloaded)
    try:
        state = manager.start(checked.prepared, source="page")
    except runmgr.Busy as e:
        checked.refused = e.args[0]
        hint = "page.busy_chat_hint" if getattr(e.args[0], "key", "") == "run.busy_chat" else "page.busy_hint"
        return checked, None, f"{said}**{text('page.busy', lang)}** {html.escape(tr(e.args[0], lang))} {text(hint, lang)}"
    except runmgr.StartError as e:
        return checked, None, f"{said}**{text('page.could_not_start', lang)}** {html.escape(tr(e.args[0], lang))}"
    notes = [f"- {text('page.note', lang)}: {tr(n, lang)}" for n in state.notes]
    if state.master_port and state.master_port != checked.command.master_port:  # the shown command must be what runs
        checked.prepared.command = command.with_port(checked.command, state.master_port)
    if state.status == "failed":
        msg = f"**{text('page.could_not_start', lang)}** {html.escape(tr(state.message, lang))}"
    else:
        msg = text("page.started", lang, run=workspace.shown(state.run_dir), pid=state.launcher_pid or state.supervisor_pid or "-")
    return checked, state, said + "\n".join([msg, *notes])


def queue(values: dict, gpus: list[devices.Gpu], manager: runmgr.JobManager, port: int | None = None,
          lang: str = "en") -> tuple[Checked, str]:
    """Check as Start does, then put the job in the queue: the dispatcher starts it through the same launch path
    as soon as its devices and folder are free (maybe at once). Returns (check, message)."""
    checked = check(values, gpus, port)
    if not checked.ok:
        return checked, report_markdown(checked, lang)
    try:
        entry = dispatcher.enqueue(manager, checked.prepared, "page")
    except RegistryError as e:
        return checked, f"**{text('page.could_not_start', lang)}** {html.escape(tr(e.args[0], lang))}"
    q = Queue(manager.index)
    position = next((i for i, e in enumerate(q.entries(), 1) if e.id == entry.id), 1)
    message = text("page.queued", lang, id=entry.id, position=position, why=html.escape(words.clause(tr(entry.why, lang))))
    problem = q.problem()  # a damaged queue file was kept aside before this entry was written: say so
    return checked, message if problem is None else f"{message}\n\n**⚠ {html.escape(tr(problem, lang))}**"


def abort(manager: runmgr.JobManager, run_dir: str | None, lang: str = "en") -> str:
    if not run_dir:
        return text("page.nothing_to_abort", lang)
    if not manager.is_registered(run_dir):
        return text("page.not_registered", lang, run=run_dir)
    st = manager.abort(run_dir)
    if st is None:
        return text("page.no_record", lang, run=run_dir)
    if not st.active and not st.abort_requested:
        return text("page.not_running", lang, run=run_dir, status=words.status(st.status, lang))
    return text("page.stopping", lang, run=run_dir, grace=round(st.grace_s))


def save_and_stop(manager: runmgr.JobManager, run_dir: str | None, lang: str = "en") -> str:
    if not run_dir:
        return text("page.nothing_to_abort", lang)
    if not manager.is_registered(run_dir):
        return text("page.not_registered", lang, run=run_dir)
    st = manager.save_and_stop(run_dir)
    if st is None or not st.active:
        return text("page.not_running", lang, run=run_dir, status=words.status(st.status if st else "idle", lang))
    return text("page.saving", lang, run=run_dir)
