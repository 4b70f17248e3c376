"""The screenshot tool's rule for rewriting an image (tools/shots_page.py): only a change beyond live figures."""

from __future__ import annotations

import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from shots_page import SIZE_JITTER, TOLERANCE, save_png  # noqa: E402


def png(width: int, height: int, stripes: int = 0) -> bytes:
    """A white image with ``stripes`` black rows at its top: what a page region looks like to the comparison."""
    from PIL import Image

    im = Image.new("RGB", (width, height), "white")
    for y in range(stripes):
        for x in range(width):
            im.putpixel((x, y), (0, 0, 0))
    out = io.BytesIO()
    im.save(out, format="PNG")
    return out.getvalue()


def test_an_image_is_written_when_new_or_changed_and_kept_when_only_rounding_moved_its_edge(tmp_path):
    path = tmp_path / "finished_en.png"
    assert save_png([png(200, 100)], path)[1] == "new"
    first = path.read_bytes()
    # the same region, its box rounded to one pixel more: the same image
    changed, why = save_png([png(200, 100 + 1)], path)
    assert why == "" and path.read_bytes() == first and changed <= TOLERANCE
    # taller by more than the rounding: another image
    changed, why = save_png([png(200, 100 + SIZE_JITTER + 1)], path)
    assert changed is None and why.startswith("another size")
    # the same size, a tenth of its pixels changed: rewritten, and why
    changed, why = save_png([png(200, 100 + SIZE_JITTER + 1, stripes=10)], path)
    assert changed and changed > TOLERANCE and "of its pixels differ" in why
