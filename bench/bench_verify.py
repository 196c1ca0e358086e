"""What the full-output check costs (on a GPU host): each step timed with CUDA events against
the kernel's own launch, at full size, for the studies' best known configs.

    python3 bench/bench_verify.py [patch_embed_sm90a fc1_sm90a fc2_sm90a]

Prints per study: one launch, the comparison kernel, the poison, the hash pass, the whole
``_check`` (wall clock, relaunch included), and the check as a share of a trial's launches
(the checked launch, the warm-up and ``min_pairs`` timed pairs against a reference of the
same speed, with the study's [measure] settings: the shortest trial, so the largest share).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.compile import compile_kernel
from tuner.driver import check as ck
from tuner.driver import kernel_params, launch_config
from tuner.precision import fast
from tuner.spec import DeviceInfo, load_spec
from tuner.study_file import load_study
from tuner.worker import CudaBackend

ROOT = Path(__file__).resolve().parents[1]


def timed(backend, fn, reps: int = 5) -> float:
    cu = backend.cu
    start, end = ck("cuEventCreate", cu.cuEventCreate(0)), ck("cuEventCreate", cu.cuEventCreate(0))
    out = []
    for _ in range(reps):
        ck("cuEventRecord", cu.cuEventRecord(start, backend.stream))
        fn()
        ck("cuEventRecord", cu.cuEventRecord(end, backend.stream))
        ck("cuStreamSynchronize", cu.cuStreamSynchronize(backend.stream))
        out.append(ck("cuEventElapsedTime", cu.cuEventElapsedTime(start, end)))
    return statistics.median(out)


def main(studies: list[str]) -> None:
    backend = CudaBackend()
    dev = backend.hello()
    for name in studies or ["patch_embed_sm90a", "fc1_sm90a", "fc2_sm90a"]:
        bench_study(backend, dev, name)


def bench_study(backend: CudaBackend, dev: dict, name: str) -> None:
    cu = backend.cu
    cfg = load_study(ROOT / "studies" / f"{name}.toml")
    spec = load_spec(cfg.kernel)
    config = {**cfg.fixed, **cfg.search.start[0]}
    started = time.perf_counter()
    backend.prepare(spec, cfg.problem, seed=0)
    prepare_s = time.perf_counter() - started
    built = compile_kernel(spec, config, cfg.problem, cfg.arch)
    launch = spec.launch({**spec.params, **config}, cfg.problem,
                         DeviceInfo(dev["name"], dev["sm_count"], tuple(dev["cc"]), dev["max_smem_per_block"]))
    module = ck("cuModuleLoadData", cu.cuModuleLoadData(Path(built.cubin_path).read_bytes()))
    func = ck("cuModuleGetFunction", cu.cuModuleGetFunction(module, spec.kernel_name.encode()))
    ck("cuFuncSetAttribute", cu.cuFuncSetAttribute(
        func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.smem_bytes))
    params, keep = kernel_params(launch, lambda n: int(backend.buffers[n]))
    lc = launch_config(launch, backend.stream, func)
    run = lambda: ck("cuLaunchKernelEx", cu.cuLaunchKernelEx(lc, func, params, 0))  # noqa: E731
    out = backend.outputs["C"]
    v = backend.verifier
    for _ in range(20):  # clocks up
        run()
    kernel = timed(backend, run, 20)
    compare = timed(backend, lambda: v.compare(backend.buffers["C"], out, fast(spec)))
    poison = timed(backend, backend._poison)
    hashing = timed(backend, lambda: v.relaunch_differs(backend.buffers["C"]))
    walls = []
    for _ in range(5):
        backend._poison()
        run()
        ck("cuStreamSynchronize", cu.cuStreamSynchronize(backend.stream))
        walls.append(backend._check(spec, cfg.problem, 0, 0, run).check_ms)
    check_ms = statistics.median(walls)
    m = cfg.measure
    # paired timing against a reference of about the same speed, at its fewest pairs
    trial = kernel + max(m.warmup_ms, m.warmup * 2 * kernel) + m.min_pairs * 2 * kernel
    print(f"{name}: prepare {prepare_s:.1f} s (reference kernel {v.reference_ms:.1f} ms); launch {kernel:.3f} ms; "
          f"compare {compare:.3f} ms, poison {poison:.3f} ms, hash {hashing:.3f} ms; whole check {check_ms:.2f} ms "
          f"= {100 * check_ms / trial:.2f} % of a trial's {trial:.1f} ms of launches")
    cu.cuModuleUnload(module)


if __name__ == "__main__":
    main(sys.argv[1:])
