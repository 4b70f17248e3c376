"""``zeroboard check | inspect | consolidate | merge``: what a run saved, made loadable, reloaded and asked."""

from __future__ import annotations

import json
import sys

from ..outputs import export, reload
from ..outputs.inspect import OutputError, inspect
from ..words import default_lang, text, tr
from .args import path


def _fail(cmd: str, e: Exception, lang: str) -> int:
    print(f"{cmd}: {tr(e.args[0] if e.args else str(e), lang)}", file=sys.stderr)
    return 1


def cmd_check(args) -> int:
    """``zeroboard check RUN_DIR [--prompt Q]... [--no-base] [--json]``."""
    lang = default_lang()
    try:
        report = reload.check(args.run_dir, args.prompt, with_base=not args.no_base)
    except (OutputError, OSError) as e:
        if args.json:
            print(json.dumps({"error": str(e.args[0] if e.args else e)}))
            return 1
        return _fail("check", e, lang)
    print(json.dumps(report, ensure_ascii=False, indent=2) if args.json else reload.check_text(report, lang))
    return 0


def cmd_inspect(args) -> int:
    lang = default_lang()
    try:
        ins = inspect(args.run_dir)
    except OutputError as e:
        return _fail("inspect", e, lang)
    print(json.dumps(ins.to_dict(), indent=2, ensure_ascii=False) if args.json else ins.text(lang))
    return 0


def cmd_consolidate(args) -> int:
    lang = default_lang()
    try:
        info = export.consolidate(args.path, args.out)
    except OutputError as e:
        return _fail("consolidate", e, lang)
    print(json.dumps(info, indent=2) if args.json else
          text("cli.consolidated", lang, path=info["path"], n=f"{info['parameters']:,}", src=info["from"],
               step=info["step"], copied=", ".join(info["copied"])))
    return 0


def cmd_merge(args) -> int:
    lang = default_lang()
    try:
        info = export.merge(args.path, args.out, args.base)
    except OutputError as e:
        return _fail("merge", e, lang)
    print(json.dumps(info, indent=2) if args.json else
          text("cli.merged", lang, path=info["path"], base=info["base_model"], adapter=info["adapter"],
               n=f"{info['parameters']:,}"))
    if info.get("note") and not args.json:
        print(tr(info["note"], lang), file=sys.stderr)
    return 0


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("check", help=text("cli.check_help", lang))
    s.add_argument("run_dir", type=path)
    s.add_argument("--prompt", action="append", help=text("cli.prompt_help", lang))
    s.add_argument("--no-base", action="store_true", help=text("cli.no_base_help", lang))
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_check)
    s = sub.add_parser("inspect", help=text("cli.inspect_help", lang))
    s.add_argument("run_dir", type=path)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_inspect)
    s = sub.add_parser("consolidate", help=text("cli.consolidate_help", lang))
    s.add_argument("path", type=path, help=text("cli.consolidate_path_help", lang))
    s.add_argument("out", type=path, help=text("cli.out_help", lang))
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_consolidate)
    s = sub.add_parser("merge", help=text("cli.merge_help", lang))
    s.add_argument("path", type=path, help=text("cli.merge_path_help", lang))
    s.add_argument("out", type=path, help=text("cli.out_help", lang))
    s.add_argument("--base", type=path, help=text("cli.base_help", lang))
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_merge)
