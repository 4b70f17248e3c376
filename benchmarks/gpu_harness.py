"""The GPU benchmarks' shared harness: the bench model and data, the device's figures, the NVML sampler, running a job.

- :class:`Bench`: the 1.1 B Llama of docs/en/gpu-results.md (hidden 2048, 22 layers, 32 heads, 4 KV heads, vocab
  32000) and its data (every sample 1024 tokens), built once per machine; ``tiny``: a small Llama on CPU.
- :func:`peak_matmul_tflops`, :func:`flops_per_token` (MFU), :func:`grow_host_memory`.
- :class:`GpuSampler`: NVML every 0.2 s and ``nvidia-smi`` every 3 s, on during ZeroBoard's runs and the bare ones.
- :func:`run_job`: a job in its own process group, stopped whole at a timeout or when this script is; :func:`step_times`.

What a matrix row runs, and in which order, is gpu_rows.py; gpu_matrix.py, gpu_speed.py, gpu_speedups.py and
chat_speed.py build on both.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

from zeroboard.job import devices  # noqa: E402

BIG = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
           num_key_value_heads=4, vocab_size=32000)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512)


# --- model and data ---------------------------------------------------------------

def make_model(folder: Path, shape: dict, seq: int) -> None:
    """Random-init Llama + a word-level tokenizer of the same vocab, with a chat template."""
    if (folder / "config.json").is_file():
        return
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from zeroboard.training.demo_model import CHAT_TEMPLATE, SPECIAL_TOKENS

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    first = len(vocab)
    vocab.update({f"w{i}": first + i for i in range(shape["vocab_size"] - first)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|pad|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(**shape, max_position_embeddings=max(seq, 2048), tie_word_embeddings=False,
                      pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def make_model_apart(folder: Path, shape: dict, seq: int) -> None:
    """make_model in a child process: built here, the model's CUDA memory stayed with this process for the whole
    matrix (seen on the H200: 4.9 GiB under the harness's pid in every NVML reading of a fresh machine's first call)."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from gpu_harness import make_model; "
            f"from pathlib import Path; make_model(Path({str(folder)!r}), {shape!r}, {seq})")
    subprocess.run([sys.executable, "-c", code], check=True)


def make_data(path: Path, vocab: int, seq: int, n: int = 2048) -> None:
    """Alpaca records whose answers fill the whole cutoff: every sample is `seq` tokens."""
    if path.is_file():
        return
    rng = random.Random(0)
    words = lambda k: " ".join(f"w{rng.randrange(vocab - 8)}" for _ in range(k))  # noqa: E731
    path.write_text(json.dumps([{"instruction": words(8), "input": "", "output": words(seq + 16)} for _ in range(n)]))


@dataclass
class Bench:
    """The bench's model, data and folders: the 1.1 B Llama at 1024 tokens, or (``tiny``) a small one on CPU that
    checks the harness and measures nothing."""
    work: Path
    tiny: bool = False
    gpus: int = 1
    seq: int = 1024

    def __post_init__(self):
        self.work = Path(self.work)
        self.shape = TINY if self.tiny else BIG
        self.seq = 64 if self.tiny else self.seq
        self.model_dir = self.work / ("model-tiny" if self.tiny else "model-1b")
        self.data = self.work / f"data-{self.seq}.json"
        self.runs = Path(f"{self.work}-runs")  # outputs apart from the data folder (a job may not write into its data)

    def prepare(self) -> None:
        from zeroboard import workspace

        workspace.allow([f"{self.work}:rw", f"{self.runs}:rw"])  # outside the repository
        self.work.mkdir(parents=True, exist_ok=True)
        self.runs.mkdir(parents=True, exist_ok=True)
        if not (self.model_dir / "config.json").is_file():
            make_model_apart(self.model_dir, self.shape, self.seq)
        make_data(self.data, self.shape["vocab_size"], self.seq)


# --- the device ---------------------------------------------------------------------

def peak_matmul_tflops() -> float | None:
    """The bf16 matmul rate of this GPU, measured in a child process so this one holds no CUDA memory."""
    here = str(Path(__file__).parent)
    code = f"import sys; sys.path.insert(0, {here!r}); from gpu_harness import _matmul_tflops as f; print(f())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip().splitlines()
    return float(out[-1]) if out and out[-1] != "None" else None


def _matmul_tflops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * 20 / (time.perf_counter() - t) / 1e12


def flops_per_token(shape: dict, seq: int, method: str) -> float:
    """Model FLOPs per trained token: 6N (full) or 4N (LoRA: no weight gradients) plus attention."""
    h, f, L, v = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"], shape["vocab_size"]
    kv = h * shape["num_key_value_heads"] // shape["num_attention_heads"]
    n_matmul = L * (2 * h * h + 2 * h * kv + 3 * h * f) + h * v
    attn = 12 * L * h * seq  # QK^T and AV, forward + backward
    return (6 if method == "full" else 4) * n_matmul + attn


def host_mem_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def grow_host_memory(gib: int) -> None:
    """Touch ``gib`` GiB of host memory once, then free it: the H200 machines are microVMs whose memory grows as it is
    first used (about 3 s per 8 GiB), and whichever run first pins tens of GiB for offload would pay for it."""
    import numpy as np

    before, t = host_mem_total_gib(), time.time()
    held = [np.ones(4 * 2**30 // 8) for _ in range(gib // 4)]
    del held
    print(f"host memory: MemTotal {before:.0f} -> {host_mem_total_gib():.0f} GiB after touching {gib} GiB "
          f"({time.time() - t:.0f} s)", flush=True)


class GpuSampler(threading.Thread):
    """Used memory of every GPU every ``period`` s (the peak per GPU), and the nvidia-smi cross-check every 3 s; on
    during ZeroBoard's runs and the bare ones alike."""

    def __init__(self, period: float = 0.2):
        super().__init__(daemon=True)
        self.period, self.peaks, self.stop_flag = period, {}, False
        self.checks: list[dict] = []

    @property
    def peak(self) -> int:
        return max(self.peaks.values(), default=0)

    def run(self) -> None:
        last_check = 0.0
        while not self.stop_flag:
            due = time.time() - last_check > 3
            for g in devices.detect_gpus(with_processes=True):
                self.peaks[g.index] = max(self.peaks.get(g.index, 0), g.used_bytes)
                if due and any(p.pid != os.getpid() for p in g.processes):
                    self.checks.append(cross_check(g.index))
                    last_check = time.time()
            time.sleep(self.period)


def cross_check(index: int) -> dict:
    """Our NVML view (what the GPU panel shows) against nvidia-smi, read back to back."""
    ours = devices.detect_gpus(with_processes=True)[index]
    q = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.used,memory.total",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.split(",")
    apps = subprocess.run(["nvidia-smi", f"--id={index}", "--query-compute-apps=pid,used_memory",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    smi_procs = {int(p): int(m) for p, m in (ln.split(",") for ln in apps.strip().splitlines() if ln.strip())}
    our_procs = {p.pid: p.used_bytes >> 20 for p in ours.processes}
    return {"ours_used_mib": ours.used_bytes >> 20, "smi_used_mib": int(q[0]), "ours_total_mib": ours.total_bytes >> 20,
            "smi_total_mib": int(q[1]), "ours_procs": our_procs, "smi_procs": smi_procs,
            "agree": abs((ours.used_bytes >> 20) - int(q[0])) <= 512 and set(our_procs) == set(smi_procs)}


# --- running a job ------------------------------------------------------------------

_children: list[subprocess.Popen] = []


def run_job(argv: list[str], timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    """subprocess.run for a training job, in its own process group (stopped whole at ``timeout``, or when this
    script gets SIGTERM: seen on the H200, a job outlived its benchmark and shared the GPU with the next call)."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kw) as p:
        _children.append(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(p, 20)
            out, err = p.communicate()
            err = (err or "") + f"\n[harness] stopped after {timeout:.0f} s"
        finally:
            _children.remove(p)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def _stop_group(p: subprocess.Popen, grace: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)


def stop_children(signum, frame) -> None:
    """On SIGTERM (e.g. `timeout`): end the running job's whole group, then leave."""
    for p in list(_children):
        _stop_group(p, 30)
    sys.exit(128 + signum)


def sampled(fn):
    """Run ``fn`` with the NVML sampler on."""
    sampler = GpuSampler()
    sampler.start()
    try:
        return fn(), sampler
    finally:
        sampler.stop_flag = True
        sampler.join()


def step_times(evs: list[dict], skip: int = 2, skip_last: int = 0) -> list[float]:
    """Each optimizer step's time: between consecutive log events; the first ``skip`` and the last ``skip_last``
    (profiled) steps left out."""
    logs = [e for e in evs if e["event"] == "log"]
    steps = [b["elapsed"] - a["elapsed"] for a, b in zip(logs, logs[1:])][skip:]
    return steps[: len(steps) - skip_last] if skip_last else steps

