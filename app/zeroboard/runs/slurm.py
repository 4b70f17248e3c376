"""The Slurm executor: a run's sbatch script submitted, followed through squeue and sacct, stopped with scancel.

The run's supervisor stays on this machine (the login node) and is the run's
one state writer, as for a local run: it submits the script (``sbatch
--parsable``), follows the job's queue position, node list and state, tails
the events the ranks write into the shared run folder, and on Abort cancels
the job and waits until ``sacct`` says it has ended.  A job that outlives its
supervisor is found again through the job id recorded in ``state.json``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ..words import say
from .executor import Executor
from .state import JobState

CALL_TIMEOUT_S = 20
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE")
SACCT_LAG_S = 15.0  # after a job leaves the queue, its accounting record may take a moment to appear


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)
    return done.returncode, (done.stdout + done.stderr).strip()


def queue_info(job_id: str) -> dict | None:
    """The job as squeue lists it: state, reason, node list and position among its partition's pending jobs;
    None once it has left the queue."""
    code, out = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N|%P"])
    if code != 0 or not out:
        return None
    state, reason, nodes, partition = (out.splitlines()[0].split("|") + ["", "", "", ""])[:4]
    info = {"job_id": job_id, "state": state, "reason": reason, "nodes": nodes, "partition": partition}
    if state == "PENDING":
        _, ids = _run(["squeue", "-h", "-t", "PD", "-p", partition, "--sort=p,i", "-o", "%i"])
        order = [i.strip() for i in ids.splitlines()]
        info["position"] = order.index(job_id) + 1 if job_id in order else None
    return info


def final_state(job_id: str) -> tuple[str, int] | None:
    """(Slurm's final state, an exit code in the supervisor's terms) from sacct, or scontrol without accounting;
    None while Slurm has no final word yet."""
    code, out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode"])
    line = out.splitlines()[0] if code == 0 and out else ""
    if not line:
        code, out = _run(["scontrol", "show", "job", job_id, "-o"])
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f) if code == 0 else {}
        if not fields.get("JobState"):
            return None
        line = f"{fields['JobState']}|{fields.get('ExitCode', '0:0')}"
    state, _, exit_code = line.partition("|")
    state = state.split()[0]
    if state not in FINAL:
        return None
    status, _, sig = exit_code.partition(":")
    status_i, sig_i = int(status or 0), int(sig or 0)
    if state == "CANCELLED":
        return state, -(sig_i or 15)
    if state == "COMPLETED":
        return state, 0
    return state, status_i or (-sig_i if sig_i else 1)


class SlurmExecutor(Executor):
    name = "slurm"

    def launch(self, st: JobState, cmd: dict, log) -> None:
        script = Path(cmd["argv"][-1])
        script.write_text(cmd["script"], encoding="utf-8")
        code, out = _run(cmd["argv"])
        job_id = out.strip().split(";")[0].splitlines()[-1].strip() if code == 0 and out else ""
        if code != 0 or not job_id.isdigit():
            raise OSError(out or f"sbatch exited {code}")
        st.slurm = {"job_id": job_id, "state": "PENDING"}  # (the supervisor follows it right after: queue and message)
        log.write(f"[zeroboard] {say('slurm.submitted', job_id=job_id)}\n".encode())

    def poll(self, st: JobState) -> int | None:
        job_id = st.slurm.get("job_id")
        if not job_id:
            return -1
        if queue_info(job_id) is not None:
            return None
        deadline = time.time() + SACCT_LAG_S
        while (found := final_state(job_id)) is None and time.time() < deadline:
            time.sleep(1.0)
        st.slurm["state"] = found[0] if found else "UNKNOWN"
        return found[1] if found else None if queue_info(job_id) else 1

    def follow(self, st: JobState) -> bool:
        job_id = st.slurm.get("job_id")
        info = queue_info(job_id) if job_id else None
        if info is None:
            return False
        before = dict(st.slurm)
        st.slurm.update(info)
        if info["state"] == "PENDING":
            st.message = say("slurm.pending", job_id=job_id, position=info.get("position") or "?", reason=info["reason"])
        elif info["state"] == "RUNNING":
            st.message = say("slurm.running_on", nodes=info["nodes"], job_id=job_id)
        return st.slurm != before

    def stop(self, st: JobState, note) -> list[int]:
        """scancel, then wait until Slurm's accounting says the job has ended (its grace: Slurm's own KillWait)."""
        job_id = st.slurm.get("job_id")
        if not job_id:
            return []
        note(say("slurm.scancel", job_id=job_id))
        _run(["scancel", job_id])
        deadline = time.time() + st.grace_s + 30
        while time.time() < deadline:
            if queue_info(job_id) is None and (found := final_state(job_id)) is not None:
                st.slurm["state"] = found[0]
                note(say("slurm.ended_as", job_id=job_id, state=found[0]))
                return []
            time.sleep(1.0)
        note(say("slurm.still_there", job_id=job_id, seconds=round(st.grace_s + 30)))
        return [int(job_id)]

    def left(self, st: JobState) -> list:
        job_id = st.slurm.get("job_id")
        return [int(job_id)] if job_id and queue_info(job_id) is not None else []

    def final_code(self, st: JobState) -> int | None:
        job_id = st.slurm.get("job_id")
        found = final_state(job_id) if job_id else None
        if found:
            st.slurm["state"] = found[0]
        return found[1] if found else None

