"""Issue 22's terms pinned on CPU against the libraries: gradient accumulation, sliding-window attention at
micro-batch 1, the families' layers, and which Liger kernels a model type really gets."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from helpers import liger_installed, liger_wheel
from zeroboard import planner
from zeroboard.job import liger
from zeroboard.job.devices import Gpu
from zeroboard.job.spec import JobSpec
from zeroboard.planner import activations, memory

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import planner_layer_probe as probe  # noqa: E402 - the GPU probe counts the same way

GIB = 1 << 30
H200 = [Gpu(0, "NVIDIA H200", 143 * GIB, 139 * GIB, 0, 0, (9, 0))]
TINY = dict(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            vocab_size=96, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny_model(model_type: str, layers: int, **kw):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    hf = AutoConfig.for_model(model_type, **{**TINY, **kw, "num_hidden_layers": layers}, attn_implementation="sdpa")
    return AutoModelForCausalLM.from_config(hf).train()


def plan_of(tmp_path, cfg: dict, **job) -> planner.Plan:
    spec = JobSpec(model_name_or_path=str(tmp_path), precision="bf16", device_type="cuda", **job)
    return planner.estimate(spec, H200, model=planner.shape_from_config(cfg))


@pytest.mark.parametrize("finetuning", ["full", "lora"])
def test_accumulation_keeps_the_gradients_of_the_micro_batches_before(tmp_path, finetuning, monkeypatch):
    """Without DeepSpeed a second micro-batch runs its forward and backward beside the first one's gradients: what
    torch leaves in ``.grad`` after one backward is exactly what the plan adds at every moment of the passes."""
    liger_installed(monkeypatch, False)
    cfg = {"model_type": "llama", **TINY, "num_hidden_layers": 2}
    model = tiny_model("llama", 2)
    if finetuning == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0))
    ids = torch.randint(3, 90, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    kept = sum(p.grad.untyped_storage().nbytes() for p in model.parameters() if p.grad is not None)
    # fp32 master weights: the model above keeps fp32 gradients (with split master weights they would be bf16)
    job = dict(finetuning_type=finetuning, lora_rank=8, cutoff_len=16, per_device_train_batch_size=1, master_weights="fp32")
    one = plan_of(tmp_path, cfg, gradient_accumulation_steps=1, **job)
    two = plan_of(tmp_path, cfg, gradient_accumulation_steps=2, **job)
    for moment in ("forward", "backward"):
        assert two.moments[moment] - one.moments[moment] == kept
    assert two.moments["step"] == one.moments["step"]
    # ZeRO-2 keeps the partition its epilogue filled (views in all_grad_tensors) beside the next micro-batch's: one
    # 16-bit partition more in every pass after the first, none at the step (deepspeed stage_1_and_2.py)
    z2 = [plan_of(tmp_path, cfg, gradient_accumulation_steps=ga, deepspeed_stage="2", **job) for ga in (1, 4)]
    partition = 2 * z2[0].trainable
    for moment in ("forward", "backward"):
        assert z2[1].moments[moment] - z2[0].moments[moment] == partition
    assert z2[1].moments["step"] == z2[0].moments["step"]


MINI = dict(model_type="ministral", **TINY, sliding_window=32)


@pytest.mark.parametrize("seq", [16, 32, 48])
def test_a_sliding_window_layer_is_masked_at_micro_batch_one(seq):
    """transformers skips the causal mask (SDPA's is_causal) only while the sequence is shorter than the window; from
    the window on, a sliding layer gets a mask even unpadded: SDPA's masked kernel saves k and v repeated to every
    query head and the mask's bias. One sliding layer more = the planner's masked per-layer bytes more."""
    counts = []
    for layers in (2, 3):
        kw = {k: v for k, v in MINI.items() if k not in ("model_type",) and k not in TINY}
        model = tiny_model("ministral", layers, layer_types=["full_attention"] * 2 + ["sliding_attention"] * (layers - 2),
                           **kw)
        ids = torch.randint(3, 90, (1, seq))
        counts.append(probe.saved_bytes(model, lambda model=model, ids=ids: model(input_ids=ids, labels=ids)))
    shape = planner.shape_from_config({**MINI, "num_hidden_layers": 3,
                                       "layer_types": ["full_attention"] * 2 + ["sliding_attention"]})
    assert shape.sliding_layers == 1 and shape.sliding_window == 32
    m = activations.ActMode("fp32", False, seq=seq, cuda=False)
    masked = activations.layer_act_bytes(shape, dataclasses.replace(m, masked=True), ["all"], 8)
    plain = activations.layer_act_bytes(shape, m, ["all"], 8)
    expected = masked if seq >= shape.sliding_window else plain
    # the CPU's kernel keeps the mask as given, in q's dtype (4 bytes an entry here; a GPU's a 16-bit bias padded to 16)
    assert counts[1] - counts[0] == expected * seq
    # ... and the plan (on a GPU) counts it: the sliding layers' per-token bytes, and their boolean mask
    s = memory.Setup("full", "none", False, False, 1, "cuda", "fp32", 1, seq, False)
    a = memory.activation_bytes(shape, s)
    on_gpu = activations.layer_act_bytes(shape, dataclasses.replace(m, masked=True, cuda=True), ["all"], 8)
    assert a["layers"] == seq * (2 * plain + (on_gpu if seq >= shape.sliding_window else plain))


FAMILY_CFGS = {
    "llama": {}, "mistral": {"sliding_window": None}, "qwen2": {}, "qwen3": {}, "smollm3": {}, "granite": {},
    "ministral": {}, "starcoder2": {},
    "phi": {"partial_rotary_factor": 0.5, "hidden_act": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0},
}


@pytest.mark.parametrize("model_type", sorted(FAMILY_CFGS))
def test_each_family_layer_saves_what_the_planner_derives(model_type):
    """fp32, SDPA without a mask: one layer more = the planner's bytes per token and layer more (Phi-2: one norm for
    attention and MLP side by side, gelu_new's three tensors, the attention output copied before ``dense``)."""
    counts = []
    extra = FAMILY_CFGS[model_type]
    for layers in (2, 3):
        model = tiny_model(model_type, layers, **extra)
        ids = torch.randint(3, 90, (2, 32))
        counts.append(probe.saved_bytes(model, lambda model=model, ids=ids: model(input_ids=ids, labels=ids)))
    shape = planner.shape_from_config({"model_type": model_type, **TINY, **extra, "num_hidden_layers": 2})
    per = activations.layer_act_bytes(shape, activations.ActMode("fp32", False, cuda=False), ["all"], 8)
    assert counts[1] - counts[0] == per * 64


def test_a_family_the_planner_does_not_derive_is_traced_instead():
    """Never planned with another family's terms: a model type outside the families is handed to the tracer."""
    for model_type in ("gpt_neox", "cohere", "olmo2", "gpt2"):
        with pytest.raises(planner.shapes.Untraced, match=f"'{model_type}'.*not one of the families.*traced"):
            planner.shape_from_config({"model_type": model_type, **TINY, "num_hidden_layers": 2})


# --- Liger: what the installed library applies to a model type --------------------------------------------------

def test_liger_coverage_is_read_from_its_own_signature(monkeypatch):
    liger_installed(monkeypatch)
    llama = liger.coverage("llama")
    assert llama.kernels == ("rms_norm", "swiglu", "rope", "fused_linear_cross_entropy")
    granite = liger.coverage("granite")  # its fused loss defaults off and raises when asked: never claimed
    assert not granite.fused_loss and granite.has("cross_entropy")
    assert liger.trainer_config("granite", False, False) == {"fused_linear_cross_entropy": False}
    assert liger.coverage("llama", liger.trainer_config("llama", True, False)).fused_loss is False  # ZeRO-3
    assert liger.coverage("phi") is None and liger.coverage("gemma").has("geglu")


@pytest.mark.parametrize("model_type", ["llama", "granite", "gemma", "phi", "starcoder2"])
@pytest.mark.parametrize("stage", ["none", "3"])
def test_the_plan_never_claims_a_kernel_liger_does_not_apply(tmp_path, monkeypatch, model_type, stage):
    """The plan's Liger flags (and the fused-loss note) are the installed Liger's answer for the model type, at the
    stage the trainer runs; a family Liger does not patch is planned on the plain path."""
    liger_installed(monkeypatch)
    cfg = {"model_type": model_type, **TINY, "num_hidden_layers": 2}
    plan = plan_of(tmp_path, cfg, finetuning_type="full", deepspeed_stage=stage, liger_kernel="auto")
    cov = liger.coverage(model_type, liger.trainer_config(model_type, stage == "3", False))
    got = cov.kernels if cov else ()
    s = plan.setup
    assert s.fused_loss == ("fused_linear_cross_entropy" in got)
    assert s.liger == ("rms_norm" in got and plan.model.rms_norm)
    assert s.liger_mlp == (("swiglu" in got or "geglu" in got) and plan.model.gated)
    assert s.liger_ce == ("cross_entropy" in got and "fused_linear_cross_entropy" not in got)
    assert ("fused" in " ".join(plan.notes).lower()) == s.fused_loss


def test_the_reader_agrees_with_liger_itself(monkeypatch):
    """Read from Liger's real source: Granite's function raises for the fused loss (its flag defaults off), Llama's
    applies all four kernels, every model type of Liger's table gets an answer; where Liger imports (the GPU image),
    each type's kernels are within its function's signature defaults."""
    liger_installed(monkeypatch)
    assert liger.source_text()[1] == str(liger_wheel())
    assert not liger.coverage("granite").fused_loss and liger.coverage("granite").has("rms_norm")
    assert liger.coverage("llama").kernels == ("rms_norm", "swiglu", "rope", "fused_linear_cross_entropy")
    assert liger.coverage("mamba") is None  # a family Liger does not patch: the plain path
    table = liger.patched_types()
    assert {"llama", "mistral", "qwen2", "gemma", "granite", "phi3"} <= table
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:  # no Triton here: the source itself was the answer
        return
    import inspect

    for model_type, fn in MODEL_TYPE_TO_APPLY_LIGER_FN.items():
        params = inspect.signature(fn).parameters
        want = {k for k in liger.KERNELS if k in params and params[k].default is True}
        assert set(liger.coverage(model_type).kernels) <= want, model_type


class CudaAutocast(torch.overrides.TorchFunctionMode):
    """CUDA autocast's casts for the ops these layers call, applied by hand on the CPU (CPU autocast has other lists,
    and this machine has no GPU): linear and SDPA in bf16 (each weight cast once a forward, as autocast's cache does),
    layer_norm and pow in fp32 (PyTorch's CUDA autocast op reference)."""

    F = torch.nn.functional
    LOW = {F.linear, F.scaled_dot_product_attention}
    FP32 = {F.layer_norm, torch.pow, torch.Tensor.pow, torch.Tensor.__pow__}

    def __init__(self):
        super().__init__()
        self.copies: dict = {}  # weight -> its bf16 copy (the plan counts these apart: activations.autocast_copies)

    def _cast(self, x, dtype):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == dtype:
            return x
        if isinstance(x, torch.nn.Parameter):
            return self.copies.setdefault(x, x.to(dtype))
        return x.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dtype = torch.bfloat16 if func in self.LOW else torch.float32 if func in self.FP32 else None
        if dtype is not None:
            args = tuple(self._cast(a, dtype) for a in args)
            kwargs = {k: self._cast(v, dtype) for k, v in kwargs.items()}
        return func(*args, **kwargs)


@pytest.mark.parametrize("weights", ["split", "fp32"])
@pytest.mark.parametrize("model_type", ["phi", "starcoder2", "llama"])
def test_cuda_autocast_runs_layer_norm_and_gelu_news_pow_in_fp32(model_type, weights):
    """The Trainer's autocast is on for every 16-bit run without DeepSpeed, also when the model itself is bf16 (split
    master weights): on a GPU layer_norm saves an fp32 copy of its input and each projection its own bf16 copy of the
    output, and gelu_new's pow turns the activation's tensors fp32 (Phi-2 full at 4 x 2048 on the H200: 59 KB a token
    and layer over the 16-bit count, which planned it 12.5% under NVML's peak). RMSNorm families see no change."""
    counts = []
    extra = FAMILY_CFGS[model_type]
    for layers in (2, 3):
        model = tiny_model(model_type, layers, **extra)
        if weights == "split":
            model = model.to(torch.bfloat16)
        ids = torch.randint(3, 90, (2, 32))
        mode = CudaAutocast()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen: dict[int, int] = {}

        def pack(t, seen=seen):
            seen.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), mode:
            model(input_ids=ids, labels=ids)
        copies = {c.untyped_storage().data_ptr() for c in mode.copies.values()}
        counts.append(sum(n for ptr, n in seen.items() if ptr not in params | copies))
    cfg = {"model_type": model_type, **TINY, **extra, "num_hidden_layers": 2}
    shape = planner.shape_from_config(cfg)
    kind = "pure16" if weights == "split" else "autocast"
    per = activations.layer_act_bytes(shape, activations.ActMode(kind, False, cuda=False, autocast_fp32=True), ["all"], 8)
    assert counts[1] - counts[0] == per * 64
    # against the count without the fp32 ops: gelu_new changes it always; a LayerNorm where the model is bf16 (under
    # fp32 weights the residual stream is fp32 already); an RMSNorm family with SiLU never
    plain = activations.layer_act_bytes(shape, activations.ActMode(kind, False, cuda=False), ["all"], 8)
    assert (per != plain) == (model_type == "phi" or (model_type == "starcoder2" and weights == "split"))
