"""Validation before launch: every problem at once, each naming its field and the fix.

Light on purpose (no torch, no transformers): model facts come from
``config.json`` and the safetensors header (``modelinfo``), the devices from
the job's :class:`~zeroboard.job.placement.Placement`.  Every message is a
catalog sentence (``words.checks``), so the page can show it in Chinese.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import workspace
from ..data import hubdir, info as datainfo, media, records as datarecords, scan
from ..data.formats import DataError
from ..words import Msg, say, tr
from . import bounds, devices, dscheck, folders, hub, liger, modelinfo, prefchecks, samples, slurm, trackers
from .placement import Placement, place
from .ports import port_is_free
from .spec import DEMO_DATA_DIR, DEMO_MODEL, LESSON_MODEL, JobSpec, owned_arguments

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# TrainingArguments that ZeroBoard sets from its own fields -> the job field to use instead (from the fields' own
# declarations: extra_args may not set these)
OWNED_ARGS = owned_arguments()

# model types whose transformers class has no SDPA path (``_supports_sdpa = False``: Gemma-2's attention soft-capping):
# "auto" runs them with eager attention, which keeps each layer's seq x seq weights; "sdpa" fails at load
EAGER_ONLY_MODEL_TYPES = {"gemma2"}
# models with recurrent (state-space or linear-attention) layers: their state would run across packed samples
RECURRENT_MODEL_TYPES = {"mamba", "mamba2", "falcon_mamba", "jamba", "zamba", "zamba2", "bamba", "granitemoehybrid",
                         "qwen3_next", "lfm2", "falcon_h1", "nemotron_h", "rwkv", "recurrent_gemma", "minimax"}


class HubError(RuntimeError):
    """A hub id's config.json is neither cached nor fetchable now (the message says which and why)."""


@dataclass
class Report:
    errors: dict[str, Msg] = field(default_factory=dict)
    warnings: dict[str, Msg] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def text(self, lang: str = "en") -> str:
        lines = [f"{say('check.error_word').say_in(lang)}  {k}: {tr(v, lang)}" for k, v in self.errors.items()]
        lines += [f"{say('check.note_word').say_in(lang)}   {k}: {tr(v, lang)}" for k, v in self.warnings.items()]
        return "\n".join(lines)


def is_demo_model(path: str) -> bool:
    """Whether ``path`` is a model ZeroBoard builds itself on first use (the demo's or the lesson's)."""
    return Path(path).resolve() in (Path(DEMO_MODEL).resolve(), Path(LESSON_MODEL).resolve())


def is_demo_data(path: str) -> bool:
    return Path(path).resolve() == Path(DEMO_DATA_DIR).resolve()


# --- the checks ----------------------------------------------------------------

def _check_model(spec: JobSpec, r: Report) -> Path | None:
    m = spec.model_name_or_path
    if not m:
        r.errors["model_name_or_path"] = say("check.model_empty")
        return None
    p = Path(m).expanduser()
    if p.is_dir():
        problem = modelinfo.config_problem(p)  # a FIFO, 1e400, a key twice: refused naming the file and the key
        if problem is None and not (p / "config.json").is_file():
            problem = say("check.model_no_config", path=m)
        if problem is not None:
            r.errors["model_name_or_path"] = problem
            return None
        return p
    if is_demo_model(m):
        r.warnings["model_name_or_path"] = say("check.demo_model_built")
        return None
    if p.exists():
        r.errors["model_name_or_path"] = say("check.model_is_file", path=m)
    elif HUB_ID.match(m) and not m.startswith((".", "/", "~")):
        try:  # the cache first, then one short network try: a run that would fail to download is refused now
            _, source = hub.hub_config(m, HubError)
        except HubError as e:
            r.errors["model_name_or_path"] = say("check.model_hub_unusable", path=m, why=e.args[0])
        else:
            r.warnings["model_name_or_path"] = say("check.model_hub", path=m, source=source)
    else:
        r.errors["model_name_or_path"] = say("check.model_missing", path=m)
    return None


def path_too_long(value: str) -> Msg | None:
    """Why a path cannot exist on this filesystem (a NUL byte, a name or the whole path too long), or None."""
    if workspace.has_nul(value):
        return say("safe.nul_in_path")
    long = workspace.too_long(value, workspace.current().root) if value else None
    if long is None:
        return None
    part, n, limit = long
    shown = part[:40] + "…" if part else value[:60] + "…"
    return say("check.name_too_long" if part else "check.path_too_long", part=shown, n=n, limit=limit)


def check_paths(spec: JobSpec, r: Report) -> bool:
    """Every path the job names fits the filesystem's limits, and every path it reads lies inside the workspace,
    an allowed folder or (models, data) the hub cache. Checked first: nothing else looks at a path before."""
    ws = workspace.current()
    named = [("model_name_or_path", spec.model_name_or_path), ("dataset_dir", spec.dataset_dir),
             ("deepspeed", spec.deepspeed), ("output_dir", spec.output_dir)]
    named += [("dataset", n) for n in spec.dataset] + [("eval_dataset", n) for n in spec.eval_dataset]
    for name, value in named:
        long = path_too_long(value)
        if long is not None and name not in r.errors:
            r.errors[name] = long
    if r.errors:
        return False
    reads = {"model_name_or_path": (spec.model_name_or_path, True), "dataset_dir": (spec.dataset_dir, True),
             "deepspeed": (spec.deepspeed, False)}
    for name, (value, cache_ok) in reads.items():
        if not value or (name == "model_name_or_path" and HUB_ID.match(value) and not ws.path(value).exists()):
            continue  # a hub id: fetched into the cache by the trainer
        if not ws.readable(value, cache_ok=cache_ok):
            r.errors[name] = say("check.read_outside", path=value, roots=ws.describe())
    return not r.errors


def _check_data(spec: JobSpec, model_dir: Path | None, r: Report) -> int | None:
    """Every dataset resolves and every record reads as a chat (the whole file, streamed: the first bad record is
    named). Returns how many training records there are (None when a hub dataset leaves it unknown)."""
    if not spec.dataset:
        r.errors["dataset"] = say("check.no_dataset")
        return None
    if is_demo_data(spec.dataset_dir):
        from ..data.demo import write_demo_data

        write_demo_data(spec.dataset_dir)
    try:  # the folder itself first (REMOTE:owner/name: fetched into the hub cache), so that its error names it
        hubdir.local_folder(spec.dataset_dir)
    except DataError as e:
        r.errors["dataset_dir"] = e.args[0]
        return None
    sample: list = []
    total: int | None = 0
    sizes = datarecords.DEFAULT if {"max_cell_bytes", "max_record_bytes"} & set(r.errors) else \
        datarecords.Sizes(spec.max_cell_bytes, spec.max_record_bytes)
    for name_field, names in (("dataset", spec.dataset), ("eval_dataset", spec.eval_dataset)):
        for name in names:
            try:
                src = datainfo.resolve(name, spec.dataset_dir)
            except DataError as e:
                r.errors[name_field] = e.args[0]
                return None
            unfit = datainfo.stage_problem(src, spec.training_stage)  # pairs, tags, or one answer
            if unfit is None and src.images:  # images: a vision-language model sees them
                unfit = media.images_problem(name, spec.model_name_or_path, modelinfo.model_type(model_dir), spec.packing)
            if unfit is not None:
                r.errors[name_field] = unfit
                return None
            if src.unknown:
                r.warnings.setdefault(name_field, say("data.unknown_keys", name=name, keys=", ".join(src.unknown)))
            if src.load_from != "file":  # a hub dataset: the datasets library loads it at launch
                r.warnings.setdefault(name_field, say("data.hub_note", name=name, where=src.where))
                total = None if name_field == "dataset" else total
                continue
            scanned = scan.scan(src, sizes)
            if scanned.error is not None:
                r.errors[name_field] = scanned.error
                return None
            if scanned.skipped:  # as LLaMA-Factory skips them: counted and said, trained without them
                r.warnings.setdefault(name_field, say("data.skipped_records", name=name, n=scanned.skipped,
                                                      total=scanned.records, first=scanned.first_skipped))
            if name_field == "dataset":
                sample += scanned.first
                if total is not None:
                    used = scanned.records - scanned.skipped
                    total += min(used, src.num_samples or used)
    _check_cutoff(spec, model_dir, sample[:samples.SAMPLE * 2], r)
    if total is not None and spec.max_samples:
        total = min(total, spec.max_samples * len(spec.dataset))
    return total


def _check_mixing(spec: JobSpec, r: Report) -> None:
    """interleave_probs as LLaMA-Factory takes them: with an interleave mixing, one per dataset (and per evaluation
    dataset), each a probability, summing to 1."""
    probs = spec.interleave_probs
    if not probs:
        return
    if spec.mix_strategy == "concat":
        r.errors["interleave_probs"] = say("check.probs_concat")
    elif len(probs) != len(spec.dataset) or (spec.eval_dataset and len(probs) != len(spec.eval_dataset)):
        r.errors["interleave_probs"] = say("check.probs_count", n=len(probs), datasets=len(spec.dataset),
                                           evals=len(spec.eval_dataset) or "-")
    elif any(not 0 <= p <= 1 for p in probs) or abs(sum(probs) - 1) > 1e-6:
        r.errors["interleave_probs"] = say("check.probs_sum", total=round(sum(probs), 6))


def _check_batch(spec: JobSpec, where: Placement, records: int | None, r: Report) -> None:
    """One optimizer step takes micro-batch x accumulation x world size samples: more than the data holds is a
    step that never fills (the Trainer steps at the epoch's end on what it had)."""
    if records is None or "gradient_accumulation_steps" in r.errors:
        return
    per_step = spec.per_device_train_batch_size * spec.gradient_accumulation_steps * where.world_size
    if per_step > records:
        r.warnings.setdefault("gradient_accumulation_steps", say("check.batch_over_data", per_step=per_step, n=records))


def _check_cutoff(spec: JobSpec, model_dir: Path | None, sample: list, r: Report) -> None:
    """Tokenize a sample with the model's tokenizer: a cutoff that leaves no answer to learn is refused before launch."""
    if "cutoff_len" in r.errors:
        return
    counted = samples.count(sample, model_dir, spec.template, spec.cutoff_len, spec.truncation) if model_dir else None
    if counted is None or not counted.seen:
        return
    if counted.answer_lost == counted.seen:
        r.errors["cutoff_len"] = say("check.cutoff_all_lost", cutoff=spec.cutoff_len, n=counted.seen)
    elif counted.answer_lost * 2 >= counted.seen:
        r.warnings["cutoff_len"] = say("check.cutoff_half_lost", cutoff=spec.cutoff_len, lost=counted.answer_lost,
                                       n=counted.seen)


def _check_lora(spec: JobSpec, model_dir: Path | None, r: Report) -> None:
    if spec.finetuning_type != "lora":
        return
    cfg = modelinfo.model_config(model_dir)
    hidden = int((cfg or {}).get("hidden_size") or (cfg or {}).get("n_embd") or 0)
    if hidden and spec.lora_rank > hidden:  # a rank above the layer width adds parameters and no capacity
        r.errors["lora_rank"] = say("check.lora_rank_width", rank=spec.lora_rank, hidden=hidden)
    targets = spec.lora_target
    if not targets:
        r.errors["lora_target"] = say("check.lora_target_empty")
        return
    if "all" in targets:
        if len(targets) > 1:
            r.errors["lora_target"] = say("check.lora_target_both")
        return
    if model_dir is None:
        return
    known = modelinfo.linear_module_names(model_dir)
    if known is None:
        r.warnings["lora_target"] = say("check.lora_target_unknown")
        return
    unknown = [t for t in targets if t not in known]
    if unknown:
        r.errors["lora_target"] = say("check.lora_target_missing", names=", ".join(unknown), known=", ".join(sorted(known)))


def _check_output(spec: JobSpec, r: Report) -> None:
    problem = folders.output_problem(spec)
    if problem is not None:
        name, msg = problem
        r.errors[name] = msg
    elif spec.resume:  # say which checkpoint the run continues from, and which it passes over
        done, partial = folders.checkpoints(workspace.current().path(spec.output_dir))
        later = [p.name for p in partial if int(folders.CHECKPOINT.match(p.name).group(1)) > int(
            folders.CHECKPOINT.match(done[-1].name).group(1))]
        skipped = say("check.resume_skips", names=", ".join(later)) if later else ""
        r.warnings["resume"] = say("check.resume_from", name=done[-1].name,
                                   step=folders.CHECKPOINT.match(done[-1].name).group(1), skipped=skipped)


def _check_devices(spec: JobSpec, gpus: list[devices.Gpu], where: Placement, r: Report) -> None:
    have = [g.index for g in gpus]
    wrong = [i for i in spec.gpu_ids if i not in have]
    if wrong and spec.launcher != "slurm":  # a GPU that is not there, whatever the device type: never a quiet CPU run
        r.errors["gpu_ids"] = say("check.gpu_missing", wrong=", ".join(map(str, wrong)), have=", ".join(map(str, have))) \
            if have else say("check.gpu_none_here", wrong=", ".join(map(str, wrong)))
    if spec.device_type == "cuda" and not gpus:
        r.errors["device_type"] = say("check.no_gpu")
        return
    if where.kind == "cuda":
        if not wrong and len(set(spec.gpu_ids)) != len(spec.gpu_ids):
            r.errors["gpu_ids"] = say("check.gpu_twice")
        old = [g.index for g in where.chosen if not g.supports_bf16]
        if spec.precision == "bf16" and old:
            r.errors["precision"] = say("check.gpu_no_bf16", gpus=str(old))
    else:
        cores = devices.cpu_count() if spec.launcher != "slurm" else 1 << 20  # a cluster node's cores are its own
        if spec.num_processes < 1:
            r.errors["num_processes"] = say("check.processes_positive")
        elif spec.num_processes > cores:
            r.errors["num_processes"] = say("check.processes_cores", n=spec.num_processes, cores=cores)
        if spec.precision == "fp16":
            r.errors["precision"] = say("check.fp16_cpu")
        if spec.gpu_ids and "gpu_ids" not in r.errors:
            r.warnings["gpu_ids"] = say("check.gpu_ids_ignored")


def _check_workers(spec: JobSpec, r: Report) -> None:
    """Worker processes past this machine's cores: said, not refused (a file written for a cluster node); the trainer
    uses at most the cores it has (``dataprep.workers``, ``mapping.dataloader_workers``)."""
    if spec.launcher == "slurm":  # a cluster node's cores are its own
        return
    cores = devices.cpu_count()
    for name in ("preprocessing_num_workers", "dataloader_num_workers"):
        n = getattr(spec, name)
        if n > cores and name not in r.errors:
            r.warnings[name] = say("check.workers_clamped", n=n, cores=cores)


def _check_nodes(spec: JobSpec, r: Report) -> None:
    if spec.launcher == "slurm":  # the cluster allocates the nodes and the rendezvous runs on the first of them
        r.errors.update({k: v for k, v in slurm.problems(spec).items() if k not in r.errors})
        if spec.node_rank:
            r.errors["node_rank"] = say("slurm.node_rank")
        return
    if spec.num_nodes < 1:
        r.errors["num_nodes"] = say("check.nodes_positive")
    elif not 0 <= spec.node_rank < spec.num_nodes:
        r.errors["node_rank"] = say("check.node_rank_range", top=spec.num_nodes - 1)
    if spec.num_nodes > 1:
        if spec.launcher != "torchrun":
            r.errors["launcher"] = say("check.nodes_torchrun")
        if spec.master_port == 0:
            r.errors["master_port"] = say("check.nodes_port")
    if not 0 <= spec.master_port <= 65535:
        r.errors["master_port"] = say("check.port_range")
    elif spec.master_port and spec.node_rank == 0 and not port_is_free(spec.master_port):
        r.errors["master_port"] = say("check.port_taken", port=spec.master_port)


def _check_deepspeed(spec: JobSpec, where: Placement, r: Report) -> None:
    if spec.offload and spec.deepspeed_stage == "none" and not spec.deepspeed:
        r.errors["offload"] = say("check.offload_needs_stage")
    if not spec.deepspeed:
        return
    if where.ds_error is not None:
        r.errors["deepspeed"] = where.ds_error
        return
    if spec.deepspeed_stage != "none" and spec.deepspeed_stage != where.stage:
        r.errors["deepspeed_stage"] = say("check.stage_mismatch", stage=spec.deepspeed_stage,
                                          file=Path(spec.deepspeed).name, own=where.stage)
    wrong = dscheck.disagreements(spec, where)
    if wrong:
        r.errors["deepspeed"] = say("check.ds_disagrees", file=Path(spec.deepspeed).name, fields="; ".join(wrong))
    elif where.ds_config is not None:  # DeepSpeed's own verdict on the file, before the ranks meet it
        refused, note = dscheck.check(where.ds_config)
        if refused is not None:
            r.errors["deepspeed"] = say("check.ds_refused", file=Path(spec.deepspeed).name, why=refused)
        elif note is not None:
            r.warnings.setdefault("deepspeed", note)


def _check_speed(spec: JobSpec, where: Placement, model_dir: Path | None, r: Report) -> None:
    use_gpu = where.kind == "cuda"
    model_type = modelinfo.model_type(model_dir)
    if spec.liger_kernel == "on":
        if not use_gpu:
            r.errors["liger_kernel"] = say("check.liger_cpu")
        elif liger.source_text() is None:
            r.errors["liger_kernel"] = say("check.liger_missing")
        elif model_type and not liger.coverage(model_type):  # what the installed Liger's own table patches
            r.errors["liger_kernel"] = say("check.liger_model", model_type=model_type)
    if spec.attn_implementation == "flash_attention_2":
        old = [g.index for g in where.chosen if g.compute_capability < (8, 0)]
        if not use_gpu:
            r.errors["attn_implementation"] = say("check.fa_cpu")
        elif not modelinfo.installed("flash_attn"):
            r.errors["attn_implementation"] = say("check.fa_missing")
        elif old:
            r.errors["attn_implementation"] = say("check.fa_old_gpu", gpus=str(old))
        elif where.precision == "fp32":
            r.errors["attn_implementation"] = say("check.fa_fp32")
        elif spec.packing and spec.per_device_train_batch_size > 1:
            r.errors["attn_implementation"] = say("check.fa_packing")
    if spec.attn_implementation == "sdpa" and model_type in EAGER_ONLY_MODEL_TYPES:
        r.errors["attn_implementation"] = say("check.sdpa_unsupported", model_type=model_type)
    if spec.packing and model_type in RECURRENT_MODEL_TYPES:
        r.errors["packing"] = say("check.packing_recurrent", model_type=model_type)
    if spec.master_weights == "split" and "optim" in spec.extra_args:
        r.errors["master_weights"] = say("check.master_split_optim")
    if spec.pure_bf16:
        if where.deepspeed or spec.deepspeed:
            r.errors["pure_bf16"] = say("check.pure_bf16_ds")
        elif spec.precision in ("fp16", "fp32") or (spec.precision == "auto" and not use_gpu):
            r.errors["pure_bf16"] = say("check.pure_bf16_compute")
        elif where.precision != "bf16":
            r.errors["pure_bf16"] = say("check.pure_bf16_gpu", gpus=str([g.index for g in where.chosen
                                                                         if not g.supports_bf16]))


def _check_tracker(spec: JobSpec, r: Report) -> None:
    """A tracker is offered when its package is installed: another is refused, with the command that installs it."""
    if not trackers.installed(spec.report_to):
        r.errors["report_to"] = say("check.tracker_missing", tracker=spec.report_to, install=trackers.install_hint(spec.report_to),
                                    offered=", ".join(trackers.offered()))


def _check_extra(spec: JobSpec, r: Report) -> None:
    """Extra TrainingArguments: known names, values of the kind each takes (an optimizer name it knows, ...)."""
    if not spec.extra_args:
        return
    known = modelinfo.training_argument_names()
    for key, value in spec.extra_args.items():
        if key in OWNED_ARGS:
            r.errors["extra_args"] = say("check.extra_owned", key=key, field=OWNED_ARGS[key])
        elif known and key not in known:
            r.errors["extra_args"] = say("check.extra_unknown", key=key)
        elif (wrong := modelinfo.argument_problem(key, value)) is not None:
            r.errors["extra_args"] = say(wrong[0], **wrong[1])
        if "extra_args" in r.errors:
            return
    if spec.extra_args.get("torch_compile") is True and spec.liger_kernel != "off":
        # what it did on the H200 (docs/en/gpu-results.md, "torch_compile"): say so before the launch
        r.warnings["extra_args"] = say("check.compile_liger")


def validate(spec: JobSpec, gpus: list[devices.Gpu] | None = None, where: Placement | None = None) -> Report:
    """Check a job; ``gpus`` defaults to what NVML sees now, ``where`` to the job's placement on them."""
    r = Report()
    if not check_paths(spec, r):  # nothing outside the workspace is read, not even to check it
        return r
    gpus = devices.detect_gpus() if gpus is None else gpus
    where = where or place(spec, gpus)
    model_dir = _check_model(spec, r)
    bounds.check(spec, r.errors, r.warnings)
    records = _check_data(spec, model_dir, r)
    _check_mixing(spec, r)
    _check_lora(spec, model_dir, r)
    _check_output(spec, r)
    _check_devices(spec, gpus, where, r)
    _check_workers(spec, r)
    _check_nodes(spec, r)
    _check_deepspeed(spec, where, r)
    _check_batch(spec, where, records, r)
    _check_speed(spec, where, model_dir, r)
    prefchecks.check(spec, where, r.errors)
    _check_tracker(spec, r)
    _check_extra(spec, r)
    return r
