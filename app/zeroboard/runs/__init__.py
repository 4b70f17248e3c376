"""Runs: starting a job under its supervisor, following it, stopping it for sure, and the machine's live figures.

- :mod:`.manager`: the one launch path (page and CLI), the busy rule, abort
- :mod:`.supervisor`: the process that owns one run and writes its state.json
- :mod:`.registry`: the runs index of this workspace
- :mod:`.state`, :mod:`.processes`, :mod:`.outcome`: a run's record, its processes, how it ended
- :mod:`.monitor`: GPU and host memory samples for the live panels
"""
