"""Warm-up to steady state: run a kernel until its time stops moving, with a cap.

A GPU that has been idle starts a session at other clocks than it holds under load, and
kernels do not all scale alike with the clock, so even a paired ratio measured then is
off (by ~1 % for a 10 % clock difference, measured on an H200: docs/experiments/MEASUREMENT.md). Before the
first trial of a session the worker runs the reference in blocks of about ``block_ms``
of device time and stops when the medians of the last ``blocks`` blocks lie within
``tolerance`` of each other and a line through the last ``2 * blocks`` shows no trend
(:meth:`SteadyRule.holds`), or when the cap is reached: then the session is recorded as
not steady (``session_steady``, with the spread its last blocks still showed). A ratio that
moves during a trial widens that trial's interval (:meth:`tuner.measurement.paired.PairSeries.summary`).

Time here is device time (the launches' own durations), so the rule is tested on a fake
backend without a clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast


@dataclass(frozen=True)
class SteadyRule:
    # the last blocks' medians within this (max / min - 1): an H200 at its 700 W cap keeps 100 ms block
    # medians ~1.2 % apart once loaded, so a tighter spread never holds there and only the trend (half
    # of this) tells a ramp from the cap's wobble
    tolerance: float = 0.015
    blocks: int = 4
    block_ms: float = 100.0  # device time per block
    min_ms: float = 1000.0  # at least this long in all
    cap_ms: float = 4000.0  # at most this long: then not steady

    def holds(self, medians: Sequence[float]) -> bool:
        """Steady: the last ``blocks`` block medians agree within ``tolerance``, and a straight
        line through the last ``2 * blocks`` moves less than half of it over their span (a slow
        ramp moves less than the noise from one block to the next, not over several)."""
        if len(medians) < 2 * self.blocks:
            return False
        return spread(medians[-self.blocks:]) <= self.tolerance and abs(trend(medians[-2 * self.blocks:])) <= self.tolerance / 2


@dataclass(frozen=True)
class WarmUp:
    """How a session's warm-up ended."""

    steady: bool
    ms: float  # device time it ran
    launches: int
    reference_ms: float  # the kernel's median time in the last blocks
    drift: float  # the last blocks' spread (max / min - 1)

    def attrs(self) -> dict:
        return {"session_warmup_s": round(self.ms / 1e3, 3), "session_steady": self.steady,
                "session_drift": round(self.drift, 5)}


def spread(values: Sequence[float]) -> float:
    return max(values) / min(values) - 1.0


def trend(values: Sequence[float]) -> float:
    """The least-squares line's change from the first value to the last, relative to the mean."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, statistics.fmean(values)
    slope = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values)) / sum((i - mean_x) ** 2 for i in range(n))
    return slope * (n - 1) / mean_y


class SessionWarmUp:
    """A session's warm-up as it goes. It can stop between blocks and resume where it stopped, so
    that a trial that needs no steady GPU (the reference paired with itself: both sides of every
    pair see the same clock) is measured while the GPU still warms."""

    def __init__(self, rule: SteadyRule):
        self.rule = rule
        self.medians: list[float] = []
        self.busy_ms = 0.0
        self.launches = 0
        self._per_block = 0  # launches per block, from the first launches' time
        self.outcome: WarmUp | None = None

    def run(self, launch: Callable[[int], list[float]], interrupted: Callable[[], bool] = lambda: False) -> WarmUp | None:
        """``launch(n)`` launches the kernel n times and returns their times (ms); blocks until the
        rule holds or the cap (the outcome), or None once ``interrupted()`` says so between blocks."""
        rule = self.rule
        if not self._per_block:
            first = self._add(launch(10))
            self._per_block = max(10, round(rule.block_ms / max(statistics.median(first), 1e-6)))
        while self.outcome is None:
            if interrupted():
                return None
            self.medians.append(statistics.median(self._add(launch(self._per_block))))
            steady = self.busy_ms >= rule.min_ms and rule.holds(self.medians)
            if steady or self.busy_ms >= rule.cap_ms:
                last = self.medians[-rule.blocks:]
                self.outcome = WarmUp(steady, self.busy_ms, self.launches, statistics.median(last), spread(last))
        return self.outcome

    def _add(self, times: list[float]) -> list[float]:
        self.busy_ms += sum(times)
        self.launches += len(times)
        return times


def warm_until_steady(launch: Callable[[int], list[float]], rule: SteadyRule) -> WarmUp:
    """``launch(n)`` launches the kernel n times and returns their times (ms); until ``rule`` holds or the cap."""
    return cast(WarmUp, SessionWarmUp(rule).run(launch))
