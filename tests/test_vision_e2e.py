"""End-to-end: a vision-language model trained on images, 2 CPU processes, real DeepSpeed, transformers and peft.

LLaMA-Factory's own Qwen3-VL full fine-tuning example (its ZeRO-3 config, the vision tower and projector frozen, its
``mllm_demo`` images mixed with two text datasets, one sample a process per step: steps where a process has no image
run the vision tower on the masked fake image), on the built-in tiny Qwen3-VL; and the product's own example
(examples/vision.yaml: ``zeroboard demo-model --vision``, full fine-tuning under ZeRO-3 as shipped, then LoRA on it,
merged into a model of its own).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from zeroboard.job import record as events

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "llamafactory"
MLLM_IMAGES = {"1.jpg": (300, 168), "2.jpg": (300, 199), "3.jpg": (300, 166)}


def zeroboard(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeroboard.cli", *args], capture_output=True, text=True, timeout=900,
                          cwd=cwd, env=env)


def losses(run_dir: Path) -> list[float]:
    return [e["loss"] for e in events.read_events(run_dir / events.EVENTS_FILE) if e["event"] == "log"]


def test_llamafactorys_qwen3_vl_full_example_trains_with_zero3_and_keeps_the_vision_tower(tmp_path, monkeypatch):
    import torch
    from PIL import Image
    from safetensors.torch import load_file

    from zeroboard.training.demo_vision import build_vision_model

    root = tmp_path / "LLaMA-Factory"
    shutil.copytree(FIXTURE / "data", root / "data")
    shutil.copytree(FIXTURE / "examples", root / "examples")
    (root / "data" / "mllm_demo_data").mkdir()
    for name, size in MLLM_IMAGES.items():
        Image.new("RGB", size, (40 * len(name), 90, 160)).save(root / "data" / "mllm_demo_data" / name)
    base = build_vision_model(root / "vision-model", tmp_path / "text")
    job = yaml.safe_load((FIXTURE / "examples/train_full/qwen3vl_full_sft.yaml").read_text(encoding="utf-8"))
    # the model here, a few steps, a log each step; the rest as LLaMA-Factory ships it (bf16, ZeRO-3, cutoff 2048)
    job.update(model_name_or_path="vision-model", max_steps=4, logging_steps=1, save_steps=0, max_samples=8,
               output_dir="saves/vl-full")
    (root / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False), encoding="utf-8")
    env = {**__import__("os").environ, "ZEROBOARD_WORKSPACE": str(root)}
    p = zeroboard("train", "job.yaml", cwd=root, env=env)
    out = root / "saves/vl-full"
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    result = json.loads((out / "zeroboard_result.json").read_text())
    assert result["kind"] == "full_model" and result["deepspeed_stage"] == "3"
    assert "AutoModelForImageTextToText" in result["loads_with"] and (out / "preprocessor_config.json").is_file()
    data = [e for e in events.read_events(out / events.EVENTS_FILE) if e["event"] == "data"]
    assert data and data[0]["skipped"] == 0 and len(losses(out)) == 4

    # the frozen parts are the base's (in the run's bf16), the language model trained
    before, after = load_file(base / "model.safetensors"), load_file(out / "model.safetensors")
    visual = [k for k in before if ".visual." in k]
    assert visual and all(torch.equal(before[k].to(after[k].dtype), after[k]) for k in visual)
    assert not torch.equal(before["lm_head.weight"].to(torch.bfloat16), after["lm_head.weight"])

    # what was saved loads as a vision-language model and reads a picture
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from zeroboard.job.spec import JobSpec
    from zeroboard.training import templates, vision

    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(out)
    monkeypatch.chdir(root)
    seen = vision.Vision.of(JobSpec(model_name_or_path=str(out)), tok)
    conv, _ = seen.expand([{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Them."}],
                          ["data/mllm_demo_data/2.jpg"])
    ids, ranges = templates.encode_layouts(tok, [templates.Renderer.of(tok).layout(conv)])[0]
    labels = [t if any(a <= i < b for a, b in ranges) else -100 for i, t in enumerate(ids)]
    batch = vision.Collator(tok.pad_token_id, seen)([{"input_ids": ids, "labels": labels,
                                                      "images": ["data/mllm_demo_data/2.jpg"]}])
    with torch.no_grad():
        loss = model(**batch).loss
    assert torch.isfinite(loss)


def test_the_vision_example_builds_its_model_and_pictures_learns_them_and_trains_lora_on_the_language_model(tmp_path):
    p = zeroboard("demo-model", "--vision")
    assert p.returncode == 0, p.stderr[-2000:]
    assert Path("cache/demo/vision/preprocessor_config.json").is_file()
    assert len(list(Path("cache/demo/vision_data/demo_images").glob("*.png"))) == 8
    full = tmp_path / "full"
    p = zeroboard("train", "examples/vision.yaml", f"--set=output_dir={full}")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    seen = losses(full)
    assert seen[-1] < seen[0] / 2, seen  # the answers about the pictures are learned (6.6 -> 1.2 here)

    lora = tmp_path / "lora"
    p = zeroboard("train", "examples/vision.yaml", f"--set=output_dir={lora}", "--set=finetuning_type=lora",
                  "--set=max_steps=12", "--set=learning_rate=5e-3")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    result = json.loads((lora / "zeroboard_result.json").read_text())
    assert result["kind"] == "lora_adapter" and result["deepspeed_stage"] == "3"
    target = json.loads((lora / "adapter_config.json").read_text())["target_modules"]
    assert re.fullmatch(target, "model.language_model.layers.0.self_attn.q_proj")
    assert not re.fullmatch(target, "model.visual.blocks.0.attn.qkv") and not re.fullmatch(target, "lm_head")
    seen = losses(lora)
    assert seen[-1] < seen[0], seen

    merged = tmp_path / "merged"  # the adapter merged: a vision-language model of its own, with its image processor
    p = zeroboard("merge", str(lora), str(merged))
    assert p.returncode == 0, p.stderr[-2000:]
    assert (merged / "preprocessor_config.json").is_file()
    assert "AutoModelForImageTextToText" in json.loads((merged / "zeroboard_result.json").read_text())["loads_with"]
