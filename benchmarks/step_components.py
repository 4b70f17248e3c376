"""The pieces of a training step, each timed alone on the GPU: what ``--fit``'s throughput model is built from.

    python benchmarks/step_components.py --out benchmarks/results/step_components.json   # GPU, about 20 s
    python benchmarks/step_components.py --cpu                                           # the harness, tiny sizes

- ``matmul_tflops``: bf16 matmuls of a layer's shapes (tokens x hidden by hidden x intermediate), forward size;
- ``attention``: SDPA's causal kernel, forward + backward, one sequence, at several lengths (no mask: flash or
  cuDNN), and with a padding mask (the memory-efficient kernel a padded micro-batch gets);
- ``copy_gbps``: a bf16 -> fp32 conversion (what ZeRO-2's step and autocast's casts stream);
- ``adamw_ns_per_param``: torch's fused AdamW over fp32 parameters (the step without DeepSpeed, and ZeRO-2's on its
  partition).
Each is the median of timed repeats after warm-up, with CUDA events.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def timed(fn, device: str, repeats: int = 10, warm: int = 3) -> float:
    import time

    import torch

    for _ in range(warm):
        fn()
    out = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return statistics.median(out)


def run(device: str, small: bool) -> dict:
    import torch
    import torch.nn.functional as F

    dt = torch.bfloat16
    res: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__}
    shapes = [(4096, 2048, 8192), (16384, 2048, 11008), (8192, 2560, 10240), (8192, 3072, 8192)]
    if small:
        shapes = [(64, 32, 64)]
    mm = []
    for t, hdim, inter in shapes:
        x, w = torch.randn(t, hdim, device=device, dtype=dt), torch.randn(hdim, inter, device=device, dtype=dt)
        s = timed(lambda x=x, w=w: x @ w, device)
        mm.append({"tokens": t, "in": hdim, "out": inter, "s": s, "tflops": 2 * t * hdim * inter / s / 1e12})
    res["matmul"] = mm
    att = []
    heads, d = (16, 128) if not small else (2, 16)
    for seq in ((2048, 4096, 8192) if not small else (32,)):
        for masked in (False, True):
            q, k, v = (torch.randn(1 if not masked else 2, heads, seq, d, device=device, dtype=dt, requires_grad=True)
                       for _ in range(3))
            mask = None
            if masked:
                mask = torch.ones(seq, seq, device=device, dtype=torch.bool).tril()[None, None].repeat(2, 1, 1, 1)
                mask[1, :, :, -7:] = False

            def step(q=q, k=k, v=v, mask=mask):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
                o.sum().backward()

            s = timed(step, device, repeats=5) / q.shape[0]
            flops = 4 * heads * d * seq * seq / 2 * 3.5  # causal: half the scores; backward 2.5 x forward
            att.append({"seq": seq, "heads": heads, "head_dim": d, "masked": masked, "s_per_sequence": s,
                        "tflops": flops / s / 1e12})
    res["attention"] = att
    n = 256 << 20 if not small else 1 << 16
    src = torch.randn(n, device=device, dtype=dt)
    s = timed(lambda: src.float(), device)
    res["copy_gbps"] = n * 6 / s / 1e9
    p = [torch.nn.Parameter(torch.randn(n // 4, device=device)) for _ in range(4)]
    for q in p:
        q.grad = torch.randn_like(q)
    opt = torch.optim.AdamW(p, lr=1e-5, fused=device == "cuda")
    s = timed(opt.step, device)
    res["adamw_ns_per_param"] = s / n * 1e9
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    res = run("cpu" if a.cpu else "cuda", a.cpu)
    print(json.dumps(res, indent=1))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
