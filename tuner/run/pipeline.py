"""The evaluation loop: ask ahead, let the evaluator work ahead, measure in order, tell.

``study.optimize`` runs one trial at a time: the GPU idles while NVRTC compiles the next
config. Here the loop keeps up to ``ahead`` trials asked beyond the one being measured (Optuna's
ask/tell), as many as the evaluator says pay now (``depth``: :mod:`tuner.evaluate.ahead`). Each
asked trial stores its params at once, so it is RUNNING for every sampler (ours skips running
configs; TPE's constant liar counts them as bad) and for the budget of every worker; the
evaluator compiles it in the background (:meth:`GpuEvaluator.prefetch`). Trials are measured
strictly in the order asked. A replay (no ``prefetch``) runs the same loop with ``ahead = 0``.

No trial is left RUNNING: on any exit (budget, timeout, error, Ctrl-C) the trials asked but
not measured are failed and queued again with their params; if this process is killed,
any worker's next start finds them by their dead runner (:mod:`tuner.store.liveness`: at once in
the same PID space, by their expired lease from another host or container).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from tuner.lifetime import stop_deferred
from tuner.measurement.value import Measurement
from tuner.run.objective import Begun, Objective
from tuner.store.liveness import StaleCheck, beat, has_lease, heartbeat_s, requeue, runner_attrs
from tuner.store.optuna_private import ask_with_user_attrs, storage_of, trial_id

if TYPE_CHECKING:
    from tuner.run.probe import Probe
    from tuner.store.locks import ProposalLock

#: status of a trial another worker's race pushed past the study's budget (FAIL, never measured)
OVER_BUDGET = "over_budget"


@dataclass
class Timeline:
    """When things happened in this run (seconds on the monotonic clock)."""

    started: float = field(default_factory=time.monotonic)
    first_told: float | None = None
    last_told: float | None = None
    told: int = 0  # trials finished by this process (surplus and abandoned ones excluded)

    def tell(self) -> None:
        now = time.monotonic()
        self.first_told = self.first_told or now
        self.last_told = now
        self.told += 1

    def report(self) -> dict:
        """``first_trial_s``: from the process's start to the first trial's result;
        ``trials_per_s``: sustained rate from the first result to the last."""
        if self.first_told is None or self.last_told is None:
            return {"trials_run": 0, "first_trial_s": None, "trials_per_s": None}
        span = self.last_told - self.first_told
        return {
            "trials_run": self.told,
            "first_trial_s": round(self.first_told - self.started, 3),
            "trials_per_s": round((self.told - 1) / span, 3) if self.told > 1 and span > 0 else None,
            "run_s": round(self.last_told - self.started, 3),
        }


class _Heartbeat(threading.Thread):
    """The lease of every trial in flight (:mod:`tuner.store.liveness`; ``study.optimize`` beats only its one)."""

    def __init__(self, storage, interval_s: float):
        super().__init__(daemon=True, name="tuner-heartbeat")
        self.storage = storage
        self.interval_s = interval_s
        self.ids: set[int] = set()
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def add(self, trial_id: int) -> None:
        with self._lock:
            self.ids.add(trial_id)
        self._beat([trial_id])

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self.ids.discard(trial_id)

    def _beat(self, ids) -> None:
        for id_ in ids:
            try:
                beat(self.storage, id_)
            except Exception:  # a finished trial, or the database away: the next beat retries
                pass

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            with self._lock:
                ids = list(self.ids)
            self._beat(ids)

    def stop(self) -> None:
        self._halt.set()


class Pipeline:
    """Runs trials of ``study`` through ``objective`` with ``ahead`` trials asked in advance.

    Two threads: this one asks (sampler), begins (params stored, compile started), records
    and tells; a measuring thread takes the asked trials in order and measures them, so
    neither the sampler nor the storage's writes hold the GPU up.

    ``may_ask()`` is asked before every new trial (the shared budget, all workers, not yet
    spent; candidates left); ``admits(trial)`` after its params are stored (False: another
    worker's trial got the last place in the budget first, so this one is not measured).
    With ``hold`` (a study's first run choosing its reference: :mod:`tuner.run.probe`) the results
    are held untold until the run ends, then told as the probe re-based them.
    """

    def __init__(self, study: optuna.Study, objective: Objective, ahead: int, may_ask: Callable[[], bool],
                 admits: Callable[[optuna.Trial], bool], timeline: Timeline, deadline: float | None = None,
                 lock: ProposalLock | None = None, hold: Probe | None = None, depth: Callable[[], int] | None = None):
        self.study = study
        #: how many of the ``ahead`` trials pay now (the evaluator's estimate); None: all of them
        self.depth = depth
        self.hold = hold
        self.lock = lock
        self.objective = objective
        self.ahead = max(0, ahead)
        self.may_ask = may_ask
        self.admits = admits
        self.timeline = timeline
        self.deadline = deadline
        self._in_flight: deque[tuple[optuna.Trial, Begun]] = deque()
        storage = storage_of(study)
        self._heartbeat = _Heartbeat(storage, heartbeat_s() / 2) if has_lease(storage) else None
        self._stale_check = StaleCheck(study, objective.space.axis_names)
        self._to_measure: queue.Queue = queue.Queue()
        self._measured: queue.Queue = queue.Queue()
        self._halt = threading.Event()

    def run(self, max_trials: int) -> int:
        """At most ``max_trials`` trials; returns how many were asked."""
        asked = 0
        measurer = threading.Thread(target=self._measure_loop, daemon=True, name="tuner-measure")
        measurer.start()
        if self._heartbeat:
            self._heartbeat.start()
        try:
            while True:
                while len(self._in_flight) <= self._ahead_now() and asked < max_trials and not self._late():
                    if self._in_flight and not self._measured.empty():
                        break  # a result waits: tell it first (the incumbent the pruner and sampler see)
                    if not self._ask():
                        break
                    asked += 1
                if not self._in_flight:
                    break
                self._take(self._next_measured())
                if self._late():
                    break
            self._finish_measuring(measurer)
            if self.hold is not None and self.hold.choose() is not None:
                while self.hold.held:
                    with stop_deferred():
                        trial, begun, measured = self.hold.held[0]
                        self._record(trial, begun, measured, held=True)
                        self.hold.held.pop(0)
        finally:
            self._halt.set()
            self._to_measure.put(None)
            self._abandon()
            if self._heartbeat:
                self._heartbeat.stop()
        return asked

    def _take(self, measured: Measurement | BaseException) -> None:
        """The first trial in flight's result: told (held, while a probe chooses the reference)."""
        trial, begun = self._in_flight[0]
        with stop_deferred():  # told before a stop ends the run: none is left RUNNING
            self._in_flight.popleft()
            if isinstance(measured, BaseException):
                self._tell_fail(trial)
                raise measured
            if self.hold is not None:
                self.hold.hold(trial, begun, measured)
                self.timeline.tell()  # its result is in; it is stored with the others
            else:
                self._record(trial, begun, measured)

    def _finish_measuring(self, measurer: threading.Thread) -> None:
        """No trial starts; the one being measured (a deadline passed mid-trial) ends and is told, before
        anything else asks the GPU worker (the probe's re-measures, the confirmation: two threads on
        its one connection garbled it, or waited on each other for ever). The others are abandoned."""
        self._halt.set()
        self._to_measure.put(None)
        measurer.join()
        while self._in_flight and not self._measured.empty():
            self._take(self._measured.get_nowait())

    def _ahead_now(self) -> int:
        return self.ahead if self.depth is None else min(self.ahead, self.depth())

    def _late(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _next_measured(self) -> Measurement | BaseException:
        while True:  # short waits: Ctrl-C reaches this thread at once
            try:
                return self._measured.get(timeout=0.5)
            except queue.Empty:
                continue

    def _measure_loop(self) -> None:
        while True:
            item = self._to_measure.get()
            if item is None or self._halt.is_set():
                return
            trial, begun = item
            try:
                self._measured.put(self.objective.measure(trial, begun))
            except BaseException as exc:  # handed to the main thread, which stops the run
                self._measured.put(exc)
                return

    def _ask(self) -> bool:
        """Ask one trial if the budget has room (False: it has none)."""
        if self._heartbeat:
            self._stale_check()  # others' dead trials: failed, their configs queued again
        with self.lock or contextlib.nullcontext():  # budget check, choice and storing it: one step
            if not self.may_ask():
                return False
            trial = None
            try:
                # A stop comes once the trial exists with its whole config, and fails it below
                with stop_deferred():
                    # created with its runner (sampling is lazy): after a kill at any point the next run re-queues it
                    trial = ask_with_user_attrs(self.study, runner_attrs())
                    if self._heartbeat:
                        self._heartbeat.add(trial_id(trial))
                    begun = self.objective.begin(trial)  # the sampler chooses, and the config is stored
                    self._in_flight.append((trial, begun))  # from here on a stop fails it and queues it again
            except BaseException:
                if trial is not None and not any(t is trial for t, _ in self._in_flight):
                    self._fail(trial, "interrupted", "stopped while the trial was being set up: queued again")
                    self._requeue(trial, trial.params)
                raise
        with stop_deferred():
            if not self.admits(trial):  # only without a working lock
                self._in_flight.pop()
                self._fail(trial, OVER_BUDGET, "the study's budget was filled by other workers meanwhile; not measured")
                return True
            self._to_measure.put((trial, begun))
        return True

    def _record(self, trial: optuna.Trial, begun: Begun, measured: Measurement, held: bool = False) -> None:
        try:
            value = self.objective.record(trial, begun, measured)
        except optuna.TrialPruned:
            self.study.tell(trial, state=TrialState.PRUNED)
        except BaseException:
            self._tell_fail(trial)
            raise
        else:
            self.study.tell(trial, value)
        if self._heartbeat:
            self._heartbeat.discard(trial_id(trial))
        if not held:  # a held trial was counted when its result came in
            self.timeline.tell()

    def _fail(self, trial: optuna.Trial, status: str, reason: str) -> None:
        try:
            trial.set_user_attr("status", status)
            trial.set_user_attr("reason", reason)
        except Exception:
            pass
        self._tell_fail(trial)

    def _tell_fail(self, trial: optuna.Trial) -> None:
        if self._heartbeat:
            self._heartbeat.discard(trial_id(trial))
        try:
            self.study.tell(trial, state=TrialState.FAIL)
        except Exception:  # already told, or the storage is gone: the next run re-queues it by its dead runner
            pass

    def _abandon(self) -> None:
        """Trials asked and not recorded (the one measured at a Ctrl-C, those asked ahead, those
        held for a probe): failed, and their configs queued again. A held config that failed (its
        output, a hang, a build) is recorded as measured: that needs no reference."""
        while self.hold is not None and self.hold.held:
            trial, begun, measured = self.hold.held.pop(0)
            if measured.status != "ok":
                try:
                    self._record(trial, begun, measured, held=True)
                    continue
                except Exception:  # the storage gone too: failed below, and queued again
                    pass
            self._fail(trial, "interrupted", "the run stopped before the study chose its reference: queued again")
            self._requeue(trial, begun.params)
        while self._in_flight:
            trial, begun = self._in_flight.popleft()
            self._fail(trial, "interrupted", "the run stopped before this trial was measured: queued again")
            self._requeue(trial, begun.params)

    def _requeue(self, trial: optuna.Trial, params: dict) -> None:
        try:
            requeue(self.study, trial.number, params, self.objective.space.axis_names)
        except Exception:  # the storage gone too: the next run re-queues it by its dead runner
            pass
