"""Jobs on a real Slurm cluster (two slurmd nodes on this machine, tests/slurm_cluster.sh): the exact sbatch script
previewed and accepted by ``sbatch --test-only``, a two-process demo job from the page to finished (its folder and
run name made of shell syntax that must run nothing), a job that waits in Slurm's queue for the first, Abort
through scancel verified by sacct (on the stand-in trainer: Slurm's part is real, the ranks start in a second), and
Slurm's own words for a job it refuses."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers import standin_env, wait_until
from test_runner import demo_job, ended, first_log_event
from zeroboard.cli import main as cli_main
from zeroboard.job import record, spec
from zeroboard.runs import manager as runner, processes
from zeroboard.runs.launch import prepare_launch
from zeroboard.runs.slurm import final_state, queue_info
from zeroboard.webui import handlers, runs_view

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]
REPO = Path(__file__).resolve().parents[1]
CORES = os.cpu_count() or 2


@pytest.fixture(scope="module")
def cluster():
    done = subprocess.run(["bash", str(REPO / "tests" / "slurm_cluster.sh"), "start"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"the test cluster did not start (make slurm installs it): {done.stderr}"
    yield
    subprocess.run(["scancel", "--full", "-u", str(os.getuid())], capture_output=True)


def on_slurm(out: Path, **changes) -> spec.JobSpec:
    """The demo job on two nodes of one rank each; each task takes its node's cores, so a second job must wait."""
    return demo_job(out, launcher="slurm", num_nodes=2, num_processes=1, slurm_cpus_per_task=CORES, **changes)


def page_values(job: spec.JobSpec) -> dict:
    values = handlers.spec_to_form(job)
    values.pop("gpu_ids")
    return values


def test_the_previewed_script_for_two_nodes_is_one_slurm_accepts(cluster, tmp_path, capsys):
    out = tmp_path / "two"
    code = cli_main(["preview", "examples/demo.yaml", "--set", "launcher=slurm", "--set", "num_nodes=2",
                     "--set", f"output_dir={out}"])
    said = capsys.readouterr()
    shown = said.out
    submit = re.search(r"^sbatch\b", shown, re.M)  # `sbatch --parsable FILE`, one line or folded (a long path)
    assert code == 0 and "#!/bin/bash" in shown and submit, said.out + said.err
    assert "--parsable" in shown[submit.start():]
    script = shown[shown.index("#!/bin/bash"):submit.start()]
    for part in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "srun", "torchrun", '--nnodes "$SLURM_NNODES"',
                 '--rdzv_id "$SLURM_JOB_ID"', "--rdzv_backend c10d", f"#SBATCH --output={out.resolve()}/launcher.log"):
        assert part in script, part
    path = tmp_path / "shown.sbatch"
    path.write_text(script)
    done = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "to start" in done.stderr, done.stderr
    assert not out.exists()  # a preview writes nothing into the run folder


def test_a_job_slurm_refuses_shows_slurms_reason_on_its_field(cluster, tmp_path, index):
    checked = handlers.check({**page_values(on_slurm(tmp_path / "r")), "slurm_partition": "nosuch"}, [])
    assert "invalid partition" in checked.errors["slurm_partition"].lower(), checked.errors
    checked = handlers.check({**page_values(on_slurm(tmp_path / "r")), "num_nodes": 5}, [])
    assert "node configuration is not available" in checked.errors["num_nodes"], checked.errors
    assert not (tmp_path / "r").exists()


def test_a_two_process_job_from_the_page_finishes_and_shows_in_runs(cluster, tmp_path, index):
    # issue 31's injection, on the real cluster: a folder name, a run_name and an extra #SBATCH option of shell syntax
    # (and a # and a %j, which sbatch's line parser and Slurm's file name patterns would read) are names, nothing runs
    run = tmp_path / "run $ZB_HEAD$(touch PWNED) `touch PWNED2` 'q' \"d\" #c %j"
    extra = {"run_name": "$ZB_HEAD$(touch PWNED3)`id`"}
    comment = "--comment=it's \"a\" #test $(touch PWNED4)"
    mgr = runner.JobManager(index=index)
    job = on_slurm(run, max_steps=3, extra_args=extra, slurm_extra=[comment])
    checked, st, message = handlers.start(page_values(job), [], mgr)
    assert st is not None, message
    job_id = st.slurm["job_id"]
    assert (Path(st.run_dir) / record.SBATCH_FILE).read_text() == checked.command.script  # what ran is what was shown
    st = ended(mgr, st.run_dir, 600)
    assert st.status == "finished", st.message
    assert final_state(job_id)[0] == "COMPLETED"
    assert "[rank0]:" in (run / "launcher.log").read_text()  # Slurm wrote the job's output where it was asked to
    trained = spec.load_yaml(run / record.JOB_FILE)  # the job as the trainer parsed it from the node's command line
    assert trained.output_dir == str(run) and trained.extra_args == extra
    assert not [p for d in (REPO, tmp_path, run) for p in d.glob("PWNED*")]  # (the run folder's own name holds it)
    start = next(e for e in record.read_events(Path(st.run_dir) / record.EVENTS_FILE) if e["event"] == "start")
    assert start["world_size"] == 2
    assert st.run_dir in [j.run_dir for j in mgr.jobs()] and st.slurm["job_id"] == job_id
    listed = runs_view.listing(mgr)  # the Runs tab: its devices column names the Slurm job and its nodes
    row = listed.rows[listed.runs.index(st.run_dir)]
    assert f"Slurm {job_id} · " in " ".join(row) and st.slurm["nodes"] in " ".join(row), row
    assert f"Slurm job {job_id}: COMPLETED" in runs_view.detail_markdown(mgr, st.run_dir, "en")


def test_a_second_job_waits_in_slurms_queue_and_abort_cancels_the_first(cluster, tmp_path, index, monkeypatch):
    # Slurm's queue and scancel are the subject, not the training (the two-process job above trains for real): the
    # nodes' ranks run the stand-in trainer, which sbatch hands them with the rest of this environment
    for k, v in standin_env(step_s=0.1).items():
        monkeypatch.setenv(k, v)
    mgr = runner.JobManager(index=index, grace_s=15)
    first = mgr.start(prepare_launch(on_slurm(tmp_path / "first", max_steps=5000, logging_steps=1), gpus=[]))
    first_log_event(first.run_dir)
    second = mgr.start(prepare_launch(on_slurm(tmp_path / "second", max_steps=2), gpus=[]))
    waiting = wait_until(lambda: (s := mgr.state(second.run_dir)).slurm.get("state") == "PENDING" and s, 60,
                         "the second job to wait in Slurm's queue")
    assert waiting.slurm.get("position") == 1 and "queue" in waiting.message
    listed = runs_view.listing(mgr)  # the Runs tab: the waiting job's id and its place in Slurm's queue
    assert f"Slurm {waiting.slurm['job_id']} · #1" in listed.rows[listed.runs.index(second.run_dir)]
    mgr.abort(first.run_dir)
    first = ended(mgr, first.run_dir, 180)
    assert first.status == "aborted", first.message
    assert final_state(first.slurm["job_id"])[0] == "CANCELLED"
    assert queue_info(first.slurm["job_id"]) is None
    assert not [p for p, out in processes.live_trainers() if out == Path(first.run_dir).resolve()]
    second = ended(mgr, second.run_dir, 600)
    assert second.status == "finished", second.message
    started = subprocess.run(["sacct", "-n", "-P", "-X", "-j", f"{first.slurm['job_id']},{second.slurm['job_id']}",
                              "-o", "JobID,Start,End"], capture_output=True, text=True).stdout.split()
    times = {line.split("|")[0]: line.split("|")[1:] for line in started}
    assert times[second.slurm["job_id"]][0] >= times[first.slurm["job_id"]][1]  # it started once the first ended
