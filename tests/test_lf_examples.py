"""LLaMA-Factory's own training examples, validated and previewed as they are.

The YAMLs and DeepSpeed configs are LLaMA-Factory 0.9.5's, verbatim (tests/fixtures/llamafactory, see its README),
in a folder laid out as LLaMA-Factory's checkout is (its ``data/``, its ``examples/deepspeed/``); the only change is
the model, pointed at the demo model (the Qwen3-VL examples: at the built-in tiny Qwen3-VL, with pictures of
LLaMA-Factory's sizes where its ``mllm_demo`` names them).  Every supervised fine-tuning example validates and
previews (the ray example's REMOTE:llamafactory/demo_data read from a hub cache that holds it), the Qwen3-VL ones
with each image's tokens in the data the trainer sees, and are refused naming the dataset and the model when pointed
at a text-only model; so do the DPO and KTO examples, as preference tuning; the examples of the stages ZeroBoard
does not train (reward model, pre-training) are refused naming the stage.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from helpers import hub_dataset
from zeroboard.cli import main as cli_main
from zeroboard.job import lfkeys, modelinfo, spec

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "llamafactory"
EXAMPLES = FIXTURE / "examples"

SFT_OK = ["train_lora/qwen3_lora_sft.yaml", "train_lora/qwen3_lora_sft_ds3.yaml", "train_lora/qwen3_preprocess.yaml",
          "train_full/qwen3_full_sft.yaml", "train_lora/qwen3_lora_sft_ray.yaml"]  # (ray: REMOTE:llamafactory/demo_data)
SFT_VISION = ["train_lora/qwen3vl_lora_sft.yaml", "train_full/qwen3vl_full_sft.yaml"]  # mllm_demo: images
MLLM_IMAGES = {"1.jpg": (300, 168), "2.jpg": (300, 199), "3.jpg": (300, 166)}  # the sizes of LLaMA-Factory's files
PREF_OK = {"train_lora/qwen3_lora_dpo.yaml": "dpo", "train_lora/qwen3_lora_kto.yaml": "kto"}
OTHER_STAGES = {"train_lora/qwen3_lora_reward.yaml": "reward model", "train_lora/qwen3_lora_pretrain.yaml": "pre-training"}


@pytest.fixture(scope="module")
def lf_checkout(tmp_path_factory, demo):
    """A folder laid out as LLaMA-Factory's checkout, with the demo model beside: the workspace of these jobs."""
    root = tmp_path_factory.mktemp("LLaMA-Factory")
    shutil.copytree(FIXTURE / "data", root / "data")
    shutil.copytree(EXAMPLES, root / "examples")
    shutil.copytree(demo, root / "model")
    from PIL import Image

    from zeroboard.training.demo_vision import build_vision_model

    build_vision_model(root / "vision-model", root / "vision-text")
    (root / "data" / "mllm_demo_data").mkdir()
    for name, size in MLLM_IMAGES.items():
        Image.new("RGB", size, (200, 60, 40)).save(root / "data" / "mllm_demo_data" / name)
    return root


@pytest.fixture()
def in_checkout(lf_checkout, monkeypatch):
    monkeypatch.chdir(lf_checkout)
    monkeypatch.setenv("ZEROBOARD_WORKSPACE", str(lf_checkout))
    # the ray example's dataset_dir, REMOTE:llamafactory/demo_data, as a download leaves it in the hub cache: its
    # dataset_info.json naming the two datasets the example trains, their files LLaMA-Factory's own (no hub here)
    hub = lf_checkout / "hub-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    names = ("identity", "alpaca_en_demo")
    hub_dataset(hub, "llamafactory/demo_data",
                {"dataset_info.json": json.dumps({n: {"file_name": f"{n}.json"} for n in names}),
                 **{f"{n}.json": (FIXTURE / "data" / f"{n}.json").read_text(encoding="utf-8") for n in names}})
    return lf_checkout


def as_given(name: str, root: Path, model: str = "model") -> Path:
    """The example with only its model changed (to the demo model), written into the checkout."""
    data = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    data["model_name_or_path"] = model
    path = root / f"job-{Path(name).stem}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_the_copies_are_the_examples_of_llamafactory():
    """Every SFT example of LLaMA-Factory 0.9.5 is here, and each of its keys is one the table accounts for."""
    names = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.glob("train_*/*.yaml"))
    assert names == sorted([*SFT_OK, *SFT_VISION, *PREF_OK, *OTHER_STAGES])
    known = modelinfo.training_argument_names()
    for name in names:
        data = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
        assert not [k for k in data if k not in lfkeys.TABLE and k not in spec.FIELDS and k not in known], name
        if name in SFT_OK + SFT_VISION:
            assert data["stage"] == "sft" and data["model_name_or_path"].startswith("Qwen/")


@pytest.mark.parametrize("name", SFT_OK)
def test_an_sft_example_validates_and_previews_as_it_is(name, in_checkout, capsys):
    path = as_given(name, in_checkout)
    assert cli_main(["validate", str(path)]) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert "LLaMA-Factory 0.9.5's defaults" in err  # the keys it leaves out: said
    assert "preprocessing_num_workers: is 16" in err or "preprocessing_num_workers" not in path.read_text()
    assert cli_main(["preview", str(path)]) == 0
    out, err = capsys.readouterr()
    given = yaml.safe_load(path.read_text())
    assert "zeroboard.training.train" in out and "--template qwen3_nothink" in out
    assert f"--dataset_dir {given.get('dataset_dir', 'data')}" in out
    assert ("--precision bf16" in out) == bool(given.get("bf16"))
    assert ("examples/deepspeed/ds_z3_config.json" in out) == ("deepspeed" in given)


@pytest.mark.parametrize("name", sorted(PREF_OK))
def test_a_dpo_or_kto_example_validates_and_previews_as_preference_tuning(name, in_checkout, capsys):
    """Its stage is the job's training_stage, its pref_beta the field; its data (dpo_en_demo: ranking pairs,
    kto_en_demo: tagged answers) is what that stage takes."""
    path = as_given(name, in_checkout)
    assert cli_main(["validate", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert cli_main(["preview", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"--training_stage {PREF_OK[name]}" in out and "--template qwen3_nothink" in out
    job = spec.load_yaml(path)
    assert (job.training_stage, job.pref_beta, job.finetuning_type) == (PREF_OK[name], 0.1, "lora")


@pytest.mark.parametrize("config", ["ds_z0_config.json", "ds_z2_config.json", "ds_z3_config.json"])
def test_each_deepspeed_config_the_examples_name_is_taken(config, in_checkout, capsys):
    """qwen3_lora_sft_ds3.yaml names its choices (ds_z0, ds_z2, ds_z3): each previews as the stage it sets."""
    path = as_given("train_lora/qwen3_lora_sft_ds3.yaml", in_checkout)
    data = yaml.safe_load(path.read_text())
    data["deepspeed"] = f"examples/deepspeed/{config}"
    path.write_text(yaml.safe_dump(data))
    assert cli_main(["preview", "--json", str(path)]) == 0, capsys.readouterr().err
    assert f"examples/deepspeed/{config}" in capsys.readouterr().out


@pytest.mark.parametrize("name", SFT_VISION)
def test_a_qwen3_vl_example_validates_previews_and_shows_each_images_tokens(name, in_checkout, capsys):
    """On a Qwen3-VL model (the built-in tiny one): the images of mllm_demo become the model's vision tokens, as many
    as its image processor makes merged patches of each picture (300 x 168 at image_max_pixels 262144: 45)."""
    path = as_given(name, in_checkout, "vision-model")
    assert cli_main(["validate", str(path)]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "video_max_pixels:" in err and "image_max_pixels" not in err  # a video setting: said; the image one: used
    assert cli_main(["preview", str(path)]) == 0
    out = capsys.readouterr().out
    assert "--template qwen3_vl_nothink" in out and "--image_max_pixels 262144" in out
    assert ("--finetuning_type full" in out) == ("train_full" in name)
    assert cli_main(["dataset", "--json", "-n", "2", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    first = report["samples"][0]
    assert first["dataset"] == "mllm_demo" and [Path(p).name for p in first["images"]] == ["1.jpg", "1.jpg"]
    text = "".join(seg["text"] for seg in first["segments"])
    assert text.count("<|vision_start|><|image_pad|>x45<|vision_end|>") == 2 and "<image>" not in text
    assert report["stats"]["skipped"] == 0


@pytest.mark.parametrize("name", SFT_VISION)
def test_a_qwen3_vl_example_on_a_text_only_model_is_refused_naming_the_dataset_and_the_model(name, in_checkout, capsys):
    assert cli_main(["validate", str(as_given(name, in_checkout))]) == 2
    err = capsys.readouterr().err
    assert "  dataset: dataset mllm_demo has images" in err and "text-only model" in err and "Traceback" not in err, err


@pytest.mark.parametrize("name", sorted(OTHER_STAGES))
def test_an_example_of_another_stage_is_refused_naming_the_stage(name, in_checkout, capsys):
    assert cli_main(["validate", str(as_given(name, in_checkout))]) == 2
    err = capsys.readouterr().err
    assert "  stage:" in err and OTHER_STAGES[name] in err, err


def test_its_preference_dataset_is_refused_as_preference_data(in_checkout, capsys):
    path = as_given("train_lora/qwen3_lora_sft.yaml", in_checkout)
    data = yaml.safe_load(path.read_text())
    data["dataset"] = "dpo_en_demo"
    path.write_text(yaml.safe_dump(data))
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "dpo_en_demo" in err and "preference data" in err and "media" not in err


def test_the_page_loads_an_example_with_its_notes(in_checkout):
    from zeroboard.webui import handlers

    values, message = handlers.load_args(str(as_given("train_lora/qwen3_lora_sft.yaml", in_checkout)))
    assert values is not None and values["precision"] == "bf16" and values["template"] == "qwen3_nothink"
    assert "plot_loss" in message and "LLaMA-Factory 0.9.5" in message
    _, zh = handlers.load_args(str(as_given("train_lora/qwen3_lora_sft.yaml", in_checkout)), "zh")
    assert "不需要,运行页会画出 loss" in zh
    values, message = handlers.load_args(str(as_given("train_lora/qwen3_lora_dpo.yaml", in_checkout)))
    assert values is not None and values["training_stage"] == "dpo" and values["pref_beta"] == 0.1
    values, message = handlers.load_args(str(as_given("train_lora/qwen3_lora_reward.yaml", in_checkout)))
    assert values is None and "stage" in message and "reward model" in message


def test_the_data_preview_names_the_records_llamafactory_skips(in_checkout):
    import json

    from zeroboard.webui import handlers

    turns = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    (in_checkout / "data" / "odd.json").write_text(json.dumps([{"conversations": turns},
                                                               {"conversations": turns[:1]},
                                                               {"conversations": [turns[1], turns[0]]}]))
    shown = handlers.dataset_preview("data", "odd.json", n=3)
    assert "2 of these records skipped" in shown and "record 1" in shown and "the last one not an answer" in shown
