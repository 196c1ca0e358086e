"""Compile one configuration with NVRTC to a CUBIN, read ptxas's figures, cache the result;
and compile many at once (:class:`CompilePool`), NVRTC's or a program kernel's own build.

NVRTC is driven through ``cuda.bindings.nvrtc``; defines travel as ``-D`` options in a
list (never through a shell). The cache key covers everything that changes the binary:
the source with its local includes, the options, the NVRTC version and the arch.
Cache writes go to a temporary file and are renamed into place, so several processes
can share one cache directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tuner.compile.build import (
    BuildCache,
    CompileLimits,
    CompileResult,
    apply_limits,
    default_cache_dir,
    parse_ptxas,
    warn_once,
)
from tuner.contract.kernel_spec import Config, KernelSpec, Problem, load_spec
from tuner.contract.program import ProgramSpec
from tuner.contract.source import SourceBundle
from tuner.lifetime import helper_pool
from tuner.plugin import load_object


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return f"{major}.{minor}"


def compile_options(spec: KernelSpec, config: Config, problem: Problem, arch: str) -> list[str]:
    return [f"--gpu-architecture={arch}", "--ptxas-options=-v", *spec.compile_options, *spec.flags(config, problem).split()]


def cache_key(bundle: SourceBundle, options: Sequence[str]) -> str:
    """The compile cache's key of a build: the source with its includes, NVRTC's version, the options."""
    return hashlib.sha256("\0".join([bundle.digest(), nvrtc_version(), *options]).encode()).hexdigest()[:32]


def compile_kernel(
    spec: KernelSpec,
    config: Config,
    problem: Problem,
    arch: str,
    cache_dir: Path | str | None = None,
    limits: CompileLimits | None = None,
) -> CompileResult:
    """Compile ``config`` for ``arch``; return stats, the CUBIN's path and a status. (A kernel that is
    its own program is built by its own command: :mod:`tuner.compile.program`.)"""
    limits = limits or CompileLimits()
    if isinstance(spec, ProgramSpec):
        from tuner.compile.program import build_program

        return build_program(spec, config, problem, arch, cache_dir, limits)
    build = _Build.of(spec, config, problem, arch, cache_dir)
    hit = build.cached(limits)
    if hit is not None:
        return hit
    start = time.perf_counter()
    ok, log, cubin = _compiler()(build.bundle, build.options)
    elapsed = time.perf_counter() - start
    if not ok:
        first = next((line for line in log.splitlines() if "error" in line), "compile failed")
        result = CompileResult("compile_error", first.strip()[:300], compile_s=elapsed, log=log, flags=build.flags)
        build.cache.put(build.key, result, None)
        return result
    stats = parse_ptxas(log)
    result = CompileResult("ok", compile_s=elapsed, log=log, flags=build.flags, **stats)
    build.cache.put(build.key, result, cubin)
    return apply_limits(result, limits)


@dataclass(frozen=True)
class _Build:
    """One config's build: what NVRTC is given, and where the compile cache keeps its result."""

    bundle: SourceBundle
    options: list[str]
    flags: str
    key: str
    cache: BuildCache

    @classmethod
    def of(cls, spec: KernelSpec, config: Config, problem: Problem, arch: str, cache_dir: Path | str | None) -> _Build:
        bundle = SourceBundle.load(spec.source_path)
        options = compile_options(spec, config, problem, arch)
        return cls(bundle, options, spec.flags(config, problem), cache_key(bundle, [arch, *options]),
                   BuildCache(Path(cache_dir) if cache_dir else default_cache_dir()))

    def cached(self, limits: CompileLimits) -> CompileResult | None:
        hit = self.cache.get(self.key)
        if hit is None:
            return None
        hit.cached = True
        hit.flags = self.flags
        return apply_limits(hit, limits)


def kernel_ptx(spec: KernelSpec, config: Config, problem: Problem, arch: str, fast: bool = False) -> str:
    """The PTX of one configuration for ``arch``: its entry's parameter list and launch directives,
    for checks that need no CUBIN (NVRTC only, no ptxas, no cache). ``fast``: NVRTC's least
    optimisation where it has one (12.8+; about 5x quicker): the declarations, not the code, are the same."""
    options = [o for o in compile_options(spec, config, problem, arch)[1:] if not o.startswith("--ptxas-options")]
    if fast and tuple(int(v) for v in nvrtc_version().split(".")) >= (12, 8):
        options.append("--Ofast-compile=max")
    return source_ptx(SourceBundle.load(spec.source_path), arch, options)


def source_ptx(bundle: SourceBundle, arch: str, options: Sequence[str] = ("-std=c++17",)) -> str:
    """NVRTC's PTX of ``bundle`` for ``arch`` (``sm_90a`` is built as ``compute_90a``); raises
    with the log when it does not compile."""
    target = f"--gpu-architecture={arch.replace('sm_', 'compute_')}"
    ok, log, ptx = _nvrtc_compile(bundle, [target, *options], output="ptx")
    if not ok:
        raise RuntimeError(f"{bundle.name} does not compile for {arch}: {log[-2000:]}")
    return ptx.rstrip(b"\0").decode()


def helper_cubin(name: str, text: str, arch: str) -> bytes:
    """A tuner-owned kernel (output checks, input generators) built with NVRTC, through the
    compile cache; raises with the log when it does not compile."""
    options = [f"--gpu-architecture={arch}", "-std=c++17"]
    bundle = SourceBundle(name, text)
    key = "helper-" + cache_key(bundle, options)
    cache = BuildCache(default_cache_dir())
    hit = cache.get(key)
    if hit is not None and hit.cubin_path:
        try:
            return Path(hit.cubin_path).read_bytes()
        except OSError:
            pass
    ok, log, cubin = _nvrtc_compile(bundle, options)
    if not ok:
        raise RuntimeError(f"{name} does not compile for {arch}: {log[-2000:]}")
    cache.put(key, CompileResult("ok", log=log), cubin)
    return cubin


#: swaps NVRTC for a test double ("module:function" or "path/file.py:function"), as
#: TUNER_WORKER_BACKEND swaps the GPU worker's backend: pipeline timing is tested without a GPU
COMPILER_ENV = "TUNER_COMPILER"


def _compiler():
    name = os.environ.get(COMPILER_ENV)
    return load_object(name, "tuner_test_compiler") if name else _nvrtc_compile


def _check(err, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")


def _nvrtc_compile(bundle: SourceBundle, options: Sequence[str], output: str = "cubin") -> tuple[bool, str, bytes]:
    """NVRTC on ``bundle``: (compiled, log, the CUBIN or with ``output="ptx"`` the PTX)."""
    from cuda.bindings import nvrtc

    names = sorted(bundle.headers)
    err, prog = nvrtc.nvrtcCreateProgram(
        bundle.text.encode(),
        bundle.name.encode(),
        len(names),
        [bundle.headers[n].encode() for n in names],
        [n.encode() for n in names],
    )
    _check(err, "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (compile_err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(err, "nvrtcGetProgramLogSize")
        # NVRTC writes into the buffer: it must be a fresh mutable one (``b" " * 1`` is CPython's
        # shared one-byte object, and writing into it turns every encoded space into NUL).
        log_buf = bytearray(size)
        (err,) = nvrtc.nvrtcGetProgramLog(prog, log_buf)
        # ptxas's part of the log follows a NUL inside it: a line break, or a terminal reads it as binary
        log = bytes(log_buf).rstrip(b"\0 \n").replace(b"\0", b"\n").decode(errors="replace")
        if compile_err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log, b""
        if output == "ptx":
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            _check(err, "nvrtcGetPTXSize")
            ptx = bytearray(size)
            (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
            _check(err, "nvrtcGetPTX")
            return True, log, bytes(ptx)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        cubin = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
        return True, log, bytes(cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_job(job: tuple, catch: bool = True) -> dict:
    """A build as a compile process runs it: :meth:`CompilePool.job`'s tuple in, the result as JSON out.
    ``catch``: the build's warnings come back with it (the caller warns once, not each process);
    False on a thread, where catching them would change the whole process's warning filters."""
    spec_path, config, problem, arch, cache_dir, limits = job
    with warnings.catch_warnings(record=True) if catch else contextlib.nullcontext([]) as caught:
        if catch:
            warnings.simplefilter("always")
        result = compile_kernel(load_spec(spec_path), config, problem, arch, cache_dir, limits)
    data = result.to_json()
    data["log"] = data["log"][-4000:]
    data["warnings"] = [str(w.message) for w in caught or []]
    return data


def _result(data: dict) -> CompileResult:
    for message in data.pop("warnings", []):
        warn_once(message)
    return CompileResult(**data)


def default_jobs() -> int:
    """Compile processes when not told: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class CompilePool:
    """Compiles configs in background processes; results are asked for by config.

    ``submit`` starts a compile and returns at once; ``result`` waits for it (compiling
    in this process if it was never submitted). With ``jobs == 0`` nothing runs in the
    background. Processes come from a forkserver, never a fork of this (threaded) process,
    and start on the first submit.
    """

    def __init__(self, spec: KernelSpec, problem: Problem, arch: str, cache_dir: Path | str | None = None,
                 limits: CompileLimits | None = None, jobs: int | None = None):
        self.spec, self.problem, self.arch = spec, problem, arch
        self.cache_dir = str(cache_dir) if cache_dir else None
        self.limits = limits or CompileLimits()
        self.jobs = default_jobs() if jobs is None else jobs
        self._pending: dict[str, Future] = {}
        self._lock = threading.Lock()  # the runner submits while its measuring thread takes results
        self._programs = isinstance(spec, ProgramSpec)
        self._executor: ProcessPoolExecutor | ThreadPoolExecutor | None = None

    def job(self, config: Config) -> tuple:
        """What this pool's build of ``config`` runs (:func:`compile_job`)."""
        return (str(self.spec.path), dict(config), self.problem, self.arch, self.cache_dir, self.limits)

    def adopt(self, config: Config, job: tuple, build: Future) -> bool:
        """Take ``build``, a :func:`compile_job` of ``job`` begun elsewhere, as this pool's build of
        ``config``, if ``job`` is what this pool would run for it and no build of it is pending."""
        if job != self.job(config):
            return False
        with self._lock:
            return self._pending.setdefault(self._key(config), build) is build

    @staticmethod
    def _key(config: Config) -> str:
        return json.dumps(config, sort_keys=True, default=str)

    def submit(self, config: Config) -> None:
        if self.jobs <= 0:
            return
        key = self._key(config)
        with self._lock:
            if key in self._pending:
                return
            if self._executor is None:
                # a program's build is a command of its own: a thread waits for it, and a stop kills it (a
                # helper process would be waited for, however long the build hangs)
                self._executor = ThreadPoolExecutor(self.jobs) if self._programs else helper_pool(self.jobs)
            self._pending[key] = self._executor.submit(compile_job, self.job(config), not self._programs)

    def cached(self, config: Config) -> CompileResult | None:
        """``config``'s build where the compile cache holds it (a program's: None); nothing is compiled."""
        if self._programs:
            return None
        return _Build.of(self.spec, config, self.problem, self.arch, self.cache_dir).cached(self.limits)

    def result(self, config: Config) -> CompileResult:
        with self._lock:
            future = self._pending.pop(self._key(config), None)
        if future is not None and not future.done() and not self._programs:  # a config built before is read here, not after a process starts
            hit = _Build.of(self.spec, config, self.problem, self.arch, self.cache_dir).cached(self.limits)
            if hit is not None:
                future.cancel()
                return hit
        if future is not None:
            try:
                return _result(future.result())
            except Exception:  # a broken pool (a child killed): compile here instead
                pass
        return _result(compile_job(self.job(config)))

    def close(self) -> None:
        with self._lock:
            for future in self._pending.values():
                future.cancel()
            self._pending.clear()
            if self._programs:
                from tuner.compile.program import stop_builds

                stop_builds()
            if self._executor is not None:
                # Waiting costs no more than the interpreter's own join of the pool at exit (the
                # compiles already running), and leaves no pool thread closing its pipe while
                # Python 3.11's exit hook writes to it (an "Exception ignored" traceback on Ctrl-C).
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def compile_many(
    spec: KernelSpec,
    configs: Iterable[Config],
    problem: Problem,
    arch: str,
    cache_dir: Path | str | None = None,
    limits: CompileLimits | None = None,
    jobs: int | None = None,
    progress=None,
) -> list[CompileResult]:
    """Compile many configs in parallel processes; results in the order given."""
    configs = list(configs)
    jobs = jobs or default_jobs()
    results: list[CompileResult] = []
    with CompilePool(spec, problem, arch, cache_dir, limits, 0 if jobs == 1 or len(configs) <= 1 else jobs) as pool:
        for config in configs:
            pool.submit(config)
        for config in configs:
            results.append(pool.result(config))
            if progress:
                progress()
    return results
