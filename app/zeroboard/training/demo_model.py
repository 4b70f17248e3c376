"""The built-in offline demo's model: a tokenizer trained on the demo data and a tiny Llama-style model.

No hub, no GPU: ``build_demo_model`` trains a byte-level BPE tokenizer on the
demo text and saves a small Llama-style model with a chat template, after a
short pretraining pass so that a LoRA run visibly teaches it who it is.
Needs torch and transformers: the trainer or the CLI run it, never the web server.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from ..data import convert
from ..data.demo import write_demo_data

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]


def _corpus(data_dir: Path) -> list[str]:
    texts = []
    for name in ("identity", "demo_alpaca", "demo_sharegpt"):
        for conv in convert.load([name], data_dir):
            texts += [m["content"] for m in conv]
    return texts


def pretrain(model, tokenizer, data_dir: Path, steps: int = 600, seed: int = 0) -> float:
    """A short causal-LM pass over the general demo data (not the identity set).

    A random model would have to learn the chat format and the language from
    scratch during the user's LoRA run; this gives it a "base model" that already
    answers the demo questions its own way, so a short LoRA run visibly teaches
    it who it is, as with a real model.
    """
    import torch

    texts = [tokenizer.apply_chat_template(c, tokenize=False)
             for c in convert.load(["demo_alpaca", "demo_sharegpt"], data_dir)]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"][:96] for t in texts]
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        batch = rng.sample(ids, 16)
        width = max(map(len, batch))
        x = torch.full((len(batch), width), tokenizer.pad_token_id)
        y = torch.full((len(batch), width), -100)
        for i, row in enumerate(batch):
            x[i, : len(row)] = torch.tensor(row)
            y[i, : len(row)] = torch.tensor(row)
        loss = model(input_ids=x, attention_mask=(y != -100).long(), labels=y).loss
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    model.eval()
    return float(loss)


def build_demo_model(model_dir: str | Path, data_dir: str | Path, seed: int = 0) -> Path:
    """Train a tokenizer on the demo data and save a random tiny Llama next to it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(model_dir)
    data_dir = write_demo_data(data_dir)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=768, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(data_dir), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>",
                                        model_max_length=512)
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=352, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    pretrain(model, tokenizer, data_dir)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "zeroboard_demo.json").write_text(json.dumps({"built_by": "zeroboard demo-model", "seed": seed}) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.replace(out)
    return out


def ensure_demo_model(model_dir: str | Path, data_dir: str | Path) -> Path:
    out = Path(model_dir)
    if not (out / "config.json").is_file():
        build_demo_model(out, data_dir)
    return out
