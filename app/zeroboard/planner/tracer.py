"""The tracer: the model's own class built from its config on the meta device, run forward and backward with the
run's choices, and what each part keeps for backward counted (:mod:`.trace_ops`). Imports torch and transformers:
it runs in a child process (``python -m zeroboard.planner.tracer``, started by :mod:`.traces`), never in the web
server.

For each decoder layer *kind* (layers alike in parameters and attention type: a sliding-window layer, a dense or a
mixture-of-experts MLP), for the first layer, and for the rest of the model ("outside": embeddings, RoPE's tables,
masks, the final norm), the bytes saved at a few micro-batches and sequence lengths are fitted to per-token,
per-position and per-position-pair terms and a constant (:func:`basis`), and checked on two more shapes. A model of
K layers (the fewest that show every kind after the first) stands for all N. The census of the whole model (built on
meta too, no memory) gives the parameters: every expert's weights, tied or not, what LoRA adds, the largest and the
smallest. A mixture-of-experts layer routes its tokens as the model's code does: the grouped kernel transformers
runs sends t·k rows through the experts, and the router's logits and choices are counted as they are kept.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter

import torch

from ..words import say
from . import trace_ops
from .trace_ops import HEAD, OUTSIDE, Recorder

# (micro-batch, sequence) of the fit: sequences in multiples of 64 (the chunk of the linear-attention kernels written in
# Python, whose saved tensors step at each chunk) and under 512 (the shortest sliding window of a released config,
# Gemma 3's; past it a sliding layer is masked)
SHAPES = ((1, 64), (2, 64), (1, 128), (2, 128), (1, 192))
CHECKS = ((1, 256), (3, 128))  # ... and the shapes it is checked on
ONE = ((1, 64), (1, 128), (1, 192))  # micro-batch 1 apart, where it differs
MANY = ((2, 64), (2, 128), (3, 64), (3, 128), (2, 192))  # ... and 2 or more
CHECK_TOLERANCE = 0.01
SKIP_KEYS = ("architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
             "quantization_config")
LAYER_ATTRS = ("attention_type", "layer_type", "is_sliding", "sliding_window", "use_sliding_window", "mlp_type",
               "is_moe_layer")


class Untraceable(Exception):
    """The model cannot be traced: the reason (a catalog message) goes into the refusal."""


def build_config(cfg: dict, layers: int | None = None):
    """The config transformers makes of ``cfg``; with ``layers``, the same with that many decoder layers (a model
    with a text config: its text model's)."""
    from transformers import AutoConfig

    mt = cfg.get("model_type")
    if cfg.get("auto_map"):
        raise Untraceable(say("plan.trace.custom_code"))
    rest = {k: v for k, v in cfg.items() if k != "model_type" and k not in SKIP_KEYS}
    full = AutoConfig.for_model(mt, **rest)
    if layers is None:
        return full
    text = full.get_text_config()
    inner = rest.get("text_config") if text is not full and isinstance(rest.get("text_config"), dict) else None
    target = dict(inner) if inner is not None else rest
    name = text.attribute_map.get("num_hidden_layers", "num_hidden_layers")
    depth = n_layers(full)
    target = {k: v for k, v in target.items() if k not in ("num_hidden_layers", name)}
    target[name] = layers
    if isinstance(target.get("layer_types"), list) or "layer_types" in (inner or {}) or "layer_types" in cfg:
        target["layer_types"] = list(text.layer_types)[:layers]
    for key, val in list(target.items()):  # any other list with one entry a layer (mlp_layer_types, ...), or a
        if key != "layer_types" and isinstance(val, list) and depth and len(val) == depth:  # dict by layer index
            target[key] = val[:layers]
        elif isinstance(val, dict) and val and all(str(k).isdigit() for k in val):
            target[key] = {k: v for k, v in val.items() if int(k) < layers}
    if inner is not None:
        rest = {**rest, "text_config": target}
        return AutoConfig.for_model(mt, **rest)
    return AutoConfig.for_model(mt, **target)


def n_layers(config) -> int:
    return int(getattr(config.get_text_config(), "num_hidden_layers", 0) or 0)


def build(config, dtype, attn: str | None):
    """The model as the trainer loads it: a causal LM, or a vision-language model's whole (Qwen-VL: its vision tower
    counted in the census, its text traced; training.vision)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    kw = {"attn_implementation": attn} if attn else {}
    with torch.device("meta"):
        try:
            return AutoModelForCausalLM.from_config(config, dtype=dtype, **kw)
        except ValueError:  # no causal-LM class for this config: an image-text model
            return AutoModelForImageTextToText.from_config(config, dtype=dtype, **kw)


def layer_list(model, n: int):
    """The decoder layers: the ModuleList of N entries holding the most parameters (else, where the config counts its
    layers under another name, the ModuleList holding the most)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
    size = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    exact = [m for m in lists if len(m) == n]
    best = max(exact or lists, key=size, default=None)
    if best is None or size(best) == 0:
        raise Untraceable(say("plan.trace.no_layers", n=n, cls=type(model).__name__))
    return best


def signature(layer) -> str:
    """What makes two layers alike: their parameters' names and shapes, and their attention / MLP type."""
    params = [(n, tuple(p.shape)) for n, p in layer.named_parameters()]
    attrs = []
    for name, mod in layer.named_modules():
        for a in LAYER_ATTRS:
            v = getattr(mod, a, None)
            if isinstance(v, (str, int, bool)) and v is not None:
                attrs.append((name, a, v))
    return json.dumps([params, attrs], sort_keys=True, default=str)


# --- the census: every parameter of the whole model ----------------------------------------------------------------

def census(cfg: dict, targets: list[str]) -> dict:
    config = build_config(cfg)
    model = build(config, torch.float32, None)
    layers = layer_list(model, n_layers(config))
    n = len(layers)
    sigs = [signature(layer) for layer in layers]
    kinds = list(dict.fromkeys(sigs))
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    params = dict(model.named_parameters(remove_duplicate=True))
    tied = head is not None and emb is not None and head.weight is emb.weight
    linear = sum(m.weight.numel() for m in layers.modules() if isinstance(m, torch.nn.Linear))
    linear += sum(p.numel() for p in layers.parameters() if p.dim() == 3)  # experts' stacked weights
    targeted = lora_in_out(layers, targets)
    targeted["in_out"] = lora_per_rank(model, targets)
    window = getattr(config, "sliding_window", None)
    return {
        "layers": n, "kinds": [kinds.index(s) for s in sigs],
        "kind_sliding": [('"sliding_attention"' in s) or ('"is_sliding", true' in s) for s in kinds],
        "sliding_window": int(window) if isinstance(window, int) else 0,
        "params": sum(p.numel() for p in params.values()),
        "layer_params": sum(p.numel() for p in layers.parameters()),
        "embedding": sum(p.numel() for p in emb.parameters()) if emb is not None else 0,
        "head": 0 if tied or head is None else sum(p.numel() for p in head.parameters()),
        "tied": bool(tied),
        "largest": max(p.numel() for p in params.values()),
        "sizes": sorted(Counter(p.numel() for p in params.values()).items()),
        "linear_weights": linear + (head.weight.numel() if head is not None else 0),
        "lora_in_out": targeted["in_out"], "lora_largest": targeted["largest"],
        "lora_linears": targeted["one_layer"],
    }


def lora_in_out(layers, targets: list[str]) -> dict:
    """The linears peft adapts ('all': every nn.Linear of the layers, as peft's all-linear; else by leaf name):
    the sum of their in + out widths (LoRA's parameters are rank x that), the widest, one layer's list."""
    total, largest, one = 0, 0, []
    for i, layer in enumerate(layers):
        for name, mod in layer.named_modules():
            if isinstance(mod, torch.nn.Linear) and ("all" in targets or name.rpartition(".")[2] in targets):
                total += mod.in_features + mod.out_features
                largest = max(largest, mod.in_features, mod.out_features)
                if i == 0:
                    one.append([name.rpartition(".")[2], mod.in_features, mod.out_features, mod.bias is not None])
    return {"in_out": total, "largest": largest, "one_layer": one}


def lora_per_rank(model, targets: list[str]) -> int:
    """LoRA's trainable parameters at rank 1 (they grow with the rank), as peft itself adapts the model: its
    all-linear, and the experts' stacked weights where peft adapts those too."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=1, lora_alpha=2, target_modules="all-linear" if "all" in targets else targets)
    with contextlib.suppress(ValueError):  # no module matches: nothing is adapted
        peft_model = get_peft_model(model, cfg)
        return sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    return 0


def prefix(kinds: list[int]) -> int:
    """The fewest first layers that show every kind after the first layer (which keeps less where nothing before it
    trains: LoRA), and at least two."""
    later: dict[int, int] = {}
    for i, k in enumerate(kinds[1:], start=1):
        later.setdefault(k, i)
    return min(len(kinds), max(2, max(later.get(k, 0) for k in set(kinds)) + 1))


# --- one mode --------------------------------------------------------------------------------------------------------

def prepared(cfg: dict, k: int, mode: dict):
    """The K-layer model as the run holds it: dtype, LoRA adapters (fp32 unless pure bf16; 16 bit when DeepSpeed casts
    the model below ZeRO-3), in training mode."""
    dtype = torch.bfloat16 if mode["kind"] == "pure16" else torch.float32
    attn = "eager" if mode.get("eager") else "sdpa"
    config = build_config(cfg, k)
    try:
        model = build(config, dtype, attn)
    except (ValueError, ImportError):  # a model class without SDPA: its own attention, traced as it is
        config = build_config(cfg, k)
        model = build(config, dtype, None)
    if mode.get("lora"):
        from peft import LoraConfig, get_peft_model

        targets = mode.get("targets") or ["all"]
        lcfg = LoraConfig(r=int(mode.get("rank", 8)), lora_alpha=16, lora_dropout=0.0,
                          target_modules="all-linear" if "all" in targets else targets)
        model = get_peft_model(model, lcfg, autocast_adapter_dtype=not mode.get("adapters16", False))
        if mode["kind"] == "pure16" and not mode.get("adapters32"):
            model = model.to(torch.bfloat16)
    return model.train(), config


def count(model, config, mode: dict, batch: int, seq: int) -> tuple[dict[str, int], int]:
    """Bytes saved by each part in one forward (and a backward: it must run), and the weights' 16-bit copies."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = layer_list(inner, n_layers(config))
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    mask = torch.ones(batch, seq, dtype=torch.long, device="meta") if mode.get("masked") else None
    params = {trace_ops.key(p) for p in model.parameters()}
    rec = Recorder(params, {trace_ops.key(ids)} | ({trace_ops.key(mask)} if mask is not None else set()),
                   "cuda" if mode.get("cuda", True) else "cpu", mode["kind"] == "autocast" or mode.get("autocast_fp32"),
                   mode.get("zero3", False))

    def enter(i):
        return lambda *_a, **_k: setattr(rec, "scope", str(i))

    handles = [layer.register_forward_pre_hook(enter(i)) for i, layer in enumerate(layers)]
    handles += [layer.register_forward_hook(lambda *_a: setattr(rec, "scope", OUTSIDE)) for layer in layers]
    head = inner.get_output_embeddings()
    if head is not None:  # from the head on, what is kept belongs to the loss (the planner counts it itself)
        handles.append(head.register_forward_pre_hook(lambda *_a: setattr(rec, "scope", HEAD)))
    try:
        with meta_values(mask is not None, rec), rec.hooks(), rec:
            out = model(input_ids=ids, attention_mask=mask, use_cache=False)
        logits = out.logits if hasattr(out, "logits") else out[0]
        logits.float().sum().backward()
    finally:
        for h in handles:
            h.remove()
    return rec.totals(), sum(rec.copies.values())


def meta_values(masked: bool, rec: Recorder | None = None) -> contextlib.ExitStack:
    """transformers reads the mask's and the positions' values to decide whether SDPA may skip the mask and whether
    sequences are packed; meta tensors have no values: the trace says what the run has (a padded row when masked, no
    packing in the positions)."""
    from transformers import masking_utils

    stack = contextlib.ExitStack()
    stack.enter_context(mock_attr(masking_utils, "find_packed_sequence_indices", lambda *a, **k: None))
    real = torch.autocast  # peft turns autocast off around its parameter adapters (MoE experts): not a meta device's

    @contextlib.contextmanager
    def played(enabled: bool):
        """Autocast as the recorder plays it, turned off (or on) for a block as the model's code asks."""
        before = rec.autocast if rec is not None else False
        if rec is not None and not enabled:
            rec.autocast = False
        try:
            yield
        finally:
            if rec is not None:
                rec.autocast = before

    def autocast(device_type, *a, **k):
        return played(k.get("enabled", True)) if device_type == "meta" else real(device_type, *a, **k)

    stack.enter_context(mock_attr(torch, "autocast", autocast))
    if masked:
        stack.enter_context(mock_attr(masking_utils, "fast_all", lambda t: False))
    return stack


@contextlib.contextmanager
def mock_attr(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def basis(batch: int, seq: int) -> list[float]:
    """The terms a part's saved bytes may have: per token (B·T), per position shared by the micro-batch's rows (T:
    RoPE's tables), per token and position (B·T²: eager attention's scores, a mask per row), per position pair
    (T²: one mask for all rows), and a constant."""
    return [batch * seq, seq, batch * seq * seq, seq * seq, 1]


def solve(points: dict[tuple[int, int], float], shapes, terms=basis) -> list[float]:
    """The coefficients of ``terms`` (:func:`basis`) through ``shapes``."""
    a = torch.tensor([terms(*s) for s in shapes], dtype=torch.float64)
    y = torch.tensor([points[s] for s in shapes], dtype=torch.float64)
    return [float(v) for v in torch.linalg.lstsq(a, y).solution]


def value(coef: dict, batch: int, seq: int) -> float:
    """Bytes a part keeps at a micro-batch of ``batch`` sequences of ``seq`` tokens."""
    c = coef["one"] if batch == 1 else coef["many"]
    return sum(k * x for k, x in zip(c, basis(batch, seq)))


class Shots:
    """The forward passes of one mode, counted once per shape."""

    def __init__(self, model, config, mode: dict):
        self.model, self.config, self.mode = model, config, mode
        self.seen: dict[tuple[int, int], tuple[dict[str, int], int]] = {}

    def __call__(self, shape: tuple[int, int]) -> tuple[dict[str, int], int]:
        if shape not in self.seen:
            self.seen[shape] = count(self.model, self.config, self.mode, *shape)
        return self.seen[shape]

    def part(self, part: str, shapes) -> dict:
        return {s: self(s)[0].get(part, 0) for s in shapes}


def fitted(shots: Shots, parts: list[str]) -> tuple[dict[str, dict], float]:
    """Each part's coefficients, and the worst error on the shapes they were checked on.

    One fit for every micro-batch first; where one sequence a micro-batch differs (a reshape that is a view of one
    row and a copy of several), micro-batch 1 and micro-batches of 2 or more are fitted apart."""
    def worst_of(coefs, checks):
        err = 0.0
        for p, c in coefs.items():
            for s, got in shots.part(p, checks).items():
                err = max(err, abs(got - value(c, *s)) / max(got, 1))
        return err

    coefs = {p: {"one": (c := solve(shots.part(p, SHAPES), SHAPES)), "many": c} for p in parts}
    err = worst_of(coefs, CHECKS)
    if err <= CHECK_TOLERANCE:
        return coefs, err
    coefs = {}
    for p in parts:
        one = solve(shots.part(p, ONE), ONE, lambda b, t: [t, t * t, 1])  # B = 1: the batch terms are the others
        coefs[p] = {"one": [one[0], 0.0, one[1], 0.0, one[2]], "many": solve(shots.part(p, MANY), MANY)}
    return coefs, worst_of(coefs, CHECKS)


BUILD = ("kind", "lora", "rank", "targets", "adapters32", "adapters16", "eager")  # what a mode's model is made of


def trace_mode(cfg: dict, k: int, kinds: list[int], mode: dict, built: dict | None = None) -> dict:
    """One mode's fitted terms: per layer kind, the first layer and outside, and the 16-bit weight copies of one
    pass. ``built``: models made for earlier modes, by what they are made of (the mask, ZeRO-3's linear, autocast and
    the kernels are played at run time)."""
    built = {} if built is None else built
    key = json.dumps([mode.get(f) for f in BUILD], default=str)
    if key not in built:
        built[key] = prepared(cfg, k, mode)
    model, config = built[key]
    shots = Shots(model, config, mode)
    parts = sorted({p for s in (*SHAPES, *CHECKS) for p in shots(s)[0]})
    coefs, worst = fitted(shots, parts)
    if worst > CHECK_TOLERANCE:
        raise Untraceable(say("plan.trace.not_linear", off=f"{worst:.1%}"))
    zero = {"one": [0.0] * 5, "many": [0.0] * 5}
    by_kind: dict[str, dict] = {}
    for i in range(k):  # each kind by its last traced layer: the first keeps less where nothing before it trains
        by_kind[str(kinds[i])] = coefs.get(str(i), zero)
    return {"layers": by_kind, "first": coefs.get("0", zero), "outside": coefs.get(OUTSIDE, zero),
            "copies_per_pass": shots(SHAPES[0])[1], "check_error": worst}


def trace(cfg: dict, targets: list[str], modes: dict[str, dict]) -> dict:
    """The census and every mode asked for (``modes``: name -> mode), or the reason it cannot be traced."""
    try:
        c = census(cfg, targets)
        k = prefix(c["kinds"])
        out = {"census": c, "traced_layers": k, "modes": {}}
        built: dict = {}
        for name, mode in modes.items():
            out["modes"][name] = trace_mode(cfg, k, c["kinds"], mode, built)
        return out
    except Untraceable as e:
        return {"error": e.args[0].to_json()}
    except Exception as e:  # noqa: BLE001 - any failure of the model's own code on meta tensors is the reason
        first = str(e).splitlines()[0] if str(e) else ""
        return {"error": say("plan.trace.raised", error=f"{type(e).__name__}: {first}"[:300]).to_json()}


def main(argv: list[str] | None = None) -> int:
    """Read the request (JSON: config, targets, modes) from the file named, write the result to the second file."""
    import warnings

    warnings.filterwarnings("ignore")
    argv = sys.argv[1:] if argv is None else argv
    request = json.loads(open(argv[0], encoding="utf-8").read())
    result = trace(request["config"], request.get("targets") or ["all"], request["modes"])
    import transformers

    result["transformers"] = transformers.__version__
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
