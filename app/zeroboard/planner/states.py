"""Model states and DeepSpeed's buffers on one device, by moment of the step: derived from the libraries' code.

Pure Python (no torch). Figures are bytes per device; P = trainable parameters, Ψ = all, N = devices.

- **No DeepSpeed** (ZeroBoard's trainer): fp32 weights (16 bit with ``pure_bf16``), torch's fused AdamW
  (two states, no step temporaries), gradients in the weights' dtype until the step; DDP's buckets (one
  copy of the gradients) with several processes.
- **ZeRO-2** (DeepSpeed 0.19 ``stage_1_and_2.py``): the 16-bit model as one flat buffer (2Ψ), the fp32 master
  copy and AdamW states of this rank's partition (12P/N). At the first gradient hook of the backward pass
  it allocates two reduce buckets of ``reduce_bucket_size`` elements (overlap_comm: 2 x 2 bytes x RBS); at the
  first bucket flush the 16-bit gradient partition (2P/N), and a flattened copy of the flushed bucket. The
  step flattens the gradient partition again (2P/N) and converts it to fp32 (4P/N): 2Ψ + 20P/N at its peak.
  With gradient accumulation the partition of the micro-batches before stays alive beside the next one's.
  With optimizer offload the GPU keeps the model, the buckets and a staging buffer of the largest parameter.
- **Preference tuning**: a full fine-tune of dpo or kto keeps a frozen reference copy of the model (TRL's
  ``ref_model``: the model's dtype, 16 bit under DeepSpeed, a partition of it under ZeRO-3; :func:`reference`);
  LoRA's reference is the base itself (adapters off: no copy); orpo and simpo have none.
- **QLoRA** (bitsandbytes): every linear layer of the frozen base packed to 4 bits (two weights a byte) with an
  absmax per 64-weight block, itself quantized to 8 bits with one fp32 constant per 256 blocks (double
  quantization); or 8 bits with an fp32 scale per output row. Embeddings, norms and the head stay 16 bit
  (:func:`quantized_saving`). The packed bytes are stored in the compute dtype so ZeRO-3 shards them.
- **ZeRO-3** (``stage3.py``): 16-bit partitions (2Ψ/N; LoRA adapters made after ``zero.Init`` stay fp32),
  small parameters (≤ 10·H elements: norms, biases) whole on every GPU, a flat 16-bit gradient buffer (2P/N,
  allocated at init), one reduce bucket (``reduce_bucket_size``: H² when "auto"). Parameters in use are
  gathered; with ``max_reuse_distance`` 1e9 those used again within 1e9 elements stay gathered: at the turn
  from forward to backward up to 1e9 elements of the model are whole (measured on the 1.1 B Llama). On one GPU
  without parameter offload a gathered parameter is its own partition. The step flattens and converts one
  sub-group at a time (6 bytes an element); the gradient norm takes an fp64 copy of each gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .shapes import ModelShape

WORKSPACE = 64 << 20  # cuBLAS workspaces on sm90: 32 MiB per handle, one for forward and one for backward


def pow2(n: int) -> int:
    """Pinned host memory comes from torch's caching host allocator, which rounds each block up to a power of two."""
    return 1 << max(0, (n - 1).bit_length()) if n > 0 else 0


@dataclass
class States:
    """What the model states and DeepSpeed hold on one device, at each moment of a step."""

    weights: int = 0
    optimizer: int = 0
    grads: int = 0  # resident gradient buffers (ZeRO-3's flat buffer)
    buffers: int = 0  # workspaces, DDP buckets, ZeRO-3's reduce bucket, the offload staging buffer
    backward: int = 0  # allocated at the first gradient hook and alive through backward (ZeRO-2's buckets)
    head_grad: int = 0  # the head's weight gradient, alive from the start of backward (not fused, head trains)
    flush: dict = field(default_factory=dict)  # ZeRO-2's first bucket flush: numel before it, bytes it adds
    grads_end: int = 0  # gradients alive after backward, until the step frees them
    end_extra: int = 0  # transient at the end of backward (a tied embedding's two gradients and their sum)
    step_extra: int = 0  # transient at the optimizer step
    live_params: int = 0  # ZeRO-3's gathered parameters at the turn from forward to backward
    host: int = 0  # offloaded states on the host, pinned where DeepSpeed pins them
    side: int = 0  # memory DeepSpeed takes on its own CUDA streams: pools the main stream cannot reuse
    first_step: int = 0  # ZeRO-2's gradient copies at the first step, below AdamW's states created then
    holes: int = 0  # ranges set-up frees before the first pass (ZeRO-2), which the passes' blocks may fill
    accumulated: int = 0  # ZeRO-1/2 with accumulation: the micro-batches' summed partition, alive through the next ones

    @property
    def resident(self) -> int:
        return self.weights + self.optimizer + self.grads + self.buffers


def small_params(shape: ModelShape, threshold: int = 0) -> int:
    """Parameters ZeRO-3 keeps whole on every GPU (``stage3_param_persistence_threshold`` elements each or fewer;
    "auto": 10·H): norms, biases, and the linears under a larger threshold."""
    if shape.census:  # the traced model's parameters by size
        limit = threshold or 10 * shape.hidden
        return sum(n * count for n, count in shape.census["sizes"] if n <= limit)
    biases = sum(lin.fan_out for lin in shape.linears if lin.bias)
    small = shape.layers * (shape.extra_layer_params + biases) + shape.final_norm_params
    if threshold > 10 * shape.hidden:
        small += shape.layers * sum(lin.fan_in * lin.fan_out for lin in shape.linears if lin.fan_in * lin.fan_out <= threshold)
        small += shape.embedding_params if shape.embedding_params <= threshold else 0
    return min(small, shape.params)


def states(shape: ModelShape, s, trainable: int, psi: int) -> States:
    """``s``: the memory Setup; ``psi``: all parameters (base + adapters); ``trainable``: what the optimizer updates."""
    n = max(1, s.world)
    lora = s.finetuning == "lora"
    frozen = psi - trainable if lora else 0
    out = States(buffers=WORKSPACE if s.device == "cuda" else 0)
    vh = shape.vocab * shape.hidden
    head_trains = not lora or "lm_head" in s.lora_target
    if not s.deepspeed:
        wbytes = 2 if s.weights16 else 4
        pure = s.weights == "pure_bf16"
        abytes = (2 if pure else 4) if lora else wbytes  # peft makes fp32 adapters unless pure bf16
        out.weights = wbytes * frozen + abytes * trainable if lora else wbytes * psi
        # AdamW's two states in the weights' dtype; the split master: two fp32 states and the int16 remainder
        out.optimizer = (10 if s.weights == "split" and not lora else 2 * abytes) * trainable
        out.grads_end = abytes * trainable
        if n > 1:
            out.buffers += abytes * trainable  # DDP's gradient buckets live for the whole run
        if shape.tied and head_trains:
            out.end_extra = 2 * abytes * vh  # the head's gradient waits for the embedding's; then their sum
        if head_trains and not s.fused_loss:
            out.head_grad = abytes * vh
        return out
    half = 2 if s.half else 4
    stage = int(s.stage)
    if stage == 3:
        return _zero3(shape, s, out, trainable, frozen, half, n)
    # ZeRO-0/1/2: the 16-bit model whole on every GPU
    out.weights = half * (frozen + trainable)
    rbs = s.reduce_bucket or 500_000_000
    opt = (4 + 8) * trainable // (n if stage >= 1 else 1)
    gpart = half * trainable // (n if stage >= 2 else 1)
    largest = min(shape.largest_param, trainable) if not lora else max(
        (s.lora_rank * max(lin.fan_in, lin.fan_out) for lin in shape.linears), default=0)
    # two buckets with overlap_comm (one without), whatever the number of trainable parameters; on CPU a host page is
    # mapped when first written, so RSS holds only the part the gradients fill
    buckets = 2 if s.overlap_comm else 1
    out.backward = half * min(buckets * rbs, trainable) if s.device == "cpu" else buckets * half * rbs
    if s.offload_optimizer:
        out.buffers += half * largest  # temp_grad_buffer_for_gpu_offload
        out.backward += 4 * largest  # a gradient slice converted to fp32 before its copy to the host
        out.flush = {"after": min(rbs, trainable), "bytes": half * min(rbs, trainable)}
        out.host = 2 * pow2(4 * trainable // n) + pow2(2 * trainable // n) + 8 * trainable // n + pow2(half * largest)
        out.side = 8 * largest  # each gradient's norm, taken in fp64 on the reduction stream
    else:
        # the gradient partition is allocated on the reduction stream (copy_grads_in_partition); without overlap_comm
        # that is the main stream, whose pool the passes share
        out.side = gpart if s.overlap_comm else 0
        out.optimizer = opt
        # the gradient partition and a flattened copy of the flushed bucket
        out.flush = {"after": min(rbs, trainable), "bytes": gpart + half * min(rbs, trainable)}
        out.grads_end = gpart
        out.step_extra = gpart + 4 * trainable // (n if stage >= 2 else 1)  # flat 16-bit copy, then its fp32 copy
        out.first_step = out.step_extra  # ... made before AdamW's states exist (see reserve.first_step_layout)
        if s.accumulation > 1:
            # between micro-batches the epilogue keeps views of the partition it filled (all_grad_tensors); the next
            # backward fills a new partition and adds it in: the forward passes after the first hold one partition
            # more, the flushes after it two (stage_1_and_2.independent_gradient_partition_epilogue)
            out.accumulated = gpart
            out.side += gpart if s.overlap_comm else 0
        # set-up frees the 16-bit parameters once flattened into one buffer, and the partition's 16-bit clone once
        # converted to the fp32 master copy (stage_1_and_2.py __init__)
        out.holes = half * trainable + half * trainable // n
    return out


def _zero3(shape: ModelShape, s, out: States, trainable: int, frozen: int, half: int, n: int) -> States:
    lora = s.finetuning == "lora"
    adapter = 4 if (lora and s.half) else half  # adapters made after zero.Init stay fp32
    small = small_params(shape, s.persistence)
    rbs = s.reduce_bucket or shape.hidden * shape.hidden
    out.buffers += half * small + half * rbs  # small parameters whole, one reduce bucket
    parts = half * (frozen - (small if lora else 0)) + adapter * trainable - (0 if lora else half * small)
    if not s.offload_param:
        out.weights = max(parts, 0) // n
    if not s.offload_optimizer:
        out.optimizer = 12 * trainable // n
        out.grads = half * trainable // n  # the flat gradient buffer, allocated at init
        sub = min(trainable // n, s.sub_group + shape.largest_param)
        norm = 8 * min(shape.largest_param, trainable) // n
        out.step_extra = max(6 * sub, norm)
    psi = frozen + trainable
    reuse = s.reuse_distance
    # Read from the trace rule, a parameter stays gathered when used again within ``reuse`` elements, i.e. the last
    # reuse/2 of the forward pass; the 1.1 B Llama's offload runs (benchmarks/results/h200.json) hold ~reuse.
    live = min(psi - small, reuse)
    live += s.prefetch_bucket or int(0.9 * shape.hidden * shape.hidden)  # the prefetch bucket ("auto": 0.9 H²)
    if s.offload_param or n > 1:  # on one GPU a gathered parameter is its own partition; else a new whole buffer
        out.live_params = half * live
    head_trains = not lora or "lm_head" in s.lora_target
    if head_trains:  # a parameter larger than the bucket keeps its whole 16-bit gradient until it is reduced
        out.head_grad = half * shape.vocab * shape.hidden
    out.backward = 2 * half * rbs  # reduce-scatter temporaries of one bucket
    if s.offload_optimizer:
        out.host = 3 * pow2(4 * trainable // n) + 8 * trainable // n + pow2(half * trainable // n)
    if s.offload_param:
        out.host += pow2(half * max(parts, 0) // n)
    return out


def reference(shape: ModelShape, s, psi: int) -> int:
    """Bytes per device of a frozen reference copy of the model (full fine-tuning of dpo or kto), placed as the model
    is: 16 bit under DeepSpeed, sharded at ZeRO-3; the weights' dtype without it."""
    if not s.reference:
        return 0
    if s.deepspeed:
        return (2 if s.half else 4) * psi // (max(1, s.world) if s.stage == "3" else 1)
    return (2 if s.weights16 else 4) * psi


def quantized_bytes(numel: int, bits: int) -> int:
    """Bytes of ``numel`` quantized weights with their constants: 4 bit NF4 with double quantization (an 8-bit
    absmax per 64 weights, an fp32 constant per 256 absmaxes), or 8 bit with ~an fp32 scale per row (per 4096)."""
    if bits == 4:
        return numel // 2 + numel // 64 + 4 * (numel // (64 * 256) + 1)
    return numel + 4 * (numel // 4096 + 1)


def quantized_saving(shape: ModelShape, s) -> int:
    """What QLoRA takes off the frozen base's weights on one device: every linear layer of every block quantized."""
    if not s.quant_bits or s.finetuning != "lora":
        return 0
    linear = shape.layers * sum(lin.fan_in * lin.fan_out for lin in shape.linears)
    held = 2 if s.half else 4  # the base as it would load otherwise (16 bit under DeepSpeed or LoRA's bf16 base)
    return max(0, held * linear - quantized_bytes(linear, s.quant_bits)) // (max(1, s.world) if s.stage == "3" else 1)
