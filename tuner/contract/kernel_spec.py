"""The kernel spec contract: how a kernel family describes itself to the tuner.

A kernel family is a ``.cu`` file whose tunables are ``#ifndef``-guarded ``#define``s,
plus a Python file beside it that defines a class ``Spec`` (a :class:`KernelSpec`
subclass). The tuner loads the Python file by path, so a user's kernel in any folder
plugs in the same way as the ones shipped in ``kernel/``.

Everything here is plain Python and numpy: a spec never imports the CUDA driver. The
launch is described as data (:class:`Launch` with :class:`Buffer`, :class:`TensorMap`
and :class:`Scalar` arguments) and the GPU worker turns it into driver calls.

Host arrays use numpy dtypes: FP8 E4M3 as ``uint8`` bit patterns, BF16 as ``uint16``
bit patterns (see :mod:`tuner.contract.numerics` to encode and decode them).
"""

from __future__ import annotations

import hashlib
import numbers
import re
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tuner.contract.arch import limits
from tuner.errors import UserError
from tuner.plugin import import_file

Value = int | str
Config = dict[str, Value]
Problem = dict[str, Value]

_DEFINE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # whole strings only: fullmatch
_DEFINE_VALUE = re.compile(r"-?[0-9]+|[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Buffer:
    """A device allocation named after an input or output array; passed as a pointer."""

    name: str


@dataclass(frozen=True)
class TensorMap:
    """A 2-D TMA descriptor over a row-major buffer, passed as ``__grid_constant__``.

    ``shape`` and ``box`` are (rows, cols) in elements, outermost first, as numpy
    writes them; the worker reverses them for ``cuTensorMapEncodeTiled``.
    """

    buffer: str
    dtype: str  # "uint8" (FP8), "bfloat16", "float32"
    shape: tuple[int, int]
    box: tuple[int, int]
    swizzle: int = 128  # bytes: 0, 32, 64 or 128
    l2_promotion: int = 0  # bytes: 0, 64, 128 or 256


#: the by-value argument types a launch passes (:data:`tuner.device.driver.CTYPES` builds them)
SCALAR_CTYPES = ("int32", "uint32", "int64", "uint64", "float32")


@dataclass(frozen=True)
class Scalar:
    """A by-value kernel argument: ``ctype`` one of :data:`SCALAR_CTYPES`."""

    ctype: str
    value: int | float

    def __post_init__(self) -> None:
        if self.ctype not in SCALAR_CTYPES:
            raise UserError(f"Scalar({self.ctype!r}, {self.value!r}): the type is one of {', '.join(SCALAR_CTYPES)}")


Arg = Buffer | TensorMap | Scalar


@dataclass(frozen=True)
class Launch:
    """Everything the worker needs to launch one configuration."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: Sequence[Arg]
    cluster: tuple[int, int, int] = (1, 1, 1)
    smem_bytes: int = 0


@dataclass(frozen=True)
class OutputSpec:
    """An output array the worker allocates, poisons before the checked launch, and checks."""

    shape: tuple[int, ...]
    dtype: str  # numpy dtype name; "uint16" holds BF16 bit patterns
    decode: str = "bfloat16"  # how to turn stored values into float32: "bfloat16" or "float32"


#: the buffer name a reference kernel writes its FP32 expected output to
EXPECTED = "expected"


@dataclass(frozen=True, eq=False)
class RandomTable:
    """An input whose every element is ``table[a uniformly random byte]``.

    The worker fills it on the GPU (a generator kernel: a full-size input of GBs takes
    milliseconds, against seconds on the host); :meth:`on_host` draws the same distribution
    with numpy for host-side use (tests, the sampled host check). ``table`` has 256 entries
    of a 1-, 2- or 4-byte dtype.
    """

    shape: tuple[int, ...]
    table: np.ndarray

    def __post_init__(self) -> None:
        if self.table.shape != (256,) or self.table.dtype.itemsize not in (1, 2, 4):
            raise ValueError(f"RandomTable needs 256 entries of a 1, 2 or 4 byte dtype, not {self.table.dtype}{self.table.shape}")

    @property
    def dtype(self) -> np.dtype:
        return self.table.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.table.dtype.itemsize

    def on_host(self, rng: np.random.Generator) -> np.ndarray:
        n = int(np.prod(self.shape))
        return self.table[np.frombuffer(rng.bytes(n), dtype=np.uint8)].reshape(self.shape)


def host_inputs(inputs: Mapping[str, np.ndarray | RandomTable], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A spec's inputs as host arrays (:class:`RandomTable` entries drawn with ``rng``)."""
    return {name: np.ascontiguousarray(v.on_host(rng) if isinstance(v, RandomTable) else v) for name, v in inputs.items()}


@dataclass(frozen=True)
class ReferenceKernel:
    """A plain, obviously correct kernel that computes the whole first output in FP32.

    The worker compiles it once per session for the GPU it runs on (no tuned defines),
    launches it once per problem into :data:`EXPECTED` (a float32 array of the first
    output's shape, row-major) and then checks every value of every trial on the device.
    ``launch`` names the spec's input buffers and :data:`EXPECTED`, as :meth:`KernelSpec.launch`
    does; only :class:`Buffer` and :class:`Scalar` arguments.
    """

    source: str  # the ``.cu`` file, relative to the spec file
    kernel_name: str
    launch: Launch
    defines: Mapping[str, Value] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceInfo:
    """What a spec may need to know about the GPU to build its launch."""

    name: str = ""
    sm_count: int = 132  # an H100 / H200 SXM's (the arch table holds per-target limits, not SKUs)
    cc: tuple[int, int] = (9, 0)
    max_smem_per_block: int = limits("sm_90a").max_smem_per_block


class KernelSpec:
    """Base class of every kernel family's ``Spec``.

    Subclasses set the class attributes and override :meth:`check`, :meth:`derive`,
    :meth:`launch`, :meth:`inputs`, :meth:`outputs`, :meth:`reference` and
    :meth:`flops`. Defaults below cover the common parts.
    """

    #: short name, used in study names and tables (a light spec takes its source's stem)
    name: str = ""
    #: the ``.cu`` file, relative to the spec file
    source: ClassVar[str] = ""
    #: the ``extern "C" __global__`` function to launch
    kernel_name: str = ""
    #: targets the kernel compiles for, e.g. ("sm_90a",)
    archs: ClassVar[tuple[str, ...]] = ()
    #: every tunable define with its default (the value in the ``.cu`` file; a light spec reads it there)
    params: dict[str, Value] = {}
    #: problem keys the kernel needs (e.g. M, N, K, EPILOGUE); passed as defines too
    problem_keys: ClassVar[tuple[str, ...]] = ()
    #: extra NVRTC options (no -D, no -arch: the tuner adds those)
    compile_options: ClassVar[tuple[str, ...]] = ("-std=c++17",)
    #: relative tolerance of the output check (BF16 output from FP8 inputs)
    rtol: float = 2e-2
    atol: float = 2e-2
    #: files besides this module that the class is made from (a tune_kernel folder's ``kernel.json``), relative
    #: to the spec file: :func:`load_spec` loads the spec again when one changes, and the valid-set cache keys on them
    data_files: ClassVar[tuple[str | Path, ...]] = ()

    def __init__(self, path: Path):
        self.path = Path(path)

    def data_paths(self) -> list[Path]:
        """:attr:`data_files` as paths."""
        return [self.path.parent / name for name in self.data_files]

    # -- constraint model -------------------------------------------------------------
    def check(self, config: Config, problem: Problem) -> str | None:
        """Why ``config`` is invalid for ``problem``, or None if it may be compiled."""
        return None

    def derive(self, config: Config, problem: Problem) -> dict[str, int]:
        """Dependent constants (threads, tiles, smem_bytes, ...) for tables and checks."""
        return {}

    # -- build ------------------------------------------------------------------------
    @property
    def source_path(self) -> Path:
        return (self.path.parent / self.source).resolve()

    def source_text(self) -> str:
        return self.source_path.read_text()

    def source_hash(self) -> str:
        """Hash of the kernel source as compiled: the ``.cu`` and the local headers it
        includes, the same bundle the compile cache keys on."""
        from tuner.contract.source import SourceBundle

        return SourceBundle.load(self.source_path).digest()[:16]

    def defines(self, config: Config, problem: Problem) -> dict[str, Value]:
        """The ``-D`` defines of one build: problem keys, then the config."""
        merged: dict[str, Value] = {k: problem[k] for k in self.problem_keys if k in problem}
        merged.update(config)
        return merged

    def flags(self, config: Config, problem: Problem) -> str:
        """The build's ``-D`` options as one string: what NVRTC gets (split on spaces), what a
        trial stores as ``flags`` and ``tuner best`` prints (:func:`parse_flags` reads it back)."""
        return " ".join(define_flags(self.defines(config, problem)))

    # -- run --------------------------------------------------------------------------
    def launch(self, config: Config, problem: Problem, device: DeviceInfo) -> Launch:
        raise NotImplementedError

    def inputs(self, problem: Problem, rng: np.random.Generator) -> dict[str, np.ndarray | RandomTable]:
        """Fresh inputs (never zeros), keyed by the names :class:`Buffer` uses: host arrays, or
        :class:`RandomTable` for large ones, which the worker generates on the GPU."""
        raise NotImplementedError

    def outputs(self, problem: Problem) -> dict[str, OutputSpec]:
        """Output arrays; the first one is checked against :meth:`reference`."""
        raise NotImplementedError

    def reference(
        self, inputs: Mapping[str, np.ndarray], problem: Problem, rows: np.ndarray
    ) -> np.ndarray:
        """The exact expected first output (float32) for the given row indices."""
        raise NotImplementedError

    def baseline(self, problem: Problem, buffers: Mapping[str, int], stream: int) -> Callable[[], None] | None:
        """Optional: a host-side baseline on the same inputs (e.g. a library call), for benchmarks.

        ``buffers`` maps the names of :meth:`inputs` and :meth:`outputs` to device addresses;
        the returned callable enqueues one run on ``stream`` (a CUDA stream handle). It runs in
        the GPU worker, paired with a config like any reference (``[measure] reference =
        "baseline"``). None: this kernel has no baseline.
        """
        return None

    def reference_kernel(self, problem: Problem) -> ReferenceKernel | None:
        """The kernel that computes the whole expected output on the GPU, or None.

        With one, the worker checks 100 % of every trial's output on the device; without
        one, it checks :meth:`check_rows` sampled rows against :meth:`reference` on the host.
        """
        return None

    def check_rows(self, problem: Problem) -> int:
        """How many rows of the first output the host check samples, unless a study's
        ``measure.check_rows`` says otherwise."""
        return 64

    def flops(self, problem: Problem) -> float:
        return 0.0


def plain_int(value: Any) -> Any:
    """A numpy integer (a notebook's ``np.arange``, ``np.int64``) as the Python int it holds; anything
    else as it is (numpy's floats and bools are no integers: they stay, to be refused as such)."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def validate_define(name: str, value: Value, where: str) -> Value:
    """Reject anything that could smuggle an option into the compiler command line; the value as a
    plain int or str (see :func:`plain_int`)."""
    if not isinstance(name, str) or not _DEFINE_NAME.fullmatch(name):
        raise UserError(f"{where}: define name {name!r} must be a C identifier (letters, digits, _)")
    value = plain_int(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not _DEFINE_VALUE.fullmatch(str(value)):
        raise UserError(
            f"{where}: value {value!r} of {name} must be an integer or a C identifier"
        )
    return value


def define_flags(defines: Mapping[str, Value]) -> list[str]:
    """``-DNAME=VALUE`` options, validated; never passed through a shell."""
    flags = []
    for name, value in defines.items():
        validate_define(name, value, "define")
        flags.append(f"-D{name}={value}")
    return flags


def parse_flags(flags: str) -> dict[str, str]:
    """``{NAME: VALUE}`` of a :meth:`KernelSpec.flags` string (values stay text, as in a header)."""
    defines = {}
    for flag in flags.split():
        name, _, value = flag.removeprefix("-D").partition("=")
        defines[name] = value
    return defines


class UnknownName(KeyError):
    """A spec's code read a name that is not there; the message names the ones that are."""

    def __str__(self) -> str:
        return str(self.args[0])


class KnownNames(dict):
    """The names a spec's code reads (defines, problem, derived values, inputs): reading one that is
    not there says which are, instead of a bare ``KeyError``."""

    def __init__(self, what: str, values: Mapping[str, Any], kind: str = "define, problem key or derived value"):
        super().__init__(values)
        self.what, self.kind = what, kind

    def __missing__(self, key: Any) -> Any:
        raise UnknownName(f"reads {key!r}, which is no {self.kind} of {self.what}; known: {', '.join(sorted(map(str, self)))}")


@contextmanager
def user_code(spec_path: Path, what: str) -> Iterator[None]:
    """Run a spec's own code: what it raises becomes one line naming the spec file, the line in it
    and the method (``grid()``), never a traceback. A :class:`UserError` passes as it is."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).name == Path(spec_path).name]
        where = f"{Path(spec_path).name}:{frames[-1].lineno}" if frames else Path(spec_path).name
        if isinstance(exc, UnknownName):
            raise UserError(f"kernel spec {where}: {what} {exc}") from None
        if isinstance(exc, NotImplementedError) and not str(exc):
            raise UserError(f"kernel spec {Path(spec_path).name}: {what} is missing: define it in class Spec") from None
        raise UserError(f"kernel spec {where}: {what} raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None


#: each spec loaded, with the files it was made from (:func:`_made_from`) and their content then
_loaded: dict[Path, tuple[KernelSpec, list[Path], list[bytes | None]]] = {}


def _made_from(spec: KernelSpec) -> list[Path]:
    """The files ``spec`` was read from: its module, its data files, and its source with the local headers
    it includes (a spec's defaults are their guards)."""
    from tuner.contract.source import SourceBundle

    headers = SourceBundle.load(spec.source_path).headers
    return [spec.path, *spec.data_paths(), spec.source_path, *(spec.source_path.parent / name for name in headers)]


def _contents(paths: list[Path]) -> list[bytes | None]:
    """The files' bytes (None for one gone: loading again says so). Content, not mtimes: a notebook's
    tune_kernel rewrites its folder within one tick of the clock, often to the same size."""
    contents: list[bytes | None] = []
    for path in paths:
        try:
            contents.append(path.read_bytes())
        except OSError:
            contents.append(None)
    return contents


def load_spec(path: str | Path) -> KernelSpec:
    """Import ``path`` (a ``.py`` file defining ``Spec``) and return an instance; the same one while
    the files it is made from stay the same (a notebook's cell run again after a fix reads the fix)."""
    path = Path(path).resolve()
    cached = _loaded.get(path)
    if cached is not None and _contents(cached[1]) == cached[2]:
        return cached[0]
    if not path.is_file():
        raise UserError(f"kernel spec {path} not found: give the path of a .py file defining class Spec")
    module_name = f"tuner_kernel_spec_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    try:
        module = import_file(path, module_name)
    except (Exception, SystemExit) as exc:  # a user's file: report, don't crash or exit quietly
        raise UserError(f"kernel spec {path} failed to import: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    cls = getattr(module, "Spec", None)
    if not (isinstance(cls, type) and issubclass(cls, KernelSpec)):
        raise UserError(f"kernel spec {path} must define `class Spec` from tuner.spec (LightSpec, ProgramSpec or "
                        "KernelSpec)")
    spec = cls(path)
    if not getattr(spec, "source", ""):
        raise UserError(f"kernel spec {path}: no source: name the kernel's file in class Spec (source = \"k.cu\")")
    if not spec.source_path.is_file():
        raise UserError(f"kernel spec {path}: source {spec.source!r} not found beside it")
    for name, value in spec.params.items():
        validate_define(name, value, f"kernel spec {path.name}")
    made_from = _made_from(spec)
    _loaded[path] = spec, made_from, _contents(made_from)
    return spec


#: a C integer literal, as the compiler reads ``-DNAME=VALUE``: a leading 0 makes it octal
_C_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)")
_C_OCTAL = re.compile(r"-?0[0-7]+")


def as_define_value(value: Any, where: str = "value") -> Value:
    """TOML gives ints, strings and booleans; defines take ints and identifiers. A number
    written as text is the number the compiler reads (``"1"`` is 1, ``"010"`` is 8), so one
    axis value has one spelling and one config one kernel."""
    if isinstance(value, bool):
        return int(value)
    value = plain_int(value)  # a numpy integer given by a call (start=, reference=)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii():
        if _C_DECIMAL.fullmatch(value):
            return int(value)
        if _C_OCTAL.fullmatch(value):
            return int(value, 8)
        raise UserError(f"{where}: {value!r} is not a C integer (a leading 0 makes it octal): write it without the 0")
    return value
