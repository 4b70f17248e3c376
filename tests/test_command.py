"""Golden tests of the command builder and the DeepSpeed presets."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from zeroboard import workspace
from zeroboard.job import cmdline, command, presets
from zeroboard.job.devices import Gpu
from zeroboard.job.placement import place
from zeroboard.job.spec import JobSpec

GPUS = [Gpu(i, "NVIDIA H200", 141 << 30, 140 << 30, 1 << 30, 0, (9, 0)) for i in range(4)]


def build(gpus=(), **fields):
    job = JobSpec(output_dir="runs/x", **fields)
    return command.build(job, place(job, list(gpus)), port=29611)


def tail(cmd):
    return cmd.argv[1:]


def test_torchrun_on_two_gpus_with_stage2_offload():
    cmd = build(GPUS, gpu_ids=[0, 1], deepspeed_stage="2", offload=True)
    assert cmd.argv[0].endswith("torchrun")
    assert tail(cmd)[2:8] == ["--nproc_per_node", "2", "--master_port", "29611", "-m", "zeroboard.training.train"]
    flags = tail(cmd)[8:]
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs == {"--model_name_or_path": "cache/demo/model", "--precision": "bf16", "--output_dir": "runs/x",
                     "--device_type": "cuda", "--deepspeed": "cache/ds_z2_offload_config.json",
                     "--deepspeed_stage": "2", "--offload": "true"}
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert cmd.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert cmd.env["NCCL_NVLS_ENABLE"] == "0"
    assert cmd.deepspeed_config == "cache/ds_z2_offload_config.json"
    assert cmd.world_size == 2


def test_flags_follow_schema_order_and_skip_defaults():
    cmd = build(GPUS, learning_rate=1e-4, gpu_ids=[2], deepspeed_stage="3")
    assert tail(cmd) == ["--tee", "3", "--nproc_per_node", "1", "--master_port", "29611", "-m", "zeroboard.training.train",
                         "--model_name_or_path", "cache/demo/model", "--learning_rate", "0.0001",
                         "--precision", "bf16", "--output_dir", "runs/x", "--device_type", "cuda",
                         "--deepspeed_stage", "3", "--deepspeed", "cache/ds_z3_config.json"]


def test_deepspeed_launcher_on_gpus_in_the_chosen_order():
    cmd = build(GPUS, gpu_ids=[1, 0], deepspeed_stage="3", launcher="deepspeed")
    assert cmd.argv[0].endswith("deepspeed")
    assert tail(cmd)[:7] == ["--include", "localhost:1,0", "--master_port", "29611", "--no_local_rank",
                             "--module", "zeroboard.training.train"]
    assert "CUDA_VISIBLE_DEVICES" not in cmd.env  # the launcher sets it per --include


def test_a_launcher_script_of_another_python_is_not_used(tmp_path, monkeypatch):
    """No launcher next to this Python (torch in the system's site-packages, ZeroBoard in a venv: the Docker image):
    the torchrun on PATH would start the system's Python, whose ranks cannot import ZeroBoard; this one runs its module."""
    python = str(tmp_path / "python3")
    monkeypatch.setattr(command.sys, "executable", python)
    assert build(num_processes=2).argv[:3] == [python, "-m", "torch.distributed.run"]
    assert build(num_processes=2, launcher="deepspeed").argv[:3] == [python, "-m", "deepspeed.launcher.runner"]


def test_cpu_processes():
    cmd = build((), num_processes=2)
    assert tail(cmd)[2:8] == ["--nproc_per_node", "2", "--master_port", "29611", "-m", "zeroboard.training.train"]
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "" and cmd.env["DS_ACCELERATOR"] == "cpu"
    assert "--precision" in cmd.argv and cmd.argv[cmd.argv.index("--precision") + 1] == "fp32"
    assert cmd.device_kind == "cpu" and cmd.devices == [0, 1]


def test_deepspeed_launcher_on_cpu_counts_processes():
    cmd = build((), num_processes=2, launcher="deepspeed", deepspeed_stage="2")
    assert tail(cmd)[:2] == ["--num_gpus", "2"] and cmd.env["LOCAL_SIZE"] == "2"


def test_auto_precision_falls_back_to_fp16_on_old_gpus():
    old = [Gpu(0, "Tesla V100", 32 << 30, 31 << 30, 0, 0, (7, 0))]
    cmd = build(old)
    assert cmd.argv[cmd.argv.index("--precision") + 1] == "fp16"


def test_shell_line_is_the_same_argv():
    cmd = build((), dataset=["my data.json"], extra_args={"optim": "adamw_torch"})
    line = cmd.shell()
    words = shlex.split(line)
    env_words = [w for w in words if "=" in w and w.split("=")[0].isupper()][: len(cmd.env)]
    assert dict(w.split("=", 1) for w in env_words) == cmd.env
    assert words[len(cmd.env):] == cmd.argv


def test_the_shown_command_pastes_back_as_the_argv_one_argument_a_line():
    """What the page's command box and ``zeroboard preview`` print: bash reads back the very argv and environment,
    each flag on the line of its value, a negative number a value too."""
    cmd = build((), dataset=["my data.json"], extra_args={"optim": "adamw_torch"}, max_steps=-1)
    text = cmdline.text(cmd.env, cmd.argv, full=True)
    assert shlex.split(text.replace("\\\n", " ")) == [f"{k}={v}" for k, v in cmd.env.items()] + cmd.argv
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    lines = text.splitlines()
    assert "  --max_steps -1 \\" in lines and "  -m zeroboard.training.train \\" in lines
    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    assert cmdline.text({}, ["sbatch", "--parsable", "/x/zeroboard.sbatch"]) == "sbatch --parsable /x/zeroboard.sbatch"


def test_a_path_in_the_workspace_is_shown_relative_to_it_even_through_a_link(tmp_path, monkeypatch):
    """The checkout's own torchrun is `.venv/bin/torchrun` though `.venv` links to an environment elsewhere (the
    copy run from the workspace names the same file); a path outside stays as it is (nothing else names it)."""
    ws, env = tmp_path / "ws", tmp_path / "shared-env"
    (env / "bin").mkdir(parents=True)
    ws.mkdir()
    (ws / ".venv").symlink_to(env)
    monkeypatch.setenv(workspace.WORKSPACE_ENV, str(ws))
    assert cmdline.shown_arg(str(ws / ".venv/bin/torchrun")) == ".venv/bin/torchrun"
    assert cmdline.shown_arg(str(ws / ".venv/bin/torchrun"), full=True) == str(ws / ".venv/bin/torchrun")
    assert workspace.shown(ws / "runs" / ".." / "runs" / "demo") == "runs/demo"
    assert workspace.shown(env / "bin" / "python") == str(env / "bin" / "python")
    assert cmdline.run_from(str(ws), "en") == "# run from the workspace folder"
    assert cmdline.run_from(str(ws), "en", full=True) == f"# run from {ws}"


def test_a_log_line_on_the_page_names_no_folder_of_this_machine():
    """A library's warning names its file from site-packages/ on; the workspace's files are named as it names them;
    a path elsewhere (a folder the user allowed) stays whole: it is the user's, and nothing else names it."""
    ws = workspace.Workspace(Path("/srv/course/ws"))
    venv = "/srv/course/ws/.venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:86: FutureWarning: use_reentrant"
    assert workspace.shown_log(venv, ws) == "site-packages/torch/utils/checkpoint.py:86: FutureWarning: use_reentrant"
    system = '  File "/usr/lib/python3/dist-packages/deepspeed/runtime/engine.py", line 12, in step'
    assert workspace.shown_log(system, ws) == '  File "dist-packages/deepspeed/runtime/engine.py", line 12, in step'
    assert workspace.shown_log("[rank0]: saved /srv/course/ws/runs/demo/checkpoint-5", ws) == "[rank0]: saved runs/demo/checkpoint-5"
    assert workspace.shown_log("wrote /data/mine/adapter", ws) == "wrote /data/mine/adapter"
    assert workspace.shown_log("loss 0.52, 3 site-packages", ws) == "loss 0.52, 3 site-packages"


@pytest.mark.parametrize(("given", "clean"), [("9.0a", "9.0"), ("8.0;9.0a+PTX", "8.0;9.0+PTX"),
                                              ("9.0 9.0a 10.0f", "9.0;10.0")])
def test_arch_list_sanitized(given, clean, monkeypatch):
    assert command.sanitized_arch_list(given) == clean
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", given)
    cmd = build(GPUS[:1])
    assert cmd.env["TORCH_CUDA_ARCH_LIST"] == clean and cmd.notes


def test_clean_arch_list_is_left_alone(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert "TORCH_CUDA_ARCH_LIST" not in build(GPUS[:1]).env


def test_prepare_refuses_bad_jobs_and_builds_nothing(tmp_path):
    p = command.check_and_build(JobSpec(offload=True, output_dir=str(tmp_path / "o")), gpus=[])
    assert p.command is None and "offload" in p.report.errors


# --- presets --------------------------------------------------------------------

def test_preset_contents():
    z2 = presets.preset("2", offload=True)
    assert z2["train_micro_batch_size_per_gpu"] == "auto" and z2["gradient_clipping"] == "auto"
    zo = z2["zero_optimization"]
    assert zo["overlap_comm"] and zo["contiguous_gradients"] and zo["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in zo
    z3 = presets.preset("3", offload=True)["zero_optimization"]
    assert z3["stage3_gather_16bit_weights_on_model_save"] is True
    assert z3["offload_param"] == {"device": "cpu", "pin_memory": True}
    with pytest.raises(ValueError):
        presets.preset("none", offload=False)


def test_shipped_presets_are_current(root):
    for stage, off in presets.ALL:
        name = presets.preset_name(stage, off)
        for folder in ("cache", "examples/deepspeed"):
            assert json.loads((root / folder / name).read_text()) == presets.preset(stage, off), f"{folder}/{name}"


def test_hand_edited_preset_is_kept(tmp_path):
    first = presets.write_presets(tmp_path)
    assert len(first.written) == 4
    edited = tmp_path / "ds_z2_config.json"
    edited.write_text(edited.read_text().replace('"overlap_comm": true', '"overlap_comm": false'))
    again = presets.write_presets(tmp_path)
    assert again.kept == ["ds_z2_config.json"] and "kept your edited ds_z2_config.json" in again.message()
    assert '"overlap_comm": false' in edited.read_text()
    (tmp_path / "ds_z3_config.json").unlink()
    assert presets.write_presets(tmp_path).written == ["ds_z3_config.json"]


def test_a_file_the_user_put_there_first_is_kept(tmp_path):
    (tmp_path / "ds_z3_offload_config.json").write_text('{"mine": true}')
    report = presets.write_presets(tmp_path)
    assert "ds_z3_offload_config.json" in report.kept
    assert json.loads((tmp_path / "ds_z3_offload_config.json").read_text()) == {"mine": True}


def test_two_nodes_with_torchrun():
    cmd = build((), num_processes=1, num_nodes=2, node_rank=1, master_addr="10.0.0.5", master_port=29500)
    assert tail(cmd)[2:14] == ["--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.5", "--nproc_per_node", "1",
                              "--master_port", "29500", "-m", "zeroboard.training.train"]
    assert "--num_nodes" not in cmd.argv  # launcher settings stay with the launcher


def test_several_nodes_need_a_fixed_port_and_torchrun(tmp_path):
    from zeroboard.job import checks

    job = JobSpec(num_nodes=2, node_rank=2, launcher="deepspeed", output_dir=str(tmp_path / "o"))
    errs = checks.validate(job, []).errors
    assert {"node_rank", "launcher", "master_port"} <= set(errs)


def test_a_chosen_port_lies_below_the_ephemeral_range_and_skips_a_taken_one(monkeypatch, tmp_path):
    import random
    import socket

    from zeroboard.job import ports

    low = ports.ephemeral_low()
    picked = {ports.free_port() for _ in range(20)}
    if low - ports.LOWEST >= ports.TRIES:  # the kernel leaves room below its range: every port comes from there
        assert all(ports.LOWEST <= p < low for p in picked), (picked, low)
    first = random.Random(7).randrange(ports.LOWEST, low)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        port = ports.free_port(random.Random(7))
    assert port != first and ports.port_is_free(port)
    narrow = tmp_path / "range"
    narrow.write_text(f"{ports.LOWEST + 10}\t60999\n")  # no room below it: the kernel's choice, nothing drawn

    class NoDraw(random.Random):
        def randrange(self, *args):
            raise AssertionError("drew a port below a range that leaves no room")

    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", narrow)
    assert ports.ephemeral_low() == ports.LOWEST + 10
    assert ports.port_is_free(ports.free_port(NoDraw()))


def test_offload_ranks_share_the_hosts_cores_for_the_cpu_optimizer(monkeypatch):
    from zeroboard.job import devices

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(devices, "cpu_count", lambda: 16)
    two = build(GPUS, gpu_ids=[0, 1], deepspeed_stage="2", offload=True)
    assert two.env["OMP_NUM_THREADS"] == "8" and "OMP_NUM_THREADS=8" in two.shell()  # torchrun would give 1 each
    three = build(GPUS, gpu_ids=[0, 1, 2], deepspeed_stage="3", offload=True, launcher="deepspeed")
    assert three.env["OMP_NUM_THREADS"] == "5"
    assert "OMP_NUM_THREADS" not in build(GPUS, gpu_ids=[0], deepspeed_stage="2", offload=True).env  # all cores
    assert "OMP_NUM_THREADS" not in build(GPUS, gpu_ids=[0, 1], deepspeed_stage="2").env  # no CPU optimizer
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's own setting is kept (the ranks inherit it)
    assert "OMP_NUM_THREADS" not in build(GPUS, gpu_ids=[0, 1], deepspeed_stage="2", offload=True).env


def test_one_rule_says_what_offload_moves():
    """Parameters are offloaded only with ZeRO-3: the presets, the placement read back from them, a DeepSpeed file of
    one's own and the placement's own fallback all follow ``placement.offloads_parameters``."""
    from zeroboard.job import placement

    for stage, off in presets.ALL:
        zero = presets.preset(stage, off)["zero_optimization"]
        moved = placement.offloads_parameters(stage, off)
        assert ("offload_param" in zero) == moved, (stage, off)
        assert place(JobSpec(deepspeed_stage=stage, offload=off), GPUS).offload_param == moved
        # a file of one's own that asks for parameter offload at every stage: only ZeRO-3 can do it
        mine = {"zero_optimization": {"stage": int(stage), "offload_param": {"device": "cpu"}}}
        assert placement.zero_setting(mine)[2] == placement.offloads_parameters(stage, True)


def test_one_launch_entry_point(root):
    """check -> presets -> command -> memory verdict has one name: the command line and the page call
    ``runs.launch.prepare_launch``, and nothing else in the package reaches past it to the job layer's part."""
    pkg = root / "app" / "zeroboard"
    callers = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py") if "check_and_build(" in p.read_text(encoding="utf-8")}
    assert callers == {"job/command.py", "runs/launch.py"}, callers  # its definition, and the entry point
    for front in ("cli/jobs.py", "webui/handlers.py"):
        assert "prepare_launch(" in (pkg / front).read_text(encoding="utf-8"), front
