"""A kernel given as data in a Python call (``tuner.tune_kernel``), made into a study.

The GPU worker is another process and loads a kernel spec by path, so the call's kernel is
written once into a folder of its own, named by its content (a second call with the same
kernel resumes the same study): the ``.cu`` source (with an ``#ifndef`` guard added for each
tunable the source does not guard itself), ``kernel.json`` (the call's data), a two-line
spec module that reads it (:func:`spec_class`, a :class:`~tuner.contract.light.LightSpec`), and
``study.toml``.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tuner.contract.kernel_spec import Scalar, Value, plain_int, validate_define
from tuner.contract.light import In, LightSpec, Out, guarded_defines
from tuner.errors import UserError

DATA = "kernel.json"
SPEC_FILE = "spec.py"
STUDY_FILE = "study.toml"
SPEC_MODULE = ("from pathlib import Path\n\nfrom tuner.study.inline import spec_class\n\n"
               "Spec = spec_class(Path(__file__).parent / 'kernel.json')  # the kernel's data, written by tuner.tune_kernel\n")
_NUMPY = {"np": np, "min": min, "max": max, "abs": abs, "len": len}


class InlineSpec(LightSpec):
    """A :class:`LightSpec` whose launch shape, reference and FLOP count are expressions too
    (:func:`spec_class` makes one from ``kernel.json``)."""

    grid_dims: ClassVar[Sequence[int | str]] = (1, 1, 1)
    block_dims: ClassVar[Sequence[int | str]] = (1, 1, 1)
    reference_expr: ClassVar[str] = ""
    flops_expr: ClassVar[str | None] = None

    def __init__(self, path: Path):
        super().__init__(path)
        for kind, dims in (("grid", self.grid_dims), ("block", self.block_dims)):
            if isinstance(dims, str) or len(dims) != 3:
                raise UserError(f"kernel spec {self.path.name}: {kind} {dims!r} must be three numbers or expressions")
            for expr in dims:
                if isinstance(expr, str):
                    self._code[expr] = self._compile(expr, kind)
        if self.flops_expr is not None:
            self._code[self.flops_expr] = self._compile(self.flops_expr, "flops")
        self._compile(self.reference_expr, "reference")  # (evaluated with numpy, not through self._code)

    def _dims(self, dims: Sequence[int | str], p: Mapping[str, Any]) -> tuple[int, int, int]:
        x, y, z = (int(self._eval(d, p)) if isinstance(d, str) else int(d) for d in dims)
        return x, y, z

    def grid(self, p: Mapping[str, Any]) -> tuple[int, int, int]:
        return self._dims(self.grid_dims, p)

    def block(self, p: Mapping[str, Any]) -> tuple[int, int, int]:
        return self._dims(self.block_dims, p)

    def reference(self, inputs, problem, rows):
        """The ``reference`` expression over the inputs (whole arrays), ``rows``, the problem and ``np``."""
        names = {**problem, **inputs, "rows": rows}
        try:
            return np.asarray(eval(self.reference_expr, {"__builtins__": {}, **_NUMPY}, names), dtype=np.float32)
        except NameError as exc:
            raise UserError(f"reference {self.reference_expr!r}: {exc}; known: {', '.join(inputs)} (inputs), rows, "
                            f"{', '.join(problem)}, np") from None

    def flops(self, problem):
        return float(self._eval(self.flops_expr, problem)) if self.flops_expr else 0.0


def spec_class(data_path: Path) -> type[InlineSpec]:
    """The spec class of a kernel folder's ``kernel.json``."""
    data = json.loads(Path(data_path).read_text())
    attrs = {
        "source": data["source"], "name": data["kernel_name"], "kernel_name": data["kernel_name"],
        "archs": tuple(data["archs"]), "problem_keys": tuple(data["problem_keys"]),
        "args": [_arg(a) for a in data["args"]], "derived": dict(data["derived"]),
        "restrictions": [r if isinstance(r, str) else tuple(r) for r in data["restrictions"]],
        "grid_dims": tuple(data["grid"]), "block_dims": tuple(data["block"]),
        "reference_expr": data["reference"], "flops_expr": data["flops"], "data_files": (Path(data_path).resolve(),),
        **{name: data[name] for name in ("atol", "rtol") if name in data},
    }
    return type("Spec", (InlineSpec,), attrs)


def _arg(data: dict) -> In | Out | Scalar:
    kind = data["kind"]
    if kind == "scalar":
        return Scalar(data["dtype"], data["value"])
    return (In if kind == "in" else Out)(data["name"], tuple(data["shape"]), data["dtype"])


def _arg_data(arg: In | Out | Scalar) -> dict:
    if isinstance(arg, Scalar):
        return {"kind": "scalar", "dtype": arg.ctype, "value": arg.value}
    if isinstance(arg, (In, Out)):
        return {"kind": "in" if isinstance(arg, In) else "out", "name": arg.name, "shape": list(arg.shape),
                "dtype": arg.dtype}
    raise UserError(f"argument {arg!r}: give tuner.In(name, shape), tuner.Out(name, shape) or tuner.Scalar(ctype, value)")


#: what each argument of :func:`write_kernel` (``tuner.tune_kernel``) takes: its types, and what to give
EXPECTED: dict[str, tuple[type | tuple[type, ...], str]] = {
    "kernel_name": (str, "the name of the source's __global__ function, e.g. 'axpy'"),
    "kernel_source": (str, "the CUDA source as a string (a file's: Path('k.cu').read_text())"),
    "problem": (Mapping, "a dict of sizes by name, e.g. {'N': 1 << 20} (passed as -D defines and named in grid, block "
                         "and reference)"),
    "arguments": ((list, tuple), "a list of tuner.In, tuner.Out and tuner.Scalar in the kernel's order, e.g. "
                                 "[tuner.In('x', ('N',)), tuner.Out('out', ('N',))]"),
    "tune_params": (Mapping, "a dict of value lists by define, e.g. {'BLOCK': [64, 128, 256]}"),
    "grid": ((list, tuple), "three numbers or expressions, e.g. ('ceil_div(N, BLOCK)', 1, 1)"),
    "block": ((list, tuple), "three numbers or expressions, e.g. ('BLOCK', 1, 1)"),
    "reference": (str, "an expression string for the first output's rows, e.g. '2 * x[rows] + y[rows]'"),
    "restrictions": ((list, tuple), "a list of expression strings over the defines and problem, e.g. "
                                    "['BLOCK * TILE <= 1024'], or (expression, message) pairs (Python syntax; a "
                                    "function cannot be written into the study)"),
    "derived": ((Mapping, type(None)), "a dict of expression strings by name, e.g. {'THREADS': 'BLOCK // 32'}"),
    "flops": ((str, type(None)), "an expression string over the problem, e.g. '2 * N'"),
    "arch": (str, "'native' or a target, e.g. 'sm_90a'"),
    "folder": ((str, os.PathLike, type(None)), "a folder's path"),
}


def write_kernel(
    kernel_name: str,
    kernel_source: str,
    problem: Mapping[str, Value],
    arguments: Sequence[In | Out | Scalar],
    tune_params: Mapping[str, Sequence[Value]],
    *,
    grid: Sequence[int | str],
    block: Sequence[int | str],
    reference: str,
    restrictions: Sequence[str | tuple[str, str]] = (),
    derived: Mapping[str, str] | None = None,
    flops: str | None = None,
    arch: str = "native",
    folder: str | Path | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> Path:
    """Write the kernel's folder (see the module documentation); the study file's path."""
    given: dict[str, Any] = {
        "kernel_name": kernel_name, "kernel_source": kernel_source, "problem": problem, "arguments": arguments,
        "tune_params": tune_params, "grid": grid, "block": block, "reference": reference, "restrictions": restrictions,
        "derived": derived, "flops": flops, "arch": arch, "folder": folder,
    }
    for name, argument in given.items():  # a wrong type fails here, not as a TypeError deep in the writing
        kinds, expected = EXPECTED[name]
        if not isinstance(argument, kinds):
            raise UserError(f"{name}: {expected}; got {type(argument).__name__} {argument!r}")
    if not kernel_name.isidentifier():  # it names the source's file too: a '/' would be a folder
        raise UserError(f"kernel_name {kernel_name!r}: {EXPECTED['kernel_name'][1]} (a C identifier)")
    for entry in restrictions:
        pair = isinstance(entry, (tuple, list)) and len(entry) == 2 and all(isinstance(x, str) for x in entry)
        if not isinstance(entry, str) and not pair:
            raise UserError(f"restrictions: {EXPECTED['restrictions'][1]}; got {entry!r}")
    for name, tol in (("atol", atol), ("rtol", rtol)):
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0):
            raise UserError(f"{name}: a positive number (the output check's tolerance), got {tol!r}")
    problem = {name: validate_define(name, value, "problem") for name, value in problem.items()}  # numpy ints: ints
    for arg in arguments:
        arg_name = getattr(arg, "name", None)
        if isinstance(arg_name, str) and (not arg_name.isidentifier() or keyword.iskeyword(arg_name)):
            raise UserError(f"argument {arg_name!r}: not a name the reference and shapes can use (they are Python "
                            f"expressions{'; it is a keyword' if keyword.iskeyword(arg_name) else ''}): call it e.g. "
                            f"{arg_name.strip() + '_'!r}")
    if not tune_params:
        raise UserError("tune_params: give at least one define with a list of values")
    for name, values in tune_params.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) or not list(values):
            raise UserError(f"tune_params[{name!r}]: give a list of values, e.g. {{{name!r}: [64, 128]}}; got {values!r}")
    tune_params = {name: [validate_define(name, value, "tune_params") for value in values]  # np.arange: ints
                   for name, values in tune_params.items()}
    for name in tune_params.keys() & problem.keys():
        raise UserError(f"tune_params[{name!r}]: {name} is in problem too; a define is fixed (problem) or tuned "
                        "(tune_params), not both")
    launch_shape = {}
    for name, dims in (("grid", grid), ("block", block)):
        if len(dims) != 3:
            raise UserError(f"{name}: {EXPECTED[name][1]}; got {dims!r}")
        launch_shape[name] = [plain_int(d) for d in dims]  # np.int64(1024) is 1024
        for dim in launch_shape[name]:  # a float would be cut at launch: grid 1.5 runs one block
            if isinstance(dim, bool) or not isinstance(dim, (int, str)):
                raise UserError(f"{name}: {EXPECTED[name][1]}; got {dim!r}, not a whole number or an expression string")
    source = f"{kernel_name}.cu"
    data: dict[str, Any] = {
        "kernel_name": kernel_name, "source": source, "archs": [] if arch == "native" else [arch], "problem_keys": list(problem),
        "args": [_arg_data(a) for a in arguments], "derived": dict(derived or {}),
        "restrictions": [r if isinstance(r, str) else list(r) for r in restrictions],
        "grid": launch_shape["grid"], "block": launch_shape["block"], "reference": reference, "flops": flops,
        **{name: float(tol) for name, tol in (("atol", atol), ("rtol", rtol)) if tol is not None},
    }
    digest = hashlib.sha256(json.dumps([data, kernel_source, {k: list(v) for k, v in tune_params.items()}, dict(problem)],
                                       sort_keys=True).encode()).hexdigest()[:12]
    if folder is None:
        folder = kernels_dir() / f"{kernel_name}-{digest}"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / source).write_text(kernel_source)
    _guarded(folder / source, {n: list(v)[0] for n, v in tune_params.items()})
    (folder / DATA).write_text(json.dumps(data, indent=1))
    (folder / SPEC_FILE).write_text(SPEC_MODULE)
    study = folder / STUDY_FILE
    study.write_text(toml_text({"study": {"name": kernel_name, "kernel": SPEC_FILE, "arch": arch},
                            "problem": dict(problem), "space.tier1": {k: list(v) for k, v in tune_params.items()}}))
    return study


#: a kernel folder's study-file keys, as the arguments of the tune_kernel call they were written from
_CALL_TERMS = ((re.compile(r"\[space\.tier1\.(\w+)\]"), r"tune_params['\1']"),
               (re.compile(r"\[space\.tier1\](?: / \[space\.tier2\])?"), "tune_params"),
               (re.compile(r"\[study\.arch\]"), "arch"))


def in_call_terms(message: str, study: Path) -> str:
    """``message`` in the terms of the tune_kernel call that wrote ``study`` (any other study's, as it
    is): the study file's keys as the call's arguments, and neither that file nor the spec named (the
    caller wrote neither)."""
    folder = study.parent
    if study.name != STUDY_FILE or not (folder / DATA).is_file() or not (folder / SPEC_FILE).is_file():
        return message
    for spelling in {str(study), str(study.absolute()), str(study.resolve())}:
        message = message.replace(f"{spelling}: ", "")
    message = re.sub(rf"kernel spec (?:\S*/)?{re.escape(SPEC_FILE)}(?::\d+)?: ", "", message)
    for key, argument in _CALL_TERMS:
        message = key.sub(argument, message)
    return message


def kernels_dir() -> Path:
    """Where kernels given as data are written: in ``$TUNER_CACHE_DIR`` where it is set (a cache
    folder of one's own holds everything), else beside the CUBIN cache (``~/.cache/tuner/kernels``)."""
    from tuner.compile.build import default_cache_dir

    own = os.environ.get("TUNER_CACHE_DIR")
    return Path(own) / "kernels" if own else default_cache_dir().parent / "kernels"


def _guarded(path: Path, defaults: Mapping[str, Value]) -> None:
    """Add an ``#ifndef`` guard (default: the first value) for each tunable the source leaves unguarded."""
    guarded = guarded_defines(path)
    added = [f"#ifndef {n}\n#define {n} {v}\n#endif\n" for n, v in defaults.items() if n not in guarded]
    path.write_text("".join(added) + path.read_text())


def toml_text(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """TOML of flat tables whose values are numbers, strings, booleans, inline tables or lists of them."""
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # numbers, strings and booleans are spelled alike
