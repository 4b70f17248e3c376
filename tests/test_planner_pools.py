"""DeepSpeed's own CUDA streams and ZeRO-2's first step, against the pools measured on the H200
(benchmarks/results/planner_pools.json: each stream's reserved bytes, traced with the allocator's history)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from zeroboard import planner
from zeroboard.job.devices import Gpu
from zeroboard.planner import memory
from zeroboard.planner.states import states

ROOT = Path(__file__).resolve().parents[1]
POOLS = json.loads((ROOT / "benchmarks" / "results" / "planner_pools.json").read_text())
GIB = 1 << 30
H200 = [Gpu(0, "NVIDIA H200", 143771 << 20, 139 << 30, 0, 0, (9, 0))]


sys.path.insert(0, str(ROOT / "benchmarks"))
import planner_heldout as h  # noqa: E402 - the harness that measured the rows builds their jobs


def plan_row(r):
    job = h.job_of(r["model"], r["seq"], r["micro_batch"], r["config"], Path("/tmp/zb-pools"), 4, False)
    job = replace(job, liger_kernel="on" if (r.get("speedups") or {}).get("liger") else "off")
    shape = planner.shape_from_config(h.MODELS[r["model"]][1])
    p = planner.estimate(job, H200, model=shape, host_available=1 << 40)
    return states(shape, p.setup, p.trainable, p.params), p


ZERO2 = [r for r in POOLS["rows"] if "-2" in r["config"]]


@pytest.mark.parametrize("r", ZERO2, ids=lambda r: f"{r['model']}-{r['config']}")
def test_zero2_reduction_stream_pool_is_derived(r):
    """The reduction stream's pool: the gradient partition (2P/N) without offload, the fp64 norm of the largest
    gradient with it; within 2% of what the allocator reserved there."""
    st, _ = plan_row(r)
    side = [v[0] for k, v in r["pools_gib"][-1].items() if k != "0"]
    assert len(side) == 1
    assert st.side / GIB == pytest.approx(side[0], rel=0.02)


@pytest.mark.parametrize("r", ZERO2, ids=lambda r: f"{r['model']}-{r['config']}")
def test_needed_covers_the_measured_pools(r):
    """'needed' is at least what the allocator reserved in all streams plus the CUDA context and NCCL."""
    _, p = plan_row(r)
    reserved = sum(v[0] for v in r["pools_gib"][-1].values())
    assert p.needed_bytes / GIB >= reserved + (memory.CONTEXT + memory.NCCL) / GIB - 0.05


def test_first_step_layout_only_when_the_copies_outgrow_the_passes():
    """Copies larger than the passes' space stack: model states + that space + the copies; else nothing is added."""
    from zeroboard.planner.states import States

    st = States(weights=10, optimizer=60, first_step=30)
    assert memory.first_step_layout(st, {"backward": 70 + 20}) == 70 + 20 + 30
    assert memory.first_step_layout(st, {"backward": 70 + 40}) == 0
    assert memory.first_step_layout(States(weights=10), {"backward": 5}) == 0
