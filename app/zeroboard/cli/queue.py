"""``zeroboard queue``: the jobs waiting for their devices, in the order they will start; reorder and cancel them.

``zeroboard train --queue`` puts a job there when its devices or folder are taken (the page's Queue button does
the same); the dispatcher starts each as its devices free, through the same launch path as Start.  Each of these
looks at the queue starts a new dispatcher when entries wait and none runs (``dispatcher.revive``), after a cancel
or a move, before a listing (which then says why each entry waits now).
"""

from __future__ import annotations

import sys
import time

from ..job.registry import RegistryError
from ..runs import dispatcher, manager as runmgr
from ..runs.queue import Queue
from ..words import default_lang, status, text, tr


def cmd_queue(args) -> int:
    """List, cancel or move.  Exits 1 while the queue file cannot be read or a damaged one kept aside is beside it
    (the message says where; remove the copy once its jobs are queued again)."""
    lang = default_lang()
    q = Queue(runmgr.JobManager().index)
    try:
        if args.action in ("cancel", "move"):
            return _change(q, args, lang)
    except RegistryError as e:  # the queue file cannot be read or written: nothing changed
        print(tr(e.args[0], lang), file=sys.stderr)
        return 1
    dispatcher.revive(q)
    entries = q.entries()
    problem = q.problem()
    if problem is not None:
        print(tr(problem, lang), file=sys.stderr)
    if not entries:
        print(text("cli.queue_empty", lang))
        return 0 if problem is None else 1
    print(text("cli.queue_header", lang))
    for pos, e in enumerate(entries, 1):
        waited = f"{(time.time() - e.queued) / 60:.0f} min"
        print(f"{pos:<4} {e.id:<9} {status(e.status, lang):<8} {waited:<9} {e.output}")
        print(f"{'':<24}{tr(e.why, lang)}")
    return 0 if problem is None else 1


def _change(q: Queue, args, lang: str) -> int:
    entry = q.find(args.id or "")
    if entry is None or (args.action == "move" and args.position is None):
        print(text("cli.queue_not_found", lang, id=args.id))
        return 1
    if args.action == "cancel":
        q.remove(entry.id)
        print(text("cli.queue_cancelled", lang, id=entry.id, output=entry.output))
    else:
        q.move(entry.id, args.position)
        print(text("cli.queue_moved", lang, id=entry.id, position=args.position))
    dispatcher.revive(q)
    return 0


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("queue", help=text("cli.queue_help", lang))
    s.add_argument("action", nargs="?", choices=["list", "cancel", "move"], default="list")
    s.add_argument("id", nargs="?")
    s.add_argument("position", nargs="?", type=int)
    s.set_defaults(fn=cmd_queue)
