"""What the full-output check costs (on a GPU host): each step timed with CUDA events against
the kernel's own launch, at full size, for the studies' best known configs.

    python3 bench/bench_verify.py [patch_embed_sm90a fc1_sm90a fc2_sm90a]

Prints per study: one launch, the comparison kernel, the poison, the hash pass, the whole
check (``check_ms`` of :meth:`CudaBackend.check`: wall clock, relaunch included), and the check as a share of a trial's launches
(the checked launch, the warm-up and ``min_pairs`` timed pairs against a reference of the
same speed, with the study's [measure] settings: the shortest trial, so the largest share).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.compile.nvrtc import compile_kernel
from tuner.contract.kernel_spec import load_spec
from tuner.contract.precision import fast
from tuner.device.worker import CudaBackend
from tuner.study.file import load_study

ROOT = Path(__file__).resolve().parents[1]


class Step:
    """A host function queued like a kernel, for :meth:`CudaBackend.time` (CUDA events around it)."""

    def __init__(self, fn):
        self.run = fn


def timed(backend: CudaBackend, fn, reps: int = 5) -> float:
    return statistics.median(r[0] for r in backend.time([Step(fn)], reps))


def main(studies: list[str]) -> None:
    backend = CudaBackend()
    backend.hello()
    for name in studies or ["patch_embed_sm90a", "fc1_sm90a", "fc2_sm90a"]:
        bench_study(backend, name)


def bench_study(backend: CudaBackend, name: str) -> None:
    cfg = load_study(ROOT / "studies" / f"{name}.toml")
    spec = load_spec(cfg.kernel)
    config = {**cfg.fixed, **cfg.search.start[0]}
    started = time.perf_counter()
    backend.prepare(spec, cfg.problem, seed=0)
    prepare_s = time.perf_counter() - started
    built = compile_kernel(spec, config, cfg.problem, cfg.arch)
    handle = backend.load(spec, {**spec.params, **config}, cfg.problem, built.cubin_path)
    out = backend.outputs["C"]
    v = backend.verifier
    for _ in range(20):  # clocks up
        handle.run()
    kernel = timed(backend, handle.run, 20)
    compare = timed(backend, lambda: v.compare(backend.buffers["C"], out, fast(spec)))
    poison = timed(backend, backend.poison)
    hashing = timed(backend, lambda: v.relaunch_differs(backend.buffers["C"]))
    walls = [backend.check(handle, spec, cfg.problem, 0, 0).extra["check_ms"] for _ in range(5)]
    check_ms = statistics.median(walls)
    m = cfg.measure
    # paired timing against a reference of about the same speed, at its fewest pairs
    trial = kernel + max(m.warmup_ms, m.warmup * 2 * kernel) + m.min_pairs * 2 * kernel
    print(f"{name}: prepare {prepare_s:.1f} s (reference kernel {v.reference_ms:.1f} ms); launch {kernel:.3f} ms; "
          f"compare {compare:.3f} ms, poison {poison:.3f} ms, hash {hashing:.3f} ms; whole check {check_ms:.2f} ms "
          f"= {100 * check_ms / trial:.2f} % of a trial's {trial:.1f} ms of launches")
    backend.unload(handle)


if __name__ == "__main__":
    main(sys.argv[1:])
