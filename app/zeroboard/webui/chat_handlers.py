"""The Chat page's logic as plain functions of plain values (no gradio): pick, load, ask, stop, unload.

The model lives in a chat worker (``outputs.chat_worker``), a process of its
own that the device guard knows as a job; this module talks to it through
``outputs.chat_client``.  Conversations are gradio's message lists
(``{"role", "content"}``), one per side: the base's and the tuned model's
answers each follow their own history.  Asking streams: ``ask`` is a
generator of the two histories, one more piece of text each time.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import words, workspace
from ..job import checks, devices as devmod, record
from ..job.spec import DEMO_MODEL
from ..outputs import chat_client, chat_settings, chat_target
from ..outputs.inspect import OutputError
from ..runs.manager import Busy, JobManager, StartError

GiB = 1 << 30
DEFAULTS = {"max_new_tokens": 128, "temperature": 0.0, "top_p": 1.0, "seed": 0, "idle_minutes": chat_settings.IDLE_MINUTES}


def targets(manager: JobManager) -> list[str]:
    """What the page offers: finished runs with a result, newest first, then the models they started from."""
    runs, models = [], []
    for st in manager.jobs():
        if st.status == "finished" and (Path(st.run_dir) / record.RESULT_FILE).is_file():
            runs.append(st.run_dir)
            try:
                base = chat_target.resolve(st.run_dir).base
            except OutputError:
                base = None
            if base and Path(base).is_dir() and base not in models:
                models.append(base)
    demo = str(Path(DEMO_MODEL).resolve())
    if (Path(demo) / "config.json").is_file() and demo not in models:
        models.append(demo)
    return runs + models


def device_choices(gpus: list[devmod.Gpu], lang: str) -> list[tuple[str, str]]:
    return [(words.label("chat.cpu", lang), "cpu")] + [(f"GPU {g.index} · {g.name}", str(g.index)) for g in gpus]


def default_devices(gpus: list[devmod.Gpu]) -> list[str]:
    return [str(gpus[0].index)] if gpus else ["cpu"]


def parse_devices(values: list[str] | None) -> tuple[str, list[int]] | None:
    """("cpu", []) or ("cuda", ids); None for an empty or mixed choice."""
    values = [str(v) for v in values or []]
    if values == ["cpu"]:
        return "cpu", []
    ids = sorted(int(v) for v in values if v.isdigit())
    return ("cuda", ids) if ids and len(ids) == len(values) else None


def _target(value: str) -> chat_target.Target:
    """The target of a path typed or picked on the page: inside the folders the page may read (its base model too),
    as a job's model must be. Raises OutputError."""
    ws = workspace.current()
    if (unusable := checks.path_too_long(value)) is not None:  # a NUL byte, a name no filesystem holds
        raise OutputError(unusable)
    if not ws.readable(value, cache_ok=True):
        raise OutputError(words.say("check.read_outside", path=value, roots=ws.describe()))
    t = chat_target.resolve(value)
    if t.base and Path(t.base).exists() and not ws.readable(t.base, cache_ok=True):
        raise OutputError(words.say("check.read_outside", path=t.base, roots=ws.describe()))
    t.name = workspace.shown(t.name)  # as the page names it: the status, the about line, the busy reason
    return t


def about(value: str | None, lang: str) -> tuple[str, str]:
    """(the default system prompt, what the page says about the target: its kind, what its base side is)."""
    if not value:
        return "", ""
    try:
        t = _target(value)
    except OutputError as e:
        return "", f"**{html.escape(words.tr(e.args[0], lang))}**"
    base = {"lora_adapter": "chat.base_adapter_off", "full_model": "chat.base_loaded_beside" if t.base else "chat.base_none",
            "model": "chat.base_none"}[t.kind]
    template = words.text("chat.template_named", lang, name=t.template) if t.template not in ("auto", "chat") else \
        words.text("chat.template_own", lang)
    return t.system, words.text("chat.about", lang, kind=words.text(f"chat.kind.{t.kind}", lang), name=t.name,
                                base=words.text(base, lang, model=workspace.shown(t.base) if t.base else "-"), template=template,
                                precision=t.precision)


@dataclass
class Loaded:
    worker: chat_client.Worker | None = None
    message: str = ""
    folder: str | None = None  # the worker the session talks to
    side_by_side: bool = False  # the target has a base side
    extra: dict = field(default_factory=dict)


def _where(device_kind: str, devices: list[int], lang: str) -> str:
    return words.label("chat.cpu", lang) if device_kind == "cpu" else "GPU " + ",".join(map(str, devices))


def session_worker(manager: JobManager, folder: str | None, device_values: list[str] | None) -> chat_client.Worker | None:
    """The worker this page talks to: the one its session loaded, else one on the devices it shows (found in the runs
    index: a reloaded tab, another tab, the command line's)."""
    worker = next((w for w in chat_client.find(manager) if str(w.folder) == folder), None) if folder else None
    where = parse_devices(device_values)
    if worker is None and where is not None:
        worker = next(iter(chat_client.on_devices(manager, *where)), None)
    return worker


def status(manager: JobManager, folder: str | None, lang: str, device_values: list[str] | None = None) -> str:
    """The worker the page uses, as a line: what it holds, where, its memory, when it unloads itself."""
    worker = session_worker(manager, folder, device_values)
    if worker is None:
        held = chat_client.find(manager)
        return words.text("chat.none_loaded", lang) if not held else words.text(
            "chat.others_loaded", lang, names=", ".join(_named(w, lang) for w in held))
    info = worker.info
    where = _where(worker.state.device_kind, list(worker.state.devices), lang)
    if worker.status != "ready":
        return words.text("chat.loading", lang, name=info.get("name") or "?", where=where)
    left = worker.unloads_in()
    return words.text("chat.ready", lang, name=info.get("name") or "?", where=where, dtype=info.get("dtype"),
                      memory=f"{(info.get('memory_bytes') or 0) / GiB:.2f}", seconds=info.get("load_s"),
                      minutes=f"{(info.get('idle_s') or 0) / 60:g}", left="?" if left is None else max(1, math.ceil(left / 60)),
                      pid=info.get("pid"))


def _named(worker: chat_client.Worker, lang: str) -> str:
    return f"{worker.info.get('name') or '?'} ({_where(worker.state.device_kind, list(worker.state.devices), lang)})"


def load(manager: JobManager, value: str | None, device_values: list[str] | None, idle_minutes: float,
         lang: str) -> Loaded:
    """Load the target on the chosen devices (or find it loaded there). Blocks until it is ready or failed."""
    if not value:
        return Loaded(message=words.text("chat.pick_first", lang))
    where = parse_devices(device_values)
    if where is None:
        return Loaded(message=words.text("chat.bad_devices", lang))
    try:
        minutes = chat_settings.idle_minutes(idle_minutes)
    except ValueError as e:
        return Loaded(message=words.text("chat.load_refused", lang, why=words.tr(e.args[0], lang)))
    try:
        target = _target(value)
    except OutputError as e:
        return Loaded(message=words.tr(e.args[0], lang))
    kind, gpus = where
    held = chat_client.holding(manager, kind, gpus)
    try:
        if held is not None and held.model == target.path:
            worker = chat_client.wait_ready(held)
        else:
            if held is not None and held.state.source == "page":  # the page's own worker there: swap the model
                chat_client.unload(manager, held)
            worker = chat_client.start(manager, target, kind, gpus, idle_s=minutes * 60)
            worker = chat_client.wait_ready(worker)
    except (Busy, StartError, OutputError) as e:
        return Loaded(message=words.text("chat.load_refused", lang, why=words.tr(e.args[0], lang)))
    return Loaded(worker, words.text("chat.loaded", lang, name=target.name), str(worker.folder), target.has_base)


def unload(manager: JobManager, folder: str | None, device_values: list[str] | None, lang: str) -> str:
    """Unload the page's worker: the session's, else the one on the devices the page shows, whoever loaded it."""
    worker = session_worker(manager, folder, device_values)
    if worker is None:
        where = parse_devices(device_values)
        shown = _where(*where, lang) if where is not None else "-"
        held = chat_client.find(manager)
        return words.text("chat.nothing_to_unload", lang, where=shown) if not held else words.text(
            "chat.nothing_here_others", lang, where=shown, names=", ".join(_named(w, lang) for w in held))
    return "  \n".join(words.tr(m, lang) for m in chat_client.describe(chat_client.unload(manager, worker)))


def unload_on(manager: JobManager, device_kind: str, devices: list[int], lang: str) -> list[str]:
    """Unload every worker on these devices (the Train page's "Unload and start"): what each unload did, in words."""
    said = []
    for worker in chat_client.on_devices(manager, device_kind, devices):
        said += [words.tr(m, lang) for m in chat_client.describe(chat_client.unload(manager, worker))]
    return said


# --- asking ------------------------------------------------------------------------------------------------


def _conversation(system: str, shown: list[dict], question: str) -> list[dict]:
    """What the model reads: the system prompt, the side's own history, the new question."""
    conv = [{"role": "system", "content": system}] if system and system.strip() else []
    conv += [{"role": m["role"], "content": _text(m.get("content"))} for m in shown or []
             if m.get("role") in ("user", "assistant")]
    return conv + [{"role": "user", "content": question}]


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # gradio may hand back a message as parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")


def figures_text(figures: dict, lang: str) -> str:
    parts = []
    for side in ("base", "tuned"):
        f = figures.get(side)
        if f:
            ttft = f"{f['ttft_s']:.2f}" if f.get("ttft_s") is not None else "-"
            tps = f"{f['tokens_per_s']:.1f}" if f.get("tokens_per_s") else "-"
            parts.append(words.text("chat.figures", lang, side=words.label(f"chat.side_{side}", lang),
                                    tokens=f.get("tokens", 0), ttft=ttft, tps=tps)
                         + (" · " + words.text("chat.stopped", lang) if f.get("stopped") else "")
                         + (" · " + words.text("chat.empty_answer", lang) if f.get("text", None) == "" else ""))
    return "  \n".join(parts)


def ask(manager: JobManager, folder: str | None, question: str, tuned: list[dict], base: list[dict],
        side_by_side: bool, system: str, settings: dict, rid: str,
        lang: str, device_values: list[str] | None = None) -> Iterator[tuple[list[dict], list[dict], str]]:
    """Stream the answers: yields (tuned history, base history, figures or a message) after each new piece.  The
    worker is the one the status line names (:func:`session_worker`): a tab that did not load it talks to it too."""
    tuned, base = list(tuned or []), list(base or [])
    worker = session_worker(manager, folder, device_values)
    if not (question or "").strip():
        yield tuned, base, words.text("chat.empty_question", lang)
        return
    if worker is None or worker.status != "ready":
        yield tuned, base, words.text("chat.load_first", lang)
        return
    sides = [("base", base), ("tuned", tuned)] if side_by_side else [("tuned", tuned)]
    request = [{"side": s, "messages": _conversation(system, shown, question)} for s, shown in sides]
    for _, shown in sides:
        shown += [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]
    live = dict(sides)
    figures: dict = {}
    ended, said = False, ""
    yield tuned, base, ""
    try:
        for reply in worker.generate(request, settings, rid):
            side = reply.get("side")
            if reply.get("end"):
                ended = True
            elif reply.get("done") and side in live:  # the whole answer, as decoded at its end, and its figures
                figures[side] = reply
                live[side][-1] = {"role": "assistant", "content": reply.get("text", live[side][-1]["content"])}
                yield tuned, base, figures_text(figures, lang)
            elif "text" in reply and side in live:
                live[side][-1] = {"role": "assistant", "content": live[side][-1]["content"] + reply["text"]}
                yield tuned, base, figures_text(figures, lang)
            elif "error" in reply:  # refused or failed: the question leaves that side's history (or every side's)
                for s, shown in sides:
                    if side in (None, s) and shown and not shown[-1]["content"]:
                        del shown[-2:]
                said = words.tr(reply["error"], lang)
                yield tuned, base, said
    except OutputError as e:  # refused before it was sent (chat_settings): nothing was asked
        for _, shown in sides:
            del shown[-2:]
        yield tuned, base, words.tr(e.args[0], lang)
        return
    except OSError as e:
        yield tuned, base, words.text("chat.worker_gone", lang, why=str(e))
        return
    if not ended and not said:  # the connection ended without an answer: never an empty success
        for _, shown in sides:
            if shown and not shown[-1]["content"]:
                del shown[-2:]
        yield tuned, base, words.text("chat.no_answer", lang)


def stop(manager: JobManager, folder: str | None, rid: str, device_values: list[str] | None = None) -> None:
    worker = session_worker(manager, folder, device_values)
    if worker is not None:
        worker.stop(rid)
