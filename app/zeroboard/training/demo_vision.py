"""The built-in vision-language model: a tiny Qwen3-VL on the demo's tokenizer, and a dataset of pictures to teach it.

``zeroboard demo-model --vision`` builds both, offline: the demo tokenizer with Qwen's chat and vision tokens, a
Qwen3-VL of a few hundred thousand parameters (random weights: examples/vision.yaml teaches it the pictures in 40 steps), its
image processor (Qwen2-VL's: 16-pixel patches merged 2 x 2), and ``demo_images`` -- small pictures of coloured
shapes, each asked about in LLaMA-Factory's sharegpt layout with an ``<image>`` tag (examples/vision.yaml).
Needs torch, transformers and Pillow.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..data.demo import vision_records, write_demo_data
from .demo_model import save, train_tokenizer

QWEN_TOKENS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 40)}
SHAPES = ("square", "circle")


def qwen3_vl(tokenizer, seed: int):
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_TOKENS}
    torch.manual_seed(seed)
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                 "mrope_interleaved": True},
                pad_token_id=tokenizer.pad_token_id, eos_token_id=ids["<|im_end|>"], tie_word_embeddings=False)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=256, deepstack_visual_indexes=[0])
    config = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                           video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                           vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def image_processor():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3,
                                    image_std=[0.5] * 3, size={"shortest_edge": 32 * 32, "longest_edge": 256 * 256})


def build_vision_model(model_dir: str | Path, data_dir: str | Path, seed: int = 0) -> Path:
    """The tiny Qwen3-VL at ``model_dir`` (its tokenizer trained on the demo text in ``data_dir``)."""
    tokenizer = train_tokenizer(write_demo_data(data_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN_TOKENS}, replace_extra_special_tokens=False)
    tokenizer.model_max_length = 4096
    out = save(qwen3_vl(tokenizer, seed), tokenizer, Path(model_dir), "zeroboard demo-model --vision", seed)
    image_processor().save_pretrained(out)
    return out


def write_vision_data(data_dir: str | Path) -> Path:
    """``demo_images``: a picture per colour and shape, asked about twice; its dataset_info.json beside it."""
    from PIL import Image, ImageDraw

    root = Path(data_dir)
    (root / "demo_images").mkdir(parents=True, exist_ok=True)
    pictures = {}
    for colour, rgb in COLOURS.items():
        for shape in SHAPES:
            name = f"demo_images/{colour}_{shape}.png"
            image = Image.new("RGB", (96, 64), (255, 255, 255))
            draw = ImageDraw.Draw(image)
            (draw.rectangle if shape == "square" else draw.ellipse)((28, 12, 68, 52), fill=rgb)
            image.save(root / name)
            pictures[name] = (colour, shape)
    records = vision_records(pictures)
    (root / "demo_images.json").write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    info = {"demo_images": {"file_name": "demo_images.json", "formatting": "sharegpt",
                            "columns": {"messages": "messages", "images": "images"},
                            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                     "assistant_tag": "assistant"}}}
    (root / "dataset_info.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return root
