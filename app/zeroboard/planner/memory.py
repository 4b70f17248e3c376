"""Memory of one training setup at each moment of a step, and its peak: the plan.

Pure Python (no torch): the web server calls it on every form change.

The terms come from the libraries' code (see :mod:`.activations` and :mod:`.states`): what autograd saves per
token and layer, the loss's buffers (Liger's fused linear cross-entropy never builds the logits), autocast's
weight copies, model states and DeepSpeed's buckets. The peak is the largest of these moments:

- ``forward``: the end of the forward pass, inside the loss: every activation kept, the loss's temporaries;
- ``backward``: the start of backward (ZeRO-2's reduce buckets appear at the first gradient hook, the loss's
  gradient buffers), or ZeRO-2's first bucket flush (its gradient partition appears while activations remain);
- ``step``: the end of backward and the optimizer step (all gradients, the step's temporaries).

Peak memory is taken for the longest batch (micro-batch x cutoff_len tokens). What NVML shows on top of the
allocator's peak (the CUDA context, kernels, NCCL, DeepSpeed's streams, memory the allocator holds but has not
handed out) is :mod:`.reserve`'s, and the ``needed`` margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from ..job import devices, dstune, liger as ligerinfo, placement, weights as weightsmod
from ..job.spec import JobSpec
from ..words import text
from . import activations as act, reserve, traced
from .activations import ActMode
from .reserve import CONTEXT, NCCL  # noqa: F401 - what NVML adds, as the planner's package exports it
from .shapes import ModelShape, PlanError, lora_params
from .states import quantized_saving, reference, states

GIB = 1024**3
# The share of a device's free memory a plan may fill and still have room: "needed" is meant to be at or above
# NVML's peak, but a layout the traced runs did not show can place a buffer higher (before the layout terms, held-out
# H200 runs used up to 6.5% more than "needed"). The verdict warns above it; recommendations prefer below.
HEADROOM = 0.92
# RSS of a CPU rank besides the model: Python, torch, transformers, peft, and the datasets library tokenizing the
# data on a dataset's first run (measured by benchmarks/planner_accuracy.py on a 30k-parameter model)
CPU_RUNTIME = int(0.53 * GIB)
CPU_RUNTIME_DS = int(0.58 * GIB)  # ... with DeepSpeed imported and its shm comm op loaded
GPU_HOST_RUNTIME = int(1.0 * GIB)  # host RSS of a GPU rank besides model data
CPU_HEAP_OVERHEAD = {"full": 0.08, "lora": 0.25}  # RSS above the live activation tensors on CPU (glibc heap);
#                      fitted to the mid-size CPU runs of benchmarks/planner_accuracy.py

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
    liger: bool = False  # Liger's RMSNorm: it saves its input and 1/rms only (job.liger: what Liger applies)
    eager_attention: bool = False  # eager attention (chosen, or the model's default): seq x seq scores per layer
    fused_loss: bool = False  # Liger's fused linear cross-entropy: the logits are never materialized
    liger_mlp: bool = False  # Liger's SwiGLU / GeGLU: the activation is recomputed in backward
    liger_ce: bool = False  # Liger's (unfused) cross-entropy: the gradient written into the fp32 logits
    liger_wanted: bool = False  # the trainer will patch with Liger (on, or auto with Liger installed, on a GPU)
    accumulation: int = 1  # gradient accumulation steps
    offload_requested: bool = False  # the DeepSpeed config offloads (on CPU processes that moves nothing)
    masked: bool = False  # padded (micro-batch > 1) or packed batches: attention carries a mask
    reduce_bucket: int = 0  # DeepSpeed's reduce_bucket_size in elements (0: the preset's, or H² when "auto")
    sub_group: int = 1_000_000_000  # ZeRO-3 sub_group_size
    reuse_distance: int = 1_000_000_000  # ZeRO-3 stage3_max_reuse_distance
    prefetch_bucket: int = 0  # ZeRO-3 stage3_prefetch_bucket_size in elements (0: "auto", 0.9 H²)
    persistence: int = 0  # ZeRO-3 stage3_param_persistence_threshold (0: "auto", 10 H; ZeroBoard: all on one GPU)
    overlap_comm: bool = True  # DeepSpeed's overlap_comm (job.dstune turns it off on one GPU)
    master_weights: str = "auto"  # the job's master_weights (job.weights decides the mode with the rest)
    own_optimizer: bool = False  # the job names its optimizer in extra_args
    sequences: int = 1  # sequences per sample: 2 for a pair (dpo, orpo, simpo: chosen and rejected in one batch)
    reference: bool = False  # a frozen reference copy of the model (full fine-tuning of dpo or kto)
    quant_bits: int = 0  # QLoRA: the frozen base's linear layers in 4 or 8 bits

    @property
    def weights(self) -> str:
        """How the trainer holds the weights for this setting (job.weights.MODES)."""
        return weightsmod.mode(self.finetuning, self.precision, self.stage, self.pure_bf16, self.master_weights,
                               self.accumulation, self.world, self.own_optimizer)

    @property
    def weights16(self) -> bool:
        """16-bit weights without DeepSpeed: pure bf16, the split master, LoRA's bf16 base, or the reference script."""
        return self.half and not self.deepspeed and (self.weights_16bit_without_ds
                                                       or self.weights in ("pure_bf16", "split", "bf16_base"))

    @property
    def deepspeed(self) -> bool:
        return self.stage != "none"

    @property
    def half(self) -> bool:
        return self.precision in ("bf16", "fp16")

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch's forward: a pair stage forwards the chosen and the rejected answers together
        (TRL concatenates them), twice the activations of a sample; KTO one answer a sample (its KL answers and the
        reference's pass run without gradients: transient, not planned)."""
        return self.micro_batch * self.seq * self.sequences

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
    config = where.ds_config
    if config is not None:  # the values the run will use (job.dstune: one GPU, several CPU processes)
        config = dstune.for_run(config, where.ds_path, max(1, where.world_size), spec.model_name_or_path,
                                spec.gradient_checkpointing, spec.finetuning_type == "lora", spec.lora_rank, spec.lora_target,
                                device=where.kind)[0]
    zero = (config or {}).get("zero_optimization") or {}
    zero = zero if isinstance(zero, dict) else {}
    number = lambda key, default: int(zero[key]) if isinstance(zero.get(key), (int, float)) else default  # noqa: E731
    on_gpu = where.kind == "cuda"
    return Setup(spec.finetuning_type, where.stage, where.offload_optimizer and on_gpu, where.offload_param and on_gpu,
                 max(1, where.world_size), where.kind, where.precision, spec.per_device_train_batch_size, spec.cutoff_len,
                 spec.gradient_checkpointing, spec.lora_rank, tuple(spec.lora_target),
                 number("stage3_max_live_parameters", 1_000_000_000), offload_requested=where.offload,
                 masked=spec.packing or spec.per_device_train_batch_size > 1,
                 reduce_bucket=number("reduce_bucket_size", 0), sub_group=number("sub_group_size", 1_000_000_000),
                 reuse_distance=number("stage3_max_reuse_distance", 1_000_000_000),
                 prefetch_bucket=number("stage3_prefetch_bucket_size", 0),
                 persistence=number("stage3_param_persistence_threshold", 0),
                 accumulation=max(1, spec.gradient_accumulation_steps), overlap_comm=zero.get("overlap_comm") is not False,
                 master_weights=spec.master_weights,
                 own_optimizer="optim" in spec.extra_args or spec.training_stage != "sft",  # TRL's trainers: their own
                 sequences=2 if spec.training_stage in ("dpo", "orpo", "simpo") else 1,
                 reference=spec.training_stage in ("dpo", "kto") and spec.finetuning_type == "full",
                 quant_bits=spec.quantization_bit if spec.quantization_bit in (4, 8) else 0)


# --- activations ----------------------------------------------------------------------------

def act_mode(s: Setup) -> ActMode:
    lora = s.finetuning == "lora"
    common = dict(liger=s.liger, liger_mlp=s.liger_mlp, masked=s.masked, seq=s.seq, eager=s.eager_attention,
                  cuda=s.device == "cuda")
    if not s.half:
        return ActMode("fp32", lora, **common)
    if not s.deepspeed:
        # the Trainer's autocast is on for every 16-bit run without DeepSpeed; on a GPU it runs layer_norm and pow
        # in fp32 whatever holds the weights (activations.py's notes)
        common["autocast_fp32"] = s.device == "cuda"
        if s.weights == "pure_bf16":
            return ActMode("pure16", lora, **common)
        # fp32 weights + autocast; a 16-bit model (the split master, LoRA's bf16 base) + autocast behaves like
        # pure16 for full fine-tuning (the matmuls' casts are no-ops) and like autocast for its fp32 adapters.
        return ActMode("pure16" if s.weights16 and not lora else "autocast", lora, **common)
    z3 = s.stage == "3"
    # The engine casts the module to 16 bit at ZeRO-0/1/2; at ZeRO-3 the adapters, created after
    # zero.Init, stay fp32 (seen on the H200: +24h+4I bytes per token and layer).
    return ActMode("pure16", lora, adapters32=lora and z3, saves_frozen_inputs=z3, **common)


def activation_bytes(shape: ModelShape, s: Setup) -> dict[str, int]:
    """Activation terms of one micro-batch, at the end of forward and at the start of backward."""
    m = act_mode(s)
    t = s.tokens
    if shape.traced is not None:
        return _traced_activations(shape, s, m)
    per_layer = act.layer_act_bytes(shape, m, list(s.lora_target), s.lora_rank)
    # a sliding-window layer gets a mask once the sequence reaches the window (transformers' masking_utils: the
    # causal shortcut is skipped when kv_length >= the window): SDPA's masked kernel, k and v repeated, the bias
    slides = shape.sliding_layers if shape.sliding_window and s.seq >= shape.sliding_window and not m.masked else 0
    per_sliding = act.layer_act_bytes(shape, replace(m, masked=True), list(s.lora_target), s.lora_rank) if slides else 0
    recompute = 0
    if s.checkpointing:  # each layer keeps its input; backward recomputes one layer at a time
        layers = t * shape.layers * m.e_res * shape.hidden
        # that layer's saved tensors, and its backward's: the gradient of its input and of the MLP's inner width
        recompute = t * (max(per_layer, per_sliding) + 2 * m.e_res * shape.hidden + 2 * m.e * shape.intermediate)
    else:
        layers = t * ((shape.layers - slides) * per_layer + slides * per_sliding)
    copies = {"forward": 0, "backward": 0}
    if m.kind == "autocast" and not s.weights16:
        copies = act.autocast_copies(shape, s.finetuning == "lora", s.checkpointing)
    head_trains = s.finetuning == "full" or "lm_head" in s.lora_target
    loss = act.loss_bytes(shape, m, t, s.fused_loss, head_trains, s.liger_ce)
    # the sliding layers' boolean mask: alone at micro-batch 1, beside the full layers' mask when padded or packed
    two_kinds = m.masked and 0 < shape.sliding_layers < shape.layers and s.seq >= shape.sliding_window
    other = t * (act.outside_bytes(shape, m) + (s.seq if slides or two_kinds else 0))
    return {"layers": layers, "other": other, "recompute": recompute,
            "copies_forward": copies["forward"], "copies_backward": copies["backward"],
            "loss_forward": loss["forward"], "loss_kept": loss["kept"], "loss_backward": loss["backward"],
            "per_token_per_layer": per_layer}


def _traced_activations(shape: ModelShape, s: Setup, m: ActMode) -> dict[str, int]:
    """The same terms for a model planned from its own code (:mod:`.traced`): what the layers and the rest keep, as
    traced; checkpointing, autocast's weight copies and the loss as for any model."""
    t = s.tokens
    tr = traced.terms(shape, m, s.lora_rank, list(s.lora_target), s.micro_batch)
    per_layer = int(tr["largest_per_token"])
    layers, recompute = int(tr["layers"]), 0
    if s.checkpointing:
        layers = t * shape.layers * m.e_res * shape.hidden
        recompute = t * (per_layer + 2 * m.e_res * shape.hidden + 2 * m.e * shape.intermediate)
    copies = {"forward": 0, "backward": 0}
    if m.kind == "autocast" and not s.weights16:
        copies = act.autocast_copies(shape, s.finetuning == "lora", s.checkpointing)
    head_trains = s.finetuning == "full" or "lm_head" in s.lora_target
    loss = act.loss_bytes(shape, m, t, s.fused_loss, head_trains, s.liger_ce)
    return {"layers": layers, "other": int(tr["outside"]) + t * act.MISC_TOKEN_BYTES, "recompute": recompute,
            "copies_forward": copies["forward"], "copies_backward": copies["backward"],
            "loss_forward": loss["forward"], "loss_kept": loss["kept"], "loss_backward": loss["backward"],
            "per_token_per_layer": per_layer}


def _flush_share(shape: ModelShape, s: Setup, after: int) -> float:
    """Share of the layers' activations still alive when ZeRO-2 first flushes a bucket (after ``after`` gradient
    elements): gradients arrive from the head down, so the layers below the flush point are still to come."""
    trainable = s.finetuning == "full"
    head = shape.vocab * shape.hidden if trainable and not shape.tied else 0
    per_layer = shape.layer_params if trainable else max(1, lora_params(shape, s.lora_rank, list(s.lora_target))
                                                           // shape.layers)
    done = max(0, after - head) / per_layer
    return max(0.0, 1 - done / shape.layers)


# --- the plan -------------------------------------------------------------------------------

@dataclass
class Plan:
    setup: Setup
    model: ModelShape
    params: int
    trainable: int
    breakdown: dict[str, int]  # per device, at the peak: weights, gradients, optimizer states, activations, buffers
    peak_bytes: int
    phase: str  # when the peak happens (PHASES)
    host_bytes: int  # per process (offload, or the whole rank on CPU)
    capacity_bytes: int | None  # what the tightest selected device has free (per process on CPU)
    formula: str
    activation_detail: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    alternatives: list[dict] = field(default_factory=list)  # other settings: label, peak, fits
    recommendation: str = ""  # ``advice`` in English words (plan.json, the CLI)
    advice: dict = field(default_factory=dict)  # kind: keep | use | nothing_fits | ram_does_not_fit, and its settings
    speed: dict | None = None  # expected tokens/s of this setting and of the fastest that fits (search.compare)
    moments: dict[str, int] = field(default_factory=dict)  # every moment's total, the peak among them
    slack_bytes: int = 0  # what NVML will show above the allocator's peak (the sum of ``reserve``)
    reserve: dict[str, int] = field(default_factory=dict)  # ... by term (planner.reserve.terms)

    @property
    def needed_bytes(self) -> int:
        """What the device must have free: the allocator peak plus what NVML adds (GPU), or the RSS (CPU)."""
        return self.peak_bytes + self.slack_bytes if self.setup.device == "cuda" else self.host_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_bytes is None else self.needed_bytes <= self.capacity_bytes

    @property
    def roomy(self) -> bool | None:
        """Whether it fits with the headroom the measured errors call for (HEADROOM)."""
        return None if self.capacity_bytes is None else self.needed_bytes <= HEADROOM * self.capacity_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(fits=self.fits, needed_bytes=self.needed_bytes, setting=self.setup.label())
        return d


PHASES = ("forward", "backward", "step")


def moments(shape: ModelShape, s: Setup, st, a: dict) -> dict[str, dict[str, int]]:
    """Each moment of a step, as parts (weights, gradients, optimizer states, activations, buffers)."""
    # Without DeepSpeed, gradient accumulation keeps the gradients of the micro-batches before (4 bytes a trainable
    # parameter in fp32) through every later forward and backward pass; ZeRO-1/2 keeps the partition it filled beside
    # the next micro-batch's (States.accumulated); ZeRO-3 accumulates into its flat gradient buffer, offload into
    # pinned host buffers
    acc = st.grads_end if s.accumulation > 1 and not s.deepspeed else st.accumulated
    base = {"weights": st.weights, "optimizer states": st.optimizer, "gradients": st.grads + acc, "buffers": st.buffers}
    acts = a["layers"] + a["other"]
    fwd = {**base, "activations": acts + a["copies_forward"] + a["loss_forward"],
           "buffers": st.buffers + st.live_params}
    bwd_acts = acts + a["recompute"] + (a["copies_backward"] if not s.checkpointing else a["copies_backward"])
    # DeepSpeed's backward buffers appear at the first gradient hook, once the head's backward is done: by then the
    # loss's gradient buffers (HF's loss: 12 bytes a token and vocabulary entry) are freed but what the loss keeps
    loss_or_hook = max(a["loss_backward"], a["loss_kept"] + st.backward)
    bwd = {**base, "activations": bwd_acts + loss_or_hook - st.backward, "gradients": st.grads + acc + st.head_grad,
           "buffers": st.buffers + st.live_params + st.backward}
    out = {"forward": fwd, "backward": bwd}
    if st.flush:
        share = _flush_share(shape, s, st.flush["after"]) if st.flush["after"] < (
            shape.params if s.finetuning == "full" else lora_params(shape, s.lora_rank, list(s.lora_target))) else 0.0
        alive = int(a["layers"] * share) + (a["recompute"] if share > 0 else 0) + a["other"] * (share > 0)
        pending = a["loss_kept"] if shape.tied else 0  # a tied head's gradient waits for the embedding's
        flush = {**base, "activations": alive + pending, "gradients": st.grads + acc + st.flush["bytes"],
                 "buffers": st.buffers + st.backward}
        out["flush"] = flush
    out["step"] = {**base, "activations": 0, "gradients": st.grads + st.grads_end + max(st.end_extra, st.step_extra),
                   "buffers": st.buffers}
    return out


def plan_one(shape: ModelShape, s: Setup) -> Plan:
    trainable = lora_params(shape, s.lora_rank, list(s.lora_target)) if s.finetuning == "lora" else shape.params
    psi = shape.params + (trainable if s.finetuning == "lora" else 0)
    st = states(shape, s, trainable, psi)
    st.weights += reference(shape, s, psi) - quantized_saving(shape, s)  # a preference run's reference; QLoRA's base
    a = activation_bytes(shape, s)
    parts = moments(shape, s, st, a)
    if s.device == "cpu":  # glibc keeps freed heap chunks: RSS exceeds the tensors (measured on the CPU runs)
        heap = int((a["layers"] + a["other"] + a["copies_forward"]) * CPU_HEAP_OVERHEAD[s.finetuning])
        for p in parts.values():
            p["buffers"] += heap
    totals = {k: sum(v.values()) for k, v in parts.items()}
    phase = max(totals, key=totals.get)
    peak = totals[phase]
    # loading maps the checkpoint files; a dtype change (fp32 without DeepSpeed) makes a converted copy
    load_bytes = 2 if (s.deepspeed and s.half) or s.weights_16bit_without_ds or (
        not s.deepspeed and s.weights in ("pure_bf16", "bf16_base")) else 4  # the split mode loads fp32, then splits
    ckpt = shape.checkpoint_bytes
    loading = ckpt + (shape.params * load_bytes if abs(ckpt / shape.params - load_bytes) > 0.5 else 0)
    if s.device == "cuda":
        host = GPU_HOST_RUNTIME + st.host + loading
    else:
        host = (CPU_RUNTIME_DS if s.deepspeed else CPU_RUNTIME) + ckpt + peak
    above = reserve.terms(shape, s, st, totals, peak)
    return Plan(s, shape, psi, trainable, parts[phase], peak, "backward" if phase == "flush" else phase, host, None,
                formula_of(s), a, moments=totals, slack_bytes=sum(above.values()), reserve=above)


def with_liger(shape: ModelShape, s: Setup) -> Setup:
    """The Liger kernels this setting gets, as the installed Liger's own signature for the model type says
    (:mod:`zeroboard.job.liger`), for the config the trainer passes at this stage; none when Liger is not wanted
    or does not patch the model type (the plain path, planned as such)."""
    cov = None
    if s.liger_wanted and s.device == "cuda":
        config = ligerinfo.trainer_config(shape.model_type, s.stage == "3", s.finetuning == "lora"
                                          and "lm_head" in s.lora_target)
        cov = ligerinfo.coverage(shape.model_type, config)
    if cov is None:
        return replace(s, liger=False, liger_mlp=False, fused_loss=False, liger_ce=False)
    if shape.traced is not None:  # traced on the plain path: Liger's norm and MLP kernels keep less, not more
        return replace(s, liger=False, liger_mlp=False, fused_loss=cov.fused_loss,
                       liger_ce=cov.has("cross_entropy") and not cov.fused_loss)
    return replace(s, liger=cov.norm and shape.rms_norm, liger_mlp=cov.mlp and shape.gated, fused_loss=cov.fused_loss,
                   liger_ce=cov.has("cross_entropy") and not cov.fused_loss)


def liger_wanted(spec: JobSpec, device: str) -> bool:
    """Whether the trainer will call Liger at all (train.Speedups): on, or auto with Liger installed, on a GPU."""
    if spec.liger_kernel == "off" or device != "cuda":
        return False
    return spec.liger_kernel == "on" or ligerinfo.source_text() is not None


def formula_of(s: Setup) -> str:
    if not s.deepspeed and s.half and s.weights == "pure_bf16":
        return "8Ψ"
    if not s.deepspeed and s.half and s.weights == "split":
        return "14Ψ"
    if not s.deepspeed or s.stage == "0":
        return "16Ψ"
    if s.stage == "1":
        return "4Ψ+12Ψ/N"
    return "2Ψ+14Ψ/N" if s.stage == "2" else "16Ψ/N"

