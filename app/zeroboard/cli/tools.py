"""``zeroboard demo-model | presets | build-ops | webui | screenshots``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from .. import workspace
from ..data.demo import write_demo_data
from ..job import presets
from ..job.placement import cache_dir
from ..job.spec import DEMO_DATA_DIR, DEMO_MODEL, LESSON_MODEL, VISION_DATA_DIR, VISION_MODEL
from ..words import default_lang, text
from .args import path

SCREENSHOT_TOOL = Path("tools") / "screenshots.py"  # in a source checkout; it needs playwright (make screenshots)


def cmd_demo_model(args) -> int:
    from ..training.demo_model import build_demo_model, build_lesson_model

    lang = default_lang()
    write_demo_data(args.data_dir)
    model_dir = args.model_dir or (LESSON_MODEL if args.lesson else VISION_MODEL if args.vision else DEMO_MODEL)
    if args.vision:  # its pictures, into a folder of their own (the demo's data stays as it is)
        from ..training.demo_vision import build_vision_model as build_vision, write_vision_data

        write_vision_data(VISION_DATA_DIR)
    if Path(model_dir, "config.json").is_file() and not args.force:
        print(text("cli.demo_there", lang, path=model_dir))
        return 0
    started = time.monotonic()
    build = build_lesson_model if args.lesson else build_vision if args.vision else build_demo_model
    out = build(model_dir, args.data_dir)
    print(text("cli.demo_built", lang, path=str(out), seconds=f"{time.monotonic() - started:.0f}"))
    return 0


def cmd_presets(args) -> int:
    report = presets.write_presets(args.dir)
    print(report.message() or text("cli.presets_current", default_lang(), path=args.dir))
    return 0


def cmd_build_ops(args) -> int:
    from ..training import ops

    return ops.build_all(args.device or ops.machine_kind(), default_lang(), only=args.op)


def cmd_webui(args) -> int:
    from .. import webui

    with webui.without_arrow():  # from before gradio (and pandas with it) is imported until the server stops
        from ..webui.app import serve

        workspace.allow(args.allow_path)
        return serve(host=args.host, port=args.port)


def cmd_screenshots(args) -> int:
    """The documentation screenshots: a tool of the source checkout, not of the installed package."""
    here = [Path.cwd() / SCREENSHOT_TOOL, Path(__file__).resolve().parents[3] / SCREENSHOT_TOOL]
    tool = next((p for p in here if p.is_file()), None)
    if tool is None:
        print(text("cli.no_screenshot_tool", default_lang(), path=str(SCREENSHOT_TOOL)), file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(tool), *args.rest])


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("demo-model", help=text("cli.demo_help", lang))
    s.add_argument("--model-dir", default=None, type=path)
    s.add_argument("--data-dir", default=DEMO_DATA_DIR, type=path)
    s.add_argument("--force", action="store_true")
    s.add_argument("--lesson", action="store_true", help=text("cli.demo_lesson_help", lang, path=LESSON_MODEL))
    s.add_argument("--vision", action="store_true", help=text("cli.demo_vision_help", lang, path=VISION_MODEL,
                                                               data=VISION_DATA_DIR))
    s.set_defaults(fn=cmd_demo_model)
    s = sub.add_parser("presets", help=text("cli.presets_help", lang))
    s.add_argument("--dir", default=str(cache_dir()), type=path)
    s.set_defaults(fn=cmd_presets)
    s = sub.add_parser("build-ops", help=text("cli.build_ops_help", lang))
    s.add_argument("--device", choices=("cpu", "cuda"), default=None)
    s.add_argument("--op", action="append", default=None, metavar="BUILDER", help=text("cli.build_ops_op_help", lang))
    s.set_defaults(fn=cmd_build_ops)
    s = sub.add_parser("webui", help=text("cli.webui_help", lang))
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=7860)
    s.add_argument("--allow-path", action="append", default=[], metavar="PATH[:rw]", type=path, help=text("cli.allow_help", lang))
    s.set_defaults(fn=cmd_webui)
    # every argument goes to the tool, --help too (main hands them over as they came)
    s = sub.add_parser("screenshots", help=text("cli.screenshots_help", lang), add_help=False)
    s.set_defaults(fn=cmd_screenshots, passes_through=True, rest=[])
