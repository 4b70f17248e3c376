"""The session's bank of finished runs: each trained once, as a user trains it, and read by every test that needs it.

A test that reads a result (inspect, reload, chat, export, compare, the Runs page) takes its run from the bank
(the ``bank`` fixture in conftest.py); a test trains a job of its own only where training is what it tests.  A run
is trained the first time a test asks for it, through ``zeroboard train`` in a subprocess (the command line a user
types), into the session's folder, registered in the session's runs index.

The bank's runs are shared: a test reads them and never writes into them (tests that change a run, resume or
delete it, copy it first or train their own).  :meth:`Bank.get` checks that a run's files are as it left them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN_S = 900  # a run on a busy 2-core machine


def tied_demo_model(folder: Path) -> Path:
    """The demo model with its output head tied to the embeddings (as Qwen2-0.5B, Gemma, GPT-2 have them)."""
    import shutil

    if not folder.is_dir():
        shutil.copytree(REPO / "cache/demo/model", folder)
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    return folder


@dataclass(frozen=True)
class Entry:
    sets: tuple[str, ...]  # --set NAME=VALUE on top of the job file
    model: str = ""  # "tied": the demo model with tied embeddings (made in the bank's folder)
    why: str = ""
    job: str = "examples/demo.yaml"  # the job file it starts from


# preference tuning on the demo's identity pairs (examples/demo_dpo.yaml): a short run, logged at every step, whose
# margin rises from 0 (the policy is its reference at the first step) to several nats in a few steps
PREF = ("max_steps=8", "logging_steps=1")


# Every run the suite reads. A new one is an entry here, not a module fixture that trains.
ENTRIES = {
    # LoRA on the identity set, long enough to learn it: reload, merge, chat, export, the output check
    "lora_identity": Entry(("dataset=identity", "max_steps=100", "logging_steps=20"), why="learns who it is"),
    # full fine-tuning under ZeRO-3 of a model with tied embeddings, a ZeRO checkpoint at its last step
    "zero3_full_tied": Entry(("deepspeed_stage=3", "finetuning_type=full", "max_steps=10", "save_steps=10",
                              "logging_steps=5", "learning_rate=0.001"), model="tied", why="consolidate, inspect"),
    # issue 37, one run a stage and none twice (each ~60 s, mostly the processes' start): DPO with LoRA under ZeRO-3
    # (LoRA's reference, the base with adapters off, sharded; reload, chat, merge); full DPO under ZeRO-3 with its
    # sharded reference copy; KTO with LoRA without DeepSpeed; ORPO under ZeRO-2
    "dpo_lora_z3": Entry((*PREF, "deepspeed_stage=3"), job="examples/demo_dpo.yaml",
                         why="margin rises under ZeRO-3; reload, chat, merge"),
    "dpo_full_z3": Entry((*PREF, "deepspeed_stage=3", "finetuning_type=full", "learning_rate=0.0005"),
                         job="examples/demo_dpo.yaml", why="a sharded reference model; reload, chat"),
    "kto_lora": Entry((*PREF, "training_stage=kto", "dataset=demo_kto"), job="examples/demo_dpo.yaml",
                      why="answers tagged good or bad, without DeepSpeed"),
    "orpo_lora_z2": Entry((*PREF, "training_stage=orpo", "deepspeed_stage=2"), job="examples/demo_dpo.yaml",
                          why="no reference model; a preference trainer under ZeRO-2"),
}


@dataclass
class Bank:
    """``folder``: shared by the session's xdist workers, so each run trains once for the whole session;
    ``index``: this test process's runs index, where :meth:`get` lists the runs it hands out."""

    folder: Path
    index: Path
    runs: dict[str, Path] = field(default_factory=dict)
    sums: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def trained_index(self, name: str) -> Path:
        """The index the bank's run ``name`` is trained in: its own, so that two workers training two runs at once
        do not see each other's as the job that holds the CPU; and no test's teardown (which stops its own index's
        jobs) touches it."""
        return self.folder / f"{name}.runs.json"

    def get(self, name: str) -> Path:
        """The finished run ``name`` (trained now if no test of the session asked for it before), listed in this
        process's runs index."""
        with self._lock:
            if name not in self.runs:
                self.runs[name] = self._trained(name)
                self.sums[name] = digest(self.runs[name])
            run = self.runs[name]
        assert digest(run) == self.sums[name], f"a test wrote into the bank's run {name} ({run}): copy it first"
        return run

    def _trained(self, name: str) -> Path:
        """One training per session, whichever xdist worker asks first: the others wait on its lock, then list it."""
        import fcntl

        out = self.folder / name
        done = self.folder / f"{name}.done"
        with open(self.folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.is_file():
                self._train(name, ENTRIES[name])
                done.write_text("trained\n")
        self._list(out, self.index)
        return out

    def listed_in(self, name: str, index: Path) -> Path:
        """The run ``name``, listed also in another runs index (a test's server of its own lists it, as its page
        would list a run of the workspace): its entry is the bank's, run id and all."""
        run = self.get(name)
        self._list(run, index)
        return run

    def _list(self, run: Path, index: Path) -> None:
        from zeroboard.job.registry import Registry

        entry = Registry(self.trained_index(run.name)).entry(str(run.resolve()))
        assert entry is not None, f"the bank's run {run.name} is not in the bank's index"
        other = Registry(index)
        with other.locked():
            if other.entry(str(run.resolve())) is None:
                other.add(dict(entry))

    def _train(self, name: str, entry: Entry) -> Path:
        out = self.folder / name
        sets = [f"output_dir={out}", *entry.sets]
        if entry.model == "tied":
            sets.append(f"model_name_or_path={tied_demo_model(self.folder / 'tied-model')}")
        argv = [sys.executable, "-m", "zeroboard.cli", "train", entry.job, *(f"--set={s}" for s in sets)]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=TRAIN_S,
                              env={**os.environ, "ZEROBOARD_RUNS_INDEX": str(self.trained_index(name))})
        assert done.returncode == 0, f"the bank's run {name} did not train:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return out


def digest(run: Path) -> str:
    """What a run holds (names, sizes, modification times): a test that wrote into it changes this."""
    h = hashlib.sha256()
    for p in sorted(run.rglob("*")):
        st = p.lstat()
        h.update(f"{p.relative_to(run)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()
