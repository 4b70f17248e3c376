"""``zeroboard`` command line: preview, train, validate, demo-model, presets (and webui)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from . import command, planner, presets, spec as specmod
from .demo import write_demo_data
from .spec import DEMO_DATA_DIR, DEMO_MODEL

DEMO_JOB = "examples/demo.yaml"


def load_job(path: str | None) -> specmod.JobSpec:
    if path is None:
        if Path(DEMO_JOB).is_file():
            return specmod.load_yaml(DEMO_JOB)
        return specmod.JobSpec()
    return specmod.load_yaml(path)


def apply_overrides(job: specmod.JobSpec, pairs: list[str]) -> specmod.JobSpec:
    data = specmod.to_dict(job)
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            raise specmod.SpecError({key: "overrides look like name=value"})
        data[key.strip()] = value
    return specmod.from_dict(data)


def _prepare(args) -> command.Prepared | None:
    try:
        job = apply_overrides(load_job(args.job), args.set or [])
    except specmod.SpecError as e:
        print(f"The job file cannot be used:\n{e}", file=sys.stderr)
        return None
    prepared = command.prepare(job)
    if prepared.report.warnings:
        print("\n".join(f"note: {k}: {v}" for k, v in prepared.report.warnings.items()), file=sys.stderr)
    if not prepared.report.ok:
        print("Nothing was started. Fix these fields:", file=sys.stderr)
        print("\n".join(f"  {k}: {v}" for k, v in prepared.report.errors.items()), file=sys.stderr)
        return None
    return prepared


def cmd_preview(args) -> int:
    prepared = _prepare(args)
    if prepared is None:
        return 2
    cmd = prepared.command
    if args.json:
        print(json.dumps(cmd.to_dict(), indent=2))
        return 0
    print(f"# run from {cmd.cwd}")
    if cmd.deepspeed_config:
        print(f"# DeepSpeed config: {cmd.deepspeed_config}")
    print(cmd.shell())
    return 0


def cmd_validate(args) -> int:
    prepared = _prepare(args)
    if prepared is None:
        return 2
    print("ok")
    return 0


def run_job(prepared: command.Prepared) -> int:
    """Run the prepared argv in the foreground; Ctrl-C stops the whole job gracefully."""
    cmd = prepared.command
    out = Path(prepared.spec.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.json").write_text(json.dumps(cmd.to_dict(), indent=2) + "\n")
    (out / "job.requested.yaml").write_text(specmod.dump_yaml(prepared.spec), encoding="utf-8")
    planner.record_plan(prepared.spec, out)  # plan.json: the estimate, next to what the trainer measures
    print(f"$ {cmd.shell()}", flush=True)
    proc = subprocess.Popen(cmd.argv, env=cmd.full_env(), cwd=cmd.cwd, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()


def cmd_train(args) -> int:
    prepared = _prepare(args)
    if prepared is None:
        return 2
    return run_job(prepared)


def cmd_demo_model(args) -> int:
    from .demo import build_demo_model

    write_demo_data(args.data_dir)
    if Path(args.model_dir, "config.json").is_file() and not args.force:
        print(f"demo model already in {args.model_dir} (use --force to rebuild)")
        return 0
    out = build_demo_model(args.model_dir, args.data_dir)
    print(f"built the demo model in {out}")
    return 0


def cmd_presets(args) -> int:
    report = presets.write_presets(args.dir)
    print(report.message() or f"presets in {args.dir} are up to date")
    return 0


def cmd_webui(args) -> int:
    from .webui.app import serve

    return serve(host=args.host, port=args.port)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="zeroboard", description="Fine-tune causal LMs with DeepSpeed ZeRO.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def job_cmd(name: str, fn, help: str):
        s = sub.add_parser(name, help=help)
        s.add_argument("job", nargs="?", help=f"job YAML (default: {DEMO_JOB}, the offline demo)")
        s.add_argument("--set", action="append", metavar="NAME=VALUE", help="override one job field")
        s.set_defaults(fn=fn)
        return s

    job_cmd("preview", cmd_preview, "print the exact command a job runs").add_argument("--json", action="store_true")
    job_cmd("train", cmd_train, "run a job in the foreground (same argv as the preview)")
    job_cmd("validate", cmd_validate, "check a job without starting it")
    plan = job_cmd("plan", planner.cmd_plan, "estimate per-device memory for the chosen stage and offload")
    plan.add_argument("--json", action="store_true")
    plan.add_argument("--lang", choices=["en", "zh"], help="words of the plan (default: $ZEROBOARD_LANG or en)")
    from .outputs import add_commands

    add_commands(sub)  # check, inspect, consolidate, merge
    from .screenshots import add_command as add_screenshots

    add_screenshots(sub)
    s = sub.add_parser("demo-model", help="build the tiny offline demo model and data")
    s.add_argument("--model-dir", default=DEMO_MODEL)
    s.add_argument("--data-dir", default=DEMO_DATA_DIR)
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_demo_model)
    s = sub.add_parser("presets", help="write the DeepSpeed presets (kept if you edited them)")
    s.add_argument("--dir", default=str(command.cache_dir()))
    s.set_defaults(fn=cmd_presets)
    s = sub.add_parser("webui", help="serve the web dashboard")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=7860)
    s.set_defaults(fn=cmd_webui)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
