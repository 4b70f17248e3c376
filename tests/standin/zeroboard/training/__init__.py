"""The overlay's ``zeroboard.training``: ``train`` is the stand-in; the other modules are ZeroBoard's own."""

from __future__ import annotations

from pathlib import Path

import zeroboard

__path__ = [str(Path(__file__).resolve().parent)] + [str(Path(p) / "training") for p in zeroboard.__path__[1:]]  # noqa: F811
