"""What autograd keeps for the backward pass, and the loss's buffers, per token: derived op by op.

Pure Python (no torch). Each term names the tensors it counts; the unit tests measure the same tensors with
``torch.autograd.graph.saved_tensors_hooks`` on tiny models (tests/test_planner_terms.py).

Modes (the dtype of what is saved):

- ``autocast``: ZeroBoard without DeepSpeed: fp32 weights, bf16/fp16 matmuls. The residual stream and the
  norms' outputs are fp32; every matmul casts its input to 16 bit itself, so each consumer of a norm saves
  its own 16-bit copy; the 16-bit copy of each weight is saved by its matmul.
- ``pure16``: the model itself is 16 bit (DeepSpeed casts it, or ``pure_bf16``): one 16-bit output per op.
- ``fp32``: no mixed precision.

``autocast_fp32``: the Trainer's autocast is on, on a GPU (every 16-bit run without DeepSpeed, whatever holds the
weights). CUDA autocast runs some ops in fp32 whatever their inputs (PyTorch's CUDA list; the CPU's differs):
``layer_norm`` (its input is cast to fp32 and saved so, its output is fp32 and each projection reading it casts its
own 16-bit copy) and ``pow`` (gelu_new's ``x ** 3``: from it on the activation's tensors are fp32).

Notation: t tokens of a micro-batch, H hidden, I intermediate, V vocabulary, Hq/Hkv query/key-value heads of
width d (``head_dim``, not always H/heads), T the sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass

from .shapes import Linear, ModelShape, lora_targets

ROPE_CAT = {"phi", "phi3"}  # RoPE ends in a cat: q and k are new whole tensors (partial rotary, or always)
MISC_TOKEN_BYTES = 32  # int64 input ids, labels, the loss's shifted labels, the attention mask: 4 x 8 bytes


@dataclass(frozen=True)
class ActMode:
    kind: str  # "fp32" | "pure16" (model cast to 16 bit) | "autocast" (16-bit matmuls under autocast)
    lora: bool
    adapters32: bool = False  # fp32 LoRA weights in a 16-bit model (ZeRO-3): peft casts each adapter input to fp32
    saves_frozen_inputs: bool = False  # ZeRO-3 replaces F.linear by a function that always saves its input
    liger: bool = False  # Liger's RMSNorm (saves its input + 1/rms)
    liger_mlp: bool = False  # Liger's SwiGLU/GeGLU (saves gate and up, recomputes the activation)
    masked: bool = False  # padded or packed micro-batches: SDPA gets a mask (repeat_kv, memory-efficient kernel)
    seq: int = 0  # T, for the mask's bias
    eager: bool = False  # eager attention: scores and probabilities as seq x seq matrices
    cuda: bool = True  # the kernels a GPU runs (a dropout keeps a boolean mask there)
    autocast_fp32: bool = False  # CUDA autocast on: layer_norm and pow run in fp32 (see the module's notes)

    @property
    def e(self) -> int:
        """Bytes of a matmul output."""
        return 4 if self.kind == "fp32" else 2

    @property
    def e_res(self) -> int:
        """Bytes of the residual stream (fp32 under autocast)."""
        return 2 if self.kind == "pure16" else 4


def norm_own(width: int, m: ActMode, rms: bool, fp32_out: bool = False) -> int:
    """What a norm itself keeps per token.

    Liger's RMSNorm saves its input X (in X's dtype) and 1/rms (fp32, 4 bytes a row); HF's RMSNorm saves an
    fp32 copy of X (X itself when already fp32) and 1/rms, and, when its weight trains, the normalized x in
    the input dtype (Gemma's, ``fp32_out``, in fp32: it scales by 1 + w in fp32 before casting back; found by the
    trace's cross-check). LayerNorm saves its input, mean and 1/std.
    """
    if rms and m.liger:
        return m.e_res * width + 4
    if rms:  # x / rms, kept for the weight's gradient
        return 4 * width + 4 + (0 if m.lora else (4 if fp32_out else m.e_res) * width)
    return (4 if m.autocast_fp32 else m.e_res) * width + 8


def norm_block(width: int, consumers: list[Linear], targeted: set[str], m: ActMode, rms: bool,
               fp32_out: bool = False) -> int:
    """A norm and what its consumers (the projections that read its output) save of that output, per token."""
    own = norm_own(width, m, rms, fp32_out)
    hit = [c for c in consumers if c.name in targeted]
    if not m.lora:
        if m.kind == "autocast" or (m.autocast_fp32 and not rms):  # an fp32 output (HF's RMSNorm casts it back)
            return own + 2 * width * len(consumers)  # each consumer casts the fp32 output to 16 bit itself
        return own + m.e * width  # one output tensor, shared by its consumers
    if m.kind == "autocast" or (m.autocast_fp32 and not rms):
        return own + 2 * width * len(hit)  # frozen base layers need no input for their (absent) weight grad
    if m.kind == "fp32":
        return own + (4 * width if hit else 0)
    out = 2 * width if (hit and not m.adapters32) or m.saves_frozen_inputs else 0
    return own + out + (4 * width * len(hit) if m.adapters32 else 0)  # each adapter's fp32 copy of its input


def attention_bytes(shape: ModelShape, m: ActMode) -> int:
    """The attention's saved tensors per token and layer.

    SDPA, no mask (every row of the micro-batch full): transformers passes k and v with their own Hkv heads
    (``enable_gqa``) to the flash or cuDNN kernel, which saves q, k, v, the output (shared with o_proj's input)
    and the fp32 log-sum-exp per query head. With a mask (padding or packing): k and v are repeated to Hq
    heads (``repeat_kv`` copies) for the memory-efficient kernel, which also saves the mask turned into a
    16-bit bias of T (padded to 16) entries per query.

    ``repeat_kv`` copies only from 2 key/value heads up to fewer than the query heads: one head (MQA: GPT-BigCode,
    Gemma-2B) it repeats as a view, as many as q it leaves alone (found by the trace's cross-check; the masked
    StarCoder rows had been planned 5-8% over).

    Eager: the two matmuls save q, the repeated k and v, and the probabilities; the softmax (fp32) saves its
    output, a 16-bit run also the probabilities cast back; soft-capped scores (Gemma 2) keep tanh's output: T
    entries per query head each, besides the output o_proj reads.

    A fused q/k/v projection with RoPE (Phi-3): RoPE makes q and k new tensors while v stays a view of the
    projection's output, which therefore stays alive whole: its q and k parts come on top (traced in the trainer
    on the H200, benchmarks/results/planner_traces.json), unless v is repeated by a copy.
    """
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    e = m.e
    fused = e * (q + kv) if shape.fused_qkv and shape.rotary else 0
    if m.eager or m.masked:
        copies = 1 < shape.kv_heads < shape.heads
        kv_saved, kept = (2 * q, 0) if copies else (2 * kv, fused)
        if m.eager:
            per_score = 4 + (e if e != 4 else 0) + (e if shape.attn_softcap else 0)
            return e * (2 * q + kv_saved) + shape.heads * m.seq * per_score + kept
        return e * (2 * q + kv_saved) + 4 * shape.heads + mask_bias(m) + kept
    return e * (2 * q + 2 * kv) + 4 * shape.heads + fused


def mask_bias(m: ActMode) -> int:
    """The mask as the attention kernel keeps it, per token: a GPU's memory-efficient kernel a 16-bit bias of T
    entries padded to 16; the CPU's flash kernel the mask as given, in q's dtype."""
    return 2 * (-(-m.seq // 16) * 16) if m.cuda else m.e * m.seq


def qk_norm_bytes(shape: ModelShape, m: ActMode) -> int:
    """Qwen3 / Gemma3 normalize q and k per head before RoPE: each norm keeps its input (+ 1/rms per head)."""
    if not shape.qk_norm:
        return 0
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    per = m.e if m.liger else 4  # HF's norm keeps an fp32 copy
    kept = 4 if shape.norm_fp32 else m.e  # HF's: x/rms for its weight's gradient (Gemma's in fp32)
    normalized = kept * (q + kv) if not m.lora and not m.liger else 0
    return per * (q + kv) + 4 * (shape.heads + shape.kv_heads) + normalized


def layer_act_bytes(shape: ModelShape, m: ActMode, targets: list[str], rank: int) -> int:
    """Bytes autograd keeps per token for one transformer layer (with eager attention, T entries per head)."""
    e = m.e
    inter = shape.intermediate
    q = shape.heads * shape.head_dim
    targeted = {lin.name for lin in lora_targets(shape, targets)} if m.lora else set()
    by_role = {r: [lin for lin in shape.linears if lin.role == r] for r in ("in_attn", "out_attn", "in_mlp", "out_mlp")}
    f32 = shape.norm_fp32
    if shape.parallel:  # one norm, read by the attention's and the MLP's input projections alike
        total = norm_block(shape.hidden, by_role["in_attn"] + by_role["in_mlp"], targeted, m, shape.rms_norm, f32)
    else:
        total = norm_block(shape.hidden, by_role["in_attn"], targeted, m, shape.rms_norm, f32)
        total += norm_block(shape.hidden, by_role["in_mlp"], targeted, m, shape.rms_norm, f32)
    total += attention_bytes(shape, m) + qk_norm_bytes(shape, m)
    total += shape.post_norms * norm_own(shape.hidden, m, shape.rms_norm, f32)  # nothing reads their output but the sum
    if m.lora and any(lin.name in targeted for lin in by_role["out_attn"]):
        total += 4 * q if m.adapters32 else (2 * q if m.kind == "autocast" else 0)
    # gated: gate, act(gate), up (Liger's kernels recompute act(gate)); plain: fc1's output (kept by the activation)
    if shape.gated:
        total += e * inter * (2 if m.liger_mlp else 3)
    elif shape.act_extra and m.autocast_fp32:
        # gelu_new under CUDA autocast: pow gets an fp32 copy of fc1's output and keeps it; tanh's output and
        # 1 + tanh are fp32 from there on; 0.5·x stays 16 bit (on the H200, Phi-2 at 4 x 2048: 59 KB a token and
        # layer over the 16-bit count, 61 KB derived)
        total += 4 * inter + (4 + e + 4) * inter
    else:
        total += e * inter * (1 + shape.act_extra)  # fc1's output; gelu_new: tanh's output, 0.5·x and 1 + tanh
    # each dropout's mask: CUDA's fused kernel keeps a 1-byte boolean, the CPU path the scaled noise in x's dtype
    total += shape.resid_dropouts * shape.hidden * (1 if m.cuda else m.e_res)
    if shape.model_type in ROPE_CAT and not m.cuda and not m.eager:
        # the attention output is copied (reshape + contiguous) before the output projection on the CPU, whose kernel
        # writes in q's layout (RoPE's cat makes q whole); a GPU's kernel writes the layout that needs no copy
        total += e * q
    down_hit = m.lora and any(lin.name in targeted for lin in by_role["out_mlp"])
    if not m.lora or m.saves_frozen_inputs:
        total += e * inter  # down_proj's input
    elif down_hit and not m.adapters32:
        total += 2 * inter if m.kind == "autocast" else e * inter
    if down_hit and m.adapters32:
        total += 4 * inter
    if m.lora:  # lora_A's output, kept by lora_B
        total += len(targeted & {lin.name for lin in shape.linears}) * rank * (4 if m.kind == "fp32" or m.adapters32 else 2)
    return total


def outside_bytes(shape: ModelShape, m: ActMode) -> int:
    """Per token outside the layers: the final norm's own saves, ids/labels/mask, RoPE's cos and sin (fp32), the
    boolean attention mask (T a token) when there is one, the embeddings' dropout mask.

    The head's input is counted with the loss (the fused loss keeps none of it)."""
    rope = 8 * shape.head_dim if shape.rotary else 0
    return (norm_own(shape.hidden, m, shape.rms_norm, shape.norm_fp32) + MISC_TOKEN_BYTES + rope + (m.seq if m.masked else 0)
            + (shape.hidden * (1 if m.cuda else m.e_res) if shape.embd_dropout else 0))


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def flce_chunk(tokens: int, shape: ModelShape) -> int:
    """Liger's fused linear cross-entropy works on chunks of c rows: c = next_pow2(ceil(t / ceil(V / H)))."""
    inc = -(-shape.vocab // shape.hidden)
    return next_pow2(-(-tokens // inc))


def loss_bytes(shape: ModelShape, m: ActMode, tokens: int, fused: bool, head_trains: bool,
               liger_ce: bool = False) -> dict[str, int]:
    """The loss's buffers: ``forward`` (its peak inside the loss), ``kept`` (alive into backward), ``backward``
    (its peak at the start of backward), all in bytes for one micro-batch.

    Fused (Liger, labels given: the logits are never built): the input gradient t·H and, when the head trains,
    the head's weight gradient V·H are computed in the forward pass and kept, in the dtype of the input and
    the weight; per chunk a 16-bit c·V logits block (overwritten in place by its gradient) and, when the
    weight is fp32 under autocast, an uncached 16-bit cast of the weight (2·V·H). Not fused (HF's loss): the
    16-bit logits t·V, their fp32 copy, the fp32 log-softmax (10·t·V bytes inside the loss); at the start of
    backward the log-softmax, the NLL's gradient and the log-softmax's gradient (12·t·V). Soft-capped logits
    (Gemma 2) keep tanh's output, logits-sized, until backward.
    """
    t, v, h = tokens, shape.vocab, shape.hidden
    if not fused:  # the head saves its (16-bit) input for its weight's gradient
        kept = m.e * t * h if head_trains or m.saves_frozen_inputs else 0
        kept += m.e * t * v if shape.final_softcap else 0
        if liger_ce:  # the 16-bit logits and their fp32 copy, into which Liger writes the gradient in the forward pass
            return {"forward": kept + 6 * t * v, "kept": kept, "backward": kept + 8 * t * v}
        return {"forward": kept + 10 * t * v, "kept": kept, "backward": kept + 12 * t * v}
    c = flce_chunk(t, shape)
    w16 = m.kind != "autocast"  # 16-bit (or fp32 without autocast) weights: no cast
    in_bytes, w_bytes = m.e_res, (2 if m.kind == "pure16" else 4)
    kept = in_bytes * t * h + (w_bytes * v * h if head_trains else 0)
    transient = m.e * c * (v + h) + (0 if w16 else 2 * v * h)
    return {"forward": kept + transient, "kept": kept, "backward": kept}


def autocast_copies(shape: ModelShape, s_lora: bool, checkpointing: bool) -> dict[str, int]:
    """16-bit copies of the weights that autocast makes (fp32 weights only).

    A trainable weight's cast is cached until the model's forward returns; every matmul also saves its 16-bit
    weight for the input's gradient, so without checkpointing all copies live until their layer's backward
    (frozen weights too: their casts are not cached but saved). With checkpointing only the cache holds them:
    all trainable ones at the end of the forward pass, one layer's in backward.
    """
    layer_w = shape.linear_weight_params - shape.vocab * shape.hidden
    head = 2 * shape.vocab * shape.hidden
    if not checkpointing:
        return {"forward": 2 * layer_w + head, "backward": 2 * layer_w + head}
    if s_lora:  # frozen weights are not cached
        return {"forward": 0, "backward": 2 * layer_w // shape.layers}
    return {"forward": 2 * layer_w + head, "backward": 2 * layer_w // shape.layers}
