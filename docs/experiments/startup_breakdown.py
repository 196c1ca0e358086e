"""Where the first trial's seconds go on a GPU host: worker start, inputs, reference.

    python docs/experiments/startup_breakdown.py [STUDY]
"""

import sys
import time

import numpy as np

t0 = time.perf_counter()
from tuner.search.space import Space  # noqa: E402
from tuner.contract.kernel_spec import load_spec  # noqa: E402
from tuner.study.file import load_study  # noqa: E402
from tuner.device.worker import CudaBackend  # noqa: E402

marks = [("imports", time.perf_counter() - t0)]


def mark(label, started):
    marks.append((label, time.perf_counter() - started))


if __name__ == "__main__":
    cfg = load_study(sys.argv[1] if len(sys.argv) > 1 else "studies/patch_embed_sm90a.toml")
    spec = load_spec(cfg.kernel)
    t = time.perf_counter()
    space = Space.from_study(cfg, spec)
    n = len(space.valid)
    mark(f"enumerate {space.total} configs ({n} valid)", t)
    t = time.perf_counter()
    inputs = spec.inputs(cfg.problem, np.random.default_rng(0))
    mark("spec.inputs (host part)", t)
    backend = CudaBackend()
    t = time.perf_counter()
    backend.hello()
    mark("worker: CUDA init", t)
    for attempt in ("first", "again"):
        t = time.perf_counter()
        backend.prepare(spec, cfg.problem, seed=0)
        mark(f"worker: prepare ({attempt}): inputs, helper kernels, expected output", t)
    from tuner.cli.commands import _reference
    from tuner.compile.nvrtc import CompilePool
    from tuner.device.timing import Measurer, Timing
    from tuner.device.protocol import Kernel, MeasureJob

    t = time.perf_counter()
    reference = _reference(cfg, space)
    built = CompilePool(spec, cfg.problem, cfg.arch, jobs=0).result(reference)
    mark(f"reference compile ({built.status})", t)

    class Quiet:  # the parent's side of a measurement: never stops it
        def ready(self):
            pass

        def block(self, step, value, samples, pairs):
            return False

    kernel = Kernel(reference, str(built.cubin_path))
    job = MeasureJob(spec_path=str(spec.path), problem=cfg.problem, seed=0, reference=kernel, candidate=kernel)
    measurer = Measurer(backend)
    t = time.perf_counter()
    measurer.warm_up(job, lambda: True)
    mark(f"worker: session warm-up ({Timing().session_warmup_ms:.0f} ms of reference launches)", t)
    for attempt in ("first", "second"):
        t = time.perf_counter()
        result, _ = measurer.measure(job, Quiet())
        mark(f"worker: measure the reference as a trial ({attempt}: {result.status}, {result.extra.get('pairs')} pairs)", t)
        t = time.perf_counter()
        handle = backend.load(spec, reference, cfg.problem, built.cubin_path)
        mark("  of which load", t)
        t = time.perf_counter()
        backend.check(handle, spec, cfg.problem, 0, 0)
        mark("  of which check", t)
        backend.unload(handle)
    for label, seconds in marks:
        print(f"{seconds:8.3f} s  {label}")
