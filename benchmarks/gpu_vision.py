"""Vision-language training on a GPU, through the product's own launch path (``zeroboard train``, ``zeroboard plan``).

Rows: the built-in tiny Qwen3-VL (``zeroboard demo-model --vision``) under each stage (none, 2, 3), full and LoRA, on
its pictures (``examples/vision.yaml``): does it train on CUDA, bf16, with the speed-ups the GPU gets; then a Qwen3-VL
of about 2 B parameters with random weights (the shapes in ``MID``, the demo tokenizer: the memory plan compared with
the allocator's measured peak, which no tiny model can show).  Each row: its exit status, the losses, tokens/s, the
peak torch allocation of each step logged, the plan's allocator peak, and the log's tail when it failed.

    python3 benchmarks/gpu_vision.py --out results.json [--device cuda] [--rows tiny|all] [--deadline-s 540]

The JSON is written after each row (a cut call keeps what it measured).  ``--device cpu --rows tiny`` is the dry run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

# a Qwen3-VL of about 2 B parameters (random weights): what the planner must count on a real card
MID = dict(text=dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=8192),
           vision=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2048,
                       deepstack_visual_indexes=[5, 11, 17], num_position_embeddings=2304))
TINY_ROWS = [("tiny", stage, ft) for stage in ("none", "2", "3") for ft in ("full", "lora")]
MID_ROWS = [("mid", "none", "lora"), ("mid", "2", "full"), ("mid", "3", "full")]


def build_mid(out: Path, tiny: Path) -> Path:
    """The mid model: the tiny one's tokenizer and image processor, MID's shapes, bf16 on disk."""
    import torch
    from transformers import AutoTokenizer, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    if (out / "config.json").is_file():
        return out
    tok = AutoTokenizer.from_pretrained(tiny)
    small = json.loads((tiny / "config.json").read_text())
    ids = {k: small[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    text = {**MID["text"], "rope_parameters": small["text_config"]["rope_parameters"] | {"mrope_section": [24, 20, 20]},
            "pad_token_id": tok.pad_token_id, "eos_token_id": small["text_config"].get("eos_token_id"),
            "tie_word_embeddings": True}
    vision = {**MID["vision"], "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
    config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    for name in ("preprocessor_config.json", "chat_template.jinja"):
        if (tiny / name).is_file():
            (out / name).write_bytes((tiny / name).read_bytes())
    return out


def zeroboard(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeroboard.cli", *args], capture_output=True, text=True,
                          timeout=max(5, timeout), cwd=ROOT)


def run_row(model: Path, kind: str, stage: str, ft: str, device: str, work: Path, timeout: float) -> dict:
    from zeroboard.job import record as events

    out = work / f"{kind}-{stage}-{ft}"
    steps = 12 if kind == "tiny" else 6
    sets = [f"model_name_or_path={model}", f"device_type={device}", f"deepspeed_stage={stage}", f"finetuning_type={ft}",
            f"output_dir={out}", f"max_steps={steps}", f"logging_steps={3 if kind == 'tiny' else 2}", "num_processes=1"]
    if device == "cuda":
        sets.append("gpu_ids=[0]")
    if ft == "lora":
        sets.append("learning_rate=5e-3")
    flags = [f"--set={s}" for s in sets]
    row = {"model": kind, "stage": stage, "finetuning": ft}
    plan = zeroboard("plan", "--json", "examples/vision.yaml", *flags, timeout=120)
    try:
        row["plan_peak_bytes"] = json.loads(plan.stdout)["peak_bytes"]
    except (ValueError, KeyError):
        row["plan_error"] = (plan.stdout + plan.stderr)[-600:]
    t0 = time.time()
    try:
        p = zeroboard("train", "examples/vision.yaml", *flags, timeout=timeout)
        row["exit_code"] = p.returncode
    except subprocess.TimeoutExpired:
        row["exit_code"], p = "timeout", None
    row["seconds"] = round(time.time() - t0, 1)
    evs = events.read_events(out / events.EVENTS_FILE) if (out / events.EVENTS_FILE).is_file() else []
    logs = [e for e in evs if e["event"] == "log"]
    row["losses"] = [round(e["loss"], 4) for e in logs]
    row["tokens_per_sec"] = round(logs[-1].get("tokens_per_sec") or 0, 1) if logs else None
    peaks = [m.get("torch_peak_bytes") or 0 for e in evs for m in e.get("memory") or []]
    row["torch_peak_bytes"] = max(peaks) if peaks else None
    if row.get("plan_peak_bytes") and row["torch_peak_bytes"]:
        row["plan_error"] = round(row["plan_peak_bytes"] / row["torch_peak_bytes"] - 1, 4)
    if row["exit_code"] != 0:
        log = out / "train.log"
        row["tail"] = (log.read_text(errors="replace")[-1500:] if log.is_file() else "") or \
            ((p.stdout + p.stderr)[-1500:] if p else "")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", default="all", choices=("tiny", "all"))
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--work", type=Path, default=Path("/tmp/zb-vision"))
    a = ap.parse_args()
    t0 = time.time()
    a.work.mkdir(parents=True, exist_ok=True)
    os.environ["ZEROBOARD_ALLOW_PATHS"] = f"{a.work.resolve()}:rw"  # the runs write there, as --allow-path allows
    built = zeroboard("demo-model", "--vision", timeout=300)
    if built.returncode != 0:
        raise SystemExit(built.stderr[-2000:])
    tiny = ROOT / "cache/demo/vision"
    rows = TINY_ROWS + (MID_ROWS if a.rows == "all" else [])
    result = {"device": a.device, "mid_shapes": MID, "rows": []}
    try:
        import torch

        result["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    for kind, stage, ft in rows:
        left = a.deadline_s - (time.time() - t0)
        if left < 30:
            result["cut"] = f"deadline: {len(result['rows'])} of {len(rows)} rows"
            break
        model = tiny if kind == "tiny" else build_mid(a.work / "mid-model", tiny)
        row = run_row(model, kind, stage, ft, a.device, a.work, min(left - 10, 240))
        result["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
        a.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
