"""The "Use this setting" button's logic, without gradio: the form as it stands -> the fastest setting that fits.

The page module (:mod:`.plan_panel`) turns the result into widget updates; tests call this directly.
"""

from __future__ import annotations

import html

from .. import planner
from ..job import devices
from ..planner import report
from ..words import text, tr
from .handlers import form_to_spec, to_form_value


def best_setting(values: dict, gpus: list[devices.Gpu], lang: str = "en") -> tuple[dict, str]:
    """(form values to write, Markdown of the top choices and why). Nothing to write when nothing fits or the form
    cannot be planned: the message says why."""
    job, problems = form_to_spec(values)
    if job is None:
        return {}, text("plan.fix_fields", lang)
    try:
        choices = planner.fit(job, gpus)
    except planner.PlanError as e:
        return {}, text("plan.unavailable", lang, why=html.escape(tr(e.args[0], lang)))
    md = report.fit_markdown(choices, lang)
    best = next((c for c in choices if c.fits is not False), None)
    if best is None:
        return {}, md
    changes = {k: to_form_value(k, v) for k, v in best.overrides().items()}
    if all(values.get(k) == v for k, v in changes.items()):
        md += "\n\n" + text("plan.fit_same", lang)
    return changes, md
