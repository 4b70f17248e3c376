"""``zeroboard dataset JOB [--json] [-n N]``: the job's data as the trainer sees it, and its statistics."""

from __future__ import annotations

import json
import sys

from ..data.formats import DataError
from ..words import default_lang, from_json, text, tr
from . import jobs

LEARNED = ("[[", "]]")  # around the learned text in the plain output


def cmd_dataset(args) -> int:
    job = jobs.load(args)
    if job is None:
        return 2
    lang = default_lang()
    from ..training import preview  # transformers and datasets: only for this command

    try:
        report = preview.report(job, max(0, args.n))
    except (DataError, ValueError, OSError) as e:
        why = tr(e.args[0], lang) if e.args else str(e)
        if args.json:
            print(json.dumps({"error": why}, ensure_ascii=False))
        print(text("cli.dataset_failed", lang, why=why), file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
        return 0
    print(plain(report, lang))
    return 0


def plain(report: dict, lang: str) -> str:
    s = report["stats"]
    lines = [text("cli.dataset_head", lang, template=report["template"], cutoff=report["cutoff_len"],
                  datasets=", ".join(d["name"] for d in report["datasets"])),
             text("cli.dataset_stats", lang, samples=s["samples"], train=s["train_samples"], eval=s["eval_samples"],
                  tokens=s["tokens"], learned=s["learned_tokens"], truncated=s["truncated"], lost=s["answer_lost"],
                  skipped=s["skipped"])]
    if report["added_tokens"]:
        lines.append(text("cli.dataset_added", lang, tokens=" ".join(report["added_tokens"])))
    for p in s["problems"][:5]:
        lines.append(text("cli.dataset_problem", lang, path=p["where"], i=p["record"], why=tr(from_json(p["message"]), lang)))
    lines.append(text("cli.dataset_legend", lang, left=LEARNED[0], right=LEARNED[1]))
    for k, smp in enumerate(report["samples"]):
        lines += ["", text("cli.dataset_sample", lang, k=k, name=smp["dataset"], record=smp["record"], tokens=smp["tokens"],
                            learned=smp["learned"]) + (" " + text("cli.dataset_cut", lang) if smp["truncated"] else "")]
        lines.append("".join(f"{LEARNED[0]}{g['text']}{LEARNED[1]}" if g["learned"] else g["text"] for g in smp["segments"]))
    return "\n".join(lines)


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("dataset", help=text("cli.dataset_help", lang))
    jobs.job_arguments(s, lang)
    s.add_argument("--json", action="store_true")
    s.add_argument("-n", type=int, default=5, help=text("cli.dataset_n_help", lang))
    s.set_defaults(fn=cmd_dataset)
