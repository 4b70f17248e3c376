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

from .. import safeload, words, workspace
from ..data.demo import DEMO_PROMPTS, DEMO_PROMPTS_ZH
from ..job import checks, folders, record
from ..outputs.inspect import OutputError, inspect
from ..runs.manager import JobManager

CHECK_TIMEOUT_S = 600.0  # reload + greedy answers of the tuned and the base model
EXPORT_TIMEOUT_S = 1800.0  # consolidate / merge: loads and writes a whole model
DEFAULT_PROMPTS = "\n".join(DEMO_PROMPTS)
PROMPTS = {"en": DEFAULT_PROMPTS, "zh": "\n".join(DEMO_PROMPTS_ZH)}  # the demo's questions, in the page's language
SUFFIX = {"consolidate": "consolidated", "merge": "merged", "export": "export"}


@dataclass
class View:
    """What the output check panel shows for the selected run."""

    visible: bool = False
    saved: str = ""  # outputs.inspect(run).text(), or why there is nothing to check
    can_consolidate: bool = False
    can_merge: bool = False
    consolidate_dir: str = ""
    merge_dir: str = ""
    can_export: bool = False  # a final adapter or full model: a standalone folder with an Ollama Modelfile
    export_dir: str = ""


def new_dir_name(run_dir: str | Path, kind: str) -> str:
    """A folder next to the run that does not exist yet: RUN-merged, RUN-merged-2, ..."""
    run = Path(run_dir)
    candidate = run.with_name(f"{run.name}-{SUFFIX[kind]}")
    return str(candidate if not candidate.exists() else folders.free_dir_name(candidate))


def view(run_dir: str | None, status: str, lang: str = words.DEFAULT) -> View:
    """The panel for a run: shown once the run has finished."""
    if not run_dir or status != "finished":
        return View()
    try:
        ins = inspect(run_dir)
    except OutputError as e:
        why = workspace.shown_in(words.tr(e.args[0], lang), run_dir)  # paths as the workspace names them
        return View(True, words.text("page.nothing_to_check", lang, why=why))
    kinds = {i.kind for i in ins.items}
    adapter = "lora_adapter" in kinds
    saved = workspace.shown_in(ins.text(lang), run_dir)
    final = (ins.result or {}).get("kind") in ("lora_adapter", "full_model")
    return View(True, saved, can_consolidate="zero_checkpoint" in kinds and not adapter, can_merge=adapter,
                consolidate_dir=workspace.shown(new_dir_name(run_dir, "consolidate")),
                merge_dir=workspace.shown(new_dir_name(run_dir, "merge")),
                can_export=final, export_dir=workspace.shown(new_dir_name(run_dir, "export")))


def not_ready(manager: JobManager, run_dir: str | None, lang: str = words.DEFAULT) -> str | None:
    """Why the selected run cannot be checked now, or None."""
    if not run_dir:
        return words.text("page.no_run_selected", lang)
    st = manager.state(run_dir)
    if st is None or st.status != "finished":
        status = words.status(st.status, lang) if st else words.text("page.no_job_record", lang)
        return words.text("page.not_finished", lang, run=run_dir, status=status)
    return None


# --- the subprocess --------------------------------------------------------------------------


@dataclass
class CliResult:
    code: int | None  # None: killed at the time limit
    stdout: str
    stderr: str

    def error_text(self, limit: float, lang: str = words.DEFAULT) -> str:
        if self.code is None:
            return words.text("page.time_limit", lang, seconds=round(limit))
        lines = [line for line in self.stderr.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        if ": " in last and last.split(": ", 1)[0] in ("check", "consolidate", "merge", "export"):
            return last.split(": ", 1)[1]  # the CLI's own message: what is wrong and what to do
        try:
            err = json_report(self.stdout).get("error")
        except ValueError:
            err = None
        if err:
            return err
        tail = "\n".join(lines[-8:]) or "(no output)"
        return f"{words.text('run.exit_code', lang, code=self.code)}:\n\n```text\n{tail}\n```"


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
    raise ValueError(words.say("page.no_json"))


def launch_dir(run_dir: str | Path) -> str:
    """The folder the run was launched from (as its command record says); the server's own otherwise."""
    try:
        return json.loads(safeload.read_text(Path(run_dir) / record.COMMAND_FILE, safeload.CONFIG))["cwd"]
    except (OSError, ValueError, KeyError, TypeError):
        return os.getcwd()


def run_cli(args: list[str], cwd: str, timeout: float) -> CliResult:
    """``python -m zeroboard.outputs ARGS`` in its own process group, killed whole at the time limit."""
    proc = subprocess.Popen([sys.executable, "-m", "zeroboard.cli", *args], cwd=cwd, stdin=subprocess.DEVNULL,
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
    t = lambda key: words.label(key, lang)  # noqa: E731
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


def check_report(run_dir: str, prompts: list[str], with_base: bool = True, timeout: float = CHECK_TIMEOUT_S,
                 lang: str = words.DEFAULT) -> tuple[dict | None, str]:
    """``zeroboard check RUN --json`` in a subprocess: (its report, "") or (None, what went wrong)."""
    args = ["check", str(run_dir), "--json", *[a for q in prompts for a in ("--prompt", q)]]
    res = run_cli(args + ([] if with_base else ["--no-base"]), launch_dir(run_dir), timeout)
    if res.code != 0:
        return None, res.error_text(timeout, lang)
    try:
        report = json_report(res.stdout)
    except ValueError:
        return None, words.text("page.no_json", lang)
    if not isinstance(report.get("answers"), list):
        return None, words.text("page.no_answers", lang)
    return report, ""


def reload_and_answer(run_dir: str, prompts_text: str, lang: str = words.DEFAULT, with_base: bool = True,
                      timeout: float = CHECK_TIMEOUT_S) -> tuple[str, str, dict | None]:
    """Reload the run's final output in a subprocess and let it answer: (answers table, message, report)."""
    prompts = parse_prompts(prompts_text)
    if not prompts:
        return "", words.label("need_prompt", lang), None
    report, error = check_report(run_dir, prompts, with_base, timeout, lang)
    if report is None:
        return "", words.text("reload_failed", lang, why=error), None
    result = report.get("result") or {}
    kind = result.get("kind")
    kind = words.text(f"out.kind.{kind}", lang) if kind in ("lora_adapter", "full_model") else words.text("page.the_output", lang)
    return answers_markdown(report, lang), words.text("reloaded", lang, kind=kind,
                                                      path=result.get("path", run_dir)), report


# --- consolidate / merge ------------------------------------------------------------------------


def export(kind: str, run_dir: str, out_dir: str, timeout: float = EXPORT_TIMEOUT_S,
           lang: str = words.DEFAULT) -> tuple[str, str | None]:
    """Consolidate a ZeRO checkpoint or merge a LoRA adapter into a NEW folder.

    Returns (message, the next free folder name after a success, else None).
    """
    what = words.label(kind, lang)
    out_text = (out_dir or "").strip()
    if not out_text:
        return words.text("export_no_dir", lang, what=what), None
    cwd = launch_dir(run_dir)
    ws = workspace.current()
    if (long := checks.path_too_long(out_text)) is not None:
        return words.tr(long, lang), None
    out = workspace.resolve(out_text, Path(cwd))
    if not ws.writable(out):
        return words.text("export_outside", lang, what=what, out=out_text, roots=ws.describe()), None
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return words.text("export_exists", lang, what=what, out=out), None
    res = run_cli([kind, str(run_dir), str(out), "--json"], cwd, timeout)
    if res.code is None:  # killed mid-write: drop the half-written staging folder, never the run
        shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
    if res.code != 0:
        return words.text("export_failed", lang, what=what, why=res.error_text(timeout, lang)), None
    try:
        info = json_report(res.stdout)
    except ValueError:
        why = f"{words.text('page.no_json', lang)}:\n\n```text\n{res.stdout[-1500:]}\n```"
        return words.text("export_failed", lang, what=what, why=why), None
    if kind == "export":
        from ..outputs.standalone import export_text

        return export_text(info, lang), new_dir_name(run_dir, kind)
    if kind == "consolidate":
        msg = words.text("wrote_consolidated", lang, path=info["path"], parameters=info["parameters"], src=info["from"],
                       step=info["step"])
    else:
        msg = words.text("wrote_merged", lang, path=info["path"], base=info["base_model"], parameters=info["parameters"])
    msg += words.label("loads_with", lang)
    return msg, new_dir_name(run_dir, kind)
