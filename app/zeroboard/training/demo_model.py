"""The built-in offline models: a tokenizer trained on the demo data, a tiny Llama-style model and the lesson's.

No hub, no GPU: ``build_demo_model`` trains a byte-level BPE tokenizer on the
demo text and saves a small Llama-style model with a chat template, after a
short pretraining pass so that a LoRA run visibly teaches it who it is.
``build_lesson_model`` saves a larger Llama of the same tokenizer, untrained,
for the ZeRO lesson (``examples/lesson_zero.yaml``): full fine-tuning on two
CPU processes where the model states, not the runtime, make the peak.
Needs torch and transformers: the trainer or the CLI run it, never the web server.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path

from ..data import convert
from ..data.demo import write_demo_data
from ..job import devices
from ..job.spec import LESSON_MODEL, JobSpec
from ..words import say

log = logging.getLogger("zeroboard.train")  # the trainer's log, where a run builds the model
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
# The lesson's Llama: 104 M parameters, 16 bytes each under AdamW in fp32 (weights, gradients, two moments) -- 1.6 GiB
# per process unsplit against the ~0.5 GiB of Python, torch and DeepSpeed, so that the stages' savings show in each
# process's peak on two CPU processes (benchmarks/lesson_stages.py); a step takes seconds on one core.
LESSON_SIZES = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                    num_key_value_heads=16)


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

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(threads, devices.idle_cores())))  # one thread or two: the same bytes
    try:
        return _pretrain(model, tokenizer, data_dir, steps, seed)
    finally:
        torch.set_num_threads(threads)  # a rank that built the model trains with its own


def _pretrain(model, tokenizer, data_dir: Path, steps: int, seed: int) -> float:
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
    return float(loss.detach())


def train_tokenizer(data_dir: Path):
    """The demo's byte-level BPE tokenizer, trained on the demo text (the same text gives the same tokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=768, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(data_dir), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>",
                                        model_max_length=512)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def llama(tokenizer, seed: int, **sizes):
    """A randomly initialised Llama of these sizes for this tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=512, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         **sizes)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save(model, tokenizer, out: Path, built_by: str, seed: int) -> Path:
    """Saved beside the folder, then moved into place: a half-written model never sits at ``out``."""
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "zeroboard_demo.json").write_text(json.dumps({"built_by": built_by, "seed": seed}) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.replace(out)
    return out


def build_demo_model(model_dir: str | Path, data_dir: str | Path, seed: int = 0) -> Path:
    """Train a tokenizer on the demo data and save a tiny Llama next to it, pretrained on the demo data."""
    data_dir = write_demo_data(data_dir)
    tokenizer = train_tokenizer(data_dir)
    model = llama(tokenizer, seed, hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)
    pretrain(model, tokenizer, data_dir)
    return save(model, tokenizer, Path(model_dir), "zeroboard demo-model", seed)


def build_lesson_model(model_dir: str | Path, data_dir: str | Path, seed: int = 0) -> Path:
    """The ZeRO lesson's model: the demo's tokenizer and a Llama of LESSON_SIZES, untrained (the lesson is memory)."""
    data_dir = write_demo_data(data_dir)
    tokenizer = train_tokenizer(data_dir)
    return save(llama(tokenizer, seed, **LESSON_SIZES), tokenizer, Path(model_dir), "zeroboard demo-model --lesson", seed)


def ensure_demo_model(model_dir: str | Path, data_dir: str | Path) -> Path:
    """The built-in model at ``model_dir`` (the demo's or the lesson's), built now when it is missing."""
    out = Path(model_dir)
    if not (out / "config.json").is_file():
        lesson = out.resolve() == Path(LESSON_MODEL).resolve()
        (build_lesson_model if lesson else build_demo_model)(out, data_dir)
    return out


def wait_for_built_model(job: JobSpec, rank: int, timeout: float = 600) -> None:
    """In a run on a built-in model: rank 0 builds it if it is missing (the run's supervisor then plans the run on it:
    at launch the planner found no config.json to read); the other ranks wait for it."""
    model_dir = Path(job.model_name_or_path)
    if rank == 0:
        if not (model_dir / "config.json").is_file():
            log.info("building the demo model in %s", model_dir)
            ensure_demo_model(model_dir, job.dataset_dir)
        return
    deadline = time.time() + timeout
    while not (model_dir / "config.json").is_file():
        if time.time() > deadline:
            raise RuntimeError(say("train.demo_model_wait", path=str(model_dir), seconds=round(timeout)))
        time.sleep(0.5)
