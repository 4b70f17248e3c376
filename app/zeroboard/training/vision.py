"""Images for a vision-language model of Qwen2-VL's family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): what an image costs in
tokens, its pixels in a batch, and which weights train.

As LLaMA-Factory feeds them: an image is scaled (keeping its shape) to at most ``image_max_pixels`` and at least
``image_min_pixels``, made RGB, then given to the model's own image processor, which cuts it into patches; each
``<image>`` tag of the text becomes the vision start token, one image-pad token per merged patch
(``grid t*h*w / merge_size**2``) and the vision end token (``data.media.expand``). The tokens are written when the data
is tokenized (``training.dataprep``), the pixels when a batch is made (:class:`Collator`), from the same scaled image.

A batch without an image gets a small white one whose tokens the attention and the loss ignore (LLaMA-Factory's
"fake image"): every rank then runs the vision tower on every step, which ZeRO-3's gathering of its weights needs.

What trains: the vision tower and the projector (``visual.merger``) are frozen unless the job unfreezes them, the
language model trains unless frozen; LoRA's ``all`` adapts the language model's linear layers (the vision tower's too
when it is not frozen), never the output head or the projector, as LLaMA-Factory's ``lora_target: all`` does.
Needs torch, transformers and Pillow: the trainer's process only.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data import media, tokens
from ..data.formats import DataError
from ..job import modelinfo, spec as specmod
from ..words import say
from .callbacks import TokenCounter

FAKE_SIZE = 64  # the side of the white image a batch without images gets
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")


def is_vision(model_dir: str) -> bool:
    return modelinfo.model_type(Path(model_dir)) in media.VISION_TYPES


def auto_model(model_dir: str | Path):
    """The transformers class a model loads with: a vision-language model's own (text prompts work on it too)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vision(str(model_dir)) else AutoModelForCausalLM


@dataclass
class Vision:
    """How this model sees an image: its processor, its tokens, the job's pixel bounds. Picklable (map workers)."""

    processor: Any
    merge: int
    start: str
    pad: str
    end: str
    ids: tuple[int, int, int]  # start, pad, end
    max_pixels: int
    min_pixels: int

    @classmethod
    def of(cls, job: specmod.JobSpec, tokenizer) -> Vision | None:
        """None for a text-only model."""
        cfg = modelinfo.model_config(Path(job.model_name_or_path)) or {}
        if cfg.get("model_type") not in media.VISION_TYPES:
            return None
        from transformers import AutoImageProcessor

        processor = AutoImageProcessor.from_pretrained(job.model_name_or_path)
        ids = (cfg["vision_start_token_id"], cfg["image_token_id"], cfg["vision_end_token_id"])
        start, pad, end = tokenizer.convert_ids_to_tokens(list(ids))
        return cls(processor, int(processor.merge_size), start, pad, end, ids, job.image_max_pixels, job.image_min_pixels)

    def describe(self) -> dict:
        """What changes the tokens, for the data cache's key."""
        return {"processor": self.processor.to_dict(), "tokens": [self.start, self.pad, self.end],
                "pixels": [self.max_pixels, self.min_pixels]}

    def open(self, path: str):
        """The image as the processor gets it: scaled into the job's bounds, RGB."""
        from PIL import Image

        try:
            with Image.open(path) as im:
                image = im.copy()
        except (OSError, ValueError) as e:
            raise DataError(say("data.image_unreadable", path=path, why=f"{type(e).__name__}: {e}")) from None
        for bound, grow in ((self.max_pixels, False), (self.min_pixels, True)):
            area = image.width * image.height
            if (area < bound) if grow else (area > bound):
                k = math.sqrt(bound / area)
                image = image.resize((max(1, int(image.width * k)), max(1, int(image.height * k))))
        if min(image.width, image.height) < 28:  # Qwen2-VL's processor needs a side of 28 at least
            image = image.resize((max(image.width, 28), max(image.height, 28)))
        return image.convert("RGB") if image.mode != "RGB" else image

    def pads(self, image) -> int:
        return self.processor.get_number_of_image_patches(image.height, image.width) // self.merge ** 2

    def expand(self, conv, files: list[str]):
        """The conversation with each ``<image>`` tag replaced by its tokens, and how many image-pad tokens in all."""
        media.check_tags(conv, files)
        counts = [self.pads(self.open(f)) for f in files]
        return media.expand(conv, counts, self.start, self.pad, self.end), sum(counts)

    def pixels(self, images: list) -> dict:
        import torch

        out = self.processor(images=images, return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": torch.as_tensor(out["image_grid_thw"])}


class Collator(TokenCounter):
    """The text batch (``TokenCounter``'s, counting its tokens) with the pixels of its images and the token types
    M-RoPE reads; a batch without images gets the fake image at the end of its first row, masked out."""

    def __init__(self, pad_id: int, vision: Vision):
        super().__init__(pad_id)
        self.vision = vision

    def __call__(self, features: list[dict]):
        from PIL import Image

        files = [f for row in features for f in (row.get("images") or [])]
        rows = [{k: v for k, v in row.items() if k != "images"} for row in features]
        images = [self.vision.open(f) for f in files]
        fake = 0
        if not images:
            image = Image.new("RGB", (FAKE_SIZE, FAKE_SIZE), (255, 255, 255))
            start, pad, end = self.vision.ids
            extra = [start] + [pad] * self.vision.pads(image) + [end]
            first = rows[0]
            rows[0] = {**first, "input_ids": list(first["input_ids"]) + extra,
                       "labels": list(first["labels"]) + [tokens.IGNORE] * len(extra)}
            images, fake = [image], len(extra)
        before = self.tokens
        out = super().__call__(rows)
        if fake:
            n = len(rows[0]["input_ids"])
            out["attention_mask"][0, n - fake:n] = 0
            self.tokens -= fake if self.tokens > before else 0
        out.update(self.vision.pixels(images))
        out["mm_token_type_ids"] = (out["input_ids"] == self.vision.ids[1]).long()
        wanted = int(out["image_grid_thw"].prod(-1).sum()) // self.vision.merge ** 2
        if int(out["mm_token_type_ids"].sum()) != wanted:  # a picture changed since its tokens were written
            raise DataError(say("data.image_changed", files=", ".join(sorted(set(files)))[:300]))
        return out


# --- what trains ------------------------------------------------------------------------------------------------

def part(name: str) -> str:
    """``vision``, ``projector`` or ``language``: which part of a Qwen-VL model a parameter or module belongs to."""
    if "visual.merger" in name:
        return "projector"
    return "vision" if "visual." in name else "language"


def freeze(model, job: specmod.JobSpec) -> None:
    """Full fine-tuning: the parts the job freezes keep their weights."""
    frozen = {p for p, on in (("vision", job.freeze_vision_tower), ("projector", job.freeze_multi_modal_projector),
                              ("language", job.freeze_language_model)) if on}
    for name, param in model.named_parameters():
        if part(name) in frozen:
            param.requires_grad_(False)


def lora_target(model, job: specmod.JobSpec):
    """LoRA's ``all`` on a vision-language model: the language model's linear layers (and the vision tower's when it
    trains) as one pattern peft matches whole names against; other targets as the job names them."""
    import torch

    if job.lora_target != ["all"]:
        return job.lora_target
    out = model.get_output_embeddings()
    names = sorted({n.rpartition(".")[2] for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear) and m is not out and "patch_embed" not in n
                    and (part(n) == "language" or (part(n) == "vision" and not job.freeze_vision_tower))})
    scope = "" if not job.freeze_vision_tower else r"(?!.*visual\.)"
    return rf"{scope}(?!.*visual\.merger).*\.({'|'.join(names)})"


def save_processor(model_dir: str, output_dir: str) -> None:
    """The image processor's files beside the trained model, so that it loads as the base did."""
    for name in PROCESSOR_FILES:
        if (Path(model_dir) / name).is_file():
            shutil.copyfile(Path(model_dir) / name, Path(output_dir) / name)
