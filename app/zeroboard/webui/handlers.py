"""What the Train page's buttons do, as plain functions of plain values.

No gradio here: the page modules turn these results into component updates,
and the tests call these directly.  Form values arrive as ``{field: value}``
straight from the widgets (numbers as numbers, lists as comma-separated text,
mappings as JSON text) and go through the spec's own conversion.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import checks, command, datasets, devices, planner, runner, spec

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
    return {name: to_form_value(name, value) for name, value in spec.to_dict(job).items()}


def form_to_spec(values: dict) -> tuple[spec.JobSpec | None, dict[str, str]]:
    """Build the spec from widget values; fields the page does not show keep their defaults."""
    problems: dict[str, str] = {}
    data: dict = {}
    for name, value in values.items():
        if name not in spec.FIELDS:
            continue
        if value is None and spec.field_type(name) in (int, float):
            problems[name] = "is empty; enter a number"
            continue
        data[name] = value
    try:
        job = spec.from_dict(data)
    except spec.SpecError as e:
        return None, {**e.problems, **problems}
    return (None, problems) if problems else (job, {})


def uses_gpu(device_type: str, gpus: list[devices.Gpu]) -> bool:
    return device_type == "cuda" or (device_type == "auto" and bool(gpus))


def device_count(values: dict, gpus: list[devices.Gpu]) -> int:
    """How many GPUs (or CPU processes) the job will use, as the launcher will count them."""
    if uses_gpu(values.get("device_type", "auto"), gpus):
        return len(values.get("gpu_ids") or []) or len(gpus)
    try:
        return int(values.get("num_processes") or 0)
    except (TypeError, ValueError):
        return 0


# --- preview ---------------------------------------------------------------------------


@dataclass
class Checked:
    """The result of validating the form and building the command (what Preview shows)."""

    job: spec.JobSpec | None
    errors: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, str] = field(default_factory=dict)
    prepared: command.Prepared | None = None

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
    prepared = command.prepare(job, gpus, port=port)
    return Checked(job, dict(prepared.report.errors), dict(prepared.report.warnings), prepared)


def command_html(cmd: command.Command) -> str:
    """The shell rendering of the argv, with the DeepSpeed config path marked."""
    text = html.escape(cmd.shell())
    if cmd.deepspeed_config:
        path = html.escape(cmd.deepspeed_config)
        text = text.replace(path, f'<mark class="zb-ds">{path}</mark>')
    return f'<pre class="zb-cmd"># run from {html.escape(cmd.cwd)}\n{text}</pre>'


def deepspeed_json(cmd: command.Command | None) -> str:
    if cmd is None or not cmd.deepspeed_config:
        return ""
    path = Path(cmd.cwd) / cmd.deepspeed_config
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        return f"// cannot read {path}: {e.strerror}"


def report_markdown(checked: Checked, title: str = "") -> str:
    lines = [title] if title else []
    if checked.errors:
        lines.append("**Nothing was started. Fix these fields:**")
        lines += [f"- **`{k}`**: {html.escape(v)}" for k, v in checked.errors.items()]
    lines += [f"- note `{k}`: {html.escape(v)}" for k, v in checked.warnings.items()]
    return "\n".join(lines)


# --- memory plan -----------------------------------------------------------------------

# The fields the planner reads: the plan panel is redrawn when one of them changes.
PLAN_FIELDS = ("model_name_or_path", "finetuning_type", "deepspeed_stage", "offload", "deepspeed", "device_type",
               "gpu_ids", "num_processes", "per_device_train_batch_size", "cutoff_len", "precision",
               "gradient_checkpointing", "lora_rank", "lora_target")


def plan_markdown(values: dict, gpus: list[devices.Gpu], lang: str = "en") -> str:
    """The memory plan of the form as it stands, or which fields keep it from being planned (never raises)."""
    job, problems = form_to_spec(values)
    text = planner.panel(job, gpus, lang)
    if job is None and problems:
        text += "\n\n" + "\n".join(f"- `{k}`: {html.escape(v)}" for k, v in problems.items())
    return text


# --- save / load arguments -------------------------------------------------------------


def save_args(values: dict, path: str) -> str:
    job, problems = form_to_spec(values)
    if job is None:
        return "Not saved: " + "; ".join(f"{k}: {v}" for k, v in problems.items())
    if not path.strip():
        return "Not saved: give a file name, e.g. runs/saved/job.yaml"
    p = Path(path.strip())
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(spec.dump_yaml(job), encoding="utf-8")
    except OSError as e:
        return f"Not saved: cannot write {p}: {e.strerror}"
    return f"Saved the arguments to {p} (run it with: zeroboard train {p})"


def load_args(path: str) -> tuple[dict | None, str]:
    """Form values from a saved job file, or None and what is wrong (then the form stays as it is)."""
    try:
        job = spec.load_yaml(path.strip())
    except spec.SpecError as e:
        problems = "; ".join(f"{k}: {v}" for k, v in e.problems.items())
        return None, f"Nothing was loaded from {path}: {problems}"
    return spec_to_form(job), f"Loaded the arguments from {path}"


# --- dataset preview -------------------------------------------------------------------


def dataset_preview(dataset_dir: str, names: str, n: int = 3) -> str:
    """A few samples of each chosen dataset, as chat turns (Markdown)."""
    try:
        chosen = spec.coerce("dataset", names)
    except ValueError as e:
        return f"**Error** dataset: {e}"
    if checks.is_demo_data(dataset_dir):
        from ..demo import write_demo_data  # pure Python: writes the demo JSON files if missing

        write_demo_data(dataset_dir)
    out = []
    for name in chosen:
        try:
            src = datasets.resolve(name, dataset_dir)
            records = datasets.read_records(src.path)
            convs = datasets.to_conversations(src, records[:n])
        except datasets.DataError as e:
            out.append(f"**Error** {html.escape(name)}: {html.escape(str(e))}")
            continue
        out.append(f"**{html.escape(name)}** — {len(records)} samples in `{src.path}`, first {len(convs)}:")
        for conv in convs:
            out.append("\n".join(f"> **{m['role']}**: {html.escape(m['content'])}  " for m in conv))
    return "\n\n".join(out)


# --- start / abort ---------------------------------------------------------------------


def start(values: dict, gpus: list[devices.Gpu], manager: runner.JobManager,
          port: int | None = None) -> tuple[Checked, runner.JobState | None, str]:
    """Check, then launch exactly the command the check built. Returns (check, state, message)."""
    checked = check(values, gpus, port)
    if not checked.ok:
        return checked, None, report_markdown(checked)
    try:
        state = manager.start(checked.prepared)
    except runner.Busy as e:
        return checked, None, f"**Busy.** {e}"
    except (OSError, RuntimeError) as e:
        return checked, None, f"**Could not start:** {e}"
    notes = [f"- note: {n}" for n in state.notes]
    if state.master_port != checked.command.master_port:  # the shown command must be the one that runs
        checked.prepared.command = command.with_port(checked.command, state.master_port)
    msg = f"Started {state.run_dir} (launcher pid {state.launcher_pid})" if state.launcher_pid else (
        f"**Could not start:** {state.message}")
    return checked, state, "\n".join([msg, *notes])


def abort(manager: runner.JobManager, run_dir: str | None) -> str:
    if not run_dir:
        return "Nothing to abort: no run selected."
    st = manager.abort(run_dir)
    if st is None:
        return f"No job record in {run_dir}."
    if not st.active and not st.abort_requested:
        return f"{run_dir} is not running ({st.status})."
    return (f"Stopping {run_dir}: SIGTERM to the launcher so the ranks can save; SIGKILL after "
            f"{st.grace_s:.0f} s, then a check that no process is left.")
