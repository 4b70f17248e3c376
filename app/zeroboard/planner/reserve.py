"""What NVML charges a GPU process above torch's allocator peak: the plan's "needed" minus its peak.

Pure Python (no torch). Each term says where it comes from:

- ``context``: the CUDA context and loaded kernels (H200, CUDA 13, torch 2.11: 1.28 GiB in every run), and NCCL's
  communicator where the job all-reduces (ZeRO-2, or several processes: 0.38 GiB);
- ``streams``: pools of DeepSpeed's own CUDA streams, which the main stream cannot reuse (:mod:`.states` ``side``:
  ZeRO-2's gradient partition on the reduction stream with ``overlap_comm``, the fp64 norms with offload);
- ``layout``: memory the caching allocator (expandable segments) holds but has not handed out at the peak: freed
  blocks the next request cannot use. At least a share of what moves during a step (:data:`SLACK`); for ZeRO-1/2
  the layout of its first step when larger (:func:`first_step_layout`, traced on the H200); the loss's logits-sized
  blocks where HF's loss builds them (:func:`hf_loss_hole`, :func:`loss_drift`).

DeepSpeed's own buffers (reduce buckets, the gradient partition, ZeRO-3's prefetch and gathered parameters) are
allocated through torch: they are in the peak already (:mod:`.states`); what they add here is where they land.
"""

from __future__ import annotations

GIB = 1024**3
CONTEXT = int(1.28 * GIB)
NCCL = int(0.38 * GIB)
# Memory the allocator holds but has not handed out at the peak, as a share of what changes during a step
# (calibration set, expandable segments): 0.3% to 4.5% without DeepSpeed or checkpointing; up to 10% with
# checkpointing (small, varied blocks) and 4% to 14.5% under ZeRO-3
SLACK = 0.05
SLACK_VARIED = 0.15  # ZeRO-3 or gradient checkpointing


def terms(shape, s, st, totals: dict[str, int], peak: int) -> dict[str, int]:
    """The bytes NVML shows above the allocator's peak, by term (module notes); zero on CPU processes."""
    if s.device != "cuda":
        return {}
    moving = peak - st.resident
    share = SLACK_VARIED if (s.stage == "3" or s.checkpointing) else SLACK
    layout = max(int(share * moving), first_step_layout(st, totals, s.overlap_comm) - peak)
    return {"context": CONTEXT + (NCCL if (s.stage == "2" or s.world > 1) else 0), "streams": st.side,
            "layout": layout, "loss": hf_loss_hole(shape, s) + loss_drift(shape, s)}


def first_step_layout(st, totals: dict[str, int], overlap_comm: bool = True) -> int:
    """What ZeRO-1/2's pool holds from its first step on (traced on the H200: benchmarks/results/planner_pools.json
    and planner_traces.json).

    Set-up leaves freed ranges below the fp32 master copy (``States.holes``); the first passes fill them and go on
    above the master copy. At the first step the gradient copies go above the master copy too (a hole is never
    quite large enough for them), and AdamW's states, created then, go above the copies and the passes' space.
    Later steps reuse the same addresses: the pool keeps the model states, the filled holes, and the larger of
    the passes' space and the copies.

    Without ``overlap_comm`` (ZeroBoard's choice on one GPU) the gradient partition is made on the main stream,
    in the passes' space, at the first bucket flush, and lives until the step. At the step the fp32 copy of the
    partition (4P/N, one block) needs a free range beside it: when what the passes leave above the master copy,
    less the partition(s), is smaller, the copies go above everything held (issue 34's Gemma-2B at 4096 x 2: NVML
    67.5 GiB against 57.7 planned; the step's copies stacked on the passes' space, 70.3 GiB).
    """
    if not st.first_step:
        return 0
    passes = max(totals["backward"], totals.get("flush", 0)) - st.resident
    filled = min(st.holes, passes)
    if not overlap_comm:
        fp32_copy = st.step_extra - st.grads_end
        beside = passes - filled - st.grads_end - st.accumulated
        if beside < fp32_copy:
            return st.resident + passes + st.first_step
    passes = totals["backward"] - st.resident
    filled = min(st.holes, passes)
    return st.resident + filled + max(passes - filled, st.first_step)


def _e(s) -> int:
    """Bytes of the model's 16-bit (or fp32) dtype: logits and a gathered embedding alike."""
    return 2 if s.precision in ("bf16", "fp16") else 4


def hf_loss_hole(shape, s) -> int:
    """HF's loss without DeepSpeed's varied layouts (no ZeRO-3, no checkpointing): one 16-bit logits-sized block more
    than the 5% share. Measured, not derived: the GPT-BigCode rows of the fourth held-out set and its confirmation
    (benchmarks/results/planner_heldout4.json) had 0.2-0.4 GiB more above the allocator's peak than the share gave,
    about 1-1.4 bytes a token and vocabulary entry; the Liger-patched families never build these buffers."""
    if s.device != "cuda" or s.fused_loss or s.liger_ce or s.stage == "3" or s.checkpointing:
        return 0
    return _e(s) * s.tokens * shape.vocab


def loss_drift(shape, s) -> int:
    """Room for the loss's logits-sized buffers moving between steps: ZeRO-3 with offload (its loss is HF's).

    With offload the pool is nearly empty between steps but for the gathered tied embedding, which splits the free
    space; a logits-sized buffer that misses its last hole by a few MiB is mapped anew above it (traced on the
    H200: benchmarks/results/planner_traces.json): one more 16-bit logits tensor, and the split.
    """
    if s.device != "cuda" or s.stage != "3" or not s.offload_optimizer or s.fused_loss:
        return 0
    e = _e(s)
    return e * s.tokens * shape.vocab + (e * shape.vocab * shape.hidden if shape.tied else 0)
