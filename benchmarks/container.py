"""The container test, measured: the image's build time and size, the build context, the cold start to the first
page, the demo's training time inside the container and how long `docker stop` takes with a job running.

Runs tests/test_container.py as CI does (podman on the stand-in base; its docstring says what it checks), with
the figures it records sent to a file, and writes them with the machine, the load and the commit:

    python benchmarks/container.py [--json benchmarks/results/container.json]

Needs root, the tools of `make container-tools`, and the package registries (the image installs ZeroBoard).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "container.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = Path(tmp) / "figures.json"
        # a fresh build, whatever podman's store keeps (the test reuses an image of the same inputs)
        env = {**os.environ, "ZEROBOARD_CONTAINER_RESULTS": str(figures), "ZEROBOARD_CONTAINER_REBUILD": "1"}
        load = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-m", "container", "tests/test_container.py", "-q",
                               "-p", "no:cacheprovider"], cwd=ROOT, env=env)
        result = {
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip(),
            "cpus": os.cpu_count(),
            "load_average_1min_at_start": round(load, 2),
            "tests_passed": done.returncode == 0,
            "test_wall_s": round(time.perf_counter() - started, 1),
            **(json.loads(figures.read_text()) if figures.is_file() else {}),
        }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
