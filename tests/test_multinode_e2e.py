"""Two torchrun agents on one machine (--nnodes 2), one CPU process each: a 2-node job in miniature."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import wait_until
from zeroboard.job import record as events
from zeroboard.job.command import free_port, port_is_free

pytestmark = pytest.mark.e2e

DEADLINE_S = 900


def node(rank: int, port: int, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zeroboard.cli", "train", "examples/demo.yaml",
                             f"--set=output_dir={out}", "--set=num_nodes=2", f"--set=node_rank={rank}",
                             "--set=num_processes=1", f"--set=master_port={port}", "--set=max_steps=10",
                             "--set=logging_steps=2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_two_nodes_train_the_demo_end_to_end(tmp_path):
    port, out = free_port(), tmp_path / "two-nodes"
    procs = [node(0, port, out)]
    try:
        # as on two machines: the other node joins once the master's rendezvous listens (or the master ended); its
        # own: node 0's supervisor is up (its state file) before the port is taken, not another test's job on that port
        wait_until(lambda: ((out / events.STATE_FILE).is_file() and not port_is_free(port)) or procs[0].poll() is not None,
                   300, "node 0's rendezvous")
        if procs[0].poll() is None:  # (a node 0 that ended before listening would leave node 1 waiting for it)
            procs.append(node(1, port, out))
        deadline = time.time() + DEADLINE_S
        while time.time() < deadline and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break  # one node failed: the other would wait for it
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)  # the jobs themselves are aborted by the autouse teardown
        outputs = [p.communicate(timeout=60)[0] for p in procs]
    # both nodes ran and ended; else which one failed, how, and what each said (its own tail, its run's error events)
    errors = [e for e in events.read_events(out / events.EVENTS_FILE) if e["event"] == "error"] if out.is_dir() else []
    report = [f"node {i}: exit {p.returncode}\n{o[-2500:]}" for i, p in enumerate(procs) for o in [outputs[i]]]
    assert [p.returncode for p in procs] == [0, 0], "\n\n".join(report + [f"error events: {errors}"])
    evs = events.read_events(out / events.EVENTS_FILE)
    start = next(e for e in evs if e["event"] == "start")
    assert start["world_size"] == 2 and sorted(d["rank"] for d in start["devices"]) == [0, 1]
    assert all(d["local_rank"] == 0 for d in start["devices"])  # one process per "node"
    assert evs[-1]["event"] == "end" and evs[-1]["result"]["kind"] == "lora_adapter"
    assert "--nnodes 2" in outputs[0] and "--node_rank 1" in outputs[1]
