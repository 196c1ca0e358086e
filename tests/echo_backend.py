"""A worker backend that answers host dry runs (tuner/check/host_dry_run.py) without a GPU: its "stub"
writes back what a faithful one receives, so the command's planning, grouping and counting are
tested on the CPU. ``FAKE_ECHO_FLIP=ARG:BYTE`` flips one byte of that argument in every record;
``FAKE_ECHO_CLUSTER=X`` reports clusters X CTAs wide."""

import os
import struct

from tuner.device.echo_stub import HEADER, MAGIC, expected_args


class EchoBackend:
    def hello(self):
        return {"name": "Echo GPU", "sm_count": 132, "cc": [9, 0], "max_smem_per_block": 232448, "driver": 0}

    def prepare(self, spec, problem, seed):
        import numpy as np

        names = [*spec.inputs(problem, np.random.default_rng(seed)), *spec.outputs(problem)]
        self.addresses = {name: 0x7F0000000000 + (i << 32) for i, name in enumerate(names)}

    def buffer_address(self, name):
        return self.addresses[name]

    def tensor_map_bytes(self, tm, address):
        return (struct.pack("<QQQQQQ", address, *tm.shape, *tm.box, tm.swizzle + tm.l2_promotion) * 3)[:128]

    def echo(self, launch, kernel_name, image, record, size):
        assert image[:4] == b"\x7fELF", "the stub arrives as a CUBIN"
        args = expected_args(launch, self.buffer_address, self.tensor_map_bytes)
        cluster = list(launch.cluster)
        cluster[0] = int(os.environ.get("FAKE_ECHO_CLUSTER", cluster[0]))
        values = [MAGIC, *launch.grid, *launch.block, *cluster, cluster[0] * cluster[1] * cluster[2], launch.smem_bytes,
                  launch.grid[0] * launch.grid[1] * launch.grid[2], len(args)]
        raw = bytearray(size)
        struct.pack_into(f"<{len(HEADER)}I", raw, 0, *values)
        at = 64
        flip = os.environ.get("FAKE_ECHO_FLIP")
        for i, arg in enumerate(args):
            arg = bytearray(arg)
            if flip and int(flip.split(":")[0]) == i:
                arg[int(flip.split(":")[1])] ^= 1
            raw[at:at + len(arg)] = arg
            at += (len(arg) + 7) // 8 * 8
        return bytes(raw)
