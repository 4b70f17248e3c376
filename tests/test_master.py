"""The new default's numerics: bf16 weights whose fp32 master weights live on as (bf16 weight, int16 remainder).

Tolerance 0: the split's master weights are compared with an fp32 master copy bit for bit, on a tiny Llama, for the
same gradients; torch.optim.AdamW (single-tensor path) is the reference. The GPU's fused kernel is checked against the
same PyTorch arithmetic in training/master.py at its first step (kernel_agrees); on CPU the PyTorch path runs.
"""

from __future__ import annotations

import pytest
import torch

from zeroboard.training import master


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def test_the_split_loses_no_bit_and_rounds_to_the_nearest_bf16():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(50_000, generator=g) * 0.02, torch.randn(1000, generator=g) * 1e3,
                   torch.randn(1000, generator=g) * 1e-30,  # subnormal and tiny
                   torch.tensor([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 3.0e38, -3.0e38])])
    hi, lo = master.split(x)
    assert hi.dtype == torch.bfloat16 and lo.dtype == torch.int16
    assert torch.equal(bits(master.join(hi, lo)), bits(x))
    nearest = (x.to(torch.bfloat16).float() - x).abs()  # torch rounds to nearest, ties to even
    assert bool(((hi.float() - x).abs() <= nearest).all())  # never farther than that (ties go away from zero)


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).float()


def groups(model, wd: float) -> list[dict]:
    """Decay and no-decay groups, as the Trainer builds them (norms without weight decay)."""
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if "norm" not in n], "weight_decay": wd},
            {"params": [p for n, p in named if "norm" in n], "weight_decay": 0.0}]


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_updates_equal_an_fp32_master_copy_bit_for_bit(wd):
    ref, mine = tiny_llama(), tiny_llama()
    low = master.split_model(mine)
    assert all(p.dtype == torch.bfloat16 for p in mine.parameters())
    assert mine.model.rotary_emb.inv_freq.dtype == torch.float32  # buffers keep their dtype
    opt_ref = torch.optim.AdamW(groups(ref, wd), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=False, fused=False)
    opt = master.SplitAdamW(groups(mine, wd), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, low_bits=low)
    g = torch.Generator().manual_seed(1)
    for _ in range(25):
        for p_ref, p in zip(ref.parameters(), mine.parameters()):
            grad = (torch.randn(p.shape, generator=g) * 1e-3).to(torch.bfloat16)  # a bf16 model's gradients are bf16
            p_ref.grad, p.grad = grad.float(), grad
        opt_ref.step()
        opt.step()
    assert opt.path == "torch"
    for p_ref, p in zip(ref.parameters(), mine.parameters()):
        assert torch.equal(bits(opt.master(p)), bits(p_ref.data))  # the master copy, exactly
        assert torch.equal(p.data, master.split(p_ref.data)[0])  # the model computes with its rounding


def test_pure_bf16_loses_the_updates_the_split_keeps():
    """What the remainder is for: 1e-5 steps on weights near 1 vanish in bf16 (its step there is 2^-7)."""
    w32 = torch.ones(1000)
    pure = torch.nn.Parameter(w32.to(torch.bfloat16))
    split = torch.nn.Parameter(w32.clone())
    low = master.split_model(torch.nn.ParameterList([split]))
    sgd_like = dict(lr=1e-5, betas=(0.0, 0.0), eps=0.0)  # every step moves each weight by lr
    opt_pure = torch.optim.AdamW([pure], weight_decay=0.0, foreach=False, **sgd_like)
    opt = master.SplitAdamW([split], low_bits=low, **sgd_like)
    for _ in range(100):
        pure.grad = torch.full_like(pure, -1.0)
        split.grad = torch.full_like(split, -1.0, dtype=torch.bfloat16)
        opt_pure.step()
        opt.step()
    assert torch.equal(pure.data.float(), w32)  # 100 steps of 1e-5: nothing moved
    moved = opt.master(split) - w32
    assert torch.allclose(moved, torch.full_like(moved, 100 * 1e-5), rtol=1e-2)  # the master moved by 1e-3 (fp32 sums)


def test_a_checkpoint_restores_the_master_copy_and_its_dtypes():
    model = tiny_llama()
    opt = master.SplitAdamW(model.parameters(), lr=1e-3, low_bits=master.split_model(model))
    for p in model.parameters():
        p.grad = torch.randn(p.shape).to(torch.bfloat16) * 1e-2
    opt.step()
    saved = opt.state_dict()
    again = master.SplitAdamW(model.parameters(), lr=1e-3)
    again.load_state_dict(saved)
    for p in model.parameters():
        st = again.state[p]
        assert st["low_bits"].dtype == torch.int16 and st["exp_avg"].dtype == torch.float32  # torch would cast to bf16
        assert torch.equal(bits(again.master(p)), bits(opt.master(p)))


def test_the_fused_kernel_is_only_used_after_its_check(monkeypatch):
    """No Triton here: kernel_agrees says so, and the optimizer keeps the PyTorch path."""
    monkeypatch.setattr(master, "_triton_kernel", lambda: None)
    assert master.kernel_agrees(torch.device("cpu")) is False
