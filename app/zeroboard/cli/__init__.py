"""``zeroboard``: the command line, the top layer.

- :mod:`.jobs`: preview, validate, plan (nothing is started)
- :mod:`.data`: dataset (the job's data as the trainer sees it)
- :mod:`.train`: train (through the runner, followed in the foreground), stop
- :mod:`.runs`: runs (list, filter), runs compare, runs show
- :mod:`.queue`: queue (list, move, cancel)
- :mod:`.outputs`: check, inspect, consolidate, merge
- :mod:`.chat`: chat (through the chat worker), export (a standalone folder and an Ollama Modelfile)
- :mod:`.tools`: demo-model, presets, webui, screenshots

Its words come from the catalog; ``$ZEROBOARD_LANG=zh`` makes them Chinese.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..words import default_lang, text
from . import chat, data, jobs, outputs, queue, runs, tools, train


def parser() -> argparse.ArgumentParser:
    lang = default_lang()
    p = argparse.ArgumentParser(prog="zeroboard", description=text("cli.description", lang))
    sub = p.add_subparsers(dest="cmd", required=True)
    for module in (jobs, data, train, runs, queue, outputs, chat, tools):
        module.add_commands(sub, lang)
    return p


# what a shell reports for a command ended by SIGPIPE (128 + 13): ``zeroboard runs | head`` ends as ``git log | head``
CLOSED_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, rest = p.parse_known_args(argv)
    if getattr(args, "passes_through", False):  # zeroboard screenshots ARGS: the tool parses them (--help included)
        args.rest = rest
    elif rest:
        p.error(text("cli.unrecognized", default_lang(), args=" ".join(rest)))
    try:
        code = args.fn(args)
        sys.stdout.flush()  # inside the try: a pipe closed under the last lines fails here, not at exit
    except BrokenPipeError:
        _quiet_stdout()
        return CLOSED_PIPE
    return code


def _quiet_stdout() -> None:
    """The reader went away (``| head``): what is left for stdout goes nowhere, with no traceback at exit (Python
    flushes stdout once more when it ends, and would fail the same way)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file here (a test's capture): nothing to point elsewhere
        pass


if __name__ == "__main__":
    sys.exit(main())
