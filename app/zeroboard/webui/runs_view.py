"""What the Runs page shows and does, as plain functions of plain values (no gradio; the tests call these).

The list: one row per run of the workspace (``runs.summary``), filtered and
paged (``PAGE_SIZE`` a page; the index keeps every run).  The comparison of
the selected runs: their curves (rows for the overlaid charts), the job
fields that differ, and the memory and speed per setting (``runs.compare``).
One run opened: its command, checkpoints, plan vs measured, outputs and the
end of its log.  Resume starts the run again from its last whole checkpoint
through the Train page's own launch path (``handlers.start``); Start again
hands its job to the Train form with a new output folder.  Delete and
archive go through ``runs.housekeeping`` after a confirmation.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import words, workspace
from ..job import devices, folders, record, spec
from ..planner.record import measured_vs_estimate
from ..runs import compare, housekeeping, outcome, summary
from ..runs.manager import JobManager
from ..words import text, tr
from . import attach, handlers, output_check
from .live import memory_vs_plan_markdown, size_text

PAGE_SIZE = 50
LOG_LINES = 30
ARCHIVED = "archived"  # the status filter's value for the archived runs


@dataclass
class RunsState:
    """One browser tab's Runs page: the list's page, the runs selected, the one opened, an action awaiting its OK."""

    page: int = 0
    selected: list[str] = field(default_factory=list)
    opened: str | None = None
    pending: tuple[str, str] | None = None  # (delete | archive, run)
    shown: str = ""  # what the list on screen shows (``shown_key``): a read that would show the same sends nothing


# --- the list ----------------------------------------------------------------------------


@dataclass
class Listing:
    rows: list[list[str]]
    runs: list[str]  # the run of each row
    count: str  # "12 of 150 runs · page 1 of 1"
    page: int
    choices: list[tuple[str, str]]  # every listed run (all pages), for the selection box


def status_choices(lang: str) -> list[tuple[str, str]]:
    from ..runs.state import STATUSES

    return ([(text("runs.all", lang), "")] + [(words.status(s, lang), s) for s in STATUSES]
            + [(text("runs.archived_only", lang), ARCHIVED)])


def _num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def setting(stage: str, offload: bool) -> str:
    return f"{stage} + offload" if offload else stage


def devices_text(kind: str, ids: list[int], slurm: dict | None = None) -> str:
    if slurm and slurm.get("job_id"):  # a Slurm job: its id, then its nodes (running) or its place in the queue
        where = slurm.get("nodes") or (f"#{slurm['position']}" if slurm.get("position") else "")
        return f"Slurm {slurm['job_id']}" + (f" · {where}" if where else "")
    return f"cpu × {len(ids) or 1}" if kind == "cpu" else "GPU " + ",".join(map(str, ids))


def row(s: summary.RunSummary, lang: str, now: float | None = None) -> list[str]:
    method = f"LoRA r{s.lora_rank}" if s.method == "lora" and s.lora_rank else (text("plan.finetuning.full", lang)
                                                                             if s.method == "full" else s.method)
    steps = f"{s.step if s.step is not None else '-'}/{s.total_steps or '?'}"
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started)) if s.started else "-"
    return [workspace.shown(s.run_dir), words.status(s.status, lang), workspace.shown(s.model) if s.model else "-",
            method.strip() or "-", setting(s.stage, s.offload), devices_text(s.device_kind, s.devices, s.slurm), steps,
            _num(s.loss), _num(s.eval_loss), "-" if s.tokens_per_sec is None else f"{s.tokens_per_sec:,.0f}",
            size_text(max(s.peaks)) if s.peaks else "-", summary.duration_text(s, lang, now), started]


def listing(manager: JobManager, filter_text: str = "", status: str = "", page: int = 0,
            lang: str = words.DEFAULT) -> Listing:
    """The runs matching the filter, one page of them as table rows (newest first)."""
    every = summary.summaries(manager)
    filter_text, status = filter_text or "", status or ""  # a tab not shown yet sends no values
    archived = status == ARCHIVED
    shown = [s for s in every if summary.matches(s, filter_text, "" if archived else status, archived)]
    pages = max(1, math.ceil(len(shown) / PAGE_SIZE))
    page = min(max(0, page), pages - 1)
    chunk = shown[page * PAGE_SIZE:(page + 1) * PAGE_SIZE]
    now = time.time()
    count = text("runs.count", lang, shown=len(shown), total=len(every), page=page + 1, pages=pages) if every \
        else text("runs.none", lang)
    problems = manager.problems()  # an index or a run's state that could not be read: said until dealt with
    if problems:
        count = "\n\n".join([*(f"**⚠ {html.escape(tr(p, lang))}**" for p in problems), count])
    return Listing([row(s, lang, now) for s in chunk], [s.run_dir for s in chunk], count, page,
                   [(workspace.shown(s.run_dir), s.run_dir) for s in every])


def shown_key(got: Listing, selected: list[str], lang: str) -> str:
    """A digest of the list as a page would show it: the rows, the count, the runs offered and selected."""
    text_of = json.dumps([lang, got.rows, got.count, got.page, got.choices, selected], ensure_ascii=False)
    return hashlib.blake2b(text_of.encode("utf-8"), digest_size=12).hexdigest()


def toggle(selected: list[str], run_dir: str) -> list[str]:
    return [r for r in selected if r != run_dir] if run_dir in selected else [*selected, run_dir]


def chosen(manager: JobManager, run_dirs: list[str]) -> list[summary.RunSummary]:
    """The summaries of these runs, in this order (runs no longer in the index are left out)."""
    by_dir = {s.run_dir: s for s in summary.summaries(manager)}
    return [by_dir[r] for r in run_dirs if r in by_dir]


# --- the comparison ----------------------------------------------------------------------


def names(run_dirs: list[str]) -> dict[str, str]:
    """A short name for each run in a chart's legend: its folder's name, or as the workspace names it when two
    runs share a folder name (a legend cuts long labels short)."""
    short = {r: Path(r).name for r in run_dirs}
    twice = {n for n in short.values() if list(short.values()).count(n) > 1}
    return {r: workspace.shown(r) if n in twice else n for r, n in short.items()}


def curve_rows(runs: list[summary.RunSummary]) -> dict[str, list[dict]]:
    """Long-format rows for the overlaid charts: ``{"loss" | "eval_loss" | "lr" | "margins" | "accuracies" | ...:
    [{"step", "value", "run"}]}``."""
    out: dict[str, list[dict]] = {"loss": [], "eval_loss": [], "lr": [], **{k: [] for k in compare.REWARDS}}
    named = names([s.run_dir for s in runs])
    for run_dir, series in compare.curves(runs).items():
        name = named[run_dir]
        for key, pts in series.items():
            out[key] += [{"step": float(step), "value": value, "run": name} for step, value in pts]
    return out


def _cell(value, lang: str = words.DEFAULT) -> str:
    if isinstance(value, bool):
        return text("runs.yes" if value else "runs.no", lang)
    if isinstance(value, (list, dict)) or value is None:
        value = json.dumps(value, ensure_ascii=False)
    return html.escape(str(value)).replace("|", "&#124;")


def diff_markdown(run_dirs: list[str], lang: str) -> str:
    d = compare.spec_diff(run_dirs)
    lines = [f"**{text('runs.diff_title', lang)}**", ""]
    lines += [f"- {html.escape(text('runs.diff_unreadable', lang, run=workspace.shown(r)))}" for r in d.unreadable]
    if not d.fields:
        return "\n".join([*lines, text("runs.diff_none", lang)])
    head = [text("runs.diff_field", lang)] + [f"`{_cell(workspace.shown(r))}`" for r in d.names]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([f"`{name}`", *[_cell(v, lang) for v in values]]) + " |" for name, values in d.fields]
    return "\n".join(lines)


def course_markdown(runs: list[summary.RunSummary], lang: str) -> str:
    """The table a course prints: per setting, measured peak per device, the plan, the same job planned on GPUs (runs
    of CPU processes), tokens/s, seconds per step; under it, where each setting keeps the states."""
    rows = compare.course_rows(runs)
    if not rows:
        return ""
    gpu = any(r.device_kind == "cuda" for r in rows)
    on_gpu = next((r.on_gpu for r in rows if r.on_gpu is not None), None)
    head = words.headers("course", lang)
    if on_gpu is not None:
        head.insert(7, text("runs.gpu_plan_head", lang, n=on_gpu.gpus, gpu=compare.REFERENCE_GPU_SHORT))
    lines = [f"**{text('runs.course_title_gpu' if gpu else 'runs.course_title', lang)}**", "",
             "| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * (len(head) - 3)]
    yes, no = text("runs.yes", lang), text("runs.no", lang)
    for r in rows:
        cells = [f"`{_cell(workspace.shown(r.run_dir))}`", r.stage, yes if r.offload else no, str(r.devices),
                 " · ".join(size_text(p) for p in r.peaks) if r.peaks else "-", size_text(r.planned) if r.planned else "-",
                 "-" if r.error is None else f"{100 * r.error:+.1f}%",
                 "-" if r.tokens_per_sec is None else f"{r.tokens_per_sec:,.0f}",
                 "-" if r.step_time is None else f"{r.step_time:.3f}"]
        if on_gpu is not None:
            cells.insert(7, size_text(r.on_gpu.peak) if r.on_gpu else "-")
        lines.append("| " + " | ".join(cells) + " |")
    what = text("runs.what.torch" if gpu else "runs.what.rss", lang)
    notes = [text("runs.course_note", lang, what=what)]
    if on_gpu is not None:
        notes.append(text("runs.gpu_note", lang, n=on_gpu.gpus, gpu=compare.REFERENCE_GPU_SHORT))
        if any(r.offload and r.on_gpu is not None for r in rows):
            notes.append(text("runs.host_offload", lang))
    lines += ["", *(f"<small>{html.escape(n)}</small>" for n in notes)]
    moved = moved_sentences(rows, lang)
    if moved:
        lines += ["", f"**{text('runs.moved_title', lang)}**", "", *(f"- {m}" for m in moved)]
    return "\n".join(lines)


def _listed(names: list[str], lang: str) -> str:
    """a, b and c (a、b和c)."""
    if len(names) < 2:
        return "".join(names)
    return text("runs.moved.comma", lang).join(names[:-1]) + text("runs.moved.and", lang) + names[-1]


def moved_sentence(name: str, fig: compare.GpuFigure, lang: str) -> str:
    """One setting in one sentence: which parts each GPU keeps whole, which are partitioned, which offloaded."""
    groups: dict[str, list[str]] = {}
    for part in compare.PARTS:
        groups.setdefault(fig.parts[part], []).append(text(f"plan.part.{part}", lang))
    parts = text("runs.moved.sep", lang).join(text(f"runs.moved.{where}", lang, what=_listed(names, lang), n=fig.gpus)
                                              for where, names in groups.items())
    formula = text("runs.moved.formula", lang, formula=fig.formula) if fig.formula and not fig.offload_optimizer else ""
    return text("runs.moved", lang, setting=name, formula=formula, parts=parts)


def moved_sentences(rows: list[compare.CourseRow], lang: str) -> list[str]:
    """One sentence per setting among the rows (in their order), from its plan per GPU."""
    out, seen = [], set()
    for r in rows:
        fig = compare.placed(r)
        if fig is None or (r.stage, r.offload) in seen:
            continue
        seen.add((r.stage, r.offload))
        out.append(moved_sentence(setting(r.stage, r.offload), fig, lang))
    return out


# the job fields that only place the same computation (where states live, how the ranks start)
PLACING = {"deepspeed_stage", "offload", "deepspeed", "launcher", "master_port"}


def curves_note(runs: list[summary.RunSummary], lang: str) -> str:
    """Under the charts: which loss curves coincide (and so draw as one line), and why."""
    series = {run_dir: c["loss"] for run_dir, c in compare.curves(runs).items()}
    groups = compare.coinciding(series)
    named = names(list(series))
    said = []
    for group in groups:
        differ = {name for name, _ in compare.spec_diff(group).fields}
        why = text("runs.curves_why_zero" if differ <= PLACING else "runs.curves_why", lang)
        if len(group) == len(series):
            said.append(text("runs.curves_same_all", lang, n=len(group), why=why))
        else:
            said.append(text("runs.curves_same", lang, runs=_listed([f"`{_cell(named[r])}`" for r in group], lang),
                             why=why))
    return "\n\n".join(said)


def rewards_markdown(runs: list[summary.RunSummary], lang: str) -> str:
    """Preference runs side by side at their last log: the rewards of the chosen and the rejected answers, the
    margin between them and how often the chosen one wins (empty when no run is a preference run)."""
    last = {r: compare.last_rewards(c) for r, c in compare.curves(runs).items()}
    if not any(last.values()):
        return ""
    head = [text("runs.diff_field", lang)] + [f"`{_cell(workspace.shown(r))}`" for r in last]
    lines = ["", "", f"**{text('runs.rewards_title', lang)}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in compare.REWARDS:
        cells = [_num((v or {}).get(key)) if (v or {}).get(key) is not None else "-" for v in last.values()]
        lines.append("| " + " | ".join([words.label(f"series.{key}", lang), *cells]) + " |")
    return "\n".join(lines)


# --- one run -----------------------------------------------------------------------------


def detail_markdown(manager: JobManager, run_dir: str, lang: str) -> str:
    """The opened run: status, command, checkpoints, plan vs measured, outputs, the end of its log."""
    st = manager.state(run_dir)
    if st is None:
        return text("runs.not_registered", lang, run=run_dir)
    shown = workspace.shown(run_dir)
    parts = [f"### {html.escape(text('runs.detail', lang, run=shown))}",
             f'<span class="zb-badge zb-{st.status}">{html.escape(words.status(st.status, lang))}</span> '
             + html.escape(tr(st.message, lang) if st.message != st.status else "")]
    if st.slurm.get("job_id"):
        parts.append(html.escape(text("runs.slurm", lang, job_id=st.slurm["job_id"], state=st.slurm.get("state") or "-",
                                      position=st.slurm.get("position") or "-", nodes=st.slurm.get("nodes") or "-")))
    view = attach.run_view(run_dir)
    if view is not None:
        parts.append(handlers.command_html(view["command"], lang))
    done, _ = folders.checkpoints(st.output)
    parts.append(text("runs.checkpoints", lang, names=", ".join(p.name for p in done)) if done
                 else text("runs.no_checkpoints", lang))
    mem = memory_vs_plan_markdown(measured_vs_estimate(run_dir, st.output), lang)
    if mem:
        parts.append(mem)
    saved = output_check.view(run_dir, st.status, lang)
    if saved.visible:
        parts.append(f"**{html.escape(words.label('saved', lang))}**\n\n{_pre(shown_paths(saved.saved, run_dir))}")
    log, ws = outcome.tail_lines(Path(run_dir) / record.LOG_FILE, LOG_LINES), workspace.current()
    parts.append(f"**{html.escape(text('runs.log_tail', lang, n=LOG_LINES))}**\n\n"
                 + _pre("\n".join(workspace.shown_log(line, ws) for line in log) or text("runs.no_log", lang)))
    return "\n\n".join(parts)


def _pre(body: str) -> str:
    """Text kept as it is (a log, a listing), in a plain block: no copy button with gradio's English label."""
    return f'<pre class="zb-pre">{html.escape(body)}</pre>'


def shown_paths(body: str, *paths: str | None) -> str:
    """Text that names these folders, each as the workspace names it (``runs/demo``)."""
    for p in sorted((str(p) for p in paths if p), key=len, reverse=True):
        body = body.replace(p, workspace.shown(p))
    return body


def resume(manager: JobManager, gpus: list[devices.Gpu], run_dir: str, lang: str, port: int | None = None):
    """Start the run again from its last whole checkpoint, through the Train page's launch path.

    Returns (form values of the resumed job or None, the Train page's message, the new state or None)."""
    entry = manager.registry.entry(run_dir)
    if entry is None:
        return None, text("runs.not_registered", lang, run=run_dir), None
    if entry.get("archived"):
        return None, text("runs.restore_first", lang, run=workspace.shown(run_dir)), None
    job = _job(run_dir)
    if job is None:
        return None, text("runs.no_job", lang, run=workspace.shown(run_dir), file=record.SPEC_FILE), None
    st = manager.state_of(entry)
    if folders.last_checkpoint(st.output) is None:
        return None, text("runs.no_checkpoint", lang, run=workspace.shown(run_dir)), None
    job.resume, job.output_dir = True, workspace.shown(run_dir)
    values = handlers.spec_to_form(job)
    checked, state, message = handlers.start(_drop_gpu_ids(values, gpus), gpus, manager, port=port, lang=lang)
    return values, message, state


def start_again(run_dir: str, lang: str) -> tuple[dict | None, str]:
    """The run's requested job as Train form values, in a new output folder (nothing is started)."""
    job = _job(run_dir)
    if job is None:
        return None, text("runs.no_job", lang, run=workspace.shown(run_dir), file=record.SPEC_FILE)
    out = folders.free_dir_name(Path(run_dir))
    job.resume, job.output_dir = False, workspace.shown(out)
    return handlers.spec_to_form(job), text("runs.loaded_again", lang, run=workspace.shown(run_dir), out=job.output_dir)


def _job(run_dir: str) -> spec.JobSpec | None:
    try:
        return spec.load_yaml(Path(run_dir) / record.SPEC_FILE)
    except spec.SpecError:
        return None


def _drop_gpu_ids(values: dict, gpus: list[devices.Gpu]) -> dict:
    return values if gpus else {k: v for k, v in values.items() if k != "gpu_ids"}


# --- delete and archive ----------------------------------------------------------------------


def files_size(path: Path, rels: list[str]) -> int:
    """The bytes of these files (paths relative to ``path``; folders count nothing)."""
    total = 0
    for rel in rels:
        try:
            st = os.lstat(path / rel)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            total += st.st_size
    return total


def confirm_text(manager: JobManager, action: str, run_dir: str, lang: str) -> tuple[str, bool]:
    """What the confirmation asks, or why the action is refused at once: (markdown, whether to ask)."""
    why = housekeeping.why_not(manager, run_dir, action) if action != "restore" else None
    if why is not None:
        return html.escape(shown_paths(tr(why, lang), run_dir)), False
    shown = workspace.shown(run_dir)
    if action == "delete":
        mine, left = housekeeping.split(manager, run_dir) if Path(run_dir).is_dir() else ([], [])
        asked = text("runs.confirm_delete", lang, run=shown, size=size_text(files_size(Path(run_dir), mine)))
        return asked + ("\n\n" + html.escape(text("runs.confirm_delete_left", lang, files=", ".join(left[:6])
                                                    + (", …" if len(left) > 6 else ""))) if left else ""), True
    return text("runs.confirm_archive", lang, run=shown, to=workspace.shown(housekeeping.archive_path(Path(run_dir)))), True


def act(manager: JobManager, action: str, run_dir: str, lang: str) -> tuple[str, str | None]:
    """Do the confirmed action. Returns (message, the run's folder afterwards: None once deleted)."""
    try:
        if action == "delete":
            return shown_paths(tr(housekeeping.delete(manager, run_dir), lang), run_dir), None
        if action == "archive":
            msg, new = housekeeping.archive(manager, run_dir)
        else:
            msg, new = housekeeping.restore(manager, run_dir)
    except housekeeping.Refused as e:
        return shown_paths(tr(e.args[0], lang), run_dir), run_dir
    return shown_paths(tr(msg, lang), run_dir, new), new
