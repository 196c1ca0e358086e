"""Is a config's ratio to another a property of where their data lies? FC2 (repeat16_fc2.toml),
a BLOCK_N 128 reference against two BLOCK_N 192 configs, in one process: six allocations of the
problem's buffers (each shifted by a kept dummy allocation), three module loads in each, two
60-pair ratios per load. (issue 32; numbers in MEASUREMENT.md)

    python3 docs/experiments/placement_effect.py
"""

import statistics
import time

from tuner.compile.nvrtc import compile_kernel
from tuner.contract.kernel_spec import load_spec
from tuner.device.worker import CudaBackend
from tuner.study.file import load_study


def main() -> None:
    cfg = load_study("docs/experiments/repeat16_fc2.toml")
    spec = load_spec(cfg.kernel)
    base = {**spec.params, **cfg.fixed, "BLOCK_M": 128, "NUM_CONSUMERS": 2, "GROUP_M": 1, "MMA_INFLIGHT": 1,
            "STORE_TMA": 1, "EXTRA_TMA": 1, "EPI_BATCH": 8, "CLUSTER_M": 1, "PINGPONG": 1}
    configs = {"ref": {**base, "BLOCK_N": 128, "N_STAGES": 3}, "c192s3": {**base, "BLOCK_N": 192, "N_STAGES": 3},
               "c192s2": {**base, "BLOCK_N": 192, "N_STAGES": 2}}
    cubins = {k: compile_kernel(spec, c, cfg.problem, cfg.arch).cubin_path for k, c in configs.items()}
    b = CudaBackend()
    b.hello()
    cu = b.cu
    dummies = []

    def measure(handles, rounds=60):
        t = b.time(handles, rounds)
        return [statistics.median(r[i] / r[0] for r in t) for i in (1, 2)]

    for p in range(6):
        if p:
            err, ptr = cu.cuMemAlloc((p * 37 + 5) * 1024 * 1024 + p * 4096 * 3)  # shifts the next allocations
            assert err == cu.CUresult.CUDA_SUCCESS, err
            dummies.append(ptr)
        b.prepare(spec, cfg.problem, seed=0)
        addr = {n: hex(b.buffer_address(n)) for n in list(b.buffers)[:3]}
        hs = {k: b.load(spec, configs[k], cfg.problem, cubins[k]) for k in configs}
        order = [hs["ref"], hs["c192s3"], hs["c192s2"]]
        t0 = time.monotonic()
        while time.monotonic() - t0 < (3.0 if p == 0 else 1.0):
            b.time(order, 10)
        rows = []
        for reload in range(3):
            if reload:
                for k in ("c192s3", "c192s2"):
                    b.unload(hs[k])
                    hs[k] = b.load(spec, configs[k], cfg.problem, cubins[k])
                order = [hs["ref"], hs["c192s3"], hs["c192s2"]]
            rows.append([round(x, 4) for x in measure(order)] + [round(x, 4) for x in measure(order)])
        print("placement", p, addr, "ratios (c192s3, c192s2) x2 per module load:", rows, flush=True)
        for h in hs.values():
            b.unload(h)


if __name__ == "__main__":
    main()
