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
from zeroboard.planner import reserve
from zeroboard.planner.states import states

ROOT = Path(__file__).resolve().parents[1]
POOLS = json.loads((ROOT / "benchmarks" / "results" / "planner_pools.json").read_text())
GIB = 1 << 30
H200 = [Gpu(0, "NVIDIA H200", 143771 << 20, 139 << 30, 0, 0, (9, 0))]


sys.path.insert(0, str(ROOT / "benchmarks"))
import planner_heldout as h  # noqa: E402 - the harness that measured the rows builds their jobs
from helpers import as_measured_before_26, liger_installed  # noqa: E402


@pytest.fixture(autouse=True)
def _liger_layout(monkeypatch):
    """Plans are made as on the H200: Liger installed, its layout as tests/helpers.LIGER_LAYOUT has it; the traced
    runs ran the DeepSpeed presets as written and fp32 master weights (before issue 26)."""
    liger_installed(monkeypatch)
    as_measured_before_26(monkeypatch)



def plan_row(r):
    job = h.job_of(r["model"], r["seq"], r["micro_batch"], r["config"], Path("/tmp/zb-pools"), 4, False)
    job = replace(job, liger_kernel="on" if (r.get("speedups") or {}).get("liger") else "off", master_weights="fp32")
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
    assert p.needed_bytes / GIB >= reserved + (reserve.CONTEXT + reserve.NCCL) / GIB - 0.05


def test_first_step_layout_stacks_the_copies_above_what_the_passes_left_in_the_holes():
    """The passes fill set-up's freed ranges first; what they need beyond them and the first step's copies share
    the space above the master copy, the larger of the two counting; nothing without a first step."""
    from zeroboard.planner.states import States

    st = States(weights=10, optimizer=60, first_step=30, holes=15)
    assert reserve.first_step_layout(st, {"backward": 70 + 20}) == 70 + 15 + 30  # copies outgrow the passes' rest
    assert reserve.first_step_layout(st, {"backward": 70 + 60}) == 70 + 60  # the passes' space holds the copies
    assert reserve.first_step_layout(replace(st, holes=0), {"backward": 70 + 20}) == 70 + 30
    assert reserve.first_step_layout(replace(st, holes=40), {"backward": 70 + 10}) == 70 + 10 + 30  # part filled
    assert reserve.first_step_layout(States(weights=10), {"backward": 5}) == 0


def test_zero2_holes_are_the_flattened_parameters_and_the_partition_clone():
    shape = planner.shape_from_config(h.MODELS["qwen2.5-1.5b"][1])
    base = h.job_of("qwen2.5-1.5b", 1024, 4, "full-2", Path("/tmp/zb-pools"), 4, False)
    for n, ranks in ((1, 2 + 2), (4, 2 + 2 / 4)):
        p = planner.estimate(replace(base, num_processes=n), [H200[0]] * n, model=shape, host_available=1 << 40)
        st = states(shape, p.setup, p.trainable, p.params)
        assert st.holes == pytest.approx(ranks * p.trainable, rel=1e-6)


TRACES = json.loads((ROOT / "benchmarks" / "results" / "planner_traces.json").read_text())


@pytest.mark.parametrize("r", TRACES["rows"], ids=lambda r: f"{r['model']}-{r['config']}")
def test_needed_covers_the_traced_rows_within_fifteen_percent(r):
    """The rows traced because 'needed' had fallen short (or far over): now at or above NVML's peak, at most 15%."""
    _, p = plan_row(r)
    assert r["nvml_peak_gib"] <= p.needed_bytes / GIB <= 1.15 * r["nvml_peak_gib"]


def test_loss_drift_only_where_the_loss_builds_logits_and_offload_empties_the_pool():
    shape = planner.shape_from_config(h.MODELS["llama3.2-1b"][1])
    tokens = 4096 * 2
    _, off = plan_row({"model": "llama3.2-1b", "seq": 4096, "micro_batch": 2, "config": "full-3+off",
                       "speedups": {"liger": True}})
    assert not off.setup.fused_loss  # ZeRO-3 leaves Liger's fused loss out
    assert reserve.loss_drift(shape, off.setup) == 2 * tokens * shape.vocab + 2 * shape.vocab * shape.hidden
    untied = replace(shape, tied=False)
    assert reserve.loss_drift(untied, off.setup) == 2 * tokens * shape.vocab
    for cfg in ("full-3", "full-2+off"):
        _, p = plan_row({"model": "llama3.2-1b", "seq": 4096, "micro_batch": 2, "config": cfg,
                         "speedups": {"liger": True}})
        assert reserve.loss_drift(shape, p.setup) == 0


def test_a_fused_qkv_projection_with_rope_keeps_its_q_and_k_parts():
    """Phi-3's qkv_proj: v is a view of the projection's output, which stays whole; RoPE's q and k come on top."""
    from zeroboard.planner import activations

    phi3 = planner.shape_from_config(h.MODELS["phi3-mini"][1])
    split = replace(phi3, linears=tuple(lin for lin in planner.shape_from_config(h.MODELS["llama3.2-1b"][1]).linears))
    assert phi3.fused_qkv and not split.fused_qkv
    m = activations.ActMode("pure16", True, masked=True, seq=1024)
    q = phi3.heads * phi3.head_dim
    kv = phi3.kv_heads * phi3.head_dim
    assert activations.attention_bytes(phi3, m) - activations.attention_bytes(split, m) == 2 * (q + kv)
    big = planner.shape_from_config(dict(model_type="gpt_bigcode", n_embd=64, n_layer=2, n_head=4, vocab_size=100))
    assert big.fused_qkv and not big.rotary  # no RoPE: q, k and v are all views of c_attn's output, nothing more
    assert activations.attention_bytes(big, m) == activations.attention_bytes(replace(big, linears=()), m)
