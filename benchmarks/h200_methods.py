"""Issue 37 on one H200: DPO with LoRA under none / ZeRO-2 / ZeRO-3, QLoRA (4 bit) under ZeRO-2 / ZeRO-3.

A random-init Llama of about 1.1 B parameters (gpu_matrix.py's ``BIG``: hidden 2048, 22 layers, vocab 32000), bf16,
one GPU, ``--steps`` steps; DPO on pairs of random-word answers (a ``ranking: true`` dataset, every answer about
``--seq`` / 2 tokens), QLoRA as SFT on gpu_matrix's records.  Each row runs through ``zeroboard train`` (the argv the
page starts) with the NVML sampler on, and records the median tokens/s of its logged steps, NVML's peak, the plan's
``needed`` figure (allocator peak plus what NVML adds) and its error against NVML, and the last rewards of a DPO row.

    python benchmarks/h200_methods.py --json benchmarks/results/h200_methods.json [--rows dpo-none,qlora-3]
    python benchmarks/h200_methods.py --dry-run --json /tmp/methods.json   # the same on CPU, tiny shapes

The dry run uses gpu_matrix.py's ``TINY`` shape on 2 CPU processes: the DPO rows train; the QLoRA rows are refused
before launch (no GPU), and the refusal is the row's result.  The results file says which it holds (``device``).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_matrix as gm  # noqa: E402 - the model, the NVML sampler, the job runner
from zeroboard.job import checks, devices, record as events, spec as specmod  # noqa: E402

ROWS = {"dpo-none": dict(training_stage="dpo", deepspeed_stage="none"),
        "dpo-2": dict(training_stage="dpo", deepspeed_stage="2"),
        "dpo-3": dict(training_stage="dpo", deepspeed_stage="3"),
        "qlora-2": dict(quantization_bit=4, deepspeed_stage="2"),
        "qlora-3": dict(quantization_bit=4, deepspeed_stage="3")}


def make_pairs(folder: Path, vocab: int, seq: int, n: int = 512) -> None:
    """Pairs of random-word answers (alpaca, ranking: true) and the SFT records, with their dataset_info.json."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = lambda k: " ".join(f"w{rng.randrange(vocab - 8)}" for _ in range(k))  # noqa: E731
    pairs = [{"instruction": words(8), "input": "", "chosen": words(seq // 2), "rejected": words(seq // 2)}
             for _ in range(n)]
    (folder / "pairs.json").write_text(json.dumps(pairs))
    gm.make_data(folder / "sft.json", vocab, seq)
    (folder / "dataset_info.json").write_text(json.dumps({
        "pairs": {"file_name": "pairs.json", "ranking": True,
                  "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}},
        "sft": {"file_name": "sft.json"}}))


def job_of(name: str, a, model: Path, data: Path, work: Path) -> specmod.JobSpec:
    row = ROWS[name]
    pref = row.get("training_stage") == "dpo"
    return specmod.JobSpec(model_name_or_path=str(model), finetuning_type="lora", dataset_dir=str(data),
                           dataset=["pairs" if pref else "sft"], cutoff_len=a.seq, max_steps=a.steps,
                           per_device_train_batch_size=a.batch, logging_steps=1, learning_rate=1e-5,
                           lora_rank=16, lora_alpha=32, template="plain", precision="fp32" if a.dry_run else "bf16",
                           device_type="cpu" if a.dry_run else "auto", num_processes=2 if a.dry_run else 1,
                           output_dir=str(work / name), **row)


def plan_of(job: specmod.JobSpec, gpus) -> dict:
    from zeroboard import planner

    try:
        p = planner.estimate(job, gpus)
    except Exception as e:  # reported with the row
        return {"plan_error": f"{type(e).__name__}: {e}"}
    return {"planned_peak_gib": p.peak_bytes / 2**30, "planned_needed_gib": p.needed_bytes / 2**30,
            "planned_weights_gib": p.breakdown["weights"] / 2**30}


def measure(name: str, a, model: Path, data: Path, work: Path, gpus) -> dict:
    job = job_of(name, a, model, data, work)
    row: dict = {"job": specmod.changed(job), **plan_of(job, gpus)}
    report = checks.validate(job, gpus)
    if not report.ok:  # QLoRA on CPU: the refusal is the result
        row["refused"] = {k: str(v) for k, v in report.errors.items()}
        return row
    path = work / f"{name}.yaml"
    path.write_text(specmod.dump_yaml(job, full=False))
    t0 = time.time()
    p, sampler = gm.sampled(lambda: gm.run_job([sys.executable, "-m", "zeroboard.cli", "train", str(path)], cwd=gm.ROOT))
    row["wall_s"] = round(time.time() - t0, 1)
    evs = events.read_events(Path(job.output_dir) / events.EVENTS_FILE)
    if p.returncode:
        row["error"] = "; ".join(e.get("message", "") for e in evs if e["event"] == "error")[:1500] or \
            (p.stderr or p.stdout)[-1500:]
        return row
    logs = [e for e in evs if e["event"] == "log"]
    row["tokens_per_s"] = statistics.median(e["tokens_per_sec"] for e in logs[2:]) if len(logs) > 2 else None
    row["nvml_peak_gib"] = sampler.peak / 2**30 if sampler.peak else None
    row["torch_peak_gib"] = max(m.get("torch_peak_bytes", 0) for m in logs[-1]["memory"]) / 2**30
    if row["nvml_peak_gib"] and row.get("planned_needed_gib"):
        row["plan_error"] = (row["planned_needed_gib"] - row["nvml_peak_gib"]) / row["nvml_peak_gib"]
    if logs[-1].get("rewards"):
        row["rewards_last"] = logs[-1]["rewards"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes: the harness itself, no H200 figure")
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    if a.dry_run:
        a.steps, a.seq, a.batch = min(a.steps, 3), min(a.seq, 64), min(a.batch, 2)
    signal.signal(signal.SIGTERM, gm.stop_children)
    work = a.work or Path(tempfile.mkdtemp(prefix="zb-methods-", dir=gm.ROOT / "runs" if (gm.ROOT / "runs").is_dir() else None))
    shape = gm.TINY if a.dry_run else gm.BIG
    model, data = work / "model", work / "data"
    gm.make_model(model, shape, a.seq)
    make_pairs(data, shape["vocab_size"], a.seq)
    gpus = [] if a.dry_run else devices.detect_gpus()
    out = {"device": "cpu (dry run, tiny shape)" if a.dry_run else (gpus[0].name if gpus else "no GPU"),
           "shape": shape, "seq": a.seq, "micro_batch": a.batch, "steps": a.steps, "rows": {}}
    for name in [r for r in a.rows.split(",") if r]:
        out["rows"][name] = row = measure(name, a, model, data, work, gpus)
        print(f"{name:9s} " + json.dumps({k: v for k, v in row.items() if k != "job"})[:300], flush=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if all("error" not in r for r in out["rows"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
