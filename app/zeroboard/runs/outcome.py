"""How a run ended: the final status from the exit code, the events and the log, and which rank failed first."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from ..job.record import LOG_FILE
from ..words import Msg, say
from .state import JobState

ERROR_LINES = 20
ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def tail_lines(path: Path, n: int, start: int = 0) -> list[str]:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(start, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-n:]


def exit_text(code: int | None) -> Msg:
    if code is None:
        return say("run.exit_unknown")
    if code < 0 and -code in signal.valid_signals():
        return say("run.exit_signal", signal=signal.Signals(-code).name)
    return say("run.exit_code", code=code)


def failure_details(state: JobState, evs: list[dict]) -> None:
    """Which rank failed first and why: torchrun's root-cause summary, the ranks' error events, the log."""
    log_tail = tail_lines(state.path / LOG_FILE, 300, state.log_offset)
    text = "\n".join(log_tail)
    root = ROOT_CAUSE.search(text)
    errors = [e for e in evs if e.get("event") == "error"]
    errors = [e for e in errors if "interrupted" not in str(e.get("message", ""))] or errors
    rank = int(root.group(1)) if root else (errors[0].get("rank") if errors else None)
    # torchrun orders failures it sees in one poll by rank: a rank killed by a signal (not torchrun's own
    # SIGTERM) is the cause, and ranks that then lost their connection to it are not
    summary = text[text.find("ChildFailedError"):] if "ChildFailedError" in text else ""
    codes = {int(r): int(c) for r, c in FAILURE.findall(summary)}  # the root cause's entry is among them
    killed = [r for r, c in codes.items() if c < 0 and c != -signal.SIGTERM]
    if killed and rank not in killed:
        rank = killed[0]
    event = next((e for e in errors if e.get("rank") == rank), None)
    state.failed_rank = rank
    if event is not None:
        state.error = str(event.get("message", ""))
        tb = [ln for ln in str(event.get("traceback", "")).splitlines() if ln.strip()]
        state.error_lines = tb[-ERROR_LINES:] or log_tail[-ERROR_LINES:]
        return
    if rank in codes:  # died without a word (e.g. killed): its own last lines and torchrun's summary
        state.error = exit_text(codes[rank])
        own = [ln for ln in log_tail if ln.startswith(f"[rank{rank}]:")]
        state.error_lines = (own[-5:] + log_tail[-15:]) if own else log_tail[-ERROR_LINES:]
        return
    state.error_lines = log_tail[-ERROR_LINES:]


def conclude(state: JobState, code: int | None, evs: list[dict], cause: Msg | None = None) -> None:
    """Final status from the exit code, the events, whether an abort was asked for, and a known cause."""
    state.exit_code = code
    state.ended = state.ended or time.time()
    ended = any(e.get("event") == "end" for e in evs)
    if ended and code in (0, None) and cause is None:
        end = next(e for e in evs if e.get("event") == "end")
        early = (end.get("result") or {}).get("stopped_early")
        stop = next((e for e in evs if e.get("event") == "stop"), None)
        state.status = "finished"
        state.message = say("run.finished_early", step=(end.get("result") or {}).get("global_step"),
                            total=(stop or {}).get("total_steps", "?")) if early and stop else say("run.finished")
    elif state.abort_requested and cause is None:
        state.status = "aborted"
        state.message = say("run.aborted_left", pids=str(state.leftover)) if state.leftover else say("run.aborted")
    elif code == 0 and cause is None:
        state.status, state.message = "finished", say("run.finished_no_end")
    else:
        state.status = "failed" if code is not None or cause or any(e.get("event") == "error" for e in evs) else "lost"
        failure_details(state, evs)
        if cause is not None:  # the supervisor knows better than the log (a full disk, say)
            state.error = cause
        who = say("run.rank", rank=state.failed_rank) if state.failed_rank is not None and cause is None \
            else say("run.the_launcher")
        why = state.error or ""
        state.message = say("run.failed_how", how=exit_text(code), who=who, why=why) if why else \
            say("run.failed_who", how=exit_text(code), who=who)
