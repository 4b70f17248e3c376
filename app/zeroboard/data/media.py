"""Images in a conversation, as LLaMA-Factory writes them: ``<image>`` tags in the messages, the files in the record's
``images`` column (dataset_info's ``columns.images``), one file per tag, in order.

Pure Python: which files a record names (relative to the dataset folder, LLaMA-Factory's ``media_dir`` default), the
check that tags and files agree, and the tags replaced by what a vision-language model reads in their place (the
vision start token, one image-pad token per merged patch, the vision end token). How many pads an image takes is the
model's image processor's count (``training.vision``); this module only writes them.
"""

from __future__ import annotations

from pathlib import Path

from ..words import say
from .formats import Conversation, DataError, Skipped

IMAGE_TAG = "<image>"


def image_files(record: dict, column: str | None, dataset_dir: str | Path) -> list[str]:
    """The record's images as paths (absolute, or under ``dataset_dir``); [] without the column or a value."""
    if not column:
        return []
    value = record.get(column)
    if value in (None, "", []):
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v for v in items):
        raise DataError(say("data.images_not_paths", column=column))
    return [str(p if Path(p).is_absolute() else Path(dataset_dir) / p) for p in items]


def tag_count(conv: Conversation) -> int:
    return sum(str(m.get("content") or "").count(IMAGE_TAG) for m in conv)


def check_tags(conv: Conversation, images: list[str]) -> None:
    """Skipped when the record's ``<image>`` tags and its files disagree in number (LLaMA-Factory stops the whole
    preprocessing there; here the record is left out, counted and the first one shown)."""
    tags = tag_count(conv)
    if tags != len(images):
        raise Skipped(say("data.image_tags_mismatch", tags=tags, images=len(images)))


def expand(conv: Conversation, pads: list[int], start: str, pad: str, end: str) -> Conversation:
    """The conversation with its i-th ``<image>`` tag replaced by ``start + pad * pads[i] + end``."""
    out, i = [], 0
    for m in conv:
        content = m.get("content")
        if isinstance(content, str) and IMAGE_TAG in content:
            pieces = content.split(IMAGE_TAG)
            text = pieces[0]
            for piece in pieces[1:]:
                text += start + pad * pads[i] + end + piece
                i += 1
            m = {**m, "content": text}
        out.append(m)
    return out


# the model types whose images this trainer feeds (a Qwen2-VL image processor, image-pad tokens, M-RoPE): Qwen2-VL's
VISION_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


def images_problem(name: str, model: str, model_type: str | None, packing: bool):
    """Why a dataset with images cannot train this job (a catalog Msg), or None. An unknown type (a model not yet
    downloaded) is the trainer's to find."""
    if model_type is not None and model_type not in VISION_TYPES:
        return say("data.images_need_vlm", name=name, model=model, kind=model_type, known=", ".join(VISION_TYPES))
    if packing:
        return say("data.images_packing", name=name)
    return None
