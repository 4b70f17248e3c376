"""The live view of one run: events and log read incrementally, turned into plain values.

One :class:`RunReader` per run dir is shared by every open page, so ten
browser tabs cost one incremental read, not ten re-reads of whole files.
No gradio here; the page module renders a :class:`Snapshot`.
"""

from __future__ import annotations

import collections
import html
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import words, workspace
from ..job import record as events
from ..planner.record import measured_vs_estimate
from ..runs import monitor, summary
from ..runs.manager import JobManager
from ..runs.state import JobState

LOG_LINES = 3000
MEM_EVERY_S = 5.0  # re-reading events.jsonl for the plan comparison: at most this often while running
# Readers kept for the runs pages read most recently.  Every reader was once kept for good: each run a page showed
# stayed in memory with its parsed events and its last log lines for the server's life, ~0.3 MB for a run aborted
# after its first steps (benchmarks/soak.py, 9 start/abort cycles: 2.9 MB of parsed events.jsonl kept, one reader per
# cycle).  A page that comes back to a dropped run gets a new reader, which reads the run's files again once.
READERS_KEPT = 8


class RunReader:
    """New lines of ``events.jsonl`` and ``launcher.log`` since the last poll, from this run's offsets."""

    def __init__(self, state: JobState):
        self.run_dir = Path(state.run_dir)
        self.output = state.output
        self.events = events.Tail(self.output / events.EVENTS_FILE, state.events_offset)
        self.log = events.Tail(self.run_dir / events.LOG_FILE, state.log_offset)
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self.log_version = 0  # lines read so far
        self.start: dict | None = None
        self.logs: list[dict] = []
        self.others: list[dict] = []  # save, end, error
        self._lock = threading.Lock()
        self._mem: tuple[int, float, dict | None] = (-1, 0.0, None)  # (events_version, when, comparison)

    def poll(self) -> None:
        with self._lock:
            new = self.log.read_lines()
            if self.log.restarted:  # the log was rewritten once the run ended (the stop's report trimmed)
                self.lines.clear()
                self.log.restarted = False
            if new:  # no machine's paths on the page
                ws = workspace.current()
                self.lines.extend(workspace.shown_log(line, ws) for line in new)
            self.log_version += len(new)
            for e in events.parse(self.events.read_lines()):
                kind = e.get("event")
                if kind == "start":
                    self.start = e
                elif kind == "log":
                    self.logs.append(e)
                else:
                    self.others.append(e)

    @property
    def events_version(self) -> int:
        return len(self.logs) + len(self.others) + (self.start is not None)

    def log_text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def memory_vs_plan(self, active: bool) -> dict | None:
        """planner.measured_vs_estimate of this run, re-read when events arrived (throttled while running)."""
        with self._lock:
            version, at, cmp = self._mem
            now = time.time()
            if version != self.events_version and (not active or now - at >= MEM_EVERY_S):
                cmp = measured_vs_estimate(self.run_dir, self.output)
                self._mem = (self.events_version, now, cmp)
            return cmp


@dataclass
class Snapshot:
    run_dir: str | None
    started: float | None = None  # which attempt: a resumed run in the same dir is new to the page
    status: str = "idle"
    status_md: str = ""
    progress_html: str = ""
    log_text: str = ""
    log_version: int = 0
    events_version: int = 0
    loss: list[dict] = field(default_factory=list)
    eval_loss: list[dict] = field(default_factory=list)  # the evaluation set's loss, drawn beside the training loss
    has_eval: bool = False  # the run evaluates (a validation split or an evaluation set): its chart has that series
    lr: list[dict] = field(default_factory=list)
    tps: list[dict] = field(default_factory=list)
    rewards: list[dict] = field(default_factory=list)  # preference stages: {"step", "value", "series"} per logged metric
    gpu_rows: list[list] = field(default_factory=list)
    proc_rows: list[list] = field(default_factory=list)
    host: str = ""
    history: list[dict] = field(default_factory=list)
    final_md: str = ""
    mem_md: str = ""
    log_path: str | None = None
    sample_time: float = 0.0
    lang: str = words.DEFAULT


REWARD_SERIES = ("chosen", "rejected", "margins", "accuracies", "kl")  # what a preference run's log events carry


def reward_rows(logs: list[dict]) -> list[dict]:
    """A preference run's rewards (chosen, rejected, their margin, the accuracy) and KTO's KL, one row per logged
    value; none for SFT."""
    out = []
    for e in logs:
        values = {**(e.get("rewards") or {}), **({"kl": e["kl"]} if e.get("kl") is not None else {})}
        out += [{"step": e["step"], "value": values[k], "series": k} for k in REWARD_SERIES if k in values]
    return out


def dur_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def compiling_op(others: list[dict]) -> dict | None:
    """The ``compile`` event of a DeepSpeed op still being compiled (no ``compiled`` after it), if any."""
    for e in reversed(others):
        if e.get("event") == "compiled":
            return None
        if e.get("event") == "compile":
            return e
    return None


def progress_html(reader: RunReader, state: JobState, lang: str = words.DEFAULT) -> str:
    last = reader.logs[-1] if reader.logs else None
    total = (last or {}).get("total_steps") or (reader.start or {}).get("total_steps") or 0
    step = (last or {}).get("step", 0)
    stop = next((e for e in reader.others if e.get("event") == "stop"), None)  # "save and stop": it ends early
    if state.status == "finished" and total:
        step = stop["step"] if stop and isinstance(stop.get("step"), int) else total
    pct = 100.0 * step / total if total else 0.0
    end = state.ended or time.time()
    wall = end - state.started if state.started else None
    eta = (last or {}).get("eta") if state.active else 0
    compiling = compiling_op(reader.others) if state.active else None
    phase = "train" if (last or reader.start) else "compile" if compiling else "wait"
    if phase == "train":
        text = words.text("progress_line", lang, step=step, total=total or "?", wall=dur_text(wall), eta=dur_text(eta))
    elif phase == "compile":
        text = words.text("progress_compile", lang, op=compiling["op"], op_wall=dur_text(time.time() - compiling["time"]),
                          wall=dur_text(wall))
    else:
        text = words.text("progress_wait", lang, wall=dur_text(wall))
    return (f'<div class="zb-progress" data-phase="{phase}" data-step="{step}" data-total="{total}">'
            f'<div class="zb-bar"><div style="width:{pct:.1f}%"></div></div><span>{html.escape(text)}</span></div>')


def status_html(state: JobState | None, lang: str) -> str:
    if state is None:
        return f'<div class="zb-status">{html.escape(words.status("idle", lang))}</div>'
    lines = [f'<span class="zb-badge zb-{state.status}">{html.escape(words.status(state.status, lang))}</span> '
             f"<code>{html.escape(workspace.shown(state.run_dir))}</code>"]
    message = words.tr(state.message, lang)
    if state.active and message and message != words.status(state.status, lang):
        lines.append(html.escape(message))
    lines += [f"{words.label('note', lang)}: {html.escape(words.tr(n, lang))}" for n in state.notes]
    return f'<div class="zb-status" data-status="{state.status}">' + "<br>".join(lines) + "</div>"


def size_text(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def pct_text(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def memory_vs_plan_markdown(cmp: dict | None, lang: str) -> str:
    """The plan's estimate next to each rank's measured peak, with the error; empty before any measurement."""
    if not cmp or not cmp.get("ranks"):
        return ""
    t = lambda key: words.label(key, lang)  # noqa: E731
    what = words.label("mem_torch" if cmp["what"] == "torch_peak_bytes" else "mem_rss", lang)
    nvml = any("nvml_peak_bytes" in r for r in cmp["ranks"])
    head = [t("mem_rank"), t("mem_estimate"), f"{t('mem_measured')} ({what})", t("mem_error")]
    if nvml:
        head += [t("mem_nvml"), t("mem_nvml_error")]
    title = t("mem_vs_plan" if cmp["what"] == "torch_peak_bytes" else "mem_vs_plan_cpu")
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in cmp["ranks"]:
        row = [str(r["rank"]), size_text(cmp["estimate_bytes"]), size_text(r.get("measured_bytes")), pct_text(r.get("error"))]
        if nvml:
            row += [size_text(r.get("nvml_peak_bytes")), pct_text(r.get("nvml_error"))]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"<small>{html.escape(t('mem_note'))}</small>"]
    return "\n".join(lines)


def final_markdown(state: JobState | None, lang: str) -> str:
    if state is None or state.active:
        return ""
    said, message = words.status(state.status, lang), words.tr(state.message, lang)
    parts = [f"**{said}**" + (f": {html.escape(message)}" if message and message != said else "")]
    if state.exit_code is not None:
        parts.append(f"{words.label('exit_code', lang)}: `{state.exit_code}`")
    if state.status == "failed" and state.failed_rank is not None:
        parts.append(f"{words.label('failed_rank', lang)}: **{state.failed_rank}**")
    body = "  \n".join(parts)
    if state.status == "failed" and state.error_lines:
        body += "\n\n```text\n" + "\n".join(state.error_lines) + "\n```"
    if state.stop_log:
        body += "\n\n" + "  \n".join(html.escape(f"{e['at']} {words.tr(e['msg'], lang)}") for e in state.stop_log)
    return body


class Live:
    """Shared by all sessions: one reader per run dir, one resource monitor."""

    def __init__(self, manager: JobManager, mon: monitor.Monitor | None = None):
        self.manager = manager
        self.monitor = mon or monitor.Monitor()
        self._readers: collections.OrderedDict[tuple, RunReader] = collections.OrderedDict()  # least recent first
        self._lock = threading.Lock()

    def reader(self, state: JobState) -> RunReader:
        key = (state.run_dir, state.started)  # a resumed run in the same dir is a new attempt: read afresh
        with self._lock:
            r = self._readers.pop(key, None)
            if r is None:
                r = RunReader(state)
                for old in [k for k in self._readers if k[0] == state.run_dir]:  # an earlier attempt: not shown again
                    del self._readers[old]
            self._readers[key] = r
            while len(self._readers) > READERS_KEPT:
                self._readers.popitem(last=False)
            return r

    def snapshot(self, run_dir: str | None, lang: str = words.DEFAULT) -> Snapshot:
        state = self.manager.state(run_dir) if run_dir else None
        chat = tuple(w.launcher_pid for w in self.manager.workers() if w.active and w.launcher_pid)
        sample = self.monitor.sample(state, chat)
        host = f"{words.label('host_ram', lang)}: {monitor.host_text(sample)}"
        snap = Snapshot(run_dir, gpu_rows=monitor.gpu_rows(sample), host=host,
                        history=monitor.history_rows(self.monitor.history()), sample_time=sample.time, lang=lang)
        if state is None:
            snap.status_md = status_html(None, lang)
            snap.proc_rows = monitor.process_rows(sample)
            return snap
        r = self.reader(state)
        r.poll()
        last = r.logs[-1] if r.logs else {}
        peaks = {m.get("rank"): m for m in last.get("memory") or []}
        snap.status, snap.started = state.status, state.started
        snap.status_md = status_html(state, lang)
        snap.progress_html = progress_html(r, state, lang)
        snap.log_text, snap.log_version, snap.events_version = r.log_text(), r.log_version, r.events_version
        snap.loss = [{"step": e["step"], "loss": e["loss"]} for e in r.logs if e.get("loss") is not None]
        snap.eval_loss = [{"step": e["step"], "loss": e["eval_loss"]} for e in r.others
                          if e.get("event") == "eval" and e.get("eval_loss") is not None]
        job = summary.job_values(state.run_dir)
        snap.has_eval = bool(snap.eval_loss) or bool(job and (job["val_size"] or job["eval_dataset"]))
        snap.lr = [{"step": e["step"], "lr": e["lr"]} for e in r.logs if e.get("lr") is not None]
        snap.tps = [{"step": e["step"], "tokens/s": e["tokens_per_sec"]} for e in r.logs
                    if e.get("tokens_per_sec") is not None]
        snap.rewards = reward_rows(r.logs)
        snap.proc_rows = monitor.process_rows(sample, peaks)
        snap.final_md = final_markdown(state, lang)
        snap.mem_md = memory_vs_plan_markdown(r.memory_vs_plan(state.active), lang)
        log = Path(state.run_dir) / events.LOG_FILE
        snap.log_path = str(log) if log.is_file() else None
        return snap
