"""The GPU worker process: the only code that imports the CUDA driver.

It owns one CUDA context, allocates a problem's inputs once (fresh random data, never
zeros), and for each job loads the CUBIN, poisons the outputs, launches once and checks
sampled rows against the spec's reference, then times warm launches with CUDA events,
reporting block medians as it goes. See :mod:`tuner.supervisor` for the protocol.

``worker_main`` can also run a test backend (``"path/to/file.py:Class"`` or
``"module:Class"``) so that the supervisor's fault handling is tested without a GPU.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import statistics
import time
import traceback
from typing import Any

import numpy as np

from tuner.driver import CudaError, check as _ck, kernel_params, launch_config
from tuner.record import Measurement


class Channel:
    """The worker's end of the pipe, as a backend sees it."""

    def __init__(self, conn):
        self.conn = conn

    def ready(self) -> None:
        self.conn.send({"type": "ready"})

    def block(self, step: int, ms: float) -> bool:
        """Report a block median; True when the parent says stop (pruned)."""
        self.conn.send({"type": "block", "step": step, "ms": ms})
        answer = self.conn.recv()
        return answer.get("op") == "stop"


def _load_backend(name: str):
    if name == "cuda":
        return CudaBackend()
    target, _, attr = name.rpartition(":")
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location("tuner_test_backend", target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)()


def worker_main(conn, backend_name: str) -> None:
    try:
        backend = _load_backend(backend_name)
        device = backend.hello()
    except Exception as exc:
        conn.send({"type": "error", "error": f"{type(exc).__name__}: {exc}"})
        return
    conn.send({"type": "hello", "device": device})
    channel = Channel(conn)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job.get("op") == "exit":
            return
        if job.get("op") != "measure":
            continue
        try:
            measurement, restart = backend.measure(job, channel)
        except Exception as exc:  # a bug or an unexpected driver error: report, then restart
            measurement = Measurement("launch_error", reason=f"{type(exc).__name__}: {exc}"[:500])
            measurement.extra["traceback"] = traceback.format_exc()[-2000:]
            restart = True
        conn.send({"type": "result", "measurement": measurement.to_json(), "restart": restart})
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
        self._problem_key = None
        self.buffers: dict[str, Any] = {}
        self.host_inputs: dict[str, np.ndarray] = {}
        self.outputs = {}
        return self.device

    # -- inputs, once per problem -------------------------------------------------------------
    def _prepare(self, spec, problem: dict, seed: int) -> None:
        key = (str(spec.path), json.dumps(problem, sort_keys=True), seed)
        if key == self._problem_key:
            return
        cu = self.cu
        for ptr in self.buffers.values():
            cu.cuMemFree(ptr)
        self.buffers.clear()
        self._problem_key = None
        rng = np.random.default_rng(seed)
        self.host_inputs = {k: np.ascontiguousarray(v) for k, v in spec.inputs(problem, rng).items()}
        for name, array in self.host_inputs.items():
            ptr = _ck("cuMemAlloc", cu.cuMemAlloc(max(1, array.nbytes)))
            self.buffers[name] = ptr
            _ck("cuMemcpyHtoD", cu.cuMemcpyHtoD(ptr, array.ctypes.data, array.nbytes))
        self.outputs = spec.outputs(problem)
        for name, out in self.outputs.items():
            nbytes = int(np.prod(out.shape)) * np.dtype(out.dtype).itemsize
            self.buffers[name] = _ck("cuMemAlloc", cu.cuMemAlloc(nbytes))
        self._problem_key = key

    # -- one job -------------------------------------------------------------------------------
    def measure(self, job: dict, channel: Channel) -> tuple[Measurement, bool]:
        from tuner.spec import DeviceInfo, load_spec

        cu = self.cu
        spec = load_spec(job["spec_path"])
        problem, config = job["problem"], job["config"]
        self._prepare(spec, problem, job.get("seed", 0))
        channel.ready()
        d = self.device
        launch = spec.launch(config, problem, DeviceInfo(d["name"], d["sm_count"], tuple(d["cc"]), d["max_smem_per_block"]))
        module = None
        try:
            with open(job["cubin_path"], "rb") as f:
                image = f.read()
            module = _ck("cuModuleLoadData", cu.cuModuleLoadData(image))
            func = _ck("cuModuleGetFunction", cu.cuModuleGetFunction(module, spec.kernel_name.encode()))
            if launch.smem_bytes > d["max_smem_per_block"]:
                return Measurement("launch_error", reason=f"{launch.smem_bytes} B dynamic SMEM > device limit {d['max_smem_per_block']}"), False
            _ck("cuFuncSetAttribute", cu.cuFuncSetAttribute(
                func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.smem_bytes))
            params, keepalive = kernel_params(launch, lambda name: int(self.buffers[name]))
            config_obj = launch_config(launch, self.stream, func)
            run = lambda: _ck("cuLaunchKernelEx", cu.cuLaunchKernelEx(config_obj, func, params, 0))  # noqa: E731

            # Checked launch on poisoned outputs.
            self._poison()
            try:
                run()
            except CudaError as exc:
                return Measurement("launch_error", reason=str(exc)), self._context_broken()
            try:
                _ck("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
            except CudaError as exc:
                return Measurement("launch_error", reason=f"kernel fault: {exc}"), True
            ok, reason, checksum, max_err = self._check(spec, problem, job.get("check_rows", 64), job.get("seed", 0))
            if not ok:
                return Measurement("mismatch", reason=reason, checksum=checksum, max_err=max_err), False

            self._warm_up(run, job.get("warmup", 5), job.get("warmup_ms", 100.0))
            times, blocks = self._time(run, job.get("repeats", 50), job.get("block", 10), channel)
            clock = self._sm_clock_mhz()
            if times is None:
                return Measurement("pruned_slow", reason=f"running median {statistics.median(blocks):.4g} ms after {len(blocks)} blocks",
                                   blocks=blocks, checksum=checksum, max_err=max_err), False
            done = Measurement("ok", ms=statistics.median(times), blocks=blocks, checksum=checksum, max_err=max_err)
            if clock is not None:
                done.extra["sm_clock_mhz"] = clock
            return done, False
        except CudaError as exc:
            return Measurement("launch_error", reason=str(exc)), self._context_broken()
        finally:
            if module is not None:
                cu.cuModuleUnload(module)

    def _warm_up(self, run, launches: int, min_ms: float) -> None:
        """At least ``launches`` launches and ``min_ms`` of them: an idle GPU starts at low clocks."""
        started = time.perf_counter()
        while True:
            for _ in range(max(1, launches)):
                run()
            _ck("cuStreamSynchronize", self.cu.cuStreamSynchronize(self.stream))
            if (time.perf_counter() - started) * 1e3 >= min_ms:
                return

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

    def _poison(self) -> None:
        from tuner.numerics import POISON_BF16

        cu = self.cu
        for name, out in self.outputs.items():
            count = int(np.prod(out.shape))
            if np.dtype(out.dtype).itemsize == 2:
                _ck("cuMemsetD16Async", cu.cuMemsetD16Async(self.buffers[name], POISON_BF16, count, self.stream))
            else:
                words = count * np.dtype(out.dtype).itemsize // 4
                _ck("cuMemsetD32Async", cu.cuMemsetD32Async(self.buffers[name], 0x7FC00001, words, self.stream))

    def _check(self, spec, problem, n_rows: int, seed: int):
        from tuner.numerics import bf16_to_f32

        cu = self.cu
        name, out = next(iter(self.outputs.items()))
        rows_total, cols = out.shape[0], int(np.prod(out.shape[1:]))
        rng = np.random.default_rng(seed + 1)
        rows = np.unique(np.concatenate([[0, rows_total - 1], rng.integers(0, rows_total, size=max(0, n_rows - 2))]))
        itemsize = np.dtype(out.dtype).itemsize
        got = np.empty((len(rows), cols), dtype=out.dtype)
        base = int(self.buffers[name])
        for i, r in enumerate(rows):
            _ck("cuMemcpyDtoH", cu.cuMemcpyDtoH(got[i].ctypes.data, base + int(r) * cols * itemsize, cols * itemsize))
        values = bf16_to_f32(got) if out.decode == "bfloat16" else got.astype(np.float32)
        ref = np.asarray(spec.reference(self.host_inputs, problem, rows), dtype=np.float32).reshape(values.shape)
        checksum = float(np.sum(values, dtype=np.float64)) if np.isfinite(values).all() else float("nan")
        bad_nan = ~np.isfinite(values)
        if bad_nan.any():
            r, c = np.argwhere(bad_nan)[0]
            return False, f"NaN/unwritten output at row {rows[r]} col {c} ({int(bad_nan.sum())} values)", checksum, None
        scale = np.sqrt(np.mean(ref.astype(np.float64) ** 2, axis=1, keepdims=True))
        err = np.abs(values - ref) / (spec.atol + spec.rtol * np.maximum(np.abs(ref), scale))
        max_err = float(err.max()) if err.size else 0.0
        if max_err > 1.0:
            r, c = np.unravel_index(int(np.argmax(err)), err.shape)
            return False, f"row {rows[r]} col {c}: got {values[r, c]:.6g}, expected {ref[r, c]:.6g}", checksum, max_err
        return True, "", checksum, max_err

    def _time(self, run, repeats: int, block: int, channel: Channel):
        cu = self.cu
        events = [(_ck("cuEventCreate", cu.cuEventCreate(0)), _ck("cuEventCreate", cu.cuEventCreate(0))) for _ in range(block)]
        times: list[float] = []
        blocks: list[float] = []
        try:
            step = 0
            while len(times) < repeats:
                n = min(block, repeats - len(times))
                for start, end in events[:n]:
                    _ck("cuEventRecord", cu.cuEventRecord(start, self.stream))
                    run()
                    _ck("cuEventRecord", cu.cuEventRecord(end, self.stream))
                _ck("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
                chunk = [_ck("cuEventElapsedTime", cu.cuEventElapsedTime(s, e)) for s, e in events[:n]]
                times.extend(chunk)
                blocks.append(statistics.median(chunk))
                if channel.block(step, blocks[-1]) and len(times) < repeats:
                    return None, blocks
                step += 1
            return times, blocks
        finally:
            for start, end in events:
                cu.cuEventDestroy(start)
                cu.cuEventDestroy(end)
