"""A worker backend without a GPU: the measurement protocol runs on it unchanged.

It really runs in the worker process and really misbehaves: PLANT_HANG=1 spins
forever, CRASH=1 kills the process (like a segfault in the driver would), STICKY=1
reports a poisoned context, PLANT_BUG=1 gives a wrong output. Otherwise a config's
time is a smooth function of its values, times a clock that drifts slowly (a sine of
``FAKE_DRIFT`` amplitude over ``FAKE_DRIFT_PERIOD`` launches, as a power-capped GPU's
does) with ``FAKE_NOISE`` relative noise per launch.

Fixed delays make the pipeline's timing testable: ``FAKE_START_DELAY_S`` (worker start, as
CUDA initialisation), ``FAKE_PREPARE_DELAY_S`` (a problem's inputs), ``FAKE_TRIAL_DELAY_S``
(each measurement). :func:`fake_nvrtc` stands in for NVRTC (``TUNER_COMPILER``): it sleeps
``FAKE_COMPILE_DELAY_S`` and reports ptxas figures; THREAD_TILE=8 spills (a rejection
that must never reach the worker).
"""

import math
import os
import time

import numpy as np

from tuner.measure import LaunchFailed
from tuner.record import Measurement


def base_ms(config: dict) -> float:
    return 1.0 + 0.1 * sum(v for v in config.values() if isinstance(v, int) and not isinstance(v, bool)) / 100


class FakeBackend:
    def __init__(self):
        self.drift = float(os.environ.get("FAKE_DRIFT", "0.05"))
        self.period = float(os.environ.get("FAKE_DRIFT_PERIOD", "2000"))
        self.noise = float(os.environ.get("FAKE_NOISE", "0.002"))
        self.rng = np.random.default_rng(int(os.environ.get("FAKE_SEED", "0")))
        self.launches = 0

    def hello(self):
        time.sleep(float(os.environ.get("FAKE_START_DELAY_S", "0")))
        cc = [int(x) for x in os.environ.get("FAKE_CC", "9.0").split(".")]  # the compute capability it reports
        return {"name": "Fake GPU", "sm_count": 4, "cc": cc, "max_smem_per_block": 232448, "driver": 0,
                "pid": os.getpid(), "uuid": "GPU-fake"}

    def prepare(self, spec, problem, seed):
        time.sleep(float(os.environ.get("FAKE_PREPARE_DELAY_S", "0")))
        self.prepared = getattr(self, "prepared", 0) + 1

    def load(self, spec, config, problem, cubin_path):
        return dict(config)

    def load_baseline(self, spec, problem):
        return {"BASELINE_MS": 1.2}

    def unload(self, handle):
        pass

    def check(self, handle, spec, problem, check_rows, seed):
        if handle.get("PLANT_HANG"):
            while True:  # a kernel that never finishes
                time.sleep(0.01)
        if handle.get("CRASH"):
            os._exit(77)
        if handle.get("STICKY"):
            raise LaunchFailed("CUDA_ERROR_ILLEGAL_ADDRESS", restart=True)
        time.sleep(float(os.environ.get("FAKE_TRIAL_DELAY_S", "0")))
        if handle.get("PLANT_BUG"):
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
                row[i] = nominal * self.clock() * (1.0 + self.noise * self.rng.standard_normal())
                self.launches += 1
            times.append(row)
        return times

    def sensors(self):
        return {"sm_clock_mhz": round(1500 / self.clock())}


def fake_nvrtc(bundle, options):
    """NVRTC's place (``TUNER_COMPILER=tests/fake_backend.py:fake_nvrtc``): a fixed delay, a ptxas log."""
    time.sleep(float(os.environ.get("FAKE_COMPILE_DELAY_S", "0")))
    spill = 64 if "-DTHREAD_TILE=8" in options else 0
    log = (f"ptxas info    : Used 64 registers, 0 bytes stack frame, {spill} bytes spill stores, "
           f"{spill} bytes spill loads\nptxas info    : Used 0 bytes smem\n")
    return True, log, b"FAKE CUBIN " + " ".join(options).encode()
