"""The page's tokenized dataset view: ``zeroboard dataset --json`` in a subprocess, shown as a table.

Why a subprocess and not the light tokenizers+Jinja path of the checks: the
view must be exactly what the trainer trains on (the same template with its
added tokens, the same masking, the same cutoff, the same skipped records),
and its statistics cover the whole dataset, which for Parquet, Arrow or hub
data takes the ``datasets`` library; the server never imports it or
transformers.  The subprocess also fills the data cache the run then reuses.
The first records, read directly, are shown at once meanwhile
(``handlers.dataset_preview``).
"""

from __future__ import annotations

import html
import os
import tempfile
from pathlib import Path

from .. import words
from ..job import checks, spec
from . import handlers, output_check

TIMEOUT_S = 1800.0  # tokenizing a large dataset the first time; later views read the cache
SHOWN = 5


def tokenized_view(values: dict, n: int = SHOWN, lang: str = words.DEFAULT, timeout: float = TIMEOUT_S) -> str:
    """Markdown: the statistics, then the first ``n`` samples with their learned tokens marked."""
    job, problems = handlers.form_to_spec(values)
    if job is not None:
        outside = checks.Report()
        if not checks.check_paths(job, outside):
            job, problems = None, outside.errors
    if job is None:
        return "\n".join(f"- **`{k}`**: {html.escape(words.tr(v, lang))}" for k, v in problems.items())
    with tempfile.TemporaryDirectory(prefix="zb-dataset-") as tmp:
        path = Path(tmp) / "job.yaml"
        path.write_text(spec.dump_yaml(job), encoding="utf-8")
        res = output_check.run_cli(["dataset", str(path), "--json", "-n", str(n)], os.getcwd(), timeout)
    if res.code != 0:
        return f"**{words.text('page.error', lang)}** {html.escape(res.error_text(timeout, lang))}"
    try:
        report = output_check.json_report(res.stdout)
    except ValueError:
        return f"**{words.text('page.error', lang)}** {words.text('page.no_json', lang)}"
    return markdown(report, lang)


def _text(segments: list[dict]) -> str:
    parts = []
    for g in segments:
        t = html.escape(g["text"]).replace("|", "&#124;").replace("\n", "↵<br>")
        parts.append(f"<mark>{t}</mark>" if g["learned"] else t)
    return "".join(parts)


def _cell(smp: dict, lang: str = words.DEFAULT) -> str:
    """A sample's text, the learned tokens marked; a pair shows its rejected answer under the chosen one, a KTO
    answer its tag."""
    cell = _text(smp["segments"])
    if "rejected_segments" in smp:
        cell += f"<br>**{html.escape(words.text('data.pref_rejected', lang))}:** " + _text(smp["rejected_segments"])
    if "kto_tag" in smp:
        tag = words.text("data.pref_kto_good" if smp["kto_tag"] else "data.pref_kto_bad", lang)
        cell = f"**{html.escape(tag)}:** " + cell
    return cell


def markdown(report: dict, lang: str) -> str:
    s = report["stats"]
    t = lambda key, **v: words.text(key, lang, **v)  # noqa: E731
    lines = [t("page.data_stats", template=report["template"], cutoff=report["cutoff_len"], samples=s["samples"],
               train=s["train_samples"], eval=s["eval_samples"], tokens=s["tokens"], learned=s["learned_tokens"],
               truncated=s["truncated"], lost=s["answer_lost"], skipped=s["skipped"])]
    if report["added_tokens"]:
        lines.append(t("page.data_added", tokens=html.escape(" ".join(report["added_tokens"]))))
    for p in s["problems"][:5]:
        why = words.tr(words.from_json(p["message"]), lang)
        lines.append("- " + html.escape(t("cli.dataset_problem", path=p["where"], i=p["record"], why=why)))
    head = words.headers("data", lang)
    lines += ["", f"<small>{html.escape(t('page.data_legend'))}</small>", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, smp in enumerate(report["samples"]):
        tokens = f"{smp['tokens']} ✂" if smp["truncated"] else str(smp["tokens"])
        lines.append(f"| {k} | {html.escape(smp['dataset'])} | {smp['record']} | {tokens} | {smp['learned']} | {_cell(smp, lang)} |")
    return "\n".join(lines)
