"""Sequence packing: samples share a row but never see each other.

The packed batch goes through the trainer's own collator into a real (tiny,
random) Llama; each sample's logits must equal those of the sample run alone.
"""

from __future__ import annotations

import pytest

from zeroboard.training import templates
from zeroboard.training.callbacks import TokenCounter
from zeroboard.training.packing import pack


def sample(n: int, start: int, prompt: int = 2) -> dict:
    ids = list(range(start, start + n))
    return {"input_ids": ids, "labels": [templates.IGNORE] * prompt + ids[prompt:]}


def test_pack_fills_rows_and_keeps_samples_whole():
    rows = [sample(n, 10 * i + 3) for i, n in enumerate([7, 3, 5, 9, 2, 6])]
    packed = pack(rows, 10)
    assert all(len(r["input_ids"]) <= 10 for r in packed)
    assert len(packed) == 4  # 32 tokens, first fit decreasing: 9 | 7+3 | 6+2 | 5
    segments = []
    for r in packed:
        starts = [i for i, p in enumerate(r["position_ids"]) if p == 0]
        for a, b in zip(starts, starts[1:] + [len(r["input_ids"])]):
            assert r["position_ids"][a:b] == list(range(b - a))
            assert r["labels"][a] == templates.IGNORE  # never predicted from the previous sample
            segments.append(r["input_ids"][a:b])
    assert sorted(map(tuple, segments)) == sorted(tuple(r["input_ids"]) for r in rows)


def test_the_packed_loss_is_the_mean_of_the_samples_losses():
    """No sample's first token is predicted from the previous sample (samples with no prompt make it count)."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).train()
    rows = [sample(n, 7 * i + 3, prompt=0) for i, n in enumerate([8, 5, 6, 4, 3])]
    batch = TokenCounter(pad_id=0)(pack(rows, 12))
    with torch.no_grad():
        packed = model(**batch).loss
        sums, count = 0.0, 0
        for r in rows:  # each sample alone: the mean over its n - 1 predicted tokens
            n = len(r["input_ids"]) - 1
            sums += model(input_ids=torch.tensor([r["input_ids"]]), labels=torch.tensor([r["labels"]])).loss * n
            count += n
    torch.testing.assert_close(packed, sums / count, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_samples_do_not_attend_to_each_other(attn):
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation=attn)
    model = LlamaForCausalLM(cfg).train()  # as in training: no dropout here, but a KV cache by default
    rows = [sample(n, 5 * i + 4) for i, n in enumerate([9, 4, 6, 5, 3])]
    packed = pack(rows, 12)
    batch = TokenCounter(pad_id=0)(packed)
    assert "attention_mask" not in batch and batch["position_ids"].shape == batch["input_ids"].shape
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        for b, r in enumerate(packed):
            starts = [i for i, p in enumerate(r["position_ids"]) if p == 0] + [len(r["input_ids"])]
            for a, e in zip(starts, starts[1:]):
                alone = model(input_ids=torch.tensor([r["input_ids"][a:e]])).logits[0]
                torch.testing.assert_close(logits[b, a:e], alone, atol=1e-5, rtol=1e-4)
