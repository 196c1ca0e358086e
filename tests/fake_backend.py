"""A worker backend without a GPU, for testing the supervisor's fault handling.

It really runs in the worker process and really misbehaves: PLANT_HANG=1 spins
forever, CRASH=1 kills the process (like a segfault in the driver would), STICKY=1
reports a poisoned context. Otherwise its time is a smooth function of the config.
"""

import os
import time

from tuner.record import Measurement


class FakeBackend:
    def hello(self):
        return {"name": "Fake GPU", "sm_count": 4, "cc": [9, 0], "max_smem_per_block": 232448, "driver": 0, "pid": os.getpid()}

    def measure(self, job, channel):
        config = job["config"]
        channel.ready()
        if config.get("PLANT_HANG"):
            while True:  # a kernel that never finishes
                time.sleep(0.01)
        if config.get("CRASH"):
            os._exit(77)
        if config.get("STICKY"):
            return Measurement("launch_error", reason="CUDA_ERROR_ILLEGAL_ADDRESS"), True
        time.sleep(float(os.environ.get("FAKE_TRIAL_DELAY_S", "0")))
        ms = 1.0 + 0.1 * sum(v for v in config.values() if isinstance(v, int)) / 100
        blocks = []
        repeats, block = job.get("repeats", 20), job.get("block", 10)
        for step in range((repeats + block - 1) // block):
            blocks.append(ms)
            if channel.block(step, ms):
                return Measurement("pruned_slow", reason="stopped", blocks=blocks), False
        return Measurement("ok", ms=ms, blocks=blocks), False
