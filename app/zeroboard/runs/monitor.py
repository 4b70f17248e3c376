"""Live resource samples for the Train page.

GPUs through NVML (used/total memory, utilization, and which of the job's
ranks runs on each); without a GPU, host RAM and each rank's RSS through
psutil.  A chat worker holding memory is named as such in both.  A short ring of samples feeds the history chart.  No torch here:
asking torch about memory would create a CUDA context in the web server.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass, field

import psutil

from ..job import devices
from ..job.command import CHAT_MODULE, TRAINER_MODULE
from . import processes
from .state import JobState

MiB = 1 << 20
GiB = 1 << 30


@dataclass
class Sample:
    time: float
    gpus: list[dict] = field(default_factory=list)  # index, name, used_bytes, total_bytes, utilization
    gpu_procs: list[dict] = field(default_factory=list)  # gpu, pid, rank, used_bytes, name
    host: dict = field(default_factory=dict)  # total_bytes, used_bytes
    ranks: list[dict] = field(default_factory=list)  # rank, pid, rss_bytes
    workers: list[dict] = field(default_factory=list)  # pid, rss_bytes of the chat workers


def rank_map(job: JobState | None) -> dict[int, int]:
    """pid -> rank of the job's trainer processes (live process tree first, then what the supervisor recorded)."""
    if job is None or not job.active:
        return {}
    found = {r["pid"]: r["rank"] for r in job.ranks if r.get("rank") is not None}
    found.update({r["pid"]: r["rank"] for r in processes.rank_processes(job) if r["rank"] is not None})
    ranks = {}
    for pid, rank in found.items():
        with contextlib.suppress(psutil.Error):
            if TRAINER_MODULE in psutil.Process(pid).cmdline():  # ranks, not their helper processes
                ranks[pid] = rank
    return ranks


def _rss(pid: int) -> int | None:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


def take_sample(job: JobState | None, detect=devices.detect_gpus, workers: tuple[int, ...] = ()) -> Sample:
    ranks = rank_map(job)
    vm = psutil.virtual_memory()
    s = Sample(time.time(), host={"total_bytes": vm.total, "used_bytes": vm.total - vm.available})
    for gpu in detect(with_processes=True):
        s.gpus.append({"index": gpu.index, "name": gpu.name, "used_bytes": gpu.used_bytes,
                       "total_bytes": gpu.total_bytes, "utilization": gpu.utilization})
        for p in gpu.processes:
            name = CHAT_MODULE if p.pid in workers else ""
            with contextlib.suppress(psutil.Error):
                name = name or psutil.Process(p.pid).name()
            s.gpu_procs.append({"gpu": gpu.index, "pid": p.pid, "rank": ranks.get(p.pid),
                                "used_bytes": p.used_bytes, "name": name})
    for pid, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        rss = _rss(pid)
        if rss is not None:
            s.ranks.append({"rank": rank, "pid": pid, "rss_bytes": rss})
    for pid in workers:
        rss = _rss(pid)
        if rss is not None:
            s.workers.append({"pid": pid, "rss_bytes": rss})
    return s


class Monitor:
    """The machine's recent samples: at most one per ``min_interval`` however many pages ask."""

    def __init__(self, size: int = 180, min_interval: float = 1.0, detect=devices.detect_gpus):
        self.ring: collections.deque[Sample] = collections.deque(maxlen=size)
        self.min_interval = min_interval
        self.detect = detect
        self._lock = threading.Lock()
        self._job: tuple | None = None

    def sample(self, job: JobState | None, workers: tuple[int, ...] = ()) -> Sample:
        """The machine now (or a sample younger than ``min_interval``); ``workers``: the chat workers' pids."""
        key = (job.run_dir if job is not None and job.active else None, tuple(workers))
        with self._lock:
            last = self.ring[-1] if self.ring else None
            if last is not None and key == self._job and time.time() - last.time < self.min_interval:
                return last
            self._job = key
            self.ring.append(take_sample(job, self.detect, tuple(workers)))
            return self.ring[-1]

    def history(self) -> list[Sample]:
        with self._lock:
            return list(self.ring)


# --- rows for tables and charts (plain values; the page turns them into widgets) ------

def gpu_rows(s: Sample) -> list[list]:
    return [[g["index"], g["name"], f"{g['used_bytes'] / GiB:.1f} / {g['total_bytes'] / GiB:.1f} GiB",
             f"{g['utilization']}%" if g["utilization"] >= 0 else "?"] for g in s.gpus]


def process_rows(s: Sample, peaks: dict[int, dict] | None = None) -> list[list]:
    """GPU: one row per process on a GPU; CPU: one row per rank (RSS now and the peak the trainer reported)."""
    peaks = peaks or {}
    if s.gpus:
        return [[p["gpu"], p["pid"], "" if p["rank"] is None else p["rank"], p["name"], f"{p['used_bytes'] / MiB:.0f} MiB",
                 _peak(peaks.get(p["rank"]), "torch_peak_bytes")] for p in s.gpu_procs]
    return [["cpu", r["pid"], r["rank"], TRAINER_MODULE, f"{r['rss_bytes'] / MiB:.0f} MiB",
             _peak(peaks.get(r["rank"]), "rss_peak_bytes")] for r in s.ranks] + [
        ["cpu", w["pid"], "", CHAT_MODULE, f"{w['rss_bytes'] / MiB:.0f} MiB", ""] for w in s.workers]


def _peak(mem: dict | None, key: str) -> str:
    return f"{mem[key] / MiB:.0f} MiB" if mem and mem.get(key) else ""


def host_text(s: Sample) -> str:
    h = s.host
    return f"{h['used_bytes'] / GiB:.1f} / {h['total_bytes'] / GiB:.1f} GiB" if h else ""


HOST_SERIES, JOB_SERIES = "RAM", "RSS"  # host RAM used; the job's ranks' RSS, summed


def history_rows(samples: list[Sample]) -> list[dict]:
    """Long-format rows (seconds, series, MiB): one line per GPU, or host RAM plus the job's total RSS.

    The set of series is fixed per machine and its names are the same in every language (gradio 6's
    LinePlot keeps the colour domain of its first value, so a series named anew later would not be
    drawn); the legend's title says what they are.  Per-rank figures are in the process table.
    """
    if not samples:
        return []
    t0 = samples[0].time
    rows = []
    for s in samples:
        t = round(s.time - t0, 1)
        if s.gpus:
            rows += [{"seconds": t, "series": f"GPU {g['index']}", "MiB": g["used_bytes"] / MiB} for g in s.gpus]
        else:
            rows.append({"seconds": t, "series": HOST_SERIES, "MiB": s.host["used_bytes"] / MiB})
            rows.append({"seconds": t, "series": JOB_SERIES, "MiB": sum(r["rss_bytes"] for r in s.ranks) / MiB})
    return rows
