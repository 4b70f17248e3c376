"""Images for a vision-language model: tags and files, the tokens an image takes, the batch, what trains, the checks.

On the built-in tiny Qwen3-VL (``zeroboard demo-model --vision``), built once for the module. The real runs (ZeRO-3,
the vision tower frozen, LoRA and full) are tests/test_vision_e2e.py's.
"""

from __future__ import annotations

import json
import re

import pytest

from zeroboard.data import media
from zeroboard.data.formats import DataError, Skipped
from zeroboard.job import checks
from zeroboard.job.spec import JobSpec


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    from zeroboard.training.demo_vision import build_vision_model, write_vision_data

    root = tmp_path_factory.mktemp("vision")
    write_vision_data(root / "data")
    return build_vision_model(root / "model", root / "text-data"), root / "data"


@pytest.fixture(scope="module")
def seen(vlm):
    from transformers import AutoTokenizer

    from zeroboard.training import templates, vision

    tokenizer = AutoTokenizer.from_pretrained(vlm[0])
    templates.apply(tokenizer, "qwen3_vl_nothink")
    return vision.Vision.of(JobSpec(model_name_or_path=str(vlm[0])), tokenizer), tokenizer


def image(path, w, h):
    from PIL import Image

    Image.new("RGB", (w, h), (10, 120, 200)).save(path)
    return str(path)


# --- the data layer: tags and files --------------------------------------------------------------------------------

def test_files_are_read_from_the_dataset_folder_and_each_tag_gets_its_own_tokens(tmp_path):
    assert media.image_files({"images": "a.jpg"}, "images", tmp_path) == [str(tmp_path / "a.jpg")]
    assert media.image_files({"images": ["/abs/b.png", "c.png"]}, "images", tmp_path) == ["/abs/b.png", str(tmp_path / "c.png")]
    assert media.image_files({"images": None}, "images", tmp_path) == []
    with pytest.raises(DataError, match="images"):
        media.image_files({"images": [3]}, "images", tmp_path)
    conv = [{"role": "user", "content": "<image>Who?<image>"}, {"role": "assistant", "content": "Them."},
            {"role": "user", "content": "And <image>"}]
    out = media.expand(conv, [2, 3, 1], "<s>", "P", "</s>")
    assert [m["content"] for m in out] == ["<s>PP</s>Who?<s>PPP</s>", "Them.", "And <s>P</s>"]
    assert conv[0]["content"] == "<image>Who?<image>"  # the record itself is left as it was
    media.check_tags(conv, ["a", "b", "c"])
    with pytest.raises(Skipped, match="has 2 <image> tag"):
        media.check_tags(conv[:1], ["a"])
    with pytest.raises(Skipped, match="1 <image> tag"):
        media.check_tags(conv[2:], [])


# --- the tokens an image takes -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("w", "h"), [(300, 168), (96, 64), (1000, 700), (2000, 30), (12, 20), (640, 640)])
def test_an_image_takes_as_many_pad_tokens_as_the_processor_makes_merged_patches(seen, tmp_path, w, h):
    """The count written into the text is the model's: grid t*h*w / merge**2 of the very pixels the batch gets."""
    v, _ = seen
    img = v.open(image(tmp_path / "x.png", w, h))
    assert img.width * img.height <= v.max_pixels and min(img.size) >= 28 and img.mode == "RGB"
    grid = v.pixels([img])["image_grid_thw"]
    assert v.pads(img) == int(grid.prod()) // v.merge ** 2


def test_a_large_image_is_scaled_as_llamafactory_scales_it(seen, tmp_path):
    """Above image_max_pixels both sides scale by sqrt(max / area), cut to whole pixels (LLaMA-Factory's rule)."""
    import dataclasses

    v = dataclasses.replace(seen[0], max_pixels=262144)
    img = v.open(image(tmp_path / "big.png", 1000, 700))
    k = (262144 / 700000) ** 0.5
    assert img.size == (int(1000 * k), int(700 * k))
    small = dataclasses.replace(seen[0], min_pixels=64 * 64).open(image(tmp_path / "s.png", 40, 30))
    assert small.size == (int(40 * (4096 / 1200) ** 0.5), int(30 * (4096 / 1200) ** 0.5))


# --- the batch ---------------------------------------------------------------------------------------------------

def test_a_batch_without_images_gets_a_masked_fake_image_and_counts_only_its_own_tokens(seen):
    from zeroboard.training import vision

    v, tok = seen
    c = vision.Collator(tok.pad_token_id, v)
    out = c([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5, 6], "labels": [-100, 6]}])
    fake = out["input_ids"][0, 3:]
    assert fake[0] == v.ids[0] and fake[-1] == v.ids[2] and (fake[1:-1] == v.ids[1]).all()
    assert out["attention_mask"][0, 3:].sum() == 0 and (out["labels"][0, 3:] == -100).all()
    assert out["attention_mask"][1].tolist()[:2] == [1, 1] and c.tokens == 5
    assert int(out["mm_token_type_ids"].sum()) == int(out["image_grid_thw"].prod()) // v.merge ** 2
    assert out["pixel_values"].shape[0] == int(out["image_grid_thw"].prod())


def test_a_batch_with_images_gets_their_pixels_in_order(seen, tmp_path):
    from zeroboard.training import vision

    v, tok = seen
    a, b = image(tmp_path / "a.png", 96, 64), image(tmp_path / "b.png", 64, 160)
    rows = []
    for files in ([a], [b, a]):
        n = sum(v.pads(v.open(f)) for f in files)
        rows.append({"input_ids": [5] + [v.ids[1]] * n, "labels": [-100] * (n + 1), "images": files})
    out = vision.Collator(tok.pad_token_id, v)(rows)
    assert out["image_grid_thw"].tolist() == [[1, 4, 6], [1, 10, 4], [1, 4, 6]]
    assert int(out["mm_token_type_ids"].sum()) == sum(len(r["input_ids"]) - 1 for r in rows)
    assert out["attention_mask"].min() == 0 and "images" not in out
    image(tmp_path / "a.png", 200, 200)  # replaced after its tokens were written: said, not the model's shape error
    with pytest.raises(DataError, match="overwrite_cache"):
        vision.Collator(tok.pad_token_id, v)(rows[:1])


# --- what trains -------------------------------------------------------------------------------------------------

def test_lora_all_adapts_the_language_model_and_full_tuning_freezes_as_asked(vlm):
    import torch
    from transformers import AutoModelForImageTextToText

    from zeroboard.training import vision

    model = AutoModelForImageTextToText.from_pretrained(vlm[0])
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    pattern = vision.lora_target(model, JobSpec(model_name_or_path=str(vlm[0])))
    hit = [n for n in linears if re.fullmatch(pattern, n)]
    assert hit and all("language_model" in n for n in hit)
    assert {n.rpartition(".")[2] for n in hit} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    both = vision.lora_target(model, JobSpec(model_name_or_path=str(vlm[0]), freeze_vision_tower=False))
    hit = [n for n in linears if re.fullmatch(both, n)]
    assert any("visual.blocks" in n for n in hit) and not any("visual.merger" in n or "lm_head" in n for n in hit)
    assert vision.lora_target(model, JobSpec(lora_target=["q_proj"])) == ["q_proj"]
    vision.freeze(model, JobSpec(freeze_multi_modal_projector=False))
    trains = {vision.part(n) for n, p in model.named_parameters() if p.requires_grad}
    frozen = {vision.part(n) for n, p in model.named_parameters() if not p.requires_grad}
    assert trains == {"language", "projector"} and frozen == {"vision"}


# --- before launch -----------------------------------------------------------------------------------------------

def test_images_need_a_vision_language_model_the_sft_stage_and_no_packing(vlm, demo, tmp_path):
    model, data = vlm
    out = str(tmp_path / "out")
    good = JobSpec(model_name_or_path=str(model), dataset_dir=str(data), dataset=["demo_images"],
                   template="qwen3_vl_nothink", output_dir=out, num_processes=1, device_type="cpu")
    assert checks.validate(good, []).errors == {}
    errors = checks.validate(JobSpec(**{**good.__dict__, "model_name_or_path": str(demo)}), []).errors
    err = errors.get("dataset", errors)
    assert "demo_images" in err and "text-only" in err and "qwen3_vl" in err
    err = checks.validate(JobSpec(**{**good.__dict__, "packing": True}), []).errors["dataset"]
    assert "packing" in err
    err = checks.validate(JobSpec(**{**good.__dict__, "training_stage": "dpo"}), []).errors["dataset"]
    assert "demo_images" in err and "sft" in err
    info = json.loads((data / "dataset_info.json").read_text())
    info["demo_images"]["columns"]["videos"] = "videos"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "dataset_info.json").write_text(json.dumps(info))
    err = checks.validate(JobSpec(**{**good.__dict__, "dataset_dir": str(tmp_path / "d")}), []).errors["dataset"]
    assert "columns.videos" in err and "video" in err


# --- the other Qwen-VL families ----------------------------------------------------------------------------------

_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
_PATCHES = dict(patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_heads=2, depth=2)
FAMILIES = {
    "qwen2_vl": (_TEXT, dict(embed_dim=32, hidden_size=64, mlp_ratio=2, **_PATCHES)),
    "qwen2_5_vl": (_TEXT, dict(hidden_size=32, intermediate_size=64, out_hidden_size=64, fullatt_block_indexes=[1],
                               window_size=64, **_PATCHES)),
    "qwen3_vl_moe": ({**_TEXT, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
                     dict(hidden_size=32, intermediate_size=64, out_hidden_size=64, num_position_embeddings=256,
                          deepstack_visual_indexes=[0], **_PATCHES)),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_qwen_vl_family_reads_its_pictures_and_the_fake_one_and_learns(family, vlm, tmp_path):
    """Qwen2-VL, Qwen2.5-VL and Qwen3-VL-MoE (Qwen3-VL: the demo's), tiny, on the demo's tokenizer and processor: a
    batch with a picture and one without give a finite loss whose gradients reach the language model."""
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoTokenizer

    from zeroboard.training import templates, vision
    from zeroboard.training.demo_vision import QWEN_TOKENS, image_processor

    tok = AutoTokenizer.from_pretrained(vlm[0])
    ids = dict(zip(("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"),
                   tok.convert_tokens_to_ids([QWEN_TOKENS[4], QWEN_TOKENS[5], QWEN_TOKENS[2], QWEN_TOKENS[3]])))
    text, sight = FAMILIES[family]
    config = AutoConfig.for_model(family, text_config={**text, "vocab_size": len(tok)}, vision_config=sight, **ids)
    AutoModelForImageTextToText.from_config(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    image_processor().save_pretrained(tmp_path)
    model = vision.auto_model(tmp_path).from_pretrained(tmp_path)
    templates.apply(tok, "qwen3_vl_nothink")
    seen = vision.Vision.of(JobSpec(model_name_or_path=str(tmp_path)), tok)
    picture = image(tmp_path / "p.png", 96, 64)
    conv, pads = seen.expand([{"role": "user", "content": "<image>Colour?"}, {"role": "assistant", "content": "Red."}],
                             [picture])
    ids, _ = templates.encode_layouts(tok, [templates.Renderer.of(tok).layout(conv)])[0]
    assert ids.count(seen.ids[1]) == pads == 6
    for rows in ([{"input_ids": ids, "labels": ids, "images": [picture]}], [{"input_ids": ids[:4], "labels": ids[:4]}]):
        model.zero_grad()
        loss = model(**vision.Collator(tok.pad_token_id, seen)(rows)).loss
        loss.backward()
        assert loss.isfinite() and model.get_output_embeddings().weight.grad.abs().sum() > 0
