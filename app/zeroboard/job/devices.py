"""What the machine has: NVIDIA GPUs through NVML, CPU cores and RAM through psutil.

No torch here: asking torch creates a CUDA context (hundreds of MB per GPU)
in whatever process asks, and the web server must hold none.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from dataclasses import asdict, dataclass, field

import psutil

_NVML_LOCK = threading.Lock()


@dataclass
class GpuProcess:
    pid: int
    used_bytes: int


@dataclass
class Gpu:
    index: int
    name: str
    total_bytes: int
    free_bytes: int
    used_bytes: int
    utilization: int  # percent, -1 when NVML cannot tell
    compute_capability: tuple[int, int]
    processes: list[GpuProcess] = field(default_factory=list)

    @property
    def supports_bf16(self) -> bool:
        return self.compute_capability >= (8, 0)

    def to_dict(self) -> dict:
        return asdict(self)


_NVML: dict = {}  # {"lib": pynvml or None}: NVML is initialised once per process, on first use


def _nvml():
    """pynvml, initialised once for this process (None without a driver or a GPU: the common CPU case)."""
    if "lib" not in _NVML:
        with _NVML_LOCK:
            if "lib" not in _NVML:
                _NVML["lib"] = _init_nvml()
    return _NVML["lib"]


def _init_nvml():
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    atexit.register(_shutdown, pynvml)
    return pynvml


def _shutdown(nv) -> None:
    with contextlib.suppress(Exception):
        nv.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def detect_gpus(with_processes: bool = False) -> list[Gpu]:
    """All GPUs NVML sees, indexed in PCI bus order (what CUDA_DEVICE_ORDER=PCI_BUS_ID uses)."""
    nv = _nvml()
    if nv is None:
        return []
    gpus = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            try:
                # v2 leaves out the driver's reserved memory, as nvidia-smi's "used" does
                mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            except (nv.NVMLError, AttributeError, TypeError):
                mem = nv.nvmlDeviceGetMemoryInfo(h)
            try:
                util = int(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except nv.NVMLError:
                util = -1
            try:
                cc = tuple(nv.nvmlDeviceGetCudaComputeCapability(h))
            except nv.NVMLError:
                cc = (0, 0)
            procs: list[GpuProcess] = []
            if with_processes:
                try:
                    for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                        procs.append(GpuProcess(int(p.pid), int(p.usedGpuMemory or 0)))
                except nv.NVMLError:
                    pass
            gpus.append(Gpu(i, _text(nv.nvmlDeviceGetName(h)), int(mem.total), int(mem.free), int(mem.used), util, cc, procs))
    except nv.NVMLError:  # a GPU fell off the bus or the driver went away: report what was read
        pass
    return gpus


def process_gpu_bytes(pid: int) -> int | None:
    """GPU memory NVML charges to one process, summed over GPUs (None when NVML cannot see it)."""
    found = [p.used_bytes for g in detect_gpus(with_processes=True) for p in g.processes if p.pid == pid]
    return sum(found) if found else None


def _handles(nv) -> list:
    """NVML handles of every GPU, asked once per process (a handle lookup costs as much as a reading)."""
    if "handles" not in _NVML:
        try:
            _NVML["handles"] = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        except nv.NVMLError:
            return []
    return _NVML["handles"]


def process_bytes_on(pid: int, indices: list[int] | None = None) -> int | None:
    """What NVML charges ``pid`` on the GPUs ``indices`` (None: all), one NVML call per GPU; None if not seen.

    The light reading for a sampler thread: no names, utilisation or totals, only the process table.
    """
    nv = _nvml()
    if nv is None:
        return None
    handles = _handles(nv)
    total, seen = 0, False
    for i in range(len(handles)) if indices is None else indices:
        if not 0 <= i < len(handles):
            continue
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(handles[i])
        except nv.NVMLError:
            continue
        for proc in procs:
            if proc.pid == pid:
                total, seen = total + int(proc.usedGpuMemory or 0), True
    return total if seen else None


def cpu_count() -> int:
    """Cores this process may use (respects affinity masks and cgroups' cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def host_memory() -> dict:
    vm = psutil.virtual_memory()
    return {"total_bytes": vm.total, "available_bytes": vm.available, "used_bytes": vm.total - vm.available}


def idle_cores(sample_s: float = 0.5) -> int:
    """Cores of :func:`cpu_count` that no other process keeps busy now (the machine's idle share over ``sample_s``
    seconds), at least one.  For a small CPU computation of ours, whose threads wait for each other at every
    operation: beside busy processes each wait is a turn of the scheduler (the demo model's pretraining took 165 s on
    two threads and 52 s on one beside two busy processes on 2 cores; 26 s and 36 s on an idle machine)."""
    idle_share = 1.0 - psutil.cpu_percent(interval=sample_s) / 100.0
    return max(1, min(cpu_count(), round(idle_share * (psutil.cpu_count() or 1))))
