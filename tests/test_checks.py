"""Validation before launch: each bad input stops with a message naming its field."""

from __future__ import annotations

import json
import struct

import pytest

from helpers import liger_installed, owned_run
from zeroboard.job import checks, folders, modelinfo, record
from zeroboard.job.devices import Gpu
from zeroboard.job.spec import JobSpec

H100 = Gpu(0, "NVIDIA H100", 80 << 30, 79 << 30, 1 << 30, 0, (9, 0))
V100 = Gpu(1, "Tesla V100", 32 << 30, 31 << 30, 1 << 30, 0, (7, 0))


def fake_model(folder, names=("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
                               "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")):
    """A model folder whose safetensors file has a header and no data: enough for the checks."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    header = json.dumps({n: {"dtype": "F32", "shape": [1], "data_offsets": [0, 0]} for n in names}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return folder


@pytest.fixture
def job(tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{"instruction": "hi", "input": "", "output": "hello"}]))
    model = fake_model(tmp_path / "model")
    return JobSpec(model_name_or_path=str(model), dataset=[str(data)], output_dir=str(tmp_path / "out"),
                   num_processes=1)


def errors(job, gpus=()):
    return checks.validate(job, list(gpus)).errors


def test_a_good_job_passes(job):
    assert errors(job) == {}


def test_missing_model_dir(job):
    job.model_name_or_path = "./no/such/model"
    assert "not found" in errors(job)["model_name_or_path"]


def test_model_dir_without_config(job, tmp_path):
    (tmp_path / "empty").mkdir()
    job.model_name_or_path = str(tmp_path / "empty")
    assert "config.json" in errors(job)["model_name_or_path"]


def hf_cache(root, repo="Org/Tiny", config=None):
    """A Hugging Face hub cache holding one model's config.json, laid out as huggingface_hub lays it out."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snap = repo_dir / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config or {"model_type": "llama", "hidden_size": 64}))
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("a" * 40)
    return root


def test_a_cached_hub_id_is_a_note_naming_the_cache(job, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache(tmp_path / "hub")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the cache alone answers
    job.model_name_or_path = "Org/Tiny"
    r = checks.validate(job, [])
    assert "model_name_or_path" not in r.errors and "local Hugging Face cache" in r.warnings["model_name_or_path"]


def test_an_uncached_hub_id_offline_is_refused_saying_so(job, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    job.model_name_or_path = "Org/NotHere"
    assert "HF_HUB_OFFLINE" in errors(job)["model_name_or_path"]


def test_an_unreachable_hub_id_is_refused_after_one_try(job, tmp_path, monkeypatch):
    import http.server
    import threading

    asked = []

    class Missing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the library's name
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Missing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        job.model_name_or_path = "Org/Mistyped"
        msg = errors(job)["model_name_or_path"]
        assert "no such model" in msg and f"127.0.0.1:{server.server_port}" in msg
        assert asked == ["/Org/Mistyped/resolve/main/config.json"]  # one request, no retries
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [("[]", "holds no records"), ("{oops", "not valid JSON"), ('[{"text": "x"}]', "instruction/output"),
     ('[{"instruction": "q", "output": null}]', "no response")],
)
def test_bad_dataset(job, tmp_path, content, fragment):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    job.dataset = [str(bad)]
    assert fragment in errors(job)["dataset"]


def test_an_empty_answer_is_trained_and_records_llamafactory_skips_are_said_not_refused(job, tmp_path):
    """An empty answer is trained as LLaMA-Factory trains it (the end of the answer); a record it skips (turns out of
    order, no answer last) is skipped with a count and the first named: a warning, never a blocked launch."""
    good = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    recs = [good] * 70 + [{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": ""}]},
                          {"conversations": [{"from": "human", "value": "q"}, {"from": "human", "value": "again"},
                                             {"from": "gpt", "value": "a"}]},
                          {"conversations": [{"from": "human", "value": "q"}]}]
    data = tmp_path / "sg.json"
    data.write_text(json.dumps(recs))
    job.dataset = [str(data)]
    r = checks.validate(job, [])
    assert "dataset" not in r.errors
    note = r.warnings["dataset"]
    assert "2 of 73 records are skipped" in note and "record 71" in note and "turn 1 (user)" in note


def test_unreadable_dataset(job, tmp_path):
    bad = tmp_path / "bin.json"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    job.dataset = [str(bad)]
    assert "UTF-8" in errors(job)["dataset"]


def test_unknown_dataset_name_lists_known_ones(job, tmp_path):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": "data.json"}}))
    job.dataset_dir, job.dataset = str(tmp_path), ["yours"]
    assert "known: mine" in errors(job)["dataset"]


@pytest.mark.parametrize(("field", "value"), [("per_device_train_batch_size", 0), ("learning_rate", 0.0),
                                              ("gradient_accumulation_steps", 0), ("cutoff_len", 4),
                                              ("lora_dropout", 1.5), ("max_steps", -2)])
def test_out_of_range_numbers(job, field, value):
    setattr(job, field, value)
    assert field in errors(job)


def test_offload_without_stage_is_an_error(job):
    job.offload = True
    assert "stage 2 or 3" in errors(job)["offload"]


def test_unknown_lora_target_lists_the_real_layers(job):
    job.lora_target = ["q_proj", "wq"]
    msg = errors(job)["lora_target"]
    assert "wq" in msg and "down_proj" in msg and "lm_head" not in msg


def test_more_gpus_than_exist(job):
    job.gpu_ids = [0, 3]
    assert "GPU 3 does not exist" in errors(job, [H100])["gpu_ids"]


def test_more_processes_than_cores(job):
    job.num_processes = 512
    assert "CPU cores" in errors(job)["num_processes"]


def test_bf16_on_an_old_gpu(job):
    job.precision, job.gpu_ids = "bf16", [1]
    assert "bf16" in errors(job, [H100, V100])["precision"]


def test_finished_run_is_not_overwritten(job, tmp_path):
    out = owned_run(tmp_path / "out", files=[f"checkpoint-10/{folders.CHECKPOINT_MARK}", "adapter_model.safetensors"])
    (out / record.COMMAND_FILE).write_text("{}")
    (out / record.RESULT_FILE).write_text("{}")
    (out / "adapter_model.safetensors").write_text("{}")
    msg = errors(job)["output_dir"]
    assert "resume" in msg and "out-2" in msg
    job.resume = True
    assert errors(job) == {}


def test_resume_needs_a_checkpoint(job):
    job.resume = True
    assert "nothing to resume" in errors(job)["resume"]


def test_extra_args_are_checked_against_transformers(job):
    job.extra_args = {"optim": "adamw_torch"}
    assert errors(job) == {}
    job.extra_args = {"optimm": "adamw_torch"}
    assert "optimm" in errors(job)["extra_args"]
    job.extra_args = {"learning_rate": 1.0}
    assert "job field learning_rate" in errors(job)["extra_args"]


def test_custom_deepspeed_json(job, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text("{broken")
    job.deepspeed = str(cfg)
    assert "not valid JSON" in errors(job)["deepspeed"]
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    job.deepspeed_stage = "2"
    assert "sets stage 3" in errors(job)["deepspeed_stage"]


def test_every_problem_at_once(job):
    job.per_device_train_batch_size, job.offload, job.model_name_or_path = 0, True, "./nope"
    assert {"per_device_train_batch_size", "offload", "model_name_or_path"} <= set(errors(job))


def test_speedups_that_cannot_run_here_name_their_field(job):
    job.device_type = "cpu"
    job.liger_kernel = "on"
    job.attn_implementation = "flash_attention_2"
    job.pure_bf16 = True  # precision auto means fp32 on CPU
    errs = errors(job)
    assert "NVIDIA GPU" in errs["liger_kernel"] and "auto or off" in errs["liger_kernel"]
    assert "NVIDIA GPU" in errs["attn_implementation"]
    assert "bf16" in errs["pure_bf16"] and "Compute type" in errs["pure_bf16"]
    job.liger_kernel, job.attn_implementation, job.precision = "auto", "sdpa", "bf16"
    assert errors(job) == {}  # auto and sdpa fit anywhere; pure bf16 runs on CPU with bf16 chosen


def test_pure_bf16_refuses_deepspeed(job):
    job.device_type, job.precision, job.pure_bf16, job.deepspeed_stage = "cpu", "bf16", True, "2"
    assert "DeepSpeed keeps its own fp32 master weights" in errors(job)["pure_bf16"]


def test_liger_on_a_gpu_needs_the_package(job, monkeypatch):
    job.liger_kernel = "on"
    liger_installed(monkeypatch, False)
    assert "pip install liger-kernel" in errors(job, [H100])["liger_kernel"]
    liger_installed(monkeypatch)
    assert "liger_kernel" not in errors(job, [H100])


def test_liger_switch_in_extra_args_points_to_its_field(job):
    job.extra_args = {"use_liger_kernel": True}
    assert errors(job)["extra_args"] == "use_liger_kernel is set by the job field liger_kernel; set it there"


def test_speedups_that_would_fail_at_launch_are_refused_first(job, tmp_path, monkeypatch):
    monkeypatch.setattr(modelinfo, "installed", lambda module: True)
    job.attn_implementation, job.packing, job.per_device_train_batch_size = "flash_attention_2", True, 4
    assert "batch of one row" in errors(job, [H100])["attn_implementation"]
    job.per_device_train_batch_size = 1
    assert "attn_implementation" not in errors(job, [H100])
    assert "compute capability 8.0" in errors(job, [V100])["attn_implementation"]
    job.precision = "fp32"
    assert "bf16 or fp16 only" in errors(job, [H100])["attn_implementation"]
    job.precision, job.attn_implementation = "auto", "auto"
    job.pure_bf16 = True  # auto means fp16 on a V100
    assert "cannot do bf16" in errors(job, [V100])["pure_bf16"]
    assert "pure_bf16" not in errors(job, [H100])


def test_model_types_the_speedups_do_not_fit(job, tmp_path, monkeypatch):
    liger_installed(monkeypatch)  # its own table (tests/helpers.LIGER_LAYOUT) has no mamba
    mamba = fake_model(tmp_path / "mamba")
    (mamba / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    job.model_name_or_path, job.lora_target = str(mamba), ["q_proj"]
    job.liger_kernel, job.packing = "on", True
    errs = errors(job, [H100])
    assert errs["liger_kernel"] == "Liger has no kernels for model type mamba; choose auto or off"
    assert "recurrent layers" in errs["packing"]
    job.extra_args = {"liger_kernel_config": {"fused_linear_cross_entropy": True}}
    assert "set by the job field liger_kernel" in errors(job, [H100])["extra_args"]


@pytest.mark.parametrize("model_type", sorted(checks.EAGER_ONLY_MODEL_TYPES))
def test_sdpa_for_a_model_without_it_is_refused_before_launch(job, model_type):
    from pathlib import Path

    (Path(job.model_name_or_path) / "config.json").write_text(json.dumps({"model_type": model_type}))
    job.attn_implementation = "sdpa"
    assert f"{model_type} models have no SDPA attention" in errors(job, [H100])["attn_implementation"]
    for fine in ("auto", "eager"):
        job.attn_implementation = fine
        assert "attn_implementation" not in errors(job, [H100])


def test_the_eager_only_model_types_are_those_transformers_gives_no_sdpa():
    """The set follows transformers' own rule (``_supports_sdpa``) for every model type the planner knows."""
    import importlib

    pytest.importorskip("transformers")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as causal

    from zeroboard.planner.shapes import FAMILIES

    no_sdpa = set()
    for mt in FAMILIES:
        name = causal.get(mt)
        try:
            module = importlib.import_module(f"transformers.models.{mt}.modeling_{mt}")
        except ImportError:  # a config-only alias (gemma3_text lives in gemma3, with SDPA)
            continue
        if name and getattr(module, name, None) is not None and not getattr(module, name)._supports_sdpa:
            no_sdpa.add(mt)
    assert no_sdpa == checks.EAGER_ONLY_MODEL_TYPES


# --- issue 31: bounded inputs --------------------------------------------------------------------------------------

def test_a_gpu_id_that_does_not_exist_is_refused_not_a_quiet_cpu_run(job):
    job.gpu_ids = [7]
    report = checks.validate(job, [])
    assert "no GPU on this machine" in report.errors["gpu_ids"] and "leave gpu_ids empty" in report.errors["gpu_ids"]
    assert "GPU 7 does not exist; this machine has GPU 0" in errors(job, [H100])["gpu_ids"]
    job.device_type = "cpu"  # CPU processes asked for on a GPU machine: the ids are ignored, with a note
    job.gpu_ids = [0]
    report = checks.validate(job, [H100])
    assert "gpu_ids" not in report.errors and "ignored" in report.warnings["gpu_ids"]
    job.launcher, job.gpu_ids = "slurm", [7]  # a cluster's GPUs are not this machine's
    assert "gpu_ids" not in errors(job, [])


def test_worker_counts_are_bounded_by_the_cores_with_a_note(job, monkeypatch):
    """A count meant for a larger machine is a note and a clamp where it runs (issue 35: 16 workers on a 2-core
    machine are no refusal); a count no machine has use for is refused."""
    from zeroboard.job import devices, mapping
    from zeroboard.training import dataprep

    monkeypatch.setattr(devices, "cpu_count", lambda: 2)
    job.preprocessing_num_workers, job.dataloader_num_workers = 16, 8
    report = checks.validate(job, [])
    assert report.ok, report.errors
    for name, n in (("preprocessing_num_workers", 16), ("dataloader_num_workers", 8)):
        assert f"is {n}, above this machine's 2 CPU cores: 2 are used here" in report.warnings[name], report.warnings
    cores = len(__import__("os").sched_getaffinity(0))
    assert dataprep.workers(job, 10) == min(16, cores)  # the clamp, on the machine that runs it
    assert mapping.dataloader_workers(job, mapping.Resolved())["dataloader_num_workers"] == min(8, cores)
    job.preprocessing_num_workers, job.dataloader_num_workers = 300, 1_000_000
    report = checks.validate(job, [])
    assert "above 256" in report.errors["preprocessing_num_workers"] and "above 256" in report.errors["dataloader_num_workers"]
    job.launcher, job.preprocessing_num_workers, job.dataloader_num_workers = "slurm", 64, 32
    assert not {"preprocessing_num_workers", "dataloader_num_workers"} & set(checks.validate(job, []).warnings)  # a node's


def test_sizes_in_a_models_config_are_checked_for_range_and_finiteness(job, tmp_path):
    from zeroboard.planner import shapes

    cfg = tmp_path / "model" / "config.json"
    for text, says in (('{"model_type": "llama", "hidden_size": 1e400}', "hidden_size is inf"),
                       ('{"model_type": "llama", "hidden_size": 1e12}', "hidden_size is 1000000000000.0"),
                       ('{"model_type": "llama", "num_hidden_layers": -2}', "num_hidden_layers is -2"),
                       ('{"model_type": "llama", "text_config": {"vocab_size": 0.5}}', "text_config.vocab_size is 0.5"),
                       ('{"model_type": "llama",\n "model_type": "gemma"}', "model_type is given twice in one mapping (lines 1, 2)")):
        cfg.write_text(text)
        msg = errors(job)["model_name_or_path"]
        assert str(cfg) in msg and says in msg, (text, msg)
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 1e12, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "vocab_size": 100}))
    with pytest.raises(shapes.PlanError) as e:  # the planner reads the same rule (the page's plan panel)
        shapes.read_model(tmp_path / "model")
    assert "hidden_size" in e.value.args[0]
    cfg.write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "model" / "tokenizer_config.json").write_text('{"model_max_length": Infinity}')
    assert "tokenizer_config.json" in errors(job)["model_name_or_path"]
    (tmp_path / "model" / "tokenizer_config.json").write_text('{"model_max_length": 1000000000000000019884624838656}')
    assert errors(job) == {}  # transformers' own "no limit" is a finite number


def test_a_deepspeed_json_is_checked_by_deepspeeds_own_config_model(job, tmp_path, monkeypatch):
    """"stage": 7 failed on rank 0 with pydantic's ValidationError; now DeepSpeed's own models answer before launch,
    in a child process (the web server never imports torch), once per content."""
    from zeroboard.job import dscheck, presets

    cfg = tmp_path / "ds.json"
    job.deepspeed = str(cfg)
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 7}}))
    msg = errors(job)["deepspeed"]
    assert "DeepSpeed refuses ds.json: zero_optimization.stage" in msg and "(got 7)" in msg
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 2}, "fp16": {"enabled": "auto", "loss_scale_window": "x"}}))
    assert "DeepSpeedFP16Config.loss_scale_window" in errors(job)["deepspeed"]  # past ZeRO: the whole config model
    for stage, offload in (("2", False), ("2", True), ("3", False), ("3", True)):  # what the Trainer fills stands in
        assert dscheck.check(presets.preset(stage, offload)) == (None, None), (stage, offload)
    calls = []
    monkeypatch.setattr(dscheck.subprocess, "Popen", lambda *a, **k: calls.append(a) or pytest.fail("asked again"))
    assert dscheck.check(presets.preset("3", True)) == (None, None) and not calls  # kept by content
    monkeypatch.setattr(dscheck.modelinfo, "version", lambda dist: None)
    refused, note = dscheck.check({"zero_optimization": {"stage": 2}})
    assert refused is None and "not checked" in note
    stood = dscheck.stand_ins({"train_batch_size": 64, "gradient_clipping": "auto", "zero_optimization": {
        "stage": 3, "reduce_bucket_size": "auto", "stage3_max_live_parameters": "auto"}, "bf16": {"enabled": "auto"}})
    assert stood["train_batch_size"] == 1 and stood["gradient_clipping"] == 1.0 and stood["bf16"] == {"enabled": False}
    assert stood["zero_optimization"] == {"stage": 3, "stage3_max_live_parameters": "auto"}  # not the Trainer's to fill
