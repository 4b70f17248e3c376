"""The trainer each rank runs: ``python -m zeroboard.training.train --model_name_or_path ... [--deepspeed cfg.json]``.

Started by torchrun or the deepspeed launcher (a single process works too).
Reads top to bottom: parse -> setup -> data -> model -> train -> save -> cleanup.

Writes into the output dir: ``job.yaml`` (the resolved job), ``events.jsonl``
(machine-readable progress), ``train.log`` (human log of rank 0),
``ds_config.json`` / ``ds_config.resolved.json`` (the DeepSpeed config given
and as the Trainer filled it), and ``zeroboard_result.json`` (what was saved).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from .. import files
from ..job import checks, dstune, folders, placement, record, spec as specmod, trackers as jobtrackers, weights
from ..job.mapping import Resolved
from ..job.record import EventWriter
from ..words import say
from . import dataprep, ops, profiling, templates, trackers, trials, vision
from .callbacks import LOCAL_RANK, RANK, EvalRows, TokenCounter, make_callback, return_freed_memory
from .packing import PackedRows
from .speedups import Speedups

log = logging.getLogger("zeroboard.train")


# --- small helpers ---------------------------------------------------------------

def setup_logging(output_dir: Path) -> None:
    fmt = logging.Formatter(f"%(asctime)s [rank{RANK}] %(levelname)s %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if RANK == 0:
        handlers.append(logging.FileHandler(output_dir / record.TRAIN_LOG, encoding="utf-8"))
    for h in handlers:
        h.setFormatter(fmt)
    log.handlers[:] = handlers
    log.setLevel(logging.INFO if RANK == 0 else logging.WARNING)
    log.propagate = False


COMPILED_S: dict[str, float] = {}  # seconds spent compiling each DeepSpeed op, in this process (the end event says it)


def announce_compile(events: EventWriter, kind: str, **fields) -> None:
    """Rank 0 tells the page and the log that it compiles a DeepSpeed op (other ranks wait for it)."""
    if kind == "compiled":
        COMPILED_S[fields["op"]] = float(fields.get("seconds") or 0)
    if RANK == 0:
        events.emit(kind, **fields)
        log.info("%s", say(f"train.{kind}", **fields))


# ZeroBoard's own choices for the Trainer, whatever the job: our progress line replaces tqdm's, the collator needs
# every column, and the rows are memory-mapped (no loader workers). extra_args may still set them.
FIXED_ARGS = {"disable_tqdm": True, "remove_unused_columns": False, "dataloader_num_workers": 0}


def trainer_kwargs(job: specmod.JobSpec, ds_config: dict | None, speed: Speedups) -> dict:
    """The TrainingArguments of a job: each field's own, as its definition in the spec declares them."""
    resolved = Resolved(ds_config=ds_config, liger=speed.liger, liger_config=speed.liger_config)
    return {**FIXED_ARGS, **specmod.trainer_arguments(job, resolved)}


def training_arguments(job: specmod.JobSpec, ds_config: dict | None, speed: Speedups):
    """TrainingArguments; for a preference stage, TRL's config of that stage (the same arguments and its own)."""
    if job.training_stage != "sft":
        from . import preference

        return preference.arguments(job, trainer_kwargs(job, ds_config, speed))
    from transformers import TrainingArguments

    return TrainingArguments(**trainer_kwargs(job, ds_config, speed))


def prepare_data(job: specmod.JobSpec, tokenizer, args, events: EventWriter, seen: vision.Vision | None = None):
    """The tokenized training and evaluation sets: made once by each node's main process, read from the cache by the
    other ranks (the Trainer's main_process_first), packed here if asked (the bins only: the rows stay on disk)."""
    data = dataprep.prepare(job, tokenizer, lambda: args.main_process_first(local=True, desc="dataset"),
                            is_main=args.local_process_index == 0, vision=seen)
    info = data.info
    first = {"first_skipped": {k: info["problems"][0][k] for k in ("source", "record", "message")}} \
        if info["problems"] else {}  # the first record skipped (as LLaMA-Factory skips it) and why
    events.emit("data", rank=RANK, built=data.built, seconds=round(data.seconds, 3), samples=len(data.train),
                eval_samples=len(data.eval) if data.eval is not None else 0, tokens=info["tokens"],
                truncated=info["truncated"], answer_lost=info["answer_lost"], skipped=info["skipped"], **first,
                cache=[str(p) for p in data.paths])
    if RANK == 0:
        log.info("data: %d samples, %d tokens (%d truncated at cutoff_len %d, %d with no answer left, %d records "
                 "skipped) %s in %.1f s", info["samples"], info["tokens"], info["truncated"], job.cutoff_len,
                 info["answer_lost"], info["skipped"], "tokenized" if data.built else "read from the cache", data.seconds)
        for p in info["problems"][:3]:
            log.warning("skipped %s record %d: %s", p["where"], p["record"], say_json(p["message"]))
    if job.training_stage != "sft":  # a pair or a tagged answer per row: the stage's trainer picks its columns
        return data.train, data.eval, data

    def rows(ds):
        if ds is None:
            return None
        return PackedRows(ds, job.cutoff_len) if job.packing else ds.select_columns(["input_ids", "labels", *(["images"] if seen else [])])

    train, evals = rows(data.train), rows(data.eval)
    evals = EvalRows(evals) if evals is not None else None
    if job.packing and RANK == 0:
        tokens = sum(train.lengths)
        log.info("dataset: %d tokens of %d samples packed into %d rows of up to %d (%.0f%% filled)", tokens, len(data.train),
                 len(train), job.cutoff_len, 100 * tokens / max(1, len(train) * job.cutoff_len))
    return train, evals, data


def say_json(message) -> str:
    from ..words import from_json

    return str(from_json(message))


def use_template(job: specmod.JobSpec, tokenizer) -> templates.Applied:
    applied = templates.apply(tokenizer, job.template)
    if RANK == 0 and applied.added:
        log.warning("template %s: added special tokens %s to the tokenizer (%d tokens now); their embeddings are new "
                    "and trained%s", applied.name, ", ".join(applied.added), len(tokenizer),
                    " (LoRA also trains the embedding and output layers)" if job.finetuning_type == "lora" else "")
    if RANK == 0 and applied.eos:
        log.info("template %s: %s ends each answer and is the tokenizer's end of sequence", applied.name, applied.eos)
    return applied


def weights_dtype(job: specmod.JobSpec, ds_config: dict | None):
    """The dtype the weights load in (job.weights): DeepSpeed, pure bf16 and LoRA's frozen base in 16 bit; fp32 master
    weights (autocast) and the split mode in fp32 (the split keeps an fp32 checkpoint's exact values as the
    optimizer's master weights)."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(job.precision, torch.float32)
    mode = weights.of_job(job, job.precision, placement.zero_setting(ds_config)[0], dstune.world_size())
    return dtype if weights.loads_16bit(mode) else torch.float32


def quantization(job: specmod.JobSpec, torch_dtype):
    """QLoRA's bitsandbytes config: 4-bit NF4 with double quantization (the absmax of each 64-weight block quantized
    again), computing in the run's dtype and storing the packed weights in it too, so that ZeRO-3 shards them as any
    other tensor of that dtype; or 8 bit."""
    from transformers import BitsAndBytesConfig

    if job.quantization_bit == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch_dtype, bnb_4bit_quant_storage=torch_dtype)


def load_model(job: specmod.JobSpec, torch_dtype, speed: Speedups, vocab: int | None = None, reference: bool = False):
    """The model and its LoRA config (None for full fine-tuning); ``vocab``: the tokenizer's size after a template
    added tokens (the embeddings grow to it). SFT wraps the adapters here; a preference stage's trainer (TRL) does,
    so that its reference is the base with the adapters off. ``reference``: a full fine-tune's frozen copy."""
    sees = vision.is_vision(job.model_name_or_path)  # a vision-language model: its own class, its parts frozen
    extra = {"attn_implementation": speed.attn} if speed.attn else {}
    if job.quantization_bit:
        from transformers.integrations import is_deepspeed_zero3_enabled

        extra["quantization_config"] = quantization(job, torch_dtype)
        if not is_deepspeed_zero3_enabled():  # each rank's quantized copy on its own GPU (ZeRO-3 places its shards)
            extra["device_map"] = {"": LOCAL_RANK}
    model = vision.auto_model(job.model_name_or_path).from_pretrained(job.model_name_or_path, dtype=torch_dtype, **extra)
    grown = vocab is not None and vocab > model.get_input_embeddings().weight.shape[0]
    if grown:
        model.resize_token_embeddings(vocab)
    if reference:
        return model.eval().requires_grad_(False), None
    if job.finetuning_type != "lora":
        if sees:
            vision.freeze(model, job)
        return model, None
    from peft import LoraConfig, get_peft_model

    target = vision.lora_target(model, job) if sees else "all-linear" if job.lora_target == ["all"] else job.lora_target
    # new tokens' embeddings start untrained: with LoRA they would stay so unless the layers are trained whole
    save = [n for n, m in model.named_modules() if m in (model.get_input_embeddings(), model.get_output_embeddings())]
    cfg = LoraConfig(task_type="CAUSAL_LM", r=job.lora_rank, lora_alpha=job.lora_alpha,
                     lora_dropout=job.lora_dropout, target_modules=target,
                     modules_to_save=[n.rpartition(".")[2] for n in save] if grown else None)
    if job.gradient_checkpointing:
        model.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
    if job.training_stage != "sft":
        return model, cfg
    # peft makes fp32 adapters by default; pure bf16 keeps them in the model's dtype
    return get_peft_model(model, cfg, autocast_adapter_dtype=not job.pure_bf16), None


def resume_checkpoint(job: specmod.JobSpec) -> str | None:
    """With ``resume``: the last complete checkpoint; a half-written one (an abort during a save) is skipped."""
    if not job.resume:
        return None
    done, partial = folders.checkpoints(Path(job.output_dir))
    skipped = [p.name for p in partial if not done or int(p.name.split("-")[1]) > int(done[-1].name.split("-")[1])]
    if RANK == 0 and skipped:
        log.warning("skipping incomplete checkpoint(s): %s", ", ".join(skipped))
    return str(done[-1]) if done else None


def save_result(trainer, job: specmod.JobSpec, ds_config: dict | None, tokenizer, train_output, applied: templates.Applied,
                eval_loss: float | None) -> dict:
    out = Path(job.output_dir)
    # on every rank: ZeRO-3 gathers the 16-bit weights collectively (or, when the config does not gather them,
    # transformers saves a ZeRO checkpoint instead: every rank writes its shard)
    trainer.save_model(job.output_dir)
    if RANK != 0:
        return {}
    tokenizer.save_pretrained(job.output_dir)
    vision.save_processor(job.model_name_or_path, job.output_dir)
    names = sorted(p.name for p in out.iterdir() if p.is_file())
    weights = [f for f in names if f.startswith(("model", "adapter_model", "pytorch_model"))
               and f.endswith((".safetensors", ".bin"))]
    stage, off_opt, off_par = placement.zero_setting(ds_config)
    zero = sorted(p.name for p in out.glob("global_step*") if p.is_dir())
    if job.finetuning_type == "lora":
        kind, loads_with = "lora_adapter", "peft.PeftModel.from_pretrained(base, path)"
    elif weights:
        auto = vision.auto_model(job.model_name_or_path).__name__
        kind, loads_with = "full_model", f"transformers.{auto}.from_pretrained(path)"
    elif zero:  # ZeRO-3 without stage3_gather_16bit_weights_on_model_save: nothing is lost, consolidate later
        kind, loads_with = "zero_checkpoint", f"zeroboard consolidate {out} {out}-consolidated"
    else:
        raise RuntimeError(say("train.no_weights", path=str(out)))
    if kind == "lora_adapter" and not any(w.startswith("adapter_model") for w in weights):
        raise RuntimeError(say("train.no_weights", path=str(out)))
    result = {
        "kind": kind,
        "path": str(out),
        "base_model": job.model_name_or_path,
        "weights": weights,
        "zero_checkpoint": zero,
        "global_step": trainer.state.global_step,
        "train_loss": train_output.training_loss,
        "eval_loss": eval_loss,
        "template": applied.name,
        "added_tokens": applied.added,
        "metrics": train_output.metrics,
        "deepspeed_stage": stage,  # the effective stage: from the DeepSpeed JSON the run used
        "offload": {"optimizer": off_opt, "parameters": off_par},
        "precision": job.precision,
        "training_stage": job.training_stage,  # sft, or the preference stage (the weights load the same way)
        "quantization_bit": job.quantization_bit,  # QLoRA: the base the adapter was trained on, quantized
        "stopped_early": trainer.state.global_step < trainer.state.max_steps,  # "save and stop" ended it
        "loads_with": loads_with,
        "trackers": [w.to_dict() for w in jobtrackers.for_job(job)],  # where each wrote, and how to open it
    }
    files.write_text_atomic(out / record.RESULT_FILE, json.dumps(result, indent=2) + "\n")
    return result


# --- main --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    launched_at = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = [a for a in argv if not a.startswith("--local_rank")]  # older launchers add it
    job = specmod.from_flags(argv)
    if job.device_type == "cpu":  # before the model and its states are allocated: the RSS peak is what they need
        return_freed_memory()
    out = Path(job.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(out)
    events = EventWriter(out, RANK)
    ok = False
    try:
        result = run(job, events, launched_at)
        ok = True
    except BaseException as e:  # report every failure with its rank, then let the launcher stop the rest
        if isinstance(e, KeyboardInterrupt):
            events.emit("error", rank=RANK, message=str(say("train.interrupted")), traceback="")
        elif not isinstance(e, SystemExit):
            tb = traceback.format_exc()
            events.emit("error", rank=RANK, message=f"{type(e).__name__}: {e}", traceback=tb[-4000:])
            log.error("rank %d failed: %s: %s", RANK, type(e).__name__, e)
            print(tb, file=sys.stderr, flush=True)
        return 1
    finally:
        trackers.finish(ok)
        shutdown()
    if RANK == 0:
        # the run's time spent compiling ops, which its duration on the Runs tab leaves out (and names apart)
        events.emit("end", status="finished", result=result, compile_s=round(sum(COMPILED_S.values()), 1))
        log.info("finished: saved %s in %s", result.get("kind"), out)
    return 0


def run(job: specmod.JobSpec, events: EventWriter, launched_at: float) -> dict:
    # --- setup ---------------------------------------------------------------------
    import transformers
    from transformers import AutoTokenizer, Trainer, set_seed

    transformers.logging.set_verbosity_warning()
    if checks.is_demo_model(job.model_name_or_path):  # the DeepSpeed values and the speed-ups read its config.json
        from .demo_model import wait_for_built_model

        wait_for_built_model(job, RANK)
    ds_config, tuned = None, {}
    if job.deepspeed:
        ds_config = json.loads(Path(job.deepspeed).read_text(encoding="utf-8"))
        # the values the preview named for this placement and model (job.dstune); a preset file stays as written
        ds_config, tuned = dstune.for_run(ds_config, job.deepspeed, dstune.world_size(), job.model_name_or_path,
                                          job.gradient_checkpointing, job.finetuning_type == "lora", job.lora_rank,
                                          job.lora_target, device=job.device_type)
    if RANK == 0:
        (Path(job.output_dir) / record.JOB_FILE).write_text(specmod.dump_yaml(job), encoding="utf-8")
        if tuned:
            files.write_text_atomic(Path(job.output_dir) / record.DS_CONFIG_FILE, json.dumps(ds_config, indent=2) + "\n")
            log.info("%s", dstune.note(tuned))
        elif ds_config is not None:
            shutil.copyfile(job.deepspeed, Path(job.output_dir) / record.DS_CONFIG_FILE)
        log.info("job: %s", json.dumps(specmod.changed(job)))
    # the tracker first: one that cannot start fails the run now, before the data and the model are loaded
    written = trackers.start(job)
    if RANK == 0 and written:
        events.emit("trackers", trackers=[w.to_dict() for w in written])
        for w in written:
            log.info("tracker %s writes into %s (open it with: %s)", w.tracker, w.path, w.open)

    speed = Speedups(job, ds_config)
    # DeepSpeed's C++ ops, loaded before DeepSpeed asks for them: one that must be compiled first is announced
    ops.load_for_job(job.device_type, ds_config, lambda kind, **f: announce_compile(events, kind, **f),
                     clear_stale=LOCAL_RANK == 0)
    # TrainingArguments must exist before from_pretrained: with ZeRO-3 it switches
    # on zero.Init, so each rank only ever holds its shard of the weights.
    args = training_arguments(job, ds_config, speed)
    if ds_config is not None:
        import deepspeed

        # on CPU zero.Init would otherwise see a world of one process
        deepspeed.init_distributed(dist_backend="gloo" if job.device_type == "cpu" else "nccl")
    # before anything random is made: the LoRA weights are drawn when the adapters are built, not in train()
    set_seed(job.seed)

    # --- data ------------------------------------------------------------------------
    tokenizer = AutoTokenizer.from_pretrained(job.model_name_or_path)
    vocab_before = len(tokenizer)
    applied = use_template(job, tokenizer)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    seen = vision.Vision.of(job, tokenizer)  # a vision-language model's images (None: text only)
    rows, eval_rows, data = prepare_data(job, tokenizer, args, events, seen)

    # --- model -----------------------------------------------------------------------
    dtype, vocab = weights_dtype(job, ds_config), len(tokenizer) if len(tokenizer) > vocab_before else None
    model, peft_config = load_model(job, dtype, speed, vocab)
    reference = None
    if job.training_stage != "sft":
        from . import preference

        if preference.needs_reference(job):  # a frozen copy (under ZeRO-3 sharded as it loads); LoRA's is the base
            reference, _ = load_model(job, dtype, speed, vocab, reference=True)
        if RANK == 0:
            log.info("%s", say(preference.reference_note(job), stage=job.training_stage))
    if dstune.needs_input_grads(ds_config, job.finetuning_type == "lora") and not job.gradient_checkpointing:
        model.enable_input_require_grads()  # ZeRO-3 leaf layers with LoRA: job.dstune says why
    tried = trials.apply(model, job.finetuning_type, speed.weights, placement.zero_setting(ds_config)[0])
    optimizer = None
    if speed.weights == "split":
        from . import master

        optimizer = (master.SplitAdamW, dict(lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2),
                                             eps=args.adam_epsilon, weight_decay=args.weight_decay,
                                             low_bits=master.split_model(model)))
    if RANK == 0:
        log.info("speed-ups: %s", "; ".join(speed.notes + tried))
    if RANK == 0 and job.finetuning_type == "lora" and peft_config is None:
        trainable, total = model.get_nb_trainable_parameters()
        log.info("LoRA: %d of %d parameters trainable (%.2f%%)", trainable, total, 100 * trainable / total)

    # --- train -----------------------------------------------------------------------
    sft = job.training_stage == "sft"
    counter = (vision.Collator(tokenizer.pad_token_id, seen) if seen else TokenCounter(tokenizer.pad_token_id)) if sft \
        else preference.collator(job.training_stage, tokenizer.pad_token_id)
    callbacks = [make_callback(events, counter, launched_at, speed.to_dict()), profiling.callback(job.output_dir)]
    callbacks = [c for c in callbacks if c is not None]
    if sft:
        trainer = Trainer(model=model, args=args, train_dataset=rows, eval_dataset=eval_rows, data_collator=counter,
                          processing_class=tokenizer, callbacks=callbacks, optimizer_cls_and_kwargs=optimizer)
    else:  # TRL's trainer of the stage, on the same rows, arguments, callbacks and DeepSpeed config
        trainer = preference.trainer(job, model, args, rows, eval_rows, tokenizer, counter, callbacks, reference,
                                     peft_config)
        if reference is not None and RANK == 0:  # as placed by TRL (a DeepSpeed engine of the run's config)
            here, total = preference.held(trainer.ref_model)
            log.info("%s", say("train.ref_held", here=f"{here:,}", total=f"{total:,}"))
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # our own progress line says it better, once per rank-0 log
    trackers.attach(trainer)
    train_output = trainer.train(resume_from_checkpoint=resume_checkpoint(job))
    eval_loss = None
    if eval_rows is not None:  # the final evaluation (an eval event), unless the last step was just evaluated
        done = [h["eval_loss"] for h in trainer.state.log_history
                if "eval_loss" in h and h.get("step") == trainer.state.global_step]
        eval_loss = done[-1] if done else trainer.evaluate().get("eval_loss")
    if RANK == 0 and trainer.is_deepspeed_enabled:
        resolved = trainer.accelerator.deepspeed_plugin.hf_ds_config.config
        (Path(job.output_dir) / record.DS_RESOLVED_FILE).write_text(json.dumps(resolved, indent=2, default=str))

    # --- save ------------------------------------------------------------------------
    return save_result(trainer, job, ds_config, tokenizer, train_output, applied, eval_loss)


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
