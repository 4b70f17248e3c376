"""What the tracer does to each op of the traced forward pass: it counts what autograd saves, and plays the kernels
and casts of the device the run will use (imports torch: the tracer's child process only, never the web server).

:class:`Recorder` is a ``TorchFunctionMode`` (it sees every torch call of the model's own Python code, above
autograd, as ``torch.autocast`` does) together with a ``saved_tensors_hooks`` pair:

- every saved tensor is counted once per storage (views of one storage count once), in the part of the model
  that made it (a decoder layer, the head, or "outside": embeddings, RoPE's tables, masks, the final norm);
  parameters, their 16-bit copies (counted apart: ``copies``) and the inputs (ids, mask) are not activations;
- ``F.scaled_dot_product_attention`` is played by the kernel the device runs, which the meta device has not:
  on a GPU flash / cuDNN without a mask (q, k, v, the output, the fp32 log-sum-exp per query head) and the
  memory-efficient kernel with one (the same and the mask as a bias in q's dtype, its last dimension padded to
  16); on the CPU the flash kernel (the mask as given, in q's dtype). The output has the kernel's layout: a GPU's
  (batch, sequence, heads, width), so transformers' ``transpose(1, 2).contiguous()`` copies nothing (Phi-3's
  traced H200 rows: no copy though RoPE's cat makes q whole); the CPU's follows q's, and is copied when q is whole.
  Where SDPA falls back to its math path (:func:`math_path`: the CPU with dropout, key/value heads that differ
  without ``enable_gqa``), the meta device runs that path as it is;
- dropout on a GPU keeps a 1-byte mask (the CPU and meta kernels keep the scaled noise in x's dtype);
- CUDA autocast is played by casting inputs (matmuls in 16 bit, each weight's cast cached for the pass; the ops of
  PyTorch's CUDA fp32 list in fp32), since autocast on a machine without CUDA is off;
- under ZeRO-3 DeepSpeed replaces ``F.linear`` by a function that saves its input and weight whatever trains.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

F = torch.nn.functional
T = torch.Tensor
# CUDA autocast's lists (PyTorch's "CUDA Ops that can autocast to float16 / to float32"), as Python calls
LOW = {F.linear, torch.matmul, T.matmul, T.__matmul__, torch.bmm, T.bmm, torch.baddbmm, torch.addmm, torch.mm, T.mm,
       F.scaled_dot_product_attention, torch.einsum}
FP32 = {F.layer_norm, F.group_norm, torch.pow, T.pow, T.__pow__, F.softmax, torch.softmax, T.softmax, F.log_softmax,
        torch.log_softmax, T.log_softmax, torch.exp, T.exp, torch.log, T.log, torch.rsqrt, T.rsqrt, torch.reciprocal,
        T.reciprocal, torch.cumsum, T.cumsum, torch.norm, T.norm, F.softplus, F.normalize, torch.prod, T.prod}
OUTSIDE, HEAD = "outside", "head"


def key(t: torch.Tensor) -> int:
    """One storage, whatever view of it: the storage's own address (meta tensors all have data pointer 0)."""
    return t.untyped_storage()._cdata


class _Kernel(torch.autograd.Function):
    """A stand-in for an op whose saved tensors are the device kernel's: its output is made by ``make()`` (a new
    tensor, which the model may change in place); of ``tensors``, the first ``n`` are the op's inputs (they get
    gradients), the rest what it saves."""

    @staticmethod
    def forward(ctx, make, n, *tensors):
        ctx.shapes = [(i.shape, i.dtype, i.device) for i in tensors[:n]]
        ctx.rest = len(tensors) - n
        ctx.save_for_backward(*tensors[n:])
        return make()

    @staticmethod
    def backward(ctx, grad):
        return (None, None, *(torch.zeros(s, dtype=d, device=dev) for s, d, dev in ctx.shapes), *[None] * ctx.rest)


GROUPED = {f for f in (getattr(F, "grouped_mm", None), getattr(torch, "_grouped_mm", None)) if f is not None}


def grouped_mm(func, a, b, *args, **kwargs):
    """A grouped matmul of the experts (transformers' grouped kernel: t·k rows). Its meta kernel takes bf16 only: in
    another dtype the output's shape comes from a bf16 call, and it saves what the real op saves (input, weight,
    offsets)."""
    offs = kwargs.get("offs", args[0] if args else None)
    shape = func(a.detach().to(torch.bfloat16), b.detach().to(torch.bfloat16), offs=offs).shape
    dtype = kwargs.get("out_dtype") or a.dtype
    return _Kernel.apply(lambda: torch.empty(shape, dtype=dtype, device=a.device), 2, a, b, b, offs, a)


class _Attention(torch.autograd.Function):
    """SDPA played: ``make()`` writes the output in the kernel's layout, which is saved with q, k, v and ``extra``
    (the log-sum-exp, the mask's bias, the dropout seed)."""

    @staticmethod
    def forward(ctx, make, q, k, v, *extra):
        out = make()
        ctx.save_for_backward(q, k, v, out, *extra)
        ctx.shapes = [(x.shape, x.dtype) for x in (q, k, v)]
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, *(torch.zeros(s, dtype=d, device=grad.device) for s, d in ctx.shapes),
                *(None for _ in ctx.saved_tensors[4:]))


class _Zero3Linear(torch.autograd.Function):
    """DeepSpeed's ``LinearFunctionForZeroStage3``: input, weight and bias saved, frozen or not."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w, b)
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, grad):
        x, w, b = ctx.saved_tensors
        gx = grad.matmul(w.to(grad.dtype))
        gw = grad.reshape(-1, grad.shape[-1]).t().matmul(x.reshape(-1, x.shape[-1]).to(grad.dtype)).to(w.dtype)
        return gx, gw, (grad.sum(tuple(range(grad.dim() - 1))).to(b.dtype) if b is not None else None)


def attention(profile: str, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as the device's kernel saves it: see the module's notes."""
    b, h, t, _ = q.shape
    width = v.shape[-1]
    if profile == "cuda":  # a GPU's kernels write (batch, sequence, heads, width), whatever q's layout
        def make():
            return torch.empty(b, t, h, width, dtype=q.dtype, device=q.device).transpose(1, 2)
    else:  # the CPU's writes in q's layout: a q made whole by RoPE's cat (Phi, Phi-3) is (batch, heads, ...)
        order = sorted(range(4), key=lambda d: -q.stride(d))
        shape = [(b, h, t, width)[d] for d in order]

        def make():
            return torch.empty(shape, dtype=q.dtype, device=q.device).permute(*[order.index(d) for d in range(4)])
    extra = [torch.empty(b, h, t, dtype=torch.float32, device=q.device)]  # the log-sum-exp
    if attn_mask is not None:
        shape_m = list(attn_mask.shape)
        if profile == "cuda":
            shape_m[-1] = -(-shape_m[-1] // 16) * 16
        extra.append(torch.empty(shape_m, dtype=q.dtype, device=q.device))
    if dropout_p and profile == "cuda":
        extra.append(torch.empty(2, dtype=torch.int64, device=q.device))  # the kernel's seed and offset
    return _Attention.apply(make, q, k, v, *extra)


def math_path(profile: str, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Whether SDPA falls back to its math path (which the meta device runs as it is): on the CPU, as torch's own
    kernel choice says for tensors of these shapes and strides (dropout, or heads that differ without
    ``enable_gqa``); on a GPU, heads that differ without ``enable_gqa`` or a head wider than the fused kernels take."""
    differ = k.shape[1] != q.shape[1] and not enable_gqa
    if profile == "cuda":
        return differ or q.shape[-1] > 256
    like = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype) for x in (q, k, v)]
    mask = None if attn_mask is None else torch.empty_strided(attn_mask.shape, attn_mask.stride(), dtype=attn_mask.dtype)
    return torch._fused_sdp_choice(*like, mask, float(dropout_p or 0.0), bool(is_causal), scale=scale,
                                   enable_gqa=bool(enable_gqa)) == 0


class Recorder(TorchFunctionMode):
    """Counts what autograd saves, by the part of the model that made it, playing the device (the module's notes).

    ``autocast``: play CUDA autocast (bf16 matmuls, fp32 list); ``zero3``: DeepSpeed's ZeRO-3 linear;
    ``profile``: "cuda" or "cpu" (which kernels are played); ``play``: False counts a real run on its own kernels."""

    def __init__(self, params: set[int], inputs: set[int], profile: str, autocast: bool, zero3: bool, play: bool = True):
        super().__init__()
        self.params, self.inputs, self.profile, self.play = params, inputs, profile, play
        self.autocast, self.zero3 = autocast, zero3
        self.scope = OUTSIDE
        self.made: dict[int, str] = {}  # storage -> the scope that made it
        self.saved: dict[int, tuple[int, set[str]]] = {}  # storage -> (bytes, the scopes that saved it)
        self.copies: dict[int, int] = {}  # the 16-bit copies of the weights (autocast's cache): storage -> bytes
        self._cache: dict[int, torch.Tensor] = {}
        self.keep: list = []  # every tensor made, alive until the pass is counted (no storage address reused)

    # --- saved tensors ----------------------------------------------------------------------------------------
    def pack(self, t):
        k = key(t)
        if k in self.params or k in self.inputs or k in self.copies:
            return t
        nbytes, scopes = self.saved.get(k, (t.untyped_storage().nbytes(), set()))
        scopes.add(self.scope)
        self.saved[k] = (nbytes, scopes)
        return t

    def totals(self) -> dict[str, int]:
        """Bytes saved, by the scope that made each storage; what only the head saved (its input, the logits' ops)
        belongs to the loss, which the planner counts itself."""
        out: dict[str, int] = {}
        for k, (nbytes, scopes) in self.saved.items():
            where = self.made.get(k, next(iter(scopes)))
            if where == HEAD or scopes == {HEAD}:
                continue
            out[where] = out.get(where, 0) + nbytes
        return out

    # --- every torch call ------------------------------------------------------------------------------------
    def _cast(self, x, dtype):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == dtype:
            return x
        if isinstance(x, torch.nn.Parameter):
            if key(x) not in self._cache:
                with torch.no_grad() if not x.requires_grad else _nullcontext():
                    copy = x.to(dtype)
                self._cache[key(x)] = copy
                self.copies[key(copy)] = copy.untyped_storage().nbytes()
            return self._cache[key(x)]
        return x.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.autocast:
            dtype = torch.bfloat16 if func in LOW else torch.float32 if func in FP32 else None
            if dtype is not None:
                args = tuple(self._cast(a, dtype) for a in args)
                kwargs = {k: self._cast(v, dtype) for k, v in kwargs.items()}
        if not self.play:  # counting a real run on its own kernels (the CPU check of the trace)
            out = func(*args, **kwargs)
        elif func is F.scaled_dot_product_attention and not math_path(self.profile, *args, **kwargs):
            out = attention(self.profile, *args, **kwargs)
        elif func is F.dropout and self.profile == "cuda" and kwargs.get("training", args[2] if len(args) > 2 else True) \
                and (kwargs.get("p", args[1] if len(args) > 1 else 0.5) or 0) > 0:
            x = args[0]
            mask = torch.empty(x.shape, dtype=torch.bool, device=x.device)
            out = _Kernel.apply(lambda: torch.empty_like(x), 1, x, mask)
        elif func in GROUPED and args[0].device.type == "meta" and args[0].dtype != torch.bfloat16:
            out = grouped_mm(func, *args, **kwargs)
        elif func is F.linear and self.zero3:
            x, w = args[0], args[1]
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            out = _Zero3Linear.apply(x, w, b)
        else:
            out = func(*args, **kwargs)
        self._tag(out)
        return out

    def _tag(self, out) -> None:
        items = out if isinstance(out, (tuple, list)) else (out,)
        for t in items:
            if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter):
                self.made.setdefault(key(t), self.scope)
                self.keep.append(t)

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
