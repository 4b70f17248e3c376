"""bf16 weights with fp32 updates, exactly: each fp32 master weight kept as its bf16 rounding plus a 16-bit remainder.

Why not the other ways:

- fp32 master weights + autocast (the old default) cast every weight to bf16 in each forward pass, keep fp32
  gradients and run AdamW over fp32 weights: on the H200 bench 0.144 s a step against 0.118 s for pure bf16.
- Pure bf16 is that fast but rounds each weight after each update: an update under half a bf16 step is lost.
- Kahan summation and stochastic rounding (torchao, torch-optimi) approximate the master copy with a bf16
  compensation or in expectation; a bf16 compensation holds about 16 bits of mantissa, not fp32's 24.

Here nothing is approximated. An fp32 number's bit pattern ``b`` (32 bits) is split into ``hi = (b + 0x8000) >> 16``,
the bf16 nearest to it (ties away from zero), and ``lo = b - (hi << 16)``, a signed offset in [-32768, 32767] that
fits an int16. The model holds ``hi`` (a bf16 tensor: what it computes with, the value autocast would have cast the
fp32 weight to); the optimizer holds ``lo``; ``(hi << 16) + lo`` gives the fp32 master back bit for bit. AdamW runs
in fp32 on that rebuilt master, so the sequence of master weights is the one an fp32 master copy would go through
for the same gradients (``tests/test_master.py`` checks it bit for bit against torch's AdamW). Memory per weight: 2
(bf16) + 2 (remainder) + 8 (fp32 moments) + 2 (bf16 gradient) = 14 bytes, against 16 + autocast's bf16 copies.

On CUDA one Triton kernel per parameter reads weight, remainder, gradient and moments once and writes them once
(26 bytes a weight); elsewhere, and if that kernel fails its check against the PyTorch version, the same
arithmetic runs as PyTorch operations.
"""

from __future__ import annotations

import logging

import torch

from ..words import say

log = logging.getLogger("zeroboard.train")

BLOCK = 2048
_MASK32 = 0xFFFFFFFF


# --- the split -----------------------------------------------------------------------------

def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An fp32 tensor as (its bf16 rounding, the int16 remainder of its bit pattern)."""
    b = x.contiguous().view(torch.int32).to(torch.int64) & _MASK32
    hi = (b + 0x8000) >> 16
    lo = (b - (hi << 16)).to(torch.int16)
    hi16 = ((hi & 0xFFFF) ^ 0x8000) - 0x8000  # as a signed 16-bit value, for the int16 view of bf16
    return hi16.to(torch.int16).view(torch.bfloat16).view_as(x), lo.view_as(x)


def join(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """The fp32 tensor whose split is (hi, lo)."""
    b = ((hi.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF) << 16) + lo.to(torch.int64)
    b = ((b & _MASK32) ^ 0x80000000) - 0x80000000  # back into int32's range
    return b.to(torch.int32).view(torch.float32).view_as(hi)


@torch.no_grad()
def split_model(model: torch.nn.Module) -> dict:
    """Turn the model's floating-point parameters into bf16 in place; return each trainable one's remainder.

    Buffers (RoPE's frequencies) keep their dtype, as when a bf16 checkpoint is loaded. A model loaded in fp32 keeps
    its exact fp32 values this way: the optimizer starts from the checkpoint's own master weights."""
    low: dict = {}
    for p in model.parameters():
        if not p.is_floating_point() or p.dtype == torch.bfloat16:
            continue
        hi, lo = split(p.data.float())
        p.data = hi
        if p.requires_grad:
            low[p] = lo
    return low


# --- AdamW on the rebuilt master -------------------------------------------------------------

def adamw_(x, g, m, v, step: float, lr: float, beta1: float, beta2: float, eps: float, wd: float) -> None:
    """One AdamW step on fp32 ``x`` in place, in the order torch.optim.AdamW's single-tensor path uses."""
    if wd != 0:
        x.mul_(1 - lr * wd)
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    step_size = lr / (1 - beta1**step)
    denom = (v.sqrt() / (1 - beta2**step) ** 0.5).add_(eps)
    x.addcdiv_(m, denom, value=-step_size)


def step_torch(w, lo, g, m, v, **hp) -> None:
    """The reference: rebuild the master, step it, split it back into the weight and its remainder."""
    x = join(w, lo)
    adamw_(x, g.float(), m, v, **hp)
    hi, new_lo = split(x)
    w.copy_(hi)
    lo.copy_(new_lo)


_kernel = None


def _triton_kernel():
    """The fused step, compiled on first use (None: Triton is not importable)."""
    global _kernel
    if _kernel is not None:
        return _kernel
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def split_adamw(w_ptr, lo_ptr, g_ptr, m_ptr, v_ptr, n, decay, one_minus_beta1, beta2, one_minus_beta2,
                    step_size, bc2_sqrt, eps, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        hi = tl.load(w_ptr + offs, mask=mask, other=0).to(tl.uint16, bitcast=True).to(tl.uint32)
        lo = tl.load(lo_ptr + offs, mask=mask, other=0).to(tl.int32).to(tl.uint32, bitcast=True)
        x = ((hi << 16) + lo).to(tl.float32, bitcast=True)
        g = tl.load(g_ptr + offs, mask=mask, other=0).to(tl.float32)
        m = tl.load(m_ptr + offs, mask=mask, other=0)
        v = tl.load(v_ptr + offs, mask=mask, other=0)
        x = x * decay
        m = m + one_minus_beta1 * (g - m)
        v = v * beta2
        v = v + one_minus_beta2 * g * g
        denom = tl.div_rn(tl.sqrt_rn(v), bc2_sqrt) + eps
        x = x - step_size * tl.div_rn(m, denom)
        b = x.to(tl.uint32, bitcast=True)
        new_hi = (b + 0x8000) >> 16
        new_lo = (b - (new_hi << 16)).to(tl.int32, bitcast=True).to(tl.int16)
        tl.store(w_ptr + offs, new_hi.to(tl.uint16).to(tl.int16, bitcast=True), mask=mask)
        tl.store(lo_ptr + offs, new_lo, mask=mask)
        tl.store(m_ptr + offs, m, mask=mask)
        tl.store(v_ptr + offs, v, mask=mask)

    def launch(w, lo, g, m, v, step, lr, beta1, beta2, eps, wd):
        n = w.numel()
        grid = (triton.cdiv(n, BLOCK),)
        split_adamw[grid](w.view(torch.int16), lo, g, m, v, n, 1 - lr * wd, 1 - beta1, beta2, 1 - beta2,
                          lr / (1 - beta1**step), (1 - beta2**step) ** 0.5, eps, BLOCK=BLOCK, num_warps=8)

    _kernel = launch
    return _kernel


def kernel_agrees(device, n: int = 3 * BLOCK + 17, seed: int = 0) -> bool:
    """The fused kernel against the PyTorch reference on random data: fp32 masters within 2 fp32 ulps, moments
    within 1e-6 of their largest value (the kernel may fuse a multiply-add that PyTorch rounds twice)."""
    kernel = _triton_kernel()
    if kernel is None:
        return False
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(n, generator=gen) * 0.02).to(device)
    g = (torch.randn(n, generator=gen) * 1e-3).to(device, torch.bfloat16)
    m0, v0 = (torch.randn(n, generator=gen) * 1e-4).to(device), (torch.rand(n, generator=gen) * 1e-6).to(device)
    hp = dict(step=3.0, lr=1e-5, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01)
    outs = []
    for fn in (step_torch, kernel):
        w, lo = split(x)
        m, v = m0.clone(), v0.clone()
        fn(w, lo, g, m, v, **hp)
        outs.append((join(w, lo), m, v))
    (xa, ma, va), (xb, mb, vb) = outs
    ulp = torch.finfo(torch.float32).eps * xa.abs().clamp_min(1e-30)
    close = lambda a, b: bool(((a - b).abs() <= 1e-6 * a.abs().max()).all())  # noqa: E731
    return bool(((xa - xb).abs() <= 2 * ulp).all()) and close(ma, mb) and close(va, vb)


class SplitAdamW(torch.optim.Optimizer):
    """AdamW for bf16 parameters whose fp32 master weights are kept exactly: the remainder of each (int16) and the
    moments (fp32) live in the optimizer's state, so a checkpoint's optimizer file holds the whole master copy.

    ``low_bits``: the remainders :func:`split_model` returned (the master weights a fp32 checkpoint had); a parameter
    without one starts from its bf16 value exactly."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 low_bits: dict | None = None, fused: bool | None = None):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self._low_bits = low_bits or {}
        self._fused = fused  # None: the Triton kernel on CUDA when it passes its check
        self.path = None  # "triton" or "torch", once the first step chose

    def _use_kernel(self, device) -> bool:
        if self._fused is None:
            self._fused = device.type == "cuda" and kernel_agrees(device)
            if device.type == "cuda" and not self._fused:
                log.warning("%s", say("train.weights_split_slow"))
        self.path = "triton" if self._fused else "torch"
        return self._fused

    def _state(self, p):
        st = self.state[p]
        if not st:
            lo = self._low_bits.pop(p, None)
            st["step"] = torch.tensor(0.0)
            st["low_bits"] = (lo.to(p.device) if lo is not None else torch.zeros_like(p, dtype=torch.int16))
            st["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            st["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        return st

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype != torch.bfloat16 or p.grad.is_sparse:
                    raise ValueError("SplitAdamW updates dense bf16 parameters only")
                st = self._state(p)
                st["step"] += 1
                hp = dict(step=float(st["step"]), lr=float(group["lr"]), beta1=beta1, beta2=beta2, eps=group["eps"],
                          wd=group["weight_decay"])
                args = (p.data, st["low_bits"], p.grad, st["exp_avg"], st["exp_avg_sq"])
                if p.is_contiguous() and p.grad.is_contiguous() and self._use_kernel(p.device):
                    _triton_kernel()(*args, **hp)
                else:
                    step_torch(*args, **hp)
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        """torch casts floating state to the parameter's dtype on load (bf16 here): put back the saved dtypes."""
        saved = {k: dict(v) for k, v in state_dict["state"].items()}
        super().load_state_dict(state_dict)
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in zip(ids, params):
            for key, value in saved.get(i, {}).items():
                if key != "step" and torch.is_tensor(value):
                    self.state[p][key] = value.to(p.device)

    def master(self, p) -> torch.Tensor:
        """The fp32 master weight of ``p`` (its bf16 value, exactly, before the first step)."""
        st = self.state.get(p)
        if st and "low_bits" in st:
            return join(p.data, st["low_bits"])
        lo = self._low_bits.get(p)
        return join(p.data, lo.to(p.device)) if lo is not None else p.data.float()
