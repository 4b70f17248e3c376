"""The chat worker against a bare ``transformers`` generate loop: time to first token, tokens/s, load time, memory.

The same model, precision, prompt (rendered with the model's chat template) and greedy decoding on both sides:

- worker: ``outputs.chat_client.start`` as the Chat page starts it (a supervised job, the model loaded in its own
  process), answers streamed over its socket; timed on the client side, from the request to the first piece of
  text (TTFT) and to the end;
- bare: a child process that loads the model with ``from_pretrained``, renders the question with the chat template,
  tokenizes it and calls ``model.generate`` (no streamer); its TTFT is the same with one new token.

Both are loaded first, then their runs alternate (bare, worker, bare's one-token run), so a shared machine's load
falls on both alike; medians of ``--reps`` runs after one warm-up each.

tokens/s is new tokens over the whole answer (the prompt's prefill included) on both sides; every answer is
exactly ``--new-tokens`` long (``min_new_tokens``: the end token does not cut one short).  CPU: the demo model
(fp32).  GPU: a random-init Llama of about 1.1 B parameters (benchmarks/gpu_harness.py's shape), bf16, GPU 0.
No deepspeed or gradio is imported.  Rows are merged into the results file by device, so the CPU rows made here
stay when the GPU rows are added on another machine:

    python benchmarks/chat_speed.py --out benchmarks/results/chat_speed.json                    # CPU, demo model
    python3 benchmarks/chat_speed.py --device cuda --merge benchmarks/results/chat_speed.json --out $OUT/chat_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "benchmarks"))

PROMPT = "Tell me everything you know about the weather in spring, in detail, with examples."
WORD_PROMPT = " ".join(f"w{i}" for i in range(100, 148))  # the GPU model's word-level vocabulary: 48 prompt words


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 4) if xs else None


# --- bare: a child process, driven line by line so its runs interleave with the worker's ----------------------


def bare_child(model_dir: str, device: str, dtype: str, prompt: str) -> None:
    """Load, say so, then answer commands on stdin: ``gen N`` (a timed generate of N new tokens), ``mem``."""
    import psutil
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from zeroboard.training import templates

    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(model_dir)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dt, **({"device_map": {"": 0}} if device == "cuda" else {}))
    model.eval()
    load_s = time.perf_counter() - t0
    def encode():  # what a chat loop does for each question: the template, then the tokenizer
        return tok(templates.chat_text([{"role": "user", "content": prompt}], tok), return_tensors="pt",
                   add_special_tokens=False)["input_ids"].to(model.device)

    ids = encode()
    kw = dict(do_sample=False, eos_token_id=tok.eos_token_id,
              pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    print(json.dumps({"load_s": round(load_s, 3), "prompt_tokens": int(ids.shape[1]),
                      "parameters": sum(p.numel() for p in model.parameters())}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "gen":
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            ids = encode()
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=int(cmd[1]),
                                     min_new_tokens=int(cmd[1]), **kw)
            if device == "cuda":
                torch.cuda.synchronize()
            print(json.dumps({"seconds": time.perf_counter() - t, "tokens": int(out.shape[1] - ids.shape[1])}), flush=True)
        elif cmd[0] == "mem":
            if device == "cuda":
                from zeroboard.job import devices

                mem = devices.process_bytes_on(os.getpid()) or torch.cuda.memory_reserved(0)
            else:
                mem = psutil.Process().memory_info().rss
            print(json.dumps({"memory_bytes": mem}), flush=True)


class Bare:
    def __init__(self, model_dir: str, device: str, dtype: str, prompt: str):
        code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import chat_speed as c; "
                f"c.bare_child({model_dir!r}, {device!r}, {dtype!r}, {prompt!r})")
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false",
               "CUDA_VISIBLE_DEVICES": "" if device == "cpu" else os.environ.get("CUDA_VISIBLE_DEVICES", "0")}
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the bare generate loop ended")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


# --- the worker, as the page uses it -----------------------------------------------------------------------


class Worker:
    def __init__(self, model_dir: str, device: str, work: Path):
        from zeroboard.outputs import chat_client, chat_target
        from zeroboard.runs.manager import JobManager

        self.client = chat_client
        self.mgr = JobManager(index=work / "runs.json")
        t0 = time.perf_counter()
        w = chat_client.start(self.mgr, chat_target.resolve(model_dir), "cpu" if device == "cpu" else "cuda",
                              [] if device == "cpu" else [0], idle_s=600, source="cli")
        self.w = chat_client.wait_ready(w)
        self.ready_s = time.perf_counter() - t0

    def gen(self, n: int, prompt: str) -> dict:
        conv = [{"role": "user", "content": prompt}]
        settings = {"max_new_tokens": n, "min_new_tokens": n, "temperature": 0.0, "top_p": 1.0, "seed": 0}
        t = time.perf_counter()
        first, done = None, {}
        for r in self.w.generate([{"side": "tuned", "messages": conv}], settings, "bench"):
            if r.get("done"):
                done = r
            elif first is None and "text" in r:
                first = time.perf_counter() - t
        return {"ttft_s": first, "seconds": time.perf_counter() - t, "tokens": done["tokens"],
                "inside_tokens_per_s": done["tokens_per_s"]}

    def close(self) -> dict:
        info = self.w.refresh().info
        gone = self.client.unload(self.mgr, self.w)
        return {"load_s": info.get("load_s"), "start_to_ready_s": round(self.ready_s, 3),
                "memory_bytes": info.get("memory_bytes"), "dtype": info.get("dtype"), "unload_verified": gone["verified"],
                "unload": {k: gone.get(k) for k in ("gone", "gpu_bytes_left", "gpu_release_s", "freed_bytes")}}


def measure(model_dir: str, device: str, dtype: str, prompt: str, new_tokens: int, reps: int,
            work: Path) -> tuple[dict, dict]:
    """Both sides loaded, then their runs interleaved (a shared machine's load falls on both alike)."""
    bare = Bare(model_dir, device, dtype, prompt)
    worker = Worker(model_dir, device, work)
    try:
        bare.ask(f"gen {new_tokens}")  # warm-up
        worker.gen(new_tokens, prompt)
        b_runs, b_ttft, w_runs = [], [], []
        for _ in range(reps):
            b_runs.append(bare.ask(f"gen {new_tokens}"))
            w_runs.append(worker.gen(new_tokens, prompt))
            b_ttft.append(bare.ask("gen 1")["seconds"])
        b_mem = bare.ask("mem")["memory_bytes"]
    finally:
        w_info = worker.close()
        bare.close()
    b = {**bare.info, "ttft_s": _median(b_ttft), "tokens": b_runs[0]["tokens"],
         "seconds": _median([r["seconds"] for r in b_runs]),
         "tokens_per_s": _median([r["tokens"] / r["seconds"] for r in b_runs]), "memory_bytes": b_mem}
    pairs = [(w["tokens"] / w["seconds"]) / (b["tokens"] / b["seconds"]) for w, b in zip(w_runs, b_runs)]
    b["run_seconds"] = [round(r["seconds"], 3) for r in b_runs]
    w = {**w_info, "ttft_s": _median([r["ttft_s"] for r in w_runs]), "tokens": w_runs[0]["tokens"],
         "seconds": _median([r["seconds"] for r in w_runs]),
         "tokens_per_s": _median([r["tokens"] / r["seconds"] for r in w_runs]),
         "tokens_per_s_inside_worker": _median([r["inside_tokens_per_s"] for r in w_runs]),
         "pair_ratios": [round(x, 3) for x in pairs], "run_seconds": [round(r["seconds"], 3) for r in w_runs]}
    return w, b


# --- the models --------------------------------------------------------------------------------------------


def model_for(device: str, which: str, work: Path) -> tuple[str, str, str, str]:
    """(folder, name, dtype, prompt) of the model measured: the demo, or a random-init Llama (big: 1.1 B)."""
    if which == "demo":
        demo = ROOT / "cache" / "demo" / "model"
        if not (demo / "config.json").is_file():
            subprocess.run([sys.executable, "-m", "zeroboard.cli", "demo-model"], cwd=ROOT, check=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "app")})
        return str(demo), "demo (Llama, 2 layers, hidden 128)", "fp32", PROMPT
    from gpu_harness import BIG, TINY, make_model

    folder = work / f"llama-{which}"
    make_model(folder, BIG if which == "random-big" else TINY, 2048)
    name = "Llama 1.1 B (random init; hidden 2048, 22 layers)" if which == "random-big" else "Llama (random init, tiny)"
    return str(folder), name, "bf16" if device == "cuda" else "fp32", WORD_PROMPT


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "chat_speed.json"))
    ap.add_argument("--merge", help="a results file whose rows of other devices are kept")
    ap.add_argument("--model", choices=("demo", "random-big", "random-tiny"), default=None,
                    help="default: the demo on the CPU, the 1.1 B random Llama on a GPU (random-tiny: a dry run)")
    ap.add_argument("--new-tokens", type=int, default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    new_tokens = args.new_tokens or (256 if args.device == "cuda" else 128)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="zb-chat-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("ZEROBOARD_WAIT_FOREIGN_S", "600")  # a shared machine: wait for another job's CPU
    if args.device == "cpu":  # one thread each: on a shared 2-core machine, spinning OpenMP threads measure the load
        os.environ.setdefault("OMP_NUM_THREADS", "1")

    # the worker and its supervisor are processes of their own: they find this checkout's package as this one does
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "app"), os.environ.get("PYTHONPATH")) if p)
    which = args.model or ("random-big" if args.device == "cuda" else "demo")
    model_dir, name, dtype, prompt = model_for(args.device, which, work)
    w, b = measure(model_dir, args.device, dtype, prompt, new_tokens, args.reps, work)
    from zeroboard.job import devices

    gpus = devices.detect_gpus()
    row = {"device": args.device, "machine": gpus[0].name if args.device == "cuda" and gpus else f"{os.cpu_count()} CPU cores",
           "model": name, "parameters": b["parameters"], "dtype": dtype, "prompt_tokens": b["prompt_tokens"],
           "max_new_tokens": new_tokens, "decoding": "greedy", "reps": args.reps, "worker": w, "bare": b,
           # each worker run against the bare run just before it, then the median: the machine's load drifts less
           # between two neighbouring runs than over the whole measurement
           "ratio_tokens_per_s": _median(w["pair_ratios"]),
           "ratio_of_medians": round(w["tokens_per_s"] / b["tokens_per_s"], 3),
           "ratio_ttft": round(w["ttft_s"] / b["ttft_s"], 3) if w["ttft_s"] and b["ttft_s"] else None,
           "measured": time.strftime("%Y-%m-%d %H:%M"), "load_avg": os.getloadavg()[0],
           "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    rows = []
    for src in (args.merge, args.out):
        if src and Path(src).is_file():
            rows = [r for r in json.loads(Path(src).read_text()).get("rows", []) if r.get("device") != args.device]
            break
    if which == "random-tiny":  # a dry run of the GPU path: printed, not kept
        print(json.dumps(row, indent=2))
        return 0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"what": __doc__.splitlines()[0], "rows": rows + [row]}, indent=2) + "\n")
    print(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
