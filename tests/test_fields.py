"""Every job field reaches something: a field that reaches nothing fails here, naming itself.

Each field is set to a value other than its default -- derived from its type and choices, from a small table only
where the type cannot give one that works -- and what it changed is observed, against the same job at its default:

- trainer: the job goes through the command (the flags the trainer parses back), then through the trainer's own
  ``training_arguments``, in this process on CPU (no training): a TrainingArguments attribute that differs;
- launch: the command's argv but for the field's own flag, its environment and the DeepSpeed JSON it names, on
  CPU processes and on four fake GPUs;
- data, model, run, watch: whether the trainer's data preparation (template + tokenized sets), its model set-up
  (speed-ups, dtype, model and adapters), its own steps (resume, the tracker) and the run's supervisor (what its
  watch over the run is given) read the field, recorded by watching attribute reads of the job (as
  ``webui.handlers.plan_fields`` learns what the planner reads).

Each field's definition declares where it goes (``to=`` in ``job/spec.py``); the declaration must be what is
observed, and the trainer's arguments are generated from it: removing a field's mapping makes it reach nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
import shutil
import typing

import pytest

from helpers import liger_wheel
from zeroboard.job import command, mapping, modelinfo, presets, record, spec
from zeroboard.job.devices import Gpu
from zeroboard.job.placement import place

FAKE_GPUS = [Gpu(i, "NVIDIA H200", 141 << 30, 140 << 30, 1 << 30, 0, (9, 0)) for i in range(4)]
PORT = 29611


# --- a value other than the default ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Try:
    value: object
    needs: dict = dataclasses.field(default_factory=dict)  # other fields it acts with (set in both jobs compared)
    on_gpus: bool = False  # the trainer's arguments as a GPU machine's command gives them (else: CPU processes)


def other_value(name: str, table: dict) -> Try:
    """A value of ``name`` other than its default: from the table, else from its type and choices."""
    if name in table:
        return table[name] if isinstance(table[name], Try) else Try(table[name])
    default = spec.to_dict(spec.JobSpec())[name]
    t = spec.field_type(name)
    if spec.choices(name) is not None:
        return Try(next(c for c in spec.choices(name) if c != default))
    if t is bool:
        return Try(not default)
    if t is int:
        return Try(default + 1)
    if t is float:
        return Try(default * 2 if default else 0.5)
    if t is str:
        return Try(f"{default}-2")
    if typing.get_origin(t) is list:
        item = typing.get_args(t)[0]
        return Try(default[:1] if len(default) > 1 else default + [item(1) if item is int else "x"])
    raise AssertionError(f"{name}: no value derived for {t}; add one to the table")


@pytest.fixture(scope="module")
def table(tmp_path_factory, demo):
    """Values the type alone cannot give: a path that must hold something, a setting that acts with another."""
    here = tmp_path_factory.mktemp("fields")
    model = here / "model"
    model.mkdir()
    shutil.copy(demo / "config.json", model / "config.json")  # the trainer's speed-ups read its model type
    ds = here / "ds_mine.json"
    ds.write_text(json.dumps(presets.preset("2", False)))
    return {
        "model_name_or_path": str(model),
        "deepspeed": str(ds),
        "extra_args": {"adam_beta2": 0.95},
        "liger_kernel": "off",  # auto turns the kernels on where they work (a GPU with Liger, as simulated here)
        "eval_steps": Try(3, {"val_size": 0.1}),  # evaluation steps with an evaluation set to step through
        "interleave_probs": Try([0.25, 0.75], {"mix_strategy": "interleave_under"}),  # the demo's two datasets
        "offload": Try(True, {"deepspeed_stage": "2"}),  # what offload moves depends on the stage; without one, nothing
        "pure_bf16": Try(True, {"precision": "bf16"}),  # bf16 weights need bf16 compute
        "node_rank": Try(1, {"num_nodes": 2}),
        "master_addr": Try("10.0.0.5", {"num_nodes": 2}),
        # auto means CPU processes on this machine: the difference shows where there are GPUs (fp32: buildable here)
        "device_type": Try("cpu", {"precision": "fp32"}, on_gpus=True),
        # the cluster's fields shape the sbatch script a Slurm job submits (and nothing of a local one)
        "slurm_gpus_per_node": Try(4, {"launcher": "slurm", "precision": "fp32"}),  # (bf16 is not buildable here)
        **{name: Try(value, {"launcher": "slurm"}) for name, value in (
            ("slurm_partition", "gpu"), ("slurm_cpus_per_task", 8),
            ("slurm_time", "02:00:00"), ("slurm_account", "lab"), ("slurm_extra", ["--mem=64G"]))},
    }


# --- what the trainer receives ---------------------------------------------------------------------------------

def node_argv(cmd: command.Command) -> list[str]:
    """What starts the ranks: the argv, or for a Slurm job the torchrun each node's task runs (from its script)."""
    if cmd.script is None:
        return cmd.argv
    return shlex.split(shlex.split(cmd.script.rsplit("bash -c ", 1)[1])[0])


def trainer_job(job: spec.JobSpec, gpus=()) -> spec.JobSpec:
    """The job as the trainer parses it back from the command's flags."""
    argv = node_argv(command.build(job, place(job, list(gpus)), port=PORT))
    return spec.from_flags(argv[argv.index(command.TRAINER_MODULE) + 1:])


@contextlib.contextmanager
def liger_here():
    """A GPU and an installed Liger (its real source, from the wheel `make install-test` downloads), as the
    trainer's speed-ups see an H200 (so that liger_kernel has something to turn on); only while they are resolved."""
    import torch

    from zeroboard.job import liger

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "is_available", lambda: True)
        mp.setenv(liger.SOURCE_ENV, str(liger_wheel()))
        yield


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """A world of one CPU process, as torchrun would describe it: TrainingArguments with a DeepSpeed config set up
    DeepSpeed's process group."""
    from zeroboard.job.ports import free_port

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "",
           "ZEROBOARD_DATA_CACHE": str(tmp_path_factory.mktemp("data-cache"))}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        yield
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)


def trainer_arguments(job: spec.JobSpec, gpus=()) -> dict:
    """The TrainingArguments the trainer makes for ``job`` launched on ``gpus`` (none: CPU processes), as a dict."""
    from zeroboard.training import speedups, train

    tjob = trainer_job(job, gpus)
    ds_config = json.loads(open(tjob.deepspeed).read()) if tjob.deepspeed else None
    with liger_here():
        speed = speedups.Speedups(tjob, ds_config)
    args = train.training_arguments(tjob, ds_config, speed)
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}


# --- what the launch takes ------------------------------------------------------------------------------------

def launch(job: spec.JobSpec, name: str) -> list:
    """The command on CPU processes and on fake GPUs, without the field's own flag to the trainer."""
    out = []
    for gpus in ((), FAKE_GPUS):
        where = place(job, list(gpus))
        cmd = command.build(job, where, port=PORT)
        argv = node_argv(cmd)
        i = argv.index(command.TRAINER_MODULE)
        flags = dict(zip(argv[i + 1::2], argv[i + 2::2]))
        flags.pop(f"--{name}", None)
        head = (cmd.script or "").split("srun ")[0]  # a Slurm job's #SBATCH lines and environment
        out.append((argv[1:i + 1], cmd.env, flags, where.ds_path, where.ds_config, head))
    return out


# --- what ZeroBoard's own parts read ------------------------------------------------------------------------------

def recording(job: spec.JobSpec, reads: set[str]) -> spec.JobSpec:
    class Recording(spec.JobSpec):
        def __getattribute__(self, name):
            if name in spec.FIELDS:
                reads.add(name)
            return super().__getattribute__(name)

    return Recording(**spec.to_dict(job))


@pytest.fixture(scope="module")
def reads(demo, one_process, tmp_path_factory) -> dict[str, set[str]]:
    """The fields the trainer's data preparation, model set-up and own steps read, for the demo job (LoRA, an
    evaluation set from val_size) and its full fine-tuning: every branch that reads a field is taken."""
    from transformers import AutoTokenizer

    from zeroboard.runs import stall
    from zeroboard.training import speedups, trackers, train

    out = tmp_path_factory.mktemp("run")
    base = trainer_job(spec.JobSpec(output_dir=str(out), val_size=0.1, max_steps=1, resume=True))
    seen: dict[str, set[str]] = {"data": set(), "model": set(), "run": set(), "watch": set()}
    tokenizer = AutoTokenizer.from_pretrained(base.model_name_or_path)
    job = recording(base, seen["data"])
    train.use_template(job, tokenizer)
    train.prepare_data(job, tokenizer, train.training_arguments(base, None, speedups.Speedups(base, None)),
                       record.EventWriter(out, 0))
    for ft in ("lora", "full"):
        job = recording(dataclasses.replace(base, finetuning_type=ft), seen["model"])
        speed = speedups.Speedups(job, None)
        train.load_model(job, train.weights_dtype(job, None), speed)
    # a vision-language model's job (the built-in tiny Qwen3-VL on its pictures): the image fields' readers
    from zeroboard.training import vision
    from zeroboard.training.demo_vision import build_vision_model, write_vision_data

    vlm = tmp_path_factory.mktemp("vlm")
    write_vision_data(vlm / "data")
    build_vision_model(vlm / "model", vlm / "text")
    vbase = trainer_job(spec.JobSpec(output_dir=str(out), model_name_or_path=str(vlm / "model"), dataset=["demo_images"],
                                     dataset_dir=str(vlm / "data"), template="qwen3_vl_nothink", max_steps=1))
    vtok = AutoTokenizer.from_pretrained(vbase.model_name_or_path)
    job = recording(vbase, seen["data"])
    train.use_template(job, vtok)
    train.prepare_data(job, vtok, train.training_arguments(vbase, None, speedups.Speedups(vbase, None)),
                       record.EventWriter(out, 0), vision.Vision.of(job, vtok))
    for ft in ("lora", "full"):
        job = recording(dataclasses.replace(vbase, finetuning_type=ft), seen["model"])
        train.load_model(job, train.weights_dtype(job, None), speedups.Speedups(job, None))
    job = recording(base, seen["run"])
    train.resume_checkpoint(job)
    trackers.start(job)
    for stage in ("dpo", "kto", "simpo", "orpo"):  # each preference stage's TRL config reads the settings it takes
        job = recording(dataclasses.replace(base, training_stage=stage), seen["run"])
        train.training_arguments(job, None, speedups.Speedups(job, None))
    stall.settings(recording(base, seen["watch"]))  # what the supervisor's launch.json gets
    return seen


# --- the test ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def baselines(one_process, tmp_path_factory):
    """The default job's TrainingArguments (per set of companion fields), and its output folder."""
    return {"output_dir": str(tmp_path_factory.mktemp("out") / "run")}


@pytest.mark.parametrize("name", list(spec.FIELDS))
def test_every_field_reaches_what_it_declares(name, table, reads, baselines):
    tried = other_value(name, table)
    value, gpus = tried.value, FAKE_GPUS if tried.on_gpus else ()
    base = spec.JobSpec(**{"output_dir": baselines["output_dir"], **tried.needs})
    changed = dataclasses.replace(base, **{name: value})
    assert getattr(changed, name) != getattr(spec.JobSpec(), name), f"{name}: the value tried is its default"
    key = json.dumps([tried.needs, tried.on_gpus], sort_keys=True)
    if key not in baselines:
        baselines[key] = trainer_arguments(base, gpus)
    before, after = baselines[key], trainer_arguments(changed, gpus)
    moved = {a for a in before if after.get(a) != before[a]}  # TrainingArguments' own (a TRL config has more)
    reached = {"trainer"} if moved else set()
    if launch(changed, name) != launch(base, name):
        reached.add("launch")
    reached |= {part for part, fields in reads.items() if name in fields}
    to = spec.destination(name)

    assert reached, f"{name} = {value!r} reaches nothing: not the trainer's arguments, not the command, and neither " \
                    f"data preparation nor model loading nor the trainer's own steps read it (declared: {to})"
    if to.args or to.extra:
        assert to.extra and moved or moved & set(to.args), f"{name} declares TrainingArguments {to.args}: none changed"
    else:  # only through the command: the placement it changes, the flags of other fields the command passes
        assert not moved or "launch" in to.parts, f"{name} changed TrainingArguments {sorted(moved)} undeclared"
    for part in to.parts:
        assert part in reached, f"{name} declares that {part} takes it, but {part} never does (reached: {sorted(reached)})"


def test_every_field_declares_where_it_goes():
    undeclared = [n for n in spec.FIELDS if spec.FIELDS[n].metadata["to"] is None]
    assert not undeclared, f"fields without to=...: {undeclared}"
    assert set(mapping.PARTS) >= {p for n in spec.FIELDS for p in spec.destination(n).parts}


def test_the_owned_arguments_are_the_declared_ones_and_real():
    """extra_args may not set what a field sets; every argument a field names exists in transformers."""
    from zeroboard.job import checks

    declared = {a for n in spec.FIELDS for a in spec.destination(n).args}
    assert set(checks.OWNED_ARGS) == declared
    known = modelinfo.training_argument_names()
    if known:
        assert declared <= known, declared - known


@pytest.mark.parametrize("name", [n for n in spec.FIELDS if spec.field_type(n) in (int, float)])
def test_every_number_refuses_a_value_out_of_reason(name, tmp_path, demo):
    """Each number has a bound (``job/bounds.py``, or its field's own check): far below or above it, the job is
    refused before launch, naming the field."""
    from zeroboard.job import checks

    for absurd in (-1, 10**13):
        job = dataclasses.replace(spec.JobSpec(output_dir=str(tmp_path / "out")), **{name: absurd})
        assert name in checks.validate(job, []).errors, f"{name} = {absurd} passes the checks"


def test_a_field_named_like_a_trainer_argument_sets_that_argument():
    """A field that shares its name with a TrainingArguments argument (transformers' own list) maps to it: a field
    that also has a reader of its own (gradient_checkpointing: the model) would otherwise lose its mapping unseen."""
    known = modelinfo.training_argument_names()
    if not known:
        pytest.skip("transformers is not installed here")
    same = [n for n in spec.FIELDS if n in known]
    assert "learning_rate" in same  # the list is transformers'
    wrong = [n for n in same if n not in spec.destination(n).args]
    assert not wrong, f"named like a TrainingArguments argument but not mapped to it: {wrong}"
