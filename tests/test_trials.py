"""Speed changes on trial (training/trials.py): each keeps the numbers it claims to keep, on a tiny Llama, in process."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from zeroboard.training import trials  # noqa: E402


def lora_model(seed: int = 0, dropout: float = 0.0):
    """LoRA as the trainer builds it for bf16 without DeepSpeed: a bf16 base, fp32 adapters (peft's autocast dtype)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    base = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=128)).to(torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=dropout, target_modules="all-linear"))
    for n, p in model.named_parameters():
        if "lora_B" in n:  # as if trained a little: B starts at zero, which would hide a wrong A path
            torch.nn.init.normal_(p, std=0.02)
    return model


def loss_and_grads(model):
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def with_trials(monkeypatch, names: str, **kw):
    monkeypatch.setenv(trials.TRIAL_ENV, names)
    model = lora_model(**kw)
    applied = trials.apply(model, "lora", "bf16_base", "none")
    return model, applied


def test_no_input_cast_changes_no_number(monkeypatch):
    """Under autocast lora_A multiplies bf16 values either way: the loss and every adapter gradient are bit-equal."""
    loss, grads = loss_and_grads(lora_model())
    model, applied = with_trials(monkeypatch, "lora_nocast")
    assert applied == ["lora_nocast"]
    loss2, grads2 = loss_and_grads(model)
    assert torch.equal(loss, loss2)
    assert all(torch.equal(grads[n], grads2[n]) for n in grads)


def test_fused_a_computes_what_the_separate_matmuls_do(monkeypatch):
    """q/k/v and gate/up of each layer: one matmul each group; the loss and gradients agree to bf16 rounding (the
    fused matmul sums in another order: a gradient element may differ by an ulp or two of bf16, 0.8% each)."""
    loss, grads = loss_and_grads(lora_model())
    model, applied = with_trials(monkeypatch, "lora_nocast,lora_fused_a")
    assert applied == ["lora_nocast", "lora_fused_a (4 groups)"]
    loss2, grads2 = loss_and_grads(model)
    assert torch.allclose(loss, loss2, rtol=1e-3)
    worst = max(((grads[n] - grads2[n]).norm() / grads[n].norm()).item() for n in grads)
    assert worst < 0.01, worst


def test_fused_a_stays_off_where_it_would_not_hold(monkeypatch):
    """Dropout on the adapters (one mask each), ZeRO-3 (its hooks gather a module's weights when it is called)."""
    _, applied = with_trials(monkeypatch, "lora_fused_a", dropout=0.1)
    assert applied == ["lora_fused_a (0 groups)"]
    monkeypatch.setenv(trials.TRIAL_ENV, "lora_fused_a,lora_nocast")
    assert trials.apply(lora_model(), "lora", "deepspeed", "3") == []


def test_adapters_in_16_bit_only_under_deepspeed(monkeypatch):
    monkeypatch.setenv(trials.TRIAL_ENV, "lora_adapters_16bit")
    model = lora_model()
    assert trials.apply(model, "lora", "bf16_base", "none") == []
    assert trials.apply(model, "lora", "deepspeed", "3") == ["lora_adapters_16bit (torch.bfloat16)"]
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.bfloat16}


def test_off_unless_named_and_a_wrong_name_is_refused(monkeypatch):
    monkeypatch.delenv(trials.TRIAL_ENV, raising=False)
    assert trials.apply(lora_model(), "lora", "bf16_base", "none") == []
    monkeypatch.setenv(trials.TRIAL_ENV, "lora_nocats")
    with pytest.raises(ValueError, match="lora_nocats"):
        trials.apply(lora_model(), "lora", "bf16_base", "none")
