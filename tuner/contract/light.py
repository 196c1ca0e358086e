"""A light kernel spec for simple kernels, in the style of Kernel Tuner.

Where :class:`~tuner.contract.kernel_spec.KernelSpec` asks for methods, :class:`LightSpec` takes data:

- the tunable defines and their defaults come from the ``.cu`` file's
  ``#ifndef NAME`` / ``#define NAME value`` guards (less the ``problem_keys``);
- ``derived`` names values computed from the config and the problem (expressions, in order);
- ``restrictions`` are expressions over defines, problem and derived values, each
  optionally with a message (``str.format`` over the same names) saying why a config fails;
- ``args`` lists the kernel's arguments in order: :class:`In` and :class:`Out` arrays with
  their shapes, and :class:`~tuner.contract.kernel_spec.Scalar` values;
- ``grid`` and ``block`` are small methods of the merged names (a dict);
- ``reference`` computes the expected first output for some rows, from the inputs.

Megakernels (TMA descriptors, clusters, dynamic SMEM, several outputs with their own
encodings) keep the full :class:`~tuner.contract.kernel_spec.KernelSpec`.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import CodeType
from typing import Any, ClassVar

import numpy as np

from tuner.contract.kernel_spec import (
    Buffer,
    Config,
    DeviceInfo,
    KernelSpec,
    KnownNames,
    Launch,
    OutputSpec,
    Problem,
    RandomTable,
    Scalar,
    Value,
    user_code,
)
from tuner.contract.rules import Names, Rule, first_violation
from tuner.contract.source import SourceBundle
from tuner.errors import UserError

_GUARD = re.compile(r"^[ \t]*#[ \t]*ifndef[ \t]+(\w+)[^\n]*\n[ \t]*#[ \t]*define[ \t]+(\1)[ \t]+([^\s/]+)", re.MULTILINE)
#: names an expression may call besides the defines
#: what an expression may call (Kernel Tuner's restrictions use these too)
FUNCTIONS = {"min": min, "max": max, "abs": abs, "ceil_div": lambda a, b: -(-a // b), "int": int, "float": float,
             "round": round, "pow": pow, "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt}

Dim = int | str  # a number, or the name of a problem key / define / derived value


def names_read(expr: str) -> set[str]:
    """The names an expression reads besides the functions it may call, wherever they sit (in a branch
    that no config takes too); the names its comprehensions and lambdas bind are not read."""
    nodes = list(ast.walk(ast.parse(expr, mode="eval")))
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {n.arg for n in nodes if isinstance(n, ast.arg)}
    return {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound - FUNCTIONS.keys()


#: what a light spec's inputs may hold: uniform values in [-1, 1) need a float type
IN_DTYPES = ("float16", "float32", "float64")
#: what the output check reads: float32 values, or BF16 bit patterns held as uint16
OUT_DTYPES = ("float32", "uint16")
#: the output check's ``atol`` = ``rtol`` of a light spec that sets neither, by its outputs: FP32 sums
#: in another order than the reference's stay far within 1e-3; BF16 rounds at 2**-8 (as KernelSpec's)
DEFAULT_TOLERANCE = {"float32": 1e-3, "uint16": 2e-2}


def _check_shape(kind: str, name: str, shape: Any) -> None:
    """A shape is a tuple of sizes (numbers or names): ``("ROWS", "COLS")``, not ``"ROWS"``."""
    if isinstance(shape, str):
        raise UserError(f"{kind}({name!r}, {shape!r}): the shape is a tuple of sizes: ({shape!r},)")
    sizes = isinstance(shape, Sequence) and all(isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool))
                                                for d in shape)
    if not sizes or not shape:
        raise UserError(f"{kind}({name!r}, {shape!r}): the shape is a tuple of sizes, numbers or names")


@dataclass(frozen=True)
class In:
    """An input array, filled with fresh uniform values in [-1, 1) (never zeros)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        _check_shape("In", self.name, self.shape)


@dataclass(frozen=True)
class Out:
    """An output array; the first one is checked against :meth:`LightSpec.reference`. ``uint16``
    holds BF16 bit patterns (the check decodes them)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        _check_shape("Out", self.name, self.shape)


def guarded_defines(path: Path) -> dict[str, Value]:
    """``{NAME: default}`` of every ``#ifndef NAME / #define NAME value`` guard in a source file."""
    return guarded_defines_in(path.read_text())


def guarded_defines_in(text: str) -> dict[str, Value]:
    """``{NAME: default}`` of every ``#ifndef NAME / #define NAME value`` guard in source text."""
    found: dict[str, Value] = {}
    for name, _, value in _GUARD.findall(text):
        found[name] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return found


class LightSpec(KernelSpec):
    """A spec made of data; see the module documentation. Subclasses set ``source``,
    ``archs``, ``problem_keys``, ``args``, ``restrictions``, and define ``grid``, ``block``,
    ``reference`` and ``flops``."""

    #: expressions computed per config, in order, e.g. ``{"THREADS": "BLOCK // TILE * 32"}``
    derived: ClassVar[Mapping[str, str]] = {}
    #: expressions that must hold, or (expression, message) pairs
    restrictions: ClassVar[Sequence[str | tuple[str, str]]] = ()
    #: the kernel's arguments, in order
    args: ClassVar[Sequence[In | Out | Scalar]] = ()

    def __init__(self, path: Path):
        super().__init__(path)
        stem = Path(self.source).stem
        self.name = self.name or stem
        if not self.kernel_name:  # the function named as the file, else the source's one __global__ function
            found = SourceBundle.load(self.source_path).global_functions() if self.source_path.is_file() else []
            self.kernel_name = found[0] if len(found) == 1 and stem not in found else stem
        #: defaults of the problem keys the ``.cu`` guards too (a study's value is checked against their type)
        self.problem_defaults: dict[str, Value] = {}
        if self.source_path.is_file():  # load_spec reports a missing source
            guards = guarded_defines(self.source_path)
            self.params = {k: v for k, v in guards.items() if k not in self.problem_keys}
            self.problem_defaults = {k: v for k, v in guards.items() if k in self.problem_keys}
        for arg in self.args:
            self._check_dtype(arg)
        if not any("atol" in vars(c) or "rtol" in vars(c) for c in type(self).__mro__ if issubclass(c, LightSpec)):
            outs = [a.dtype for a in self.args if isinstance(a, Out)]
            self.atol = self.rtol = max((DEFAULT_TOLERANCE[d] for d in outs), default=DEFAULT_TOLERANCE["uint16"])
        checks = [self._restriction(r) for r in self.restrictions]
        for name in self.derived:
            if not isinstance(name, str) or not name.isidentifier():
                raise UserError(f"kernel spec {self.path.name}: derived name {name!r} must be a Python identifier")
        self._code = {expr: self._compile(expr, "derived" if expr in self.derived.values() else "restriction")
                      for expr in [*self.derived.values(), *(e for e, _ in checks)]}
        self._rules = [Rule(partial(self._holds, expr), message) for expr, message in checks]

    def _check_dtype(self, arg: In | Out | Scalar) -> None:
        """An array type the inputs' fill or the output check cannot serve fails here, not as
        zeros in an input or an output misread on a GPU."""
        if isinstance(arg, In) and arg.dtype not in IN_DTYPES:
            raise UserError(f"kernel spec {self.path.name}: In({arg.name!r}) is {arg.dtype}: a light spec fills inputs "
                            f"with uniform values in [-1, 1), so one of {', '.join(IN_DTYPES)} (other inputs need a full KernelSpec)")
        if isinstance(arg, Out) and arg.dtype not in OUT_DTYPES:
            raise UserError(f"kernel spec {self.path.name}: Out({arg.name!r}) is {arg.dtype}: the output check reads "
                            "float32, or BF16 bit patterns as uint16; write the output as one of those")

    def _restriction(self, entry: Any) -> tuple[str, str]:
        if isinstance(entry, str):
            return entry, f"fails {entry}"
        if isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(x, str) for x in entry):
            return entry
        raise UserError(f"kernel spec {self.path.name}: restriction {entry!r} must be an expression string "
                        "or an (expression, message) pair of strings")

    def _compile(self, expr: Any, kind: str) -> CodeType:
        if not isinstance(expr, str):
            raise UserError(f"kernel spec {self.path.name}: {kind} {expr!r} must be an expression string")
        try:
            return compile(expr, f"{self.path.name}: {expr}", "eval")
        except SyntaxError as exc:
            c_style = re.search(r"&&|\|\||!(?!=)|\?", expr) is not None  # (!= is Python too)
            hint = "; expressions are Python: and, or, not, x if c else y" if c_style else ""
            raise UserError(f"kernel spec {self.path.name}: {kind} {expr!r} is not a valid expression "
                            f"({exc.msg} at column {exc.offset}){hint}") from None

    # -- names ------------------------------------------------------------------------
    def _eval(self, expr: str, names: Mapping[str, Any], zero_division_holds: bool | None = None) -> Any:
        try:
            return eval(self._code[expr], {"__builtins__": {}, **FUNCTIONS}, dict(names))
        except NameError as exc:
            known = ", ".join(sorted(names))
            raise UserError(f"kernel spec {self.path.name}: {expr!r}: {exc}; known: {known}; functions: "
                            f"{', '.join(FUNCTIONS)}") from None
        except Exception as exc:  # a value of the wrong type, a division by zero: name the values it read
            if isinstance(exc, ZeroDivisionError) and zero_division_holds is not None:
                return zero_division_holds
            used = {n: names[n] for n in self._code[expr].co_names if n in names}
            values = " ".join(f"{k}={v!r}" for k, v in used.items())
            raise UserError(f"kernel spec {self.path.name}: {expr!r} raised {type(exc).__name__}: {exc} "
                            f"(with {values})") from None

    def _holds(self, expr: str, names: Names) -> Any:
        """A restriction over one config; one that divides by a value of it that is zero does not
        hold for it (as Kernel Tuner skips such a config), where a derived value's is an error."""
        return self._eval(expr, vars(names), zero_division_holds=False)

    def names(self, config: Config, problem: Problem) -> dict[str, Any]:
        """Problem, defaults, config and derived values in one dict (what expressions see)."""
        merged: dict[str, Any] = KnownNames(self.path.name, {**problem, **self.params, **config})
        for name, expr in self.derived.items():
            merged[name] = self._eval(expr, merged)
        return merged

    def _shape(self, array: In | Out, names: Mapping[str, Any]) -> tuple[int, ...]:
        with user_code(self.path, f"the shape of {array.name}"):
            return tuple(int(names[d]) if isinstance(d, str) else int(d) for d in array.shape)

    # -- KernelSpec ---------------------------------------------------------------------
    def check(self, config: Config, problem: Problem) -> str | None:
        names = self.names(config, problem)
        try:
            return first_violation(self._rules, Names(**names))
        except KeyError as exc:  # a message naming an unknown value
            raise UserError(f"kernel spec {self.path.name}: a restriction's message reads {exc}, which is no define, "
                            f"problem key or derived value; known: {', '.join(sorted(names))}") from None

    def derive(self, config: Config, problem: Problem) -> dict[str, int]:
        names = self.names(config, problem)
        return {k: int(names[k]) for k in self.derived}

    def grid(self, p: Mapping[str, Any]) -> tuple[int, int, int]:
        raise NotImplementedError

    def block(self, p: Mapping[str, Any]) -> tuple[int, int, int]:
        raise NotImplementedError

    def launch(self, config: Config, problem: Problem, device: DeviceInfo) -> Launch:
        names = self.names(config, problem)
        args = [a if isinstance(a, Scalar) else Buffer(a.name) for a in self.args]
        with user_code(self.path, "grid()"):
            grid = self.grid(names)
        with user_code(self.path, "block()"):
            block = self.block(names)
        return Launch(grid=grid, block=block, args=args)

    def inputs(self, problem: Problem, rng: np.random.Generator) -> dict[str, np.ndarray | RandomTable]:
        names = self.names({}, problem)
        return {a.name: rng.uniform(-1, 1, size=self._shape(a, names)).astype(a.dtype)
                for a in self.args if isinstance(a, In)}

    def outputs(self, problem: Problem) -> dict[str, OutputSpec]:
        names = self.names({}, problem)
        return {a.name: OutputSpec(self._shape(a, names), a.dtype, decode="float32" if a.dtype == "float32" else "bfloat16")
                for a in self.args if isinstance(a, Out)}
