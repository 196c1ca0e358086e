"""The parent side of the GPU worker: start it, send jobs, enforce timeouts, restart it.

The worker is a child process (``multiprocessing`` spawn context) that owns the CUDA
context. Anything a bad kernel can do — spin forever on an mbarrier, fault on an
illegal address, leave a sticky error in the context, or kill the process — stays in
the child: the parent records the trial's status, kills and restarts the worker, and
the study goes on.

Protocol: the typed messages of :mod:`tuner.device.protocol`, encoded to plain dicts at the pipe.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from tuner.device import protocol
from tuner.device.protocol import (
    Answer,
    Block,
    ConfirmJob,
    Exit,
    Hello,
    HostDryRunJob,
    Job,
    Launching,
    MeasureJob,
    Message,
    PrepareJob,
    ProfileJob,
    Ready,
    Reply,
)
from tuner.lifetime import children_skip_user_main, kill_group, started_deaf_to_ctrl_c, stop_if_asked
from tuner.measurement.value import Measurement

#: called with each block (step, running value, the block's samples); True means stop
Report = Callable[[int, float, list[float]], bool]

#: swaps the CUDA backend for a test double ("module:attr", see tests/fake_backend.py)
BACKEND_ENV = "TUNER_WORKER_BACKEND"

#: a hang's ``extra`` flag: the reference, not the job's config, stopped answering
REFERENCE_HANG = "reference_hang"
SETUP_TIMEOUT_S = 600.0  # allocating and uploading a problem's inputs (GBs) can take a while



def _worker_entry(conn: Connection, backend: str, parent: int) -> None:
    """The worker process's target. The worker module (NumPy, the backends) is imported in the
    child only, so that spawning one costs the parent nothing but the process start; with the
    CUDA backend the driver starts meanwhile (:mod:`tuner.device.cuda_start`)."""
    from tuner.lifetime import ignore_interrupts

    ignore_interrupts()
    if backend == "cuda":
        from tuner.device import cuda_start

        cuda_start.begin()
    from tuner.device.worker import worker_main

    worker_main(conn, backend, parent)


#: what :meth:`Supervisor._receive` gives when the worker's end of the pipe is gone
EOF = object()


class WorkerDied(Exception):
    pass


class Supervisor:
    """Runs jobs in a worker process built by ``backend`` (``"cuda"`` or ``"module:attr"``)."""

    def __init__(self, backend: str = "cuda", env: dict[str, str] | None = None):
        self.backend = backend
        self.env = env or {}
        self._ctx = mp.get_context("spawn")
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None  # the pipe to the worker while it runs
        self.device: dict[str, Any] = {}
        self.restarts = 0
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._stopping = threading.Lock()  # Ctrl-C stops from the main thread while a job's thread may restart
        self._program_group = 0  # the process group of the program the worker runs now (0: none)
        self.spawned: float | None = None  # time.monotonic() when the last worker process was spawned
        self.greeted: float | None = None  # and when it said it had started CUDA

    @classmethod
    def from_env(cls) -> Supervisor:
        """The supervisor of this host's GPU worker: the CUDA backend, or ``$TUNER_WORKER_BACKEND``."""
        return cls(os.environ.get(BACKEND_ENV, "cuda"))

    # -- lifecycle -------------------------------------------------------------------------
    def start_soon(self, timeout_s: float = 120.0) -> None:
        """Spawn the worker now and let it start in the background (CUDA initialisation takes
        seconds); :meth:`start` then waits for it. The caller meanwhile loads the study and compiles."""
        self._spawn()

        def greet() -> None:
            try:
                self._greet(timeout_s)
            except BaseException as exc:
                self._start_error = exc

        starting = threading.Thread(target=greet, daemon=True, name="tuner-worker-start")
        starting.start()
        self._starting = starting  # once it runs: a Ctrl-C before leaves no thread for discard() to join

    def start(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """Start the worker (or wait for :meth:`start_soon`'s); returns the device fingerprint it reports."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
            error, self._start_error = self._start_error, None
            if error is not None:
                raise error
            if self.alive:
                return self.device
        return self._start(timeout_s)

    @property
    def failed_to_start(self) -> bool:
        """Has a background start (:meth:`start_soon`) already ended without a worker?"""
        starting = self._starting
        return starting is not None and not starting.is_alive() and self._start_error is not None

    def discard(self) -> None:
        """Stop the worker now, even one still starting: a run that failed or ended before it
        used the worker does not wait for CUDA to initialise."""
        self.stop()  # the greeting thread reads end-of-file and ends
        if self._starting is not None:
            self._starting.join(timeout=10)
            self._starting, self._start_error = None, None

    def prepare(self, job: PrepareJob) -> None:
        """Have the worker build a problem's inputs now (a :class:`~tuner.device.protocol.WarmUpJob`: also
        warm the GPU up with the reference), while the first configs compile; the first measurement
        then finds them ready. Nothing comes back: a failure shows there."""
        conn = self._conn
        if conn is None:  # no worker: the measurement starts one
            return
        try:
            conn.send(protocol.encode(job))
        except (OSError, BrokenPipeError):
            pass

    def _start(self, timeout_s: float) -> dict[str, Any]:
        self._spawn()
        return self._greet(timeout_s)

    def _spawn(self) -> None:
        parent, child = self._ctx.Pipe()
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # spawn copies the environment (CUDA_VISIBLE_DEVICES)
        try:
            self._proc = self._ctx.Process(target=_worker_entry, args=(child, self.backend, os.getpid()), daemon=True)
            # the worker needs nothing of the main script (a script's imports: ~0.4 s), and it leaves a
            # Ctrl-C to the run that started it, from its first instruction on
            with children_skip_user_main(), started_deaf_to_ctrl_c():
                self._proc.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        child.close()
        self._conn = parent
        self.spawned = time.monotonic()

    def _greet(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the spawned worker's hello: the device it found, or why it found none."""
        message = self._receive(timeout_s)
        if not isinstance(message, Hello):  # timeout, eof or error
            error = getattr(message, "error", "no answer from the GPU worker")
            self.stop()
            raise WorkerDied(error)
        self.device = message.device
        self.greeted = time.monotonic()
        return self.device

    def stop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(protocol.encode(Exit()))
            except (OSError, BrokenPipeError):
                pass
        self._kill()

    def _kill(self) -> None:
        with self._stopping:
            proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
            group, self._program_group = self._program_group, 0
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=10)
        if group:  # the program it ran, with whatever that started (a wrapper script's child too)
            kill_group(group)
        if conn is not None:
            try:
                conn.close()
            except OSError:  # closed under a job's thread that was still reading it
                pass

    def restart(self) -> None:
        self._kill()
        self.restarts += 1
        self._start(120.0)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # -- one job ------------------------------------------------------------------------------
    def measure(self, job: MeasureJob, timeout_s: float, report: Report) -> Measurement:
        """Run one measurement job; a hang or a dead worker becomes a status, never a raise."""
        return self._run(job, timeout_s, report)

    def confirm(self, job: ConfirmJob, timeout_s: float) -> Measurement:
        """Time several configs round-robin (``extra["times"]``); faults become a status."""
        return self._run(job, timeout_s, lambda step, value, samples: False)

    def profile(self, job: ProfileJob, timeout_s: float) -> Measurement:
        """Check a config and launch it once inside the profiler's range; faults become a status."""
        return self._run(job, timeout_s, lambda step, value, samples: False)

    def host_dry_run(self, job: HostDryRunJob, timeout_s: float) -> Measurement:
        """Launch stubs that write back what they receive (:mod:`tuner.check.host_dry_run`); each
        case's bytes come back in ``extra["results"]``; faults become a status."""
        return self._run(job, timeout_s, lambda step, value, samples: False)

    def _run(self, job: Job, timeout_s: float, report: Report) -> Measurement:
        if not self.alive:
            self._start(120.0)
        try:
            self._pipe().send(protocol.encode(job))
        except (OSError, BrokenPipeError):
            self.restart()
            self._pipe().send(protocol.encode(job))

        deadline_s = SETUP_TIMEOUT_S  # until the worker says its inputs are ready
        blocks: list[float] = []
        launching = "job"  # what the worker launches: the reference in its warm-up between jobs, else this job
        while True:
            stop_if_asked()  # a stop whose interrupt was dropped (raised in a finalizer) stops the wait here
            started = time.monotonic()
            message = self._receive(deadline_s)
            if message is None:  # silence: a kernel that never finishes
                self.restart_quietly()
                if launching == "reference":  # every trial is timed against it: the run cannot go on
                    return Measurement("hang", reason=f"the reference hung in the session warm-up (no progress for "
                                       f"{deadline_s:.0f} s): worker killed and restarted",
                                       extra={REFERENCE_HANG: True})
                return Measurement("hang", reason=f"no progress for {deadline_s:.0f} s: worker killed and restarted", blocks=blocks)
            if message is EOF:  # the worker process died under us
                proc = self._proc  # None when stop() ran meanwhile
                code = None
                if proc is not None:
                    proc.join(timeout=5)
                    code = proc.exitcode
                self.restart_quietly()
                return Measurement("launch_error", reason=f"worker died (exit code {code}): restarted", blocks=blocks)
            if isinstance(message, Launching):  # the inputs are in place: launches from here on
                launching = message.what
                self._program_group = message.group
                deadline_s = timeout_s
            elif isinstance(message, Ready):
                deadline_s = timeout_s
            elif isinstance(message, Block):
                blocks.append(message.value)
                stop = report(message.step, message.value, message.samples)
                self._pipe().send(protocol.encode(Answer(stop)))
                deadline_s = timeout_s
            elif isinstance(message, Reply):
                result = message.measurement
                result.blocks = blocks or result.blocks
                if message.restart:  # a sticky CUDA error poisons the context
                    self.restart_quietly()
                return result
            else:
                deadline_s = max(1.0, deadline_s - (time.monotonic() - started))

    def restart_quietly(self) -> None:
        """Kill now; start again lazily with the next job (which may never come)."""
        self._kill()
        self.restarts += 1

    def _pipe(self) -> Connection:
        if self._conn is None:
            raise WorkerDied("the GPU worker is not running")
        return self._conn

    def _receive(self, timeout_s: float) -> Message | object | None:
        """The worker's next message; ``EOF`` when it is gone, None after ``timeout_s`` of silence."""
        conn = self._conn
        if conn is None:  # no worker to hear from
            return EOF
        try:
            if conn.poll(timeout_s):
                return protocol.decode(conn.recv())
        except (EOFError, OSError):
            return EOF
        return None
