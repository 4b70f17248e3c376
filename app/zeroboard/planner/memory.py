"""Memory of one training setup, term by term: model states, activations, buffers.

Pure Python (no torch): the web server calls it on every form change.

The estimate follows what the trainer really holds at its peak, term by term:

- **model states**: weights, gradients and AdamW states, split over the N
  devices the way the ZeRO stage splits them (the guide's 16Ψ, 2Ψ+14Ψ/N,
  16Ψ/N), in the dtypes ZeroBoard uses: without DeepSpeed it loads fp32
  weights and trains under bf16/fp16 autocast (so 4Ψ weights + 8Ψ Adam, and
  autocast's 16-bit copies of the weights live as long as the activations);
  with DeepSpeed the model is cast to 16 bit and the fp32 master weights live
  in the optimizer.
- **activations**: what autograd saves for the backward pass, counted per
  token and layer from the module structure (norms, attention with a fused
  SDPA kernel, gated or plain MLP, LoRA branches), plus the fp32 log-softmax
  of the loss and two logits-sized fp32 temporaries around it.
- **buffers**: CUDA/cuBLAS workspaces, DDP gradient buckets, ZeRO-3's live
  gathered parameters, the ZeRO-2 offload staging buffer.

Calibrated on an H200 with the real trainer (benchmarks/planner_accuracy.py
--gpu-matrix).  Peak memory is taken for the longest batch (micro-batch x
cutoff_len tokens).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from ..job import checks, devices, modelinfo, placement
from ..job.spec import JobSpec
from ..words import text
from .shapes import Linear, ModelShape, PlanError, lora_params, lora_targets

GIB = 1024**3
WORKSPACE = 64 << 20  # cuBLAS/CUDA workspaces the allocator shows at every step (measured: 64 MiB)
CONTEXT = int(1.5 * GIB)  # CUDA context + allocator slack between torch's peak and what NVML shows
CPU_RUNTIME = int(0.39 * GIB)  # RSS of a CPU rank: Python + torch + transformers (measured by the benchmark)
CPU_RUNTIME_DS = int(0.43 * GIB)  # ... with DeepSpeed imported and its shm comm op loaded
GPU_HOST_RUNTIME = int(1.0 * GIB)  # host RSS of a GPU rank besides model data
OFFLOAD_OPT_BYTES = 25  # host bytes per trainable parameter with optimizer offload (fp32 master, m, v,
#                         fp32 grads, pinned staging): fitted to the H200 runs, within 10%
OFFLOAD_PARAM_BYTES = 3  # host bytes per parameter with ZeRO-3 parameter offload (16-bit copy + staging)
CPU_HEAP_OVERHEAD = {"full": 0.08, "lora": 0.25}  # RSS above the live activation tensors on CPU (glibc heap);
#                      fitted to the mid-size CPU runs of the benchmark (LoRA makes many more small tensors)
LOSS_TEMP_BYTES = 8  # per token and vocab entry: two fp32 logits-sized tensors around the loss
MISC_TOKEN_BYTES = 200  # ids, labels, mask, positions: per token, whole model


# --- the training setup -------------------------------------------------------------------

@dataclass(frozen=True)
class Setup:
    """Everything besides the model that decides memory; built from a JobSpec by :func:`setup_of`."""

    finetuning: str  # "full" | "lora"
    stage: str  # "none" | "0" | "1" | "2" | "3"
    offload_optimizer: bool
    offload_param: bool
    world: int
    device: str  # "cuda" | "cpu"
    precision: str  # "bf16" | "fp16" | "fp32" (resolved)
    micro_batch: int
    seq: int
    checkpointing: bool
    lora_rank: int = 8
    lora_target: tuple[str, ...] = ("all",)
    max_live_params: int = 1_000_000_000
    weights_16bit_without_ds: bool = False  # a script that loads the model in 16 bit (the reference table)
    pure_bf16: bool = False  # the job's pure_bf16: 16-bit weights, adapters and AdamW states, no master copy
    liger: bool = False  # Liger's RMSNorm / SwiGLU kernels: they save less for the backward pass
    eager_attention: bool = False  # attn_implementation eager: each layer keeps its seq x seq attention weights
    fused_loss: bool = False  # Liger's fused linear cross-entropy: the logits are never materialized
    offload_requested: bool = False  # the DeepSpeed config offloads (on CPU processes that moves nothing)

    @property
    def deepspeed(self) -> bool:
        return self.stage != "none"

    @property
    def half(self) -> bool:
        return self.precision in ("bf16", "fp16")

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq

    def label(self, lang: str = "en") -> str:
        """The setting in words: no DeepSpeed, ZeRO-2, ZeRO-3 + offload (optimizer + params), ..."""
        return setting_label(self.stage, self.offload_optimizer, self.offload_param, lang=lang)


def setting_label(stage: str, offload_optimizer: bool, offload_param: bool, checkpointing: bool = False,
                  lang: str = "en") -> str:
    name = text("plan.no_deepspeed", lang) if stage == "none" else f"ZeRO-{stage}"
    if offload_optimizer:
        name += text("plan.offload_both" if offload_param else "plan.offload_opt", lang)
    return name + (text("plan.with_ckpt", lang) if checkpointing else "")


def setup_of(spec: JobSpec, gpus: list[devices.Gpu]) -> Setup:
    """The memory-relevant setting of a job, from its placement (the effective stage and offload)."""
    where = placement.place(spec, gpus)
    if where.ds_error is not None:
        raise PlanError(where.ds_error)
    zero = (where.ds_config or {}).get("zero_optimization") or {}
    live = zero.get("stage3_max_live_parameters", 1_000_000_000) if isinstance(zero, dict) else 1_000_000_000
    on_gpu = where.kind == "cuda"
    return Setup(spec.finetuning_type, where.stage, where.offload_optimizer and on_gpu, where.offload_param and on_gpu,
                 max(1, where.world_size), where.kind, where.precision, spec.per_device_train_batch_size, spec.cutoff_len,
                 spec.gradient_checkpointing, spec.lora_rank, tuple(spec.lora_target),
                 int(live) if isinstance(live, (int, float)) else 1_000_000_000, offload_requested=where.offload)


# --- activations: bytes autograd saves, per token ------------------------------------------

@dataclass(frozen=True)
class ActMode:
    kind: str  # "fp32" | "pure16" (model cast to 16 bit) | "autocast" (16-bit matmuls under autocast)
    lora: bool
    adapters32: bool = False  # fp32 LoRA weights in a 16-bit model: peft casts each adapter input to fp32
    saves_frozen_inputs: bool = False  # ZeRO-3 replaces F.linear by a function that always saves its input
    liger: bool = False  # RMSNorm saves only its input (in the residual's dtype); SwiGLU saves gate and up, not act(gate)


def act_mode(s: Setup) -> ActMode:
    return replace(_act_mode(s), liger=s.liger)


def _act_mode(s: Setup) -> ActMode:
    lora = s.finetuning == "lora"
    if not s.half:
        return ActMode("fp32", lora)
    if not s.deepspeed:
        if s.pure_bf16:
            return ActMode("pure16", lora)
        # ZeroBoard: fp32 weights + autocast. A 16-bit model + autocast behaves like pure16 for full
        # fine-tuning (every cast is a no-op) and like autocast for its fp32 adapters.
        return ActMode("pure16" if s.weights_16bit_without_ds and not lora else "autocast", lora)
    z3 = s.stage == "3"
    # The engine casts the module to 16 bit at ZeRO-0/1/2; at ZeRO-3 the adapters, created after
    # zero.Init, stay fp32 (seen on the H200: +24h+4I bytes per token and layer).
    return ActMode("pure16", lora, adapters32=lora and z3, saves_frozen_inputs=z3)


def _norm_block(width: int, consumers: list[Linear], targeted: set[str], m: ActMode, rms: bool) -> int:
    """A norm and what its consumers (the projections that read it) save of its output."""
    wide = m.kind == "fp32"
    # the norm's own saved input: RMSNorm upcasts to fp32 (a 4-byte copy); LayerNorm keeps the residual dtype;
    # Liger's RMSNorm keeps its input as it came and recomputes the rest
    own = 4 * width if ((rms and not m.liger) or m.kind != "pure16") else 2 * width
    if not m.lora:
        if rms and not m.liger:
            own += (4 if m.kind != "pure16" else 2) * width  # normalized x, kept for the weight's grad
        if m.kind == "autocast":
            return own + 2 * width * len(consumers)  # each consumer casts the fp32 output to 16 bit itself
        return own + (4 if wide else 2) * width  # one output tensor, shared by its consumers
    hit = [c for c in consumers if c.name in targeted]
    if m.kind == "autocast":
        return own + 2 * width * len(hit)
    if m.kind == "fp32":
        return own + (4 * width if hit else 0)
    out = 2 * width if (hit and not m.adapters32) or m.saves_frozen_inputs else 0
    return own + out + (4 * width * len(hit) if m.adapters32 else 0)


def layer_act_bytes(shape: ModelShape, m: ActMode, targets: list[str], rank: int) -> int:
    """Bytes autograd keeps per token for one transformer layer (fused SDPA: no seq^2 term)."""
    e = 4 if m.kind == "fp32" else 2
    q, kv, inter = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    targeted = {lin.name for lin in lora_targets(shape, targets)} if m.lora else set()
    by_role = {r: [lin for lin in shape.linears if lin.role == r] for r in ("in_attn", "out_attn", "in_mlp", "out_mlp")}
    total = _norm_block(shape.hidden, by_role["in_attn"], targeted, m, shape.rms_norm)
    total += _norm_block(shape.hidden, by_role["in_mlp"], targeted, m, shape.rms_norm)
    total += e * (2 * q + 2 * kv) + 4 * shape.heads  # q, k, v and the output (shared with o_proj's input), logsumexp
    if m.lora and any(lin.name in targeted for lin in by_role["out_attn"]):
        total += 4 * q if m.adapters32 else (2 * q if m.kind == "autocast" else 0)
    # gate, act(gate), up (Liger's SwiGLU recomputes act(gate))  |  fc1 out (kept by the activation)
    total += e * inter * ((2 if m.liger else 3) if shape.gated else 1)
    down_hit = m.lora and any(lin.name in targeted for lin in by_role["out_mlp"])
    if not m.lora or m.saves_frozen_inputs:
        total += e * inter
    elif down_hit and not m.adapters32:
        total += 2 * inter if m.kind == "autocast" else e * inter
    if down_hit and m.adapters32:
        total += 4 * inter
    if m.lora:  # lora_A's output, kept by lora_B
        total += len(targeted & {lin.name for lin in shape.linears}) * rank * (4 if m.kind == "fp32" or m.adapters32 else 2)
    return total + (8 if shape.rms_norm else 0)


def other_act_bytes(shape: ModelShape, m: ActMode) -> int:
    """Per token outside the layers: the final norm, the fp32 log-softmax of the loss, ids and labels."""
    head = Linear("lm_head", "head", shape.hidden, shape.vocab, False)
    if m.lora:  # the final norm saves its input, but the first layer's norm does not (embeddings need no grad)
        norm = 2 * shape.hidden if m.saves_frozen_inputs else 0
    else:
        norm = _norm_block(shape.hidden, [head], set(), m, shape.rms_norm)
    return norm + 4 * shape.vocab + MISC_TOKEN_BYTES


def activation_bytes(shape: ModelShape, s: Setup) -> dict[str, int]:
    """Activation terms for one micro-batch: layers, outside the layers, autocast weight copies, loss temporaries."""
    m = act_mode(s)
    t = s.tokens
    per_layer = layer_act_bytes(shape, m, list(s.lora_target), s.lora_rank)
    if s.checkpointing:  # each layer keeps its input; one layer is recomputed at a time in backward
        residual = 4 if (m.kind == "fp32" or (m.kind == "autocast" and not s.weights_16bit_without_ds)) else 2
        layers = t * (shape.layers * residual * shape.hidden + per_layer)
    else:
        layers = t * shape.layers * per_layer
    if s.eager_attention:  # the softmax output per head, in fp32 for its backward (+ a 16-bit copy for the matmul)
        layers += t * (1 if s.checkpointing else shape.layers) * shape.heads * s.seq * (4 if m.kind == "fp32" else 6)
    copies = 0
    if m.kind == "autocast" and not s.weights_16bit_without_ds:
        # autocast keeps a 16-bit copy of each weight it used, for the backward pass
        layer_w = shape.linear_weight_params - shape.vocab * shape.hidden
        copies = 2 * (shape.vocab * shape.hidden + (layer_w // shape.layers if s.checkpointing else layer_w))
    other = t * other_act_bytes(shape, m)
    loss = t * shape.vocab * LOSS_TEMP_BYTES
    if s.fused_loss:
        # Liger computes the loss over chunks of logits, with an input gradient and (full fine-tuning: the head
        # is trained) an fp32 head-weight gradient. The logits-sized fp32 term in `other` stays although the
        # chunks are far smaller: the H200 peaks hold something of that size we have not traced (without it
        # LoRA under ZeRO-2 came out 14% above the plan; with it every run is within 7%).
        loss = t * 4 * shape.hidden + (4 * shape.vocab * shape.hidden if s.finetuning == "full" else 0)
    return {"layers": layers, "other": other, "autocast_weight_copies": copies, "loss_temporaries": loss}


# --- model states ---------------------------------------------------------------------------

def _states(shape: ModelShape, s: Setup, trainable: int, psi: int) -> dict:
    """Per-device weights / optimizer / gradients / buffers, and host bytes, for one setup.

    ``psi``: all parameters (base + adapters); ``trainable``: those the optimizer updates.
    """
    n = s.world
    frozen = psi - trainable if s.finetuning == "lora" else 0
    lora = s.finetuning == "lora"
    half = 2 if s.half else 4
    ws = WORKSPACE if s.device == "cuda" else 0
    out = {"weights": 0, "optimizer": 0, "grads": 0, "grads_at_step": 0, "buffers": ws, "live_params": 0, "host": 0}
    if not s.deepspeed:
        wbytes = 2 if ((s.weights_16bit_without_ds or s.pure_bf16) and s.half) else 4
        abytes = (2 if s.pure_bf16 else 4) if lora else wbytes  # peft makes fp32 adapters unless pure bf16; AdamW follows
        out["weights"] = wbytes * frozen + abytes * trainable if lora else wbytes * psi
        out["optimizer"] = 2 * abytes * trainable
        out["grads_at_step"] = abytes * trainable
        if n > 1:
            out["buffers"] += abytes * trainable  # DDP's gradient buckets live for the whole run
        return out
    stage = int(s.stage)
    adapter = 4 if (lora and stage == 3 and s.half) else half  # adapters stay fp32 under ZeRO-3
    master = 4 * trainable if s.half or stage >= 1 else 0  # fp32 master copy of the trainable weights
    opt = (master + 8 * trainable) // (n if stage >= 1 else 1)
    params = half * frozen + adapter * trainable
    grads = half * trainable // (n if stage >= 2 else 1)
    if stage == 3:
        small = shape.layers * shape.extra_layer_params + shape.final_norm_params  # persisted on every GPU
        out["weights"] = (0 if s.offload_param else params // n) + half * small
        out["grads_at_step"] = 4 * min(trainable // n, 1_000_000_000)  # fp32 grads of one sub-group
        if not s.offload_optimizer:
            out["optimizer"], out["grads"] = opt, grads  # the flat 16-bit gradient partition lives all along
        if n > 1 or s.offload_param:  # on one GPU without offload a gathered param aliases its partition
            out["live_params"] = half * min(psi - small, s.max_live_params)
    else:
        out["weights"] = params
        if not s.offload_optimizer:
            out["optimizer"] = opt
            out["grads_at_step"] = grads + 4 * trainable // (n if stage >= 2 else 1)
        else:
            out["buffers"] += half * min(shape.largest_param, trainable)  # the offload staging buffer
    if s.offload_optimizer:
        out["host"] += OFFLOAD_OPT_BYTES * trainable // n
    if s.offload_param:
        out["host"] += OFFLOAD_PARAM_BYTES * psi // n
    return out


# --- the plan -------------------------------------------------------------------------------

@dataclass
class Plan:
    setup: Setup
    model: ModelShape
    params: int
    trainable: int
    breakdown: dict[str, int]  # per device, at the peak: weights, gradients, optimizer states, activations, buffers
    peak_bytes: int
    phase: str  # when the peak happens: "forward" or "step" (PHASES)
    host_bytes: int  # per process (offload, or the whole rank on CPU)
    capacity_bytes: int | None  # what the tightest selected device has free (per process on CPU)
    formula: str
    activation_detail: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    alternatives: list[dict] = field(default_factory=list)  # other settings: label, peak, fits
    recommendation: str = ""  # ``advice`` in English words (plan.json, the CLI)
    advice: dict = field(default_factory=dict)  # kind: keep | use | nothing_fits | ram_does_not_fit, and its settings

    @property
    def needed_bytes(self) -> int:
        """What the device must have free: the allocator peak plus context and slack (GPU), or the RSS (CPU)."""
        return self.peak_bytes + CONTEXT if self.setup.device == "cuda" else self.host_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_bytes is None else self.needed_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(fits=self.fits, needed_bytes=self.needed_bytes, setting=self.setup.label())
        return d


PHASES = ("forward", "step")  # the end of the forward pass (activations kept) | the optimizer step (gradients alive)


def plan_one(shape: ModelShape, s: Setup) -> Plan:
    trainable = lora_params(shape, s.lora_rank, list(s.lora_target)) if s.finetuning == "lora" else shape.params
    psi = shape.params + (trainable if s.finetuning == "lora" else 0)
    st = _states(shape, s, trainable, psi)
    act = activation_bytes(shape, s)
    act_total = act["layers"] + act["other"] + act["autocast_weight_copies"]
    if s.device == "cpu":  # glibc keeps freed heap chunks: RSS exceeds the tensors (measured on the CPU runs)
        st["buffers"] += int(act_total * CPU_HEAP_OVERHEAD[s.finetuning])
    base = st["weights"] + st["optimizer"] + st["grads"] + st["buffers"]
    forward = base + act_total + act["loss_temporaries"] + st["live_params"]
    step = base + st["grads_at_step"]
    if forward >= step:
        phase = "forward"
        breakdown = {"weights": st["weights"], "gradients": st["grads"], "optimizer states": st["optimizer"],
                     "activations": act_total + act["loss_temporaries"],
                     "buffers": st["buffers"] + st["live_params"]}
    else:
        phase = "step"
        breakdown = {"weights": st["weights"], "gradients": st["grads"] + st["grads_at_step"],
                     "optimizer states": st["optimizer"],
                     "activations": 0, "buffers": st["buffers"]}
    # loading maps the checkpoint files; a dtype change (fp32 without DeepSpeed) makes a converted copy
    load_bytes = 2 if (s.deepspeed and s.half) or s.weights_16bit_without_ds or s.pure_bf16 else 4
    ckpt = shape.checkpoint_bytes
    loading = ckpt + (shape.params * load_bytes if abs(ckpt / shape.params - load_bytes) > 0.5 else 0)
    if s.device == "cuda":
        host = GPU_HOST_RUNTIME + st["host"] + loading
    else:
        host = (CPU_RUNTIME_DS if s.deepspeed else CPU_RUNTIME) + ckpt + max(forward, step)
    plan = Plan(s, shape, psi, trainable, breakdown, max(forward, step), phase, host, None, formula_of(s),
                {**act, "per_token_per_layer": layer_act_bytes(shape, act_mode(s), list(s.lora_target), s.lora_rank)})
    return plan


def liger_on(spec: JobSpec, s: Setup, model_type: str) -> bool:
    """Whether the trainer will patch the model with Liger's kernels (see train.Speedups).

    Under ZeRO-3, or with a LoRA on lm_head, it leaves out the fused linear cross-entropy.
    """
    if spec.liger_kernel == "off" or s.device != "cuda" or model_type not in checks.LIGER_MODEL_TYPES:
        return False
    return spec.liger_kernel == "on" or modelinfo.installed("liger_kernel")


def formula_of(s: Setup) -> str:
    if s.pure_bf16:
        return "8Ψ"
    if not s.deepspeed or s.stage == "0":
        return "16Ψ"
    if s.stage == "1":
        return "4Ψ+12Ψ/N"
    return "2Ψ+14Ψ/N" if s.stage == "2" else "16Ψ/N"

