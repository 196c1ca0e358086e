"""The measurement protocol the GPU worker runs, over a small :class:`Backend` seam.

One trial: the candidate is loaded, its output checked, and then it is timed in
pairs with a fixed reference (another config of the same kernel, or a spec's
host-side baseline such as cuBLAS), launch by launch, until the ratio's interval is
narrow enough (:class:`tuner.measurement.paired.StopRule`) or the parent says stop. A
confirmation times several configs round-robin against each other.

The protocol lives here once; a backend only loads, launches, times and checks. The
CUDA backend (:mod:`tuner.device.worker`) is one implementation, the test doubles in
``tests/`` are others, so the pairing logic is tested without a GPU.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tuner.device.energy import Counter, Energy, measure_energy
from tuner.device.protocol import Kernel, Timing
from tuner.measurement.paired import PairSeries
from tuner.measurement.steady import SessionWarmUp, WarmUp
from tuner.measurement.value import Measurement

if TYPE_CHECKING:
    from tuner.device.protocol import CheckedJob, ConfirmJob, MeasureJob, PrepareJob, ProfileJob, WarmUpJob

class LaunchFailed(Exception):
    """A load or launch failed; ``restart`` when the device context is unusable after it."""

    def __init__(self, reason: str, restart: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.restart = restart


class Channel(Protocol):
    def ready(self) -> None: ...

    def block(self, step: int, value: float, samples: list[float], pairs: int) -> bool:
        """Report a block of pair ratios; True when the parent says stop."""
        ...


class Backend(Protocol):
    """What the protocol needs from a device. Handles are opaque to it."""

    def hello(self) -> dict[str, Any]: ...

    def prepare(self, spec: Any, problem: dict, seed: int) -> None:
        """Inputs and outputs of ``problem`` in place (once per problem: they are large)."""
        ...

    def load(self, spec: Any, config: dict, problem: dict, cubin_path: str) -> Any: ...

    def load_baseline(self, spec: Any, problem: dict) -> Any:
        """The spec's host-side baseline (e.g. cuBLAS) as a launchable handle."""
        ...

    def unload(self, handle: Any) -> None: ...

    def check(self, handle: Any, spec: Any, problem: dict, check_rows: int, seed: int,
              tolerance: dict | None = None) -> Measurement:
        """Launch once on poisoned outputs and compare: status ``ok`` or why not. ``tolerance``:
        the study's (:meth:`tuner.contract.precision.Tolerance.as_job`), None for the spec's own."""
        ...

    def time(self, handles: Sequence[Any], rounds: int) -> list[list[float]]:
        """``rounds`` rounds, each launching every handle once; ms per round and handle.

        The launch order rotates from round to round so no handle always goes first.
        """
        ...

    def profiled(self, handle: Any) -> None:
        """Launch ``handle`` once inside the profiler's range (``cuProfilerStart`` / ``cuProfilerStop``)."""
        ...

    def sensors(self) -> dict[str, float]:
        """Whatever the device reports: ``sm_clock_mhz``."""
        ...

    def energy_counter(self) -> Counter | None:
        """The device's running energy counter, where it has one (:mod:`tuner.device.energy`)."""
        ...


#: how long the worker keeps the GPU warm for a first trial that has not come yet
WARM_WAIT_S = 10.0
#: while the worker warms up between jobs, it tells the parent it launches the reference this often
BEAT_S = 0.5

#: a block of pair ratios as the parent is told it: step, running value, the block's samples, pairs so far
BlockReport = tuple[int, float, list[float], int]


@dataclass
class _MeasuredAhead:
    """A trial measured before the study asked it: the job, its outcome, the blocks to tell."""

    job: MeasureJob
    measurement: Measurement
    blocks: list[BlockReport]


class _JobWaiting(Exception):
    """A job arrived while a trial was measured ahead: that job goes first."""


class _AheadChannel:
    """The parent's side of a trial measured ahead: its blocks are kept, never stopped, and another
    job that arrives meanwhile ends it."""

    def __init__(self, other_job_waiting: Callable[[], bool]):
        self.blocks: list[BlockReport] = []
        self._other_job_waiting = other_job_waiting

    def ready(self) -> None:
        pass

    def block(self, step: int, value: float, samples: list[float], pairs: int) -> bool:
        self.blocks.append((step, value, samples, pairs))
        if self._other_job_waiting():
            raise _JobWaiting
        return False


class Measurer:
    """Runs jobs on a backend; keeps the reference loaded across trials of one problem."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._problem_key: str | None = None
        self._reference: tuple[str, Any] | None = None
        self._warming: tuple[str, SessionWarmUp] | None = None  # the session's warm-up so far, and its kernel
        self._session: WarmUp | None = None  # how the session's warm-up ended (None: not yet)
        self._session_reported = False
        self._ahead: _MeasuredAhead | None = None  # the first trial, measured before it was asked
        #: tells the parent what runs between jobs, and the process group of a program running now (the
        #: worker sends a Launching message)
        self.tell: Callable[[str, int], None] = lambda what, group: None
        self._told: tuple[str, float, int] = ("job", 0.0, 0)

    # -- jobs ----------------------------------------------------------------------------------
    def measure(self, job: MeasureJob, channel: Channel) -> tuple[Measurement, bool]:
        """One trial: check, then paired timing. Returns (measurement, restart the worker)."""
        ahead, self._ahead = self._ahead, None  # kept for the next trial only, told if it is that trial
        if ahead is not None and ahead.job == job:
            return _tell(ahead, channel), False
        spec, problem = self._prepare(job)
        channel.ready()
        timing = job.timing
        try:
            reference = self._reference_handle(job, spec, problem)  # (before the check: some check against it)
            with self._loaded(spec, job.candidate, problem) as handle:
                checked = self._check(handle, job, spec, problem)
                if checked.status != "ok":
                    return checked, False
                result = self._paired(handle, reference, timing, channel, itself=_paired_with_itself(job))
            for key in ("checksum", "max_err"):
                setattr(result, key, getattr(checked, key))
            result.extra = {**checked.extra, **result.extra}
            return result, False
        except LaunchFailed as exc:
            return Measurement("launch_error", reason=exc.reason), exc.restart

    def confirm(self, job: ConfirmJob, channel: Channel) -> tuple[Measurement, bool]:
        """Round-robin timing of the reference and those of ``job.kernels`` whose output passes its
        check in this session; times come back (column 0: the reference, then the kept kernels in
        order), with the kept kernels' indices in ``job.kernels`` and why the others were left out."""
        spec, problem = self._prepare(job)
        channel.ready()
        timing = job.timing
        handles: list[Any] = []
        kept: list[int] = []
        left_out: list[dict[str, Any]] = []
        try:
            reference = self._reference_handle(job, spec, problem)
            for i, kernel in enumerate(job.kernels):
                handle = self.backend.load(spec, kernel.config, problem, kernel.cubin_path)
                handles.append(handle)
                checked = self._check(handle, job, spec, problem)
                if checked.status != "ok":  # e.g. a stricter precision class, another GPU: not a winner here
                    left_out.append({"index": i, "status": checked.status, "reason": checked.reason})
                    self.backend.unload(handles.pop())
                    continue
                kept.append(i)
            if len(kept) < 2:
                return Measurement("ok", extra={"times": [], "kept": kept, "left_out": left_out}), False
            everyone = [reference, *handles]
            self._warm_up(everyone, timing)
            rounds: list[list[float]] = []
            step = 0
            while len(rounds) < job.rounds:
                rounds += self.backend.time(everyone, min(timing.block, job.rounds - len(rounds)))
                channel.block(step, statistics.median(r[1] / r[0] for r in rounds), [], len(rounds))
                step += 1
            done = Measurement("ok", extra={"times": rounds, "kept": kept, "left_out": left_out,
                                            **_sensor_attrs(self.backend.sensors())})
            return done, False
        except LaunchFailed as exc:
            return Measurement("launch_error", reason=exc.reason), exc.restart
        finally:
            for handle in handles:
                self.backend.unload(handle)

    def profile(self, job: ProfileJob, channel: Channel) -> tuple[Measurement, bool]:
        """Check the candidate, warm it up, then launch it once inside the profiler's range. The
        measurement is the check's: a kernel whose output is wrong is profiled all the same."""
        spec, problem = self._prepare(job)
        channel.ready()
        try:
            self._reference_handle(job, spec, problem)  # (some checks compare against it)
            with self._loaded(spec, job.candidate, problem) as handle:
                checked = self._check(handle, job, spec, problem)
                self.backend.time([handle], max(1, job.timing.warmup))  # caches and clocks, as a timed launch finds them
                self.backend.profiled(handle)
            return checked, False
        except LaunchFailed as exc:
            return Measurement("launch_error", reason=exc.reason), exc.restart

    def prepare(self, job: PrepareJob) -> None:
        """A problem's inputs in place before its first job."""
        self._prepare(job)

    def warm_up(self, job: WarmUpJob, job_waiting: Callable[[], bool],
                next_job: Callable[[], object | None] | None = None) -> None:
        """The session warm-up before the first trial (sustained regime), while the tuner still
        sets up: the reference runs until its time is steady (:mod:`tuner.measurement.steady`) and then on
        until a job arrives (at most ``WARM_WAIT_S``), so the first trial finds the GPU at its
        loaded clocks. A job that arrives before the GPU is steady stops it between blocks: the
        reference paired with itself is measured at once, any other job resumes the warm-up first.
        ``job.first_trial`` (that self-pair, as the study will ask it) is measured before the warm-up and
        kept, so the study's first result need not wait for it; ``next_job`` shows the job waiting,
        if any, so that this trial, asked while it is measured, lets it end."""
        timing = job.timing
        if timing.regime != "sustained" or timing.program or self._session is not None:
            return
        spec, problem = self._prepare(job)

        def waiting() -> bool:  # between blocks: the parent hears that the reference runs on
            self._beat("reference")
            return job_waiting()

        try:
            self._beat("reference")
            if job.first_trial is not None:
                self._measure_ahead(job.first_trial, waiting, next_job)
            reference = self._reference_handle(job, spec, problem)
            if not self._warm_session(reference, timing, waiting):
                return
            until = time.monotonic() + WARM_WAIT_S
            while not waiting() and time.monotonic() < until:
                self._run_for([reference], 20.0, 1)
        finally:
            self._beat("job")

    def beat(self, group: int = 0) -> None:
        """Tell the parent that what runs now goes on (a long launch is not a hang); ``group``: the process
        group of the program that runs now, if any."""
        self._beat(self._told[0], group)

    def _beat(self, what: str, group: int = 0) -> None:
        """Tell the parent what runs now: at once when it changed, else at most every ``BEAT_S``."""
        now = time.monotonic()
        if what != self._told[0] or group != self._told[2] or now - self._told[1] >= BEAT_S:
            self.tell(what, group)
            self._told = (what, now, group)

    def _measure_ahead(self, job: MeasureJob, job_waiting: Callable[[], bool],
                       next_job: Callable[[], object | None] | None) -> None:
        """The reference paired with itself, measured early (it needs no steady GPU) and kept until
        the study asks it; another job that arrives first ends it unkept."""
        if not (_paired_with_itself(job) and job.timing.early_self_pair):
            return
        channel = _AheadChannel(lambda: job_waiting() and (next_job is None or next_job() != job))
        try:
            measurement, restart = self.measure(job, channel)
        except _JobWaiting:
            return
        if measurement.status == "ok" and not restart:
            measurement.extra["measured_ahead"] = True
            self._ahead = _MeasuredAhead(job, measurement, channel.blocks)

    def _warm_session(self, reference: Any, timing: Timing, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Run the session warm-up on (resume it while the reference is the same); True once it ended."""
        key = self._reference[0] if self._reference is not None else ""
        if self._warming is None or self._warming[0] != key:  # another reference: its times start a new series
            self._warming = (key, SessionWarmUp(timing.steady_rule))
        self._session = self._warming[1].run(lambda n: [r[0] for r in self.backend.time([reference], n)], interrupted)
        return self._session is not None

    # -- parts ---------------------------------------------------------------------------------
    def _prepare(self, job: PrepareJob) -> tuple[Any, dict]:
        import json

        from tuner.contract.kernel_spec import load_spec

        spec = load_spec(job.spec_path)
        problem = job.problem
        key = json.dumps([job.spec_path, problem, job.seed], sort_keys=True)
        if key != self._problem_key:
            self._drop_reference()  # its launch arguments point at the old buffers
            self.backend.prepare(spec, problem, job.seed)
            self._problem_key = key
        return spec, problem

    @contextlib.contextmanager
    def _loaded(self, spec: Any, kernel: Kernel, problem: dict) -> Iterator[Any]:
        """``kernel`` loaded for the block, unloaded after it."""
        handle = self.backend.load(spec, kernel.config, problem, kernel.cubin_path)
        try:
            yield handle
        finally:
            self.backend.unload(handle)

    def _check(self, handle: Any, job: CheckedJob, spec: Any, problem: dict) -> Measurement:
        return self.backend.check(handle, spec, problem, job.check_rows, job.seed, job.tolerance)

    def _reference_handle(self, job: WarmUpJob, spec: Any, problem: dict) -> Any:
        ref = job.reference
        key = ref.cubin_path if isinstance(ref, Kernel) else "baseline"
        if self._reference is None or self._reference[0] != key:
            self._drop_reference()
            if isinstance(ref, Kernel):
                handle = self.backend.load(spec, ref.config, problem, ref.cubin_path)
            else:
                handle = self.backend.load_baseline(spec, problem)
            self._reference = (key, handle)
            use = getattr(self.backend, "use_reference", None)  # a backend that checks outputs against it
            if use is not None:
                use(handle)
        return self._reference[1]

    def _drop_reference(self) -> None:
        if self._reference is not None:
            self.backend.unload(self._reference[1])
            self._reference = None

    def _warm_up(self, handles: Sequence[Any], timing: Timing, session: bool = True) -> None:
        """At least ``warmup`` rounds and ``warmup_ms`` of them: an idle GPU starts at low clocks.

        Sustained: the first trial of a session first runs the reference alone until its time
        is steady (unless :meth:`warm_up` did, or not ``session``), so the GPU reaches the clocks it
        holds under load. Burst: the GPU rests ``idle_s`` first and warms with one round only.
        """
        if timing.regime == "burst":
            time.sleep(timing.idle_s)
            self.backend.time(handles, 1)
            return
        if timing.program:  # each run of a program warms up on its own
            if timing.warmup:
                self.backend.time(handles, timing.warmup)
            return
        if session and self._session is None:
            self._warm_session(handles[0], timing)
        # (the reference paired with itself measured early needs no clocks either: only the first rounds' start-up)
        self._run_for(handles, timing.warmup_ms if session else 0.0, timing.warmup)

    def _run_for(self, handles: Sequence[Any], min_ms: float, min_rounds: int) -> None:
        """At least ``min_rounds`` rounds and ``min_ms`` of device time (launches, not gaps)."""
        busy_ms, rounds = 0.0, 0
        while rounds < min_rounds or busy_ms < min_ms:
            busy_ms += sum(map(sum, self.backend.time(handles, max(1, min_rounds))))
            rounds += max(1, min_rounds)

    def _paired(self, candidate: Any, reference: Any, timing: Timing, channel: Channel, itself: bool = False) -> Measurement:
        """Pairs until the stop rule holds or the parent says stop. ``itself``: the candidate is the
        reference's own config, whose ratio needs no steady GPU; measured before the session is
        steady, its raw times are the warming GPU's and are not kept (``ms`` and ``reference_ms`` None)."""
        early = itself and timing.early_self_pair and self._session is None and not timing.program
        self._warm_up([reference, candidate], timing, session=not early)
        series = PairSeries()
        rule = timing.stop_rule
        step = 0
        while True:
            n = min(timing.block, rule.max_pairs - len(series))
            block = [series.add(c, r) for r, c in self.backend.time([reference, candidate], n)]
            summary = series.summary(timing.block)
            stop = channel.block(step, summary.ratio, block, len(series))
            step += 1
            if stop and not rule.done(summary):
                return Measurement("pruned_slow", reason=f"slower than the best: ratio {summary.ratio:.4f} "
                                   f"[{summary.lo:.4f}, {summary.hi:.4f}] after {len(series)} pairs",
                                   ratio=summary.ratio, reference_ms=summary.reference_ms,
                                   extra=_ratio_attrs(summary, timing))
            if rule.done(summary):
                break
        extra = {**_ratio_attrs(summary, timing), **_sensor_attrs(self.backend.sensors())}
        if self._session is not None and not self._session_reported:  # the first trial tells how the session began
            extra.update(self._session.attrs())
            self._session_reported = True
        if timing.energy_s > 0:
            own = self._energy(candidate, summary.candidate_ms, timing)
            ref = self._energy(reference, summary.reference_ms, timing)
            extra.update({**own.attrs(), **ref.attrs("reference_"), **own.relative_to(ref)})
        if early:
            extra["before_steady"] = True
            return Measurement("ok", ratio=summary.ratio, extra=extra)
        return Measurement("ok", ms=summary.candidate_ms, ratio=summary.ratio, reference_ms=summary.reference_ms,
                           extra=extra)

    def _energy(self, handle: Any, launch_ms: float | None, timing: Timing) -> Energy:
        """``handle`` alone for ``energy_s``, on a window from one energy counter step to another."""
        counter = getattr(self.backend, "energy_counter", lambda: None)()
        if counter is None:
            return Energy(note="this device has no energy counter")
        return measure_energy(lambda n: self.backend.time([handle], n), counter, launch_ms or 1.0, timing.energy_s)


def _tell(ahead: _MeasuredAhead, channel: Channel) -> Measurement:
    """A trial measured ahead, told as it was measured: its blocks, then its outcome (a stop
    changes nothing: the measurement is complete)."""
    channel.ready()
    for block in ahead.blocks:
        channel.block(*block)
    return ahead.measurement


def _paired_with_itself(job: MeasureJob) -> bool:
    return isinstance(job.reference, Kernel) and job.reference.config == job.candidate.config


def _ratio_attrs(summary, timing: Timing) -> dict[str, Any]:
    """The ratio's interval and how it was measured (the ratio itself is a field of the Measurement)."""
    return {
        "ratio_lo": summary.lo,
        "ratio_hi": summary.hi,
        "pairs": summary.pairs,
        "regime": timing.regime,
    }


def _sensor_attrs(after: dict) -> dict[str, Any]:
    """The SM clock after timing. (Energy and power need longer windows: :mod:`tuner.device.energy`.)"""
    return {"sm_clock_mhz": after["sm_clock_mhz"]} if "sm_clock_mhz" in after else {}
