"""Starting, finding and stopping jobs: the one launch path, for the page and the command line alike.

``JobManager.start`` refuses a job whose devices or output folder a running
job uses (naming that job), records the run in the runs index, writes the
request files (the job, the exact command, the plan) and starts the run's
supervisor (:mod:`.supervisor`), which alone writes ``state.json``.  Every
fact lives in the run folders and the index, so any number of managers --
browser sessions, ``zeroboard train`` in a terminal, a restarted server --
agree.  The index lock is held for the busy check and the registration only,
never while waiting for the launch.

Light on purpose (stdlib + psutil): the web server and the CLI import it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import threading
import time
from pathlib import Path

from .. import files, words, workspace
from ..job import command, folders, manifest, modelinfo, record, spec as specmod
from ..job.quoting import shell_line
from ..job.registry import Registry, RegistryError
from ..planner.record import record_plan
from ..words import Msg, say
from . import executor, executors, outcome, stall
from .state import GRACE_S, LAUNCH_WAIT_S, JobState, from_json, kept_aside, read_state, read_worker, settle, worker_unloads_in

# a chat worker's grace between SIGTERM and SIGKILL: it ends within a token when asked, and holds nothing a SIGKILL
# could spoil (no checkpoint, no ranks); a hung one must not keep a Start waiting for torchrun's 30 s
WORKER_GRACE_S = 5.0
FOREIGN_WAIT_ENV = "ZEROBOARD_WAIT_FOREIGN_S"  # wait this long for another workspace's job to free the devices
FOREIGN_POLL_S = 2.0


def foreign_wait_s() -> float:
    """How long a start waits while another workspace's job holds its devices (0: refuse at once, the default).

    On a machine several users share, ``ZEROBOARD_WAIT_FOREIGN_S`` lets a start wait its turn instead of failing
    (the test suite sets it, so a demo job of another workspace makes its jobs wait, not fail)."""
    try:
        return max(0.0, float(os.environ.get(FOREIGN_WAIT_ENV, "0")))
    except ValueError:
        return 0.0


class Busy(RuntimeError):
    """Another job runs on (some of) the same devices, or into the same folder. The message names it."""


class StartError(RuntimeError):
    """The job could not be started (nothing of it runs). The message says why."""


class JobManager:
    """Starts, finds and stops jobs; every fact lives in the run dirs and the index, so any number of instances agree."""

    def __init__(self, index: str | Path | None = None, grace_s: float = GRACE_S):
        self.registry = Registry(index)
        self.index = self.registry.path
        self.grace_s = grace_s

    # queries -------------------------------------------------------------------------
    def run_dirs(self) -> list[str]:
        """The training runs (chat workers are listed by :meth:`workers`)."""
        return self.registry.run_dirs()

    def is_registered(self, run_dir: str | Path | None) -> bool:
        return bool(run_dir) and self.registry.entry(run_dir) is not None

    def state(self, run_dir: str | Path) -> JobState | None:
        """The run as it is: its supervisor's state.json, or -- when the supervisor is gone without a last word --
        what the index recorded, or what its processes show. Only registered runs have a state here."""
        entry = self.registry.entry(run_dir)
        return self.state_of(entry) if entry is not None else None

    def state_of(self, entry: dict) -> JobState:
        """:meth:`state` of an index entry already read (a listing reads the index once, not once per run)."""
        run_dir = entry["run_dir"]
        st = read_state(run_dir)
        if st is not None and not st.active:
            return st
        sup_alive = executor.supervisor_alive(entry.get("supervisor_pid"), entry.get("supervisor_ctime"))
        if st is None:
            self._note_kept_aside(entry)
            if sup_alive:  # between the launch and the supervisor's first word
                return JobState(run_dir=str(run_dir), message=say("run.starting"), source=entry.get("source", "page"),
                                device_kind=entry.get("device_kind", "cpu"), devices=list(entry.get("devices", [])),
                                started=entry.get("requested"), supervisor_pid=entry.get("supervisor_pid"),
                                supervisor_ctime=entry.get("supervisor_ctime"))
            return self._settled(entry, None)
        if executor.supervisor_alive(st.supervisor_pid, st.supervisor_ctime):
            return st
        return self._settled(entry, st)

    def _settled(self, entry: dict, st: JobState | None) -> JobState:
        """A run whose supervisor is gone: the outcome recorded in the index, else found now (and recorded)."""
        if entry.get("outcome"):  # its end, kept in the index when the run folder's disk could not take it
            st = from_json(entry["outcome"])
            settle(st)  # into its own state.json as soon as that disk has room (tried again at each look till then)
            return st
        run_dir = entry["run_dir"]
        if st is None and kept_aside(run_dir) is not None:  # its state.json was damaged: its events tell how it ended
            st = JobState(run_dir=run_dir, source=entry.get("source", "page"), device_kind=entry.get("device_kind", "cpu"),
                          devices=list(entry.get("devices", [])), started=entry.get("requested"),
                          trainer_dir=entry.get("trainer_dir") or "", run_id=entry.get("run_id") or "")
            evs = record.read_events(st.output / record.EVENTS_FILE)
            st.notes.append(say("state.kept_aside_state", path=str(Path(run_dir) / record.STATE_FILE),
                                aside=str(kept_aside(run_dir))))
            outcome.conclude(st, None, [e for e in evs if e.get("time", 0) >= (st.started or 0)])
        elif st is None:  # it never wrote state.json: it could not start
            log = outcome.tail_lines(Path(run_dir) / record.SUPERVISOR_LOG, 5)
            st = JobState(run_dir=run_dir, status="failed", source=entry.get("source", "page"),
                          device_kind=entry.get("device_kind", "cpu"), devices=list(entry.get("devices", [])),
                          started=entry.get("requested"), ended=time.time())
            st.error = say("run.supervisor_never", log=" ".join(log) or "-")
            st.message = st.error
        else:
            st = read_state(run_dir) or st  # it may have written its last word just before exiting
            if not st.active:
                return st
            if entry.get("abort_requested"):  # Abort stops it from here (no supervisor to ask)
                st.abort_requested, st.status, st.message = entry["abort_requested"], "stopping", say("run.stopping")
            runner = executors.for_state(st)
            if runner.left(st):
                return st  # the job runs on without its supervisor (or is being stopped from here)
            evs = record.read_events(st.output / record.EVENTS_FILE)
            st.notes.append(say("run.supervisor_gone"))
            outcome.conclude(st, runner.final_code(st), [e for e in evs if e.get("time", 0) >= (st.started or 0)])
        self._record_outcome(st)
        return st

    def _note_kept_aside(self, entry: dict) -> None:
        """A run's state.json found damaged and kept aside: the index remembers the copy, for :meth:`problems`."""
        aside = kept_aside(entry["run_dir"])
        if aside is not None and entry.get("state_kept_aside") != str(aside):
            try:
                self.registry.update(entry["run_dir"], state_kept_aside=str(aside))
            except RegistryError:
                pass

    def problems(self) -> list[Msg]:
        """What a listing of the runs must say about their records: the index could not be read (or a damaged one
        was kept aside), a run's state.json was kept aside -- each until its copy is removed."""
        found = [p for p in (self.registry.problem(),) if p is not None]
        for e in self.registry.entries():
            aside = e.get("state_kept_aside")
            if aside and Path(aside).exists():
                found.append(say("state.kept_aside_state", path=str(Path(e["run_dir"]) / record.STATE_FILE), aside=aside))
        return found

    def _record_outcome(self, st: JobState) -> None:
        """A run ended without its supervisor's last word: its own state.json says so from now on (written under
        the state's lock, which a live supervisor holds), and the index too (all that is left on a full disk)."""
        st.files, st.written = manifest.at_end(st.path, st.output, settled=True)  # what it wrote, while it ran
        settle(st)
        try:
            self.registry.update(st.run_dir, outcome=st.to_json())
        except RegistryError:  # the index's disk is full: the page still shows the outcome, found again next time
            pass

    def jobs(self) -> list[JobState]:
        """The training runs this index knows (chat workers are :meth:`workers`)."""
        return [self.state_of(e) for e in self.registry.entries() if e.get("run_dir") and e.get("kind", "train") == "train"]

    def workers(self) -> list[JobState]:
        """The chat workers this index knows (a worker's entry goes when it ends)."""
        return [s for s in (self.state(r) for r in self.registry.run_dirs("chat")) if s is not None]

    def active(self) -> list[JobState]:
        """Every job that runs now: training runs and chat workers."""
        return [s for s in self.jobs() + self.workers() if s.active]

    def current(self) -> JobState | None:
        """What a fresh page should show: a running job, else the latest one."""
        jobs = self.jobs()
        return next((s for s in jobs if s.active), jobs[0] if jobs else None)

    # actions -------------------------------------------------------------------------
    def start(self, prepared: command.Prepared, source: str = "page") -> JobState:
        """Launch the prepared command under a supervisor. Raises Busy or StartError; nothing runs then."""
        cmd, job = prepared.command, prepared.spec
        if cmd is None:
            raise StartError(say("run.has_errors"))
        out = (Path(cmd.cwd) / job.output_dir).resolve()
        # a job on several machines: node 0 keeps its record in the output folder, node N in node-N/ inside it
        run = out if job.node_rank == 0 else out / f"node-{job.node_rank}"

        def launch():
            busy = self.busy_with(cmd, run, out, peer_key(job, cmd, out))
            if busy is not None:
                return busy, None
            settled, notes = settle_port(job, cmd)
            return None, self._launch(job, settled, run, out, notes, source)

        try:
            sup = self._when_free(launch)
        except (RegistryError, folders.FolderTaken) as e:
            raise StartError(e.args[0]) from None
        except OSError as e:  # the run folder cannot be written: nothing was started
            raise StartError(say("run.cannot_write", path=str(run), why=e.strerror or str(e))) from None
        threading.Thread(target=sup.wait, daemon=True).start()  # reap it when it ends
        return self._await_launch(run, sup)

    def _when_free(self, launch) -> subprocess.Popen:
        """``launch()`` under the index lock: (why busy, None) or (None, the supervisor). Raises Busy; while another
        workspace's job holds the devices, waits its turn for up to ``foreign_wait_s`` (the lock is free meanwhile)."""
        waited_until = time.time() + foreign_wait_s()
        while True:
            with self.registry.locked():
                busy, sup = launch()
                if busy is None:
                    return sup
                if getattr(busy, "key", "") != "run.busy_other" or time.time() >= waited_until:
                    raise Busy(busy)
            time.sleep(FOREIGN_POLL_S)

    def start_worker(self, folder: str | Path, argv: list[str], env: dict[str, str], device_kind: str,
                     devices: list[int], cwd: str, source: str = "page") -> JobState:
        """A chat worker, started as a job: the same guard (refused, naming the holder, while a job uses its devices),
        the same supervisor and executor, registered as kind ``chat`` (its supervisor removes the entry when it ends).
        ``folder`` is the worker's own (in ZeroBoard's cache): an earlier worker's record files there are replaced."""
        run = Path(folder).resolve()
        cmd = {"argv": argv, "env": env, "cwd": cwd, "device_kind": device_kind, "devices": list(devices),
               "master_port": 0, "executor": "local",
               "shell": shell_line(env, argv)}

        def launch():
            busy = self.busy_on(device_kind, list(devices), run, run)
            return (busy, None) if busy is not None else (None, self._launch_worker(run, cmd, source))

        try:
            sup = self._when_free(launch)
        except RegistryError as e:
            raise StartError(e.args[0]) from None
        except OSError as e:
            raise StartError(say("run.cannot_write", path=str(run), why=e.strerror or str(e))) from None
        threading.Thread(target=sup.wait, daemon=True).start()
        return self._await_launch(run, sup)

    def _launch_worker(self, run: Path, cmd: dict, source: str) -> subprocess.Popen:
        run.mkdir(parents=True, exist_ok=True)
        for name in (record.STATE_FILE, record.WORKER_FILE, record.EVENTS_FILE, record.LOG_FILE):
            (run / name).unlink(missing_ok=True)  # an earlier worker's: this one starts afresh
        files.write_text_atomic(run / record.COMMAND_FILE, json.dumps(cmd, indent=2, ensure_ascii=False) + "\n")
        requested = time.time()
        files.write_text_atomic(run / record.LAUNCH_FILE, json.dumps({
            "source": source, "requested": requested, "launcher": "chat", "kind": "chat",
            "grace_s": min(self.grace_s, WORKER_GRACE_S),
            "index": str(self.index.resolve()), "trainer_dir": str(run)}, indent=2) + "\n")
        with open(run / record.SUPERVISOR_LOG, "ab") as err:
            sup, ctime = executor.start_supervisor(run, cmd["cwd"], err)
        try:
            self.registry.add({"run_dir": str(run), "kind": "chat", "trainer_dir": str(run), "source": source,
                               "requested": requested, "supervisor_pid": sup.pid, "supervisor_ctime": ctime,
                               "device_kind": cmd["device_kind"], "devices": cmd["devices"]})
        except RegistryError:
            sup.terminate()
            sup.wait(timeout=self.grace_s + 15)
            raise
        return sup

    def busy_with(self, cmd: command.Command, run: Path, out: Path | None = None, peer: str | None = None) -> Msg | None:
        """Why this command cannot start now: a running job on its devices or in its folder (named), else None."""
        return self.busy_on(cmd.device_kind, list(cmd.devices), run, out, cmd.master_port, peer)

    def busy_on(self, device_kind: str, devices: list[int], run: Path, out: Path | None = None, port: int = 0,
                peer: str | None = None) -> Msg | None:
        """Why a job on ``device_kind`` devices ``devices`` writing into ``run`` / ``out`` cannot start now: a running
        job (a training run or a chat worker) on its devices or in its folder, named; else None.

        The other parts of the same job on several machines (same folder, same rendezvous) are its peers, not a
        conflict: two of them may even share one machine, as in a test.
        """
        out = out or run
        for entry in self.registry.entries():
            other = self.state(entry["run_dir"])
            if other is None or not other.active or (peer is not None and entry.get("peer") == peer):
                continue
            if Path(other.run_dir).resolve() == run or other.output.resolve() == out:
                return say("run.busy_folder", run=workspace.shown(other.run_dir), status=say(f"status.{other.status}"),
                           source=_source(other.source), pid=other.launcher_pid or other.supervisor_pid or "-")
            if executor.overlap(other.device_kind, other.devices, device_kind, devices):
                return busy_message(other)
        if device_kind == "slurm":
            return None  # the cluster's own queue orders its jobs
        known = {Path(e["run_dir"]).resolve() for e in self.registry.entries()}
        known |= {Path(e.get("trainer_dir") or e["run_dir"]).resolve() for e in self.registry.entries()}
        return executor.foreign_holder(device_kind, devices, out, port, known, peer is not None)

    def _launch(self, job: specmod.JobSpec, cmd: command.Command, run: Path, out: Path, notes: list[Msg],
                source: str) -> subprocess.Popen:
        """Claim the run folder (its marker first), write the request files, start the supervisor, register it.

        Anything that fails on the way takes back what this call made: a refused start leaves no folder behind."""
        if run != out:  # node N's record goes in node-N/ of the job's folder, which must be free or a run's
            own = folders.ownership(out, self.registry)
            if own.kind == "foreign" or own.foreign:
                raise folders.FolderTaken(say("check.output_foreign", path=str(out), files=", ".join(own.foreign[:4]),
                                              free=str(folders.free_dir_name(out)), why=own.why or ""))
        claimed = folders.claim(run, self.registry, modelinfo.version("zeroboard") or "")
        try:
            return self._write_and_start(job, cmd, run, out, notes, source, claimed)
        except BaseException:
            folders.unclaim(run, claimed)
            raise

    def _write_and_start(self, job: specmod.JobSpec, cmd: command.Command, run: Path, out: Path, notes: list[Msg],
                         source: str, claimed: folders.Claim) -> subprocess.Popen:
        run_id = claimed.run_id
        (out / record.STOP_REQUEST).unlink(missing_ok=True)  # a request of an earlier attempt is not this run's
        files.write_text_atomic(run / record.SPEC_FILE, specmod.dump_yaml(job))
        files.write_text_atomic(run / record.COMMAND_FILE, json.dumps(cmd.to_dict(), indent=2, ensure_ascii=False) + "\n")
        record_plan(job, run)  # the plan next to what the trainer measures
        requested = time.time()
        files.write_text_atomic(run / record.LAUNCH_FILE, json.dumps({
            "source": source, "requested": requested, "launcher": job.launcher, "grace_s": self.grace_s,
            "index": str(self.index.resolve()), "trainer_dir": str(out), "node_rank": job.node_rank,
            "events_offset": _size(out / record.EVENTS_FILE), "log_offset": _size(run / record.LOG_FILE),
            "notes": [words.to_json(n) for n in notes], "stall": stall.settings(job), "run_id": run_id, "run_dir": str(run),
            "foreign": claimed.foreign}, indent=2) + "\n")  # foreign: what the folder held that is not the run's
        with open(run / record.SUPERVISOR_LOG, "ab") as err:
            sup, ctime = executor.start_supervisor(run, cmd.cwd, err)
        try:
            self.registry.add({"run_dir": str(run), "run_id": run_id, "trainer_dir": str(out), "source": source,
                               "requested": requested, "supervisor_pid": sup.pid,
                               "supervisor_ctime": ctime,
                               "device_kind": cmd.device_kind, "devices": list(cmd.devices),
                               "peer": peer_key(job, cmd, out)})
        except RegistryError:  # an unregistered job would run where no page or guard sees it: stop it first
            sup.terminate()
            sup.wait(timeout=self.grace_s + 15)
            raise
        return sup

    def _await_launch(self, run: Path, sup: subprocess.Popen) -> JobState:
        """The run once its launcher runs (or it ended, or its supervisor died); "starting" after LAUNCH_WAIT_S."""
        deadline = time.time() + LAUNCH_WAIT_S
        while time.time() < deadline:
            st = read_state(run)
            if st is not None and (st.launcher_pid or not st.active):
                return st
            if sup.poll() is not None:
                break
            time.sleep(0.05)
        return self.state(run) or JobState(run_dir=str(run))

    def abort(self, run_dir: str | Path) -> JobState | None:
        """Ask a registered job to stop; returns at once (the supervisor escalates and verifies)."""
        st = self.state(run_dir)
        if st is None or not st.active:
            return st
        if executor.ask_supervisor_to_stop(st):
            return st
        # No supervisor: stop the processes from here, in the background, and record the end in the index.
        st.abort_requested, st.status, st.message = time.time(), "stopping", say("run.stopping")
        try:
            self.registry.update(run_dir, abort_requested=st.abort_requested)
        except RegistryError:
            pass
        threading.Thread(target=self._stop_here, args=(st,), daemon=True).start()
        return st

    def save_and_stop(self, run_dir: str | Path) -> JobState | None:
        """Ask a running job to save a checkpoint and its result at its next logged step, then end as finished."""
        st = self.state(run_dir)
        if st is None or not st.active:
            return st
        files.write_text_atomic(st.output / record.STOP_REQUEST, json.dumps({"asked": time.time()}) + "\n")
        return st

    def _stop_here(self, st: JobState) -> None:
        st.leftover = executors.for_state(st).stop(st, st.log_stop)
        outcome.conclude(st, None, [])
        self._record_outcome(st)


def peer_key(job: specmod.JobSpec, cmd: command.Command, out: Path) -> str | None:
    """What the parts of one job on several machines share: the folder and the rendezvous (None for one machine)."""
    return f"{out}|{job.master_addr}:{cmd.master_port}|{job.num_nodes}" if job.num_nodes > 1 else None


def settle_port(job: specmod.JobSpec, cmd: command.Command) -> tuple[command.Command, list[Msg]]:
    """A previewed master port taken since is replaced and said so; a port the user fixed is never changed."""
    if job.node_rank != 0 or command.port_is_free(cmd.master_port):  # other nodes bind nothing locally
        return cmd, []
    if job.master_port:  # several nodes (or the user) agreed on this port: changing it would strand them
        raise StartError(say("check.port_taken", port=cmd.master_port))
    new = command.free_port()
    return command.with_port(cmd, new), [say("run.port_changed", old=cmd.master_port, new=new)]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def busy_message(job: JobState) -> Msg:
    what = say("run.cpu_processes") if job.device_kind == "cpu" else say("run.gpus", ids=",".join(map(str, job.devices)))
    if job.kind == "chat":  # named by what it holds, as the worker said it (the model, its memory), and when it goes
        info = read_worker(job.run_dir)
        memory, left = info.get("memory_bytes"), worker_unloads_in(info)
        return say("run.busy_chat", what=what, model=workspace.shown(info.get("name") or info.get("model") or "?"),
                   memory=f"{memory / 2**30:.2f} GiB" if memory else "?", pid=job.launcher_pid or job.supervisor_pid or "-",
                   idle=f"{(info.get('idle_s') or 0) / 60:g}", left="?" if left is None else max(1, math.ceil(left / 60)))
    return say("run.busy", what=what, run=workspace.shown(job.run_dir), status=say(f"status.{job.status}"), source=_source(job.source),
               pid=job.launcher_pid or job.supervisor_pid or "-")


def _source(source: str) -> Msg | str:
    """Who started a run, in words (the page, the command line); an unknown source as it is."""
    return say(f"source.{source}") if source in ("page", "cli") else source
