"""What gradio keeps for each open page, kept to the page's own components.

gradio (6.31) gives a session its own copy of a component when an event updates it -- ``gr.update(...)``, and
``gr.skip()`` too, an update that changes nothing -- with a new id.  When a later event sends that component a
value or reads it as an input, gradio files the copy once more under the copy's own id, with its config and the
value, and nothing ever removes it (``Blocks.postprocess_data`` / ``preprocess_data``: ``if block._id not in
state``).  This page does both all the time: the live panels skip what did not change and send what did, twice a
second (the machine panels alternate every second even on an idle page: ~2.8 copies a second per open tab), and
every Start reads the whole form after the form's last update (locked, unlocked, marked).  One tab kept ~70
copies per start/abort cycle, ~0.3 MB (benchmarks/soak.py under tracemalloc, 9 cycles), and more the longer it
stayed open.

A session's rightful entries are the page's own components (the page renders nothing at run time: no
``gr.render``); :func:`drop_copies` removes the others.  :func:`wire_upkeep` does that for each open page on a
slow timer, on the server's event loop, where gradio files its copies: never between its two steps of filing one.
"""

from __future__ import annotations

import gradio as gr

UPKEEP_S = 10.0


def session_of(demo: gr.Blocks, session_hash: str | None):
    """gradio's state of one open page, or None (a page not seen yet, or a gradio that keeps it elsewhere)."""
    holder = getattr(demo, "state_holder", None)
    data = getattr(holder, "session_data", None)
    return data.get(session_hash) if data is not None and session_hash else None


def session_size(demo: gr.Blocks, session_hash: str | None) -> int:
    """How many components gradio keeps for this page (the page's own, plus any copies)."""
    session = session_of(demo, session_hash)
    config = getattr(session, "blocks_config", None)
    return len(getattr(config, "blocks", {}))


def drop_copies(demo: gr.Blocks, session_hash: str | None) -> int:
    """Remove the components gradio filed for this page besides the page's own; returns how many it removed."""
    session = session_of(demo, session_hash)
    if session is None:
        return 0
    own = demo.blocks  # id -> the page's components as built
    dropped = 0
    for table in (getattr(getattr(session, "blocks_config", None), "blocks", None), getattr(session, "config_values", None)):
        if not isinstance(table, dict):
            continue
        for key in [k for k in table if k not in own]:
            table.pop(key, None)
            dropped += 1
    return dropped


def wire_upkeep(demo: gr.Blocks) -> None:
    """Call inside ``demo``'s layout: each open page drops gradio's copies every ``UPKEEP_S`` seconds."""

    async def upkeep(request: gr.Request):  # async: on the event loop, as gradio's own filing is
        drop_copies(demo, request.session_hash)

    gr.Timer(UPKEEP_S).tick(upkeep, None, None, queue=False, show_progress="hidden")
