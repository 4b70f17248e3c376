"""ZeroBoard's web UI: a Gradio app over the job spec, the runner and the live run records.

The server process imports neither torch nor transformers, nor ``datasets``
and pyarrow: jobs run as separate processes and everything the page shows is
read from their files, NVML and psutil.
"""

import os
import sys

# Offline machines are the common case: no analytics calls from the server.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def keep_light() -> None:
    """Before the server imports gradio: keep pyarrow out of it.

    pandas (which gradio imports) loads pyarrow at its own import whenever it is installed, and the trainer's
    ``datasets`` brings it: that would add about 65 MB and a few tenths of a second to every server start for
    nothing the page uses.  Marked absent, pandas works as it does without pyarrow.  Only for the server process
    (``zeroboard webui``): the processes it starts (jobs, ``zeroboard dataset``) import what they need.
    """
    for name in ("pyarrow", "datasets"):
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # an import of it now fails as if not installed
