"""``python tools/screenshots.py`` end to end: its own web UI, a demo run, ten PNGs that show something.

About two minutes on an idle 2-core machine (most of it the demo run and Reload and answer, twice).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "screenshots.py"
LANGS = ("en", "zh")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def not_blank(path: Path) -> tuple[int, float]:
    """(distinct grey levels, their standard deviation) over the image shrunk to 200 px wide."""
    from PIL import Image, ImageStat

    with Image.open(path) as im:
        grey = im.convert("L")
        grey = grey.resize((200, max(1, grey.height * 200 // grey.width)))
    return len(grey.getcolors(256) or []), ImageStat.Stat(grey).stddev[0]


def test_the_generator_writes_every_documented_screenshot(tmp_path):
    chromium = os.environ.get("ZEROBOARD_CHROMIUM", "/usr/bin/chromium")
    assert Path(chromium).exists(), f"no Chromium at {chromium}: run `make chromium` or set ZEROBOARD_CHROMIUM"
    out = tmp_path / "images"

    done = subprocess.run([sys.executable, str(TOOL), "--out", str(out), "--lang", ",".join(LANGS)],
                          cwd=REPO, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    shots = ("train", "stage_dropdown", "preview_offload", "running", "finished")
    expected = {f"{shot}_{lang}.png" for shot in shots for lang in LANGS}
    assert len(expected) == 10
    assert {p.name for p in out.glob("*.png")} == expected
    from PIL import Image

    for name in sorted(expected):
        path = out / name
        assert f"wrote {path}" in done.stdout, name
        assert path.read_bytes()[:8] == PNG_SIGNATURE, name
        assert 5_000 < path.stat().st_size < 1_500_000, (name, path.stat().st_size)
        with Image.open(path) as im:
            im.verify()  # a truncated or corrupt file raises
        with Image.open(path) as im:
            assert 600 <= im.width <= 1440 and 150 <= im.height <= 4000, (name, im.size)
        levels, spread = not_blank(path)
        assert levels >= 16 and spread > 8, f"{name} looks blank: {levels} grey levels, stddev {spread:.1f}"
    # the language tabs really are in their language
    assert Image.open(out / "train_zh.png").tobytes() != Image.open(out / "train_en.png").tobytes()
