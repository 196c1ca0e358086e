"""Output verification: every value of a trial's output checked on the GPU, a relaunch
compared bitwise, and the sampled host check kept for specs without a reference kernel.

The error of one value is ``|got - expected| / (atol + rtol * max(|expected|, rms(row)))``
(``rms`` of the expected row; without it for a precise study, :mod:`tuner.contract.precision`), on the
device and on the host alike; a value fails when its error is over 1 or it is NaN/infinite
(unwritten outputs hold a NaN poison). A relaunch on
re-poisoned outputs must give the same bits: a data race shows as rows whose hash differs.

:func:`verdict` turns the counts into a status and a reason; it is plain Python so the
decision is tested without a GPU. :class:`DeviceVerifier` runs in the worker process (the
only one that imports the CUDA driver) and holds a problem's expected output on the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.contract.kernel_spec import (
    EXPECTED,
    Buffer,
    KernelSpec,
    Launch,
    OutputSpec,
    Problem,
    ReferenceKernel,
    Scalar,
)
from tuner.contract.precision import Tolerance

#: comparison kernels: one warp per output row, 16-byte loads, one set of atomics per warp
VERIFY_SOURCE = r"""
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

// stats[]: counts and reductions of one comparison (see tuner/device/verify.py)
#define S_NAN 0        // values that are NaN/inf (poison left unwritten, or computed NaN)
#define S_OVER 1       // finite values with error > 1
#define S_MAX 2        // (error bits << 32) | row of the largest finite error
#define S_FIRST_NAN 3  // smallest row holding a NaN/inf value
#define S_DIFF 4       // rows whose hash differs from the stored one
#define S_FIRST_DIFF 5 // smallest such row
#define S_WORDS 6

// Row hash: the sum of a bijective mix of each 32-bit word with its index. One changed word
// always changes the sum; several cancel with probability ~2^-32.
static __device__ __forceinline__ uint64_t word_hash(uint32_t index, uint32_t word) {
  uint32_t x = word * 0x9E3779B1u + index * 0x85EBCA77u;
  x ^= x >> 15; x *= 0xC2B2AE3Du; x ^= x >> 13;
  return x;
}

static __device__ __forceinline__ uint64_t warp_sum(uint64_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ uint64_t warp_max(uint64_t v) {
  for (int o = 16; o > 0; o >>= 1) { const uint64_t w = __shfl_xor_sync(0xffffffffu, v, o); v = w > v ? w : v; }
  return v;
}

// One value: counts, the largest error (packed with its row), the checksum.
struct Tally {
  uint64_t nan, over, max;
  double sum;
  bool row_nan;
  __device__ __forceinline__ void add(float got, float ref, float rms, uint32_t row, float atol, float rtol) {
    // rms is 0 where the study's precision class has no row-RMS floor
    if (!isfinite(got) || !isfinite(ref)) { ++nan; row_nan = true; return; }
    sum += got;
    const float diff = fabsf(got - ref), tol = atol + rtol * fmaxf(fabsf(ref), rms);
    over += diff > tol;   // the decision: exact, no division
    const uint64_t packed = ((uint64_t)__float_as_uint(__fdividef(diff, tol)) << 32) | row;   // error >= 0: bits order as values
    max = packed > max ? packed : max;
  }
};

static __device__ __forceinline__ float value(uint32_t word, int i, bool bf16) {
  return bf16 ? __uint_as_float(i ? word & 0xFFFF0000u : word << 16) : __uint_as_float(word);
}

// Every value of a row-major output (BF16 bits or FP32) against the FP32 expected output, one warp
// per row. Rows of a multiple of 16 bytes go by 16-byte loads and also get their hash stored
// (for the relaunch comparison); others go value by value, unhashed.
template <bool BF16>
static __device__ void compare(const void* got, const float* expected, const float* row_rms, float rms_weight, int64_t rows,
                               int64_t cols, float atol, float rtol, uint64_t* stats, double* checksum, uint64_t* row_hash) {
  const int EPW = BF16 ? 2 : 1;   // values per 32-bit word
  const int lane = threadIdx.x % 32;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  const int64_t row_words = cols / EPW;
  const bool vector = (cols * (BF16 ? 2 : 4)) % 16 == 0;
  Tally t = {0, 0, 0, 0.0, false};
  uint64_t first_nan = ~0ull;
  for (int64_t r = warp; r < rows; r += warps) {
    const float* e = expected + r * cols;
    const float rms = row_rms[r] * rms_weight;
    t.row_nan = false;
    if (vector) {
      const uint4* g = reinterpret_cast<const uint4*>(reinterpret_cast<const uint32_t*>(got) + r * row_words);
      uint64_t h = 0;
#pragma unroll 2
      for (int64_t q = lane; q < row_words / 4; q += 32) {   // q: 16-byte chunk of the row
        const uint4 u = g[q];
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
        float x[4 * EPW];
        const float4* e4 = reinterpret_cast<const float4*>(e + q * 4 * EPW);
#pragma unroll
        for (int i = 0; i < EPW; ++i) {
          const float4 f = e4[i];
          x[4 * i] = f.x; x[4 * i + 1] = f.y; x[4 * i + 2] = f.z; x[4 * i + 3] = f.w;
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          h += word_hash((uint32_t)(4 * q + k), w[k]);
#pragma unroll
          for (int i = 0; i < EPW; ++i) t.add(value(w[k], i, BF16), x[k * EPW + i], rms, (uint32_t)r, atol, rtol);
        }
      }
      h = warp_sum(h);
      if (lane == 0) row_hash[r] = h;
    } else {
      for (int64_t c = lane; c < cols; c += 32) {
        const float v = BF16 ? __uint_as_float((uint32_t)reinterpret_cast<const uint16_t*>(got)[r * cols + c] << 16)
                             : reinterpret_cast<const float*>(got)[r * cols + c];
        t.add(v, e[c], rms, (uint32_t)r, atol, rtol);
      }
    }
    if (__any_sync(0xffffffffu, t.row_nan) && (uint64_t)r < first_nan) first_nan = (uint64_t)r;
  }
  const uint64_t nan = warp_sum(t.nan), over = warp_sum(t.over), mx = warp_max(t.max);
  const double sum = warp_sum(t.sum);
  if (lane == 0) {
    if (nan) { atomicAdd(&stats[S_NAN], nan); atomicMin(&stats[S_FIRST_NAN], first_nan); }
    if (over) atomicAdd(&stats[S_OVER], over);
    atomicMax(&stats[S_MAX], mx);
    atomicAdd(checksum, sum);
  }
}

extern "C" __global__ void verify_compare_bf16(const void* got, const float* expected, const float* row_rms,
    float rms_weight, int64_t rows, int64_t cols, float atol, float rtol, uint64_t* stats, double* checksum, uint64_t* row_hash) {
  compare<true>(got, expected, row_rms, rms_weight, rows, cols, atol, rtol, stats, checksum, row_hash);
}
extern "C" __global__ void verify_compare_f32(const void* got, const float* expected, const float* row_rms,
    float rms_weight, int64_t rows, int64_t cols, float atol, float rtol, uint64_t* stats, double* checksum, uint64_t* row_hash) {
  compare<false>(got, expected, row_rms, rms_weight, rows, cols, atol, rtol, stats, checksum, row_hash);
}

// Row hashes of an output whose rows are a multiple of 16 bytes (row_words 32-bit words):
// written to row_hash, or (compare_only != 0) compared with it, counting the rows that differ.
extern "C" __global__ void verify_hash(const uint4* got, int64_t rows, int64_t row_words, uint64_t* row_hash,
                                       int compare_only, uint64_t* stats) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  uint64_t diff = 0, first = ~0ull;
  for (int64_t r = warp; r < rows; r += warps) {
    const uint4* g = got + r * (row_words / 4);
    uint64_t h = 0;
#pragma unroll 4
    for (int64_t q = lane; q < row_words / 4; q += 32) {
      const uint4 u = g[q];
      h += word_hash((uint32_t)(4 * q), u.x) + word_hash((uint32_t)(4 * q + 1), u.y)
         + word_hash((uint32_t)(4 * q + 2), u.z) + word_hash((uint32_t)(4 * q + 3), u.w);
    }
    h = warp_sum(h);
    if (lane == 0) {
      if (!compare_only) row_hash[r] = h;
      else if (row_hash[r] != h) { ++diff; first = (uint64_t)r < first ? (uint64_t)r : first; }
    }
  }
  if (lane == 0 && diff) { atomicAdd(&stats[S_DIFF], diff); atomicMin(&stats[S_FIRST_DIFF], first); }
}

// RMS of each expected row, in double (once per problem).
extern "C" __global__ void verify_row_rms(const float* expected, int64_t rows, int64_t cols, float* row_rms) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t r = warp; r < rows; r += warps) {
    double s = 0.0;
    for (int64_t c = lane; c < cols; c += 32) { const double v = expected[r * cols + c]; s += v * v; }
    s = warp_sum(s);
    if (lane == 0) row_rms[r] = cols ? (float)sqrt(s / (double)cols) : 0.0f;
  }
}
"""

_S_NAN, _S_OVER, _S_MAX, _S_FIRST_NAN, _S_DIFF, _S_FIRST_DIFF, _S_WORDS = range(7)
_NO_ROW = 2**64 - 1
_THREADS = 256


@dataclass
class CheckResult:
    """What one check found; ``checked`` of ``total`` values were compared."""

    checked: int
    total: int
    n_nan: int = 0
    n_over: int = 0
    max_err: float | None = None
    worst: tuple[int, int] | None = None  # (row, col) of the largest error, or of the first NaN
    got: float | None = None  # the value there
    expected: float | None = None
    checksum: float | None = None
    allowed_bad: int = 0  # values over tolerance the study's error budget allows (tuner.contract.precision)
    race_rows: int | None = None  # rows whose bits changed on a relaunch; None: not compared
    first_race_row: int | None = None
    check_ms: float | None = None

    @property
    def fraction(self) -> float:
        return self.checked / self.total if self.total else 1.0

    @property
    def n_bad(self) -> int:
        return self.n_nan + self.n_over

    def attrs(self) -> dict[str, Any]:
        """The trial attributes of a check (beside ``max_err`` and ``checksum``)."""
        out: dict[str, Any] = {"checked_fraction": round(self.fraction, 6), "n_bad": self.n_bad}
        if self.race_rows is not None:
            out["race"] = self.race_rows
        if self.check_ms is not None:
            out["check_ms"] = round(self.check_ms, 3)
        return out


def verdict(result: CheckResult) -> tuple[bool, str]:
    """Pass, or fail with a one-line reason: NaN/unwritten values first, then errors over
    tolerance, then a relaunch that changed bits (a race)."""
    where = f"row {result.worst[0]} col {result.worst[1]}" if result.worst else "?"
    share = f"of {result.checked} checked ({100.0 * result.n_bad / max(1, result.checked):.3g} % bad)"
    if result.n_nan:
        return False, f"NaN/unwritten output: {result.n_nan} values {share}, first at {where}"
    if result.n_over > result.allowed_bad:
        budget = f" (budget {result.allowed_bad})" if result.allowed_bad else ""
        return False, (f"{result.n_over} values over tolerance {share}; worst {where}: got {result.got:.6g}, "
                       f"expected {result.expected:.6g} (error {result.max_err:.3g}){budget}")
    if result.race_rows:
        return False, (f"nondeterministic output (data race?): a relaunch changed the bits of {result.race_rows} rows, "
                       f"first row {result.first_race_row}")
    return True, ""


def errors(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float, rms_floor: bool = True) -> np.ndarray:
    """Per-value error of 2-D arrays (rows of one output), as the device computes it; ``rms_floor``
    False: relative to ``|expected|`` alone (a precise study)."""
    expected = expected.astype(np.float32)
    rms = np.sqrt(np.mean(expected.astype(np.float64) ** 2, axis=1, keepdims=True)).astype(np.float32)
    rms = rms if rms_floor else np.zeros_like(rms)
    with np.errstate(invalid="ignore"):
        return np.abs(got - expected) / (atol + rtol * np.maximum(np.abs(expected), rms))


def host_check(got: np.ndarray, expected: np.ndarray, rows: np.ndarray, total: int, tolerance: Tolerance) -> CheckResult:
    """The sampled host check: ``got``/``expected`` hold the sampled ``rows`` of an output of ``total`` values."""
    result = CheckResult(checked=int(got.size), total=total, allowed_bad=tolerance.allowed_bad(int(got.size)))
    bad = ~(np.isfinite(got) & np.isfinite(expected))
    result.n_nan = int(bad.sum())
    err = np.where(bad, -1.0, errors(got, expected, tolerance.atol, tolerance.rtol, tolerance.rms_floor))
    result.n_over = int((err > 1.0).sum())
    result.checksum = float(np.sum(got, dtype=np.float64)) if not result.n_nan else float("nan")
    if result.n_nan:
        r, c = np.argwhere(bad)[0]
    elif err.size:
        r, c = np.unravel_index(int(np.argmax(err)), err.shape)
        result.max_err = float(err[r, c])
    else:
        result.max_err = 0.0
        return result
    result.worst, result.got, result.expected = (int(rows[r]), int(c)), float(got[r, c]), float(expected[r, c])
    return result


def rows_to_sample(spec: KernelSpec, problem: Problem, requested: int) -> int:
    """The host check's row count: a study's ``measure.check_rows`` when it gives one (> 0),
    else the spec's :meth:`~tuner.contract.kernel_spec.KernelSpec.check_rows`."""
    return int(requested) if requested and int(requested) > 0 else int(spec.check_rows(problem))


def sample_rows(n_rows: int, rows_total: int, seed: int) -> np.ndarray:
    """First, last and random rows (sorted, unique) for the host check."""
    rng = np.random.default_rng(seed + 1)
    return np.unique(np.concatenate([[0, rows_total - 1], rng.integers(0, rows_total, size=max(0, n_rows - 2))]))


def decode(values: np.ndarray, out: OutputSpec) -> np.ndarray:
    from tuner.contract.numerics import bf16_to_f32

    return bf16_to_f32(values) if out.decode == "bfloat16" else values.astype(np.float32)


#: helper builds started ahead and not yet collected, by (file name, source, arch)
_builds: dict[tuple[str, str, str], Future[bytes]] = {}
_build_threads: ThreadPoolExecutor | None = None


def compile_soon(name: str, text: str, arch: str) -> Future[bytes]:
    """Start building a helper kernel now, on a thread: NVRTC releases the GIL, so a worker's helpers
    build side by side and while it sets up CUDA and the inputs (with an empty compile cache they
    are most of a first session's start). :func:`compile_source` collects the build; after that, the
    same helper comes from the compile cache."""
    from tuner.compile.nvrtc import helper_cubin

    global _build_threads
    key = (name, text, arch)
    if key not in _builds:
        if _build_threads is None:
            _build_threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="helper-build")
        _builds[key] = _build_threads.submit(helper_cubin, name, text, arch)
    return _builds[key]


def compile_source(name: str, text: str, arch: str) -> bytes:
    """NVRTC, as every kernel is built (:mod:`tuner.compile.nvrtc`, and its cache: a worker's helper
    kernels then cost nothing after the first session); raises with the log on error."""
    build = compile_soon(name, text, arch)
    del _builds[(name, text, arch)]
    return build.result()


def reference_source(spec: KernelSpec, ref: ReferenceKernel) -> tuple[str, str]:
    """(file name, text) of a reference kernel, with its defines prepended."""
    path = (Path(spec.path).parent / ref.source).resolve()
    lines = [f"#define {k} {v}" for k, v in ref.defines.items()]
    return path.name, "\n".join([*lines, path.read_text()])


class DeviceVerifier:
    """The comparison kernels of one worker, and the expected output of its current problem.

    ``cu`` is ``cuda.bindings.driver``; ``check`` is :func:`tuner.device.driver.check`.
    """

    def __init__(self, cu, stream, arch: str, sm_count: int):
        from tuner.device.driver import check

        self.cu, self.stream, self._ck = cu, stream, check
        self.grid = max(1, sm_count) * 8
        self.module = check("cuModuleLoadData", cu.cuModuleLoadData(compile_source("verify.cu", VERIFY_SOURCE, arch)))
        self.fn = {name: check("cuModuleGetFunction", cu.cuModuleGetFunction(self.module, name.encode()))
                   for name in ("verify_compare_bf16", "verify_compare_f32", "verify_hash", "verify_row_rms")}
        self.stats = check("cuMemAlloc", cu.cuMemAlloc(8 * _S_WORDS + 8))
        self.arch = arch
        self._owned: list[Any] = []
        # device pointers (cuda.bindings' CUdeviceptr), None until a problem needs them
        self.expected: Any = None
        self.row_rms: Any = None
        self.row_hash: Any = None
        self.rows = self.cols = self.row_words = 0
        self.reference_ms: float | None = None

    # -- once per problem ---------------------------------------------------------------------
    def forget(self) -> None:
        for ptr in self._owned:
            self.cu.cuMemFree(ptr)
        self._owned.clear()
        self.expected = self.row_rms = self.row_hash = None
        self.reference_ms = None

    def _alloc(self, nbytes: int):
        ptr = self._ck("cuMemAlloc", self.cu.cuMemAlloc(max(1, nbytes)))
        self._owned.append(ptr)
        return ptr

    def prepare_hashes(self, out: OutputSpec) -> None:
        """Room for the row hashes of ``out`` (the relaunch comparison, with or without a reference).
        Rows must be a multiple of 16 bytes (the hash reads 16-byte words); otherwise no comparison."""
        self.rows, self.cols = int(out.shape[0]), int(np.prod(out.shape[1:]))
        row_bytes = self.cols * np.dtype(out.dtype).itemsize
        self.row_words = row_bytes // 4 if row_bytes % 16 == 0 else 0
        self.row_hash = self._alloc(8 * self.rows)

    def compute_reference(self, spec: KernelSpec, ref: ReferenceKernel, out: OutputSpec,
                          address_of: Callable[[str], int]) -> None:
        """Compile and run ``ref`` into a new FP32 expected buffer, then its row RMS."""
        from tuner.device.driver import kernel_params, launch_config

        cu, ck = self.cu, self._ck
        started = time.perf_counter()
        self.expected = self._alloc(4 * self.rows * self.cols)
        self.row_rms = self._alloc(4 * self.rows)
        name, text = reference_source(spec, ref)
        module = ck("cuModuleLoadData", cu.cuModuleLoadData(compile_source(name, text, self.arch)))
        try:
            func = ck("cuModuleGetFunction", cu.cuModuleGetFunction(module, ref.kernel_name.encode()))
            if ref.launch.smem_bytes:
                ck("cuFuncSetAttribute", cu.cuFuncSetAttribute(
                    func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, ref.launch.smem_bytes))
            lookup = lambda n: int(self.expected) if n == EXPECTED else address_of(n)  # noqa: E731
            params, keep = kernel_params(ref.launch, lookup)
            ck("cuLaunchKernelEx", cu.cuLaunchKernelEx(launch_config(ref.launch, self.stream, func), func, params, 0))
            self._row_rms()
        finally:
            cu.cuModuleUnload(module)
        self.reference_ms = (time.perf_counter() - started) * 1e3

    def load_expected(self, values: np.ndarray) -> None:
        """An expected output computed elsewhere (float32, the output's shape), e.g. on the host."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        self.expected = self._alloc(values.nbytes)
        self.row_rms = self._alloc(4 * self.rows)
        self._ck("cuMemcpyHtoD", self.cu.cuMemcpyHtoD(self.expected, values.ctypes.data, values.nbytes))
        self._row_rms()

    def _row_rms(self) -> None:
        self._launch("verify_row_rms", [Buffer(EXPECTED), _i64(self.rows), _i64(self.cols), Buffer("rms")],
                     {EXPECTED: self.expected, "rms": self.row_rms})
        self._ck("cuStreamSynchronize", self.cu.cuStreamSynchronize(self.stream))

    # -- per trial ------------------------------------------------------------------------------
    def compare(self, got_ptr, out: OutputSpec, tolerance: Tolerance) -> CheckResult:
        """Every value of the output at ``got_ptr`` against the expected output; also stores
        its row hashes for :meth:`relaunch_differs` (when rows are a multiple of 16 bytes)."""
        kind = "bf16" if out.decode == "bfloat16" else "f32"
        self._reset_stats()
        self._launch(f"verify_compare_{kind}",
                     [Buffer("got"), Buffer(EXPECTED), Buffer("rms"), Scalar("float32", float(tolerance.rms_floor)),
                      _i64(self.rows), _i64(self.cols), Scalar("float32", tolerance.atol), Scalar("float32", tolerance.rtol), Buffer("stats"), Buffer("sum"), Buffer("hash")],
                     {"got": got_ptr, EXPECTED: self.expected, "rms": self.row_rms, "stats": self.stats,
                      "sum": int(self.stats) + 8 * _S_WORDS, "hash": self.row_hash})
        stats, checksum = self._read_stats()
        total = self.rows * self.cols
        result = CheckResult(checked=total, total=total, n_nan=int(stats[_S_NAN]), n_over=int(stats[_S_OVER]),
                             allowed_bad=tolerance.allowed_bad(total))
        result.checksum = checksum if not result.n_nan else float("nan")
        if result.n_nan:
            row = int(stats[_S_FIRST_NAN])
            got, exp = self._row(got_ptr, out, row)
            col = int(np.flatnonzero(~np.isfinite(got) | ~np.isfinite(exp))[0])
        else:
            row = int(stats[_S_MAX]) & 0xFFFFFFFF
            result.max_err = float(np.array([int(stats[_S_MAX]) >> 32], np.uint32).view(np.float32)[0])
            got, exp = self._row(got_ptr, out, row)
            col = int(np.argmax(np.nan_to_num(errors(got[None], exp[None], tolerance.atol, tolerance.rtol, tolerance.rms_floor)[0], nan=-1.0)))
        result.worst, result.got, result.expected = (row, col), float(got[col]), float(exp[col])
        return result

    def store_hashes(self, got_ptr) -> None:
        """Row hashes of an output checked on the host (no reference on the device)."""
        if self.row_words:
            self._hash(got_ptr, compare_only=0)

    def relaunch_differs(self, got_ptr) -> tuple[int | None, int | None]:
        """(rows whose bits differ from the stored hashes, the first such row); (None, None)
        where rows are not a multiple of 16 bytes."""
        if not self.row_words:
            return None, None
        self._reset_stats()
        self._hash(got_ptr, compare_only=1)
        stats, _ = self._read_stats()
        diff = int(stats[_S_DIFF])
        return diff, (int(stats[_S_FIRST_DIFF]) if diff else None)

    # -- plumbing -------------------------------------------------------------------------------
    def _hash(self, got_ptr, compare_only: int) -> None:
        self._launch("verify_hash",
                     [Buffer("got"), _i64(self.rows), _i64(self.row_words), Buffer("hash"), Scalar("int32", compare_only),
                      Buffer("stats")],
                     {"got": got_ptr, "hash": self.row_hash, "stats": self.stats})

    def _launch(self, name: str, args: list, buffers: dict[str, Any]) -> None:
        from tuner.device.driver import kernel_params, launch_config

        launch = Launch(grid=(self.grid, 1, 1), block=(_THREADS, 1, 1), args=args)
        func = self.fn[name]
        params, keep = kernel_params(launch, lambda n: int(buffers[n]))
        self._ck("cuLaunchKernelEx", self.cu.cuLaunchKernelEx(launch_config(launch, self.stream, func), func, params, 0))

    def _reset_stats(self) -> None:
        init = np.zeros(_S_WORDS + 1, np.uint64)
        init[_S_FIRST_NAN] = init[_S_FIRST_DIFF] = _NO_ROW
        self._host_stats = init  # kept alive until the copy has run
        self._ck("cuMemcpyHtoDAsync", self.cu.cuMemcpyHtoDAsync(self.stats, init.ctypes.data, init.nbytes, self.stream))

    def _read_stats(self) -> tuple[np.ndarray, float]:
        host = np.empty(_S_WORDS + 1, np.uint64)
        self._ck("cuMemcpyDtoHAsync", self.cu.cuMemcpyDtoHAsync(host.ctypes.data, self.stats, host.nbytes, self.stream))
        self._ck("cuStreamSynchronize", self.cu.cuStreamSynchronize(self.stream))
        return host[:_S_WORDS], float(host[_S_WORDS:].view(np.float64)[0])

    def _row(self, got_ptr, out: OutputSpec, row: int) -> tuple[np.ndarray, np.ndarray]:
        itemsize = np.dtype(out.dtype).itemsize
        got = np.empty(self.cols, dtype=out.dtype)
        exp = np.empty(self.cols, dtype=np.float32)
        self._ck("cuMemcpyDtoH", self.cu.cuMemcpyDtoH(got.ctypes.data, int(got_ptr) + row * self.cols * itemsize, got.nbytes))
        self._ck("cuMemcpyDtoH", self.cu.cuMemcpyDtoH(exp.ctypes.data, int(self.expected) + row * self.cols * 4, exp.nbytes))
        return decode(got, out), exp


def _i64(value: int) -> Scalar:
    return Scalar("int64", int(value))

