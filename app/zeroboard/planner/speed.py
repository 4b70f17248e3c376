"""Seconds per optimizer step of a setting, built from the pieces of a step timed alone on an H200.

Pure Python (no torch). One optimizer step of a device is ``accumulation`` micro-batches and one step:

- per micro-batch: the matmuls (FLOPs at the matmul rate measured at that many tokens), attention (the SDPA kernel's
  measured time for that sequence length, with or without a mask), the elementwise work (the bytes the activations
  take, passed over a measured number of times at the measured copy rate), LoRA's adapter ops (counted from peft's
  forward), autocast's gradient casts, ZeRO-2's gradient copies, ZeRO-3's gathering of every parameter, gradient
  checkpointing's second forward pass;
- per step: the optimizer (fused AdamW at its measured rate per trainable parameter, and the passes of the
  gradient-norm clipping, of DeepSpeed's flatten/convert/copy-back), offload's host step, the reductions.

Where each constant comes from is written beside it. ``benchmarks/results/step_components.json`` gives the matmul
and attention rates, the copy rate and AdamW's rate; the rest was not timed alone and is derived from whole steps
of the 1.1 B Llama (``benchmarks/results/h200.json``, ``h200_speedups.json``, ``h200-x2.json``) as the measured
step minus what the model says for everything else: tests/test_speed.py derives each again from those files.
docs/en/gpu-results.md ("The step-time model") gives the errors on every measured row and the measured grids.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from .memory import Setup, act_mode, activation_bytes
from .shapes import ModelShape, lora_params, lora_targets

# --- measured alone on one H200 (benchmarks/results/step_components.json, benchmarks/step_components.py) ----------
# "matmul": bf16 FLOP/s of a layer's matmul by the tokens of a micro-batch (8192: the mean of its two shapes)
MATMUL_FLOPS = ((4096, 685.44e12), (8192, 753.93e12), (16384, 767.24e12))
# "attention": SDPA's causal kernel, forward + backward, seconds per sequence of 16 heads x 128 (a layer's), without
# a mask (flash / cuDNN) and with a padding mask (the memory-efficient kernel a padded micro-batch gets)
ATTENTION_S = {False: ((2048, 4.8026e-4), (4096, 7.9613e-4), (8192, 1.99898e-3)),
               True: ((2048, 5.1555e-4), (4096, 1.71002e-3), (8192, 6.4248e-3))}
ATTENTION_WIDTH = 16 * 128
ATTENTION_FORWARD = 1 / 3.5  # the forward pass's share of the kernel's work (backward 2.5 x forward), as there
COPY_BYTES_S = 2.0766e12  # "copy_gbps": bytes read + written a second by a bf16 -> fp32 conversion
ADAMW_S = 8.806e-12  # "adamw_ns_per_param": torch's fused AdamW, seconds per fp32 parameter

# --- counted from the libraries' code: bytes read + written per trainable parameter ------------------------------
TORCH_STEP_BYTES = 12  # no DeepSpeed: the gradient norm reads the fp32 gradients (4), clipping scales them (8)
AUTOCAST_GRAD_BYTES = 6  # autocast: each micro-batch's 16-bit weight gradient converted to the fp32 .grad (2 + 4)
ACCUMULATE_BYTES = 12  # no DeepSpeed, accumulation: .grad += the next micro-batch's (4 + 4 + 4)
# ZeRO-2 (deepspeed 0.19 stage_1_and_2.py) per micro-batch: each gradient copied into the reduce bucket and from
# it into the partition (2 + 2 each); per step: the norm in fp32 (2 + 4 + 4), flatten (2 + 2), to fp32 (2 + 4),
# unscale / clip (4 + 4), the fp32 master copied back to 16 bit (4 + 2), the all-gather of the partitions (2 + 2)
ZERO2_MICRO_BYTES = 8
ZERO2_STEP_BYTES = 38

# --- derived from whole measured steps (the step minus the model's other terms; tests/test_speed.py) --------------
# Passes over each activation byte: written in forward, read in backward, its gradient written and read would be 4,
# and with Liger's fused kernels it came out 4.00 (h200.json full-none, 1.1 B Llama, Liger on); PyTorch's own
# kernels move more: 6.31 (h200_speedups.json "before", the same run with Liger off).
TRAFFIC_FUSED = 4.00
TRAFFIC_PLAIN = 6.31
# Any DeepSpeed stage: the engine's own work a step, whatever it trains (h200.json lora-2: 13 M trainable
# parameters; that row notes an earlier job that may still have been leaving the GPU as it started).
ZERO_STEP_S = 0.0577
# One GPU: gathering and releasing every parameter, per micro-batch (h200.json full-3; ZeRO-3 rows moved by up to
# 20% from run to run there).
ZERO3_S_PER_PARAM = 2.85e-10
# offload's host step (CPU Adam and the copies over PCIe), 16 host cores: seconds a step + seconds per trainable
# parameter on the device; from the full and LoRA rows of h200.json (ZeRO-2 + offload, ZeRO-3 + offload)
OFFLOAD_S = {"2": (0.0871, 3.85e-10), "3": (0.0911, 2.31e-10)}
NCCL_BYTES_S = 1.02e11  # several GPUs of one host: all-reduce bytes a second, from DDP on two H200s (h200-x2.json)

# --- GPUs other than the H200: dense bf16 TFLOP/s and memory TB/s from NVIDIA's data sheets --------------------
H200 = (989.0, 4.8)
PEAKS = ((r"\bH200\b", H200), (r"\bH100\b.*\bPCIe\b", (756.0, 2.0)), (r"\bH100\b.*\bNVL\b", (835.0, 3.9)),
         (r"\bH100\b", (989.0, 3.35)), (r"\bA100\b.*40GB", (312.0, 1.555)), (r"\bA100\b", (312.0, 2.039)),
         (r"\bL40S\b", (362.0, 0.864)), (r"\bL40\b", (181.0, 0.864)), (r"\bL4\b", (121.0, 0.3)),
         (r"\bA10\b", (125.0, 0.6)), (r"\bRTX 4090\b", (165.0, 1.008)), (r"\bB200\b", (2250.0, 8.0)))


@dataclass(frozen=True)
class Rates:
    """How this GPU's rates relate to the H200's: ``source`` is "measured" (an H200), "scaled" (by the data sheet's
    bf16 peak and memory bandwidth) or "unknown" (a GPU the planner has no figures for: the H200's are used)."""

    name: str = "NVIDIA H200"
    compute: float = 1.0
    memory: float = 1.0
    source: str = "measured"


MEASURED = Rates()  # the H200 the components were measured on


def rates_for(gpu_name: str | None) -> Rates:
    for pattern, (tflops, tbs) in PEAKS:
        if gpu_name and re.search(pattern, gpu_name, re.IGNORECASE):
            if (tflops, tbs) == H200:
                return Rates(gpu_name)
            return Rates(gpu_name, tflops / H200[0], tbs / H200[1], "scaled")
    return Rates(gpu_name or "", source="unknown")


@dataclass
class StepTime:
    """Seconds of one optimizer step on a device, by part (each already summed over the micro-batches)."""

    parts: dict[str, float]

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    @property
    def mostly(self) -> str:
        """The part that takes the most time."""
        return max(self.parts, key=self.parts.get)


def _between(points, x: float, power: float) -> float:
    """Log-log interpolation between measured (x, y) points; beyond them y scales as x**power from the nearest."""
    if x <= points[0][0]:
        return points[0][1] * (x / points[0][0]) ** power
    if x >= points[-1][0]:
        return points[-1][1] * (x / points[-1][0]) ** power
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            k = math.log(y1 / y0) / math.log(x1 / x0)
            return y0 * (x / x0) ** k
    raise AssertionError(x)  # pragma: no cover


def matmul_rate(tokens: int) -> float:
    """The H200's bf16 matmul rate at a micro-batch of ``tokens`` (held at the nearest measured size beyond them)."""
    return _between(MATMUL_FLOPS, tokens, 0.0)


def matmul_flops(shape: ModelShape, s: Setup) -> float:
    """FLOPs of one micro-batch's matmuls: forward 2N, input gradients 2N, weight gradients 2N for what trains.

    LoRA: the frozen base still runs forward and passes gradients back (4N), and each adapter's two small matmuls
    take 6 FLOPs a weight. Checkpointing runs the layers' forward again. N counts the output head."""
    t = s.tokens
    n = shape.linear_weight_params
    layers_n = n - shape.vocab * shape.hidden
    flops = (4 if s.finetuning == "lora" else 6) * n * t
    if s.finetuning == "lora":
        adapters = lora_params(shape, s.lora_rank, list(s.lora_target))
        flops += 6 * adapters * t + (2 * adapters * t if s.checkpointing else 0)
    return flops + (2 * layers_n * t if s.checkpointing else 0)


def attention_seconds(shape: ModelShape, s: Setup) -> float:
    """SDPA forward + backward of one micro-batch, all layers: the measured time per sequence, scaled by the query
    width (heads x head_dim); padded or packed micro-batches, sliding windows and eager attention take the masked
    kernel's time (eager attention itself was not timed alone)."""
    width = shape.heads * shape.head_dim / ATTENTION_WIDTH
    masked = s.masked or s.eager_attention
    sliding = shape.sliding_layers if shape.sliding_window and s.seq >= shape.sliding_window and not masked else 0
    per = {m: _between(ATTENTION_S[m], s.seq, 2.0) * width for m in (False, True)}
    layers = sliding * per[True] + (shape.layers - sliding) * per[masked]
    return s.micro_batch * layers * (1 + ATTENTION_FORWARD if s.checkpointing else 1)


def activation_traffic(shape: ModelShape, s: Setup) -> float:
    """Bytes the elementwise work of one micro-batch moves: the activations it keeps (as without checkpointing: the
    same ops run), its autocast weight copies and its loss buffers, times the measured passes over them."""
    a = activation_bytes(shape, replace(s, checkpointing=False))
    kept = a["layers"] + a["other"] + a["copies_forward"] + max(a["loss_forward"], a["loss_backward"])
    passes = TRAFFIC_FUSED if (s.liger or s.liger_mlp or s.fused_loss) else TRAFFIC_PLAIN
    recompute = passes / 2 * a["layers"] if s.checkpointing else 0  # the forward pass again: half the passes
    return passes * kept + recompute


def lora_traffic(shape: ModelShape, s: Setup) -> float:
    """Bytes peft's adapter ops move in one micro-batch (peft 0.21 ``lora.Linear.forward``, dropout 0).

    Per adapted linear and token: lora_A reads the input, lora_B writes the output, scaling and the sum with the
    base output read and write it again; backward mirrors that (10 passes over the output, 7 over the input). Under
    autocast (no DeepSpeed) the fp32 adapters cast each input, twice for the inputs a matmul wrote in 16 bit; under
    ZeRO-3 they stay fp32 in a 16-bit model: inputs cast up, outputs cast back."""
    if s.finetuning != "lora":
        return 0.0
    m = act_mode(s)
    e = 4 if m.kind == "fp32" or m.adapters32 else 2
    total = 0
    for lin in lora_targets(shape, list(s.lora_target)):
        total += e * (10 * lin.fan_out + 7 * lin.fan_in)
        if m.kind == "autocast":
            total += 2 * (12 if lin.role.startswith("out") else 6) * lin.fan_in
        elif m.adapters32:
            total += 2 * 6 * (lin.fan_in + lin.fan_out)
    return float(total * shape.layers * s.tokens)


def _nccl(nbytes: float, world: int) -> float:
    """A ring all-reduce moves 2(N-1)/N of the buffer; a reduce-scatter or an all-gather half that."""
    return nbytes * 2 * (world - 1) / world / NCCL_BYTES_S if world > 1 else 0.0


def step_time(shape: ModelShape, s: Setup, rates: Rates = MEASURED) -> StepTime:
    """Seconds of one optimizer step (``s.accumulation`` micro-batches of ``s.micro_batch`` sequences) on a device."""
    lora = s.finetuning == "lora"
    trainable = lora_params(shape, s.lora_rank, list(s.lora_target)) if lora else shape.params
    psi = shape.params + (trainable if lora else 0)
    n, acc = max(1, s.world), max(1, s.accumulation)
    copy = COPY_BYTES_S * rates.memory
    stage = s.stage if s.deepspeed else "none"
    autocast = act_mode(s).kind == "autocast"
    parts = {
        "matmul": acc * matmul_flops(shape, s) / (matmul_rate(s.tokens) * rates.compute),
        "attention": acc * attention_seconds(shape, s) / rates.compute,
        "elementwise": acc * (activation_traffic(shape, s) + lora_traffic(shape, s)) / copy,
    }
    grads = acc * (AUTOCAST_GRAD_BYTES * trainable if autocast else 0)
    if stage == "none":
        grads += (acc - 1) * ACCUMULATE_BYTES * trainable
        parts["optimizer"] = trainable * (ADAMW_S / rates.memory + TORCH_STEP_BYTES / copy)
        parts["communication"] = _nccl((2 if s.pure_bf16 else 4) * trainable, n)
    else:
        parts["deepspeed"] = ZERO_STEP_S
        grads += acc * ZERO2_MICRO_BYTES * trainable if stage in ("1", "2") else 0
        if s.offload_optimizer:
            fixed, per = OFFLOAD_S.get(stage, OFFLOAD_S["2"])
            parts["offload"] = fixed + per * trainable / n
        else:
            parts["optimizer"] = trainable / n * (ADAMW_S / rates.memory + ZERO2_STEP_BYTES / copy)
        half = 2 if s.half else 4
        parts["communication"] = (acc + 1) * _nccl(half * trainable, n) / 2  # reduce-scatters, one all-gather
        if stage == "3":
            parts["zero3"] = acc * ZERO3_S_PER_PARAM * psi / rates.memory
            parts["communication"] = acc * (_nccl(half * trainable, n) + 2 * _nccl(half * psi, n)) / 2
    parts["gradients"] = grads / copy
    return StepTime({k: v for k, v in parts.items() if v})
