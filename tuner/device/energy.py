"""Energy per launch from the device's running energy counter, over windows it can resolve.

NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ) does not
move continuously: it steps every few tens of milliseconds (``bench/energy_probe.py``
measures the period on a device). A paired trial lasts tens of milliseconds, so its
counter difference is zero or one step: no measurement. Here one kernel runs alone, in
small batches, for a window that starts and ends on a counter step: the energy between
two steps is then exact up to the counter's resolution, and the launches between them are
known up to one batch at each end. That is the value's uncertainty; a window that sees
fewer than ``min_steps`` steps gives no value, and neither does one whose mean power is
above the device's enforced power limit (the limit holds over such windows: a higher
reading is a measurement error).

The counter and the launches are seams (:class:`Counter`, a ``run(n)`` callable), so the
logic is tested on a fake counter with an injected clock.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: fewest counter steps a window must span for a value
MIN_STEPS = 3
#: launches are issued in batches of about this many milliseconds between counter reads
POLL_MS = 5.0


@dataclass(frozen=True)
class Reading:
    seconds: float  # when it was read (any monotonic clock)
    mj: float  # the running total, millijoules


class Counter(Protocol):
    def read(self) -> Reading: ...

    def power_limit_w(self) -> float | None:
        """The device's enforced power limit, where known."""
        ...


@dataclass(frozen=True)
class Energy:
    """One kernel's energy over a step-aligned window; values None with a ``note`` when the
    window cannot support one."""

    mj_per_launch: float | None = None
    mj_per_launch_err: float | None = None
    power_w: float | None = None
    power_w_err: float | None = None
    window_s: float = 0.0
    steps: int = 0
    launches: int = 0
    step_ms: float | None = None  # the counter's median step interval seen in the window
    note: str = ""

    def attrs(self, prefix: str = "") -> dict[str, Any]:
        """Trial attributes: absent rather than null; the note when there is no value."""
        out: dict[str, Any] = {}
        if self.mj_per_launch is not None and self.power_w is not None:
            out[f"{prefix}energy_mj_per_launch"] = round(self.mj_per_launch, 4)
            out[f"{prefix}energy_mj_per_launch_err"] = round(self.mj_per_launch_err or 0.0, 4)
            out[f"{prefix}power_w"] = round(self.power_w, 1)
            out[f"{prefix}power_w_err"] = round(self.power_w_err or 0.0, 1)
        if self.steps:
            out[f"{prefix}energy_window_s"] = round(self.window_s, 3)
            out[f"{prefix}energy_steps"] = self.steps
        if self.step_ms is not None:
            out[f"{prefix}energy_step_ms"] = round(self.step_ms, 2)
        if self.note:
            out[f"{prefix}energy_note"] = self.note
        return out

    def relative_to(self, reference: Energy) -> dict[str, Any]:
        """Trial attributes: energy per launch as a ratio to the reference's, measured in the same
        trial (absent where either has no value). Like the time ratio, it compares across GPUs and
        sessions where millijoules do not: the reference shares the GPU's power state and history."""
        if not (self.mj_per_launch and reference.mj_per_launch):
            return {}
        ratio = self.mj_per_launch / reference.mj_per_launch
        err = ratio * math.hypot((self.mj_per_launch_err or 0.0) / self.mj_per_launch,
                                 (reference.mj_per_launch_err or 0.0) / reference.mj_per_launch)
        return {"energy_ratio": round(ratio, 5), "energy_ratio_err": round(err, 5)}


def measure_energy(
    run: Callable[[int], Any],
    counter: Counter,
    launch_ms: float,
    seconds: float,
    min_steps: int = MIN_STEPS,
    poll_ms: float = POLL_MS,
    resolution_mj: float = 1.0,
) -> Energy:
    """Run one kernel alone (``run(n)`` launches it n times and waits) for about ``seconds``,
    from one counter step to the first step after ``seconds``; its energy per launch and power.

    ``launch_ms`` (the kernel's time) sizes the batches between counter reads.
    """
    batch = max(1, round(poll_ms / max(launch_ms, 1e-6)))
    patience_s = max(seconds, 1.0)  # how long to wait for a step before giving up
    start = counter.read()
    previous = start
    while True:  # to the first step: the window starts on one
        run(batch)
        first = counter.read()
        if first.mj != previous.mj:
            break
        if first.seconds - start.seconds > patience_s:
            return Energy(note=f"the energy counter did not move in {patience_s:g} s")
        previous = first
    steps, launches, last, step_times = 0, 0, first, [first.seconds]
    while True:
        run(batch)
        launches += batch
        now = counter.read()
        if now.mj != last.mj:
            steps += 1
            step_times.append(now.seconds)
            last = now
            if now.seconds - first.seconds >= seconds:
                break
        elif now.seconds - max(last.seconds, first.seconds + seconds) > patience_s:
            break  # the counter stopped: what was seen so far decides
    return _result(first, last, steps, launches, batch, step_times, min_steps, resolution_mj, counter.power_limit_w())


def _result(first: Reading, last: Reading, steps: int, launches: int, batch: int, step_times: list[float],
            min_steps: int, resolution_mj: float, limit_w: float | None) -> Energy:
    window_s = last.seconds - first.seconds
    step_ms = statistics.median(b - a for a, b in itertools.pairwise(step_times)) * 1e3 if steps else None
    seen = Energy(window_s=window_s, steps=steps, launches=launches, step_ms=step_ms)
    if steps < min_steps:
        return _without(seen, f"the window saw {steps} energy counter steps (fewer than {min_steps}): "
                              "raise [measure] energy_s")
    # each step fell somewhere in the batch before its read: the first step's batch is not
    # counted, the last one's is, so ``launches`` is right within one batch either way
    joules_mj = last.mj - first.mj
    relative = batch / launches + resolution_mj / joules_mj
    power = joules_mj / 1e3 / window_s
    if limit_w is not None and power > limit_w:
        return _without(seen, f"mean power {power:.0f} W over {window_s:.2f} s is above the enforced limit "
                              f"{limit_w:.0f} W: a measurement error")
    per_launch = joules_mj / launches
    return Energy(per_launch, per_launch * relative, power, power * relative, window_s, steps, launches, step_ms)


def _without(seen: Energy, note: str) -> Energy:
    return Energy(window_s=seen.window_s, steps=seen.steps, launches=seen.launches, step_ms=seen.step_ms, note=note)


class NvmlCounter:
    """NVML's total-energy counter of one device (``cuda.bindings.nvml``, as the worker reads NVML)."""

    def __init__(self, handle: Any):
        from cuda.bindings import nvml

        self._nvml = nvml
        self._handle = handle

    def read(self) -> Reading:
        mj = float(self._nvml.device_get_total_energy_consumption(self._handle))
        return Reading(time.perf_counter(), mj)

    def power_limit_w(self) -> float | None:
        try:
            return float(self._nvml.device_get_enforced_power_limit(self._handle)) / 1e3  # mW
        except Exception:
            return None
