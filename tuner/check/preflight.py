"""The preflight (``tuner check STUDY --compile``): what would fail on a GPU fails here first.

Every valid config (a stratified sample above :data:`SAMPLE`, all with ``--all``) is compiled,
and its CUBIN checked against the launch the spec describes for it: the entry exists; the
arguments match the kernel's parameters in count, size and alignment; threads, registers x
threads, static + dynamic shared memory and the cluster fit the target (:mod:`tuner.contract.arch`).
Once per target, the spec's inputs, outputs and reference (a few rows, on the CPU) evaluate.
A kernel that is its own program (:mod:`tuner.contract.program`) is built with its own command,
and the rest is its program's: only its builds are checked.

A config passes, is rejected (by the study's compile limits: registers, spills), or fails with
reasons. Exit codes: 0 when none fails, :data:`EXIT_FAILED` when any does (a spec or study that
cannot even be read is bad input: exit 2, before this runs).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuner.compile.build import CompileLimits, CompileResult
from tuner.compile.cubin import CubinError, CubinKernel, read_cubin
from tuner.compile.nvrtc import compile_many
from tuner.contract.arch import ArchLimits, limits
from tuner.contract.kernel_spec import (
    EXPECTED,
    Buffer,
    Config,
    DeviceInfo,
    KernelSpec,
    KnownNames,
    Launch,
    Problem,
    RandomTable,
    Scalar,
    TensorMap,
    Value,
    user_code,
)
from tuner.contract.program import ProgramSpec
from tuner.errors import UserError
from tuner.progress import Shown, progress
from tuner.search.enumeration import reason_kind

#: above this many valid configs per target, a stratified sample is checked (``--all``: every one)
SAMPLE = 64
#: exit code of a preflight with a failed config
EXIT_FAILED = 1
#: inputs larger than this are not drawn on the host for the reference check
HOST_INPUT_LIMIT = 256 << 20
#: output rows the reference is evaluated on
REFERENCE_ROWS = 3

#: (size, alignment) of each argument kind as the kernel receives it
_SCALAR_LAYOUT = {"int32": (4, 4), "uint32": (4, 4), "float32": (4, 4), "int64": (8, 8), "uint64": (8, 8)}
_POINTER = (8, 8)
_TENSOR_MAP = (128, 64)  # CUtensorMap: 128 bytes, __align__(64)
_TENSOR_MAP_DTYPES = {"uint8": 1, "bfloat16": 2, "uint16": 2, "float16": 2, "float32": 4}  # element bytes


@dataclass
class ConfigCheck:
    """One config on one target."""

    params: dict[str, Value]
    arch: str
    compiled: CompileResult
    reasons: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.reasons:
            return "failed"
        return "passed" if self.compiled.ok else "rejected"


@dataclass
class Preflight:
    """The outcome over a study: per config, and the spec-level checks per target."""

    study: str
    valid: int
    checked: list[ConfigCheck] = field(default_factory=list)
    spec_failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.spec_failures and all(c.status != "failed" for c in self.checked)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else EXIT_FAILED

    def counts(self) -> dict[str, int]:
        return dict(Counter(c.status for c in self.checked))

    def by_reason(self) -> list[tuple[int, str]]:
        """(count, one example) per kind of failure, most frequent first; the example keeps its numbers."""
        kinds: Counter[str] = Counter()
        examples: dict[str, str] = {}
        for reason in [*self.spec_failures, *(r for c in self.checked for r in c.reasons)]:
            kind = reason_kind(reason)
            kinds[kind] += 1
            examples.setdefault(kind, reason)
        return [(n, examples[k]) for k, n in kinds.most_common()]

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.ok, "counts": self.counts(), "valid": self.valid, "checked": len(self.checked),
                "seconds": round(self.seconds, 2), "failures": [{"count": n, "reason": r} for n, r in self.by_reason()],
                "notes": self.notes}


def device_for(arch: str) -> DeviceInfo:
    """The device a spec is told about when its launch is built for ``arch`` without a GPU."""
    row = limits(arch)
    return DeviceInfo(name=f"{arch} (preflight)", cc=row.cc, max_smem_per_block=row.max_smem_per_block)


def stratified(valid: Sequence[dict[str, Value]], size: int) -> list[dict[str, Value]]:
    """At most about ``size`` configs of ``valid``, evenly spread, with every value of every axis at least once."""
    if len(valid) <= size:
        return list(valid)
    chosen = {round(i * (len(valid) - 1) / (size - 1)) for i in range(size)}
    seen = {(k, v) for i in chosen for k, v in valid[i].items()}
    for i, params in enumerate(valid):
        if any((k, v) not in seen for k, v in params.items()):
            chosen.add(i)
            seen.update(params.items())
    return [valid[i] for i in sorted(chosen)]


def run_preflight(spec: KernelSpec, problem: Problem, valid: Sequence[dict[str, Value]], full: Callable[[dict], Config],
                  targets: Sequence[str], compile_limits: CompileLimits, *, every: bool = False, study: str = "",
                  cache_dir: Path | str | None = None, jobs: int | None = None, shown: Shown = None) -> Preflight:
    """Compile and check ``valid`` (or a sample of it) for each target, the builds' progress shown as
    ``shown`` says; see the module documentation."""
    start = time.perf_counter()
    report = Preflight(study, len(valid))
    chosen = list(valid) if every else with_axis_lines(stratified(valid, SAMPLE), valid)
    if len(chosen) < len(valid):
        report.notes.append(f"checked a stratified sample of {len(chosen)} of {len(valid)} valid configs per target "
                            "(--all: every one)")
    with progress(len(chosen) * len(targets), "compiling", "config", shown) as tick:
        for index, arch in enumerate(targets):
            buffers, failures = check_spec(spec, problem, arch)
            report.spec_failures.extend(f"{arch}: {f}" if len(targets) > 1 else f for f in failures)
            configs = [full(p) for p in chosen]
            results = compile_many(spec, configs, problem, arch, cache_dir, compile_limits, jobs, tick)
            row = limits(arch)
            checks = []
            for params, config, result in zip(chosen, configs, results, strict=True):
                check = ConfigCheck(params, arch, result)
                check.reasons = check_config(spec, config, problem, row, result, buffers)
                checks.append(check)
            report.checked.extend(checks)
            if index == 0:  # one target tells
                report.notes.extend(inert_note(axis, n) for axis, n in inert_axes(spec, problem, configs, checks).items())
    report.seconds = time.perf_counter() - start
    return report


def with_axis_lines(sample: list[dict[str, Value]], valid: Sequence[dict[str, Value]]) -> list[dict[str, Value]]:
    """``sample`` and the valid configs one axis away from its first config (each value of each axis),
    so that every axis is seen changing alone (:func:`inert_axes`)."""
    if not sample:
        return sample
    base = sample[0]
    keys = {tuple(sorted(p.items())) for p in sample}
    lines = []
    for params in valid:
        if sum(params[a] != base[a] for a in base) == 1 and tuple(sorted(params.items())) not in keys:
            lines.append(params)
    return [*sample, *lines]


def inert_note(axis: str, compared: int) -> str:
    return (f"{axis} changes neither the compiled kernel nor its launch ({compared} configs compared): "
            "a define the .cu guards but never reads? Tune it, or drop it from the space")


def inert_axes(spec: KernelSpec, problem: Problem, configs: Sequence[Config],
               checks: Sequence[ConfigCheck]) -> dict[str, int]:
    """The axes whose every change, among the passed configs that differ in that axis alone, leaves
    the CUBIN and the launch as they were: ``{axis: configs compared}`` (a define nothing reads
    multiplies the space and the trials for nothing)."""
    signatures: dict[int, tuple[str, str]] = {}
    for i, (config, check) in enumerate(zip(configs, checks, strict=True)):
        if check.status != "passed" or not check.compiled.cubin_path:
            continue
        try:
            launch = None if isinstance(spec, ProgramSpec) else spec.launch(config, problem, device_for(check.arch))
            cubin = hashlib.sha256(Path(check.compiled.cubin_path).read_bytes()).hexdigest()
        except (UserError, OSError):
            continue
        signatures[i] = (cubin, repr(launch))
    axes = list(checks[0].params) if checks else []
    inert = {}
    for axis in axes:
        groups: dict[tuple, set] = {}
        sizes: Counter[tuple] = Counter()
        for i, sig in signatures.items():
            rest = tuple((a, v) for a, v in checks[i].params.items() if a != axis)
            groups.setdefault(rest, set()).add(sig)
            sizes[rest] += 1
        compared = [rest for rest, n in sizes.items() if n > 1]
        if compared and all(len(groups[rest]) == 1 for rest in compared):
            inert[axis] = sum(sizes[rest] for rest in compared)
    return inert


# -- once per target: the spec's data -----------------------------------------------------------
def check_spec(spec: KernelSpec, problem: Problem, arch: str) -> tuple[dict[str, tuple[tuple[int, ...], str]], list[str]]:
    """The buffers the spec declares (name -> (shape, dtype)) and what fails in its inputs, outputs
    and reference for ``problem``."""
    failures: list[str] = []
    buffers: dict[str, tuple[tuple[int, ...], str]] = {}
    if isinstance(spec, ProgramSpec):  # its program makes its inputs and checks its outputs
        return buffers, failures
    rng = np.random.default_rng(0)
    try:
        with user_code(spec.path, "outputs()"):
            outputs = dict(spec.outputs(problem))
        with user_code(spec.path, "inputs()"):
            inputs = dict(spec.inputs(problem, rng))
        if not outputs:
            raise UserError(f"kernel spec {spec.path.name}: outputs() names no output")
        for name, value in inputs.items():
            if not isinstance(value, (np.ndarray, RandomTable)):
                raise UserError(f"kernel spec {spec.path.name}: input {name!r} is a {type(value).__name__}, "
                                "not a numpy array or RandomTable")
            buffers[name] = (tuple(value.shape), str(value.dtype))
        for name, out in outputs.items():
            buffers[name] = (tuple(out.shape), out.dtype)
        with user_code(spec.path, "flops()"):
            float(spec.flops(problem))
        with user_code(spec.path, "reference_kernel()"):
            kernel = spec.reference_kernel(problem)
        if kernel is not None:
            for arg in kernel.launch.args:
                if isinstance(arg, Buffer) and arg.name not in inputs and arg.name != EXPECTED:
                    failures.append(f"reference kernel {kernel.kernel_name}: argument {arg.name!r} is no input "
                                    f"({', '.join(inputs)}) nor {EXPECTED!r}")
        else:
            failures.extend(_check_host_reference(spec, problem, inputs, outputs, rng))
    except UserError as exc:
        failures.append(str(exc))
    return buffers, failures


def _check_host_reference(spec: KernelSpec, problem: Problem, inputs: Mapping[str, Any], outputs: Mapping[str, Any],
                          rng: np.random.Generator) -> list[str]:
    size = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in inputs.values())
    if size > HOST_INPUT_LIMIT:
        return []  # too large to draw here; the worker's check runs it on the GPU host
    from tuner.contract.kernel_spec import host_inputs

    host = KnownNames(spec.path.name, host_inputs(inputs, rng), kind="input")
    first = next(iter(outputs.values()))
    rows = np.arange(min(REFERENCE_ROWS, first.shape[0]))
    with user_code(spec.path, "reference()"):
        got = np.asarray(spec.reference(host, problem, rows))
    want = (len(rows), *first.shape[1:])
    if got.shape != want:
        return [f"kernel spec {spec.path.name}: reference() returned shape {got.shape} for {len(rows)} rows; "
                f"the first output's rows are {want}"]
    if got.dtype.kind not in "fiu":
        return [f"kernel spec {spec.path.name}: reference() returned {got.dtype} values, not numbers"]
    return []


# -- per config: the launch against the CUBIN and the target ------------------------------------
def check_config(spec: KernelSpec, config: Config, problem: Problem, row: ArchLimits, compiled: CompileResult,
                 buffers: Mapping[str, tuple[tuple[int, ...], str]]) -> list[str]:
    """Why this config would fail on a GPU of ``row``'s target ([] when it would not)."""
    if compiled.status == "compile_error":
        return [f"compile_error: {compiled.reason}"]  # the compiler's own line: file(line): error ...
    if not compiled.ok or isinstance(spec, ProgramSpec):
        return []  # rejected by the study's compile limits (never launched), or launched by its own program
    launch, reasons = check_launch(spec, config, problem, row, buffers)
    if launch is None or any("whole numbers" in r for r in reasons):
        return reasons
    try:
        return reasons + check_built(spec, launch, compiled, row)
    except (OSError, CubinError) as exc:
        return [*reasons, f"CUBIN unreadable: {exc}"]


def check_built(spec: KernelSpec, launch: Launch, compiled: CompileResult, row: ArchLimits) -> list[str]:
    """The launch against its CUBIN: the entry, its parameters, registers, shared memory, cluster.
    Raises :class:`CubinError` (or ``OSError``) where the CUBIN cannot be read."""
    kernel, why = _entry(spec, read_cubin(Path(str(compiled.cubin_path)).read_bytes()))
    if kernel is None:
        return [why]
    return _against_cubin(launch, kernel, compiled, row)


def check_launch(spec: KernelSpec, config: Config, problem: Problem, row: ArchLimits,
                 buffers: Mapping[str, tuple[tuple[int, ...], str]]) -> tuple[Launch | None, list[str]]:
    """The spec's launch of ``config`` (None where building it fails) and what fails in its shape and
    arguments: all that needs no build."""
    try:
        with user_code(spec.path, "launch()"):
            launch = spec.launch(config, problem, device_for(row.name))
    except UserError as exc:
        return None, [str(exc)]
    reasons = _launch_shape(launch, row)
    if any("whole numbers" in r for r in reasons):
        return launch, reasons
    return launch, reasons + _arguments(spec, launch, buffers)


def _threads(dims: tuple[int, int, int]) -> int:
    return dims[0] * dims[1] * dims[2]


def _launch_shape(launch: Launch, row: ArchLimits) -> list[str]:
    reasons = []
    for what, dims in (("grid", launch.grid), ("block", launch.block), ("cluster", launch.cluster)):
        if len(dims) != 3 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in dims):
            reasons.append(f"{what} {tuple(dims)!r} must be three whole numbers >= 1")
    if reasons:
        return reasons
    if launch.grid[0] >= 2**31 or max(launch.grid[1:]) > 65535:
        reasons.append(f"grid {launch.grid} over the limits (2^31-1, 65535, 65535)")
    threads = _threads(launch.block)
    if threads > row.max_threads_per_block or launch.block[2] > 64:
        reasons.append(f"block {launch.block}: {threads} threads per block > {row.max_threads_per_block} on {row.name}")
    cluster = _threads(launch.cluster)
    if cluster > row.max_cluster_size:
        reasons.append(f"cluster {launch.cluster}: {cluster} CTAs > {row.max_cluster_size} on {row.name}")
    elif any(g % c for g, c in zip(launch.grid, launch.cluster, strict=True)):
        reasons.append(f"grid {launch.grid} is not a whole number of clusters {launch.cluster}")
    if launch.smem_bytes < 0:
        reasons.append(f"dynamic shared memory {launch.smem_bytes} B < 0")
    return reasons


def _arguments(spec: KernelSpec, launch: Launch, buffers: Mapping[str, tuple[tuple[int, ...], str]]) -> list[str]:
    from tuner.device.driver import CTYPES

    reasons = []
    for i, arg in enumerate(launch.args, start=1):  # counted from 1, as a reader counts them
        if isinstance(arg, Buffer) and arg.name not in buffers:
            reasons.append(f"argument {i} names buffer {arg.name!r}, which is no input or output of "
                           f"{spec.path.name} (they are: {', '.join(buffers) or 'none'})")
        elif isinstance(arg, TensorMap):
            if arg.buffer not in buffers:
                reasons.append(f"argument {i}: tensor map over {arg.buffer!r}, which is no input or output")
            elif arg.dtype in _TENSOR_MAP_DTYPES:
                shape, dtype = buffers[arg.buffer]
                needed = int(np.prod(arg.shape)) * _TENSOR_MAP_DTYPES[arg.dtype]
                held = int(np.prod(shape)) * np.dtype(dtype).itemsize
                if needed > held:
                    reasons.append(f"argument {i}: tensor map of {arg.shape} {arg.dtype} ({needed} B) over {arg.buffer!r} "
                                   f"of {shape} {dtype} ({held} B)")
            if arg.dtype not in _TENSOR_MAP_DTYPES or any(not 1 <= b <= 256 for b in arg.box):
                reasons.append(f"argument {i}: tensor map dtype {arg.dtype} / box {arg.box} not encodable "
                               "(box edges 1..256)")
        elif isinstance(arg, Scalar):
            maker = CTYPES[arg.ctype]  # (a Scalar's type is checked when it is made)
            try:
                built = maker(arg.value)
            except TypeError:
                reasons.append(f"argument {i}: {arg.value!r} is not a {arg.ctype}")
                continue
            if arg.ctype != "float32" and built.value != arg.value:
                reasons.append(f"argument {i}: {arg.value!r} does not fit a {arg.ctype}")
        elif not isinstance(arg, Buffer):
            reasons.append(f"argument {i} is a {type(arg).__name__}; expected Buffer, TensorMap or Scalar")
    return reasons


def _entry(spec: KernelSpec, kernels: Mapping[str, CubinKernel]) -> tuple[CubinKernel | None, str]:
    kernel = kernels.get(spec.kernel_name)
    if kernel is None:
        there = ", ".join(sorted(kernels)) or "none"
        if any(_mangles(name, spec.kernel_name) for name in kernels):  # a C++ name: `extern "C"` is missing
            return None, (f"entry {spec.kernel_name!r} is in the CUBIN of {spec.source} only under its C++ name "
                          f"({there}): declare it extern \"C\" __global__")
        return None, (f"entry {spec.kernel_name!r} is not in the CUBIN of {spec.source} (kernels there: {there}): "
                      "name the extern \"C\" __global__ function the spec launches")
    return kernel, ""


def _mangles(symbol: str, name: str) -> bool:
    """Whether ``symbol`` is the Itanium C++ mangling of a function ``name`` (``_Z9transposePKfPf``), in
    a namespace or not (``_ZN2ns9transposeE...``)."""
    return symbol.startswith("_Z") and f"{len(name)}{name}" in symbol


def _layout(arg: Any) -> tuple[int, int] | None:
    if isinstance(arg, Buffer):
        return _POINTER
    if isinstance(arg, TensorMap):
        return _TENSOR_MAP
    if isinstance(arg, Scalar):
        return _SCALAR_LAYOUT.get(arg.ctype)
    return None


def _kind(arg: Any) -> str:
    if isinstance(arg, Buffer):
        return f"pointer {arg.name}"
    if isinstance(arg, TensorMap):
        return f"tensor map over {arg.buffer}"
    return f"{getattr(arg, 'ctype', type(arg).__name__)} scalar"


def _against_cubin(launch: Launch, kernel: CubinKernel, compiled: CompileResult, row: ArchLimits) -> list[str]:
    reasons = []
    if len(launch.args) != len(kernel.params):
        reasons.append(f"{len(launch.args)} arguments for {kernel.name}'s {len(kernel.params)} parameters")
    for i, (arg, param) in enumerate(zip(launch.args, kernel.params, strict=False), start=1):
        layout = _layout(arg)
        if layout is None:
            continue  # already reported as an argument of an unknown kind
        size, align = layout
        if param.size != size:
            reasons.append(f"argument {i} ({_kind(arg)}, {size} B) where {kernel.name}'s parameter {i} takes {param.size} B")
        elif kernel.param_base is not None and (kernel.param_base + param.offset) % align:
            reasons.append(f"argument {i} ({_kind(arg)}) needs {align}-byte alignment; {kernel.name}'s parameter {i} "
                           f"is at bank offset {kernel.param_base + param.offset}")
    threads = _threads(launch.block)
    if kernel.max_threads is not None and threads > kernel.max_threads:
        reasons.append(f"block {launch.block}: {threads} threads > __launch_bounds__ {kernel.max_threads} of {kernel.name}")
    regs = kernel.regs if kernel.regs is not None else compiled.regs
    if regs is not None and threads and regs * threads > row.regs_per_block:
        reasons.append(f"{regs} registers x {threads} threads = {regs * threads} > {row.regs_per_block} per block on {row.name}")
    static = compiled.smem_static or 0
    if static > row.static_smem_per_block:
        reasons.append(f"static shared memory {static} B > {row.static_smem_per_block} B on {row.name}")
    elif static + launch.smem_bytes > row.max_smem_per_block:
        reasons.append(f"shared memory {static} B static + {launch.smem_bytes} B dynamic > "
                       f"{row.max_smem_per_block} B per block on {row.name}")
    return reasons
