"""Inputs generated on the GPU: a :class:`tuner.contract.kernel_spec.RandomTable` filled by a small kernel.

A megakernel's full-size inputs are GBs (patch_embed's A: 0.7 GB); drawn with numpy and
copied over they held the first trial back by seconds. Each element is
``table[byte of a counter-based hash of (seed, index)]``: reproducible for a seed, the same
on every GPU, and no state to keep. Runs in the worker process (``cu`` is
``cuda.bindings.driver``), built with NVRTC through the compile cache.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from tuner.contract.kernel_spec import Buffer, Launch, RandomTable, Scalar

GENERATOR_SOURCE = r"""
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

static __device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Eight elements per hash: element 8g+k takes byte k of splitmix64(seed, g).
template <typename T>
static __device__ void fill(T* out, uint64_t n, const T* table, uint64_t seed) {
  __shared__ T t[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) t[i] = table[i];
  __syncthreads();
  const uint64_t groups = (n + 7) / 8;
  for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t h = splitmix64(seed ^ (g * 0xD1B54A32D192ED03ull));
    if (sizeof(T) == 1 && 8 * g + 8 <= n) {  // one 8-byte store (the buffer is 256-byte aligned)
      uint64_t packed = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) packed |= (uint64_t)(uint8_t)t[(h >> (8 * k)) & 0xFF] << (8 * k);
      reinterpret_cast<uint64_t*>(out)[g] = packed;
    } else {
      for (int k = 0; k < 8 && 8 * g + k < n; ++k) out[8 * g + k] = t[(h >> (8 * k)) & 0xFF];
    }
  }
}

extern "C" __global__ void fill_u8(uint8_t* out, uint64_t n, const uint8_t* table, uint64_t seed) { fill(out, n, table, seed); }
extern "C" __global__ void fill_u16(uint16_t* out, uint64_t n, const uint16_t* table, uint64_t seed) { fill(out, n, table, seed); }
extern "C" __global__ void fill_u32(uint32_t* out, uint64_t n, const uint32_t* table, uint64_t seed) { fill(out, n, table, seed); }
"""

_KERNELS = {1: "fill_u8", 2: "fill_u16", 4: "fill_u32"}
_THREADS = 256


def input_seed(seed: int, name: str) -> int:
    """Each input of a problem its own stream: the run's seed and the input's name."""
    return (int(seed) * 0x100000001B3 + zlib.crc32(name.encode())) & 0xFFFF_FFFF_FFFF_FFFF


class InputGenerator:
    """Fills device buffers with :class:`RandomTable` inputs (one per worker, built once)."""

    def __init__(self, cu: Any, stream: Any, arch: str, sm_count: int):
        from tuner.device.driver import check
        from tuner.device.verify import compile_source

        self.cu, self.stream, self._ck = cu, stream, check
        self.grid = max(1, sm_count) * 4
        self.module = check("cuModuleLoadData", cu.cuModuleLoadData(compile_source("generate.cu", GENERATOR_SOURCE, arch)))
        self.fn = {size: check("cuModuleGetFunction", cu.cuModuleGetFunction(self.module, name.encode()))
                   for size, name in _KERNELS.items()}
        self.table = check("cuMemAlloc", cu.cuMemAlloc(256 * 4))

    def fill(self, ptr: Any, spec: RandomTable, seed: int) -> None:
        """Generate ``spec`` into ``ptr`` (``spec.nbytes`` allocated); returns when it is done."""
        from tuner.device.driver import kernel_params, launch_config

        cu, ck = self.cu, self._ck
        table = np.ascontiguousarray(spec.table)
        ck("cuMemcpyHtoD", cu.cuMemcpyHtoD(self.table, table.ctypes.data, table.nbytes))
        size = table.dtype.itemsize
        n = spec.nbytes // size
        launch = Launch(grid=(self.grid, 1, 1), block=(_THREADS, 1, 1),
                        args=[Buffer("out"), Scalar("uint64", n), Buffer("table"), Scalar("uint64", seed)])
        buffers = {"out": ptr, "table": self.table}
        params, keep = kernel_params(launch, lambda name: int(buffers[name]))
        func = self.fn[size]
        ck("cuLaunchKernelEx", cu.cuLaunchKernelEx(launch_config(launch, self.stream, func), func, params, 0))
        ck("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))

    def close(self) -> None:
        self.cu.cuMemFree(self.table)
        self.cu.cuModuleUnload(self.module)
