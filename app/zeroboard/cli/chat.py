"""``zeroboard chat | export``: talk to what a run saved (through the page's chat worker), hand it to other tools;
``zeroboard chat --unload``: unload the chat workers of this workspace, whoever loaded them."""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import sys

from ..job import devices as devmod
from ..outputs import chat_client, chat_settings, chat_target
from ..outputs.inspect import OutputError
from ..runs.manager import Busy, JobManager, StartError
from ..words import default_lang, say, text, tr
from .args import path


def _fail(e: Exception, lang: str) -> int:
    print(f"chat: {tr(e.args[0] if e.args else str(e), lang)}", file=sys.stderr)
    return 1


def _devices(args) -> tuple[str, list[int]]:
    if args.cpu:
        return "cpu", []
    if args.gpus:
        return "cuda", [int(x) for x in args.gpus.split(",") if x.strip()]
    gpus = devmod.detect_gpus()
    return ("cuda", [gpus[0].index]) if gpus else ("cpu", [])


def _settings(args) -> dict:
    return {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
            "seed": args.seed, "max_prompt_tokens": args.max_prompt_tokens}


def _answer(worker: chat_client.Worker, side: str, messages: list[dict], settings: dict, stream) -> dict:
    """One answer, its pieces written to ``stream`` as they come; Ctrl-C stops it (the answer so far is kept).
    Raises OutputError for a refusal (the client's or the worker's) and for an answer that never ended."""
    rid = secrets.token_hex(6)
    done: dict = {}
    ended = False
    try:
        for reply in worker.generate([{"side": side, "messages": messages}], settings, rid):
            if reply.get("end"):
                ended = True
            elif reply.get("done"):
                done = reply
            elif "text" in reply:
                stream.write(reply["text"])
                stream.flush()
            elif "error" in reply:
                raise OutputError(reply["error"])
    except KeyboardInterrupt:
        worker.stop(rid)
        done, ended = {"stopped": True}, True
    if not ended or not done:
        raise OutputError(say("chat.no_answer"))
    stream.write("\n")
    if not done.get("text") and not done.get("stopped"):
        print(text("chat.empty_answer", default_lang()), file=sys.stderr)
    return done


def _read_question() -> str:
    """The next question: with line editing on a terminal; from a pipe, with the prompt kept off stdout."""
    if sys.stdin.isatty():
        return input("> ")
    print("> ", end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _loaded(mgr: JobManager, target, kind: str, gpus: list[int], args, lang: str) -> tuple[chat_client.Worker, bool]:
    """(the worker, whether this command started it): the one of these devices when it holds the target already."""
    held = chat_client.holding(mgr, kind, gpus)
    if held is not None and held.model == target.path:
        print(text("cli.chat_reuse", lang, folder=str(held.folder)), file=sys.stderr)
        return chat_client.wait_ready(held), False
    where = text("cli.chat_cpu", lang) if kind == "cpu" else "GPU " + ",".join(map(str, gpus))
    print(text("cli.chat_loading", lang, name=target.name, where=where), file=sys.stderr)
    worker = chat_client.start(mgr, target, kind, gpus, idle_s=chat_settings.idle_minutes(args.idle_minutes) * 60,
                               source="cli")
    worker = chat_client.wait_ready(worker)
    info = worker.info
    print(text("cli.chat_ready", lang, seconds=info.get("load_s"), dtype=info.get("dtype"),
               memory=f"{(info.get('memory_bytes') or 0) / 2**30:.2f}"), file=sys.stderr)
    return worker, True


def cmd_unload(args, lang: str) -> int:
    """``zeroboard chat --unload [--cpu | --gpus 0,1]``: every worker of this workspace's runs index on those devices
    (every one without them), each unload verified; 1 when one is left."""
    mgr = JobManager()
    if args.cpu or args.gpus:
        kind, gpus = _devices(args)
        workers = chat_client.on_devices(mgr, kind, gpus)
        where = text("cli.chat_on", lang, where=text("cli.chat_cpu", lang) if kind == "cpu" else "GPU " + args.gpus)
    else:
        workers, where = chat_client.find(mgr), ""
    if not workers:
        print(text("cli.chat_none_loaded", lang, where=where), file=sys.stderr)
        return 0
    left = False
    for worker in workers:
        on = text("cli.chat_cpu", lang) if worker.state.device_kind == "cpu" else \
            "GPU " + ",".join(map(str, worker.state.devices))
        print(text("cli.chat_unloading", lang, name=worker.info.get("name") or "?", where=on,
                   pid=worker.state.launcher_pid or "-"), file=sys.stderr)
        gone = chat_client.unload(mgr, worker)
        for said in chat_client.describe(gone):
            print(tr(said, lang), file=sys.stderr)
        left = left or not gone["verified"]
    return 1 if left else 0


def cmd_chat(args) -> int:
    """``zeroboard chat RUN_OR_MODEL [--base] [--prompt TEXT]``: one answer, or a conversation on the terminal."""
    lang = default_lang()
    if args.unload:
        return _fail(ValueError(say("cli.chat_unload_target")), lang) if args.target else cmd_unload(args, lang)
    if not args.target:
        return _fail(ValueError(say("cli.chat_target_missing")), lang)
    try:  # before anything loads: the worker's keep-alive in its bounds
        chat_settings.idle_minutes(args.idle_minutes)
    except ValueError as e:
        return _fail(e, lang)
    try:
        target = chat_target.resolve(args.target)
        if args.base and not target.has_base:
            raise OutputError(say("chat.no_base", name=target.name))
    except OutputError as e:
        return _fail(e, lang)
    kind, gpus = _devices(args)
    mgr = JobManager()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill unloads what this command loaded, as Ctrl-C
    worker, own = None, False
    try:
        worker, own = _loaded(mgr, target, kind, gpus, args, lang)
        side = "base" if args.base else "tuned"
        system = target.system if args.system is None else args.system
        history = [{"role": "system", "content": system}] if system else []
        if args.prompt is not None:
            done = _answer(worker, side, history + [{"role": "user", "content": args.prompt}], _settings(args),
                           sys.stderr if args.json else sys.stdout)
            if args.json:
                print(json.dumps({"target": target.to_dict(), "side": side, **done}, ensure_ascii=False))
            return 0
        print(text("cli.chat_hint", lang), file=sys.stderr)
        while True:
            try:
                question = _read_question()
            except EOFError:
                break
            if not question.strip():
                continue
            try:
                done = _answer(worker, side, history + [{"role": "user", "content": question}], _settings(args),
                               sys.stdout)
            except OutputError as e:  # refused (too long, a setting out of bounds): the conversation goes on without it
                print(f"chat: {tr(e.args[0], lang)}", file=sys.stderr)
                continue
            history += [{"role": "user", "content": question}, {"role": "assistant", "content": done.get("text", "")}]
        return 0
    except (Busy, StartError, OutputError, OSError) as e:
        return _fail(e, lang)
    except KeyboardInterrupt:
        return 130
    finally:
        if worker is not None and own:
            gone = chat_client.unload(mgr, worker)
            print(text("cli.chat_unloaded", lang, memory=f"{(gone['freed_bytes'] or 0) / 2**30:.2f}",
                       verified=text("cli.chat_verified" if gone["verified"] else "cli.chat_not_verified", lang)),
                  file=sys.stderr)


def cmd_export(args) -> int:
    from ..outputs import standalone

    lang = default_lang()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # libraries print while loading; stdout may carry --json
            info = standalone.export_run(args.run, args.out, args.base, lang=lang)
    except OutputError as e:
        print(f"export: {tr(e.args[0], lang)}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2, ensure_ascii=False) if args.json else standalone.export_text(info, lang))
    return 0


def add_commands(sub, lang: str) -> None:
    s = sub.add_parser("chat", help=text("cli.chat_help", lang))
    s.add_argument("target", metavar="RUN_OR_MODEL", type=path, nargs="?", help=text("cli.chat_target_help", lang))
    s.add_argument("--unload", action="store_true", help=text("cli.chat_unload_help", lang))
    s.add_argument("--base", action="store_true", help=text("cli.chat_base_help", lang))
    s.add_argument("--prompt", help=text("cli.chat_prompt_help", lang))
    s.add_argument("--system", help=text("cli.chat_system_help", lang))
    where = s.add_mutually_exclusive_group()
    where.add_argument("--gpus", metavar="0,1", help=text("cli.chat_gpus_help", lang))
    where.add_argument("--cpu", action="store_true", help=text("cli.chat_cpu_help", lang))
    s.add_argument("--max-new-tokens", type=int, default=256)
    s.add_argument("--temperature", type=float, default=0.0, help=text("cli.chat_temperature_help", lang))
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-prompt-tokens", type=int, default=0, help=text("cli.chat_max_prompt_help", lang))
    s.add_argument("--idle-minutes", default=chat_settings.IDLE_MINUTES, help=text("cli.chat_idle_help", lang))
    s.add_argument("--json", action="store_true", help=text("cli.chat_json_help", lang))
    s.set_defaults(fn=cmd_chat)
    s = sub.add_parser("export", help=text("cli.export_help", lang))
    s.add_argument("run", type=path, help=text("cli.export_run_help", lang))
    s.add_argument("out", type=path, help=text("cli.out_help", lang))
    s.add_argument("--base", type=path, help=text("cli.base_help", lang))
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_export)
