"""Memory planner: per-device peak memory of a job, from the model's config.json alone.

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
--gpu-matrix): each term there matched the allocator to within 1%.  Peak
memory is taken for the longest batch (micro-batch x cutoff_len tokens).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import devices, presets
from .spec import JobSpec

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

SETTINGS = [("none", False), ("2", False), ("3", False), ("2", True), ("3", True)]  # fastest first (H200 table)
# Step time relative to no DeepSpeed, one H200, full fine-tuning (reference table: 0.162 / 0.222 / 0.427 /
# 0.735 / 0.973 s); gradient checkpointing recomputes the forward pass: counted as +40%.
STEP_COST = {("none", False): 1.0, ("2", False): 1.37, ("3", False): 2.64, ("2", True): 4.54, ("3", True): 6.0}
CHECKPOINTING_COST = 1.4


class PlanError(ValueError):
    """The model cannot be planned for; the message says why and what to do."""


# --- the model, from config.json --------------------------------------------------------

GATED = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "granite", "olmo", "olmo2",
         "cohere", "internlm2", "yi", "deepseek_v2_lite_dense", "smollm3", "phi3", "glm", "helium", "ministral"}
PLAIN = {"gpt2", "gpt_neox", "gpt_bigcode", "phi", "opt", "gptj", "starcoder2", "falcon"}
FAMILIES = sorted(GATED | PLAIN)


@dataclass(frozen=True)
class Linear:
    name: str  # leaf module name, as LoRA targets name it
    role: str  # "in_attn" (reads norm 1), "out_attn", "in_mlp" (reads norm 2), "out_mlp"
    fan_in: int
    fan_out: int
    bias: bool


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    gated: bool
    rms_norm: bool
    linears: tuple[Linear, ...]  # one layer's
    positions: int = 0  # learned position embeddings (gpt2, opt)
    extra_layer_params: int = 0  # norms, q/k norms
    checkpoint_bytes: int = 0  # size of the weight files, or an estimate from the config's dtype

    @property
    def layer_params(self) -> int:
        return sum(lin.fan_in * lin.fan_out + (lin.fan_out if lin.bias else 0) for lin in self.linears) \
            + self.extra_layer_params

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden + self.positions * self.hidden

    @property
    def head_params(self) -> int:
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def final_norm_params(self) -> int:
        return self.hidden * (1 if self.rms_norm else 2)

    @property
    def params(self) -> int:
        return self.embedding_params + self.layers * self.layer_params + self.final_norm_params + self.head_params

    @property
    def linear_weight_params(self) -> int:
        """Weights of every matmul (what autocast copies to 16 bit): the layers' linears and the output head."""
        return self.layers * sum(lin.fan_in * lin.fan_out for lin in self.linears) + self.vocab * self.hidden

    @property
    def largest_param(self) -> int:
        return max(self.vocab * self.hidden, max(lin.fan_in * lin.fan_out for lin in self.linears))


def _get(cfg: dict, *keys, default=None):
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def shape_from_config(cfg: dict) -> ModelShape:
    """Layer shapes and parameter count from a config.json mapping. Raises PlanError if unknown."""
    if isinstance(cfg.get("text_config"), dict) and "model_type" not in (cfg["text_config"] or {}):
        cfg = {**cfg["text_config"], "model_type": cfg.get("model_type")}
    elif isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    mt = str(cfg.get("model_type") or "")
    if mt not in GATED and mt not in PLAIN:
        arch = ", ".join(cfg.get("architectures") or []) or "none given"
        raise PlanError(f"unknown architecture: model_type {mt or '(missing)'!r} (architectures: {arch}); the planner "
                        f"knows {', '.join(FAMILIES)}")
    h = int(_get(cfg, "hidden_size", "n_embd", "d_model", default=0))
    layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers", default=0))
    heads = int(_get(cfg, "num_attention_heads", "n_head", default=0))
    vocab = int(_get(cfg, "vocab_size", default=0))
    if not (h and layers and heads and vocab):
        raise PlanError(f"config.json of this {mt} model lacks hidden size, layers, heads or vocab size")
    kv = int(_get(cfg, "num_key_value_heads", "num_kv_heads", default=heads))
    if mt == "gpt_bigcode" and cfg.get("multi_query", True):
        kv = 1
    if mt == "falcon" and not cfg.get("new_decoder_architecture"):
        kv = 1 if cfg.get("multi_query", True) else heads
    hd = int(_get(cfg, "head_dim", default=h // heads))
    q, k = heads * hd, kv * hd
    default_inter = 4 * h
    inter = int(_get(cfg, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", default=default_inter)
                or default_inter)
    dtype = str(_get(cfg, "dtype", "torch_dtype", default="float32")).replace("torch.", "")
    extra, positions, tied_default = 0, 0, False
    if mt in GATED:
        attn_bias = bool(cfg.get("attention_bias", mt == "qwen2"))
        mlp_bias = bool(cfg.get("mlp_bias", False))
        if mt == "phi3":
            lins = [Linear("qkv_proj", "in_attn", h, q + 2 * k, attn_bias), Linear("o_proj", "out_attn", q, h, attn_bias),
                    Linear("gate_up_proj", "in_mlp", h, 2 * inter, mlp_bias),
                    Linear("down_proj", "out_mlp", inter, h, mlp_bias)]
        else:
            lins = [Linear("q_proj", "in_attn", h, q, attn_bias), Linear("k_proj", "in_attn", h, k, attn_bias),
                    Linear("v_proj", "in_attn", h, k, attn_bias), Linear("o_proj", "out_attn", q, h, False),
                    Linear("gate_proj", "in_mlp", h, inter, mlp_bias), Linear("up_proj", "in_mlp", h, inter, mlp_bias),
                    Linear("down_proj", "out_mlp", inter, h, mlp_bias)]
        extra = 2 * h + (4 * h if mt in ("gemma2", "gemma3_text") else 0) + (2 * hd if mt in ("qwen3", "gemma3_text") else 0)
        tied_default = mt.startswith("gemma")
        gated, rms = True, mt != "cohere"
    else:
        if mt in ("gpt2", "gpt_bigcode"):
            lins = [Linear("c_attn", "in_attn", h, q + 2 * k, True), Linear("c_proj", "out_attn", q, h, True),
                    Linear("c_fc", "in_mlp", h, inter, True), Linear("c_proj", "out_mlp", inter, h, True)]
            positions, tied_default = int(_get(cfg, "n_positions", "max_position_embeddings", default=1024)), True
        elif mt in ("gpt_neox", "falcon"):
            bias = mt == "gpt_neox" or bool(cfg.get("bias"))
            lins = [Linear("query_key_value", "in_attn", h, q + 2 * k, bias), Linear("dense", "out_attn", q, h, bias),
                    Linear("dense_h_to_4h", "in_mlp", h, inter, bias), Linear("dense_4h_to_h", "out_mlp", inter, h, bias)]
        elif mt == "gptj":
            lins = [Linear("q_proj", "in_attn", h, q, False), Linear("k_proj", "in_attn", h, k, False),
                    Linear("v_proj", "in_attn", h, k, False), Linear("out_proj", "out_attn", q, h, False),
                    Linear("fc_in", "in_mlp", h, inter, True), Linear("fc_out", "out_mlp", inter, h, True)]
        else:  # phi, opt, starcoder2: separate q/k/v with biases, fc1/fc2 (starcoder2: c_fc/c_proj)
            o_name = {"phi": "dense", "opt": "out_proj", "starcoder2": "o_proj"}[mt]
            fc1, fc2 = ("c_fc", "c_proj") if mt == "starcoder2" else ("fc1", "fc2")
            lins = [Linear("q_proj", "in_attn", h, q, True), Linear("k_proj", "in_attn", h, k, True),
                    Linear("v_proj", "in_attn", h, k, True), Linear(o_name, "out_attn", q, h, True),
                    Linear(fc1, "in_mlp", h, inter, True), Linear(fc2, "out_mlp", inter, h, True)]
            if mt == "opt":
                positions, tied_default = int(cfg.get("max_position_embeddings", 2048)) + 2, True
        extra = 4 * h  # two LayerNorms with bias
        gated, rms = False, False
    tied = bool(cfg.get("tie_word_embeddings", tied_default))
    shape = ModelShape(mt, h, layers, heads, kv, hd, inter, vocab, tied, gated, rms, tuple(lins), positions, extra)
    return replace(shape, checkpoint_bytes=shape.params * DTYPE_BYTES.get(dtype, 4))


def read_model(model_path: str | Path) -> ModelShape:
    """The shape of a local model folder, from its config.json (weights are never read)."""
    p = Path(model_path).expanduser()
    cfg_path = p / "config.json"
    if not cfg_path.is_file():
        hint = ("build it with `zeroboard demo-model`" if p.name == "model" and "demo" in str(p)
                else "point to a local model folder that holds config.json")
        raise PlanError(f"{p} has no config.json; the planner reads the model's config.json: {hint}")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PlanError(f"{cfg_path} cannot be read as JSON: {e}") from None
    shape = shape_from_config(cfg)
    files = list(p.glob("*.safetensors")) or list(p.glob("*.bin"))
    if files:
        shape = replace(shape, checkpoint_bytes=sum(f.stat().st_size for f in files))
    return shape


# --- LoRA ---------------------------------------------------------------------------------

def lora_targets(shape: ModelShape, targets: list[str]) -> list[Linear]:
    """The layer linears LoRA adapts: 'all' is every linear but the output head (peft's all-linear)."""
    if "all" in targets:
        return list(shape.linears)
    return [lin for lin in shape.linears if lin.name in targets]


def lora_params(shape: ModelShape, rank: int, targets: list[str]) -> int:
    """A (r x in) + B (out x r) per adapted linear, in every layer."""
    return shape.layers * sum(rank * (lin.fan_in + lin.fan_out) for lin in lora_targets(shape, targets))


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

    @property
    def deepspeed(self) -> bool:
        return self.stage != "none"

    @property
    def half(self) -> bool:
        return self.precision in ("bf16", "fp16")

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq

    def label(self) -> str:
        s = "no DeepSpeed" if not self.deepspeed else f"ZeRO-{self.stage}"
        if self.offload_optimizer:
            s += " + offload" + (" (optimizer + params)" if self.offload_param else " (optimizer)")
        return s


def _ds_config(spec: JobSpec) -> dict | None:
    if spec.deepspeed:
        try:
            return json.loads(Path(spec.deepspeed).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise PlanError(f"deepspeed: {spec.deepspeed} cannot be read as JSON: {e}") from None
    if spec.deepspeed_stage == "none":
        return None
    return presets.preset(spec.deepspeed_stage, spec.offload)


def setup_of(spec: JobSpec, gpus: list[devices.Gpu]) -> Setup:
    from .command import resolve_precision  # light: command imports no torch

    use_gpu = spec.device_type == "cuda" or (spec.device_type == "auto" and bool(gpus))
    ids = (spec.gpu_ids or [g.index for g in gpus]) if use_gpu else list(range(spec.num_processes))
    kind = "cuda" if use_gpu else "cpu"
    cfg = _ds_config(spec)
    zero = (cfg or {}).get("zero_optimization") or {}
    stage = str(zero.get("stage", 0)) if cfg is not None else "none"
    off_opt = ((zero.get("offload_optimizer") or {}).get("device") or "none") in ("cpu", "nvme")
    off_par = ((zero.get("offload_param") or {}).get("device") or "none") in ("cpu", "nvme")
    live = zero.get("stage3_max_live_parameters", 1_000_000_000)
    return Setup(spec.finetuning_type, stage, off_opt and kind == "cuda", off_par and stage == "3" and kind == "cuda",
                 max(1, len(ids)), kind, resolve_precision(spec, kind, gpus, ids), spec.per_device_train_batch_size,
                 spec.cutoff_len, spec.gradient_checkpointing, spec.lora_rank, tuple(spec.lora_target),
                 int(live) if isinstance(live, (int, float)) else 1_000_000_000)


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
    phase: str  # when the peak happens
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

    def markdown(self, lang: str = "en") -> str:
        return render_markdown(self, lang)


PHASES = {"forward": "end of the forward pass (all activations kept for backward, loss being computed)",
          "step": "optimizer step (all gradients alive, activations freed)"}


def _plan_one(shape: ModelShape, s: Setup) -> Plan:
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
        phase = PHASES["forward"]
        breakdown = {"weights": st["weights"], "gradients": st["grads"], "optimizer states": st["optimizer"],
                     "activations": act_total + act["loss_temporaries"],
                     "buffers": st["buffers"] + st["live_params"]}
    else:
        phase = PHASES["step"]
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
    from .checks import LIGER_MODEL_TYPES, installed

    if spec.liger_kernel == "off" or s.device != "cuda" or model_type not in LIGER_MODEL_TYPES:
        return False
    return spec.liger_kernel == "on" or installed("liger_kernel")


def formula_of(s: Setup) -> str:
    if s.pure_bf16:
        return "8Ψ"
    if not s.deepspeed or s.stage == "0":
        return "16Ψ"
    if s.stage == "1":
        return "4Ψ+12Ψ/N"
    return "2Ψ+14Ψ/N" if s.stage == "2" else "16Ψ/N"


def _capacity(s: Setup, gpus: list[devices.Gpu], ids: list[int], host_available: int | None) -> int | None:
    if s.device == "cuda":
        chosen = [g for g in gpus if g.index in ids] or gpus
        return min((g.free_bytes for g in chosen), default=None)
    avail = host_available if host_available is not None else devices.host_memory()["available_bytes"]
    return avail // s.world


def estimate(spec: JobSpec, gpus: list[devices.Gpu] | None = None, *, host_available: int | None = None,
             model: ModelShape | None = None, weights_16bit_without_ds: bool = False) -> Plan:
    """Plan a job. ``gpus``: what NVML sees (None: detect now; []: CPU processes).

    Raises PlanError when the model's config cannot be read or its architecture is unknown.
    ``weights_16bit_without_ds`` models a script that loads the model in bf16/fp16 without DeepSpeed
    (the reference table), not ZeroBoard's trainer.
    """
    gpus = devices.detect_gpus() if gpus is None else gpus
    shape = model or read_model(spec.model_name_or_path)
    s = setup_of(spec, gpus)
    liger = liger_on(spec, s, shape.model_type)
    s = replace(s, weights_16bit_without_ds=weights_16bit_without_ds, pure_bf16=spec.pure_bf16 and s.half and not s.deepspeed,
                liger=liger and shape.rms_norm and shape.gated, eager_attention=spec.attn_implementation == "eager",
                fused_loss=liger and s.stage != "3" and not (s.finetuning == "lora" and "lm_head" in s.lora_target))
    ids = spec.gpu_ids or [g.index for g in gpus]
    plan = _plan_one(shape, s)
    plan.capacity_bytes = _capacity(s, gpus, ids, host_available)
    plan.notes = notes_for(plan)
    if s.device == "cuda" and not spec.deepspeed:
        plan.alternatives, plan.advice = recommend(shape, s, plan.capacity_bytes)
    elif plan.fits is False:
        plan.advice = {"kind": "ram_does_not_fit"}
    plan.recommendation = advice_text(plan.advice)
    return plan


def recommend(shape: ModelShape, s: Setup, capacity: int | None) -> tuple[list[dict], dict]:
    """Every stage/offload setting's peak, and the fastest that fits.

    Order: no DeepSpeed > ZeRO-2 > ZeRO-3 > ZeRO-2 + offload > ZeRO-3 + offload (the H200 table), with
    gradient checkpointing (when it is off) slotted in by its recompute cost.
    """
    rows = []
    for ckpt in ([s.checkpointing] if s.checkpointing else [False, True]):
        for stage, off in SETTINGS:
            alt = replace(s, stage=stage, offload_optimizer=off, offload_param=off and stage == "3",
                          checkpointing=ckpt)
            p = _plan_one(shape, alt)
            fits = None if capacity is None else p.needed_bytes <= capacity
            rows.append({"setting": alt.label() + (" + gradient checkpointing" if ckpt and not s.checkpointing else ""),
                         "stage": stage, "offload": off, "gradient_checkpointing": ckpt,
                         "peak_bytes": p.peak_bytes, "needed_bytes": p.needed_bytes,
                         "host_bytes": p.host_bytes, "fits": fits})
    if capacity is None:
        return rows, {}
    current = next(r for r in rows if r["stage"] == s.stage and r["offload"] == s.offload_optimizer
                   and r["gradient_checkpointing"] == s.checkpointing)
    ranked = sorted(rows, key=lambda r: STEP_COST[(r["stage"], r["offload"])]
                    * (CHECKPOINTING_COST if r["gradient_checkpointing"] else 1.0))
    best = next((r for r in ranked if r["fits"]), None)
    if best is None:
        return rows, {"kind": "nothing_fits"}
    if best is current:
        return rows, {"kind": "keep", "setting": current["setting"]}
    return rows, {"kind": "use", "setting": best["setting"], "current": s.label(), "current_fits": bool(current["fits"])}


def advice_text(advice: dict, lang: str = "en") -> str:
    from .plan_words import advice_text as words

    return words(advice, lang)


def note_keys(plan: Plan) -> list[str]:
    s, keys = plan.setup, []
    if plan.breakdown["activations"] > plan.peak_bytes / 2 and not s.checkpointing:
        keys.append("checkpointing")
    if s.deepspeed and s.world == 1 and not s.offload_optimizer:
        keys.append("one_gpu")
    if s.finetuning == "lora" and s.stage == "3" and s.half:
        keys.append("lora_zero3")
    if s.device == "cuda" and not s.deepspeed and s.half and not s.pure_bf16:
        keys.append("autocast")
    if s.fused_loss:
        keys.append("fused_loss")
    if s.device == "cpu":
        keys.append("cpu")
    return keys


def notes_for(plan: Plan, lang: str = "en") -> list[str]:
    from .plan_words import NOTES

    return [NOTES[lang][k] for k in note_keys(plan)]


# --- words ----------------------------------------------------------------------------------

def gib(n: int | float) -> str:
    return f"{n / GIB:.2f}"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def formula_text(plan: Plan, lang: str = "en") -> str:
    """Which of the guide's formulas applies here, with this model's numbers."""
    from .plan_words import formula_text as words

    return words(plan, lang)


def render_markdown(plan: Plan, lang: str = "en") -> str:
    """The plan panel in ``lang`` (en or zh): the words come from plan_words, every figure from ``plan``."""
    from .plan_words import NOTES, WORDS, advice_text, setting

    w = WORDS.get(lang, WORDS["en"])
    s, b = plan.setup, plan.breakdown
    dev = s.device if s.device == "cuda" else "cpu"
    mode = w["modes"]["pure_bf16"] if s.pure_bf16 else w["modes"][act_mode(s).kind].format(p=s.precision)
    finetuning = w.get("finetuning", {}).get(s.finetuning, s.finetuning)
    lines = [w["head"].format(setting=setting(s.label(), lang), n=s.world, devs=w["devs"][(dev, s.world > 1)]),
             w["model"].format(model_type=plan.model.model_type, params=_count(plan.params), finetuning=finetuning)
             + (w["lora"].format(rank=s.lora_rank, trainable=_count(plan.trainable)) if s.finetuning == "lora" else "")
             + w["batch"].format(mode=mode, mb=s.micro_batch, seq=s.seq)
             + (w["ckpt"] if s.checkpointing else ""), "",
             f"| {w['per'][dev]} | GiB |", "|---|---:|"]
    lines += [f"| {w['parts'].get(k, k)} | {gib(v)} |" for k, v in b.items()]
    if s.device == "cuda":
        lines.append(f"| {w['gpu_peak']} | **{gib(plan.peak_bytes)}** |")
        lines.append(f"| {w['gpu_needed']} | {gib(plan.needed_bytes)} |")
    else:
        lines.append(f"| {w['cpu_runtime']} | {gib(plan.host_bytes - plan.peak_bytes)} |")
        lines.append(f"| {w['cpu_peak']} | **{gib(plan.host_bytes)}** |")
    if plan.capacity_bytes is not None:
        lines.append(f"| {w['where'][dev]} | {gib(plan.capacity_bytes)} → {w['verdict'][bool(plan.fits)]} |")
    phase_key = next((k for k, v in PHASES.items() if v == plan.phase), None)
    phase = w["phases"][phase_key] if phase_key else plan.phase
    lines += ["", w["phase"].format(phase=phase), "", formula_text(plan, lang)]
    d = plan.activation_detail
    lines.append(w["act"].format(tokens=s.tokens, layers=plan.model.layers, per=d["per_token_per_layer"],
                                 layers_gib=gib(d["layers"]))
                 + (w["act_ckpt"] if s.checkpointing else "")
                 + w["act_loss"].format(loss_gib=gib(d["other"] + d["loss_temporaries"]))
                 + (w["act_autocast"].format(gib=gib(d["autocast_weight_copies"])) if d["autocast_weight_copies"] else "")
                 + w["act_end"])
    states = b["weights"] + b["optimizer states"] + b["gradients"]
    if b["activations"] > states:
        lines.append(w["dominate"].format(act=gib(b["activations"]), states=gib(states)))
    if s.device == "cuda" and (s.offload_optimizer or plan.host_bytes):
        lines.append(w["host"].format(gib=gib(plan.host_bytes)) + (w["host_offload"] if s.offload_optimizer
                                                                   else w["host_end"]))
    notes = notes_for(plan, lang if lang in NOTES else "en")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    if plan.alternatives:
        lines += ["", w["alt_head"], "|---|---:|---:|---|"]
        for r in plan.alternatives:
            fits = "-" if r["fits"] is None else w["yes_no"][bool(r["fits"])]
            lines.append(f"| {setting(r['setting'], lang)} | {gib(r['peak_bytes'])} | {gib(r['needed_bytes'])} | {fits} |")
    if plan.advice:
        lines += ["", w["advice"].format(text=advice_text(plan.advice, lang))]
    return "\n".join(lines)


def text(plan: Plan, lang: str = "en") -> str:
    """Plain-terminal rendering (the markdown without emphasis)."""
    return render_markdown(plan, lang).replace("**", "")


# --- the run record: estimate next to the measurement ------------------------------------------------

PLAN_FILE = "plan.json"


def save_plan(plan: Plan, output_dir: str | Path) -> Path:
    """Write the estimate into the run dir (the launcher calls this before starting the job)."""
    path = Path(output_dir) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    return path


def record_plan(spec: JobSpec, output_dir: str | Path, gpus: list[devices.Gpu] | None = None) -> Plan | None:
    """Estimate and save ``plan.json`` into the run dir at launch; None (nothing written) if it cannot be planned."""
    try:
        plan = estimate(spec, gpus)
    except PlanError:
        return None
    save_plan(plan, output_dir)
    return plan


def panel(spec: JobSpec | None, gpus: list[devices.Gpu], lang: str = "en") -> str:
    """The web form's live panel: the plan as markdown, or why there is none (never raises)."""
    zh = lang == "zh"
    if spec is None:
        return "*显存估算:请先修正标出的字段。*" if zh else "*Memory plan: fix the marked fields first.*"
    try:
        return render_markdown(estimate(spec, gpus), lang)
    except PlanError as e:
        return f"*{'无法估算显存' if zh else 'Memory plan unavailable'}: {e}*"


def measured_vs_estimate(run_dir: str | Path) -> dict | None:
    """Per-rank measured peak (from events.jsonl) next to the saved estimate, with the error; None without a plan.

    GPU ranks compare the torch allocator peak with the estimated peak (and NVML with the estimate plus
    context, when the trainer records ``nvml_peak_bytes``); CPU ranks compare RSS with the per-process estimate.
    """
    from .events import EVENTS_FILE, read_events

    run = Path(run_dir)
    try:
        plan = json.loads((run / PLAN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    gpu = plan["setup"]["device"] == "cuda"
    key, est = ("torch_peak_bytes", plan["peak_bytes"]) if gpu else ("rss_peak_bytes", plan["host_bytes"])
    peaks: dict[int, dict] = {}
    for e in read_events(run / EVENTS_FILE):
        for m in e.get("memory") or []:
            cur = peaks.setdefault(int(m["rank"]), {})
            for k, v in m.items():
                if k != "rank" and isinstance(v, (int, float)):
                    cur[k] = max(cur.get(k, 0), v)
    ranks = []
    for rank, m in sorted(peaks.items()):
        row = {"rank": rank, "measured_bytes": m.get(key), "error": None}
        if m.get(key):
            row["error"] = (est - m[key]) / m[key]
        if gpu and m.get("nvml_peak_bytes"):
            row["nvml_peak_bytes"] = m["nvml_peak_bytes"]
            row["nvml_error"] = (plan["needed_bytes"] - m["nvml_peak_bytes"]) / m["nvml_peak_bytes"]
        ranks.append(row)
    errors = [r["error"] for r in ranks if r["error"] is not None]
    return {"what": key, "estimate_bytes": est, "ranks": ranks,
            "worst_error": max(errors, key=abs) if errors else None}


def cmd_plan(args) -> int:
    """``zeroboard plan [JOB.yaml] [--set NAME=VALUE]... [--json]``: the memory plan; nothing is started.

    Exit status: 0 fits (or no device to compare with), 1 does not fit, 2 the job or model cannot be planned.
    """
    import sys

    from .cli import apply_overrides, load_job  # at call time: cli may import this module
    from .spec import SpecError

    try:
        plan = estimate(apply_overrides(load_job(args.job), args.set or []))
    except SpecError as e:
        print(f"The job file cannot be used:\n{e}", file=sys.stderr)
        return 2
    except PlanError as e:
        print(f"plan: {e}", file=sys.stderr)
        return 2
    lang = getattr(args, "lang", None) or os.environ.get("ZEROBOARD_LANG", "en")
    print(json.dumps(plan.to_dict(), indent=2, default=str) if getattr(args, "json", False) else text(plan, lang))
    return 1 if plan.fits is False else 0
