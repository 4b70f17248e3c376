"""``zeroboard preview | validate | plan | convert-lf``: a job checked, its exact command, its memory plan, a
LLaMA-Factory file written as a job file; nothing is started."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import files, planner, workspace
from ..job import cmdline, command, devices, lfcompat, spec as specmod
from ..planner import report
from ..runs import probes
from ..runs.launch import prepare_launch
from ..words import default_lang, text, tr
from .args import path


def job_arguments(s, lang: str) -> None:
    s.add_argument("job", nargs="?", type=path, help=text("cli.job_help", lang, demo=specmod.DEMO_JOB))
    s.add_argument("--set", action="append", metavar="NAME=VALUE", help=text("cli.set_help", lang))
    s.add_argument("--allow-path", action="append", default=[], metavar="PATH[:rw]", type=path, help=text("cli.allow_help", lang))


def load(args, notes: dict | None = None) -> specmod.JobSpec | None:
    """The job of the command line (file + --set), or None after printing why it cannot be used; ``notes`` collects
    what the file's LLaMA-Factory keys say."""
    workspace.allow(args.allow_path)
    try:
        return specmod.apply_overrides(specmod.load_job(args.job, notes), args.set or [])
    except specmod.SpecError as e:
        lang = default_lang()
        print(text("cli.job_unusable", lang), file=sys.stderr)
        print("\n".join(f"  {k}: {tr(v, lang)}" for k, v in e.problems.items()), file=sys.stderr)
        return None


def launch_or_explain(args) -> command.Prepared | None:
    """The launch entry point on the command line's job; print every problem by field (and the notes). None when
    nothing may start."""
    notes: dict = {}
    job = load(args, notes)
    if job is None:
        return None
    lang = default_lang()
    prepared = prepare_launch(job)
    for k, v in [*notes.items(), *prepared.report.warnings.items()]:
        print(text("cli.note", lang, field=k, text=tr(v, lang)), file=sys.stderr)
    if not prepared.report.ok:
        print(text("cli.nothing_started", lang), file=sys.stderr)
        print("\n".join(f"  {k}: {tr(v, lang)}" for k, v in prepared.report.errors.items()), file=sys.stderr)
        return None
    return prepared


def cmd_preview(args) -> int:
    prepared = launch_or_explain(args)
    if prepared is None:
        return 2
    cmd = prepared.command
    if args.json:
        print(json.dumps(cmd.to_dict(), indent=2, ensure_ascii=False))
        return 0
    lang, full = default_lang(), args.full_paths
    print(cmdline.run_from(cmd.cwd, lang, full))
    if cmd.deepspeed_config:
        print(text("cli.ds_config", lang, path=cmdline.shown_arg(cmd.deepspeed_config, full)))
    if cmd.script is not None:  # a Slurm job: the script, then the line that submits it
        print(text("cli.sbatch_script", lang, path=cmdline.shown_arg(cmd.argv[-1], full)))
        print(cmd.script)
    print(cmdline.text(cmd.env, cmd.argv, full))
    return 0


def cmd_validate(args) -> int:
    if launch_or_explain(args) is None:
        return 2
    print(text("cli.ok", default_lang()))
    return 0


def progress(lang: str):
    """The probe phase's lines on stderr: each setting as it starts, then what it measured."""
    def say_it(i, n, choice, probe, left):
        name = report.choice_label(choice, lang, batch=False)
        if probe is None:
            line = text("plan.probe.progress", lang, setting=name, mb=choice.micro_batch, acc=choice.accumulation, i=i,
                        n=n, left=round(max(0.0, left)))
        else:
            line = text("plan.probe.done", lang, setting=name, mb=choice.micro_batch, acc=choice.accumulation,
                        result=tr(probes.result_words(probe), lang))
        print(line, file=sys.stderr, flush=True)
    return say_it


def traced(call, lang: str):
    """``call(trace)`` from the kept trace, or tracing the model's own code first (once, with a word on stderr)."""
    try:
        return call("cache")
    except planner.traces.NotTraced:
        print(text("plan.trace_waiting", lang), file=sys.stderr, flush=True)
        return call("wait")


def cmd_plan(args) -> int:
    """Exit status: 0 fits (or no device to compare with), 1 does not fit, 2 the job or model cannot be planned."""
    job = load(args)
    if job is None:
        return 2
    lang = args.lang or default_lang()
    try:
        plan = traced(lambda trace: planner.estimate(job, trace=trace), lang)
        fitted = traced(lambda trace: probes.fit_measured(job, devices.detect_gpus(), args.probe_budget,
                                                         progress(lang), trace), lang) if args.fit else None
    except planner.PlanError as e:
        print(text("cli.plan_error", lang, why=tr(e.args[0], lang)), file=sys.stderr)
        return 2
    if fitted is not None:
        choices, measured, pick, source = fitted
        fitting = [c for c in choices if c.fits is not False]
        if args.json:
            print(json.dumps([{**c.overrides(), "peak_bytes": c.plan.peak_bytes, "needed_bytes": c.plan.needed_bytes,
                               "fits": c.fits, "tight": c.tight, "step_s": round(c.step_s, 4),
                               "tokens_per_s": round(c.tokens_per_s), "mostly": c.mostly,
                               "measured": str((measured or {}).get(id(c), "")) or None} for c in choices],
                             indent=2))
        else:
            print(report.fit_markdown(choices, lang, measured=measured, pick=pick, source=source).replace("**", ""))
        return 0 if fitting else 1
    print(json.dumps(plan.to_dict(), indent=2, default=str) if args.json else report.plain(plan, lang))
    return 1 if plan.fits is False else 0


def cmd_convert_lf(args) -> int:
    """A LLaMA-Factory training YAML as the equivalent job file: printed, or written to a new file (never over one)."""
    lang = default_lang()
    try:
        data = specmod.read_mapping(Path(args.file).read_text(encoding="utf-8"), args.file)
        job = specmod.from_dict(data)
    except (OSError, UnicodeDecodeError) as e:
        print(text("spec.cannot_read", lang, path=args.file, why=getattr(e, "strerror", None) or str(e)), file=sys.stderr)
        return 2
    except specmod.SpecError as e:
        print(text("lf.convert_failed", lang, path=args.file), file=sys.stderr)
        print("\n".join(f"  {k}: {tr(v, lang)}" for k, v in e.problems.items()), file=sys.stderr)
        return 2
    read = lfcompat.translate(data, specmod.FIELDS)
    out = lfcompat.converted_yaml(specmod.to_dict(job), read, data, Path(args.file).name, lang)
    if not args.out:
        print(out, end="")
        return 0
    target = Path(args.out)
    if target.exists():
        print(text("lf.convert_exists", lang, path=args.out), file=sys.stderr)
        return 2
    files.write_text_atomic(target, out)
    print(text("lf.convert_written", lang, path=args.out), file=sys.stderr)
    return 0


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("preview", help=text("cli.preview_help", lang))
    job_arguments(s, lang)
    s.add_argument("--json", action="store_true")
    s.add_argument("--full-paths", action="store_true", help=text("cli.full_paths_help", lang))
    s.set_defaults(fn=cmd_preview)
    s = sub.add_parser("validate", help=text("cli.validate_help", lang))
    job_arguments(s, lang)
    s.set_defaults(fn=cmd_validate)
    s = sub.add_parser("plan", help=text("cli.plan_help", lang))
    job_arguments(s, lang)
    s.add_argument("--json", action="store_true")
    s.add_argument("--lang", choices=["en", "zh"], help=text("cli.lang_help", lang))
    s.add_argument("--fit", action="store_true", help=text("cli.fit_help", lang))
    s.add_argument("--probe-budget", type=float, default=probes.BUDGET_S, metavar="SECONDS",
                   help=text("cli.probe_budget_help", lang, s=probes.BUDGET_S))
    s.set_defaults(fn=cmd_plan)
    s = sub.add_parser("convert-lf", help=text("lf.convert_help", lang))
    s.add_argument("file", help=text("lf.convert_file_help", lang))
    s.add_argument("-o", "--out", help=text("lf.convert_out_help", lang))
    s.set_defaults(fn=cmd_convert_lf)
