"""What the trainer reports while it runs: the collator that counts tokens, and the callback that writes events.

Every rank runs these; rank 0 writes the run's progress into ``events.jsonl``
(start, each logged step with loss, learning rate, tokens/s, ETA and every
rank's peak memory, saves, the end), and marks each checkpoint complete once
every rank has saved its part.  Every rank keeps its heartbeat (``heartbeat``):
where it is, for the supervisor to tell a run that has stopped moving.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import threading
import time
from pathlib import Path

from .. import files
from ..job import devices, folders, record
from ..job.record import EventWriter
from .heartbeat import Heartbeat
from .templates import IGNORE

RANK = int(os.environ.get("RANK", "0"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
log = logging.getLogger("zeroboard.train")


NVML_PERIOD_ENV = "ZEROBOARD_NVML_SAMPLE_S"  # seconds between NVML readings of this process; 0 turns the sampler off
NVML_PERIOD = 0.1


def _my_nvml_gpus() -> list[int] | None:
    """NVML indices of the GPUs this rank can use: the launcher numbers CUDA_VISIBLE_DEVICES in PCI bus order,
    as NVML does (None: look on every GPU)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible or not all(v.isdigit() for v in visible):
        return None
    mine = visible[LOCAL_RANK] if LOCAL_RANK < len(visible) and len(visible) > 1 else None
    return [int(mine)] if mine is not None else [int(v) for v in visible]


class NvmlSampler(threading.Thread):
    """This process's NVML memory, read every ``period`` s by a daemon thread: the peak between two logs is caught.

    What NVML charges a process is what the CUDA allocator has reserved plus the context, so it only falls
    when the allocator gives memory back; a reading every 0.1 s misses at most the growth of the last tenth
    of a second before the run ends, and :meth:`peak` takes one more reading when asked. An NVML call
    releases the GIL while the driver answers.
    """

    def __init__(self, period: float = NVML_PERIOD, pid: int | None = None):
        super().__init__(name="zeroboard-nvml", daemon=True)
        self.period, self.pid = period, pid or os.getpid()
        self.gpus = _my_nvml_gpus()
        self.readings, self._peak = 0, None
        self._stop_event = threading.Event()

    def read(self) -> int | None:
        used = devices.process_bytes_on(self.pid, self.gpus)
        self.readings += 1
        if used is not None:
            self._peak = max(used, self._peak or 0)
        return used

    def run(self) -> None:
        while not self._stop_event.wait(self.period):
            self.read()

    def stop(self) -> None:
        self._stop_event.set()

    def peak(self) -> int | None:
        self.read()
        return self._peak


_sampler: dict = {}


def nvml_sampler() -> NvmlSampler | None:
    """The process's sampler, started on first use (None when NVML sees no GPU or the period is 0)."""
    if "it" not in _sampler:
        period = float(os.environ.get(NVML_PERIOD_ENV, NVML_PERIOD) or 0)
        it = NvmlSampler(period) if period > 0 and devices.process_bytes_on(os.getpid()) is not None else None
        if it is not None:
            it.start()
        _sampler["it"] = it
    return _sampler["it"]


# glibc's threshold from which a block is mapped on its own (and unmapped when freed), fixed here for CPU ranks
MMAP_THRESHOLD = 256 << 10
M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def return_freed_memory() -> bool:
    """CPU ranks: large freed blocks go back to the system at once, so that the RSS peak is what the tensors needed.

    glibc raises its mmap threshold (up to 32 MiB) each time a mapped block is freed; from then on blocks below it
    come from the heap, whose freed ranges a later, differently sized request often cannot reuse. The RSS of a rank
    then climbs step after step, by as much as the order of frees allows: measured on two CPU processes, the same
    stage-3 run peaked 60 MiB apart from one run to the next, above the unsplit run. With a fixed threshold of
    256 KiB (every weight, gradient and optimizer state of the lesson's model is larger) the peak is reached in the
    first step and repeats to a few MiB. The tiny demo's tensors stay below it and are placed as before.
    Returns whether glibc took the setting (another C library: nothing changes)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


def memory_now(torch) -> dict:
    """This rank's peak memory: the CUDA allocator's and NVML's, and (always) the process RSS peak."""
    mem = {"rank": RANK, "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if torch.cuda.is_available():
        mem["torch_peak_bytes"] = torch.cuda.max_memory_allocated()
        mem["torch_reserved_peak_bytes"] = torch.cuda.max_memory_reserved()
        sampler = nvml_sampler()
        mem["nvml_peak_bytes"] = sampler.peak() if sampler is not None else devices.process_gpu_bytes(os.getpid())
    return mem


EVAL_MARK = "zeroboard_eval"


class EvalRows:
    """Evaluation rows, marked so the collator leaves them out of the training token count."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return {**self.rows[i], EVAL_MARK: True}


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

        counted = not features[0].get(EVAL_MARK)  # evaluation batches do not count as training throughput
        width = max(len(f["input_ids"]) for f in features)
        packed = "position_ids" in features[0]
        batch: dict[str, list] = {"input_ids": [], "labels": [], "position_ids" if packed else "attention_mask": []}
        for f in features:
            n = len(f["input_ids"])
            batch["input_ids"].append(f["input_ids"] + [self.pad_id] * (width - n))
            batch["labels"].append(f["labels"] + [IGNORE] * (width - n))
            if packed:
                batch["position_ids"].append(f["position_ids"] + list(range(width - n)))
            else:
                batch["attention_mask"].append([1] * n + [0] * (width - n))
            self.tokens += n if counted else 0
        out = {k: torch.tensor(v) for k, v in batch.items()}
        if packed:
            out["use_cache"] = False  # with a KV cache object transformers skips the packed-sequence mask
        return out


# what the preference trainers log that the events carry (TRL's names): the rewards of the chosen and the rejected
# answers, their margin, how often the chosen wins (pairs); KTO's KL estimate
PREFERENCE_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "kl")


def preference_metrics(logs: dict) -> dict:
    """A Trainer log's preference metrics as a log event carries them (``rewards``: chosen, rejected, margins,
    accuracies; ``kl``); empty for SFT."""
    out: dict = {}
    rewards = {k.split("/")[1]: float(logs[k]) for k in PREFERENCE_METRICS if k.startswith("rewards/") and k in logs}
    if rewards:
        out["rewards"] = rewards
    if logs.get("kl") is not None:
        out["kl"] = float(logs["kl"])
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

        stopping = False
        beat: Heartbeat | None = None

        def on_train_begin(self, args, state, control, **kw):
            if torch.cuda.is_available():
                nvml_sampler()  # reads from now on, between logs too
            if self.beat is None:
                self.beat = Heartbeat(args.output_dir, RANK)
                self.beat.start()
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
            stop = (Path(args.output_dir) / record.STOP_REQUEST).is_file()
            # one collective per log, which also carries "save and stop": every rank decides at the same step
            ranks = gather({"tokens": counter.tokens, "memory": memory_now(torch), "stop": stop})
            tokens = sum(r["tokens"] for r in ranks)
            memory = [r["memory"] for r in ranks]
            if any(r["stop"] for r in ranks) and not self.stopping:
                self.stopping = True
                control.should_save = control.should_training_stop = True  # a checkpoint, then the final result
                if RANK == 0:
                    events.emit("stop", step=state.global_step, total_steps=state.max_steps)
                    log.info("save and stop asked for: saving at step %d", state.global_step)
            if RANK != 0 or "loss" not in logs:
                return
            dt = max(now - self.t_last, 1e-9)
            elapsed = now - self.t0
            step, total = state.global_step, state.max_steps
            eta = elapsed / step * (total - step) if step else None
            events.emit("log", step=step, total_steps=total, loss=logs.get("loss"), lr=logs.get("learning_rate"),
                        epoch=logs.get("epoch"), grad_norm=logs.get("grad_norm"),
                        tokens_per_sec=(tokens - self.tokens_last) / dt, tokens=tokens,
                        elapsed=elapsed, eta=eta, memory=memory, **preference_metrics(logs))
            log.info("step %d/%d loss %.4f lr %.2e %.0f tok/s eta %s", step, total, logs["loss"],
                     logs.get("learning_rate", 0.0), (tokens - self.tokens_last) / dt,
                     f"{eta:.0f}s" if eta is not None else "?")
            self.t_last, self.tokens_last = now, tokens

        def on_step_end(self, args, state, control, **kw):
            # the Trainer's own flow has planned by now whether an evaluation or a save follows this step
            if self.beat is not None:
                self.beat.step_end(state.global_step, bool(control.should_evaluate), bool(control.should_save))

        def on_substep_end(self, args, state, control, **kw):
            if self.beat is not None:
                self.beat.moved()

        def on_prediction_step(self, args, state, control, **kw):
            if self.beat is not None:
                self.beat.moved()

        def on_evaluate(self, args, state, control, metrics=None, **kw):
            if self.beat is not None:
                self.beat.done("eval")
            metrics = metrics or {}
            if RANK == 0 and metrics.get("eval_loss") is not None:
                events.emit("eval", step=state.global_step, total_steps=state.max_steps, eval_loss=metrics["eval_loss"],
                            runtime=metrics.get("eval_runtime"), samples_per_second=metrics.get("eval_samples_per_second"))
                log.info("step %d/%d eval loss %.4f", state.global_step, state.max_steps, metrics["eval_loss"])

        def on_train_end(self, args, state, control, **kw):
            if self.beat is not None:
                self.beat.end()
            memory = gather(memory_now(torch))  # the whole run's peak, also when the last step logged nothing
            if RANK == 0:
                events.emit("memory", step=state.global_step, memory=memory)

        def on_save(self, args, state, control, **kw):
            # every rank has written its part (its ZeRO shards, its RNG state) once all reach here: only then
            # is the checkpoint whole, and rank 0 marks it so resume and the page offer it
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                dist.barrier()
            if RANK == 0:
                path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                files.write_text_atomic(path / folders.CHECKPOINT_MARK,
                                        json.dumps({"step": state.global_step, "time": time.time()}) + "\n")
                events.emit("save", step=state.global_step, path=str(path))
                log.info("saved checkpoint %s", path)
            if self.beat is not None:
                self.beat.done("save")

    return EventCallback()
