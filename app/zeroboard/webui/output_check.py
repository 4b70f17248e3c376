"""After a run: what it saved, and reloading / consolidating / merging it, as plain functions of plain values.

Inspecting is light and runs in the server.  Reloading, consolidating and
merging import torch, so they run ``python -m zeroboard.outputs ...`` as a
subprocess, from the folder the run was launched from (relative model paths
in the run record resolve there), with a time limit: a stuck model load ends
with a message instead of holding the page's queue forever.  Consolidate and
Merge write a NEW folder; nothing here writes into the run.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import checks, outputs, runner
from ..demo import DEMO_PROMPTS
from . import i18n

CHECK_TIMEOUT_S = 600.0  # reload + greedy answers of the tuned and the base model
EXPORT_TIMEOUT_S = 1800.0  # consolidate / merge: loads and writes a whole model
DEFAULT_PROMPTS = "\n".join(DEMO_PROMPTS)
SUFFIX = {"consolidate": "consolidated", "merge": "merged"}


@dataclass
class View:
    """What the output check panel shows for the selected run."""

    visible: bool = False
    saved: str = ""  # outputs.inspect(run).text(), or why there is nothing to check
    can_consolidate: bool = False
    can_merge: bool = False
    consolidate_dir: str = ""
    merge_dir: str = ""


def new_dir_name(run_dir: str | Path, kind: str) -> str:
    """A folder next to the run that does not exist yet: RUN-merged, RUN-merged-2, ..."""
    run = Path(run_dir)
    candidate = run.with_name(f"{run.name}-{SUFFIX[kind]}")
    return str(candidate if not candidate.exists() else checks.free_dir_name(candidate))


def view(run_dir: str | None, status: str) -> View:
    """The panel for a run: shown once the run has finished."""
    if not run_dir or status != "finished":
        return View()
    try:
        ins = outputs.inspect(run_dir)
    except outputs.OutputError as e:
        return View(True, f"Nothing to check: {e}")
    kinds = {i.kind for i in ins.items}
    adapter = "lora_adapter" in kinds
    return View(True, ins.text(), can_consolidate="zero_checkpoint" in kinds and not adapter, can_merge=adapter,
                consolidate_dir=new_dir_name(run_dir, "consolidate"), merge_dir=new_dir_name(run_dir, "merge"))


def not_ready(manager: runner.JobManager, run_dir: str | None) -> str | None:
    """Why the selected run cannot be checked now, or None."""
    if not run_dir:
        return "No run selected: pick a finished run above."
    st = manager.state(run_dir)
    if st is None or st.status != "finished":
        return f"{run_dir} has not finished ({st.status if st else 'no job record'}): nothing final to check yet."
    return None


# --- the subprocess --------------------------------------------------------------------------


@dataclass
class CliResult:
    code: int | None  # None: killed at the time limit
    stdout: str
    stderr: str

    def error_text(self, limit: float) -> str:
        if self.code is None:
            return f"stopped after {limit:.0f} s without an answer (time limit); nothing was changed in the run"
        lines = [line for line in self.stderr.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        if ": " in last and last.split(": ", 1)[0] in ("check", "consolidate", "merge"):
            return last.split(": ", 1)[1]  # the CLI's own message: what is wrong and what to do
        try:
            err = json_report(self.stdout).get("error")
        except ValueError:
            err = None
        if err:
            return err
        tail = "\n".join(lines[-8:]) or "(no output)"
        return f"exit code {self.code}:\n\n```text\n{tail}\n```"


def json_report(stdout: str) -> dict:
    """The JSON object the CLI printed last (libraries imported on the way may print lines before it)."""
    text = stdout.strip()
    starts = [0] + [i + 1 for i in range(len(text)) if text[i] == "\n" and text[i + 1:i + 2] == "{"]
    for start in reversed(starts):
        try:
            report = json.loads(text[start:])
        except ValueError:
            continue
        if isinstance(report, dict):
            return report
    raise ValueError("no JSON report on stdout")


def launch_dir(run_dir: str | Path) -> str:
    """The folder the run was launched from (as its command record says); the server's own otherwise."""
    try:
        return json.loads((Path(run_dir) / runner.COMMAND_FILE).read_text(encoding="utf-8"))["cwd"]
    except (OSError, ValueError, KeyError, TypeError):
        return os.getcwd()


def run_cli(args: list[str], cwd: str, timeout: float) -> CliResult:
    """``python -m zeroboard.outputs ARGS`` in its own process group, killed whole at the time limit."""
    proc = subprocess.Popen([sys.executable, "-m", "zeroboard.outputs", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return CliResult(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return CliResult(None, out, err)


# --- reload and answer ------------------------------------------------------------------------


def parse_prompts(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _cell(text: str | None) -> str:
    if text is None:
        return "-"
    if not text.strip():
        return "*(empty)*"
    return html.escape(text.strip()).replace("|", "&#124;").replace("\n", "<br>")


def answers_markdown(report: dict, lang: str) -> str:
    """Prompt / tuned answer / base answer (and whether the identity answers match the training data)."""
    t = lambda key: i18n.label(key, lang)  # noqa: E731
    prompts, answers = report["prompts"], report["answers"]
    base = report.get("base_answers") or [None] * len(prompts)
    matches = report.get("matches") or [None] * len(prompts)
    with_match = any(m is not None for m in matches)
    head = [t("prompt"), t("tuned_answer"), t("base_answer")] + ([t("matches")] if with_match else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for q, a, b, m in zip(prompts, answers, base, matches, strict=False):
        row = [_cell(q), _cell(a), _cell(b)] + (["" if m is None else ("✓" if m else "✗")] if with_match else [])
        lines.append("| " + " | ".join(row) + " |")
    judged = [m for m in matches if m is not None]
    if judged:
        lines += ["", "**" + t("identity").format(n=sum(judged), m=len(judged)) + "**"]
    return "\n".join(lines)


def check_report(run_dir: str, prompts: list[str], with_base: bool = True,
                 timeout: float = CHECK_TIMEOUT_S) -> tuple[dict | None, str]:
    """``zeroboard.outputs check RUN --json`` in a subprocess: (its report, "") or (None, what went wrong)."""
    args = ["check", str(run_dir), "--json", *[a for q in prompts for a in ("--prompt", q)]]
    res = run_cli(args + ([] if with_base else ["--no-base"]), launch_dir(run_dir), timeout)
    if res.code != 0:
        return None, res.error_text(timeout)
    try:
        report = json_report(res.stdout)
    except ValueError as e:
        return None, str(e)
    if not isinstance(report.get("answers"), list):
        return None, "the check's report has no answers"
    return report, ""


def reload_and_answer(run_dir: str, prompts_text: str, lang: str = i18n.DEFAULT, with_base: bool = True,
                      timeout: float = CHECK_TIMEOUT_S) -> tuple[str, str, dict | None]:
    """Reload the run's final output in a subprocess and let it answer: (answers table, message, report)."""
    prompts = parse_prompts(prompts_text)
    if not prompts:
        return "", i18n.label("need_prompt", lang), None
    report, error = check_report(run_dir, prompts, with_base, timeout)
    if report is None:
        return "", i18n.say("reload_failed", lang, why=error), None
    result = report.get("result") or {}
    return answers_markdown(report, lang), i18n.say("reloaded", lang, kind=result.get("kind", "the output"),
                                                    path=result.get("path", run_dir)), report


# --- consolidate / merge ------------------------------------------------------------------------


def export(kind: str, run_dir: str, out_dir: str, timeout: float = EXPORT_TIMEOUT_S,
           lang: str = i18n.DEFAULT) -> tuple[str, str | None]:
    """Consolidate a ZeRO checkpoint or merge a LoRA adapter into a NEW folder.

    Returns (message, the next free folder name after a success, else None).
    """
    what = i18n.label(kind, lang)
    out_text = (out_dir or "").strip()
    if not out_text:
        return i18n.say("export_no_dir", lang, what=what), None
    cwd = launch_dir(run_dir)
    out = Path(out_text) if Path(out_text).is_absolute() else Path(cwd) / out_text
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return i18n.say("export_exists", lang, what=what, out=out), None
    res = run_cli([kind, str(run_dir), str(out), "--json"], cwd, timeout)
    if res.code is None:  # killed mid-write: drop the half-written staging folder, never the run
        shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
    if res.code != 0:
        return i18n.say("export_failed", lang, what=what, why=res.error_text(timeout)), None
    try:
        info = json_report(res.stdout)
    except ValueError:
        why = f"no JSON report on stdout:\n\n```text\n{res.stdout[-1500:]}\n```"
        return i18n.say("export_failed", lang, what=what, why=why), None
    if kind == "consolidate":
        msg = i18n.say("wrote_consolidated", lang, path=info["path"], parameters=info["parameters"], src=info["from"],
                       step=info["step"])
    else:
        msg = i18n.say("wrote_merged", lang, path=info["path"], base=info["base_model"], parameters=info["parameters"])
    msg += i18n.label("loads_with", lang)
    return msg, new_dir_name(run_dir, kind)
