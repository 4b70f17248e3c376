"""The stand-in trainer (tests only; see ``tests/standin/zeroboard/__init__.py``).

What a rank of ``zeroboard.training.train`` does that the runner, the supervisor and the pages can see, without a
model: it parses the job's flags, writes the same events (data, start, log with every rank's memory, save, stop,
memory, end, error), the same logs (rank 0's ``train.log``, each line naming its rank), whole checkpoints marked
complete once every rank saved its part, the result file, and exits as the trainer does (0, or 1 with an error
event and a traceback; a signal's default end otherwise).  The ranks keep in step at every logged step as the
real ones do in their collectives: a rank that stops moving holds the others.

Knobs, in the job's environment:

- ``ZB_STANDIN_STEP_S``: seconds a step takes (default 0.05)
- ``ZB_STANDIN_FAIL``: ``RANK:STEP``, that rank raises an error at that step
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

from zeroboard import files
from zeroboard.job import folders, record, spec as specmod
from zeroboard.job.record import EventWriter
from zeroboard.training.heartbeat import Heartbeat  # the real one: stdlib only

RANK = int(os.environ.get("RANK", "0"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
STEP_S = float(os.environ.get("ZB_STANDIN_STEP_S", "0.05"))
PEER_WAIT_S = 900.0
EMPTY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"  # a valid safetensors file that holds no tensor
log = logging.getLogger("zeroboard.train")


class Peers:
    """The ranks' meeting place (a folder per launch): each rank's pid, host, step and memory, and the barrier."""

    def __init__(self, out: Path):
        # one launch: the ranks of a job are children of one launcher process (torchrun's agent, deepspeed's runner),
        # or, under Slurm, of one launcher per node, all of one Slurm job (the test cluster's nodes share /tmp)
        launch = os.environ.get("SLURM_JOB_ID") or str(os.getppid())
        key = f"{launch}-{hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:12]}"
        self.dir = Path(tempfile.gettempdir()) / f"zeroboard-standin-{key}"
        self.dir.mkdir(exist_ok=True)

    def post(self, step: int, **fields) -> None:
        me = {"rank": RANK, "local_rank": LOCAL_RANK, "host": socket.gethostname(), "pid": os.getpid(), "device": "cpu",
              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "step": step,
              "memory": {"rank": RANK, "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024},
              **fields}
        files.write_text_atomic(self.dir / f"rank{RANK}.json", json.dumps(me))

    def gather(self, step: int, **fields) -> list[dict]:
        """Every rank's post at ``step`` (a barrier, as the trainer's collectives are)."""
        self.post(step, **fields)
        deadline = time.time() + PEER_WAIT_S
        while True:
            found = []
            for r in range(WORLD_SIZE):
                try:
                    found.append(json.loads((self.dir / f"rank{r}.json").read_text()))
                except (OSError, ValueError):
                    break
            if len(found) == WORLD_SIZE and all(p["step"] >= step for p in found):
                return found
            if time.time() > deadline:
                raise TimeoutError(f"rank {RANK}: the other ranks did not reach step {step} in {PEER_WAIT_S:.0f} s")
            time.sleep(0.01)


def setup_logging(out: Path) -> None:
    fmt = logging.Formatter(f"%(asctime)s [rank{RANK}] %(levelname)s %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if RANK == 0:
        handlers.append(logging.FileHandler(out / record.TRAIN_LOG, encoding="utf-8"))
    for h in handlers:
        h.setFormatter(fmt)
    log.handlers[:] = handlers
    log.setLevel(logging.INFO if RANK == 0 else logging.WARNING)
    log.propagate = False


def save(out: Path, step: int, peers: Peers, events: EventWriter, beat: Heartbeat) -> None:
    path = out / f"checkpoint-{step}"
    path.mkdir(exist_ok=True)
    (path / f"rng_state_{RANK}.pth").write_bytes(b"stand-in")
    peers.gather(step, saved=step)
    if RANK == 0:
        files.write_text_atomic(path / folders.CHECKPOINT_MARK, json.dumps({"step": step, "time": time.time()}) + "\n")
        events.emit("save", step=step, path=str(path))
        log.info("saved checkpoint %s", path)
    beat.done("save")


def run(job: specmod.JobSpec, out: Path, events: EventWriter, launched_at: float) -> dict:
    if RANK == 0:
        (out / record.JOB_FILE).write_text(specmod.dump_yaml(job), encoding="utf-8")
        log.info("job: %s", json.dumps(specmod.changed(job)))
    events.emit("data", rank=RANK, built=RANK == 0, seconds=0.0, samples=64, eval_samples=0, tokens=4096, truncated=0,
                answer_lost=0, skipped=0, cache=[])
    peers = Peers(out)
    total = job.max_steps or max(1, round(job.num_train_epochs * 10))
    first = 1
    if job.resume:
        done = folders.last_checkpoint(out)
        first = int(done.name.split("-")[1]) + 1 if done else 1
    ranks = peers.gather(first - 1)
    t0 = t_last = time.time()
    if RANK == 0:
        events.emit("start", world_size=WORLD_SIZE, devices=[{k: p[k] for k in ("rank", "local_rank", "host", "pid",
                    "device", "cuda_visible_devices")} for p in ranks], total_steps=total,
                    since_launch=round(t0 - launched_at, 3), speedups={})
        log.info("training starts: %d steps on %d process(es)", total, WORLD_SIZE)
    beat = Heartbeat(out, RANK)
    beat.start()
    fail = os.environ.get("ZB_STANDIN_FAIL", "")
    fail_rank, _, fail_step = fail.partition(":")
    step, stopping, every = first - 1, False, max(1, job.logging_steps)
    for step in range(first, total + 1):
        time.sleep(STEP_S)
        if fail and int(fail_rank) == RANK and step == int(fail_step):
            raise RuntimeError(f"stand-in failure on rank {RANK} at step {step}")
        if step % every == 0 or step == total:
            ranks = peers.gather(step, stop=(out / record.STOP_REQUEST).is_file())
            if any(p.get("stop") for p in ranks) and not stopping:
                stopping = True
                if RANK == 0:
                    events.emit("stop", step=step, total_steps=total)
                    log.info("save and stop asked for: saving at step %d", step)
            if RANK == 0:
                now = time.time()
                loss = 2.0 / (1 + step / 10)
                eta = (now - t0) / (step - first + 1) * (total - step)
                events.emit("log", step=step, total_steps=total, loss=loss, lr=job.learning_rate, epoch=step / total,
                            grad_norm=1.0, tokens_per_sec=64 * every / max(now - t_last, 1e-9), tokens=64 * step,
                            elapsed=now - t0, eta=eta, memory=[p["memory"] for p in ranks])
                log.info("step %d/%d loss %.4f lr %.2e %.0f tok/s eta %.0fs", step, total, loss, job.learning_rate,
                         64 * every / max(now - t_last, 1e-9), eta)
                t_last = now
        saving = stopping or bool(job.save_steps and step % job.save_steps == 0)
        beat.step_end(step, evaluate=False, save=saving)
        if saving:
            save(out, step, peers, events, beat)
        if stopping:
            break
    beat.end()
    ranks = peers.gather(total + 1)
    if RANK != 0:
        return {}
    events.emit("memory", step=step, memory=[p["memory"] for p in ranks])
    name = "adapter_model.safetensors" if job.finetuning_type == "lora" else "model.safetensors"
    (out / name).write_bytes(EMPTY_SAFETENSORS)
    result = {"kind": "lora_adapter" if job.finetuning_type == "lora" else "full_model", "path": str(out),
              "base_model": job.model_name_or_path, "weights": [name], "zero_checkpoint": [], "global_step": step,
              "train_loss": 1.0, "eval_loss": None, "template": job.template, "added_tokens": [], "metrics": {},
              "deepspeed_stage": job.deepspeed_stage, "offload": {"optimizer": job.offload, "parameters": False},
              "precision": job.precision, "stopped_early": step < total, "loads_with": "(a stand-in: nothing to load)",
              "trackers": []}
    files.write_text_atomic(out / record.RESULT_FILE, json.dumps(result, indent=2) + "\n")
    return result


def main() -> int:
    launched_at = time.time()
    argv = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
    job = specmod.from_flags(argv)
    out = Path(job.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(out)
    print(f"stand-in trainer: rank {RANK} of {WORLD_SIZE}, pid {os.getpid()}", flush=True)  # every rank says a word
    events = EventWriter(out, RANK)
    try:
        result = run(job, out, events, launched_at)
    except BaseException as e:  # as the trainer reports a failure: its rank, its message, its traceback
        if not isinstance(e, SystemExit):
            tb = traceback.format_exc()
            events.emit("error", rank=RANK, message=f"{type(e).__name__}: {e}", traceback=tb[-4000:])
            log.error("rank %d failed: %s: %s", RANK, type(e).__name__, e)
            print(tb, file=sys.stderr, flush=True)
        return 1
    if RANK == 0:
        events.emit("end", status="finished", result=result)
        log.info("finished: saved %s in %s", result.get("kind"), out)
    return 0


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
