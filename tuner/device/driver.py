"""CUDA driver plumbing shared by the GPU worker and the bench harness: error checks, and a
spec's :class:`~tuner.contract.kernel_spec.Launch` turned into driver objects (tensor maps, the kernel's
argument array, the launch configuration).

The driver is imported inside the functions: importing this module loads nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from tuner.contract.kernel_spec import Buffer, Launch, Scalar, TensorMap

#: the ctypes type of each Scalar ctype (ctypes checks the value's type when it builds one)
CTYPES: dict[str, Callable[..., ctypes._SimpleCData[Any]]] = {
    "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32,
    "int64": ctypes.c_int64,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
}


class CudaError(Exception):
    def __init__(self, call: str, code):
        from cuda.bindings import driver as cu

        _, name = cu.cuGetErrorName(code)
        self.call = call
        self.code = code
        self.name = name.decode() if isinstance(name, bytes) else str(code)
        super().__init__(f"{call}: {self.name}")


def check(call: str, result):
    """Raise :class:`CudaError` on failure; return the call's value(s) otherwise."""
    from cuda.bindings import driver as cu

    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(call, err)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def tensor_map(tm: TensorMap, address: int):
    """``cuTensorMapEncodeTiled`` for a 2-D row-major buffer (dims given outermost first)."""
    from cuda.bindings import driver as cu

    dtypes = {
        "uint8": (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, 1),
        "bfloat16": (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2),
        "uint16": (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16, 2),
        "float32": (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4),
    }
    swizzles = {
        0: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        32: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
        64: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
        128: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
    }
    promotions = {
        0: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
        64: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        128: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        256: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    }
    dtype, itemsize = dtypes[tm.dtype]
    rows, cols = tm.shape
    box_rows, box_cols = tm.box
    return check("cuTensorMapEncodeTiled", cu.cuTensorMapEncodeTiled(
        dtype, 2, address,
        [cu.cuuint64_t(cols), cu.cuuint64_t(rows)],
        [cu.cuuint64_t(cols * itemsize)],
        [cu.cuuint32_t(box_cols), cu.cuuint32_t(box_rows)],
        [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzles[tm.swizzle], promotions[tm.l2_promotion],
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ))


def kernel_params(launch: Launch, address_of: Callable[[str], int]) -> tuple[int, list[Any]]:
    """A ``void*[]`` of argument addresses for ``cuLaunchKernelEx``, plus the objects it
    points into (keep them alive while launching). ``address_of`` maps a buffer name to
    its device address."""
    keep: list[Any] = []
    addresses: list[int] = []
    for arg in launch.args:
        if isinstance(arg, Buffer):
            pointer = ctypes.c_uint64(address_of(arg.name))
            keep.append(pointer)
            addresses.append(ctypes.addressof(pointer))
        elif isinstance(arg, Scalar):
            scalar = CTYPES[arg.ctype](arg.value)
            keep.append(scalar)
            addresses.append(ctypes.addressof(scalar))
        elif isinstance(arg, TensorMap):
            tmap = tensor_map(arg, address_of(arg.buffer))
            keep.append(tmap)
            addresses.append(int(tmap.getPtr()))
        else:
            raise TypeError(f"unknown kernel argument {arg!r}")
    array = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
    keep.append(array)
    return ctypes.addressof(array), keep


def launch_config(launch: Launch, stream, func):
    """Grid, block, dynamic SMEM and stream; the cluster dims as a launch attribute."""
    from cuda.bindings import driver as cu

    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = launch.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = launch.block
    cfg.sharedMemBytes = launch.smem_bytes
    cfg.hStream = stream
    attrs = []
    # A kernel that declares __cluster_dims__ has its cluster fixed at compile time; the
    # launch attribute may only restate it, so leave it out and let the kernel's stand.
    fixed = check("cuFuncGetAttribute", cu.cuFuncGetAttribute(
        cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, func))
    if tuple(launch.cluster) != (1, 1, 1) and not fixed:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = launch.cluster
        attrs.append(attr)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg
