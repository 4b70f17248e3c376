"""Install a folder of carried wheels into --target, skipping every distribution this interpreter already has.

For a machine without network access that already has most of a stack (torch, transformers): only the
missing pieces go into the target dir, so nothing the machine has is shadowed on PYTHONPATH.  A carried
wheel of an installed distribution is still installed when another wheel being installed requires a
newer version than the one present (e.g. pydantic needing a newer typing_extensions); requirements that
no carried wheel can meet are printed as warnings.

    python3 benchmarks/install_wheels.py .whl-ui --target /tmp/site [--dry-run]
    python3 benchmarks/install_wheels.py .whl-ui --slim   # drop SSR and demo media from the gradio wheel, in place
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

SLIM_DROP = ("gradio/templates/node/", "gradio/media_assets/")  # SSR server (the app runs ssr_mode=False), example media


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return norm(name), version


def installed() -> dict[str, str]:
    found: dict[str, str] = {}
    for d in md.distributions():
        name = d.metadata["Name"] if d.metadata else None
        if name:
            found.setdefault(norm(name), d.version)  # first on sys.path wins, as for imports
    return found


def requirements(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = Parser().parsestr(z.read(meta).decode("utf-8", errors="replace"))
    return msg.get_all("Requires-Dist") or []


def plan(wheels: list[Path], have: dict[str, str]) -> tuple[list[Path], list[str], list[str]]:
    """(wheels to install, notes on upgrades, unmet requirements)."""
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:  # no packaging: presence only
        return [w for w in wheels if wheel_name(w)[0] not in have], [], ["packaging missing: versions not checked"]
    carried = {wheel_name(w)[0]: w for w in wheels}
    chosen = {n: w for n, w in carried.items() if n not in have}
    notes: list[str] = []
    unmet: dict[str, str] = {}
    changed = True
    while changed:  # an upgrade brings its own requirements
        changed = False
        for name, w in list(chosen.items()):
            for text in requirements(w):
                req = Requirement(text)
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue
                dep = norm(req.name)
                if dep in chosen:
                    version = wheel_name(chosen[dep])[1]
                elif dep in have:
                    version = have[dep]
                else:
                    unmet[f"{name}:{dep}"] = f"{name} needs {text}: not installed and not carried"
                    continue
                try:
                    ok = req.specifier.contains(Version(version), prereleases=True)
                except ValueError:  # a version packaging cannot parse: trust it
                    ok = True
                if ok:
                    continue
                if dep not in chosen and dep in carried and req.specifier.contains(Version(wheel_name(carried[dep])[1]),
                                                                                   prereleases=True):
                    chosen[dep] = carried[dep]
                    notes.append(f"upgrade {dep} {have[dep]} -> {wheel_name(carried[dep])[1]} (for {name}: {text})")
                    changed = True
                else:
                    unmet[f"{name}:{dep}"] = f"{name} needs {text}; found {dep} {version}"
    return sorted(chosen.values()), notes, sorted(unmet.values())


def slim(folder: Path) -> None:
    """Rewrite the gradio wheel without SLIM_DROP (RECORD updated to match)."""
    for w in folder.glob("gradio-*.whl"):
        tmp = w.with_suffix(".tmp")
        with zipfile.ZipFile(w) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                if info.filename.startswith(SLIM_DROP):
                    continue
                data = src.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    data = "".join(ln for ln in data.decode().splitlines(keepends=True) if not ln.startswith(SLIM_DROP)).encode()
                dst.writestr(info, data)
        before, after = w.stat().st_size, tmp.stat().st_size
        tmp.replace(w)
        print(f"slimmed {w.name}: {before / 2**20:.1f} -> {after / 2**20:.1f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--target", type=Path, help="pip install --target dir")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--slim", action="store_true", help="slim the gradio wheel in the folder and exit")
    a = ap.parse_args()
    if a.slim:
        slim(a.folder)
        return 0
    if not a.target:
        ap.error("--target is required")
    wheels = sorted(a.folder.glob("*.whl"))
    have = installed()
    todo, notes, unmet = plan(wheels, have)
    skipped = [w for w in wheels if w not in todo]
    for w in skipped:
        name, version = wheel_name(w)
        print(f"skip     {name} {version} (installed: {have[name]})")
    for w in todo:
        print(f"install  {' '.join(wheel_name(w))}")
    for n in notes:
        print(f"note: {n}")
    for u in unmet:
        print(f"warning: {u}")
    print(f"{len(todo)} to install, {len(skipped)} already installed, {len(unmet)} unmet requirement(s)", flush=True)
    if a.dry_run or not todo:
        return 0
    a.target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--upgrade",
           "--disable-pip-version-check", "--target", str(a.target), *map(str, todo)]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
