"""Which part of `torch_compile` + pure bf16 + Liger fails with a CUDA illegal memory access (issue 26, part 5).

A 4-layer Llama (hidden 2048, the bench's widths), bf16, a few training steps of torch.compile'd forward and
backward, each variant in its own process (an illegal address poisons the CUDA context): Liger's whole set for
llama, Liger without the fused linear cross-entropy, no Liger. Prints one JSON line per variant.

    python benchmarks/compile_repro.py [--variants liger,liger_no_flce,plain] [--timeout-s 90]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
variant = sys.argv[1]
if variant != "plain":
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    apply_liger_kernel_to_llama(fused_linear_cross_entropy=variant == "liger", cross_entropy=False)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=32,
                  num_key_value_heads=4, vocab_size=32000)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16)
model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
ids = torch.randint(0, 32000, (8, 1024), device="cuda")
for step in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step(); opt.zero_grad()
    torch.cuda.synchronize()
print("REPRO " + json.dumps({"variant": variant, "ok": True, "loss": float(loss)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="liger,liger_no_flce,plain")
    ap.add_argument("--timeout-s", type=float, default=90)
    a = ap.parse_args()
    for v in a.variants.split(","):
        try:
            p = subprocess.run([sys.executable, "-c", CHILD, v], capture_output=True, text=True, timeout=a.timeout_s)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("REPRO ")), None)
            out = json.loads(line[6:]) if line else {"variant": v, "ok": False, "error": (p.stderr or "")[-1200:]}
        except subprocess.TimeoutExpired:
            out = {"variant": v, "ok": None, "error": f"not done in {a.timeout_s:.0f} s"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
