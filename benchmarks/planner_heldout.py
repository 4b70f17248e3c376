"""The planner against measured peaks: a calibration set and a held-out set of models it was not tuned on.

    python benchmarks/planner_heldout.py --set calibration --out benchmarks/results/planner_calibration.json
    python benchmarks/planner_heldout.py --set heldout --out benchmarks/results/planner_heldout.json
    python benchmarks/planner_heldout.py --recompute benchmarks/results/planner_heldout.json   # CPU: estimates only
    python benchmarks/planner_heldout.py --nvml-overhead        # GPU: step time with the trainer's NVML thread on/off
    python benchmarks/planner_heldout.py --tiny --out /tmp/t.json   # the same harness on CPU, tiny shapes

Models are random-initialised from config dicts with the real vocabularies and head layouts of their
families (no download), each with a word-level tokenizer of the same vocabulary. Every run goes through
``zeroboard.job.command.check_and_build`` (the argv ``zeroboard train`` and the page start, without the
memory verdict of ``prepare_launch``: the planner is what is measured here) and
``zeroboard.training.train``; a small probe (this file, ``--rank-probe``) wraps the trainer to note the
allocator peak after each forward pass and each step. Several runs share the GPU when the planner says
they fit together: memory is per process (torch's own counters, NVML's per-process table), so sharing
changes step times, not peaks; a run that fails for memory is run again alone.

Each row: family, model, config, seq, micro_batch, estimate_gib (the planner's allocator peak),
torch_peak_gib (measured), needed_gib (the planner's "needed free"), nvml_peak_gib (NVML's figure for the
rank process, read every 50 ms by this harness), nvml_peak_trainer_gib (what the trainer's own sampler
reported in events.jsonl), error = estimate/torch - 1, needed_error = needed/nvml - 1.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
GIB = 1 << 30
sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout_sets as hsets  # noqa: E402 - the fourth set's tables

# --- the models: real layouts of their families -------------------------------------------------------
MODELS = {
    # calibration
    "tinyllama-1.1b": ("llama2", dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                      num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                                      tie_word_embeddings=False)),
    "smollm2-360m": ("smollm2", dict(model_type="llama", hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                                     num_attention_heads=15, num_key_value_heads=5, vocab_size=49152,
                                     tie_word_embeddings=True)),
    "qwen3-0.6b": ("qwen3", dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                 tie_word_embeddings=True)),
    # calibration, added to measure ZeRO-2's and ZeRO-3's per-stream pools (--set pools): a larger Qwen3, and a
    # Gemma-3 text model whose embedding (671 M elements) is larger than DeepSpeed's reduce bucket
    "qwen3-1.7b": ("qwen3", dict(model_type="qwen3", hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                 tie_word_embeddings=True)),
    "gemma3-4b": ("gemma3", dict(model_type="gemma3_text", hidden_size=2560, intermediate_size=10240,
                                 num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                 vocab_size=262208, query_pre_attn_scalar=256, sliding_window=1024,
                                 hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)),
    # held out
    "qwen2.5-0.5b": ("qwen2", dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                   tie_word_embeddings=True)),
    "qwen2.5-1.5b": ("qwen2", dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                   num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                                   tie_word_embeddings=True)),
    "llama3.2-1b": ("llama3", dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                                   tie_word_embeddings=True, rope_theta=500000.0)),
    "llama3.2-3b": ("llama3", dict(model_type="llama", hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                                   num_attention_heads=24, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                                   tie_word_embeddings=True, rope_theta=500000.0)),
    "gemma-2b": ("gemma", dict(model_type="gemma", hidden_size=2048, intermediate_size=16384, num_hidden_layers=18,
                               num_attention_heads=8, num_key_value_heads=1, head_dim=256, vocab_size=256000,
                               hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)),
    # second held-out set (heldout2): measured sealed, after the planner's layout terms were fitted to the first
    "qwen2.5-3b": ("qwen2", dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                                 num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                                 tie_word_embeddings=True)),
    "phi3-mini": ("phi3", dict(model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                               num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
                               tie_word_embeddings=False)),
    "smollm2-1.7b": ("smollm2", dict(model_type="llama", hidden_size=2048, intermediate_size=8192,
                                     num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=32,
                                     vocab_size=49152, tie_word_embeddings=True)),
    "gemma2-2b": ("gemma2", dict(model_type="gemma2", hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                                 num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
                                 query_pre_attn_scalar=256, sliding_window=4096, final_logit_softcapping=30.0,
                                 attn_logit_softcapping=50.0, hidden_activation="gelu_pytorch_tanh",
                                 tie_word_embeddings=True)),
    "mistral-7b": ("mistral", dict(model_type="mistral", hidden_size=4096, intermediate_size=14336,
                                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                   vocab_size=32768, tie_word_embeddings=False, sliding_window=None)),
}
MODELS.update(hsets.MODELS4)
MODELS.update(hsets.MODELS5)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=8192, head_dim=16)  # room for the byte-level word vocabulary (word_bpe: ~4,000 tokens)


def _rows(spec: str) -> list[tuple[str, int, int, str]]:
    """'model seq mbs cfg cfg ...' lines -> (model, seq, micro_batch, config)."""
    out = []
    for line in spec.strip().splitlines():
        model, seq, mbs, *cfgs = line.split()
        out += [(model, int(seq), int(mbs), c) for c in cfgs]
    return out


# config names: full|lora - none|2|3 [+off] [+ckpt] [+nolig] [+fixedseg] [+gaN: gradient accumulation N]
# The 1.1 B Llama (32k vocabulary) of benchmarks/results/h200*.json and planner_h200_matrix.json is calibration too.
CALIBRATION = _rows("""
tinyllama-1.1b 1024 8 full-3 full-2 full-none full-none+fixedseg
smollm2-360m 2048 4 full-none full-3 lora-3 full-none+nolig
qwen3-0.6b 2048 4 full-2 full-3+off full-2+ckpt
qwen3-0.6b 4096 1 lora-none+ckpt
""")
HELDOUT = _rows("""
qwen2.5-0.5b 1024 8 full-none full-2 full-3 lora-none full-none+ckpt full-2+off
qwen2.5-0.5b 4096 2 full-none full-3+off lora-2 full-2+ckpt
qwen2.5-1.5b 1024 4 full-2 lora-3 full-3
qwen2.5-1.5b 4096 1 full-none lora-none+ckpt full-2+off
llama3.2-1b 1024 8 full-none full-2 lora-2+off full-3
llama3.2-1b 4096 2 full-none+ckpt lora-none full-3+off
llama3.2-3b 1024 4 full-none lora-none full-3
llama3.2-3b 4096 1 full-2+ckpt lora-2
gemma-2b 1024 4 full-none full-2 lora-none full-3
gemma-2b 4096 2 lora-2+ckpt full-none+ckpt full-3+off
""")
# models, sizes and layouts none of the sets above has: measured sealed (--sealed heldout2), estimates filled after
HELDOUT2 = _rows("""
qwen2.5-3b 1024 4 full-2 full-3+off
qwen2.5-3b 4096 1 full-2+ckpt lora-none
phi3-mini 1024 4 full-2 lora-2
phi3-mini 4096 2 lora-3+off full-none+ckpt
smollm2-1.7b 2048 4 full-2 full-3+off full-3 lora-3
gemma2-2b 1024 4 full-2 full-3+off lora-none
mistral-7b 1024 4 lora-2
mistral-7b 4096 1 lora-none+ckpt
""")
# after the second set showed Gemma 2's eager attention and Phi-3's fused projections: other settings of those
# models, and a 7 B model under ZeRO-3 + offload: measured sealed (--sealed heldout3) before the fix was written
HELDOUT3 = _rows("""
gemma2-2b 2048 2 full-none+ckpt full-3
gemma2-2b 1024 2 lora-2
phi3-mini 2048 2 lora-none lora-3
mistral-7b 2048 2 lora-3+off
""")
# allocator histories of held-out rows the planner had put too low (or far too high): --set traces
TRACES = _rows("""
qwen2.5-1.5b 1024 4 full-2
gemma-2b 1024 4 full-2
llama3.2-1b 4096 2 full-3+off
phi3-mini 1024 4 lora-2
""")
# calibration runs that record the allocator's history (steps 2-3) and each CUDA stream's pool: --set pools
POOLS = _rows("""
tinyllama-1.1b 1024 8 full-2
qwen3-0.6b 2048 4 full-2 full-2+ckpt
qwen3-1.7b 1024 4 full-2 full-2+off
gemma3-4b 1024 1 full-2
tinyllama-1.1b 4096 2 full-3+off
qwen3-0.6b 4096 2 full-3+off
""")
TINY_ROWS = _rows("""
tinyllama-1.1b 64 2 full-none lora-2 full-3+ckpt
qwen2.5-0.5b 64 1 full-2
starcoder-1b 64 2 full-none+ga2 lora-2+ga2
phi-2 64 1 full-3+ga2
ministral-3b 64 1 lora-none
smollm3-3b 64 2 full-2
""")


def parse_config(cfg: str) -> dict:
    head, *flags = cfg.split("+")
    ft, stage = head.split("-")
    return {"finetuning_type": ft, "deepspeed_stage": stage, "offload": "off" in flags,
            "gradient_checkpointing": "ckpt" in flags, "liger_kernel": "off" if "nolig" in flags else "auto",
            "fixed_segments": "fixedseg" in flags,
            "accumulation": next((int(f[2:]) for f in flags if f.startswith("ga")), 1)}


# --- model and data (on the GPU machine, no download) -----------------------------------------------

def make_model(folder: Path, cfg: dict, seq: int) -> None:
    """Random-init model of ``cfg`` in bf16 + a word-level tokenizer of its vocabulary, with a chat template."""
    if (folder / "config.json").is_file():
        return
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from zeroboard.training.demo_model import CHAT_TEMPLATE, SPECIAL_TOKENS

    if cfg["model_type"] in WORD_BPE_TYPES:
        tok = word_bpe(SPECIAL_TOKENS)
    else:
        vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
        vocab.update({f"w{i}": len(SPECIAL_TOKENS) + i for i in range(cfg["vocab_size"] - len(SPECIAL_TOKENS))})
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<|pad|>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    hf = AutoConfig.for_model(cfg["model_type"], **kw, max_position_embeddings=max(seq, 8192), pad_token_id=0,
                              eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


# transformers loads its own tokenizer class for these model types whatever the folder names (qwen2: Qwen2Tokenizer,
# a byte-level BPE with Qwen's split rule), and a word-level vocabulary does not survive that (every sample of the
# first held-out run was 2 tokens long): their models get a byte-level BPE in which each " word" is one token
WORD_BPE_TYPES = {"qwen2"}
BPE_WORDS = [a + b + c for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz" for c in "aeiou"]


def word_bpe(special: list[str]):
    """A byte-level BPE whose merges make each of BPE_WORDS, after a space, a single token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(special)}
    for ch in sorted(alphabet):
        vocab.setdefault(ch, len(vocab))
    merges = []
    for w in BPE_WORDS:
        piece = "Ġ"
        for ch in w:
            if piece + ch not in vocab:
                merges.append((piece, ch))
                vocab[piece + ch] = len(vocab)
            piece += ch
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def make_data(path: Path, model_dir: Path, vocab: int, seq: int, n: int = 256) -> None:
    """Samples of ``seq - k`` tokens, k = 0..6 in turn: a micro-batch of several is padded (its attention carries a
    mask) and its longest row is within 6 tokens of the cutoff; a micro-batch of one is never padded."""
    if path.is_file():
        return
    from transformers import AutoTokenizer

    from zeroboard.training import templates

    tok = AutoTokenizer.from_pretrained(model_dir)  # it carries the chat template (templates.encode renders with it)
    rng = random.Random(0)
    bpe = json.loads((model_dir / "config.json").read_text()).get("model_type") in WORD_BPE_TYPES
    pick = (lambda: rng.choice(BPE_WORDS)) if bpe else (lambda: f"w{rng.randrange(vocab - 8)}")  # noqa: E731
    words = lambda k: " ".join(pick() for _ in range(k))  # noqa: E731
    probe = {"instruction": words(8), "input": "", "output": words(10)}
    conv = [{"role": "user", "content": probe["instruction"]}, {"role": "assistant", "content": probe["output"]}]
    overhead = len(templates.encode(conv, tok, 10 * seq)["input_ids"]) - 10
    recs = [{"instruction": words(8), "input": "", "output": words(seq - overhead - i % 7)} for i in range(n)]
    # transformers replaces the tokenizer class of some model types (qwen2: Qwen2Tokenizer), which drops this
    # word-level vocabulary and made every sample 2 tokens long in the first held-out run: check the lengths
    conv = [{"role": "user", "content": recs[0]["instruction"]}, {"role": "assistant", "content": recs[0]["output"]}]
    got = len(templates.encode(conv, tok, 10 * seq)["input_ids"])
    if got != seq:
        raise SystemExit(f"{model_dir.name}: a sample meant to be {seq} tokens is {got} with {type(tok).__name__}")
    path.write_text(json.dumps(recs))


def prepare_models(names: list[str], work: Path, seqs: dict[str, list[int]], tiny: bool) -> None:
    for name in names:
        cfg = {**MODELS[name][1], **(TINY if tiny else {})}
        if "layer_types" in cfg:  # one entry a layer
            cfg["layer_types"] = cfg["layer_types"][: cfg["num_hidden_layers"]]
        make_model(work / "models" / name, cfg, max(seqs[name]))
        (work / "data").mkdir(parents=True, exist_ok=True)
        for seq in seqs[name]:
            make_data(work / "data" / f"{name}-{seq}.json", work / "models" / name, cfg["vocab_size"], seq)


# --- the probe each rank runs (--rank-probe) ------------------------------------------------------------

def rank_probe(argv: list[str]) -> int:
    """zeroboard.training.train, noting the allocator after each forward (loss included) and each step."""
    import torch
    import transformers

    from zeroboard.training import train

    out_dir = Path(argv[argv.index("--output_dir") + 1])
    rec: dict = {"forward_peak": [], "step_peak": [], "step_begin": [], "pools": []}
    cuda = torch.cuda.is_available()
    trace_dir = os.environ.get("ZB_TRACE_DIR")  # --set pools: the allocator's history of steps 2 and 3 goes there
    from_start = os.environ.get("ZB_TRACE_FROM_START") == "1"  # ... or of everything from the start to step 3
    if cuda and trace_dir and from_start:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, context="alloc", stacks="python")
    original = transformers.Trainer.compute_loss

    def compute_loss(self, *a, **kw):
        result = original(self, *a, **kw)
        if cuda:
            rec["forward_peak"].append(torch.cuda.max_memory_allocated())
        return result

    transformers.Trainer.compute_loss = compute_loss
    make = train.make_callback

    def make_callback(*args):
        cb = make(*args)
        base = type(cb)

        class Probe(base):
            def on_step_begin(self, args, state, control, **kw):
                if cuda:
                    rec["step_begin"].append(torch.cuda.memory_allocated())
                    if trace_dir and state.global_step == 1 and not from_start:
                        torch.cuda.memory._record_memory_history(max_entries=500_000, context="alloc", stacks="python")
                return super().on_step_begin(args, state, control, **kw)

            def on_step_end(self, args, state, control, **kw):
                if cuda:
                    rec["step_peak"].append(torch.cuda.max_memory_allocated())
                    rec["reserved_peak"] = torch.cuda.max_memory_reserved()
                    rec["pools"].append(stream_pools(torch.cuda.memory_snapshot()))
                    if trace_dir and state.global_step == 3:
                        snap = torch.cuda.memory._snapshot()
                        torch.cuda.memory._record_memory_history(enabled=None)
                        try:
                            with gzip.open(Path(trace_dir) / f"{out_dir.name}.trace.json.gz", "wt") as f:
                                json.dump(compact_trace(snap), f)
                        except Exception as e:  # noqa: BLE001 - the run's figures still count
                            rec["trace_error"] = f"{type(e).__name__}: {e}"
                (out_dir / "probe.json").write_text(json.dumps(rec))
                return super().on_step_end(args, state, control, **kw)

        cb.__class__ = Probe
        return cb

    train.make_callback = make_callback
    # the weights are not written: saving comes after every figure is taken and only costs the GPU machine's time
    train.save_result = lambda *args: {"kind": "not saved (benchmark)"}
    return train.main(argv)


def compact_trace(snap: dict) -> dict:
    """The allocator's history, small: each event's action, address, size, stream and four innermost Python frames
    (file:line:function); the segments at the end with their blocks."""
    def where(frames):
        return [f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in frames[:4]]
    events = [[e.get("action"), e.get("addr", 0), e.get("size", 0), e.get("stream", 0), where(e.get("frames") or [])]
              for e in (snap.get("device_traces") or [[]])[0]]
    segments = [{"stream": g.get("stream"), "address": g.get("address"), "total": g.get("total_size"),
                 "allocated": g.get("allocated_size"), "blocks": [[b.get("size"), b.get("state")] for b in g["blocks"]]}
                for g in snap.get("segments", [])]
    return {"events": events, "segments": segments}


def stream_pools(segments: list[dict]) -> dict[str, list[int]]:
    """Each CUDA stream's pool in torch's allocator: [reserved, allocated] bytes (a snapshot's segments)."""
    out: dict[str, list[int]] = {}
    for seg in segments:
        pool = out.setdefault(str(seg["stream"]), [0, 0])
        pool[0] += seg["total_size"]
        pool[1] += seg["allocated_size"]
    return out


# --- NVML, read by the harness -------------------------------------------------------------------------

class Sampler(threading.Thread):
    """Every 50 ms: what NVML charges each process on each GPU (its peak per pid)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peaks: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        from zeroboard.job import devices

        nv = devices._nvml()
        if nv is None:
            return
        handles = devices._handles(nv)
        while not self.done.wait(0.05):
            for h in handles:
                with contextlib.suppress(nv.NVMLError):
                    for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                        self.peaks[p.pid] = max(self.peaks.get(p.pid, 0), int(p.usedGpuMemory or 0))


# --- one run -------------------------------------------------------------------------------------------

def job_of(name: str, seq: int, mbs: int, cfg: str, work: Path, steps: int, tiny: bool):
    from zeroboard.job.spec import JobSpec

    c = parse_config(cfg)
    tag = f"{name}-{seq}-{mbs}-{cfg}".replace("+", "_")
    return JobSpec(model_name_or_path=str(work / "models" / name), dataset_dir=str(work / "data"),
                   dataset=[str(work / "data" / f"{name}-{seq}.json")],
                   cutoff_len=seq, per_device_train_batch_size=mbs, max_steps=steps, logging_steps=1,
                   gradient_accumulation_steps=c["accumulation"],
                   learning_rate=1e-5 if c["finetuning_type"] == "full" else 1e-4, lr_scheduler_type="constant",
                   finetuning_type=c["finetuning_type"], lora_rank=16, lora_alpha=32, lora_target=["all"],
                   deepspeed_stage=c["deepspeed_stage"], offload=c["offload"],
                   gradient_checkpointing=c["gradient_checkpointing"], liger_kernel=c["liger_kernel"],
                   precision="fp32" if tiny else "bf16", device_type="cpu" if tiny else "cuda",
                   num_processes=1, output_dir=str(work / "runs" / tag))


def plan_of(job, gpus) -> dict:
    from zeroboard import planner

    try:
        p = planner.estimate(job, gpus, host_available=1 << 40, trace="wait")  # a model of any family: traced once
    except Exception as e:  # the measurement still counts
        return {"plan_error": f"{type(e).__name__}: {e}"}
    return {"estimate_gib": p.peak_bytes / GIB, "needed_gib": p.needed_bytes / GIB, "host_gib": p.host_bytes / GIB,
            "phase": p.phase}


def start(job, fixed_segments: bool):
    from zeroboard.job import command

    prepared = command.check_and_build(job)  # no memory verdict: the planner is what this measures
    if not prepared.report.ok:
        raise SystemExit(f"job invalid: {prepared.report.text()}")
    argv = list(prepared.command.argv)
    i = argv.index("-m")
    argv[i: i + 2] = [str(Path(__file__).resolve()), "--rank-probe"]
    env = {**prepared.command.full_env(), "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "app"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if fixed_segments:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    out = Path(job.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "launcher.log", "w")  # noqa: SIM115 - closed by finish()
    proc = subprocess.Popen(argv, env=env, cwd=prepared.command.cwd, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, log, prepared.command.env


def finish(row: dict, job, proc, log, sampler: Sampler) -> dict:
    from zeroboard.job import record

    log.close()
    out = Path(job.output_dir)
    evs = record.read_events(out / record.EVENTS_FILE)
    start_ev = next((e for e in evs if e["event"] == "start"), {})
    status = next((e["status"] for e in evs if e["event"] == "end"), "failed")
    if proc.returncode != 0 or status != "finished":
        said = [e.get("message", "") for e in evs if e["event"] == "error"]
        tail = (out / "launcher.log").read_text(errors="replace")[-1500:]
        row["failure"] = ("; ".join(said)[:1200] or tail)
        row["oom"] = "out of memory" in (row["failure"] + tail).lower()
        return row
    mem: dict = {}
    for e in evs:
        for m in e.get("memory") or []:
            for k, v in m.items():
                if isinstance(v, (int, float)) and k != "rank":
                    mem[k] = max(mem.get(k, 0), v)
    pids = [d["pid"] for d in start_ev.get("devices", [])]
    probe = json.loads((out / "probe.json").read_text()) if (out / "probe.json").is_file() else {}
    logs = [e for e in evs if e["event"] == "log"]
    steps = [b["elapsed"] - a["elapsed"] for a, b in zip(logs, logs[1:])][2:]
    row.update(torch_peak_gib=mem.get("torch_peak_bytes", 0) / GIB,
               torch_reserved_gib=mem.get("torch_reserved_peak_bytes", 0) / GIB,
               nvml_peak_gib=max((sampler.peaks.get(p, 0) for p in pids), default=0) / GIB,
               nvml_peak_trainer_gib=(mem.get("nvml_peak_bytes") or 0) / GIB,
               rss_peak_gib=mem.get("rss_peak_bytes", 0) / GIB,
               step_s=statistics.median(steps) if steps else None, speedups=start_ev.get("speedups"),
               forward_peak_gib=[round(x / GIB, 3) for x in probe.get("forward_peak", [])],
               step_peak_gib=[round(x / GIB, 3) for x in probe.get("step_peak", [])],
               step_begin_gib=[round(x / GIB, 3) for x in probe.get("step_begin", [])],
               pools_gib=[{k: [round(x / GIB, 3) for x in v] for k, v in p.items()} for p in probe.get("pools", [])])
    return with_errors(row)


def with_errors(row: dict) -> dict:
    if row.get("torch_peak_gib") and row.get("estimate_gib") is not None:
        row["error"] = row["estimate_gib"] / row["torch_peak_gib"] - 1
    if row.get("nvml_peak_gib") and row.get("needed_gib") is not None:
        row["needed_error"] = row["needed_gib"] / row["nvml_peak_gib"] - 1
    return row


def run_rows(rows: list[tuple], a, out_path: Path) -> list[dict]:
    from zeroboard import workspace
    from zeroboard.job import devices

    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    workspace.allow([f"{work}:rw"])  # the runs write there, outside the repository
    gpus = devices.detect_gpus()
    capacity = (gpus[0].total_bytes / GIB - 4) if gpus else 1e9
    host_cap = a.host_gib
    seqs: dict[str, list[int]] = {}
    for _, name, seq, *_ in rows:
        if seq not in seqs.setdefault(name, []):
            seqs[name].append(seq)
    t = time.time()
    makers = []
    for name in seqs:  # one child per model, side by side: the models' CUDA memory leaves with each
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); sys.path.insert(0, {str(ROOT / 'app')!r}); "
                f"from pathlib import Path; import planner_heldout as h; "
                f"h.prepare_models([{name!r}], Path({str(work)!r}), {seqs!r}, {a.tiny!r})")
        makers.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL))
    if any(m.wait() for m in makers):
        raise SystemExit("a model could not be built")
    print(f"models and data ready in {time.time() - t:.0f} s", flush=True)
    versions = {}
    for mod in ("torch", "transformers", "deepspeed", "peft", "accelerate", "liger_kernel"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[mod] = version(mod.replace("_", "-"))
    todo = []
    for which, name, seq, mbs, cfg in rows:
        job = job_of(name, seq, mbs, cfg, work, a.steps, a.tiny)
        row = {"set": which, "family": MODELS[name][0], "model": name, "config": cfg, "seq": seq, "micro_batch": mbs,
               "mbs": mbs, "accum": parse_config(cfg)["accumulation"], **plan_of(job, gpus)}
        # the planner's figures when the row was measured: --recompute refills estimate_gib and needed_gib only
        row.update(sealed_estimate_gib=row.get("estimate_gib"), sealed_needed_gib=row.get("needed_gib"))
        todo.append((row, job))
    # offloaded rows first (the slowest: CPU Adam, host copies), then the largest
    todo.sort(key=lambda rj: (not parse_config(rj[0]["config"])["offload"], -rj[0].get("needed_gib", 0)))
    results: list[dict] = list(a.kept)
    running: list[tuple] = []
    sampler = Sampler()
    sampler.start()
    deadline = a.started + a.budget_s  # nothing new is launched after this
    hard_deadline = deadline + a.grace_s  # what still runs then is stopped
    retry: list[tuple] = []

    def room(row) -> tuple[float, float]:
        return row.get("needed_gib", 20) * 1.15 + 1.5, row.get("host_gib", 8) * 1.2 + 4

    def save():
        out_path.write_text(json.dumps({"versions": versions, "steps": a.steps, "rows": results}, indent=1))

    while running or ((todo or retry) and time.time() < deadline):
        if time.time() > hard_deadline:
            break
        for item in list(running):
            row, job, proc, log, t0, gpu_need, host_need = item
            if proc.poll() is None and time.time() - t0 < a.row_timeout:
                continue
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            running.remove(item)
            row["seconds"] = round(time.time() - t0, 1)
            row = finish(row, job, proc, log, sampler)
            if row.get("oom") and row.get("shared_gpu") and not row.get("retried"):
                retry.append(({**{k: row[k] for k in ("set", "family", "model", "config", "seq", "micro_batch")},
                               **plan_of(job, gpus), "retried": True}, job))
            else:
                results.append(row)
                save()
            print(summary(row, a.sealed), flush=True)
            import shutil

            shutil.rmtree(job.output_dir, ignore_errors=True)
        used_gpu = sum(r[5] for r in running)
        used_host = sum(r[6] for r in running)
        queue = [] if time.time() > deadline else todo if todo else (retry if not running else [])
        for item in list(queue):
            row, job = item
            g, h = room(row)
            solo = queue is retry
            if running and (solo or used_gpu + g > capacity or used_host + h > host_cap or len(running) >= a.concurrency):
                continue
            queue.remove(item)
            fixed = parse_config(row["config"])["fixed_segments"]
            proc, log, env = start(job, fixed)
            row["shared_gpu"] = bool(running)
            row["alloc_conf"] = "" if fixed else env.get("PYTORCH_CUDA_ALLOC_CONF", "")
            running.append((row, job, proc, log, time.time(), g, h))
            used_gpu, used_host = used_gpu + g, used_host + h
            print(f"start {row['set']} {row['model']} seq {row['seq']} mbs {row['micro_batch']} {row['config']} "
                  f"(plan {row.get('estimate_gib', 0):.1f} GiB; {len(running)} running)", flush=True)
            if solo:
                break
        time.sleep(0.5)
    for row, _job, proc, *_ in running:  # out of time: stop what runs, say so
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        results.append({**row, "failure": "not finished within the harness's time budget"})
    for row, _ in todo + retry:
        results.append({**row, "failure": "not run: the harness's time budget ran out"})
    sampler.done.set()
    save()
    return results


def summary(r: dict, sealed: str = "") -> str:
    if r.get("invalid"):
        return f"{r['model']:<15}{r['seq']:>5}{r['micro_batch']:>4} {r['config']:<20} INVALID (see the row's 'invalid')"
    if r.get("set") == sealed:
        return f"{r['model']:<15}{r['seq']:>5}{r['micro_batch']:>4} {r['config']:<20} " + (
            "done (sealed)" if "torch_peak_gib" in r else f"FAILED {str(r.get('failure'))[-300:]!r}")
    f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "-"  # noqa: E731
    if "torch_peak_gib" not in r:
        return f"{r['model']:<15}{r['seq']:>5}{r['micro_batch']:>4} {r['config']:<20} FAILED {str(r.get('failure'))[-300:]!r}"
    return (f"{r['model']:<15}{r['seq']:>5}{r['micro_batch']:>4} {r['config']:<20}{f(r.get('estimate_gib'), '8.2f')}"
            f"{r['torch_peak_gib']:8.2f}{f(r.get('error'), '8.1%')}{f(r.get('needed_gib'), '8.2f')}"
            f"{r['nvml_peak_gib']:8.2f}{r['nvml_peak_trainer_gib']:8.2f}{f(r.get('needed_error'), '8.1%')}"
            f"{f(r.get('step_s'), '7.3f')}")


def print_table(rows: list[dict], sealed: str = "") -> None:
    print(f"\n{'model':<15}{'seq':>5}{'mbs':>4} {'config':<20}{'plan':>8}{'torch':>8}{'error':>8}{'needed':>8}{'NVML':>8}"
          f"{'trainer':>8}{'n.err':>8}{'step s':>7}")
    for r in rows:
        print(summary(r, sealed))
    for name in sorted({r.get("set", "") for r in rows} - {sealed}):
        ok = [r for r in rows if r.get("set") == name and not r.get("invalid")]
        errs = [r["error"] for r in ok if isinstance(r.get("error"), float)]
        nerr = [r["needed_error"] for r in ok if isinstance(r.get("needed_error"), float)]
        if errs:
            print(f"{name}: {len(errs)} rows; allocator error {min(errs):+.1%} .. {max(errs):+.1%} "
                  f"(|error| <= 10%: {sum(abs(e) <= 0.10 for e in errs)}/{len(errs)}); needed vs NVML "
                  f"{min(nerr, default=0):+.1%} .. {max(nerr, default=0):+.1%} "
                  f"(0 .. +15%: {sum(0 <= e <= 0.15 for e in nerr)}/{len(nerr)})")


def recompute(path: Path, work: Path) -> list[dict]:
    """Fill the estimate columns again from the planner as it is now (no GPU: it reads only config dicts), for what
    each run did: its Liger kernels and how it held its weights (from its start event), and DeepSpeed's presets as
    written when ``ZEROBOARD_DS_TUNING=off`` (rows measured before ZeroBoard tuned them per run, issue 26)."""
    from dataclasses import replace

    from zeroboard import planner
    from zeroboard.job.devices import Gpu

    gpus = [Gpu(0, "NVIDIA H200", 143771 << 20, 139 << 30, 0, 0, (9, 0))]
    data = json.loads(path.read_text())
    for r in data["rows"]:
        job = job_of(r["model"], r["seq"], r["micro_batch"], r["config"], work, data.get("steps", 6), False)
        shape = planner.shape_from_config(MODELS[r["model"]][1])
        liger = (r.get("speedups") or {}).get("liger")
        if liger is not None:  # plan what the run really did (liger installed there, maybe not here)
            job = replace(job, liger_kernel="on" if liger else "off")
        if any(n.startswith("weights: fp32 master") for n in (r.get("speedups") or {}).get("notes", [])):
            job = replace(job, master_weights="fp32")  # run before LoRA's bf16 base and the split master weights
        try:
            p = planner.estimate(job, gpus, model=shape, host_available=1 << 40)
        except planner.PlanError as e:
            r["plan_error"] = str(e)
            continue
        r.update(estimate_gib=p.peak_bytes / GIB, needed_gib=p.needed_bytes / GIB, phase=p.phase)
        with_errors(r)
    return data["rows"]


# --- the trainer's NVML thread: what it costs -----------------------------------------------------------

def nvml_overhead(steps: int = 120, block: int = 10) -> dict:
    """Step time of a GPU-bound training loop with the trainer's sampler thread running and paused, in alternating
    blocks (the same process, the same warm GPU), and the cost of one reading."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from zeroboard.training import callbacks

    cfg = {**MODELS["tinyllama-1.1b"][1]}
    hf = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(0, 32000, (8, 1024), device="cuda")
    sampler = callbacks.NvmlSampler(callbacks.NVML_PERIOD)
    t = time.perf_counter()
    for _ in range(200):
        sampler.read()
    read_ms = (time.perf_counter() - t) / 200 * 1e3
    times: dict[str, list[float]] = {"on": [], "off": []}
    paused = threading.Event()

    def loop():
        while True:
            if not paused.is_set():
                sampler.read()
            time.sleep(sampler.period)

    threading.Thread(target=loop, daemon=True).start()
    for i in range(steps):
        on = (i // block) % 2 == 0
        paused.clear() if on else paused.set()
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i % block >= 2 and i >= 2 * block:  # the first two steps of a block and the first cycle are warm-up
            times["on" if on else "off"].append(time.perf_counter() - t)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    res = {"read_ms": read_ms, "period_s": sampler.period, "step_on_s": on, "step_off_s": off, "overhead": on / off - 1,
           "steps_each": len(times["on"])}
    print(json.dumps(res), flush=True)
    return res


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-probe":
        return rank_probe(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=["calibration", "heldout", "heldout2", "heldout3", "heldout4", "confirm5", "heldout5",
                                      "both", "tiny", "pools", "traces"], default="heldout")
    ap.add_argument("--sealed", default="", help="a set whose figures are written but not printed (kept unseen "
                    "until the planner is frozen)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", default="", help="comma list of model names")
    ap.add_argument("--skip-done", type=Path, help="a results file: rows measured there are not run again, and are kept")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--workdir", default="/tmp/zb-heldout")
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=400, help="seconds from the start: launch nothing new after this")
    ap.add_argument("--grace-s", type=float, default=60, help="then wait this long for what runs, and stop it")
    ap.add_argument("--row-timeout", type=float, default=300)
    ap.add_argument("--host-gib", type=float, default=100)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on CPU: checks the harness, measures nothing")
    ap.add_argument("--recompute", type=Path, help="refill the estimates of a results file with the planner as it is")
    ap.add_argument("--nvml-overhead", action="store_true")
    a = ap.parse_args()
    a.started = time.time()
    if a.nvml_overhead:
        res = nvml_overhead()
        if a.out:
            a.out.write_text(json.dumps(res, indent=1))
        return 0
    if a.recompute:
        rows = recompute(a.recompute, Path(a.workdir))
        print_table(rows)
        if a.out:
            data = json.loads(a.recompute.read_text())
            data["rows"] = rows
            a.out.write_text(json.dumps(data, indent=1))
        return 0
    if a.tiny:
        a.set = "tiny"
    if a.set in ("pools", "traces"):
        os.environ["ZB_TRACE_DIR"] = str(a.out.parent if a.out else Path("/tmp"))
    sets = {"tiny": [("tiny", *r) for r in TINY_ROWS], "pools": [("calibration", *r) for r in POOLS],
            "calibration": [("calibration", *r) for r in CALIBRATION], "heldout": [("heldout", *r) for r in HELDOUT]}
    sets.update({name: [(name, *r) for r in rows] for name, rows in
                 (("traces", TRACES), ("heldout2", HELDOUT2), ("heldout3", HELDOUT3), ("heldout4", hsets.HELDOUT4),
                  ("confirm5", hsets.CONFIRM5), ("heldout5", hsets.HELDOUT5))})
    sets["both"] = sets["calibration"] + sets["heldout"]
    rows = sets[a.set]
    if a.only:
        rows = [r for r in rows if r[1] in a.only.split(",")]
    out = a.out or Path(f"/tmp/planner_{a.set}.json")
    a.kept = []
    if a.skip_done:
        a.kept = [r for r in json.loads(a.skip_done.read_text())["rows"] if "torch_peak_gib" in r]
        done = {(r["set"], r["model"], r["seq"], r["micro_batch"], r["config"]) for r in a.kept}
        rows = [r for r in rows if tuple(r) not in done]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = run_rows(rows, a, out)
    print_table(results, a.sealed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
