"""The trainer each rank runs: ``python -m zeroboard.train --model_name_or_path ... [--deepspeed cfg.json]``.

Started by torchrun or the deepspeed launcher (never by hand in a shell that
lacks RANK/WORLD_SIZE, though a single process works too).  Reads top to
bottom: parse -> setup -> data -> model -> train -> save -> cleanup.

Writes into the output dir: ``job.yaml`` (the resolved job), ``events.jsonl``
(machine-readable progress), ``train.log`` (human log of rank 0),
``ds_config.json`` / ``ds_config.resolved.json`` (the DeepSpeed config given
and as the Trainer filled it), and ``zeroboard_result.json`` (what was saved).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import socket
import sys
import time
import traceback
from pathlib import Path

from . import checks, datasets, spec as specmod, templates
from .events import EventWriter

log = logging.getLogger("zeroboard.train")
RANK = int(os.environ.get("RANK", "0"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))


# --- small helpers ---------------------------------------------------------------

def setup_logging(output_dir: Path) -> None:
    fmt = logging.Formatter(f"%(asctime)s [rank{RANK}] %(levelname)s %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if RANK == 0:
        handlers.append(logging.FileHandler(output_dir / "train.log", encoding="utf-8"))
    for h in handlers:
        h.setFormatter(fmt)
    log.handlers[:] = handlers
    log.setLevel(logging.INFO if RANK == 0 else logging.WARNING)
    log.propagate = False


def wait_for_demo_model(model_dir: Path, data_dir: str, timeout: float = 600) -> None:
    """Rank 0 builds the demo model if it is missing; the other ranks wait for it."""
    if RANK == 0:
        from .demo import ensure_demo_model

        if not (model_dir / "config.json").is_file():
            log.info("building the demo model in %s", model_dir)
        ensure_demo_model(model_dir, data_dir)
        return
    deadline = time.time() + timeout
    while not (model_dir / "config.json").is_file():
        if time.time() > deadline:
            raise RuntimeError(f"rank 0 did not build the demo model in {model_dir} within {timeout:.0f} s")
        time.sleep(0.5)


_nvml_cache = {"at": 0.0, "peak": None}


def nvml_peak(pid: int, every: float = 5.0) -> int | None:
    """Peak of what NVML charges this process; asked at most every few seconds (an NVML query costs ms)."""
    from .devices import process_gpu_bytes

    now = time.time()
    if now - _nvml_cache["at"] >= every:
        _nvml_cache["at"] = now
        used = process_gpu_bytes(pid)
        if used is not None:
            _nvml_cache["peak"] = max(used, _nvml_cache["peak"] or 0)
    return _nvml_cache["peak"]


def memory_now(torch) -> dict:
    """This rank's peak memory: the CUDA allocator's and NVML's, and (always) the process RSS peak."""
    mem = {"rank": RANK, "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if torch.cuda.is_available():
        mem["torch_peak_bytes"] = torch.cuda.max_memory_allocated()
        mem["torch_reserved_peak_bytes"] = torch.cuda.max_memory_reserved()
        mem["nvml_peak_bytes"] = nvml_peak(os.getpid())
    return mem


class TokenCounter:
    """Collator that pads a batch and counts the real (non-pad) tokens it produced.

    Packed rows (with ``position_ids``) get no attention mask: transformers then
    reads sample boundaries from the restarting positions and builds a
    block-causal mask, so no token attends across samples (only when no KV cache
    is made: hence ``use_cache=False``). Their padding tail is a position run of
    its own with ignored labels.
    """

    def __init__(self, pad_id: int):
        self.pad_id = pad_id
        self.tokens = 0

    def __call__(self, features: list[dict]):
        import torch

        width = max(len(f["input_ids"]) for f in features)
        packed = "position_ids" in features[0]
        batch: dict[str, list] = {"input_ids": [], "labels": [], "position_ids" if packed else "attention_mask": []}
        for f in features:
            n = len(f["input_ids"])
            batch["input_ids"].append(f["input_ids"] + [self.pad_id] * (width - n))
            batch["labels"].append(f["labels"] + [templates.IGNORE] * (width - n))
            if packed:
                batch["position_ids"].append(f["position_ids"] + list(range(width - n)))
            else:
                batch["attention_mask"].append([1] * n + [0] * (width - n))
            self.tokens += n
        out = {k: torch.tensor(v) for k, v in batch.items()}
        if packed:
            out["use_cache"] = False  # with a KV cache object transformers skips the packed-sequence mask
        return out


def make_callback(events: EventWriter, counter: TokenCounter, launched_at: float, speedups: dict):
    import torch
    import torch.distributed as dist
    from transformers import TrainerCallback

    def gather(obj):
        # one process: no collective (an NCCL object gather copies through the GPU and syncs it, on every log)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            out = [None] * dist.get_world_size()
            dist.all_gather_object(out, obj)
            return out
        return [obj]

    class EventCallback(TrainerCallback):
        """Turns Trainer hooks into events. Hooks run on every rank, so gathers are safe here."""

        def on_train_begin(self, args, state, control, **kw):
            self.t0 = self.t_last = time.time()
            self.tokens_last = 0
            device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
            me = {"rank": RANK, "local_rank": LOCAL_RANK, "host": socket.gethostname(), "pid": os.getpid(),
                  "device": device, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
            ranks = gather(me)
            if RANK == 0:
                events.emit("start", world_size=WORLD_SIZE, devices=ranks, total_steps=state.max_steps,
                            since_launch=round(self.t0 - launched_at, 3), speedups=speedups)
                log.info("training starts: %d steps on %d process(es)", state.max_steps, WORLD_SIZE)

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            now = time.time()
            ranks = gather({"tokens": counter.tokens, "memory": memory_now(torch)})  # one collective per log
            tokens = sum(r["tokens"] for r in ranks)
            memory = [r["memory"] for r in ranks]
            if RANK != 0 or "loss" not in logs:
                return
            dt = max(now - self.t_last, 1e-9)
            elapsed = now - self.t0
            step, total = state.global_step, state.max_steps
            eta = elapsed / step * (total - step) if step else None
            events.emit("log", step=step, total_steps=total, loss=logs.get("loss"), lr=logs.get("learning_rate"),
                        epoch=logs.get("epoch"), grad_norm=logs.get("grad_norm"),
                        tokens_per_sec=(tokens - self.tokens_last) / dt, tokens=tokens,
                        elapsed=elapsed, eta=eta, memory=memory)
            log.info("step %d/%d loss %.4f lr %.2e %.0f tok/s eta %s", step, total, logs["loss"],
                     logs.get("learning_rate", 0.0), (tokens - self.tokens_last) / dt,
                     f"{eta:.0f}s" if eta is not None else "?")
            self.t_last, self.tokens_last = now, tokens

        def on_train_end(self, args, state, control, **kw):
            memory = gather(memory_now(torch))  # the whole run's peak, also when the last step logged nothing
            if RANK == 0:
                events.emit("memory", step=state.global_step, memory=memory)

        def on_save(self, args, state, control, **kw):
            if RANK == 0:
                path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                events.emit("save", step=state.global_step, path=str(path))
                log.info("saved checkpoint %s", path)

    return EventCallback()


def training_arguments(job: specmod.JobSpec, ds_config: dict | None, speed: Speedups):
    from transformers import TrainingArguments

    cpu = job.device_type == "cpu"
    kwargs = dict(
        output_dir=job.output_dir,
        learning_rate=job.learning_rate,
        num_train_epochs=job.num_train_epochs,
        max_steps=job.max_steps if job.max_steps > 0 else -1,
        lr_scheduler_type=job.lr_scheduler_type,
        warmup_steps=job.warmup_steps,
        per_device_train_batch_size=job.per_device_train_batch_size,
        gradient_accumulation_steps=job.gradient_accumulation_steps,
        max_grad_norm=job.max_grad_norm,
        weight_decay=job.weight_decay,
        bf16=job.precision == "bf16",
        fp16=job.precision == "fp16",
        gradient_checkpointing=job.gradient_checkpointing,
        logging_steps=job.logging_steps,
        save_strategy="steps" if job.save_steps > 0 else "no",
        save_steps=job.save_steps or 500,
        seed=job.seed,
        deepspeed=ds_config,
        use_cpu=cpu,
        report_to="none",
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    if cpu:
        kwargs["ddp_backend"] = "gloo"
    if speed.liger:
        kwargs.update(use_liger_kernel=True, liger_kernel_config=speed.liger_config)
    kwargs.update(job.extra_args)
    return TrainingArguments(**kwargs)


def build_dataset(job: specmod.JobSpec, tokenizer) -> list[dict]:
    convs = datasets.load(job.dataset, job.dataset_dir, job.max_samples)
    chat = templates.use_chat_template(tokenizer, job.template)
    rows = [templates.encode(c, tokenizer, chat, job.cutoff_len) for c in convs]
    rows = [r for r in rows if any(label != templates.IGNORE for label in r["labels"])]
    if not rows:
        raise ValueError(f"cutoff_len: {job.cutoff_len} tokens cut off every answer; raise cutoff_len")
    return pack(rows, job.cutoff_len) if job.packing else rows


def pack(rows: list[dict], width: int) -> list[dict]:
    """Best-fit-decreasing packing of samples into rows of at most ``width`` tokens.

    Each sample keeps its own positions (0, 1, ...), which is how the model tells
    samples apart. The first label of every sample is ignored: the loss would
    otherwise predict it from the previous sample's last token. Rows are found by
    their free space in a tree over 0..width, so a large dataset packs in
    O(n log width).
    """
    size = 1 << max(1, width).bit_length()
    count = [0] * (2 * size)  # count[size + r]: rows with r tokens free; inner nodes: sums
    open_rows: dict[int, list[int]] = {}  # free space -> indices of the rows with that much free

    def add(free: int, delta: int) -> None:
        i = size + free
        while i:
            count[i] += delta
            i //= 2

    def tightest(n: int) -> int | None:
        """The smallest free space >= n that some row has: up from leaf n to a right sibling with rows, then down."""
        i = size + n
        if count[i]:
            return n
        while i > 1:
            if i % 2 == 0 and count[i + 1]:
                i += 1
                while i < size:
                    i = 2 * i if count[2 * i] else 2 * i + 1
                return i - size
            i //= 2
        return None

    bins: list[list[dict]] = []
    for r in sorted(rows, key=lambda r: len(r["input_ids"]), reverse=True):
        n = len(r["input_ids"])
        free = tightest(n)
        if free is None:
            bins.append([])
            b, free = len(bins) - 1, width
        else:
            b = open_rows[free].pop()
            add(free, -1)
        bins[b].append(r)
        open_rows.setdefault(free - n, []).append(b)
        add(free - n, 1)
    packed = []
    for members in bins:
        row: dict[str, list[int]] = {"input_ids": [], "labels": [], "position_ids": []}
        for r in members:
            row["input_ids"] += r["input_ids"]
            row["labels"] += [templates.IGNORE] + r["labels"][1:]
            row["position_ids"] += list(range(len(r["input_ids"])))
        packed.append(row)
    return packed


class Speedups:
    """The speed-up options resolved for this machine and model, with a line saying what was chosen."""

    def __init__(self, job: specmod.JobSpec, ds_config: dict | None):
        import torch
        from transformers import AutoConfig

        stage3 = ds_config is not None and (ds_config.get("zero_optimization") or {}).get("stage") == 3
        model_type = AutoConfig.from_pretrained(job.model_name_or_path).model_type
        self.notes: list[str] = []
        self.liger, self.liger_config = False, {}
        if job.liger_kernel != "off":
            why_not = None
            if not torch.cuda.is_available():
                why_not = "no CUDA device"
            elif not checks.installed("liger_kernel"):
                why_not = "liger-kernel is not installed"
            else:
                from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

                if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
                    why_not = f"no Liger kernels for model type {model_type!r}"
            if why_not and job.liger_kernel == "on":
                raise ValueError(f"liger_kernel: is on but {why_not}; choose auto or off")
            if why_not:
                self.notes.append(f"Liger kernels off ({why_not})")
            else:
                self.liger = True
                # ZeRO-3 shards lm_head and the fused loss reads its weight directly; a LoRA on lm_head would be skipped
                if stage3 or (job.finetuning_type == "lora" and "lm_head" in job.lora_target):
                    self.liger_config = {"fused_linear_cross_entropy": False}
                fused = "" if self.liger_config else " + fused linear cross-entropy"
                self.notes.append(f"Liger kernels on (RMSNorm, SwiGLU, RoPE{fused})")
        if job.pure_bf16 and job.precision != "bf16":
            raise ValueError(f"pure_bf16: needs bf16 compute but this job runs in {job.precision}; untick pure_bf16")
        self.attn = None if job.attn_implementation == "auto" else job.attn_implementation
        self.notes.append(f"attention: {self.attn or 'model default'}")
        self.notes.append("weights: bf16 (pure bf16, no fp32 master copy)" if job.pure_bf16 else
                          "weights: fp32 master + autocast" if ds_config is None and job.precision in ("bf16", "fp16") else
                          f"weights: {job.precision}" if ds_config is None else "weights: 16-bit, DeepSpeed keeps fp32 master")

    def to_dict(self) -> dict:
        return {"liger": self.liger, "liger_config": self.liger_config, "attn_implementation": self.attn, "notes": self.notes}


def load_model(job: specmod.JobSpec, torch_dtype, speed: Speedups):
    from transformers import AutoModelForCausalLM

    extra = {"attn_implementation": speed.attn} if speed.attn else {}
    model = AutoModelForCausalLM.from_pretrained(job.model_name_or_path, dtype=torch_dtype, **extra)
    if job.finetuning_type == "lora":
        from peft import LoraConfig, get_peft_model

        target = "all-linear" if job.lora_target == ["all"] else job.lora_target
        cfg = LoraConfig(task_type="CAUSAL_LM", r=job.lora_rank, lora_alpha=job.lora_alpha,
                         lora_dropout=job.lora_dropout, target_modules=target)
        if job.gradient_checkpointing:
            model.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
        # peft makes fp32 adapters by default; pure bf16 keeps them in the model's dtype
        model = get_peft_model(model, cfg, autocast_adapter_dtype=not job.pure_bf16)
    return model


def save_result(trainer, job: specmod.JobSpec, tokenizer, train_output) -> dict:
    out = Path(job.output_dir)
    trainer.save_model(job.output_dir)  # on every rank: ZeRO-3 gathers the 16-bit weights collectively
    if RANK != 0:
        return {}
    tokenizer.save_pretrained(job.output_dir)
    kind = "lora_adapter" if job.finetuning_type == "lora" else "full_model"
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    weights = [f for f in files if f.startswith(("model", "adapter_model", "pytorch_model")) and f.endswith((".safetensors", ".bin"))]
    if not weights:
        raise RuntimeError(f"save_model wrote no weight file into {out}")
    result = {
        "kind": kind,
        "path": str(out),
        "base_model": job.model_name_or_path,
        "weights": weights,
        "global_step": trainer.state.global_step,
        "train_loss": train_output.training_loss,
        "metrics": train_output.metrics,
        "deepspeed_stage": job.deepspeed_stage,
        "loads_with": "peft.PeftModel.from_pretrained(base, path)" if kind == "lora_adapter"
        else "transformers.AutoModelForCausalLM.from_pretrained(path)",
    }
    (out / checks.RESULT_FILE).write_text(json.dumps(result, indent=2) + "\n")
    return result


# --- main --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    launched_at = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = [a for a in argv if not a.startswith("--local_rank")]  # older launchers add it
    job = specmod.from_flags(argv)
    out = Path(job.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(out)
    events = EventWriter(out, RANK)
    try:
        result = run(job, events, launched_at)
    except BaseException as e:  # report every failure with its rank, then let the launcher stop the rest
        if isinstance(e, KeyboardInterrupt):
            events.emit("error", rank=RANK, message="interrupted (SIGINT)", traceback="")
        elif not isinstance(e, SystemExit):
            tb = traceback.format_exc()
            events.emit("error", rank=RANK, message=f"{type(e).__name__}: {e}", traceback=tb[-4000:])
            log.error("rank %d failed: %s: %s", RANK, type(e).__name__, e)
            print(tb, file=sys.stderr, flush=True)
        return 1
    finally:
        shutdown()
    if RANK == 0:
        events.emit("end", status="finished", result=result)
        log.info("finished: saved %s in %s", result.get("kind"), out)
    return 0


def run(job: specmod.JobSpec, events: EventWriter, launched_at: float) -> dict:
    # --- setup ---------------------------------------------------------------------
    import torch
    import transformers
    from transformers import AutoTokenizer, Trainer

    transformers.logging.set_verbosity_warning()
    ds_config = None
    if job.deepspeed:
        ds_config = json.loads(Path(job.deepspeed).read_text(encoding="utf-8"))
    if RANK == 0:
        (Path(job.output_dir) / "job.yaml").write_text(specmod.dump_yaml(job), encoding="utf-8")
        if ds_config is not None:
            shutil.copyfile(job.deepspeed, Path(job.output_dir) / "ds_config.json")
        log.info("job: %s", json.dumps(specmod.changed(job)))

    if checks.is_demo_model(job.model_name_or_path):  # the speed-ups read its config.json: build it first
        wait_for_demo_model(Path(job.model_name_or_path), job.dataset_dir)
    speed = Speedups(job, ds_config)
    # TrainingArguments must exist before from_pretrained: with ZeRO-3 it switches
    # on zero.Init, so each rank only ever holds its shard of the weights.
    args = training_arguments(job, ds_config, speed)
    if ds_config is not None:
        import deepspeed

        # on CPU zero.Init would otherwise see a world of one process
        deepspeed.init_distributed(dist_backend="gloo" if job.device_type == "cpu" else "nccl")

    # --- data ------------------------------------------------------------------------
    tokenizer = AutoTokenizer.from_pretrained(job.model_name_or_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = build_dataset(job, tokenizer)
    tokens = sum(len(r["input_ids"]) for r in rows)
    if job.packing:
        log.info("dataset: %d tokens packed into %d rows of up to %d (%.0f%% filled)", tokens, len(rows), job.cutoff_len,
                 100 * tokens / (len(rows) * job.cutoff_len))
    else:
        log.info("dataset: %d samples, %d tokens", len(rows), tokens)

    # --- model -----------------------------------------------------------------------
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(job.precision, torch.float32)
    # Mixed precision without DeepSpeed keeps fp32 master weights (autocast) unless pure_bf16; DeepSpeed casts itself.
    model = load_model(job, dtype if ds_config is not None or job.pure_bf16 else torch.float32, speed)
    if RANK == 0:
        log.info("speed-ups: %s", "; ".join(speed.notes))
    if RANK == 0 and job.finetuning_type == "lora":
        trainable, total = model.get_nb_trainable_parameters()
        log.info("LoRA: %d of %d parameters trainable (%.2f%%)", trainable, total, 100 * trainable / total)

    # --- train -----------------------------------------------------------------------
    counter = TokenCounter(tokenizer.pad_token_id)
    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=counter,
                      processing_class=tokenizer, callbacks=[make_callback(events, counter, launched_at, speed.to_dict())])
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # our own progress line says it better, once per rank-0 log
    last_ckpt = None
    if job.resume:
        ckpts = sorted(Path(job.output_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
        last_ckpt = str(ckpts[-1]) if ckpts else None
    train_output = trainer.train(resume_from_checkpoint=last_ckpt)
    if RANK == 0 and trainer.is_deepspeed_enabled:
        resolved = trainer.accelerator.deepspeed_plugin.hf_ds_config.config
        (Path(job.output_dir) / "ds_config.resolved.json").write_text(json.dumps(resolved, indent=2, default=str))

    # --- save ------------------------------------------------------------------------
    return save_result(trainer, job, tokenizer, train_output)


def shutdown() -> None:
    """Leave the process group cleanly: a rank torn down mid-collective aborts at exit."""
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a broken group on the failure path: nothing left to tidy
            pass


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown.

    Everything is saved and flushed by now. Seen on CPU with ZeRO-3: a rank that
    trained and saved correctly was then aborted while C++ destructors ran at exit
    ("terminate called without an active exception", SIGABRT), so the launcher
    reported a failure for a good run. Skipping the teardown avoids that.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
