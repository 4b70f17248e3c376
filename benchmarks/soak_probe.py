"""``zeroboard webui`` under tracemalloc, for ``benchmarks/soak.py --probe``: each SIGUSR1 appends one dump.

A dump says what grew since the previous one: the source lines (and the call paths) whose live allocations grew
most, the object counts by type that grew, the threads by name and the open file descriptors by kind.  Nothing of
this is in the product: the server is the same ``zeroboard webui``, started from here with tracemalloc on.

    python benchmarks/soak_probe.py DUMPS.jsonl webui --port 7861
"""

from __future__ import annotations

import collections
import gc
import json
import os
import re
import signal
import sys
import threading
import time
import tracemalloc

FRAMES = 10
TOP = 25


def object_counts() -> collections.Counter:
    return collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def open_files() -> dict[str, int]:
    kinds: collections.Counter = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        kinds[target.split(":")[0] if ":" in target else re.sub(r"/runs/soak-\d+", "/runs/soak-N", target)] += 1
    return dict(kinds.most_common(15))


class Dumper:
    def __init__(self, path: str):
        self.path = path
        self.snap: tracemalloc.Snapshot | None = None
        self.objects: collections.Counter = collections.Counter()

    def __call__(self, *_):
        t0 = time.time()
        gc.collect()  # only to tell kept objects from garbage not yet collected: the server itself never does this
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        objects = object_counts()
        out = {"traced_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 2),
               "threads": dict(collections.Counter(re.sub(r"\d+", "N", t.name) for t in threading.enumerate())),
               "fds": open_files(), "objects_total": sum(objects.values())}
        if self.snap is not None:
            lines = snap.compare_to(self.snap, "lineno")
            out["grew_lines"] = [{"where": str(s.traceback[0]), "kb": round(s.size_diff / 1024, 1), "count": s.count_diff}
                                 for s in lines[:TOP] if s.size_diff > 0]
            paths = snap.compare_to(self.snap, "traceback")
            out["grew_paths"] = [{"kb": round(s.size_diff / 1024, 1), "count": s.count_diff,
                                  "path": [str(f) for f in s.traceback if "site-packages/anyio" not in f.filename][-8:]}
                                 for s in paths[:8] if s.size_diff > 0]
            grew = objects - self.objects
            out["grew_types"] = dict(grew.most_common(TOP))
        self.snap, self.objects = snap, objects
        out["dump_s"] = round(time.time() - t0, 1)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(out) + "\n")


def main() -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "app"))
    from zeroboard import webui
    from zeroboard.cli import main as cli

    with webui.without_arrow():  # imported as `zeroboard webui` imports them, untraced: imports are no growth
        import zeroboard.webui.app  # noqa: F401
    tracemalloc.start(FRAMES)  # before the page is built: everything the server keeps from then on is traced
    signal.signal(signal.SIGUSR1, Dumper(sys.argv[1]))
    return cli(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
