"""The "Use this setting" button's logic, without gradio: the form as it stands -> the fastest setting that fits.

Where the job's devices are on this machine, the settings that fit are measured first (:mod:`zeroboard.runs.probes`,
within the probe budget); the steps yield the probe phase's progress, then the result. The page module
(:mod:`.plan_panel`) turns them into widget updates; tests call this directly.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Iterator

from .. import planner
from ..job import devices
from ..planner import report
from ..runs import probes
from ..words import text, tr
from .handlers import form_to_spec, to_form_value

PROGRESS_S = 1.0  # how often the page's fit panel shows the probe phase's progress


def best_setting_steps(values: dict, gpus: list[devices.Gpu], lang: str = "en",
                       budget_s: float = probes.BUDGET_S) -> Iterator[tuple[dict | None, str]]:
    """(None, progress Markdown) while settings are probed, then (form values to write, Markdown of the top choices and
    why). Nothing to write when nothing fits or the form cannot be planned: the message says why."""
    job, problems = form_to_spec(values)
    if job is None:
        yield {}, text("plan.fix_fields", lang)
        return
    lines: list[str] = []
    result: dict = {}

    def progress(i, n, choice, probe, left):
        name = report.choice_label(choice, lang, batch=False)
        if probe is None:
            lines.append(text("plan.probe.progress", lang, setting=name, mb=choice.micro_batch, acc=choice.accumulation,
                              i=i, n=n, left=round(max(0.0, left))))
        else:
            lines[-1] = "- " + text("plan.probe.done", lang, setting=name, mb=choice.micro_batch, acc=choice.accumulation,
                                    result=tr(probes.result_words(probe), lang))

    def work():
        try:
            result["fit"] = probes.fit_measured(job, gpus, budget_s or 0, progress, trace="start")
        except planner.PlanError as e:
            result["error"] = e

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(PROGRESS_S)
        if lines:
            yield None, "\n".join(lines)
    if "error" in result:
        yield {}, text("plan.unavailable", lang, why=html.escape(tr(result["error"].args[0], lang)))
        return
    choices, measured, pick, source = result["fit"]
    md = report.fit_markdown(choices, lang, measured=measured, pick=pick, source=source)
    best = next((c for c in choices if c.fits is not False), None)
    if best is None:
        yield {}, md
        return
    changes = {k: to_form_value(k, v) for k, v in best.overrides().items()}
    if all(values.get(k) == v for k, v in changes.items()):
        md += "\n\n" + text("plan.fit_same", lang)
    yield changes, md


def best_setting(values: dict, gpus: list[devices.Gpu], lang: str = "en",
                 budget_s: float = probes.BUDGET_S) -> tuple[dict, str]:
    """The last of :func:`best_setting_steps`: what the button writes, and why."""
    last = ({}, "")
    for step in best_setting_steps(values, gpus, lang, budget_s):
        last = step
    return last
