"""The page registry: each tab of the app (Train, Runs; later Chat, Queue, ...) is registered once, here.

A page is a module that renders its layout, wires its events and names its
words; it registers itself with one call::

    PAGE = pages.register(pages.Page("runs", "tab.runs", render_runs, wire_runs, order=20))

and ``app.build_app`` gives it a tab.  What every page gets for free, in one
place (``app``): its tab label in the catalog's words, the language switch
(each page's ``View.texts`` are said again in the new language), the password
of ``serve``, and what happens when a page (re)loads (the language picked
first, then each page's own load steps, then a mark the tests and the
screenshot tool wait for).

A page's ``render(ctx)`` builds its blocks inside its tab and returns its
view; ``wire(view, ctx)`` connects events after every page is rendered, so a
page may hand over to another one (the Runs page fills the Train form) through
``ctx.views``.  ``ctx.on_load`` adds a load step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr

from .. import words
from ..job import devices, spec
from ..runs.manager import JobManager
from .live import Live


@dataclass
class View:
    """What a page's render returns; pages subclass it with their own blocks.

    ``texts``: catalog word -> (block, property), or (block, {property: word}) for a block with several words
    (a chart's title and axes): what the language switch says again."""

    texts: dict[str, tuple] = field(default_factory=dict)

    def relabel_outputs(self) -> list:
        return [block for block, _ in self.texts.values()]

    def relabel(self, lang: str) -> list:
        return [text_update(key, target, lang) for key, target in self.texts.items()]


def text_update(key: str, target: tuple, lang: str):
    """The update that says a page word (or each of a block's words) in ``lang``."""
    _, prop = target
    props = prop if isinstance(prop, dict) else {prop: key}
    return gr.update(**{p: words.label(k, lang) for p, k in props.items()})


@dataclass
class Context:
    """What every page is given: the server's shared objects and the app's session-wide blocks."""

    manager: JobManager
    gpus: list[devices.Gpu]
    live: Live
    job: spec.JobSpec  # the first job the Train form shows
    lang: str  # the language of the first paint
    session: gr.State  # this browser tab's run and form state (see train_page)
    lang_radio: gr.Radio
    tabs: gr.Tabs
    demo: gr.Blocks
    views: dict[str, View] = field(default_factory=dict)  # page id -> its view, once rendered
    tab_items: dict[str, gr.Tab] = field(default_factory=dict)  # page id -> its tab (for its select event)
    loads: list[tuple[Callable, list, list]] = field(default_factory=list)

    def on_load(self, fn: Callable, inputs: list, outputs: list) -> None:
        """A step run when the page (re)loads, after the language is picked: ``fn(*inputs, lang)`` returns the
        outputs' values as a gradio handler does (one output: its value; several: a sequence).  Every step runs in
        the same call: a page opens in one round trip."""
        self.loads.append((fn, inputs, outputs))


@dataclass(frozen=True)
class Page:
    id: str  # the tab's id (gr.Tabs(selected=...) takes it)
    label: str  # catalog key of the tab's label
    render: Callable[[Context], View]
    wire: Callable[[View, Context], None]
    order: int = 100  # tabs left to right
    preload: bool = False  # laid out (hidden) with the page, not when its tab is first opened: it opens at once


PAGES: dict[str, Page] = {}


def register(page: Page) -> Page:
    """Add a page (once: a second page with the same id is a mistake)."""
    if page.id in PAGES and PAGES[page.id] != page:
        raise ValueError(f"page {page.id!r} registered twice")
    PAGES[page.id] = page
    return page


def ordered() -> list[Page]:
    return sorted(PAGES.values(), key=lambda p: (p.order, p.id))


def select(page_id: str):
    """The update that shows the tab ``page_id`` (a handler returns it for ``ctx.tabs``)."""
    return gr.Tabs(selected=page_id)
