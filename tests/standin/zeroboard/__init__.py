"""The stand-in trainer's overlay of ZeroBoard, for the supervision tests only.

With this folder (``tests/standin``) first on a job's PYTHONPATH, every rank still runs ``python -m
zeroboard.training.train`` with the job's own flags, under the real launcher, supervisor and runner, but the module
it finds is the stand-in (``training/train.py`` here): a small real process that speaks the trainer's event protocol
and starts in a fraction of a second, instead of importing torch, transformers and DeepSpeed for 15-20 s.  Every
other module of the package is ZeroBoard's own: this package's path continues into the installed one.
"""

from __future__ import annotations

import sys
from importlib.machinery import PathFinder
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_found = PathFinder.find_spec("zeroboard", [p for p in sys.path if Path(p or ".").resolve() != _HERE.parent])
if _found is None or not _found.submodule_search_locations:  # pragma: no cover - a broken test environment
    raise ImportError("the stand-in overlay found no installed zeroboard package behind it")
__path__ = [str(_HERE), *_found.submodule_search_locations]  # noqa: F811 - the overlay, then the real package
exec(compile(Path(_found.origin).read_text(encoding="utf-8"), _found.origin, "exec"))  # its __version__ and the like
