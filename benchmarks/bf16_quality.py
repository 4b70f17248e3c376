"""Issue 26: do the split master weights (the new default) train as fp32 master weights do? Two (or three) runs.

A real text corpus that Python itself ships (``pydoc_data.topics``: the language reference's help topics, ~0.46 MB of
English), a byte-level BPE tokenizer trained on it here, a random-init Llama of ~82 M parameters (hidden 768, 12
layers, GQA 12/4 heads, MLP 2048, vocabulary 4096) saved in fp32. Each run is ZeroBoard's trainer (the argv `zeroboard
train` would start, launched directly so the runs can share the GPU): same data, same seed, 500 steps of 16 x 128
tokens, AdamW lr 1e-4 cosine with 25 warm-up steps, weight decay 0.01, the loss logged every 10 steps.

- ``fp32``: ``master_weights: fp32`` (fp32 weights + bf16 autocast: the old default);
- ``split``: ``master_weights: split`` (bf16 weights, the optimizer keeps each master weight's low 16 bits);
- ``pure_bf16``: for scale, what the master copy protects against.

Each run saves a checkpoint at its last step; the split run's master weights are rebuilt from its bf16 weights and
the remainders in its optimizer state, and compared with the fp32 run's weights (relative L2 distance).

    python benchmarks/bf16_quality.py --out $OUT/bf16_quality.json [--steps 500]
    python benchmarks/bf16_quality.py --tiny --out /tmp/q.json     # CPU, a few steps: checks the harness
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

from zeroboard.job import command, devices, record as events, spec as specmod  # noqa: E402

SHAPE = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
             vocab_size=4096)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=512)
RUNS = {"fp32": {"master_weights": "fp32"}, "split": {"master_weights": "split"}, "pure_bf16": {"pure_bf16": True}}


def corpus() -> str:
    import pydoc_data.topics as topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def make_model(folder: Path, shape: dict, text: str) -> None:
    """A BPE tokenizer trained on the corpus and a random-init Llama, saved in fp32."""
    if (folder / "config.json").is_file():
        return
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from zeroboard.training.demo_model import CHAT_TEMPLATE, SPECIAL_TOKENS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=shape["vocab_size"], special_tokens=list(SPECIAL_TOKENS),
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(**shape, max_position_embeddings=1024, tie_word_embeddings=False, pad_token_id=0, eos_token_id=1,
                      bos_token_id=None)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).float().save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def make_data(path: Path, text: str, words_per_sample: int = 90) -> int:
    """Alpaca records cut from the corpus in order: the first 8 words are the (masked) prompt, the rest is learned."""
    words = text.split()
    rows = []
    for i in range(0, len(words) - words_per_sample, words_per_sample):
        chunk = words[i:i + words_per_sample]
        rows.append({"instruction": " ".join(chunk[:8]), "input": "", "output": " ".join(chunk[8:])})
    path.write_text(json.dumps(rows))
    return len(rows)


def job(model: Path, data: Path, out: Path, changes: dict, a) -> specmod.JobSpec:
    return specmod.JobSpec(model_name_or_path=str(model), finetuning_type="full", dataset_dir=str(data.parent),
                           dataset=[str(data)], cutoff_len=a.seq, learning_rate=1e-4, max_steps=a.steps,
                           per_device_train_batch_size=a.batch, lr_scheduler_type="cosine", warmup_steps=25,
                           weight_decay=0.01, logging_steps=10, save_steps=a.steps, seed=42, precision="bf16",
                           output_dir=str(out), device_type="cpu" if a.tiny else "cuda", num_processes=1, **changes)


def start(spec: specmod.JobSpec, log: Path, port: int) -> subprocess.Popen:
    """The argv `zeroboard train` runs, started directly (several runs share the GPU; the runner allows one a device)."""
    spec.master_port = port
    prepared = command.check_and_build(spec, devices.detect_gpus())
    if prepared.command is None:
        raise SystemExit(f"{spec.output_dir}: {dict(prepared.report.errors)}")
    cmd = prepared.command
    Path(spec.output_dir).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(cmd.argv, env=cmd.full_env(), cwd=cmd.cwd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def curve(run: Path) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events.read_events(run / events.EVENTS_FILE) if e["event"] == "log"}


def masters(run: Path, kind: str) -> dict:
    """The run's fp32 master weights at its last checkpoint (split: bf16 weights joined with the saved remainders)."""
    import torch
    from safetensors.torch import load_file

    from zeroboard.training import master

    ckpt = max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    weights = {}
    for f in ckpt.glob("model*.safetensors"):
        weights.update(load_file(f))
    if kind != "split":
        return {k: v.float() for k, v in weights.items()}
    opt = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=False)
    # the optimizer's parameter order is the model's named_parameters order the Trainer grouped (decay, then no decay)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run, dtype=torch.bfloat16)
    names = [n for n, _ in model.named_parameters()]
    decay = [n for n in names if "norm" not in n and not n.endswith("bias")]
    order = decay + [n for n in names if n not in decay]
    low = {order[i]: st["low_bits"] for i, st in opt["state"].items()}
    return {k: master.join(v, low[k]) if k in low else v.float() for k, v in weights.items()}


def distance(a: dict, b: dict) -> dict:
    import torch

    num = sum(float(torch.sum((a[k] - b[k]).double() ** 2)) for k in b)
    den = sum(float(torch.sum(b[k].double() ** 2)) for k in b)
    worst = max(b, key=lambda k: float(torch.norm((a[k] - b[k]).double()) / torch.norm(b[k].double())))
    return {"relative_l2": (num / den) ** 0.5, "worst_tensor": worst,
            "worst_relative_l2": float(torch.norm((a[worst] - b[worst]).double()) / torch.norm(b[worst].double()))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--runs", default="fp32,split,pure_bf16")
    ap.add_argument("--workdir", default="/tmp/zb-quality")
    ap.add_argument("--timeout-s", type=float, default=240)
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args()
    if a.tiny:
        a.steps, a.seq, a.batch = min(a.steps, 20), 64, 4
    work = Path(a.workdir)
    from zeroboard import workspace

    workspace.allow([f"{work}:rw"])
    text = corpus()
    model, data = work / "model", work / "data" / "corpus.json"
    data.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    make_model(model, TINY if a.tiny else SHAPE, text)
    n = make_data(data, text)
    names = [r for r in a.runs.split(",") if r]
    procs = {}
    for i, name in enumerate(names):  # side by side on one GPU: the runs are small and timing is not measured here
        out = work / f"run-{name}-{int(time.time())}"
        procs[name] = (out, start(job(model, data, out, RUNS[name], a), work / f"{name}.log", 29600 + i))
    for _, p in procs.values():
        try:
            p.wait(max(1.0, a.timeout_s - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
    logs = {name: (work / f"{name}.log").read_text(errors="replace") for name in procs}
    errors = {name: logs[name][-1500:] for name, (_, p) in procs.items() if p.returncode}
    curves = {name: curve(out) for name, (out, _) in procs.items() if (out / events.EVENTS_FILE).is_file()}
    ref = curves.get("fp32", {})
    result = {"corpus": {"source": "pydoc_data.topics (Python " + sys.version.split()[0] + ")", "chars": len(text),
                         "sha256": hashlib.sha256(text.encode()).hexdigest(), "samples": n},
              "model": {**(TINY if a.tiny else SHAPE), "init": "random, seed 0, saved fp32"},
              "training": {"steps": a.steps, "micro_batch": a.batch, "seq": a.seq, "lr": 1e-4, "scheduler": "cosine",
                           "warmup_steps": 25, "weight_decay": 0.01, "seed": 42, "logging_steps": 10},
              "curves": {k: {str(s): v for s, v in c.items()} for k, c in curves.items()},
              "exit": {name: p.returncode for name, (_, p) in procs.items()}, "errors": errors,
              "seconds": time.time() - t0}
    for name, c in curves.items():
        if name == "fp32" or not ref:
            continue
        common = sorted(set(c) & set(ref))
        rel = [abs(c[s] - ref[s]) / abs(ref[s]) for s in common]
        result[f"max_rel_loss_diff_{name}"] = max(rel) if rel else None
        result[f"logged_steps_{name}"] = len(common)
    result["max_rel_loss_diff"] = result.get("max_rel_loss_diff_split")
    try:
        ref_w = masters(procs["fp32"][0], "fp32")
        result["weight_distance"] = {name: distance(masters(out, name), ref_w) for name, (out, _) in procs.items()
                                     if name != "fp32"}
    except Exception as e:  # report, keep the curves
        result["weight_distance_error"] = f"{type(e).__name__}: {e}"
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "curves"}, indent=1))


if __name__ == "__main__":
    main()
