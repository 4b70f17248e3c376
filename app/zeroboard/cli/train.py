"""``zeroboard train | stop``: jobs from the terminal, through the same runner as the page (``runs``: :mod:`.runs`).

``train`` starts the job with the page's own launch path (the registry, the
busy rule, the folder rules, a supervisor) and follows it in the foreground:
the live log on the terminal, then the job's own exit status.  Ctrl-C,
SIGTERM and SIGHUP stop the job as Abort does (graceful, then SIGKILL, then a
check that no process is left) before the command exits; ``--detach`` leaves
it running on purpose.  A job started here shows in the page's run list and
can be aborted there; ``runs`` and ``stop`` go the other way.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

from .. import workspace
from ..job import cmdline, record, trackers
from ..job.registry import RegistryError
from ..runs import dispatcher, manager as runmgr
from ..runs.queue import Queue
from ..runs.state import JobState
from ..runs.supervisor import SIGNAL_REPORT, TRACEBACK, drop_signal_report
from ..words import default_lang, text, tr
from . import jobs
from .args import path

POLL_S = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminal:
    """Printing to a terminal that may go away (SIGHUP closes it): then we stop printing, not the stop itself."""

    def __init__(self):
        self.gone = False

    def out(self, line: str, err: bool = False) -> None:
        if self.gone:
            return
        try:
            print(line, file=sys.stderr if err else sys.stdout, flush=True)
        except OSError:
            self.gone = True


class Signals:
    """The stop signals the command received (the first one decides the exit status)."""

    def __init__(self):
        self.got: list[int] = []
        self.event = threading.Event()
        self._old = {}

    def __enter__(self):
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._on)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _on(self, sig, frame):
        self.got.append(sig)
        self.event.set()


def exit_status(st: JobState, signals: Signals) -> int:
    """The job's own exit status; an abort we asked for: 128 + the signal, as a shell reports it."""
    if st.status == "finished":
        return 0
    if st.status == "aborted" and signals.got:
        return 128 + int(signals.got[0])
    if st.status == "aborted":
        return 130
    return st.exit_code if isinstance(st.exit_code, int) and st.exit_code > 0 else 1


def follow(mgr: runmgr.JobManager, st: JobState, signals: Signals, term: Terminal, lang: str) -> int:
    """Print the run's log as it grows until it ends; stop it on a signal and wait until that is verified."""
    log = record.Tail(Path(st.run_dir) / record.LOG_FILE, st.log_offset)
    asked = False
    stalled: dict = {}  # the stall last told (a run that stops moving is said so, and when it moves again)
    held: list[str] = []  # after a stop is asked: a traceback block, held until we know it is the stop's report

    def show(lines: list[str]) -> None:
        for line in lines:
            if asked and (held or line.lstrip().startswith(TRACEBACK)):
                held.append(line + "\n")
                if SIGNAL_REPORT in line:  # torchrun reporting our SIGTERM: one note, not a traceback
                    for kept in drop_signal_report(held) or held:
                        term.out(kept.rstrip("\n"))
                    held.clear()
                continue
            term.out(line)

    while True:
        show(log.read_lines())
        if signals.got and not asked:
            asked = True
            name = signal.Signals(signals.got[0]).name
            term.out(text("cli.stopping", lang, signal=name, run=workspace.shown(st.run_dir), grace=round(st.grace_s)),
                     err=True)
            mgr.abort(st.run_dir)
        current = mgr.state(st.run_dir) or st
        if current.status == "stalled" and current.stall != stalled:
            stalled = current.stall
            term.out(tr(current.message, lang), err=True)
        elif current.status == "running" and stalled:
            stalled = {}
            over = next((n for n in reversed(current.notes) if getattr(n, "key", "") == "run.stall_over"), None)
            term.out(tr(over or current.message, lang), err=True)
        if not current.active:
            if log.restarted:  # the log was rewritten at the end (the stop's report trimmed): nothing new in it
                log.read_lines(None)
            else:
                show(log.read_lines(None))
            for line in held:  # a traceback that was not the stop's: it is the job's own
                term.out(line.rstrip("\n"))
            term.out(ended(current, lang), err=True)
            return exit_status(current, signals)
        signals.event.wait(POLL_S)
        signals.event.clear()


def ended(st: JobState, lang: str) -> str:
    """How a run ended, in one line: its status, and its message where that says more ("aborted", not
    "aborted: aborted")."""
    status = text(f"status.{st.status}", lang)
    message = str(tr(st.message, lang) or "").strip()
    if not message or message.rstrip(".。").lower() == status.lower():
        return status
    return text("cli.ended", lang, status=status, message=message)


def cmd_train(args) -> int:
    lang = default_lang()
    term = Terminal()
    with Signals() as signals:  # from the start: a Ctrl-C during the launch still stops the job it started
        prepared = jobs.launch_or_explain(args)
        if prepared is None:
            return 2
        mgr = runmgr.JobManager()
        try:
            st = mgr.start(prepared, source="cli")
        except runmgr.Busy as e:
            if not args.queue:
                term.out(text("cli.busy", lang, why=tr(e.args[0], lang)), err=True)
                if getattr(e.args[0], "key", "") == "run.busy_chat":  # how to free the devices from here
                    cmd = prepared.command
                    where = " --cpu" if cmd.device_kind == "cpu" else " --gpus " + ",".join(map(str, cmd.devices))
                    term.out(text("cli.busy_chat_hint", lang, where=where), err=True)
                return 3
            try:
                st = wait_in_queue(mgr, prepared, signals, term, lang, args.detach)
            except RegistryError as e:  # the queue cannot be written (or read): nothing was queued
                term.out(text("cli.not_started", lang, why=tr(e.args[0], lang)), err=True)
                return 1
            if st is None:
                return 0 if args.detach and not signals.got else 1
        except runmgr.StartError as e:
            term.out(text("cli.not_started", lang, why=tr(e.args[0], lang)), err=True)
            return 1
        cmd = json.loads((Path(st.run_dir) / record.COMMAND_FILE).read_text(encoding="utf-8"))
        term.out(cmdline.text(cmd["env"], cmd["argv"]), err=True)  # what runs, first, as preview shows it
        for note in st.notes:
            term.out(text("cli.note", lang, field="master_port", text=tr(note, lang)), err=True)
        run = workspace.shown(st.run_dir)
        term.out(text("cli.started", lang, run=run, pid=st.supervisor_pid or "-"), err=True)
        for w in trackers.for_job(prepared.spec):
            term.out(text("cli.tracker", lang, tracker=w.tracker, path=workspace.shown(w.path), open=w.open), err=True)
        if args.detach and not signals.got:
            term.out(text("cli.detached", lang, run=run), err=True)
            return 0
        term.out(text("cli.following", lang), err=True)
        return follow(mgr, st, signals, term, lang)


def wait_in_queue(mgr: runmgr.JobManager, prepared, signals: Signals, term: Terminal, lang: str,
                  detach: bool) -> JobState | None:
    """Queue the job; unless detached, wait until the dispatcher starts it (the run) or gives up on it (None).
    Ctrl-C while it waits takes it out of the queue."""
    entry = dispatcher.enqueue(mgr, prepared, "cli")
    q = Queue(mgr.index)
    if (problem := q.problem()) is not None:  # a damaged queue was kept aside before this one was written
        term.out(tr(problem, lang), err=True)
    position = next((i for i, e in enumerate(q.entries(), 1) if e.id == entry.id), 1)
    term.out(text("cli.queued", lang, id=entry.id, position=position, why=tr(entry.why, lang)), err=True)
    if detach:
        return None
    while True:
        if signals.got:
            q.remove(entry.id)
            term.out(text("cli.queue_cancelled", lang, id=entry.id, output=workspace.shown(entry.output)), err=True)
            return None
        dispatcher.revive(q)  # its dispatcher killed meanwhile: this wait is a look at the queue too
        now = next((e for e in q.entries() if e.id == entry.id), None)
        if now is not None and now.status == "failed":
            term.out(text("cli.queue_failed", lang, why=tr(now.why, lang)), err=True)
            q.remove(entry.id)
            return None
        if now is None:
            st = mgr.state(entry.output)
            if st is not None and (st.started or 0) >= entry.queued - 1:
                term.out(text("cli.queue_started", lang, run=workspace.shown(st.run_dir)), err=True)
                return st
        signals.event.wait(1.0)
        signals.event.clear()


def _registered(mgr: runmgr.JobManager, run: str) -> str | None:
    """The index's name for a run folder given on the command line (or None: not a run of this workspace)."""
    wanted = workspace.current().path(run)
    return next((r for r in mgr.run_dirs() if Path(r).resolve() == wanted), None)


def cmd_stop(args) -> int:
    lang = default_lang()
    mgr = runmgr.JobManager()
    if args.all == bool(args.run):
        print(text("cli.stop_which", lang), file=sys.stderr)
        return 2
    if args.all:
        runs = [st.run_dir for st in mgr.active()]
        if not runs:
            print(text("cli.none_running", lang))
    else:
        run = _registered(mgr, args.run)
        if run is None:
            print(text("cli.not_a_run", lang, run=args.run), file=sys.stderr)
            return 1
        runs = [run]
    asked = []
    for run in runs:
        st = mgr.save_and_stop(run) if args.save else mgr.abort(run)
        if st is None or not st.active:
            print(text("cli.not_running", lang, run=workspace.shown(run), status=text(f"status.{st.status}", lang) if st else "-"))
            continue
        shown = workspace.shown(run)
        print(text("cli.save_sent", lang, run=shown) if args.save else text("cli.stop_sent", lang, run=shown, grace=round(st.grace_s)))
        asked.append(run)
    if args.no_wait:
        return 0
    leftover = False
    for run in asked:
        while (st := mgr.state(run)) is not None and st.active:
            time.sleep(POLL_S)
        print(ended(st, lang))
        leftover = leftover or bool(st.leftover)
    return 1 if leftover else 0


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("train", help=text("cli.train_help", lang))
    jobs.job_arguments(s, lang)
    s.add_argument("--detach", action="store_true", help=text("cli.detach_help", lang))
    s.add_argument("--queue", action="store_true", help=text("cli.queue_flag_help", lang))
    s.set_defaults(fn=cmd_train)
    s = sub.add_parser("stop", help=text("cli.stop_help", lang))
    s.add_argument("run", nargs="?", type=path, help=text("cli.run_arg_help", lang))
    s.add_argument("--all", action="store_true", help=text("cli.stop_all_help", lang))
    s.add_argument("--no-wait", action="store_true", help=text("cli.no_wait_help", lang))
    s.add_argument("--save", action="store_true", help=text("cli.save_help", lang))
    s.set_defaults(fn=cmd_stop)
