"""The GPU worker process: the only code that imports the CUDA driver.

``worker_main`` answers the supervisor's jobs with :class:`tuner.device.timing.Measurer`,
which runs the measurement protocol (check, paired timing, confirmation) over a
backend. :class:`CudaBackend` is the real one: it owns one CUDA context, allocates a
problem's inputs once (fresh random data, never zeros), loads CUBINs, poisons outputs
and checks them (every value on the device when the spec has a reference kernel, sampled
rows on the host otherwise, then a bitwise relaunch: :mod:`tuner.device.verify`), and times
launches with CUDA events. See :mod:`tuner.device.supervisor` for
the protocol between the processes.

A test backend (``"path/to/file.py:Class"`` or ``"module:Class"``) takes its place so
that the protocol and the supervisor's fault handling are tested without a GPU.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import numpy as np

from tuner.contract.arch import plain_target
from tuner.contract.kernel_spec import OutputSpec, RandomTable
from tuner.contract.precision import Tolerance
from tuner.device import echo_stub, protocol
from tuner.device.driver import CudaError, kernel_params, launch_config, tensor_map
from tuner.device.driver import check as _ck
from tuner.device.inputs import GENERATOR_SOURCE, InputGenerator, input_seed
from tuner.device.program import ProgramBackend
from tuner.device.protocol import (
    Answer,
    Block,
    ConfirmJob,
    Exit,
    Hello,
    HostDryRunJob,
    Launching,
    MeasureJob,
    PrepareJob,
    ProfileJob,
    Ready,
    Reply,
    StartFailed,
    WarmUpJob,
)
from tuner.device.timing import LaunchFailed, Measurer
from tuner.device.verify import (
    VERIFY_SOURCE,
    CheckResult,
    DeviceVerifier,
    compile_soon,
    reference_source,
    rows_to_sample,
    verdict,
)
from tuner.measurement.value import Measurement
from tuner.plugin import load_object


class Channel:
    """The worker's end of the pipe, as the measurement protocol sees it."""

    def __init__(self, conn):
        self.conn = conn

    def ready(self) -> None:
        self.conn.send(protocol.encode(Ready()))

    def block(self, step: int, value: float, samples: list[float], pairs: int) -> bool:
        """Report a block of pair ratios; True when the parent says stop (pruned)."""
        self.conn.send(protocol.encode(Block(step, value, samples, pairs)))
        answer = protocol.decode(self.conn.recv())
        return isinstance(answer, Answer) and answer.stop


class Inbox:
    """The worker's end of the pipe for jobs: one that has arrived can be looked at before its turn
    (a trial measured ahead goes on when the job that came is that trial)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._next: Any = None

    def waiting(self) -> bool:
        return self._next is not None or self.conn.poll(0.001)  # (the wait also paces a GPU-less double)

    def peek(self) -> Any:
        """The job that has arrived, if any, left for :meth:`take`."""
        if self._next is None and self.conn.poll(0):
            try:
                self._next = protocol.decode(self.conn.recv())
            except EOFError:  # the parent is gone: take() says so
                return None
        return self._next

    def take(self) -> Any:
        """The next job, once it comes; EOFError when the parent is gone."""
        job, self._next = self._next, None
        return job if job is not None else protocol.decode(self.conn.recv())


def _load_backend(name: str) -> ProgramBackend:
    """The device's backend (CUDA, or a test double), able to run kernels that are their own programs too."""
    device = CudaBackend() if name == "cuda" else load_object(name, "tuner_test_backend")()
    return ProgramBackend(device)


def worker_main(conn, backend_name: str, parent: int | None = None) -> None:
    if parent is not None:  # a hung kernel never reads the pipe's end: leave with the parent
        from tuner.lifetime import watch_parent

        watch_parent(parent)
    try:
        backend = _load_backend(backend_name)
        device = backend.hello()
    except Exception as exc:
        conn.send(protocol.encode(StartFailed(f"{type(exc).__name__}: {exc}")))
        return
    conn.send(protocol.encode(Hello(device)))
    channel = Channel(conn)
    inbox = Inbox(conn)
    measurer = Measurer(backend)
    measurer.tell = lambda what, group: conn.send(protocol.encode(Launching(what, group)))
    backend.beat = measurer.beat
    while True:
        try:
            job = inbox.take()
        except EOFError:
            return
        if isinstance(job, Exit):
            return
        if type(job) is PrepareJob or type(job) is WarmUpJob:  # ahead of the first job; a failure shows in that job
            try:
                if isinstance(job, WarmUpJob):
                    measurer.warm_up(job, inbox.waiting, inbox.peek)
                elif isinstance(job, PrepareJob):
                    measurer.prepare(job)
            except Exception:
                pass
            continue
        try:
            if isinstance(job, MeasureJob):
                measurement, restart = measurer.measure(job, channel)
            elif isinstance(job, ConfirmJob):
                measurement, restart = measurer.confirm(job, channel)
            elif isinstance(job, ProfileJob):
                measurement, restart = measurer.profile(job, channel)
            elif isinstance(job, HostDryRunJob):
                measurement, restart = echo_stub.worker_job(measurer, backend.device, job, channel)
            else:
                continue
        except Exception as exc:  # a bug or an unexpected driver error: report, then restart
            measurement = Measurement("launch_error", reason=f"{type(exc).__name__}: {exc}"[:500])
            measurement.extra["traceback"] = traceback.format_exc()[-2000:]
            restart = True
        try:
            conn.send(protocol.encode(Reply(measurement, restart)))
        except (BrokenPipeError, ConnectionResetError):  # the run died mid-job (kill -9): nobody reads the reply
            return
        if restart:
            return


# -- CUDA -------------------------------------------------------------------------------------


def _uuid_text(cu, dev) -> str:
    """The device's UUID as NVML and nvidia-smi write it (GPU-xxxxxxxx-xxxx-...)."""
    try:
        raw = bytes(_ck("cuDeviceGetUuid", cu.cuDeviceGetUuid(dev)).bytes)[:16]
    except Exception:
        return ""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class CudaBackend:
    """Measures configs on GPU 0 of this process (pin with CUDA_VISIBLE_DEVICES)."""

    def hello(self) -> dict[str, Any]:
        from cuda.bindings import driver as cu

        from tuner.device import cuda_start

        cuda_start.wait()  # a start begun with the process (then cuInit below only checks it)
        self.cu = cu
        _ck("cuInit", cu.cuInit(0))
        self.dev = _ck("cuDeviceGet", cu.cuDeviceGet(0))
        self.ctx = _ck("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(self.dev))
        _ck("cuCtxSetCurrent", cu.cuCtxSetCurrent(self.ctx))
        self.stream = _ck("cuStreamCreate", cu.cuStreamCreate(0))
        attr = cu.CUdevice_attribute
        name = _ck("cuDeviceGetName", cu.cuDeviceGetName(256, self.dev))
        name = name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name)
        get = lambda a: _ck("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(a, self.dev))  # noqa: E731
        self.device = {
            "name": name,
            "sm_count": get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            "cc": [get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)],
            "max_smem_per_block": get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            "driver": _ck("cuDriverGetVersion", cu.cuDriverGetVersion()),
            "uuid": _uuid_text(cu, self.dev),
        }
        self.helper_arch = plain_target(self.device["cc"])  # what the tuner's own kernels are built for
        compile_soon("generate.cu", GENERATOR_SOURCE, self.helper_arch)  # the helpers every problem needs build meanwhile
        compile_soon("verify.cu", VERIFY_SOURCE, self.helper_arch)
        self.buffers: dict[str, Any] = {}
        self.host_inputs: dict[str, np.ndarray] = {}
        self.generated: dict[str, RandomTable] = {}  # inputs that live on the device only (so far)
        self.generator: InputGenerator | None = None  # built on the first generated input
        self.outputs: dict[str, OutputSpec] = {}
        self.verifier: DeviceVerifier | None = None  # built on the first problem
        self.reference_error = ""
        return self.device

    # -- inputs, once per problem -------------------------------------------------------------
    def prepare(self, spec, problem: dict, seed: int) -> None:
        cu = self.cu
        if self.verifier is not None:
            self.verifier.forget()
        for ptr in self.buffers.values():
            cu.cuMemFree(ptr)
        self.buffers.clear()
        ref = spec.reference_kernel(problem)
        if ref is not None:  # its build overlaps the inputs' generation
            compile_soon(*reference_source(spec, ref), self.helper_arch)
        rng = np.random.default_rng(seed)
        self.host_inputs, self.generated = {}, {}
        for name, value in spec.inputs(problem, rng).items():
            ptr = _ck("cuMemAlloc", cu.cuMemAlloc(max(1, value.nbytes)))
            self.buffers[name] = ptr
            if isinstance(value, RandomTable):
                self._generator().fill(ptr, value, input_seed(seed, name))
                self.generated[name] = value
            else:
                array = np.ascontiguousarray(value)
                self.host_inputs[name] = array
                _ck("cuMemcpyHtoD", cu.cuMemcpyHtoD(ptr, array.ctypes.data, array.nbytes))
        self.outputs = spec.outputs(problem)
        for name, out in self.outputs.items():
            nbytes = int(np.prod(out.shape)) * np.dtype(out.dtype).itemsize
            self.buffers[name] = _ck("cuMemAlloc", cu.cuMemAlloc(nbytes))
        self._prepare_check(spec, problem, ref)

    def _generator(self) -> InputGenerator:
        if self.generator is None:
            self.generator = InputGenerator(self.cu, self.stream, self.helper_arch, self.device["sm_count"])
        return self.generator

    def inputs_on_host(self) -> dict[str, np.ndarray]:
        """Every input as a host array: generated ones are copied back (the sampled host check
        needs them; the check on the device does not)."""
        for name, table in list(self.generated.items()):
            array = np.empty(table.shape, dtype=table.dtype)
            _ck("cuMemcpyDtoH", self.cu.cuMemcpyDtoH(array.ctypes.data, self.buffers[name], array.nbytes))
            self.host_inputs[name] = array
            del self.generated[name]
        return self.host_inputs

    def _prepare_check(self, spec, problem: dict, ref) -> None:
        """The comparison kernels, and the expected output when the spec has a reference kernel (``ref``)."""
        out = next(iter(self.outputs.values()))
        if self.verifier is None:
            self.verifier = DeviceVerifier(self.cu, self.stream, self.helper_arch, self.device["sm_count"])
        self.verifier.prepare_hashes(out)
        self.reference_error = ""
        if ref is None:
            return
        try:
            self.verifier.compute_reference(spec, ref, out, lambda n: int(self.buffers[n]))
        except CudaError as exc:  # e.g. no room for the FP32 expected output: check sampled rows instead
            if self._context_broken():
                raise
            self.verifier.forget()
            self.verifier.prepare_hashes(out)
            self.reference_error = f"reference kernel: {exc}"

    # -- kernels ---------------------------------------------------------------------------------
    def load(self, spec, config: dict, problem: dict, cubin_path: str) -> _Kernel:
        from tuner.contract.kernel_spec import DeviceInfo

        d = self.device
        launch = spec.launch(config, problem, DeviceInfo(d["name"], d["sm_count"], tuple(d["cc"]), d["max_smem_per_block"]))
        if launch.smem_bytes > d["max_smem_per_block"]:
            raise LaunchFailed(f"{launch.smem_bytes} B dynamic SMEM > device limit {d['max_smem_per_block']}")
        with open(cubin_path, "rb") as f:
            return self.load_launch(launch, spec.kernel_name, f.read())

    def load_launch(self, launch, kernel_name: str, image: bytes) -> _Kernel:
        """A CUBIN's entry bound to ``launch`` (arguments, grid, cluster, dynamic SMEM)."""
        cu = self.cu
        module = None
        try:
            module = _ck("cuModuleLoadData", cu.cuModuleLoadData(image))
            func = _ck("cuModuleGetFunction", cu.cuModuleGetFunction(module, kernel_name.encode()))
            _ck("cuFuncSetAttribute", cu.cuFuncSetAttribute(
                func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.smem_bytes))
            params, keepalive = kernel_params(launch, lambda name: int(self.buffers[name]))
            return _Kernel(cu, module, func, params, keepalive, launch_config(launch, self.stream, func))
        except CudaError as exc:
            if module is not None:
                cu.cuModuleUnload(module)
            raise LaunchFailed(str(exc), self._context_broken()) from None

    def buffer_address(self, name: str) -> int:
        return int(self.buffers[name])

    def tensor_map_bytes(self, tm, address: int) -> bytes:
        """The 128 bytes ``cuTensorMapEncodeTiled`` makes of ``tm`` over ``address``."""
        import ctypes

        return ctypes.string_at(int(tensor_map(tm, address).getPtr()), 128)

    def echo(self, launch, kernel_name: str, image: bytes, record: str, size: int) -> bytes:
        """Launch a stub that writes what it receives into its ``__device__`` global ``record``
        (zeroed first); that global's first ``size`` bytes (:mod:`tuner.check.host_dry_run`)."""
        cu = self.cu
        handle = self.load_launch(launch, kernel_name, image)
        try:
            address, _ = _ck("cuModuleGetGlobal", cu.cuModuleGetGlobal(handle.module, record.encode()))
            _ck("cuMemsetD8", cu.cuMemsetD8(address, 0, size))
            try:
                handle.run()
                _ck("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
            except CudaError as exc:
                raise LaunchFailed(str(exc), self._context_broken()) from None
            raw = np.empty(size, dtype=np.uint8)
            _ck("cuMemcpyDtoH", cu.cuMemcpyDtoH(raw.ctypes.data, address, size))
            return raw.tobytes()
        finally:
            handle.close()

    def load_baseline(self, spec, problem: dict) -> _HostBaseline:
        launch = spec.baseline(problem, {name: int(ptr) for name, ptr in self.buffers.items()}, int(self.stream))
        if launch is None:
            raise LaunchFailed(f"kernel spec {spec.name} offers no baseline: give [measure] reference as a config")
        return _HostBaseline(launch)

    def unload(self, handle) -> None:
        handle.close()

    def launch(self, handle) -> None:
        """Run a loaded kernel once on poisoned outputs and wait for it (no check: :meth:`check` does one)."""
        self.poison()
        try:
            handle.run()
            _ck("cuStreamSynchronize", self.cu.cuStreamSynchronize(self.stream))
        except CudaError as exc:
            raise LaunchFailed(str(exc), self._context_broken()) from None

    def profiled(self, handle) -> None:
        try:
            _ck("cuStreamSynchronize", self.cu.cuStreamSynchronize(self.stream))  # nothing else in the range
            _ck("cuProfilerStart", self.cu.cuProfilerStart())
            try:
                handle.run()
                _ck("cuStreamSynchronize", self.cu.cuStreamSynchronize(self.stream))
            finally:
                _ck("cuProfilerStop", self.cu.cuProfilerStop())
        except CudaError as exc:
            raise LaunchFailed(str(exc), self._context_broken()) from None

    def read_output(self, name: str) -> np.ndarray:
        """Output ``name`` as the kernel left it (its raw dtype, e.g. BF16 bits as uint16), on the host."""
        out = self.outputs[name]
        raw = np.empty(out.shape, dtype=out.dtype)
        _ck("cuMemcpyDtoH", self.cu.cuMemcpyDtoH(raw.ctypes.data, self.buffers[name], raw.nbytes))
        return raw

    def read_expected(self) -> np.ndarray | None:
        """The first output's expected values (FP32) from the spec's reference kernel; None without one."""
        verifier = self.verifier
        if verifier is None or verifier.expected is None:
            return None
        out = next(iter(self.outputs.values()))
        expected = np.empty(out.shape, dtype=np.float32)
        _ck("cuMemcpyDtoH", self.cu.cuMemcpyDtoH(expected.ctypes.data, verifier.expected, expected.nbytes))
        return expected

    # -- checks and timing -------------------------------------------------------------------
    def check(self, handle, spec, problem: dict, check_rows: int, seed: int, tolerance: dict | None = None) -> Measurement:
        cu = self.cu
        self.poison()
        try:
            handle.run()
        except CudaError as exc:
            raise LaunchFailed(str(exc), self._context_broken()) from None
        try:
            _ck("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
        except CudaError as exc:
            raise LaunchFailed(f"kernel fault: {exc}", True) from None
        result = self._check(spec, problem, rows_to_sample(spec, problem, check_rows), seed, handle.run,
                             Tolerance.of_job(tolerance, spec))
        ok, reason = verdict(result)
        extra = result.attrs()
        if self.reference_error:
            extra["check_note"] = self.reference_error
        return Measurement("ok" if ok else "mismatch", reason=reason, checksum=result.checksum, max_err=result.max_err,
                           extra=extra)

    def time(self, handles, rounds: int) -> list[list[float]]:
        cu = self.cu
        k = len(handles)
        events = self._events(rounds * k + 1)
        order: list[int] = []  # the handle each timed launch ran, in launch order
        try:
            _ck("cuEventRecord", cu.cuEventRecord(events[0], self.stream))
            for r in range(rounds):
                for j in range(k):
                    i = (r + j) % k  # rotate: nobody always runs first
                    handles[i].run()
                    _ck("cuEventRecord", cu.cuEventRecord(events[len(order) + 1], self.stream))
                    order.append(i)
            _ck("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
        except CudaError as exc:
            raise LaunchFailed(str(exc), self._context_broken()) from None
        times = [[0.0] * k for _ in range(rounds)]
        for n, i in enumerate(order):
            times[n // k][i] = _ck("cuEventElapsedTime", cu.cuEventElapsedTime(events[n], events[n + 1]))
        return times

    def _events(self, count: int) -> list:
        pool = getattr(self, "_event_pool", [])
        while len(pool) < count:
            pool.append(_ck("cuEventCreate", self.cu.cuEventCreate(0)))
        self._event_pool = pool
        return pool

    def sensors(self) -> dict[str, float]:
        """The SM clock where NVML has it (recorded, never required)."""
        clock = self._sm_clock_mhz()
        return {} if clock is None else {"sm_clock_mhz": clock}

    def energy_counter(self):
        """NVML's total-energy counter of this GPU, or None where NVML cannot read it."""
        from tuner.device.energy import NvmlCounter

        if self._sm_clock_mhz() is None:  # (opens NVML on this GPU once)
            return None
        counter = NvmlCounter(self._nvml)
        try:
            counter.read()
        except Exception:
            return None
        return counter

    def _sm_clock_mhz(self) -> int | None:
        """The SM clock right after timing, where NVML is reachable (recorded, never required)."""
        try:
            from cuda.bindings import nvml

            if not self.device.get("uuid"):  # without it we can't tell which GPU NVML means
                return None
            if not getattr(self, "_nvml", None):
                nvml.init_v2()
                self._nvml = nvml.device_get_handle_by_uuid(self.device["uuid"])
            return int(nvml.device_get_clock_info(self._nvml, nvml.ClockType(1)))  # NVML_CLOCK_SM; member names vary by release
        except Exception:
            return None

    def _context_broken(self) -> bool:
        err, = self.cu.cuCtxSynchronize()
        return err != self.cu.CUresult.CUDA_SUCCESS

    def poison(self) -> None:
        """Fill the outputs with NaN patterns (queued on the stream): a value the kernel never writes shows."""
        from tuner.contract.numerics import POISON_BF16

        cu = self.cu
        for name, out in self.outputs.items():
            count = int(np.prod(out.shape))
            if np.dtype(out.dtype).itemsize == 2:
                _ck("cuMemsetD16Async", cu.cuMemsetD16Async(self.buffers[name], POISON_BF16, count, self.stream))
            else:
                words = count * np.dtype(out.dtype).itemsize // 4
                _ck("cuMemsetD32Async", cu.cuMemsetD32Async(self.buffers[name], 0x7FC00001, words, self.stream))

    def _check(self, spec, problem: dict, n_rows: int, seed: int, run, tolerance: Tolerance) -> CheckResult:
        """The checked launch's output against the expected one, then a relaunch on poisoned
        outputs compared bitwise (row hashes). Every value on the device when the spec has a
        reference kernel; otherwise ``n_rows`` sampled rows against the host reference."""
        cu, verifier = self.cu, self.verifier
        assert verifier is not None, "prepare() builds the verifier"
        name, out = next(iter(self.outputs.items()))
        started = time.perf_counter()
        if verifier.expected is not None:
            result = verifier.compare(self.buffers[name], out, tolerance)
        else:
            result = self._host_check(spec, problem, name, out, n_rows, seed, tolerance)
            verifier.store_hashes(self.buffers[name])
        if result.n_bad <= result.allowed_bad:
            self.poison()
            try:
                run()
                _ck("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
            except CudaError as exc:
                raise LaunchFailed(f"relaunch: {exc}", self._context_broken()) from None
            result.race_rows, result.first_race_row = verifier.relaunch_differs(self.buffers[name])
        result.check_ms = (time.perf_counter() - started) * 1e3
        return result

    def _host_check(self, spec, problem: dict, name: str, out, n_rows: int, seed: int, tolerance: Tolerance) -> CheckResult:
        from tuner.device.verify import decode, host_check, sample_rows

        cu = self.cu
        rows_total, cols = out.shape[0], int(np.prod(out.shape[1:]))
        rows = sample_rows(n_rows, rows_total, seed)
        itemsize = np.dtype(out.dtype).itemsize
        got = np.empty((len(rows), cols), dtype=out.dtype)
        base = int(self.buffers[name])
        for i, r in enumerate(rows):
            _ck("cuMemcpyDtoH", cu.cuMemcpyDtoH(got[i].ctypes.data, base + int(r) * cols * itemsize, cols * itemsize))
        values = decode(got, out)
        ref = np.asarray(spec.reference(self.inputs_on_host(), problem, rows), dtype=np.float32).reshape(values.shape)
        return host_check(values, ref, rows, rows_total * cols, tolerance)


class _Kernel:
    """A loaded CUBIN with its arguments bound to the problem's buffers."""

    def __init__(self, cu, module, func, params, keepalive, config):
        self.cu, self.module, self.func, self.params, self.keepalive, self.config = cu, module, func, params, keepalive, config

    def run(self) -> None:
        _ck("cuLaunchKernelEx", self.cu.cuLaunchKernelEx(self.config, self.func, self.params, 0))

    def close(self) -> None:
        self.cu.cuModuleUnload(self.module)


class _HostBaseline:
    """A spec's host-side baseline (a library call enqueued on the worker's stream)."""

    def __init__(self, launch):
        self.launch = launch

    def run(self) -> None:
        self.launch()

    def close(self) -> None:
        pass
