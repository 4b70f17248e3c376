"""The ZeRO lesson on the Runs page, read as a student reads it: the four settings of examples/lesson_zero.yaml (the
session bank's ``lesson_*`` runs, trained once on 2 CPU processes) compared in headless Chromium. The measured peak
per rank falls none > 2 > 3, the plan per GPU beside it is lowest for 2 + offload, and the reasons are on the page.
"""

from __future__ import annotations

import re

import pytest

from test_runs_page import opened, runs_tab, select_only

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

LESSON = ("lesson_none", "lesson_2", "lesson_3", "lesson_2_offload")
UNITS = {"MiB": 1 << 20, "GiB": 1 << 30}


def size(cell: str) -> int:
    """The largest figure of a cell (``1.62 GiB · 1.60 GiB``) in bytes."""
    found = [float(n) * UNITS[u] for n, u in re.findall(r"([\d.]+) (MiB|GiB)", cell)]
    assert found, f"no size in {cell!r}"
    return int(max(found))


def course_table(pg) -> tuple[list[str], list[list[str]]]:
    return pg.evaluate("""() => {
        const t = document.querySelector('#zb-runs-course table');
        return [[...t.querySelectorAll('thead th')].map(c => c.innerText.trim()),
                [...t.querySelectorAll('tbody tr')].map(r => [...r.querySelectorAll('td')].map(c => c.innerText.trim()))];
    }""")


def test_the_lesson_compared_on_the_page_shows_none_above_2_above_3_and_offload_lowest_on_gpus(browser, webui, bank):
    url, work = webui
    for name in LESSON:
        bank.listed_in(name, work / "runs.json")
    pg = opened(browser, url + "?lang=en")
    try:
        runs_tab(pg)
        select_only(pg, *LESSON)
        pg.locator("#zb-runs-compare").click()
        pg.wait_for_selector("#zb-runs-course table")
        head, rows = course_table(pg)
        col = {h: i for i, h in enumerate(head)}
        measured = next(i for h, i in col.items() if "measured" in h)
        on_gpu = next(i for h, i in col.items() if h.startswith("plan per GPU (2 × H200)"))
        by = {(r[1], r[2]): r for r in rows}  # (stage, offload) -> the row's cells
        assert set(by) == {("none", "no"), ("2", "no"), ("3", "no"), ("2", "yes")}, rows
        peak = {k: size(r[measured]) for k, r in by.items()}
        assert peak[("none", "no")] > peak[("2", "no")] > peak[("3", "no")], peak  # the course's order, measured
        planned = {k: size(r[on_gpu]) for k, r in by.items()}
        assert min(planned, key=planned.get) == ("2", "yes"), planned  # offload moves the states off the GPU

        course = pg.locator("#zb-runs-course").inner_text()
        assert "saves nothing here" in course  # on CPU processes offload has nowhere to go
        assert "What each setting keeps where" in course and course.count("activations stay with each GPU") == 4
        assert "16Ψ/N" in course and "2Ψ+14Ψ/N" in course
        pg.wait_for_selector("#zb-runs-curves-note :text('coincide')")
        assert "The 4 loss curves coincide" in pg.locator("#zb-runs-curves-note").inner_text()
    finally:
        pg.context.close()
