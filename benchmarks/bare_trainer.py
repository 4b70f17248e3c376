"""A bare HF Trainer script: the baseline ZeroBoard's trainer is measured against.

No ZeroBoard code in the training path: it reads the same demo JSON files, renders
them with the tokenizer's chat template, masks the prompt, and trains with the
same TrainingArguments. Run it under torchrun like ZeroBoard's trainer:

    torchrun --nproc_per_node 2 benchmarks/bare_trainer.py --model M --data D1.json [--data D2.json] \
        --output_dir O --finetuning lora --max_steps 200 [--deepspeed cfg.json] [--cpu | --bf16]

Prints one JSON line with the Trainer's metrics, the time of every step and the
allocator's peak (rank 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []
        self.losses: list[float] = []
        self.last = None

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])
        # the same hook ZeroBoard's event stream times its steps with (the loss read syncs the GPU)
        now = time.perf_counter()
        if self.last is not None:
            self.times.append(now - self.last)
        self.last = now


def examples(files: list[str], tokenizer, cutoff: int) -> list[dict]:
    rows = []
    for name in files:
        for r in json.loads(Path(name).read_text()):
            q = r["instruction"] + ("\n" + r["input"] if r.get("input") else "")
            user = [{"role": "user", "content": q}]
            prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
            full = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": r["output"]}], tokenize=False)
            p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            ids = tokenizer(full, add_special_tokens=False)["input_ids"][:cutoff]
            rows.append({"input_ids": ids, "labels": [-100] * len(p_ids) + ids[len(p_ids):]})
    return rows


def collate(pad_id: int):
    def fn(batch):
        width = max(len(b["input_ids"]) for b in batch)
        pad = lambda seq, v: seq + [v] * (width - len(seq))
        return {"input_ids": torch.tensor([pad(b["input_ids"], pad_id) for b in batch]),
                "labels": torch.tensor([pad(b["labels"], -100) for b in batch]),
                "attention_mask": torch.tensor([pad([1] * len(b["input_ids"]), 0) for b in batch])}
    return fn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", action="append", required=True, help="alpaca JSON file (repeatable)")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--finetuning", choices=["lora", "full"], default="lora")
    p.add_argument("--max_steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--cutoff", type=int, default=128)
    p.add_argument("--deepspeed", default=None)
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--logging_steps", type=int, default=5)
    p.add_argument("--lora_r", type=int, default=16)
    p.add_argument("--lora_alpha", type=int, default=None, help="default: 2 x r")
    p.add_argument("--extra_args", default=None, help="JSON of further TrainingArguments (torch_compile, ...)")
    p.add_argument("--liger_config", default=None, help="JSON of Liger kernel options: turns Liger on")
    p.add_argument("--pure_bf16", action="store_true", help="load the model in bf16 without DeepSpeed (no fp32 master)")
    p.add_argument("--split_master", action="store_true",
                   help="bf16 weights + ZeroBoard's SplitAdamW kernel (the same optimizer as ZeroBoard's default)")
    p.add_argument("--base16", action="store_true", help="LoRA: the frozen base in bf16, fp32 adapters under autocast")
    p.add_argument("--scheduler", default="cosine")
    a = p.parse_args()

    args = TrainingArguments(
        output_dir=a.output_dir, max_steps=a.max_steps, per_device_train_batch_size=a.batch, learning_rate=a.lr,
        lr_scheduler_type=a.scheduler, logging_steps=a.logging_steps, save_strategy="no", report_to="none", disable_tqdm=True,
        remove_unused_columns=False, use_cpu=a.cpu, ddp_backend="gloo" if a.cpu else None, bf16=a.bf16,
        deepspeed=a.deepspeed, seed=42, **json.loads(a.extra_args or "{}"),
        **({"use_liger_kernel": True, "liger_kernel_config": json.loads(a.liger_config)} if a.liger_config else {}),
    )
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    # fp32 weights + autocast without DeepSpeed; DeepSpeed casts a 16-bit model itself
    dtype = torch.bfloat16 if (a.bf16 and (a.deepspeed or a.pure_bf16 or a.base16)) else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype)
    optimizer = None
    if a.split_master:  # the optimizer kernel is ZeroBoard's; nothing else of ZeroBoard is in this script's path
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
        from zeroboard.training import master

        optimizer = (master.SplitAdamW, dict(lr=a.lr, low_bits=master.split_model(model)))
    if a.finetuning == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=a.lora_r, lora_alpha=a.lora_alpha or 2 * a.lora_r,
                                                 target_modules="all-linear"), autocast_adapter_dtype=not a.pure_bf16)
        zero = json.loads(Path(a.deepspeed).read_text()).get("zero_optimization", {}) if a.deepspeed else {}
        if zero.get("leaf_module"):  # ZeRO-3 leaves with LoRA need an input that requires grad (DeepSpeed's rule)
            model.enable_input_require_grads()
    timer = StepTimer()
    trainer = Trainer(model=model, args=args, train_dataset=examples(a.data, tokenizer, a.cutoff),
                      data_collator=collate(tokenizer.pad_token_id), callbacks=[timer], optimizer_cls_and_kwargs=optimizer)
    out = trainer.train()
    if trainer.is_world_process_zero():
        peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
        print("BARE_METRICS " + json.dumps({**out.metrics, "step_times": timer.times, "losses": timer.losses,
                                                "torch_peak_bytes": peak}), flush=True)


if __name__ == "__main__":
    main()
