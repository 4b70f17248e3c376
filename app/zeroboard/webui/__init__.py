"""ZeroBoard's web UI: a Gradio app over the job spec, the runner and the live run records.

The server process imports neither torch nor transformers: jobs run as
separate processes and everything the page shows is read from their files,
NVML and psutil.
"""

import os

# Offline machines are the common case: no analytics calls from the server.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
