"""A worker backend without a GPU: the measurement protocol runs on it unchanged.

It really runs in the worker process and really misbehaves: PLANT_HANG=1 spins
forever, CRASH=1 kills the process (like a segfault in the driver would), STICKY=1
reports a poisoned context, PLANT_BUG=1 gives a wrong output. Otherwise a config's
time is a smooth function of its values, times a clock that drifts slowly (a sine of
``FAKE_DRIFT`` amplitude over ``FAKE_DRIFT_PERIOD`` launches, as a power-capped GPU's
does) with ``FAKE_NOISE`` relative noise per launch. A planted cold start: the 1 ms every config shares
(its compute part, which scales with the clock) starts ``FAKE_COLD`` faster and ramps down
to its loaded time over the first ``FAKE_COLD_LAUNCHES`` launches, while the config-dependent
rest does not scale, as on a GPU that warms to its loaded clocks: raw times start ~9 % low
for FAKE_COLD=0.1, and ratios move too (by ~1.5 % for X=300 against X=100). A planted session shift:
with ``FAKE_SESSION_SHIFT`` every kernel timed beside the reference (the first of a paired or
round-robin timing) runs that much slower than in other sessions, as the ratios of kernels that
scale unalike with the clock move between two GPUs; pairing cannot cancel it.

Time is virtual: each launch advances a clock by its own duration, and an energy counter
(:class:`FakeEnergyCounter`) publishes the energy drawn at ``FAKE_POWER_W`` (or a config's
``POWER_W``) in steps every ``FAKE_ENERGY_STEP_S``, as NVML's does.

Fixed delays make the pipeline's timing testable: ``FAKE_START_DELAY_S`` (worker start, as
CUDA initialisation), ``FAKE_PREPARE_DELAY_S`` (a problem's inputs), ``FAKE_TRIAL_DELAY_S``
(each measurement). :func:`fake_nvrtc` stands in for NVRTC (``TUNER_COMPILER``): it sleeps
``FAKE_COMPILE_DELAY_S`` and reports ptxas figures; THREAD_TILE=8 spills (a rejection
that must never reach the worker).
"""

import json
import math
import os
import time

import numpy as np

from tuner.device.energy import Reading
from tuner.device.timing import LaunchFailed
from tuner.measurement.value import Measurement


def _fails_here(config: dict) -> bool:
    """``FAKE_MISMATCH_IF="A=1,B=2"``: a config with these defines fails its output check in this
    session (as under a stricter precision class, or on another GPU)."""
    wanted = os.environ.get("FAKE_MISMATCH_IF")
    return bool(wanted) and all(str(config.get(k)) == v for k, v in (p.split("=") for p in wanted.split(",")))


def base_ms(config: dict) -> float:
    return 1.0 + 0.1 * sum(v for v in config.values() if isinstance(v, int) and not isinstance(v, bool)) / 100


class FakeEnergyCounter:
    """A running energy counter on a virtual clock that publishes only every ``step_s``."""

    def __init__(self, step_s: float = 0.1, limit_w: float | None = 700.0):
        self.step_s, self.limit_w = step_s, limit_w
        self.now_s, self.mj, self.published_mj = 0.0, 0.0, 0.0
        self.boundary_s = step_s  # the next step (kept, not recomputed from a clock summed in floats)

    def advance(self, seconds: float, watts: float) -> None:
        """``seconds`` pass at ``watts``; each step boundary crossed publishes the total at it."""
        end = self.now_s + seconds
        while self.boundary_s <= end:
            self.published_mj = self.mj + watts * (self.boundary_s - self.now_s) * 1e3
            self.boundary_s += self.step_s
        self.mj += watts * seconds * 1e3
        self.now_s = end

    def read(self) -> Reading:
        return Reading(self.now_s, self.published_mj)

    def power_limit_w(self) -> float | None:
        return self.limit_w


class FakeBackend:
    def __init__(self):
        self.drift = float(os.environ.get("FAKE_DRIFT", "0.05"))
        self.period = float(os.environ.get("FAKE_DRIFT_PERIOD", "2000"))
        self.noise = float(os.environ.get("FAKE_NOISE", "0.002"))
        self.cold = float(os.environ.get("FAKE_COLD", "0"))
        self.cold_launches = int(os.environ.get("FAKE_COLD_LAUNCHES", "0"))
        self.session_shift = float(os.environ.get("FAKE_SESSION_SHIFT", "0"))
        self.watts = float(os.environ.get("FAKE_POWER_W", "300"))
        #: power ~ nominal time ** -FAKE_POWER_EXP: with an exponent above 1 a faster config takes more
        #: energy per launch (a time-energy trade-off, a Pareto front of several configs)
        self.power_exp = float(os.environ.get("FAKE_POWER_EXP", "0"))
        self.counter = FakeEnergyCounter(float(os.environ.get("FAKE_ENERGY_STEP_S", "0.1")),
                                         float(os.environ.get("FAKE_POWER_LIMIT_W", "700")))
        self.rng = np.random.default_rng(int(os.environ.get("FAKE_SEED", "0")))
        self.launches = 0

    def hello(self):
        time.sleep(float(os.environ.get("FAKE_START_DELAY_S", "0")))
        cc = [int(x) for x in os.environ.get("FAKE_CC", "9.0").split(".")]  # the compute capability it reports
        return {"name": "Fake GPU", "sm_count": 4, "cc": cc, "max_smem_per_block": 232448, "driver": 0,
                "pid": os.getpid(), "uuid": f"GPU-fake-{os.environ.get('CUDA_VISIBLE_DEVICES', '0')}"}

    def prepare(self, spec, problem, seed):
        time.sleep(float(os.environ.get("FAKE_PREPARE_DELAY_S", "0")))
        self.prepared = getattr(self, "prepared", 0) + 1

    def load(self, spec, config, problem, cubin_path):
        return dict(config)

    def load_baseline(self, spec, problem):
        return {"BASELINE_MS": 1.2}

    def unload(self, handle):
        pass

    def check(self, handle, spec, problem, check_rows, seed, tolerance=None):
        if handle.get("PLANT_HANG"):
            while True:  # a kernel that never finishes
                time.sleep(0.01)
        if handle.get("CRASH"):
            os._exit(77)
        if handle.get("STICKY"):
            raise LaunchFailed("CUDA_ERROR_ILLEGAL_ADDRESS", restart=True)
        time.sleep(float(os.environ.get("FAKE_TRIAL_DELAY_S", "0")))
        if os.environ.get("FAKE_TOLERANCE_LOG"):  # what reached the check: the study's precision class
            with open(os.environ["FAKE_TOLERANCE_LOG"], "a") as log:
                log.write(json.dumps(tolerance) + "\n")
        if handle.get("PLANT_BUG") or _fails_here(handle):
            return Measurement("mismatch", reason="row 0 col 1: got 2, expected 1")
        return Measurement("ok", checksum=1.0, max_err=0.01)

    def clock(self) -> float:
        """Relative speed of the fake GPU right now (1 = nominal)."""
        return 1.0 + self.drift * math.sin(2 * math.pi * self.launches / self.period)

    def time(self, handles, rounds):
        times = []
        for r in range(rounds):
            row = [0.0] * len(handles)
            for j in range(len(handles)):
                i = (r + j) % len(handles)
                nominal = handles[i].get("BASELINE_MS") or base_ms(handles[i])
                if self.launches < self.cold_launches:
                    nominal -= self.cold * (1.0 - self.launches / self.cold_launches)
                if i > 0:  # not the reference
                    nominal *= 1.0 + self.session_shift
                row[i] = nominal * self.clock() * (1.0 + self.noise * self.rng.standard_normal())
                watts = (handles[i].get("POWER_W") or self._watts(handles[i])) * nominal ** -self.power_exp  # faster: hotter
                self.counter.advance(row[i] / 1e3, watts)
                self.launches += 1
            times.append(row)
        return times

    def _watts(self, handle) -> float:
        """``FAKE_POWER_AXIS=NAME``: a config draws ``FAKE_POWER_W`` x its NAME define (a search axis of any kernel)."""
        axis = os.environ.get("FAKE_POWER_AXIS")
        return self.watts * float(handle[axis]) if axis and axis in handle else self.watts

    def profiled(self, handle):
        if os.environ.get("FAKE_PROFILED_LOG"):  # the launch a profiler would have seen
            with open(os.environ["FAKE_PROFILED_LOG"], "a") as log:
                log.write(json.dumps(handle) + "\n")

    def sensors(self):
        return {"sm_clock_mhz": round(1500 / self.clock())}

    def energy_counter(self):
        return self.counter


def fake_nvrtc(bundle, options):
    """NVRTC's place (``TUNER_COMPILER=tests/fake_backend.py:fake_nvrtc``): a fixed delay, a ptxas log."""
    time.sleep(float(os.environ.get("FAKE_COMPILE_DELAY_S", "0")))
    spill = 64 if "-DTHREAD_TILE=8" in options else 0
    log = (f"ptxas info    : Used 64 registers, 0 bytes stack frame, {spill} bytes spill stores, "
           f"{spill} bytes spill loads\nptxas info    : Used 0 bytes smem\n")
    return True, log, b"FAKE CUBIN " + " ".join(options).encode()
