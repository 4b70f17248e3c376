"""One line per run, for the Runs page and ``zeroboard runs``: read cheaply, cached by each file's size and time.

A workspace keeps every run (the index never drops one), so a listing of a
few hundred must not re-read whole event streams: each run's line comes from
its ``state.json`` (through the manager, which knows whether it still runs),
its requested job, its ``plan.json`` and the *tail* of ``events.jsonl`` --
the last logged step, loss, evaluation loss, tokens/s, step time and the
peaks per device.  Every file read is cached by (size, modification time,
inode): a finished run costs one ``stat`` per file on the next listing.
Events are read through :mod:`..job.record` (an extra key such as a format
version ``"v"`` is ignored).

Plain values only, no gradio: the page and the CLI format them.
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import words
from ..job import record, spec as specmod
from ..job.record import STATE_FILE
from .manager import JobManager
from .state import ACTIVE, JobState, read_state

TAIL_BYTES = 64 << 10  # the end of events.jsonl a summary reads: dozens of log lines, the memory and end events
CACHE_SIZE = 2048  # files kept parsed (a few per run); the oldest go first


_stat = os.stat  # one call per file and listing (a test counts them)


class FileCache:
    """Parsed files keyed by path, valid while the file's (mtime, size, inode) is unchanged; bounded (LRU)."""

    def __init__(self, size: int = CACHE_SIZE):
        self.size = size
        self._data: collections.OrderedDict[tuple[str, str], tuple[tuple, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path, kind: str, read) -> Any:
        """``read(path)`` for this file, from the cache when it did not change; None when it cannot be read."""
        try:
            st = _stat(path)
        except OSError:
            return None
        key, stamp = (str(path), kind), (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            hit = self._data.get(key)
            if hit is not None and hit[0] == stamp:
                self._data.move_to_end(key)
                return hit[1]
        try:
            value = read(path)
        except (OSError, ValueError, specmod.SpecError):
            value = None
        with self._lock:
            self._data[key] = (stamp, value)
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._data)


CACHE = FileCache()


# --- the files ---------------------------------------------------------------------------


def _job(path: Path) -> dict:
    return specmod.to_dict(specmod.load_yaml(path))


def job_values(run_dir: str | Path, cache: FileCache = CACHE) -> dict | None:
    """The run's job as it was asked for (every field, defaults filled in), or None without a readable record."""
    return cache.get(Path(run_dir) / record.SPEC_FILE, "job", _job)


def _tail(path: Path) -> list[dict]:
    with path.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        start = max(0, size - TAIL_BYTES)
        fh.seek(start)
        data = fh.read()
    lines = data.decode("utf-8", errors="replace").split("\n")
    if start:
        lines = lines[1:]  # the first line of the tail may be cut
    return record.parse([ln for ln in lines if ln.strip()])


def tail_events(output: str | Path, cache: FileCache = CACHE) -> list[dict]:
    return cache.get(Path(output) / record.EVENTS_FILE, "tail", _tail) or []


def all_events(output: str | Path, cache: FileCache = CACHE) -> list[dict]:
    return cache.get(Path(output) / record.EVENTS_FILE, "all", record.read_events) or []


def _plan(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    gpu = data["setup"]["device"] == "cuda"
    return {"device": "cuda" if gpu else "cpu", "per_device_bytes": data["peak_bytes"] if gpu else data["host_bytes"],
            "needed_bytes": data.get("needed_bytes")}


def planned(run_dir: str | Path, cache: FileCache = CACHE) -> dict | None:
    """The plan made at launch: per-device bytes (GPU: the allocator peak; CPU: the process RSS), or None."""
    return cache.get(Path(run_dir) / record.PLAN_FILE, "plan", _plan)


# --- one run ---------------------------------------------------------------------------


@dataclass
class RunSummary:
    run_dir: str
    status: str
    source: str = "page"
    run_id: str | None = None
    model: str = ""
    method: str = ""  # lora | full
    lora_rank: int | None = None
    stage: str = "none"
    offload: bool = False
    device_kind: str = "cpu"
    devices: list[int] = field(default_factory=list)
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    eval_loss: float | None = None
    tokens_per_sec: float | None = None
    step_time: float | None = None  # seconds per optimizer step, between the logs of the last attempt
    peaks: list[int] = field(default_factory=list)  # bytes per rank: the allocator peak on GPUs, RSS on CPUs
    peak_kind: str = ""  # torch_peak_bytes | rss_peak_bytes
    planned_bytes: int | None = None  # the plan's per-device figure, comparable with ``peaks``
    started: float | None = None
    ended: float | None = None
    compile_s: float = 0.0  # of the run's time, how long it compiled DeepSpeed's ops (training/ops.py), not training
    archived: bool = False
    has_eval: bool = False  # the job evaluates (a validation split or an evaluation set)
    output: str = ""  # where the trainer wrote (events, weights): the run folder, except for a node's part of a job
    slurm: dict = field(default_factory=dict)  # a Slurm job: job_id, state, reason, position (while pending), nodes
    message: str = ""  # what the run does now or how it ended (a stall and the rank behind it, a full disk), in English

    @property
    def name(self) -> str:
        return Path(self.run_dir).name

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def duration(self, now: float | None = None) -> float | None:
        """From start to end (to now while active), the ops' compile time left out (``compile_s`` says it apart)."""
        if self.started is None:
            return None
        end = self.ended if self.ended is not None else (now or time.time()) if self.active else None
        return None if end is None else max(0.0, end - self.started - self.compile_s)

    def to_json(self) -> dict:
        return asdict(self)


def clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def duration_text(s: RunSummary, lang: str, now: float | None = None) -> str:
    """A run's duration as the Runs tab and ``zeroboard runs`` show it: its time without the ops' compile, and the
    compile apart when there was one (``4:00 (+ 2:40 compiling DeepSpeed ops)``)."""
    took = s.duration(now)
    if took is None:
        return "-"
    return clock(took) if s.compile_s < 1 else words.text("runs.duration_compile", lang, took=clock(took), compile=clock(s.compile_s))


def _attempt(events: list[dict]) -> list[dict]:
    """The events of the last attempt (a resumed run appends a new ``start`` and logs from its checkpoint on)."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    return events[starts[-1]:] if starts else events


def _speed(logs: list[dict]) -> tuple[float | None, float | None]:
    """(tokens/s, seconds per step) between the first and last log of one attempt; from its start with one log."""
    last = logs[-1]
    first = next((e for e in logs if e.get("elapsed") is not None and e.get("step") is not None), None)
    if last.get("elapsed") is None or first is None:
        return None, None
    if first is not last and last["step"] > first["step"] and last["elapsed"] > first["elapsed"]:
        dt = last["elapsed"] - first["elapsed"]
        tokens = (last.get("tokens") or 0) - (first.get("tokens") or 0)
        return (tokens / dt if tokens > 0 else None), dt / (last["step"] - first["step"])
    tps = last["tokens"] / last["elapsed"] if last.get("tokens") and last["elapsed"] > 0 else last.get("tokens_per_sec")
    return tps, (last["elapsed"] / last["step"] if last.get("step") else None)


def peaks_of(events: list[dict], key: str) -> list[int]:
    """Each rank's highest ``key`` over the memory records of these events, in rank order."""
    best: dict[int, int] = {}
    for e in events:
        for m in e.get("memory") or []:
            if isinstance(m, dict) and isinstance(m.get(key), (int, float)) and isinstance(m.get("rank"), int):
                best[m["rank"]] = max(best.get(m["rank"], 0), int(m[key]))
    return [best[r] for r in sorted(best)]


def from_events(s: RunSummary, events: list[dict]) -> None:
    """Fill the progress, losses, speed and peaks of ``s`` from the (tail of the) run's events."""
    attempt = _attempt(events)
    logs = [e for e in attempt if e.get("event") == "log" and isinstance(e.get("step"), int)]
    last_log = next((e for e in reversed(events) if e.get("event") == "log"), None)
    if last_log is not None:
        s.step, s.total_steps = last_log.get("step"), last_log.get("total_steps")
        s.loss = record.last_loss(events)
    start = next((e for e in reversed(events) if e.get("event") == "start"), None)
    if s.total_steps is None and start is not None:
        s.total_steps = start.get("total_steps")
    ev = next((e for e in reversed(events) if e.get("event") == "eval" and e.get("eval_loss") is not None), None)
    if ev is not None:
        s.eval_loss = ev["eval_loss"]
    end = next((e for e in reversed(events) if e.get("event") == "end"), None)
    if end is not None and s.status == "finished":
        s.step = (end.get("result") or {}).get("global_step", s.step)
    # the compile time: as the end event sums it, or (a run that ended otherwise, or still going) each op's event
    compiled = {e.get("op"): e.get("seconds") for e in events if e.get("event") == "compiled"}
    total = end.get("compile_s") if end is not None else None
    s.compile_s = float(total) if isinstance(total, (int, float)) else \
        sum(v for v in compiled.values() if isinstance(v, (int, float)))
    if logs:
        s.tokens_per_sec, s.step_time = _speed(logs)
    s.peak_kind = "torch_peak_bytes" if s.device_kind == "cuda" else "rss_peak_bytes"
    s.peaks = peaks_of(attempt, s.peak_kind)


def summarize(st: JobState, entry: dict, cache: FileCache = CACHE) -> RunSummary:
    """The line of one run: its state (as the manager found it), its job, its plan and the tail of its events."""
    s = RunSummary(run_dir=entry.get("run_dir") or st.run_dir, status=st.status, source=st.source or entry.get("source", ""),
                   run_id=entry.get("run_id"), device_kind=st.device_kind, devices=list(st.devices), started=st.started,
                   ended=st.ended, archived=bool(entry.get("archived")), slurm=dict(st.slurm or {}), message=str(st.message))
    job = job_values(s.run_dir, cache)
    if job is not None:
        s.model, s.method, s.stage, s.offload = job["model_name_or_path"], job["finetuning_type"], job["deepspeed_stage"], \
            bool(job["offload"])
        s.lora_rank = job["lora_rank"] if job["finetuning_type"] == "lora" else None
        s.has_eval = bool(job["val_size"] or job["eval_dataset"])
    plan = planned(s.run_dir, cache)
    if plan is not None:
        s.planned_bytes = plan["per_device_bytes"]
    s.output = str(st.output)
    from_events(s, tail_events(st.output, cache))
    return s


def summaries(manager: JobManager, cache: FileCache = CACHE) -> list[RunSummary]:
    """Every run of the index, newest first (the index is read once).

    An ended run's state.json is read from the cache (it no longer changes); a run that may still be going is
    asked of the manager, which checks its processes."""
    out = []
    for entry in manager.registry.entries():
        if not entry.get("run_dir") or entry.get("kind", "train") != "train":  # a chat worker is no run
            continue
        st = cache.get(Path(entry["run_dir"]) / STATE_FILE, "state", read_state)
        if st is None or st.active:
            st = manager.state_of(entry)
        out.append(summarize(st, entry, cache))
    return out


def warm_up(manager: JobManager, cache: FileCache = CACHE) -> threading.Thread:
    """Read every run's files once, in the background, so the first listing of a page is a cached one."""
    thread = threading.Thread(target=summaries, args=(manager, cache), daemon=True, name="zeroboard-runs-warm-up")
    thread.start()
    return thread


def matches(s: RunSummary, text: str = "", status: str = "", archived: bool | None = False) -> bool:
    """The filter of the page and the CLI: words found in the folder, model or setting; a status; archived or not."""
    if archived is not None and s.archived != archived:
        return False
    if status and s.status != status:
        return False
    hay = " ".join([s.run_dir, s.model, s.method, f"stage {s.stage}", "offload" if s.offload else "", s.source,
                    s.status]).lower()
    tokens = set(re.split(r"[^0-9a-z]+", hay))
    # a number is a whole token ("stage 2" is not runs/lr-0.002 nor /tmp/pytest-12), any other word a part of one
    return all(word in tokens if word.isdigit() else word in hay for word in text.lower().split())
