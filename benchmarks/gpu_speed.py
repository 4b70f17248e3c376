"""Issue 36 on one H200: the matrix, ZeroBoard and the bare script in the same call, every row twice in ABBA order.

The 1.1 B Llama bench of docs/en/gpu-results.md (seq 1024, micro-batch 8, 20 steps), every row a gpu_rows.Row (the
same definition gpu_matrix.py uses). A part is one device call: its rows in blocks of two, so each ratio the issue
asks for (LoRA ZeRO-3 against LoRA alone, ...) is taken between two rows of one block of one call. The results are
written after every run; rows a deadline leaves out are named in ``not_run``.

    python benchmarks/gpu_speed.py --part issue36 --out $OUT/h200_speed.json --deadline-s 440  # the whole issue, one call
    python benchmarks/gpu_speed.py --part lora --tiny --out /tmp/s.json   # the harness on CPU; measures nothing
    python benchmarks/gpu_speed.py --list                                 # the parts, their rows and estimated time
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_harness as gh  # noqa: E402
import gpu_rows  # noqa: E402
from gpu_rows import Row  # noqa: E402

TRIAL = "ZEROBOARD_TRIAL"
# issue 26's one-GPU values, as job.dstune set them before issue 36 (the preset as written, then these)
ISSUE26 = {"_base": "preset", "zero_optimization": {"overlap_comm": False, "stage3_param_persistence_threshold": "params"}}
PROFILE = "18:20"

# each part is one device call; each inner list a block of two rows (ABBA); wall s per run: the issue 26 calls' own
PARTS: dict[str, list[list[Row]]] = {
    "lora": [
        [Row("lora-none", "lora", "none", bare=("same",), goal="MFU >= 35%"),
         Row("lora-3", "lora", "3", goal="lora-3 / lora-none >= 0.5", timeout=150)],
        [Row("lora-3@issue26", "lora", "3", ds=ISSUE26, timeout=170, goal="the before of lora-3, same call"),
         Row("lora-2", "lora", "2", goal="lora-2 / lora-none >= 0.85")],
    ],
    "full": [
        [Row("full-none", "full", "none", bare=("same", "fp32"), goal="MFU >= 55%, >= 0.98 of bare"),
         Row("full-3", "full", "3", profile=PROFILE, goal="full-3 / full-none >= 0.6")],
        [Row("full-2", "full", "2", goal="full-2 / full-none >= 0.9")],
    ],
    "trials-lora": [
        [Row("lora-none", "lora", "none"),
         Row("lora-none+nocast", "lora", "none", env={TRIAL: "lora_nocast"}, goal="same losses, faster")],
        [Row("lora-none+nocast+fusedA", "lora", "none", env={TRIAL: "lora_nocast,lora_fused_a"})],
        [Row("lora-3", "lora", "3", profile=PROFILE),
         Row("lora-3+adapters16", "lora", "3", env={TRIAL: "lora_adapters_16bit"}, profile=PROFILE)],
    ],
    "trials-full": [
        [Row("full-3", "full", "3"),
         Row("full-3+deepcompile", "full", "3", spec={"extra_args": {"torch_compile": True}},
             ds={"compile": {"deepcompile": True}}, timeout=240)],
        [Row("full-3+layer-buckets", "full", "3", ds={"zero_optimization": {"reduce_bucket_size": "layer"}}),
         Row("full-3+persistence-auto", "full", "3",
             ds={"zero_optimization": {"stage3_param_persistence_threshold": "auto"}}, timeout=170)],
    ],
}
# issue 36 in one device call, the rows in the order of the issue's goals: LoRA ZeRO-3 against LoRA alone, LoRA ZeRO-2,
# full ZeRO-3 and ZeRO-2 against full without DeepSpeed, then the trial changes; a deadline cuts from the end, so the
# blocks that ran hold both repeats each (the bare script and the rarer trials are the other parts, a follow-up call)
PARTS["issue36"] = [
    [Row("lora-none", "lora", "none", goal="MFU >= 35%"),
     Row("lora-3", "lora", "3", goal="lora-3 / lora-none >= 0.5", timeout=150)],
    [Row("lora-2", "lora", "2", goal="lora-2 / lora-none >= 0.85"),
     Row("full-none", "full", "none", goal="MFU >= 55%")],
    [Row("full-3", "full", "3", goal="full-3 / full-none >= 0.6"),
     Row("full-2", "full", "2", goal="full-2 / full-none >= 0.9")],
    [Row("lora-3+adapters16", "lora", "3", env={TRIAL: "lora_adapters_16bit"}, goal="lora-3+adapters16 / lora-none >= 0.5"),
     Row("lora-none+nocast", "lora", "none", env={TRIAL: "lora_nocast"}, goal="same losses, faster")],
    [Row("lora-none+nocast+fusedA", "lora", "none", env={TRIAL: "lora_nocast,lora_fused_a"}),
     Row("full-3+layer-buckets", "full", "3", ds={"zero_optimization": {"reduce_bucket_size": "layer"}})],
]
# seconds one run took on the H200 in issue 26's calls (wall of `zeroboard train`, start to exit); unknown: 60
WALL = {"full-none": 43, "full-2": 49, "full-3": 57, "lora-none": 29, "lora-2": 39, "lora-3": 73, "lora-3@issue26": 73,
        "full-3+deepcompile": 120}


def estimate_s(part: str, repeats: int = 2, blocks: int | None = None) -> float:
    """The expected wall time of the part's first ``blocks`` blocks (all: None): every run of every row, bare runs as
    long as ZeroBoard's."""
    return sum(WALL.get(r.name, WALL.get(r.name.split("+")[0], 60)) * (1 + len(r.bare)) * repeats
               for block in PARTS[part][:blocks] for r in block)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--part", choices=list(PARTS), default="lora")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--deadline-s", type=float, default=540, help="seconds from now after which no run starts")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--workdir", default="/tmp/zb-matrix")
    ap.add_argument("--peak-tflops", type=float, default=0, help="skip measuring the matmul peak (0: measure it)")
    ap.add_argument("--rows", default="", help="only these rows of the part (a comma list: what a cut call left out)")
    ap.add_argument("--list", action="store_true", help="print the parts, their rows and expected time, then stop")
    a = ap.parse_args()
    if a.list:
        for name, blocks in PARTS.items():
            print(f"{name}: about {estimate_s(name) / 60:.1f} min with 2 repeats")
            for i, block in enumerate(blocks):
                print("   block: " + " | ".join(r.name + (f" (+bare {','.join(r.bare)})" if r.bare else "") for r in block)
                      + f"  (done by {estimate_s(name, blocks=i + 1) / 60:.1f} min)")
        return
    blocks, key = PARTS[a.part], a.part
    if a.rows:  # a part of its own in the results (`issue36[full-3,full-2]`): the part's ratios need its own rows
        names = a.rows.split(",")
        if unknown := set(names) - {r.name for b in blocks for r in b}:
            sys.exit(f"--rows: not in part {a.part}: {', '.join(sorted(unknown))}")
        blocks = [kept for b in blocks if (kept := [r for r in b if r.name in names])]
        key = f"{a.part}[{a.rows}]"
    t_end = time.time() + a.deadline_s
    signal.signal(signal.SIGTERM, gh.stop_children)
    bench = gh.Bench(Path(a.workdir), a.tiny)
    bench.prepare()
    meta = {"issue": 36, "part": key, "model": {**bench.shape, "seq": bench.seq},
            "matmul_tflops": a.peak_tflops or gh.peak_matmul_tflops()}
    out = a.out or Path(f"/tmp/h200_speed-{a.part}.json")
    results = gpu_rows.measure(blocks, bench, lambda r: save(out, key, r), a.repeats, t_end, meta)
    print_table(results)


def save(out: Path, part: str, results: dict) -> None:
    """This part's results, with the goals' ratios, into ``out`` beside the parts other calls wrote there."""
    results["ratios"] = {f"{n} / {d}": gpu_rows.ratio(results, n, d) for n, d in RATIOS.get(part.split("[")[0], [])
                         if n in results["rows"] and d in results["rows"]}
    whole = json.loads(out.read_text()) if out.is_file() else {}
    whole = whole if "parts" in whole else {"issue": 36, "parts": {}}
    whole["parts"][part] = results
    tmp = out.with_name(out.name + ".tmp")  # whole or not at all: the call's timeout may stop this process any time
    tmp.write_text(json.dumps(whole, indent=1) + "\n")
    tmp.replace(out)


# (row, its reference row): the issue's goals are the reference's step time over the row's (how fast the row runs)
RATIOS = {"lora": [("lora-3", "lora-none"), ("lora-2", "lora-none"), ("lora-3@issue26", "lora-none"),
                   ("lora-3@issue26", "lora-3")],
          "full": [("full-3", "full-none"), ("full-2", "full-none")],
          "trials-lora": [("lora-none+nocast", "lora-none"), ("lora-none+nocast+fusedA", "lora-none"),
                          ("lora-3+adapters16", "lora-3")],
          "issue36": [("lora-3", "lora-none"), ("lora-2", "lora-none"), ("full-3", "full-none"), ("full-2", "full-none"),
                      ("lora-3+adapters16", "lora-none"), ("lora-3+adapters16", "lora-3"), ("lora-none+nocast", "lora-none"),
                      ("lora-none+nocast+fusedA", "lora-none"), ("full-3+layer-buckets", "full-3")],
          "trials-full": [("full-3+deepcompile", "full-3"), ("full-3+layer-buckets", "full-3"),
                          ("full-3+persistence-auto", "full-3")]}


def print_table(results: dict) -> None:
    print(f"\n{'row':<26}{'runs':>5}{'step s':>8}{'tok/s':>9}{'MFU':>7}  bare s (bare/ZeroBoard)   losses first/last")
    for name, e in results["rows"].items():
        runs = [z for z in e["zeroboard"] if "step_s" in z]
        if not runs:
            err = next((z.get("error", "") for z in e["zeroboard"]), "")
            print(f"{name:<26} FAILED: {err[-200:]!r}" if err else f"{name:<26} not run")
            continue
        mfu = f"{e['mfu']:7.1%}" if e.get("mfu") else "      -"
        bare = ", ".join(f"{m} {s:.3f} ({e['zeroboard_over_bare'][m]:.3f})" for m, s in (e.get("bare_step_s") or {}).items())
        losses = runs[0]["losses"]
        print(f"{name:<26}{len(runs):>5}{e['step_s']:8.3f}{e['tokens_per_s']:9.0f}{mfu}  {bare or '-':<24}"
              f"  {losses[0]:.4f} / {losses[-1]:.4f}")
    for k, v in (results.get("ratios") or {}).items():
        print(f"{k}: {v:.3f}" if v else f"{k}: -")
    if results.get("not_run"):
        print("not run:", ", ".join(results["not_run"]))


if __name__ == "__main__":
    main()
