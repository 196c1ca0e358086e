"""An ABI twin of a kernel that writes back what it receives, and the comparison with what was meant.

The stub has the real entry's name, parameter list and launch directives (a :class:`PtxEntry`
from the real kernel's PTX), so a launch that fits the kernel fits the stub. Block 0 / thread 0
copies every argument's bytes, grid, block, cluster shape (``%cluster_nctaid``,
``%cluster_nctarank``) and ``%dynamic_smem_size`` into a ``__device__`` global (the stub cannot
take an extra parameter; the host reads the global back), and thread 0 of every block counts
itself there. :func:`differences` compares that record with what a launch description meant.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tuner.compile.ptx_entry import PtxEntry, PtxParam
from tuner.contract.kernel_spec import Arg, Buffer, Launch, Scalar, TensorMap

if TYPE_CHECKING:
    from tuner.device.protocol import HostDryRunJob

#: the stub's result buffer (a ``__device__`` global: the stub keeps the real parameter list)
RECORD = "tuner_host_dry_run_record"
MAGIC = 0x7D2B5EED
#: the record's header, one u32 each, then each argument's bytes at an 8-byte aligned offset
HEADER = ("magic", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "cluster_x", "cluster_y", "cluster_z",
          "cluster_ctas", "dynamic_smem", "blocks_run", "params")
_HEADER_BYTES = 64

_SCALARS = {"int32": "<i", "uint32": "<I", "int64": "<q", "uint64": "<Q", "float32": "<f"}
_C_SCALARS = {"u8": "unsigned char", "s8": "signed char", "b8": "unsigned char", "u16": "unsigned short",
              "s16": "short", "b16": "unsigned short", "f16": "unsigned short", "u32": "unsigned int", "s32": "int",
              "b32": "unsigned int", "f32": "float", "u64": "unsigned long long", "s64": "long long",
              "b64": "unsigned long long", "f64": "double"}


# -- the stub --------------------------------------------------------------------------------------


def arg_offsets(entry: PtxEntry) -> list[int]:
    """Where each parameter's bytes sit in the record."""
    offsets, at = [], _HEADER_BYTES
    for param in entry.params:
        offsets.append(at)
        at += (param.size + 7) // 8 * 8
    return offsets


def record_size(entry: PtxEntry) -> int:
    if not entry.params:
        return _HEADER_BYTES
    return arg_offsets(entry)[-1] + (entry.params[-1].size + 7) // 8 * 8


def _c_param(index: int, param: PtxParam) -> tuple[str, str]:
    """(a type declaration or "", the parameter) spelling ``param`` in C++ with the same PTX ABI."""
    if param.count == 1 and param.ptx_type in _C_SCALARS and param.align == param.size:
        return "", f"{_C_SCALARS[param.ptx_type]} p{index}"
    struct_name = f"TunerParam{index}"
    decl = f"struct __align__({param.align}) {struct_name} {{ unsigned char bytes[{param.size}]; }};\n"
    return decl, f"const __grid_constant__ {struct_name} p{index}"


def stub_source(entry: PtxEntry, cluster: tuple[int, int, int] | None = None) -> str:
    """CUDA C++ for an ABI twin of ``entry`` that writes back what it receives.

    ``cluster`` replaces the entry's compiled-in cluster dims (a GPU whose clusters are smaller).
    """
    if entry.reqntid is not None:
        raise ValueError(f"{entry.name}: .reqntid has no C++ spelling; the stub cannot repeat it")
    if entry.maxntid is not None and entry.maxntid[1:] != (1, 1):
        raise ValueError(f"{entry.name}: .maxntid {entry.maxntid} has no C++ spelling (__launch_bounds__ is 1-D)")
    decls, params = [], []
    for i, p in enumerate(entry.params):
        decl, param = _c_param(i, p)
        decls.append(decl)
        params.append(param)
    attrs = []
    dims = cluster or entry.reqnctapercluster
    if dims is not None and not (cluster == (1, 1, 1)):  # capped to one CTA: no cluster at all
        attrs.append(f"__cluster_dims__({dims[0]}, {dims[1]}, {dims[2]})")
    if entry.maxntid is not None:
        bounds = [str(entry.maxntid[0]), str(entry.minnctapersm or 0)]
        if entry.maxclusterrank is not None:
            bounds.append(str(entry.maxclusterrank))
        attrs.append(f"__launch_bounds__({', '.join(bounds).removesuffix(', 0')})")
    copies = "".join(f"  tuner_copy(record + {off}, &p{i}, {p.size});\n"
                     for i, (off, p) in enumerate(zip(arg_offsets(entry), entry.params, strict=True)))
    sregs = "".join(f"static __device__ __forceinline__ unsigned {n}() {{\n"
                    f"#if __CUDA_ARCH__ >= {since}\n"
                    f"  unsigned v; asm volatile(\"mov.u32 %0, %%{r};\" : \"=r\"(v)); return v;\n"
                    f"#else\n  return 1u;  // no clusters before sm_90: a cluster of one\n#endif\n}}\n"
                    for n, r, since in (("tuner_cx", "cluster_nctaid.x", 900), ("tuner_cy", "cluster_nctaid.y", 900),
                                        ("tuner_cz", "cluster_nctaid.z", 900), ("tuner_cn", "cluster_nctarank", 900),
                                        ("tuner_dsmem", "dynamic_smem_size", 0)))
    return f"""// generated by tuner/check/host_dry_run.py: an ABI twin of {entry.name} that writes back what it receives
{''.join(decls)}__device__ __align__(16) unsigned char {RECORD}[{record_size(entry)}];
{sregs}static __device__ __forceinline__ void tuner_copy(unsigned char* dst, const void* src, int n) {{
  const unsigned char* s = static_cast<const unsigned char*>(src);
  for (int i = 0; i < n; ++i) dst[i] = s[i];
}}

extern "C" __global__ void {' '.join(attrs)}
{entry.name}({', '.join(params)}) {{
  unsigned char* record = {RECORD};
  unsigned* words = reinterpret_cast<unsigned*>(record);
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) atomicAdd(&words[12], 1u);
  if ((blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x | threadIdx.y | threadIdx.z) != 0) return;
  words[1] = gridDim.x; words[2] = gridDim.y; words[3] = gridDim.z;
  words[4] = blockDim.x; words[5] = blockDim.y; words[6] = blockDim.z;
  words[7] = tuner_cx(); words[8] = tuner_cy(); words[9] = tuner_cz(); words[10] = tuner_cn();
  words[11] = tuner_dsmem(); words[13] = {len(entry.params)}u;
{copies}  __threadfence();
  words[0] = {MAGIC}u;
}}
"""


# -- what the spec meant, and what arrived -----------------------------------------------------------


def arg_abi(arg: Arg) -> tuple[int, int]:
    """(size, alignment) of the parameter an argument fills."""
    if isinstance(arg, TensorMap):
        return 128, 64
    if isinstance(arg, Scalar):
        size = struct.calcsize(_SCALARS[arg.ctype])
        return size, size
    return 8, 8


def abi_differences(launch: Launch, entry: PtxEntry) -> list[str]:
    """Where the launch's arguments do not fit the kernel's parameters (count, size, alignment)."""
    if len(launch.args) != len(entry.params):
        return [f"args: {len(launch.args)} arguments for {len(entry.params)} parameters"]
    found = []
    for i, (arg, param) in enumerate(zip(launch.args, entry.params, strict=True)):
        size, align = arg_abi(arg)
        if (size, align) != (param.size, param.align):
            found.append(f"arg {i}: {type(arg).__name__} of {size} B (align {align}) for a parameter of "
                         f"{param.size} B (align {param.align})")
    return found


def directive_differences(launch: Launch, entry: PtxEntry) -> list[str]:
    """Where the launch breaks the kernel's own launch directives (threads, cluster shape)."""
    found = []
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    if entry.maxntid is not None and threads > entry.maxntid[0] * entry.maxntid[1] * entry.maxntid[2]:
        found.append(f"kernel threads: a block of {threads} > the kernel's .maxntid {entry.maxntid}")
    if entry.reqntid is not None and tuple(launch.block) != entry.reqntid:
        found.append(f"kernel threads: block {tuple(launch.block)} but the kernel's .reqntid is {entry.reqntid}")
    if entry.reqnctapercluster is not None and tuple(launch.cluster) != entry.reqnctapercluster:
        found.append(f"kernel cluster: the launch says {tuple(launch.cluster)}, the kernel is compiled for "
                     f"{entry.reqnctapercluster}")
    if entry.explicitcluster and entry.reqnctapercluster is None and tuple(launch.cluster) == (1, 1, 1):
        found.append("kernel cluster: the kernel must be launched as a cluster; the launch gives none")
    return found


def expected_args(launch: Launch, address_of: Callable[[str], int],
                  encode: Callable[[TensorMap, int], bytes]) -> list[bytes]:
    """The bytes the spec means each argument to be: a pointer as allocated, a scalar packed from its
    value (a value its type cannot hold raises), a tensor map as ``encode`` (cuTensorMapEncodeTiled)
    makes it from the buffer's address."""
    found = []
    for arg in launch.args:
        if isinstance(arg, Buffer):
            found.append(struct.pack("<Q", address_of(arg.name)))
        elif isinstance(arg, Scalar):
            found.append(struct.pack(_SCALARS[arg.ctype], arg.value))
        else:
            found.append(encode(arg, address_of(arg.buffer)))
    return found


@dataclass(frozen=True)
class Received:
    """A decoded stub record."""

    header: dict[str, int]
    args: list[bytes]


def decode_record(raw: bytes, entry: PtxEntry) -> Received:
    header = dict(zip(HEADER, struct.unpack_from(f"<{len(HEADER)}I", raw), strict=True))
    args = [bytes(raw[off:off + p.size]) for off, p in zip(arg_offsets(entry), entry.params, strict=True)]
    return Received(header, args)


def differences(launch: Launch, entry: PtxEntry, sent: Sequence[bytes], received: Received,
                cluster: tuple[int, int, int] | None = None) -> list[str]:
    """Each way ``received`` differs from what ``launch`` meant (``sent``: :func:`expected_args`).

    ``cluster``: the cluster shape the launch must get (the kernel's compiled-in one, else the launch's).
    """
    h = received.header
    if h["magic"] != MAGIC:
        return ["record: block 0 / thread 0 never wrote it"]
    found = []
    want_cluster = cluster or launch.cluster
    for name, want, got in (
        ("grid", tuple(launch.grid), (h["grid_x"], h["grid_y"], h["grid_z"])),
        ("block", tuple(launch.block), (h["block_x"], h["block_y"], h["block_z"])),
        ("cluster", tuple(want_cluster), (h["cluster_x"], h["cluster_y"], h["cluster_z"])),
        ("cluster_ctas", want_cluster[0] * want_cluster[1] * want_cluster[2], h["cluster_ctas"]),
        ("dynamic_smem", launch.smem_bytes, h["dynamic_smem"]),
        ("blocks_run", launch.grid[0] * launch.grid[1] * launch.grid[2], h["blocks_run"]),
        ("params", len(entry.params), h["params"]),
    ):
        if want != got:
            found.append(f"{name}: meant {want}, received {got}")
    for i, (want_bytes, got_bytes) in enumerate(zip(sent, received.args, strict=True)):
        if want_bytes != got_bytes:
            first = next(j for j, (a, b) in enumerate(zip(want_bytes, got_bytes, strict=False)) if a != b) \
                if len(want_bytes) == len(got_bytes) else 0
            found.append(f"arg {i}: {sum(a != b for a, b in zip(want_bytes, got_bytes, strict=False))} byte(s) differ "
                         f"(first at {first}: meant {want_bytes[first:first + 8].hex()}, received "
                         f"{got_bytes[first:first + 8].hex()})")
    return found


# -- the worker's side: launches as JSON, the stub launched and read back ---------------------------------------------------------------------


def launch_to_json(launch: Launch) -> dict[str, Any]:
    return {**asdict(launch), "args": [{"kind": type(a).__name__, **asdict(a)} for a in launch.args]}


def launch_from_json(data: Mapping[str, Any]) -> Launch:
    kinds = {"Buffer": Buffer, "Scalar": Scalar, "TensorMap": TensorMap}
    args: list[Arg] = []
    for a in data["args"]:
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in a.items() if k != "kind"}
        args.append(kinds[a["kind"]](**fields))
    return Launch(grid=tuple(data["grid"]), block=tuple(data["block"]), args=args,  # type: ignore[arg-type]
                  cluster=tuple(data["cluster"]), smem_bytes=int(data["smem_bytes"]))  # type: ignore[arg-type]


def worker_job(measurer, backend, job: HostDryRunJob, channel) -> tuple[Any, bool]:
    """The worker's side (``op: host_dry_run``): the problem's buffers (as a measurement has them),
    then each case's stub launched and its record read back, with the bytes the spec meant."""
    from tuner.device.timing import LaunchFailed
    from tuner.measurement.value import Measurement

    measurer.prepare(job)
    channel.ready()
    results: list[dict[str, Any]] = []
    for step, case in enumerate(job.cases):
        launch = launch_from_json(case["launch"])
        try:
            sent = expected_args(launch, backend.buffer_address, backend.tensor_map_bytes)
            raw = backend.echo(launch, case["kernel_name"], case["image"], RECORD, case["record_size"])
            results.append({"sent": [s.hex() for s in sent], "record": raw.hex()})
        except LaunchFailed as exc:
            results.append({"error": exc.reason})
            if exc.restart:
                return Measurement("launch_error", reason=exc.reason, extra={"results": results}), True
        except (struct.error, KeyError) as exc:  # a scalar its type cannot hold, a buffer the problem lacks
            results.append({"error": f"{type(exc).__name__}: {exc}"})
        if step % 16 == 15:
            channel.block(step, float(step + 1), [], step + 1)
    return Measurement("ok", extra={"results": results}), False
