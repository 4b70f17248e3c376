"""``zeroboard runs [compare A B ... | show A]``: this workspace's runs, from the terminal as on the Runs page.

- ``zeroboard runs [--status S] [--filter WORDS] [--archived] [--json]``: every run (the index keeps them all),
  newest first: status, started, setting, devices, steps, losses, tokens/s, peak per device, duration, folder.
- ``zeroboard runs compare A B ... [--json]``: the job fields that differ, then per run the measured peak per
  device, the plan's figure, tokens/s and seconds per step (the course's stage none / 2 / 3 / offload table).
- ``zeroboard runs show A [--json]``: one run in full: its summary, job, command, checkpoints, plan vs measured
  and what it saved.

A run is named by its folder, or by a part of its name that only one run has.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import workspace
from ..job import folders, record
from ..outputs.inspect import OutputError, inspect
from ..planner.record import measured_vs_estimate
from ..runs import compare, summary
from ..runs.manager import JobManager
from ..runs.state import STATUSES
from ..words import default_lang, headers, status as status_word, text, tr
from .args import path


def _size(n: int | None) -> str:
    return "-" if not n else f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _num(x: float | None, fmt: str = ".4f") -> str:
    return "-" if x is None else format(x, fmt)


def _setting(s) -> str:
    return f"{s.stage} + offload" if s.offload else s.stage


def _table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(head), *(line(r) for r in rows)])


def resolve(mgr: JobManager, name: str, lang: str) -> str | None:
    """The run named on the command line: its folder, or the only run whose folder's name contains ``name``."""
    runs = mgr.run_dirs()
    wanted = workspace.current().path(name)
    exact = [r for r in runs if Path(r).resolve() == wanted]
    if exact:
        return exact[0]
    found = [r for r in runs if Path(r).name == name] or [r for r in runs if name in workspace.shown(r)]
    if len(found) == 1:
        return found[0]
    if not found:
        print(text("cli.not_a_run", lang, run=name), file=sys.stderr)
    else:
        print(text("cli.runs_ambiguous", lang, run=name, matches=", ".join(workspace.shown(r) for r in found[:6])),
              file=sys.stderr)
    return None


def cmd_list(args) -> int:
    """The runs.  Exits 1 while the runs index cannot be read, or a damaged index or run state kept aside is there
    (the message says where; remove the copy once looked at)."""
    lang = default_lang()
    mgr = JobManager()
    every = summary.summaries(mgr)
    problems = mgr.problems()
    for problem in problems:
        print(tr(problem, lang), file=sys.stderr)
    code = 1 if problems else 0
    shown = [s for s in every if summary.matches(s, args.filter or "", args.status or "", bool(args.archived))]
    if args.json:
        print(json.dumps([s.to_json() for s in shown], indent=2, ensure_ascii=False))
        return code
    if not every:
        print(text("cli.no_runs", lang))
        return code
    now = time.time()
    rows = [[workspace.shown(s.run_dir), status_word(s.status, lang), workspace.shown(s.model) if s.model else "-",
             f"LoRA r{s.lora_rank}" if s.lora_rank else s.method or "-", _setting(s),
             f"cpu x{len(s.devices) or 1}" if s.device_kind == "cpu" else "GPU " + ",".join(map(str, s.devices)),
             f"{s.step if s.step is not None else '-'}/{s.total_steps or '?'}", _num(s.loss), _num(s.eval_loss),
             _num(s.tokens_per_sec, ",.0f"), _size(max(s.peaks) if s.peaks else None), summary.duration_text(s, lang, now),
             time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started)) if s.started else "-"] for s in shown]
    head = headers("runs", lang)
    if rows:
        print(_table(head, rows))
    print(text("cli.runs_listed", lang, shown=len(shown), total=len(every)))
    return code


def cmd_compare(args) -> int:
    lang = default_lang()
    mgr = JobManager()
    names = [resolve(mgr, r, lang) for r in args.runs]
    if None in names:
        return 1
    by_dir = {s.run_dir: s for s in summary.summaries(mgr)}
    runs = [by_dir[r] for r in names]
    diff = compare.spec_diff(names)
    rows = compare.course_rows(runs)
    if args.json:
        print(json.dumps({"differ": {name: values for name, values in diff.fields}, "runs": names,
                          "course": [r.__dict__ for r in rows]}, indent=2, ensure_ascii=False, default=str))
        return 0
    print(text("runs.diff_title", lang))
    if diff.fields:
        print(_table([text("runs.diff_field", lang), *(workspace.shown(r) for r in names)],
                     [[name, *(json.dumps(v, ensure_ascii=False) for v in values)] for name, values in diff.fields]))
    else:
        print(text("runs.diff_none", lang))
    print()
    print(text("runs.course_title", lang))
    yes, no = text("runs.yes", lang), text("runs.no", lang)
    print(_table(headers("course", lang), [[workspace.shown(r.run_dir), r.stage, yes if r.offload else no, str(r.devices),
                                            " / ".join(_size(p) for p in r.peaks) or "-", _size(r.planned),
                                            "-" if r.error is None else f"{100 * r.error:+.1f}%",
                                            _num(r.tokens_per_sec, ",.0f"), _num(r.step_time, ".3f")] for r in rows]))
    return 0


def show_report(mgr: JobManager, run: str) -> dict:
    """Everything about one run, as plain values (``zeroboard runs show --json``)."""
    by_dir = {s.run_dir: s for s in summary.summaries(mgr)}
    s = by_dir[run]
    try:
        command = json.loads((Path(run) / record.COMMAND_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        command = None
    try:
        outputs = inspect(run).to_dict()
    except OutputError as e:
        outputs = {"error": str(e)}
    done, partial = folders.checkpoints(Path(s.output or run))
    return {"summary": s.to_json(), "job": summary.job_values(run), "command": command,
            "checkpoints": [p.name for p in done], "incomplete_checkpoints": [p.name for p in partial],
            "memory_vs_plan": measured_vs_estimate(run, s.output or run), "outputs": outputs}


def cmd_show(args) -> int:
    lang = default_lang()
    mgr = JobManager()
    run = resolve(mgr, args.run, lang)
    if run is None:
        return 1
    report = show_report(mgr, run)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
        return 0
    s = report["summary"]
    print(f"{workspace.shown(run)}: {status_word(s['status'], lang)}, {s['step']}/{s['total_steps']}, "
          f"loss {_num(s['loss'])}, {_setting(summary.RunSummary(**s))}")
    if report["command"]:
        print(f"$ {report['command']['shell']}")
    print(text("runs.checkpoints", lang, names=", ".join(report["checkpoints"])) if report["checkpoints"]
          else text("runs.no_checkpoints", lang))
    for r in (report["memory_vs_plan"] or {}).get("ranks", []):
        print(f"rank {r['rank']}: {_size(r.get('measured_bytes'))} / {_size(report['memory_vs_plan']['estimate_bytes'])}")
    try:
        print(inspect(run).text(lang))
    except OutputError:
        pass
    return 0


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("runs", help=text("cli.runs_help", lang))
    s.add_argument("--status", choices=STATUSES, help=text("cli.runs_status_help", lang))
    s.add_argument("--filter", default="", metavar="WORDS", help=text("cli.runs_filter_help", lang))
    s.add_argument("--archived", action="store_true", help=text("cli.runs_archived_help", lang))
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_list)
    actions = s.add_subparsers(dest="runs_action", required=False)
    c = actions.add_parser("compare", help=text("cli.runs_compare_help", lang))
    c.add_argument("runs", nargs="+", metavar="RUN", type=path, help=text("cli.runs_arg_help", lang))
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_compare)
    w = actions.add_parser("show", help=text("cli.runs_show_help", lang))
    w.add_argument("run", metavar="RUN", type=path, help=text("cli.runs_arg_help", lang))
    w.add_argument("--json", action="store_true")
    w.set_defaults(fn=cmd_show)
