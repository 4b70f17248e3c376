"""TCP ports for the launcher's rendezvous: a free one, or whether a fixed one is free (on this machine).

A port is chosen below the kernel's ephemeral range.  A port handed out by binding port 0 lies inside that range,
where any outgoing connection may take it as its source port between the preview and the launch (a browser
holds dozens); and a node that connects to a rendezvous on its own machine before the master listens can
connect to itself when its source port equals the target (TCP simultaneous open), taking the port for good.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 49152  # IANA's dynamic range, used where the kernel does not say (macOS, Windows)
LOWEST = 20000  # above the common fixed service ports
TRIES = 64


def ephemeral_low() -> int:
    """The first port of this machine's ephemeral (outgoing) range."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def free_port(rng: random.Random | None = None) -> int:
    """A port nothing listens on, outside the ephemeral range where the machine has room below it."""
    rng = rng or random.SystemRandom()
    low = ephemeral_low()
    if low - LOWEST >= TRIES:
        for _ in range(TRIES):
            port = rng.randrange(LOWEST, low)
            if port_is_free(port):
                return port
    with socket.socket() as s:  # no room below the range (or all tried were taken): the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
