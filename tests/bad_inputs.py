"""The battery of bad inputs: each a case a user (or an attacker) can type, the field its refusal must name, and
what it points at (hashed before and after: nothing may change).

Shared by ``tests/test_bad_input.py`` (every case through the command line and the page) and
``benchmarks/bad_input.py`` (how long each refusal takes).  A case's builder takes a temporary folder holding a copy
of the demo model (``model/``) and data (``data/``) and returns a :class:`Case` setting.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from helpers import owned_run
from zeroboard.job import folders, record

REPO = Path(__file__).resolve().parents[1]
LONG = " ".join(["a very long question that goes on"] * 40)
GOOD = {"instruction": "Say hi.", "input": "", "output": "Hi!"}


@dataclass
class Setting:
    overrides: dict = field(default_factory=dict)  # --set NAME=VALUE, and the same typed into the form
    pointed: list[Path] = field(default_factory=list)  # folders whose files must stay as they were
    env: dict = field(default_factory=dict)  # the environment the user has
    job_file: Path | None = None  # a job file to run (CLI) and to load with Load arguments (page)
    absent: list[Path] = field(default_factory=list)  # paths that must not exist afterwards


def s(overrides=None, pointed=(), **kw) -> Setting:
    return Setting(dict(overrides or {}), list(pointed), **kw)


# --- builders of what a case points at -----------------------------------------------------------------------


def long_prompt_data(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "long.json").write_text(json.dumps([{"instruction": LONG, "input": "", "output": "yes"}] * 8))
    (d / "dataset_info.json").write_text(json.dumps({"long": {"file_name": "long.json"}}))
    return d


def folder_with(d: Path, names: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in names.items():
        (d / name).write_text(text)
    return d


def user_folder(d: Path) -> Path:
    return folder_with(d, {"README.md": "my notes\n", "tokenizer_config.json": "{}\n"})


def run_lookalike(d: Path) -> Path:
    """The issue's folder: a user's files named like a run's (no marker)."""
    return folder_with(d, {"README.md": "mine\n", record.COMMAND_FILE: '{"mine": true}\n',
                           "adapter_model.safetensors": "my weights\n", "notes.txt": "notes\n"})


def finished_run(d: Path, index: Path) -> Path:
    owned_run(d, index, files=[f"checkpoint-5/{folders.CHECKPOINT_MARK}", record.RESULT_FILE, "adapter_model.safetensors"])
    (d / "checkpoint-5" / folders.CHECKPOINT_MARK).write_text("{}")
    (d / record.RESULT_FILE).write_text("{}")
    (d / "adapter_model.safetensors").write_text("weights")
    return d


def half_saved_run(d: Path, index: Path) -> Path:
    owned_run(d, index)  # an abort during the save: no completion mark
    (d / "checkpoint-9").mkdir()
    (d / "checkpoint-9" / "rng_state_0.pth").write_bytes(b"x")
    return d


def run_with_a_file_added(d: Path, index: Path) -> Path:
    owned_run(d, index, files=[record.RESULT_FILE])
    (d / record.RESULT_FILE).write_text("{}")
    (d / "my_notes.txt").write_text("added after the run ended\n")
    return d


def copied_run(t: Path) -> Path:
    """A run folder copied elsewhere: its marker names the folder it was made for."""
    d = owned_run(t / "original", t / "other-index.json", files=[])
    copy = t / "copy"
    copy.mkdir()
    for p in d.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    return copy


def forged_marker(d: Path) -> Path:
    return folder_with(d, {record.OWNER_FILE: json.dumps({"run_id": "0" * 32, "folder": "/elsewhere"}),
                           "thesis.tex": "chapter 1\n"})


def marked_folder(d: Path, run_id: str = "1" * 32, folder: Path | None = None, **records) -> Path:
    """A user's folder holding a marker naming ``folder`` (this one by default), their thesis, and the record files
    given (``state``, ``launch``: dicts, or text as written)."""
    folder_with(d, {record.OWNER_FILE: json.dumps({"run_id": run_id, "folder": str((folder or d).resolve())}),
                    "thesis.tex": "chapter 1\n"})
    for kind, data in records.items():
        name = {"state": record.STATE_FILE, "launch": record.LAUNCH_FILE}[kind]
        (d / name).write_text(data if isinstance(data, str) else json.dumps(data))
    return d


def registered_run_copied(t: Path) -> Path:
    """A run of this workspace's index, copied whole (marker, state and all) into a new folder beside it."""
    d = owned_run(t / "orig", t / "runs.json", files=["adapter_model.safetensors"])
    copy = t / "copied"
    copy.mkdir()
    for p in d.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    return copy


def note_in_a_checkpoint(d: Path, index: Path) -> Path:
    """A finished run, then a user's note put inside its checkpoint (a resume could rotate the checkpoint away)."""
    (finished_run(d, index) / "checkpoint-5" / "notes.txt").write_text("mine\n")
    return d


def ds_file(d: Path, text: str | None = None, **fields) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / "ds.json"
    path.write_text(text if text is not None else json.dumps({"zero_optimization": {"stage": 2}, **fields}))
    return path


def bad_info(d: Path, entry: str) -> Path:
    d.mkdir(parents=True)
    (d / "dataset_info.json").write_text(json.dumps({"x": {"file_name": entry}}))
    return d


def info_with(d: Path, entry: dict, records: list | None = None) -> Path:
    d.mkdir(parents=True)
    (d / "x.json").write_text(json.dumps(records or [GOOD] * 4))
    (d / "dataset_info.json").write_text(json.dumps({"x": {"file_name": "x.json", **entry}}))
    return d


def info_text(d: Path, text: str) -> Path:
    d.mkdir(parents=True)
    (d / "x.json").write_text(json.dumps([GOOD] * 4))
    (d / "dataset_info.json").write_text(text)
    return d


def broken_after(d: Path, n: int, jsonl: bool = False) -> Path:
    """n good records, then a break: a file whose head reads fine."""
    d.mkdir(parents=True)
    if jsonl:
        path = d / "late.jsonl"
        path.write_text("".join(json.dumps(GOOD) + "\n" for _ in range(n)) + '{"instruction": "cut\n')
    else:
        path = d / "late.json"
        path.write_text("[" + ",".join(json.dumps(GOOD) for _ in range(n)) + ', {"instruction": oops}]')
    return path


def yaml_file(t: Path, text: str, name: str = "job.yaml") -> Path:
    path = t / name
    path.write_text(text)
    return path


def anchor_bomb() -> str:
    """374-odd bytes: eight levels of nine aliases, 9**8 values once expanded (in extra_args and dataset)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\nextra_args: {bomb: *a8}\ndataset: *a8\n"


def not_utf8(d: Path) -> Path:
    d.mkdir(parents=True)
    path = d / "latin1.json"
    path.write_bytes(json.dumps([GOOD]).encode().replace(b"Hi!", b"H\xe9!"))
    return path


def empty_csv(d: Path) -> Path:
    d.mkdir(parents=True)
    path = d / "empty.csv"
    path.write_text("instruction,input,output\n")
    return path


def dead_endpoint() -> str:
    import socket

    with socket.socket() as sock:  # a port nobody listens on: the hub try is refused at once
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


# --- issue 31: special files, numbers and keys in config files, records past their limits ---------------------


class _FifoWatch(threading.Thread):
    """Opens a FIFO for writing as soon as anyone opens it for reading: a reader that would wait for ever gets an end
    of file instead (no case can hang on it), and the open is recorded (a FIFO must be refused before it is opened)."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.opened, self.done = path, False, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads it
            except OSError:
                continue
            self.opened = True
            os.close(fd)


_WATCHES: list[_FifoWatch] = []


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    watch = _FifoWatch(path)
    watch.start()
    _WATCHES.append(watch)
    return path


def fifos_opened() -> list[Path]:
    """The FIFOs of the cases built so far that something opened (each watch is ended here)."""
    for w in _WATCHES:
        w.done.set()
        w.join(5)
    opened = [w.path for w in _WATCHES if w.opened]
    _WATCHES.clear()
    return opened


def socket_file(path: Path) -> Path:
    """A Unix socket's file (it stays when the socket is closed)."""
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
    return path


def model_config(t: Path, text: str | None = None, name: str = "config.json", **changes) -> Path:
    """The copied demo model (t/model) with one of its JSON files written again: ``changes`` on top, or ``text``."""
    path = t / "model" / name
    if text is None:
        cfg = json.loads(path.read_text())
        cfg.update(changes)
        text = json.dumps(cfg, indent=1)
    path.write_text(text)
    return t / "model"


def model_file_fifo(t: Path, name: str) -> Path:
    (t / "model" / name).unlink()
    fifo(t / "model" / name)
    return t / "model"


def info_fifo(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "x.json").write_text(json.dumps([GOOD] * 4))
    fifo(d / "dataset_info.json")
    return d


def data_file(d: Path, name: str, text: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)
    return d / name


def big_cell_csv(d: Path, size: int = 10_000_000) -> Path:
    return data_file(d, "big.csv", "instruction,input,output\nSay hi.,,Hi!\n\"" + "a" * size + "\",,yes\n")


X300 = "x" * 300

# (case, field that must be named, builder: tmp -> Setting)
CASES = [
    # output folders
    ("output is the model's folder", "output_dir",
     lambda t: s({"output_dir": t / "model", "model_name_or_path": t / "model", "finetuning_type": "full"}, [t / "model"])),
    ("output inside the model's folder", "output_dir",
     lambda t: s({"output_dir": t / "model" / "run", "model_name_or_path": t / "model"}, [t / "model"])),
    ("output is the data folder", "output_dir", lambda t: s({"output_dir": t / "data", "dataset_dir": t / "data"}, [t / "data"])),
    ("output is a user's folder", "output_dir", lambda t: s({"output_dir": user_folder(t / "mine")}, [t / "mine"])),
    ("output holds files named like a run's", "output_dir",
     lambda t: s({"output_dir": run_lookalike(t / "looks")}, [t / "looks"])),
    ("output holds only a state.json", "output_dir",
     lambda t: s({"output_dir": folder_with(t / "st", {record.STATE_FILE: '{"status": "finished"}'})}, [t / "st"])),
    ("output holds a forged marker", "output_dir", lambda t: s({"output_dir": forged_marker(t / "forged")}, [t / "forged"])),
    ("output is a copy of another run", "output_dir", lambda t: s({"output_dir": copied_run(t)}, [t / "copy"])),
    ("output is a run with a file added since", "output_dir",
     lambda t: s({"output_dir": run_with_a_file_added(t / "added", t / "runs.json")}, [t / "added"])),
    # as many ../ as the checkout is deep: /etc/zb wherever the clone sits (never a folder the tests allow)
    ("output climbs out of the workspace", "output_dir",
     lambda t: s({"output_dir": "../" * len(REPO.parts) + "etc/zb"}, [Path("/etc")])),
    ("output in /etc", "output_dir", lambda t: s({"output_dir": "/etc/zb"}, [Path("/etc")])),
    ("output is /", "output_dir", lambda t: s({"output_dir": "/"}, [Path("/")])),
    ("output is the workspace itself", "output_dir", lambda t: s({"output_dir": "."}, [REPO])),
    ("output cannot be created", "output_dir",
     lambda t: (t.joinpath("afile").write_text("x") and s({"output_dir": t / "afile" / "run"}, [t]))),
    ("output holds a finished run", "output_dir",
     lambda t: s({"output_dir": finished_run(t / "done", t / "runs.json")}, [t / "done"])),
    ("output is a file", "output_dir",
     lambda t: (t.joinpath("plain.txt").write_text("mine") and s({"output_dir": t / "plain.txt"}, [t]))),
    ("output is empty", "output_dir", lambda t: s({"output_dir": ""})),
    ("output name of 300 bytes", "output_dir", lambda t: s({"output_dir": t / X300}, [t])),
    ("output under a new parent, name of 300 bytes", "output_dir",
     lambda t: s({"output_dir": t / "newparent" / X300}, [t], absent=[t / "newparent"])),
    ("output path of 5000 bytes", "output_dir", lambda t: s({"output_dir": t / "/".join(["d" * 200] * 25)}, [t])),
    ("output of a megabyte", "output_dir", lambda t: s({"output_dir": "r" * (1 << 20)})),
    ("resume with nothing to resume", "resume", lambda t: s({"output_dir": t / "new", "resume": "true"}, [t])),
    ("resume from a half-saved checkpoint", "resume",
     lambda t: s({"output_dir": half_saved_run(t / "half", t / "runs.json"), "resume": "true"}, [t / "half"])),
    # what the job reads
    ("model outside the workspace", "model_name_or_path", lambda t: s({"model_name_or_path": "/etc"}, [Path("/etc")])),
    ("model through a link out of the workspace", "model_name_or_path",
     lambda t: (os.symlink("/etc", t / "link") or s({"model_name_or_path": t / "link"}, [Path("/etc")]))),
    ("model name of 300 bytes", "model_name_or_path", lambda t: s({"model_name_or_path": t / X300}, [t])),
    ("a hub id that does not exist", "model_name_or_path",
     lambda t: s({"model_name_or_path": "nosuch-org/nosuch-model"}, env={"HF_ENDPOINT": dead_endpoint(),
                                                                          "HF_HUB_CACHE": str(t / "hub")})),
    ("a hub id offline and not cached", "model_name_or_path",
     lambda t: s({"model_name_or_path": "nosuch-org/other-model"}, env={"HF_HUB_OFFLINE": "1",
                                                                         "HF_HUB_CACHE": str(t / "hub")})),
    ("data folder outside the workspace", "dataset_dir", lambda t: s({"dataset_dir": "/etc"}, [Path("/etc")])),
    ("dataset_info entry climbing out", "dataset",
     lambda t: s({"dataset_dir": bad_info(t / "d", "../../../../../../etc/passwd"), "dataset": "x"}, [Path("/etc")])),
    ("dataset file linked out of the workspace", "dataset",
     lambda t: (os.symlink("/etc/passwd", t / "x.json") or s({"dataset": t / "x.json"}, [Path("/etc")]))),
    ("dataset name of 300 bytes", "dataset", lambda t: s({"dataset": X300 + ".json"})),
    ("5000 datasets", "dataset", lambda t: s({"dataset": ",".join(f"d{i}" for i in range(5000))})),
    ("no dataset", "dataset", lambda t: s({"dataset": ""})),
    ("a dataset file that is not JSON", "dataset",
     lambda t: (t.joinpath("bad.jsonl").write_text("a,b\n1,2\n") and s({"dataset": t / "bad.jsonl"}, [t]))),
    ("JSON that breaks after 300 good records", "dataset", lambda t: s({"dataset": broken_after(t / "l", 300)}, [t / "l"])),
    ("JSON lines that break at line 301", "dataset",
     lambda t: s({"dataset": broken_after(t / "l", 300, jsonl=True)}, [t / "l"])),
    ("a dataset that is not UTF-8", "dataset", lambda t: s({"dataset": not_utf8(t / "u")}, [t / "u"])),
    ("a CSV without rows", "dataset", lambda t: s({"dataset": empty_csv(t / "c")}, [t / "c"])),
    ("an images column", "dataset",
     lambda t: s({"dataset_dir": info_with(t / "i", {"columns": {"images": "pics"}}), "dataset": "x"}, [t / "i"])),
    ("a videos column", "dataset",
     lambda t: s({"dataset_dir": info_with(t / "v", {"columns": {"videos": "clips"}}), "dataset": "x"}, [t / "v"])),
    ("a ranking dataset", "dataset",
     lambda t: s({"dataset_dir": info_with(t / "k", {"ranking": True}), "dataset": "x"}, [t / "k"])),
    ("a dataset_info.json nested 10,000 deep", "dataset",
     lambda t: s({"dataset_dir": info_text(t / "n", "[" * 10000 + "]" * 10000), "dataset": "x"}, [t / "n"])),
    ("a dataset_info.json of 8 MB", "dataset",
     lambda t: s({"dataset_dir": info_text(t / "b", json.dumps({"x": {"file_name": "x.json", "pad": "p" * (8 << 20)}})),
                  "dataset": "x"}, [t / "b"])),
    # DeepSpeed files
    ("DeepSpeed file outside the workspace", "deepspeed", lambda t: s({"deepspeed": "/etc/hostname"}, [Path("/etc")])),
    ("DeepSpeed train_batch_size disagrees", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", train_batch_size=7)}, [t / "ds"])),
    ("DeepSpeed micro-batch disagrees", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", train_micro_batch_size_per_gpu=3)}, [t / "ds"])),
    ("DeepSpeed bf16 on an fp32 job", "deepspeed", lambda t: s({"deepspeed": ds_file(t / "ds", bf16={"enabled": True})}, [t / "ds"])),
    ("DeepSpeed file that is not JSON", "deepspeed",
     lambda t: (t.joinpath("bad.json").write_text("{oops") and s({"deepspeed": t / "bad.json"}, [t]))),
    ("DeepSpeed file nested 5,000 deep", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", text='{"a":' * 5000 + "1" + "}" * 5000)}, [t / "ds"])),
    ("DeepSpeed file of 6 MB", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", text=json.dumps({"pad": "p" * (6 << 20)}))}, [t / "ds"])),
    # job files (the page: Load arguments)
    ("a YAML anchor bomb", "file", lambda t: s(job_file=yaml_file(t, anchor_bomb()))),
    ("a YAML alias that contains itself", "file", lambda t: s(job_file=yaml_file(t, "extra_args: &a {x: *a}\n"))),
    ("a YAML file nested 200 deep", "file",
     lambda t: s(job_file=yaml_file(t, "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n"))),
    ("a YAML file of 1 MB", "file", lambda t: s(job_file=yaml_file(t, f"output_dir: {'o' * (1 << 20)}\n"))),
    ("a YAML value of 100 kB", "output_dir", lambda t: s(job_file=yaml_file(t, f"output_dir: {'o' * 100_000}\n"))),
    ("a YAML file that is a list", "file", lambda t: s(job_file=yaml_file(t, "- learning_rate\n- 1\n"))),
    ("a YAML file that is not YAML", "file", lambda t: s(job_file=yaml_file(t, "learning_rate: [1, 2\n"))),
    ("a YAML file with an unknown option", "lerning_rate", lambda t: s(job_file=yaml_file(t, "lerning_rate: 1e-4\n"))),
    # numbers
    ("epochs nan", "num_train_epochs", lambda t: s({"num_train_epochs": "nan"})),
    ("epochs inf", "num_train_epochs", lambda t: s({"num_train_epochs": "inf"})),
    ("learning rate -inf", "learning_rate", lambda t: s({"learning_rate": "-inf"})),
    ("a learning rate of 7", "learning_rate", lambda t: s({"learning_rate": "7"})),
    ("seed 1e20", "seed", lambda t: s({"seed": "1e20"})),
    ("seed below zero", "seed", lambda t: s({"seed": "-1"})),
    ("max_steps absurd", "max_steps", lambda t: s({"max_steps": "1e12"})),
    ("accumulation 1e9", "gradient_accumulation_steps", lambda t: s({"gradient_accumulation_steps": "1e9"})),
    ("a million workers", "preprocessing_num_workers", lambda t: s({"preprocessing_num_workers": "1e6"})),
    ("micro-batch a million", "per_device_train_batch_size", lambda t: s({"per_device_train_batch_size": "1e6"})),
    ("eval batch a million", "per_device_eval_batch_size", lambda t: s({"per_device_eval_batch_size": "1e6"})),
    ("LoRA rank 1e9", "lora_rank", lambda t: s({"lora_rank": "1e9"})),
    ("LoRA alpha 1e9", "lora_alpha", lambda t: s({"lora_alpha": "1e9"})),
    ("weight decay 5", "weight_decay", lambda t: s({"weight_decay": "5"})),
    ("gradient clip 1e9", "max_grad_norm", lambda t: s({"max_grad_norm": "1e9"})),
    ("max_samples 1e15", "max_samples", lambda t: s({"max_samples": "1e15"})),
    ("warmup below zero", "warmup_steps", lambda t: s({"warmup_steps": "-3"})),
    ("save_steps below zero", "save_steps", lambda t: s({"save_steps": "-5"})),
    ("cutoff 0", "cutoff_len", lambda t: s({"cutoff_len": "0"})),
    ("val_size 2.5", "val_size", lambda t: s({"val_size": "2.5"})),
    ("a million nodes", "num_nodes", lambda t: s({"num_nodes": "1e6"})),
    ("a thousand CPU processes", "num_processes", lambda t: s({"num_processes": "1000"})),
    ("node rank past the nodes", "node_rank", lambda t: s({"node_rank": "5"})),
    ("port 70000", "master_port", lambda t: s({"master_port": "70000"})),
    ("every answer cut by the cutoff", "cutoff_len",
     lambda t: s({"dataset_dir": long_prompt_data(t / "long"), "dataset": "long", "cutoff_len": "16", "truncation": "end"},
                 [t / "long"])),
    ("a micro-batch no memory holds", "per_device_train_batch_size",
     lambda t: s({"per_device_train_batch_size": "4000", "cutoff_len": "100000"})),
    # choices and options
    ("offload without a stage", "offload", lambda t: s({"offload": "true"})),
    ("a stage that does not exist", "deepspeed_stage", lambda t: s({"deepspeed_stage": "4"})),
    ("precision fp8", "precision", lambda t: s({"precision": "fp8"})),
    ("a template that does not exist", "template", lambda t: s({"template": "nope"})),
    ("a scheduler that does not exist", "lr_scheduler_type", lambda t: s({"lr_scheduler_type": "wiggly"})),
    ("an unknown LoRA module", "lora_target", lambda t: s({"lora_target": "q_projj"})),
    ("several nodes with the deepspeed launcher", "launcher",
     lambda t: s({"num_nodes": "2", "master_port": "29999", "launcher": "deepspeed"})),
    # extra TrainingArguments
    ("an extra argument a field owns", "extra_args", lambda t: s({"extra_args": '{"learning_rate": 1}'})),
    ("an extra argument transformers lacks", "extra_args", lambda t: s({"extra_args": '{"lerning_rate": 1}'})),
    ("an optimizer that does not exist", "extra_args", lambda t: s({"extra_args": '{"optim": "no_such_optimizer"}'})),
    ("a save strategy that does not exist", "extra_args", lambda t: s({"extra_args": '{"save_strategy": "sometimes"}'})),
    ("a number argument given text", "extra_args", lambda t: s({"extra_args": '{"dataloader_num_workers": "many"}'})),
    ("extra arguments that are a list", "extra_args", lambda t: s({"extra_args": "[1, 2]"})),
    ("extra arguments nested 50 deep", "extra_args", lambda t: s({"extra_args": '{"a":' * 50 + "1" + "}" * 50})),
    ("extra arguments of 100 kB", "extra_args", lambda t: s({"extra_args": json.dumps({"x": "y" * 100_000})})),
    # issue 31: injection and control characters
    ("a newline in the output folder", "output_dir", lambda t: s({"output_dir": f"{t}/a\nb"}, [t], absent=[t / "a"])),
    ("a NUL in the output folder", "output_dir", lambda t: s({"output_dir": f"{t}/a\x00b"}, [t])),
    ("an escape sequence in the output folder", "output_dir", lambda t: s({"output_dir": f"{t}/a\x1b[2Jb"}, [t])),
    ("a DEL in the output folder", "output_dir", lambda t: s({"output_dir": f"{t}/a\x7fb"}, [t])),
    ("a carriage return inside the output folder", "output_dir", lambda t: s({"output_dir": f"{t}/a\rb"}, [t])),
    ("a tab inside the output folder", "output_dir", lambda t: s({"output_dir": f"{t}/a\tb"}, [t])),
    ("a C1 control in the model path", "model_name_or_path", lambda t: s({"model_name_or_path": f"{t}/mo\x85del"}, [t / "model"])),
    ("a newline and a FROM in a dataset name", "dataset", lambda t: s({"dataset": "identity\nFROM /etc/passwd"})),
    ("an escape in the data folder", "dataset_dir", lambda t: s({"dataset_dir": f"{t}/data\x1b"}, [t / "data"])),
    ("a newline in the DeepSpeed file's path", "deepspeed", lambda t: s({"deepspeed": f"{t}/ds\n.json"}, [t])),
    ("a newline in the eval dataset", "eval_dataset", lambda t: s({"eval_dataset": "identity\nx"})),
    ("a newline in extra_args run_name", "extra_args",
     lambda t: s({"extra_args": json.dumps({"run_name": "$ZB_HEAD$(touch PWNED2)\n`id`"})}, absent=[REPO / "PWNED2"])),
    ("an escape in extra_args logging_dir", "extra_args", lambda t: s({"extra_args": json.dumps({"logging_dir": f"{t}/l\x1b"})}, [t])),
    ("a newline in master_addr", "master_addr", lambda t: s({"master_addr": "10.0.0.1\nrm -rf /", "num_nodes": "2"})),
    ("a newline in the Slurm partition", "slurm_partition",
     lambda t: s({"launcher": "slurm", "slurm_partition": "debug\n#SBATCH --wrap=id"})),
    ("an escape in the Slurm account", "slurm_account", lambda t: s({"launcher": "slurm", "slurm_account": "lab\x1b"})),
    ("sbatch --wrap in slurm_extra", "slurm_extra", lambda t: s({"launcher": "slurm", "slurm_extra": "--wrap=id"})),
    ("sbatch --output=/etc/passwd in slurm_extra", "slurm_extra",
     lambda t: s({"launcher": "slurm", "slurm_extra": "--output=/etc/passwd"}, [Path("/etc")])),
    ("sbatch -o in slurm_extra", "slurm_extra", lambda t: s({"launcher": "slurm", "slurm_extra": "-o x"})),
    ("sbatch --chdir in slurm_extra", "slurm_extra", lambda t: s({"launcher": "slurm", "slurm_extra": "--chdir=/"})),
    ("sbatch --export with LD_PRELOAD in slurm_extra", "slurm_extra",
     lambda t: s({"launcher": "slurm", "slurm_extra": "--export=ALL,LD_PRELOAD=/tmp/x.so"})),
    ("sbatch --parsable in slurm_extra", "slurm_extra", lambda t: s({"launcher": "slurm", "slurm_extra": "--parsable"})),
    ("sbatch --partition in slurm_extra", "slurm_extra", lambda t: s({"launcher": "slurm", "slurm_extra": "--partition=x"})),
    ("a newline in an slurm_extra value", "slurm_extra",
     lambda t: s({"launcher": "slurm", "slurm_extra": "--comment=a\n#SBATCH --wrap=id"})),
    # issue 31: foreign folders and forged markers
    ("output: a marker naming this folder and no record of its run", "output_dir",
     lambda t: s({"output_dir": marked_folder(t / "thesis")}, [t / "thesis"])),
    ("output: a marker whose state names another run", "output_dir",
     lambda t: s({"output_dir": marked_folder(t / "other", state={"run_id": "2" * 32, "run_dir": str((t / "other").resolve()),
                                                                   "status": "finished"})}, [t / "other"])),
    ("output: a marker and a state copied from another folder", "output_dir",
     lambda t: s({"output_dir": marked_folder(t / "cp", folder=t / "elsewhere",
                                              state={"run_id": "1" * 32, "run_dir": str(t / "elsewhere"),
                                                     "status": "finished"})}, [t / "cp"])),
    ("output: a marker and a state that is not JSON", "output_dir",
     lambda t: s({"output_dir": marked_folder(t / "bad", state="{garbage")}, [t / "bad"])),
    ("output: a marker and a state that is a list", "output_dir",
     lambda t: s({"output_dir": marked_folder(t / "lst", state="[1, 2]")}, [t / "lst"])),
    ("output: a marker and a launch request of another run", "output_dir",
     lambda t: s({"output_dir": marked_folder(t / "req", launch={"run_id": "3" * 32})}, [t / "req"])),
    ("output: a marker and a launch request naming no run", "output_dir",
     lambda t: s({"output_dir": marked_folder(t / "req0", launch={"foreign": []})}, [t / "req0"])),
    ("output: a registered run copied whole into a new folder", "output_dir",
     lambda t: s({"output_dir": registered_run_copied(t)}, [t / "copied", t / "orig"])),
    ("resume: a file added inside a checkpoint of a finished run", "output_dir",
     lambda t: s({"output_dir": note_in_a_checkpoint(t / "ck", t / "runs.json"), "resume": "true"}, [t / "ck"])),
    # issue 35: LLaMA-Factory keys
    ("a LLaMA-Factory stage not trained here", "stage", lambda t: s(job_file=yaml_file(t, "stage: rm\ndo_train: true\n"))),
    ("a misspelt LLaMA-Factory key", "bf61", lambda t: s(job_file=yaml_file(t, "stage: sft\nbf61: true\n"))),
    ("bf16 and a precision that disagree", "bf16", lambda t: s(job_file=yaml_file(t, "bf16: true\nprecision: fp32\n"))),
    ("a warmup ratio of 2", "warmup_ratio", lambda t: s(job_file=yaml_file(t, "warmup_ratio: 2\n"))),
    ("evaluating per epoch", "eval_strategy", lambda t: s(job_file=yaml_file(t, "eval_strategy: epoch\n"))),
    ("a hub token in the job file", "hf_hub_token", lambda t: s(job_file=yaml_file(t, "hf_hub_token: hf_abc\n"))),
    # (read from the hub cache, fetched there online: here neither, so the field says how to fetch it by hand)
    ("a LLaMA-Factory data folder on the hub, not fetched, offline", "dataset_dir",
     lambda t: s({"dataset_dir": "REMOTE:llamafactory/never_fetched"},
                 env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(t / "empty-hub-cache")})),
    ("interleave probabilities with concat", "interleave_probs", lambda t: s({"interleave_probs": "0.5,0.5"})),
    ("interleave probabilities that do not sum to 1", "interleave_probs",
     lambda t: s({"mix_strategy": "interleave_under", "interleave_probs": "0.5,0.7"})),
    ("a preference dataset for supervised fine-tuning", "dataset",
     lambda t: s({"dataset_dir": folder_with(t / "pref", {
         "p.json": json.dumps([{"conversations": [{"from": "human", "value": "q"}],
                                "chosen": {"from": "gpt", "value": "a"}, "rejected": {"from": "gpt", "value": "b"}}]),
         "dataset_info.json": json.dumps({"pref": {"file_name": "p.json", "ranking": True, "formatting": "sharegpt",
                                                   "columns": {"messages": "conversations", "chosen": "chosen",
                                                               "rejected": "rejected"}}})}),
                  "dataset": "pref"}, [t / "pref"])),
    ("every record skipped as LLaMA-Factory skips it", "dataset",
     lambda t: s({"dataset_dir": folder_with(t / "odd", {
         "o.json": json.dumps([{"conversations": [{"from": "human", "value": "q"}]}] * 4),
         "dataset_info.json": json.dumps({"odd": {"file_name": "o.json", "formatting": "sharegpt"}})}),
                  "dataset": "odd"}, [t / "odd"])),
    # issue 31: bounded inputs
    ("a NUL byte in output_dir", "output_dir", lambda t: s({"output_dir": "runs/a\0b"})),
    ("a NUL byte in the model path", "model_name_or_path", lambda t: s({"model_name_or_path": f"{t}/model\0x"}, [t / "model"])),
    ("a NUL byte in the data folder", "dataset_dir", lambda t: s({"dataset_dir": f"{t}/data\0x"}, [t / "data"])),
    ("a NUL byte in a dataset file name", "dataset", lambda t: s({"dataset": f"{t}/x\0.json"}, [t])),
    ("a NUL byte in the DeepSpeed path", "deepspeed", lambda t: s({"deepspeed": f"{t}/ds\0.json"}, [t])),
    ("a FIFO as the job file", "file", lambda t: s(job_file=fifo(t / "job.yaml"))),
    ("a socket as the job file", "file", lambda t: s(job_file=socket_file(t / "job.sock"))),
    ("a FIFO as the DeepSpeed JSON", "deepspeed", lambda t: s({"deepspeed": fifo(t / "ds" / "ds.json")}, [t / "ds"])),
    ("a FIFO as a dataset file", "dataset", lambda t: s({"dataset": fifo(t / "f" / "x.json")}, [t / "f"])),
    ("a FIFO as dataset_info.json", "dataset", lambda t: s({"dataset_dir": info_fifo(t / "f"), "dataset": "x"}, [t / "f"])),
    ("a FIFO as the model's config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_file_fifo(t, "config.json")}, [t / "model"])),
    ("a FIFO as the model's tokenizer_config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_file_fifo(t, "tokenizer_config.json")}, [t / "model"])),
    ("hidden_size 1e400 in the model's config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_config(t, (t / "model/config.json").read_text().replace(
         '"hidden_size": 128', '"hidden_size": 1e400'))}, [t / "model"])),
    ("NaN in the model's config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_config(t, (t / "model/config.json").read_text().replace(
         '"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'))}, [t / "model"])),
    ("hidden_size 1e12 in the model's config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_config(t, hidden_size=10**12)}, [t / "model"])),
    ("vocab_size 12.5 in the model's config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_config(t, vocab_size=12.5)}, [t / "model"])),
    ("a key twice in the model's config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_config(t, (t / "model/config.json").read_text().replace(
         '"hidden_size": 128', '"hidden_size": 128,\n "hidden_size": 64'))}, [t / "model"])),
    ("Infinity in tokenizer_config.json", "model_name_or_path",
     lambda t: s({"model_name_or_path": model_config(t, name="tokenizer_config.json", model_max_length=float("inf"))},
                 [t / "model"])),
    ("num_samples 1e400 in dataset_info.json", "dataset",
     lambda t: s({"dataset_dir": info_text(t / "n", '{"x": {"file_name": "x.json", "num_samples": 1e400}}'),
                  "dataset": "x"}, [t / "n"])),
    ("a key twice in dataset_info.json", "dataset",
     lambda t: s({"dataset_dir": info_text(t / "n", '{"x": {"file_name": "x.json"},\n "x": {"file_name": "y.json"}}'),
                  "dataset": "x"}, [t / "n"])),
    ("a CSV with a 10 MB cell", "dataset", lambda t: s({"dataset": big_cell_csv(t / "c")}, [t / "c"])),
    ("a CSV row past max_record_bytes", "dataset",
     lambda t: s({"dataset": data_file(t / "c", "wide.csv", "instruction,input,output\n" + ",".join(["w" * 3000] * 3) + "\n"),
                  "max_record_bytes": "4096"}, [t / "c"])),
    ("a JSON line past max_record_bytes", "dataset",
     lambda t: s({"dataset": data_file(t / "j", "long.jsonl", json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "input": "i" * 5000})),
                  "max_record_bytes": "2048"}, [t / "j"])),
    ("a JSON list record past max_record_bytes", "dataset",
     lambda t: s({"dataset": data_file(t / "j", "long.json", json.dumps([GOOD, {**GOOD, "input": "i" * 200_000}])),
                  "max_record_bytes": "65536"}, [t / "j"])),
    ("max_cell_bytes of 10", "max_cell_bytes", lambda t: s({"max_cell_bytes": "10"})),
    ("max_record_bytes of 1e15", "max_record_bytes", lambda t: s({"max_record_bytes": "1e15"})),
    ("a DeepSpeed JSON with stage 7", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", json.dumps({"zero_optimization": {"stage": 7}}))}, [t / "ds"])),
    ("a DeepSpeed JSON offloading to a GPU", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", json.dumps({"zero_optimization": {"stage": 3, "offload_param": {
         "device": "gpu"}}}))}, [t / "ds"])),
    ("a DeepSpeed JSON with a ZeRO key misspelt", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", json.dumps({"zero_optimization": {"stage": 2, "overlap_com": True}}))},
                 [t / "ds"])),
    ("a DeepSpeed JSON whose loss scale is text", "deepspeed",  # past ZeRO: DeepSpeed's whole config model
     lambda t: s({"deepspeed": ds_file(t / "ds", json.dumps({"zero_optimization": {"stage": 2}, "fp16": {
         "enabled": "auto", "initial_scale_power": "sixteen"}}))}, [t / "ds"])),
    ("a DeepSpeed JSON with a key twice", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", '{"zero_optimization": {"stage": 2},\n "zero_optimization": {"stage": 3}}')},
                 [t / "ds"])),
    ("a DeepSpeed JSON with Infinity", "deepspeed",
     lambda t: s({"deepspeed": ds_file(t / "ds", '{"zero_optimization": {"stage": 2, "reduce_bucket_size": Infinity}}')},
                 [t / "ds"])),
    ("a key twice in a YAML job file", "learning_rate",
     lambda t: s(job_file=yaml_file(t, "learning_rate: 1.0e-4\nmax_steps: 5\nlearning_rate: 1.0e-3\n"))),
    ("a key twice in a JSON job file", "output_dir",
     lambda t: s(job_file=yaml_file(t, '{"output_dir": "runs/a",\n "output_dir": "runs/b"}\n', "job.json"))),
    ("a key twice inside extra_args in a job file", "extra_args",
     lambda t: s(job_file=yaml_file(t, "extra_args:\n  adam_beta2: 0.9\n  adam_beta2: 0.95\n"))),
    ("a key twice in extra_args JSON", "extra_args", lambda t: s({"extra_args": '{"adam_beta2": 0.9, "adam_beta2": 0.95}'})),
    ("infinity inside extra_args in a job file", "extra_args",
     lambda t: s(job_file=yaml_file(t, "extra_args: {adam_epsilon: .inf}\n"))),
    ("a GPU id that does not exist", "gpu_ids", lambda t: s({"gpu_ids": "97"})),  # none here; 97 on no machine
    ("a million DataLoader workers", "extra_args", lambda t: s({"extra_args": '{"dataloader_num_workers": 1000000}'})),
    ("300 DataLoader workers", "extra_args", lambda t: s({"extra_args": '{"dataloader_num_workers": 300}'})),
    ("300 preprocessing workers", "preprocessing_num_workers", lambda t: s({"preprocessing_num_workers": "300"})),
    ("a million DataLoader workers as the field", "dataloader_num_workers", lambda t: s({"dataloader_num_workers": "1000000"})),
    # issue 37: preference tuning and QLoRA
    ("a preference stage with SFT data", "dataset", lambda t: s({"training_stage": "dpo"})),
    ("SFT with preference data", "dataset", lambda t: s({"dataset": "demo_pref"})),
    ("KTO without tags", "dataset", lambda t: s({"training_stage": "kto", "dataset": "demo_pref"})),
    ("ORPO on answers tagged for KTO", "dataset", lambda t: s({"training_stage": "orpo", "dataset": "demo_kto"})),
    ("quantization_bit on a machine without a GPU", "quantization_bit", lambda t: s({"quantization_bit": "4"})),
    ("QLoRA with full fine-tuning", "quantization_bit", lambda t: s({"quantization_bit": "4", "finetuning_type": "full"})),
    ("a quantization_bit of 3", "quantization_bit", lambda t: s({"quantization_bit": "3"})),
    ("a pref_beta of 0", "pref_beta", lambda t: s({"training_stage": "dpo", "dataset": "demo_pref", "pref_beta": "0"})),
    ("a pref_beta of 1e6", "pref_beta", lambda t: s({"training_stage": "dpo", "dataset": "demo_pref", "pref_beta": "1e6"})),
    ("a negative pref_ftx", "pref_ftx", lambda t: s({"training_stage": "dpo", "dataset": "demo_pref", "pref_ftx": "-1"})),
    ("pref_ftx for ORPO", "pref_ftx", lambda t: s({"training_stage": "orpo", "dataset": "demo_pref", "pref_ftx": "0.5"})),
    ("a DPO loss for KTO", "pref_loss", lambda t: s({"training_stage": "kto", "dataset": "demo_kto", "pref_loss": "ipo"})),
    ("truncation end with DPO", "truncation",
     lambda t: s({"training_stage": "dpo", "dataset": "demo_pref", "truncation": "end"})),
    ("packing with DPO", "packing", lambda t: s({"training_stage": "dpo", "dataset": "demo_pref", "packing": "true"})),
    ("a training stage nobody has", "training_stage", lambda t: s({"training_stage": "ppo"})),
    ("LLaMA-Factory's kto_pair loss", "pref_loss", lambda t: s(job_file=yaml_file(t, "stage: dpo\npref_loss: kto_pair\n"))),
    ("LLaMA-Factory's DPO label smoothing", "dpo_label_smoothing",
     lambda t: s(job_file=yaml_file(t, "stage: dpo\ndpo_label_smoothing: 0.1\n"))),
]
