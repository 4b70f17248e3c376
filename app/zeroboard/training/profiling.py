"""A look inside a few training steps, on request: ``ZEROBOARD_PROFILE_STEPS=first:last`` in a job's environment.

Rank 0 runs torch's profiler over optimizer steps ``first`` to ``last`` and writes ``profile.json`` into the output
folder: the wall time of those steps, the time the GPU spent in kernels during them (their ratio says whether the
step waits on the host: ZeRO-3's hooks, launches), the kernels that took most GPU time and the operations that took
most host time. Off (no callback at all) when the variable is unset. The profiled steps run slower: leave them out of
a timing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .callbacks import RANK

PROFILE_ENV = "ZEROBOARD_PROFILE_STEPS"
PROFILE_FILE = "profile.json"
TOP = 15


def steps_asked() -> tuple[int, int] | None:
    raw = os.environ.get(PROFILE_ENV, "").strip()
    first, _, last = raw.partition(":")
    if not (first.isdigit() and (last or first).isdigit()):
        return None
    a, b = int(first), int(last or first)
    return (a, b) if 0 < a <= b else None


def summary(events, wall_s: float, steps: int) -> dict:
    """The profiler's key averages as plain numbers (microseconds turned into seconds per step)."""
    def device_us(e, own: bool) -> float:
        for name in (("self_device_time_total", "self_cuda_time_total") if own else ("device_time_total",
                                                                                    "cuda_time_total")):
            if hasattr(e, name):
                return float(getattr(e, name))
        return 0.0

    kernels = [e for e in events if "cuda" in str(getattr(e, "device_type", "")).lower()]
    busy = sum(device_us(e, True) for e in kernels) / 1e6
    row = lambda e, us: {"name": e.key[:120], "calls": e.count // steps, "s_per_step": us / 1e6 / steps}  # noqa: E731
    top_gpu = sorted(kernels, key=lambda e: -device_us(e, True))[:TOP]
    top_cpu = sorted(events, key=lambda e: -float(e.self_cpu_time_total))[:TOP]
    return {"steps": steps, "wall_s_per_step": wall_s / steps, "gpu_busy_s_per_step": busy / steps,
            "gpu_busy_share": busy / wall_s if wall_s else None,
            "kernels_per_step": sum(e.count for e in kernels) // steps,
            "top_gpu": [row(e, device_us(e, True)) for e in top_gpu],
            "top_host": [row(e, float(e.self_cpu_time_total)) for e in top_cpu]}


def callback(output_dir: str):
    """The profiling callback for the Trainer, or None (not asked, or not rank 0)."""
    asked = steps_asked()
    if asked is None or RANK != 0:
        return None
    import torch
    from transformers import TrainerCallback

    first, last = asked

    class ProfileCallback(TrainerCallback):
        prof = None
        t0 = 0.0

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step + 1 == first:  # the optimizer step about to run
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                acts = [torch.profiler.ProfilerActivity.CPU] + (
                    [torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
                self.prof = torch.profiler.profile(activities=acts)
                self.prof.__enter__()
                self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if self.prof is None or state.global_step < last:
                return
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - self.t0
            self.prof.__exit__(None, None, None)
            out = {"first": first, "last": last, **summary(self.prof.key_averages(), wall, last - first + 1)}
            Path(output_dir, PROFILE_FILE).write_text(json.dumps(out, indent=2) + "\n")
            self.prof = None

    return ProfileCallback()
