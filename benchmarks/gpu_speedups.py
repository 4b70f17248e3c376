"""What each speed-up gives: full fine-tuning of the 1.1 B Llama without DeepSpeed on one GPU.

Every variant runs through `zeroboard train` (the web UI's path) on the model and
data of benchmarks/gpu_harness.py (bf16, sequence 1024, micro-batch 8), one change
at a time, and reports median step time, tokens/s, MFU, peak memory and the loss
of the first and last step (to show the numerics did not change). Packing is
measured on a second dataset whose samples vary in length (64 to 1024 tokens):
there the figure that counts is real (non-pad) tokens per second.

    python benchmarks/gpu_speedups.py --out benchmarks/results/h200_speedups.json [--steps 20] [--only a,b]
    python benchmarks/gpu_speedups.py --tiny --out /tmp/s.json   # the harness on CPU; measures nothing
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_harness as gh  # noqa: E402
import gpu_rows  # noqa: E402

# name -> (spec changes, dataset: "full" = every sample 1024 tokens, "varied" = 64..1024)
VARIANTS: dict[str, tuple[dict, str]] = {
    "before (fp32 master + autocast, torch kernels)": ({"liger_kernel": "off"}, "full"),
    "unfused AdamW": ({"liger_kernel": "off", "extra_args": {"optim": "adamw_torch"}}, "full"),
    "eager attention": ({"liger_kernel": "off", "attn_implementation": "eager"}, "full"),
    "Liger kernels (the default now)": ({}, "full"),
    "pure bf16": ({"liger_kernel": "off", "pure_bf16": True}, "full"),
    "pure bf16 + Liger": ({"pure_bf16": True}, "full"),
    "pure bf16 + Liger + torch.compile": ({"pure_bf16": True, "extra_args": {"torch_compile": True}}, "full"),
    "varied lengths, padded": ({}, "varied"),
    "varied lengths, packed": ({"packing": True}, "varied"),
}


def make_varied_data(path: Path, vocab: int, seq: int, n: int = 4096) -> None:
    """Alpaca records of about seq/16 to `seq` tokens, uniformly: a batch of them is about half padding."""
    if path.is_file():
        return
    rng = random.Random(1)
    words = lambda k: " ".join(f"w{rng.randrange(vocab - 8)}" for _ in range(k))  # noqa: E731
    path.write_text(json.dumps([{"instruction": words(8), "input": "", "output": words(rng.randrange(seq // 16, seq))}
                                for _ in range(n)]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="", help="comma list of variant numbers (1-based) to run")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--workdir", default="/tmp/zb-matrix")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, gh.stop_children)

    bench = gh.Bench(Path(a.workdir), a.tiny)
    bench.prepare()
    varied = bench.work / f"data-varied-{bench.seq}.json"
    make_varied_data(varied, bench.shape["vocab_size"], bench.seq)
    peak = gh.peak_matmul_tflops()
    flops = gh.flops_per_token(bench.shape, bench.seq, "full")
    batch = 2 if a.tiny else 8
    results = {"model": {**bench.shape, "seq": bench.seq, "micro_batch": batch}, "matmul_tflops": peak,
               "flops_per_token": flops, "rows": []}
    only = {int(i) for i in a.only.split(",") if i}
    for i, (name, (changes, which)) in enumerate(VARIANTS.items(), 1):
        if only and i not in only:
            continue
        spec = {**changes, **({"dataset": [str(varied)]} if which == "varied" else {})}
        row = gpu_rows.Row(f"speedup-{i}", "full", "none", steps=a.steps, spec=spec)
        job = gpu_rows.job_for(row, bench)
        if a.tiny:  # no GPU: pure bf16's point is the GPU's bf16 matmuls
            job = dataclasses.replace(job, pure_bf16=False, precision="fp32")
        zb = gpu_rows.run_zeroboard(row, job, bench)
        out = {"variant": name, "changes": changes, "data": which, **{k: v for k, v in zb.items() if k != "steps_s"}}
        if "step_s" in zb:
            out["tokens_per_s"] = batch * bench.seq / zb["step_s"]  # row slots per second (pad included)
            real = zb.get("real_tokens_per_s") or out["tokens_per_s"]
            out["mfu"] = real * flops / (peak * 1e12) if peak else None  # on real tokens only
        print(json.dumps(out), flush=True)
        results["rows"].append(out)
        Path(a.out).write_text(json.dumps(results, indent=2))
    print_table(results)


def print_table(results: dict) -> None:
    print(f"\n{'variant':<44}{'step s':>8}{'real tok/s':>11}{'MFU':>7}{'torch GiB':>10}{'NVML GiB':>9}  loss first/last")
    for r in results["rows"]:
        if "error" in r:
            print(f"{r['variant']:<44} FAILED: {r['error'][-300:]!r}")
            continue
        mfu = f"{r['mfu']:7.1%}" if r.get("mfu") else "      -"
        first, last = r["losses"][0], r["losses"][-1]
        print(f"{r['variant']:<44}{r['step_s']:8.3f}{r.get('real_tokens_per_s') or 0:11.0f}{mfu}{r['torch_peak_gib']:10.1f}"
              f"{r['nvml_peak_gib']:9.1f}  {first:.3f} / {last:.3f}")


if __name__ == "__main__":
    main()
