"""DeepSpeed presets: the four JSON files a course reader looks for in cache/.

Their content is :func:`~zeroboard.job.placement.preset` (with the rule of what offload moves); this module
writes them, keeping hand edits.

Values the HF Trainer knows better (batch sizes, accumulation, clipping,
precision) are ``"auto"``; the Trainer fills them from the job at start.

A preset a user edited by hand is kept: ``cache/.presets.json`` records the
hash of what ZeroBoard last wrote, and a file whose content no longer matches
it is left alone and reported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import files
from ..words import Msg, say
from .placement import preset, preset_name  # noqa: F401 - their content lives with the rule they follow

MANIFEST = ".presets.json"


ALL = [(s, o) for s in ("2", "3") for o in (False, True)]


def render(config: dict) -> str:
    return json.dumps(config, indent=2) + "\n"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class PresetReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # edited by hand, left alone

    def message(self) -> Msg | str:
        if self.written and self.kept:
            return say("check.presets_wrote_kept", written=", ".join(self.written), kept=", ".join(self.kept))
        if self.kept:
            return say("check.presets_kept", kept=", ".join(self.kept))
        if self.written:
            return say("check.presets_wrote", written=", ".join(self.written))
        return ""


def write_presets(folder: str | Path) -> PresetReport:
    """Write the four presets into ``folder`` without clobbering hand edits."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    report = PresetReport()
    for stage, offload in ALL:
        name = preset_name(stage, offload)
        path = folder / name
        text = render(preset(stage, offload))
        if path.exists():
            current = path.read_text(encoding="utf-8")
            if current == text:
                report.unchanged.append(name)
                manifest[name] = _digest(text)
                continue
            if manifest.get(name) != _digest(current):
                report.kept.append(name)
                continue
        files.write_text_atomic(path, text)
        manifest[name] = _digest(text)
        report.written.append(name)
    files.write_text_atomic(manifest_path, json.dumps(manifest, indent=2) + "\n")
    return report
