"""The chat worker: one model loaded once, answering token by token until unloaded or idle.

``python -m zeroboard.outputs.chat_worker --folder F --target JSON --device cpu|cuda --dtype D --idle-s N``

Process layout::

    web server or ``zeroboard chat`` (the client: outputs.chat_client, no torch)
      └─ supervisor (runs.supervisor)     as for a training run: the device guard names it, Abort stops it
           └─ chat worker (this module)    own session; CUDA_VISIBLE_DEVICES holds the GPUs it was given

The worker listens on 127.0.0.1, on a port the system picks; ``F/worker.json``
(readable by its user alone) says where, with the token every request must
carry, and what the worker holds: its status (loading, ready, failed,
unloaded), the model, its precision, the memory it holds and the load time.
Each connection carries one JSON request and gets JSON lines back:

- ``status``: worker.json's content (without the token) and whether it is answering;
- ``generate``: ``sides`` (each a side, ``tuned`` or ``base``, and its conversation), ``settings``, ``id``;
  answers one side after the other, one answer at a time for the whole worker: ``{"side", "text"}``
  for each new piece, ``{"side", "done", figures}`` after each side, ``{"end"}`` last;
- ``stop``: ends the answer ``id`` (every answer without one) after the token in flight;
- ``unload``: answers, then the process ends, and its memory with it.

It ends by itself after ``idle_s`` seconds without a request (counted from when
the model is loaded and from the end of each request; ``last_request`` in
worker.json says when that was, so any page can tell when it will unload), and on
SIGTERM (Abort, or the client's unload when it does not answer).  A client that
goes away mid-answer stops that answer.

The model answers on the process's main thread; the connections' threads only
hand it their requests and send what it says.  On the H200, ``generate`` in any
thread but the main one ran 3.7x slower per token (58 against 16 ms with a 1.1 B
Llama, the same model and call in one process); and a slow client never holds
up the model: the pieces wait in the request's queue.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import queue
import secrets
import signal
import socketserver
import sys
import threading
import time
import traceback
from pathlib import Path

from .. import files, words
from ..job import record
from ..words import say
from .chat_model import DTYPES, ChatModel
from .chat_settings import IDLE_MINUTES, MAX_REQUEST_BYTES as MAX_REQUEST, Settings, idle_minutes
from .chat_target import from_dict
from .inspect import OutputError


class Worker:
    def __init__(self, folder: Path, target: dict, device: str, dtype: str, idle_s: float):
        self.folder = folder
        self.chat = ChatModel(from_dict(target), device, dtype)
        self.token = secrets.token_hex(16)
        self.idle_s = idle_s
        self.quit = threading.Event()
        self.work: queue.SimpleQueue = queue.SimpleQueue()  # answers for the main thread, in the order asked
        self.in_answer = False  # the main thread is answering
        self.stops: dict[str, threading.Event] = {}
        self.busy = 0
        self.last = time.time()
        self._lock = threading.RLock()
        self.info = {"status": "loading", "pid": os.getpid(), "target": target, "name": target.get("name"),
                     "model": target.get("path"), "device": device, "dtype": dtype, "idle_s": idle_s,
                     "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "started": time.time()}

    # --- worker.json ------------------------------------------------------------------------------
    def publish(self, **changes) -> None:
        with self._lock:  # the main thread and the connections' threads: one write at a time, the last one whole
            self.info.update(changes)
            files.write_text_atomic(self.folder / record.WORKER_FILE,  # mkstemp's file: its user alone reads the token
                                    json.dumps({**self.info, "token": self.token}, indent=2, ensure_ascii=False) + "\n")

    def public(self) -> dict:
        return {**self.info, "answering": self.in_answer}

    # --- requests ---------------------------------------------------------------------------------
    def touch(self, delta: int) -> None:
        if not delta:
            return
        with self._lock:
            self.busy += delta
            self.last = time.time()
            if self.busy == 0 and self.info["status"] == "ready":  # the idle clock starts again: say so to the pages
                self.publish(last_request=self.last)

    def handle(self, req: dict, send) -> None:
        op = req.get("op")
        if op == "status":
            send(self.public())
        elif op == "generate":
            self.generate(req, send)
        elif op == "stop":
            rid = req.get("id")
            for key, ev in list(self.stops.items()):
                if rid in (None, key):
                    ev.set()
            send({"ok": True})
        elif op == "unload":
            send({"ok": True, "pid": os.getpid(), "memory_bytes": self.info.get("memory_bytes")})
            self.end()
        else:
            send({"error": words.to_json(say("chat.bad_request", op=str(op)))})

    def generate(self, req: dict, send) -> None:
        """Queue the answer for the main thread, then send its pieces as they come (this connection's thread)."""
        rid = str(req.get("id") or secrets.token_hex(6))
        stop = self.stops.setdefault(rid, threading.Event())
        try:
            if self.info["status"] != "ready":
                send({"error": words.to_json(say("chat.not_ready", status=self.info["status"]))})
                return
            try:  # settings out of bounds: refused here, before the model is asked (chat_settings)
                req = {**req, "settings": Settings.of(req.get("settings"))}
            except ValueError as e:
                send({"error": words.to_json(e.args[0])})
                send({"end": True})
                return
            out: queue.SimpleQueue = queue.SimpleQueue()
            self.work.put(lambda: self.answer(req, stop, out.put))
            gone = False
            while (msg := out.get()) is not None:
                if gone:
                    continue
                try:
                    send(msg)
                except OSError:  # the client went away: nobody reads this answer
                    gone = True
                    stop.set()
            if not gone:
                send({"end": True})
        finally:
            self.stops.pop(rid, None)

    def answer(self, req: dict, stop: threading.Event, put) -> None:
        """On the main thread: each side of one request, its pieces and figures through ``put``, None last.
        A side that fails says why; a failure other than the request's own (OutputError) ends the request, and
        the worker goes on with the next one (the log has the traceback)."""
        side = None
        try:
            settings = req["settings"] if isinstance(req.get("settings"), Settings) else Settings.of(req.get("settings"))
            for item in req.get("sides") or []:
                side = item.get("side", "tuned")
                if stop.is_set() or self.quit.is_set():
                    break
                put({"side": side, "start": True})
                try:
                    figures = self.chat.answer(item.get("messages") or [], side, settings,
                                               lambda text, side=side: put({"side": side, "text": text}), stop)
                except OutputError as e:
                    put({"side": side, "error": words.to_json(e.args[0])})
                    continue
                put({"side": side, "done": True, **figures})
        except Exception as e:
            traceback.print_exc()
            why = words.to_json(say("chat.answer_failed", why=f"{type(e).__name__}: {e}"))
            put({"error": why} if side is None else {"side": side, "error": why})
        finally:
            put(None)

    # --- life -------------------------------------------------------------------------------------
    def end(self) -> None:
        """Unload (the request, SIGTERM): the answer in flight stops after its token, the main thread wakes at once."""
        self.quit.set()
        for ev in list(self.stops.values()):
            ev.set()
        self.work.put(lambda: None)

    def run(self) -> int:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.worker = self
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        self.publish(port=server.server_address[1])
        try:
            self.chat.load()
        except Exception as e:  # the log has the traceback; the client reads the reason here
            traceback.print_exc()
            self.publish(status="failed", error=f"{type(e).__name__}: {e}")
            server.shutdown()
            return 1
        # idle from now, not from the start: a load longer than idle_s unloaded the model before anyone could ask
        self.last = time.time()
        self.publish(status="ready", load_s=round(self.chat.load_s, 3), memory_bytes=self.chat.memory_bytes(),
                     weights_bytes=self.chat.weights_bytes(), last_request=self.last)
        print(say("chat.worker_ready", name=self.info["name"], seconds=f"{self.chat.load_s:.1f}"), flush=True)
        why = self.serve()
        for ev in list(self.stops.values()):
            ev.set()
        self.drain()
        self.publish(status="unloaded", ended=time.time(), why=why)
        record.EventWriter(self.folder, 0).emit("end", status="finished", why=why)  # its supervisor reads a clean end
        print(say("chat.worker_end", why=why), flush=True)
        server.shutdown()
        return 0

    def serve(self) -> str:
        """The main thread's loop: answer what the connections queue, until unloaded or idle. Returns why it ended."""
        while not self.quit.is_set():
            try:
                job = self.work.get(timeout=1.0)
            except queue.Empty:
                if self.busy == 0 and time.time() - self.last > self.idle_s:
                    return "idle"
                continue
            self.in_answer = True
            try:
                job()
            finally:
                self.in_answer = False
        return "unload"

    def drain(self) -> None:
        """Answers still queued when the worker ends: each ends at once (quit is set), so its connection is told."""
        while True:
            try:
                self.work.get_nowait()()
            except queue.Empty:
                return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    worker: Worker


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        worker: Worker = self.server.worker

        def send(obj: dict) -> None:
            self.wfile.write((json.dumps(obj, ensure_ascii=False) + "\n").encode())
            self.wfile.flush()

        line = self.rfile.readline(MAX_REQUEST + 1)
        if len(line) > MAX_REQUEST:  # answered, not dropped: a client waiting on silence showed an empty answer
            send({"error": words.to_json(say("chat.request_line_too_big", limit=f"{MAX_REQUEST:,}"))})
            return
        try:
            req = json.loads(line or b"{}")
        except ValueError:
            send({"error": words.to_json(say("chat.bad_request", op="?"))})
            return
        if not isinstance(req, dict) or not hmac.compare_digest(str(req.get("token", "")), worker.token):
            send({"error": words.to_json(say("chat.bad_token"))})
            return
        active = req.get("op") != "status"  # a page asking how the worker is keeps it no busier than before
        worker.touch(+1 if active else 0)
        try:
            worker.handle(req, send)
        except OSError:
            pass  # the client went away
        finally:
            worker.touch(-1 if active else 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="chat_worker")
    p.add_argument("--folder", required=True)
    p.add_argument("--target", required=True, help="JSON")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=DTYPES, default="fp32")
    p.add_argument("--idle-s", type=float, default=IDLE_MINUTES * 60)
    args = p.parse_args(argv)
    idle_minutes(args.idle_s / 60)  # the client checked it; a hand-made command gets the same refusal (a traceback)
    worker = Worker(Path(args.folder), json.loads(args.target), args.device, args.dtype, args.idle_s)

    signal.signal(signal.SIGTERM, lambda *_: worker.end())
    signal.signal(signal.SIGINT, lambda *_: worker.end())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
