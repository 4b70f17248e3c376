"""Model shapes from config.json: layers, linears, heads, vocabulary, parameters (no weights are read)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import safeload
from ..job import modelinfo
from ..job.checks import EAGER_ONLY_MODEL_TYPES, HUB_ID
from ..words import say


class PlanError(ValueError):
    """The model cannot be planned for; the message says why and what to do."""


class Untraced(PlanError):
    """A model type whose layers the planner does not derive by hand: its own code is traced (:mod:`.traces`)."""

    def __init__(self, message, config: dict):
        super().__init__(message)
        self.config = config


# --- the model, from config.json --------------------------------------------------------

# The families whose layer the planner derives, each pinned on CPU against transformers' own module with
# saved-tensor hooks (tests/test_planner_families.py). Any other model type is refused with these names: a family
# is never planned with another one's terms (GPT-NeoX, Cohere, OLMo, OLMo-2, OPT, GPT-2, GPT-J, Falcon, GLM and
# Helium keep tensors these terms do not count: their own norms, activations and attention code).
GATED = {"llama", "mistral", "ministral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "granite", "smollm3",
         "phi3"}
PLAIN = {"gpt_bigcode", "phi", "starcoder2"}
FAMILIES = sorted(GATED | PLAIN)
QK_NORM = {"qwen3", "gemma3_text"}
POST_NORMS = {"gemma2", "gemma3_text"}  # a norm after attention and after the MLP too, on the branch's output
PARALLEL = {"phi"}  # attention and MLP side by side, both reading one norm's output
LEARNED_POSITIONS = {"gpt_bigcode"}
# activations that keep more than their input: gelu_new is written out in Python (0.5·x·(1 + tanh(...))), and
# autograd keeps tanh's output, 0.5·x and 1 + tanh besides x (transformers.activations.NewGELUActivation)
ACT_EXTRA = {"gelu_new": 3}


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
    positions: int = 0  # learned position embeddings (gpt_bigcode)
    extra_layer_params: int = 0  # norms, q/k norms
    checkpoint_bytes: int = 0  # size of the weight files, or an estimate from the config's dtype
    qk_norm: bool = False  # q and k normalized per head before RoPE (qwen3, gemma3, olmo2)
    rotary: bool = True  # RoPE: cos and sin per token (not gpt_bigcode: learned positions)
    post_norms: int = 0  # norms per layer on the attention's and the MLP's outputs (Gemma 2 and 3)
    eager_default: bool = False  # transformers runs it with eager attention unless told otherwise
    attn_softcap: bool = False  # attention scores soft-capped (tanh) before the softmax (Gemma 2's default)
    final_softcap: bool = False  # logits soft-capped (tanh) before the loss (Gemma 2's default)
    parallel: bool = False  # attention and MLP read one norm's output, side by side (Phi-2)
    act_extra: int = 0  # intermediate-sized tensors the MLP's activation keeps besides its input (gelu_new: 3)
    resid_dropouts: int = 0  # dropouts (p > 0) on a layer's hidden-sized outputs: each keeps a 1-byte mask a token
    embd_dropout: bool = False  # a dropout on the embeddings (the same, once)
    norm_fp32: bool = False  # HF's RMSNorm keeps its normalized x in fp32 (Gemma's: x·(1 + w) computed in fp32)
    sliding_layers: int = 0  # layers with a sliding window of attention (masked once the sequence reaches it)
    sliding_window: int = 0
    source: str = ""  # where config.json came from when not a local folder: the Hugging Face cache, or a download
    source_msg: object = field(default=None, compare=False, hash=False)  # the same, as a catalog message
    # a model planned from its own code (:mod:`.traces`): its config.json, the census of its parameters, and what
    # each mode of the run keeps, fitted (mode key -> terms); None for the families derived by hand
    config: dict | None = field(default=None, compare=False, hash=False)
    census: dict | None = field(default=None, compare=False, hash=False)
    traced: dict | None = field(default=None, compare=False, hash=False)

    @property
    def layer_params(self) -> int:
        """One layer's parameters (a traced model's: the mean over its layers, experts and all)."""
        if self.census:
            return self.census["layer_params"] // max(1, self.layers)
        return sum(lin.fan_in * lin.fan_out + (lin.fan_out if lin.bias else 0) for lin in self.linears) \
            + self.extra_layer_params

    @property
    def embedding_params(self) -> int:
        if self.census:
            return self.census["embedding"]
        return self.vocab * self.hidden + self.positions * self.hidden

    @property
    def head_params(self) -> int:
        if self.census:
            return self.census["head"]
        bias = self.vocab if self.model_type == "phi" else 0  # Phi's lm_head has a bias
        return (0 if self.tied else self.vocab * self.hidden) + bias

    @property
    def final_norm_params(self) -> int:
        if self.census:  # everything outside the layers but the embeddings and the head
            c = self.census
            return c["params"] - c["layer_params"] - c["embedding"] - c["head"]
        return self.hidden * (1 if self.rms_norm else 2)

    @property
    def params(self) -> int:
        if self.census:
            return self.census["params"]
        return self.embedding_params + self.layers * self.layer_params + self.final_norm_params + self.head_params

    @property
    def linear_weight_params(self) -> int:
        """Weights of every matmul (what autocast copies to 16 bit): the layers' linears and the output head."""
        if self.census:
            return self.census["linear_weights"]
        return self.layers * sum(lin.fan_in * lin.fan_out for lin in self.linears) + self.vocab * self.hidden

    @property
    def fused_qkv(self) -> bool:
        """q, k and v come from one projection (Phi-3, GPT-NeoX, Falcon, GPT-2) as views of its output."""
        q, k = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return any(lin.role == "in_attn" and lin.fan_out == q + 2 * k for lin in self.linears)

    @property
    def largest_param(self) -> int:
        if self.census:
            return self.census["largest"]
        return max(self.vocab * self.hidden, max(lin.fan_in * lin.fan_out for lin in self.linears))


def _get(cfg: dict, *keys, default=None):
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def shape_from_config(cfg: dict, where: str = "config.json") -> ModelShape:
    """Layer shapes and parameter count from a config.json mapping. Raises PlanError if unknown or out of range."""
    wrong = modelinfo.size_problem(cfg)
    if wrong is not None:
        raise PlanError(say("check.config_size", path=where, key=wrong[0], got=repr(wrong[1])[:40],
                            limit=f"{modelinfo.MAX_SIZE:,}"))
    given = cfg  # the tracer reads it as given (planner.traces.stub takes the text part)
    if isinstance(cfg.get("text_config"), dict) and "model_type" not in (cfg["text_config"] or {}):
        cfg = {**cfg["text_config"], "model_type": cfg.get("model_type")}
    elif isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    mt = str(cfg.get("model_type") or "")
    if mt not in GATED and mt not in PLAIN:
        arch = ", ".join(cfg.get("architectures") or []) or "-"
        if mt:  # its own code says what it keeps: traced (planner.traces)
            raise Untraced(say("plan.not_derived", model_type=repr(mt), arch=arch), given)
        raise PlanError(say("plan.unknown_arch", model_type=repr(mt or "(missing)"), arch=arch, known=", ".join(FAMILIES)))
    h = int(_get(cfg, "hidden_size", "n_embd", "d_model", default=0))
    layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers", default=0))
    heads = int(_get(cfg, "num_attention_heads", "n_head", default=0))
    vocab = int(_get(cfg, "vocab_size", default=0))
    if not (h and layers and heads and vocab):
        raise PlanError(say("plan.config_incomplete", model_type=mt))
    kv = int(_get(cfg, "num_key_value_heads", "num_kv_heads", default=heads))
    if mt == "gpt_bigcode" and cfg.get("multi_query", True):
        kv = 1
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
        extra = 2 * h + (2 * h if mt in ("gemma2", "gemma3_text") else 0) + (2 * hd if mt in ("qwen3", "gemma3_text") else 0)
        tied_default = mt.startswith("gemma") or mt == "smollm3"
        gated, rms = True, True
    else:
        if mt == "gpt_bigcode":
            lins = [Linear("c_attn", "in_attn", h, q + 2 * k, True), Linear("c_proj", "out_attn", q, h, True),
                    Linear("c_fc", "in_mlp", h, inter, True), Linear("c_proj", "out_mlp", inter, h, True)]
            positions, tied_default = int(_get(cfg, "n_positions", "max_position_embeddings", default=1024)), True
        else:  # phi, starcoder2: separate q/k/v with biases, fc1/fc2 (starcoder2: c_fc/c_proj)
            o_name = {"phi": "dense", "starcoder2": "o_proj"}[mt]
            tied_default = mt == "starcoder2"
            fc1, fc2 = ("c_fc", "c_proj") if mt == "starcoder2" else ("fc1", "fc2")
            lins = [Linear("q_proj", "in_attn", h, q, True), Linear("k_proj", "in_attn", h, k, True),
                    Linear("v_proj", "in_attn", h, k, True), Linear(o_name, "out_attn", q, h, True),
                    Linear(fc1, "in_mlp", h, inter, True), Linear(fc2, "out_mlp", inter, h, True)]
        extra = (2 if mt in PARALLEL else 4) * h  # LayerNorms with bias: one a layer when attention and MLP share it
        gated, rms = False, False
    tied = bool(cfg.get("tie_word_embeddings", tied_default))
    shape = ModelShape(mt, h, layers, heads, kv, hd, inter, vocab, tied, gated, rms, tuple(lins), positions, extra,
                       qk_norm=mt in QK_NORM, rotary=mt not in LEARNED_POSITIONS,
                       post_norms=2 if mt in POST_NORMS else 0, eager_default=mt in EAGER_ONLY_MODEL_TYPES,
                       attn_softcap=bool(cfg.get("attn_logit_softcapping", mt == "gemma2")),
                       final_softcap=bool(cfg.get("final_logit_softcapping", mt == "gemma2")),
                       parallel=mt in PARALLEL, norm_fp32=mt.startswith("gemma"),
                       act_extra=ACT_EXTRA.get(str(_get(cfg, "hidden_act", "activation_function", default="")), 0),
                       resid_dropouts=2 if _dropout(cfg, mt, "resid") else 0, embd_dropout=_dropout(cfg, mt, "embd"),
                       **sliding(cfg, mt, layers))
    return replace(shape, checkpoint_bytes=shape.params * DTYPE_BYTES.get(dtype, 4))


def _dropout(cfg: dict, mt: str, where: str) -> bool:
    """Whether a dropout with p > 0 runs in training: residual (after attention and after the MLP) or embeddings.

    Only GPT-BigCode and Phi have them among the families (``resid_pdrop``, ``embd_pdrop``; GPT-BigCode's defaults
    are 0.1); the attention's own dropout goes into SDPA's kernel, which keeps a random seed, not a mask."""
    if mt not in ("gpt_bigcode", "phi"):
        return False
    default = 0.1 if mt == "gpt_bigcode" else 0.0
    return float(cfg.get(f"{where}_pdrop", default) or 0) > 0


def sliding(cfg: dict, mt: str, layers: int) -> dict:
    """How many layers attend within a sliding window, and its width, as transformers' config classes decide.

    ``layer_types`` when the config lists them; otherwise each family's default: Gemma 2 every other layer, Gemma 3
    five of six, Mistral (4096 unless set) / Ministral / Starcoder2 / Phi-3 every layer when ``sliding_window`` is
    set, Qwen2/Qwen3 from ``max_window_layers`` on when ``use_sliding_window``."""
    window = cfg.get("sliding_window", 4096 if mt in ("mistral", "ministral", "gemma2", "gemma3_text") else None)
    if not window or cfg.get("use_sliding_window", True) is False:
        return {"sliding_layers": 0, "sliding_window": 0}
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        n = sum(t == "sliding_attention" for t in types[:layers])
    elif mt == "gemma2":
        n = (layers + 1) // 2
    elif mt == "gemma3_text":
        pattern = int(cfg.get("sliding_window_pattern", 6))
        n = sum(bool((i + 1) % pattern) for i in range(layers))
    elif mt in ("qwen2", "qwen3"):
        n = max(0, layers - int(cfg.get("max_window_layers", 28)))
    elif mt == "smollm3":
        n = 0  # only its NoPE layers would slide, and only with use_sliding_window
    else:
        n = layers
    return {"sliding_layers": n, "sliding_window": int(window)}


def read_model(model_path: str | Path) -> ModelShape:
    """The shape of a local model folder, from its config.json (weights are never read)."""
    p = Path(model_path).expanduser()
    cfg_path = p / "config.json"
    name = str(model_path)
    if not p.exists() and HUB_ID.match(name) and not name.startswith((".", "/", "~")):
        from ..job.hub import hub_config

        cfg, source = hub_config(name, PlanError)
        try:
            return replace(shape_from_config(cfg, name), source=str(source), source_msg=source)
        except Untraced as e:
            e.source, e.source_msg = str(source), source
            raise
    if not cfg_path.is_file():
        built = {"model": "plan.hint_demo", "lesson": "plan.hint_lesson"}.get(p.name) if "demo" in str(p) else None
        hint = say(built or "plan.hint_folder")
        raise PlanError(say("plan.no_config", path=str(p), hint=hint))
    try:
        cfg = safeload.json_text(safeload.read_text(cfg_path, safeload.CONFIG))
    except safeload.Refused as e:  # past the limits, a key twice, a number that is not finite
        raise PlanError(say("check.config_unsafe", path=str(cfg_path), why=say(e.key, **e.values))) from None
    except (OSError, ValueError) as e:
        raise PlanError(say("plan.config_not_json", path=str(cfg_path), why=str(e))) from None
    if not isinstance(cfg, dict):
        raise PlanError(say("plan.config_not_json", path=str(cfg_path), why=type(cfg).__name__))
    shape = shape_from_config(cfg, str(cfg_path))
    files = list(p.glob("*.safetensors")) or list(p.glob("*.bin"))
    if files:
        shape = replace(shape, checkpoint_bytes=sum(f.stat().st_size for f in files))
    return shape


# --- LoRA ---------------------------------------------------------------------------------

def lora_targets(shape: ModelShape, targets: list[str]) -> list[Linear]:
    """The layer linears LoRA adapts: 'all' is every linear but the output head (peft's all-linear); a traced
    model's are those its census found for the job's targets."""
    if "all" in targets or shape.census:
        return list(shape.linears)
    return [lin for lin in shape.linears if lin.name in targets]


def lora_params(shape: ModelShape, rank: int, targets: list[str]) -> int:
    """A (r x in) + B (out x r) per adapted linear, in every layer."""
    if shape.census:
        return rank * shape.census["lora_in_out"]
    return shape.layers * sum(rank * (lin.fan_in + lin.fan_out) for lin in lora_targets(shape, targets))
