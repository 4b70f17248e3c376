"""Why a setting is chosen, in words: its step time and memory against another setting's (``--fit``, the advice).

:func:`compare` takes the numbers of the two settings and keeps the ones the words cite, rounded as they are
said; :func:`words` says them in English or Chinese (``plan.speed.*``, ``plan.mem.*`` in the catalog). So the
words cannot cite a figure the numbers do not give (tests/test_speed.py reads them back).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..words import text
from .memory import GIB

SAME_SPEED = 0.01  # step times within 1%: "as fast"
TIMES = 1.5  # from 1.5x on, a ratio is said as "1.5x" instead of a percentage
SAME_MEMORY = 0.5 * GIB  # needed memory within half a GiB: neither more nor less


@dataclass(frozen=True)
class Comparison:
    speed: str  # "same" | "faster" | "faster_x" | "slower" | "slower_x"
    amount: str  # the percentage or the ratio, as said ("" for "same")
    memory: str  # "same" | "less" | "more" | "unneeded" (less, and the other setting fits with room anyway)
    gib: str  # the memory difference, as said


def gib_words(n: float) -> str:
    """GiB as a reason says them: whole numbers from 10 on, one decimal below."""
    g = abs(n) / GIB
    return f"{g:.0f}" if g >= 9.95 else f"{g:.1f}"


def compare(step_s: float, needed: int, other_step_s: float, other_needed: int, other_roomy: bool | None) -> Comparison:
    """This setting against the other: how much faster or slower a step is, how much memory it needs more or less."""
    ratio = step_s / other_step_s
    if abs(ratio - 1) < SAME_SPEED:
        speed, amount = "same", ""
    elif ratio < 1:
        x = 1 / ratio
        speed, amount = ("faster_x", f"{x:.1f}") if x >= TIMES else ("faster", f"{100 * (x - 1):.0f}")
    else:
        speed, amount = ("slower_x", f"{ratio:.1f}") if ratio >= TIMES else ("slower", f"{100 * (ratio - 1):.0f}")
    diff = needed - other_needed
    if abs(diff) < SAME_MEMORY:
        memory = "same"
    elif diff < 0:
        memory = "unneeded" if speed.startswith("slower") and other_roomy else "less"
    else:
        memory = "more"
    return Comparison(speed, amount, memory, gib_words(diff))


def words(c: Comparison, other: str, lang: str = "en") -> str:
    """The comparison in ``lang``: "4% faster than no DeepSpeed at 4 × 1, 9 GiB less"."""
    speed = text(f"plan.speed.{c.speed}", lang, other=other, n=c.amount)
    memory = text(f"plan.mem.{c.memory}", lang, gib=c.gib)
    return text("plan.reason.unneeded" if c.memory == "unneeded" else "plan.reason", lang, speed=speed, memory=memory)


def of(choice, other, other_label: str, lang: str = "en") -> str:
    """A --fit choice against another (objects with ``step_s`` and ``plan``), in words."""
    c = compare(choice.step_s, choice.plan.needed_bytes, other.step_s, other.plan.needed_bytes, other.plan.roomy)
    return words(c, other_label, lang)


def reference(choices: list, best) -> object | None:
    """What the best choice is compared with: the fastest other stage/offload setting that fits, else the fastest other
    way (checkpointing, micro-batch) to run it that fits, else None (it is the only one that fits)."""
    fitting = [c for c in choices if c.fits and c is not best]
    return next((c for c in fitting if (c.stage, c.offload) != (best.stage, best.offload)), None) or next(
        iter(fitting), None)
