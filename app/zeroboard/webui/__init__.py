"""ZeroBoard's web UI: a Gradio app over the job spec, the runner and the live run records.

The server process imports neither torch nor transformers, nor ``datasets``
and pyarrow: jobs run as separate processes and everything the page shows is
read from their files, NVML and psutil.
"""

import contextlib
import os
import sys

# Offline machines are the common case: no analytics calls from the server.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# gradio's queue keeps a record of each queued event (Start, Abort, Preview, each edit of the form) for its monitoring
# dashboard, which this page does not serve: up to 10,000 of them (~0.4 KB each), so a server kept ~0.8 KB more per
# start/abort cycle until it held ~4 MB.  Read when the app is built: set before gradio builds one.
os.environ.setdefault("GRADIO_ANALYTICS_MAX_EVENTS", "100")


@contextlib.contextmanager
def without_arrow():
    """While the server runs: pyarrow (and ``datasets``) kept out of it.

    pandas (which gradio imports) loads pyarrow at its own import whenever it is installed, and the trainer's
    ``datasets`` brings it: that would add about 65 MB and a few tenths of a second to every server start for
    nothing the page uses.  Marked absent, pandas works as it does without pyarrow.  Entered by ``zeroboard
    webui`` before gradio is imported and left when the server stops (a test calling the command in its own
    process gets its modules back); the processes the server starts import what they need.
    """
    added = [name for name in ("pyarrow", "datasets") if name not in sys.modules]
    for name in added:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it now fails as if not installed
    try:
        yield
    finally:
        for name in added:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
