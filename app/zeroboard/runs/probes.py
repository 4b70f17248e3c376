"""``--fit`` on the devices themselves: each setting that fits by the plan, run for a few optimizer steps through the
same runner as any job, and ranked by the tokens/s it measured (the way DeepSpeed's autotuner runs experiments).

A probe is a real job (:func:`~zeroboard.runs.launch.prepare_launch`, then :class:`~.manager.JobManager`: the
checks, the busy rule, a supervisor) of the job with one setting (stage, offload, micro-batch x accumulation,
checkpointing), :data:`STEPS` optimizer steps, nothing saved, in a throwaway folder under the workspace's cache; its
``log`` events give the tokens/s of each step after :data:`WARMUP`. Running out of memory is a result (the setting
does not fit), not a failure. Results are kept per model config, device, precision, cutoff and setting
(``cache/fit-probes/probes.json``) and reused; a probe phase has a time budget (:data:`BUDGET_S`, ``--probe-budget``
on the command line, a field beside "Use this setting" on the page): what is left unmeasured is ranked by the
step-time model, and said so. Without the job's devices here (planning on a laptop for a cluster), nothing runs:
the ranking is the model's, a prediction.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .. import files
from ..job import devices, placement, record
from ..job.spec import JobSpec
from ..words import Msg, say
from .launch import prepare_launch
from .manager import Busy, JobManager, StartError

FOLDER = "fit-probes"
BUDGET_S = 180  # the default: three minutes for a probe phase
STEPS = 5  # optimizer steps a probe runs
WARMUP = 2  # ... the first of which are not measured (compilation, allocator, DeepSpeed's first step)
MAX_PROBES = 6  # settings probed at most in one phase (the fastest by the model first)
MIN_LEFT_S = 20  # no probe starts with less of the budget left: it could not pass its warm-up
POLL_S = 0.5


@dataclass
class Probe:
    """One setting, measured: ``status`` measured | oom | failed | out_of_time | busy."""

    key: str
    status: str
    tokens_per_s: float | None = None
    step_s: float | None = None
    seconds: float = 0.0
    why: str = ""  # the trainer's error (failed), or the busy job (busy)
    measured_at: float = 0.0


def where(spec: JobSpec, gpus: list[devices.Gpu]) -> str | None:
    """The device the job's probes measure on (its GPUs' name, or "cpu"), or None when they are not here."""
    if spec.launcher == "slurm" or spec.num_nodes > 1:  # a cluster's devices, or other machines': not here
        return None
    p = placement.place(spec, gpus)
    if p.kind == "cpu":
        return "cpu"
    chosen = [g for g in gpus if g.index in p.ids]
    return chosen[0].name if p.kind == "cuda" and chosen else None


def key_of(spec: JobSpec, choice, device: str, config_text: str) -> str:
    """What a measurement depends on: the model's config, the device, precision, cutoff, what trains, the world and
    the setting."""
    parts = [config_text, device, spec.precision, spec.cutoff_len, spec.finetuning_type, spec.lora_rank,
             sorted(spec.lora_target), spec.packing, spec.liger_kernel, spec.attn_implementation, spec.num_processes,
             sorted(spec.gpu_ids), choice.stage, choice.offload, choice.micro_batch, choice.accumulation,
             choice.checkpointing]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]


def _config_text(spec: JobSpec) -> str:
    path = Path(spec.model_name_or_path) / "config.json"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return spec.model_name_or_path  # a hub id: its config is what the id names


class Store:
    """The kept measurements (one file, written whole by this class only)."""

    def __init__(self, folder: Path | None = None):
        self.path = (folder or placement.cache_dir() / FOLDER) / "probes.json"

    def read(self) -> dict[str, Probe]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {k: Probe(**v) for k, v in data.items() if isinstance(v, dict)}

    def add(self, probe: Probe) -> None:
        kept = self.read()
        kept[probe.key] = probe
        self.path.parent.mkdir(parents=True, exist_ok=True)
        files.write_text_atomic(self.path, json.dumps({k: asdict(v) for k, v in kept.items()}, indent=1) + "\n")


def probe_job(spec: JobSpec, choice, folder: Path) -> JobSpec:
    """The job with the choice's setting, a few steps, nothing evaluated, saved or tracked, into ``folder``."""
    return replace(spec, deepspeed_stage=choice.stage, offload=choice.offload, per_device_train_batch_size=choice.micro_batch,
                   gradient_accumulation_steps=choice.accumulation, gradient_checkpointing=choice.checkpointing,
                   max_steps=STEPS, logging_steps=1, save_steps=0, eval_steps=0, val_size=0.0, eval_dataset=[],
                   output_dir=str(folder), resume=False, report_to="none", lr_scheduler_type="constant",
                   warmup_steps=0.0)


def measured(run_out: Path) -> tuple[str, float | None, float | None, str]:
    """(status, tokens/s, seconds a step, why) from a probe's events: the median of the steps after the warm-up."""
    events = record.read_events(run_out / record.EVENTS_FILE)
    errors = " ".join(str(e.get("message", "")) + str(e.get("traceback", "")) for e in events if e["event"] == "error")
    if "out of memory" in errors.lower() or "OutOfMemoryError" in errors:
        return "oom", None, None, errors[:300]
    logs = [e for e in events if e["event"] == "log" and e.get("tokens_per_sec")]
    steps = [b["elapsed"] - a["elapsed"] for a, b in zip(logs, logs[1:])]
    late = [e["tokens_per_sec"] for e in logs[WARMUP:]]
    if not late:
        return "failed", None, None, errors[:300]
    return "measured", statistics.median(late), statistics.median(steps[WARMUP - 1:] or steps) if steps else None, ""


def run_one(spec: JobSpec, choice, key: str, deadline: float, manager: JobManager, gpus: list[devices.Gpu]) -> Probe:
    """One probe through the launch path and the runner; stopped at ``deadline`` (out_of_time), which moves by the
    time the start waited for the devices (``ZEROBOARD_WAIT_FOREIGN_S``)."""
    t0 = time.time()
    folder = placement.cache_dir() / FOLDER / "runs" / key
    shutil.rmtree(folder, ignore_errors=True)
    job = probe_job(spec, choice, folder)
    prepared = prepare_launch(job, gpus)
    if prepared.command is None:
        why = "; ".join(f"{k}: {v}" for k, v in prepared.report.errors.items())
        return Probe(key, "failed", why=why[:300], seconds=time.time() - t0, measured_at=time.time())
    asked = time.time()
    try:
        st = manager.start(prepared, source="probe")
    except (Busy, StartError) as e:
        return Probe(key, "busy" if isinstance(e, Busy) else "failed", why=str(e.args[0])[:300], measured_at=time.time())
    deadline += time.time() - asked  # waiting for another workspace's job to free the devices is not probing
    late = False
    while True:
        now = manager.state(st.run_dir) or st
        if not now.active:
            break
        if time.time() > deadline and not late:
            late = True
            manager.abort(st.run_dir)
        time.sleep(POLL_S)
    status, tps, step_s, why = measured(now.output)
    if late and status != "oom":
        status = "out_of_time" if tps is None else status
    if status == "failed" and not why:
        why = str(now.message)[:300]
    manager.registry.remove(st.run_dir)
    shutil.rmtree(folder, ignore_errors=True)
    return Probe(key, status, tps, step_s, round(time.time() - asked, 1), why, time.time())


Progress = Callable[[int, int, object, "Probe | None", float], None]


def measure(spec: JobSpec, choices: list, gpus: list[devices.Gpu], budget_s: float = BUDGET_S,
            progress: Progress | None = None, manager: JobManager | None = None,
            store: Store | None = None) -> dict[int, Probe]:
    """Probe the fastest settings that fit (by the model), kept ones reused, until the budget is spent.

    Returns the measurement of each probed choice (by ``id``). ``progress(i, n, choice, probe, seconds_left)`` is
    called before each probe (probe None) and after it."""
    device = where(spec, gpus)
    if device is None:
        return {}
    store = store or Store()
    kept = store.read()
    text = _config_text(spec)
    fitting = to_probe(choices, device)
    out: dict[int, Probe] = {}
    deadline = time.time() + budget_s
    manager = manager or JobManager()
    failed = 0
    for i, c in enumerate(fitting, start=1):
        key = key_of(spec, c, device, text)
        if key in kept and kept[key].status in ("measured", "oom"):
            out[id(c)] = kept[key]
            continue
        left = deadline - time.time()
        if left < MIN_LEFT_S:
            break
        if progress:
            progress(i, len(fitting), c, None, left)
        began = time.time()
        probe = run_one(spec, c, key, deadline, manager, gpus)
        deadline += max(0.0, (time.time() - began) - probe.seconds)  # the wait for the devices, if any
        out[id(c)] = probe
        if probe.status in ("measured", "oom"):
            store.add(probe)
        if progress:
            progress(i, len(fitting), c, probe, deadline - time.time())
        failed = failed + 1 if probe.status == "failed" else 0
        if probe.status == "busy" or failed >= 2:
            break  # the devices are taken, or the job fails whatever the setting: the rest would too
    return out


def to_probe(choices: list, device: str) -> list:
    """The settings to probe, in order: on a GPU the fastest that fit by the step-time model; on CPU processes
    (whose speed the model does not know) the job's own setting, then the other stages at its micro-batch, then
    the other micro-batches."""
    fitting = [c for c in choices if c.fits is not False]
    if device == "cpu":
        asked = next((c for c in choices if c.asked), fitting[0] if fitting else None)
        if asked is not None:
            fitting.sort(key=lambda c: (not c.asked, c.checkpointing != asked.checkpointing,
                                        abs(c.micro_batch - asked.micro_batch), c.stage != asked.stage))
    return fitting[:MAX_PROBES]


def ranked(choices: list, probes: dict[int, Probe]) -> list:
    """The choices, measured ones that ran first by measured tokens/s, then the rest as the model ranked them."""
    ran = [c for c in choices if probes.get(id(c)) is not None and probes[id(c)].status == "measured"]
    ran.sort(key=lambda c: -probes[id(c)].tokens_per_s)
    return ran + [c for c in choices if c not in ran]


def pick_words(choices: list, probes: dict[int, Probe]) -> Msg | None:
    """"measured 29.0k tokens/s, 1.9x the next" for the best measured choice; None when nothing was measured."""
    ran = [c for c in ranked(choices, probes) if probes.get(id(c)) and probes[id(c)].status == "measured"]
    if not ran:
        return None
    best = probes[id(ran[0])].tokens_per_s
    if len(ran) == 1:
        return say("plan.probe.pick_alone", tps=f"{best / 1000:.1f}k")
    nxt = probes[id(ran[1])].tokens_per_s
    return say("plan.probe.pick", tps=f"{best / 1000:.1f}k", x=f"{best / nxt:.2f}" if best < 1.5 * nxt else f"{best / nxt:.1f}")


def result_words(p: Probe | None):
    """A probe's result in the fit table's column (a catalog message), or "-"."""
    if p is None:
        return "-"
    if p.status == "measured":
        return say("plan.probe.result.measured", tps=f"{p.tokens_per_s:,.0f}")
    return say(f"plan.probe.result.{p.status}", why=p.why[:120])


def fit_measured(spec: JobSpec, gpus: list[devices.Gpu], budget_s: float = BUDGET_S, progress: Progress | None = None,
                 trace: str = "cache") -> tuple[list, dict | None, Msg | None, str]:
    """``--fit`` with probes where the devices are here: (choices ranked, each probed choice's words by id or None,
    the pick's words, the ranking's source: measured | partly | predicted)."""
    from .. import planner

    device = where(spec, gpus)
    choices = planner.fit(spec, gpus, trace=trace, cpu=device == "cpu")
    if device is None or budget_s <= 0:
        return choices, None, None, "predicted"
    probes = measure(spec, choices, gpus, budget_s, progress)
    order = ranked(choices, probes)
    words = {id(c): result_words(probes.get(id(c))) for c in order}
    fitting = to_probe(choices, device)
    done = all(probes.get(id(c)) is not None and probes[id(c)].status in ("measured", "oom") for c in fitting)
    busy = any(p.status == "busy" for p in probes.values())
    return order, words, pick_words(order, probes), "measured" if done else "busy" if busy else "partly"
