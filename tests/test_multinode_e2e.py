"""Two torchrun agents on one machine (--nnodes 2), one CPU process each: a 2-node job in miniature."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zeroboard.job import record as events
from zeroboard.job.command import free_port

pytestmark = pytest.mark.e2e


def test_two_nodes_train_the_demo_end_to_end(tmp_path):
    port, out = free_port(), tmp_path / "two-nodes"
    procs = [
        subprocess.Popen([sys.executable, "-m", "zeroboard.cli", "train", "examples/demo.yaml",
                          f"--set=output_dir={out}", "--set=num_nodes=2", f"--set=node_rank={rank}",
                          "--set=num_processes=1", f"--set=master_port={port}", "--set=max_steps=10",
                          "--set=logging_steps=2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    evs = events.read_events(out / events.EVENTS_FILE)
    start = next(e for e in evs if e["event"] == "start")
    assert start["world_size"] == 2 and sorted(d["rank"] for d in start["devices"]) == [0, 1]
    assert all(d["local_rank"] == 0 for d in start["devices"])  # one process per "node"
    assert evs[-1]["event"] == "end" and evs[-1]["result"]["kind"] == "lora_adapter"
    assert "--nnodes 2" in outputs[0] and "--node_rank 1" in outputs[1]
