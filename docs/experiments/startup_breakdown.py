"""Where the first trial's seconds go on a GPU host: the worker's side, step by step, in one process.

    python docs/experiments/startup_breakdown.py [STUDY]

Seconds since this process started (as the worker's are counted from its spawn), each step once
and, where a second time differs (caches), again. The tuner's own side is ``tuner run --json``'s
``startup_s``.
"""

import os
import sys
import time


def process_started() -> float:
    """time.monotonic() at this process's start (as tuner.run.pipeline's, without its imports)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.monotonic() - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


marks: list[tuple[str, float, float]] = []


def step(label: str, t: float) -> None:
    now = time.monotonic()
    marks.append((label, now - started, now - t))


class Quiet:  # the tuner's side of a measurement: never stops it
    def ready(self):
        pass

    def block(self, step, value, samples, pairs):
        return False


def timed(obj, name: str, label: str) -> None:
    """Record each call of ``obj.name`` as a step."""
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t = time.monotonic()
        try:
            return inner(*args, **kwargs)
        finally:
            step(label, t)

    setattr(obj, name, wrapper)


if __name__ == "__main__":
    started = process_started()
    from tuner.device import cuda_start

    cuda_start.begin()  # as a worker process does first
    t = time.monotonic()
    import numpy  # noqa: F401

    step("import numpy", t)
    t = time.monotonic()
    from cuda.bindings import driver  # noqa: F401

    step("import cuda.bindings.driver", t)
    t = time.monotonic()
    from tuner.device.worker import CudaBackend

    step("import tuner.device.worker (the rest)", t)
    from tuner.compile.nvrtc import CompilePool
    from tuner.device import verify
    from tuner.device.protocol import Kernel, MeasureJob
    from tuner.device.timing import Measurer
    from tuner.run.reference import reference_config
    from tuner.run.session import Session

    t = time.monotonic()
    backend = CudaBackend()
    backend.hello()
    step("CUDA init (the rest of cuda_start's, then the backend's calls)", t)
    t = time.monotonic()
    loaded = Session(sys.argv[1] if len(sys.argv) > 1 else "studies/patch_embed_sm90a.toml").load()
    cfg, space = loaded.cfg, loaded.space
    step("study and kernel spec loaded", t)
    timed(verify.DeviceVerifier, "compute_reference", "  of which the expected output (reference kernel)")
    timed(verify, "compile_source", "  of which a helper kernel's compile (cached or not)")
    for attempt in ("first", "again"):
        t = time.monotonic()
        backend.prepare(space.spec, dict(space.problem), 0)
        step(f"prepare ({attempt}): inputs, helper kernels, expected output", t)
    t = time.monotonic()
    reference = reference_config(cfg, space)
    built = CompilePool(space.spec, dict(space.problem), cfg.arch, jobs=0).result(reference)
    step(f"reference build ({built.status})", t)
    kernel = Kernel(reference, str(built.cubin_path))
    job = MeasureJob(spec_path=str(space.spec.path), problem=dict(space.problem), seed=0, reference=kernel,
                     candidate=kernel)
    measurer = Measurer(backend)
    for attempt in ("first, early", "second, after the warm-up"):
        t = time.monotonic()
        result, _ = measurer.measure(job, Quiet())
        step(f"measure the reference paired with itself ({attempt}: {result.status}, "
             f"{result.extra.get('pairs')} pairs, check {result.extra.get('check_ms')} ms)", t)
    for label, at, took in marks:
        print(f"{at:7.3f} s  {took:7.3f} s  {label}")
