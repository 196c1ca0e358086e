"""A light kernel spec for simple kernels, in the style of Kernel Tuner.

Where :class:`~tuner.spec.KernelSpec` asks for methods, :class:`LightSpec` takes data:

- the tunable defines and their defaults come from the ``.cu`` file's
  ``#ifndef NAME`` / ``#define NAME value`` guards (less the ``problem_keys``);
- ``derived`` names values computed from the config and the problem (expressions, in order);
- ``restrictions`` are expressions over defines, problem and derived values, each
  optionally with a message (``str.format`` over the same names) saying why a config fails;
- ``args`` lists the kernel's arguments in order: :class:`In` and :class:`Out` arrays with
  their shapes, and :class:`~tuner.spec.Scalar` values;
- ``grid`` and ``block`` are small methods of the merged names (a dict);
- ``reference`` computes the expected first output for some rows, from the inputs.

Megakernels (TMA descriptors, clusters, dynamic SMEM, several outputs with their own
encodings) keep the full :class:`~tuner.spec.KernelSpec`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tuner.errors import UserError
from tuner.rules import Names, Rule, first_violation
from tuner.spec import (
    Buffer,
    Config,
    DeviceInfo,
    KernelSpec,
    Launch,
    OutputSpec,
    Problem,
    RandomTable,
    Scalar,
    Value,
)

_GUARD = re.compile(r"^[ \t]*#[ \t]*ifndef[ \t]+(\w+)[^\n]*\n[ \t]*#[ \t]*define[ \t]+(\1)[ \t]+([^\s/]+)", re.MULTILINE)
#: names an expression may call besides the defines
_FUNCTIONS = {"min": min, "max": max, "abs": abs, "ceil_div": lambda a, b: -(-a // b)}

Dim = int | str  # a number, or the name of a problem key / define / derived value


@dataclass(frozen=True)
class In:
    """An input array, filled with fresh uniform values in [-1, 1) (never zeros)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class Out:
    """An output array; the first one is checked against :meth:`LightSpec.reference`."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"


def guarded_defines(path: Path) -> dict[str, Value]:
    """``{NAME: default}`` of every ``#ifndef NAME / #define NAME value`` guard in a source file."""
    found: dict[str, Value] = {}
    for name, _, value in _GUARD.findall(path.read_text()):
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
        self.kernel_name = self.kernel_name or stem
        if self.source_path.is_file():  # load_spec reports a missing source
            guards = guarded_defines(self.source_path)
            self.params = {k: v for k, v in guards.items() if k not in self.problem_keys}
        checks = [(r, f"fails {r}") if isinstance(r, str) else r for r in self.restrictions]
        self._code = {expr: compile(expr, f"{self.path.name}: {expr}", "eval")
                      for expr in [*self.derived.values(), *(e for e, _ in checks)]}
        self._rules = [Rule(partial(self._holds, expr), message) for expr, message in checks]

    # -- names ------------------------------------------------------------------------
    def _eval(self, expr: str, names: Mapping[str, Any]) -> Any:
        try:
            return eval(self._code[expr], {"__builtins__": {}, **_FUNCTIONS}, dict(names))
        except NameError as exc:
            raise UserError(f"kernel spec {self.path.name}: {expr!r}: {exc}") from None

    def _holds(self, expr: str, names: Names) -> Any:
        return self._eval(expr, vars(names))

    def names(self, config: Config, problem: Problem) -> dict[str, Any]:
        """Problem, defaults, config and derived values in one dict (what expressions see)."""
        merged: dict[str, Any] = {**problem, **self.params, **config}
        for name, expr in self.derived.items():
            merged[name] = self._eval(expr, merged)
        return merged

    def _shape(self, shape: tuple[Dim, ...], names: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(int(names[d]) if isinstance(d, str) else int(d) for d in shape)

    # -- KernelSpec ---------------------------------------------------------------------
    def check(self, config: Config, problem: Problem) -> str | None:
        return first_violation(self._rules, Names(**self.names(config, problem)))

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
        return Launch(grid=self.grid(names), block=self.block(names), args=args)

    def inputs(self, problem: Problem, rng: np.random.Generator) -> dict[str, np.ndarray | RandomTable]:
        names = self.names({}, problem)
        return {a.name: rng.uniform(-1, 1, size=self._shape(a.shape, names)).astype(a.dtype)
                for a in self.args if isinstance(a, In)}

    def outputs(self, problem: Problem) -> dict[str, OutputSpec]:
        names = self.names({}, problem)
        return {a.name: OutputSpec(self._shape(a.shape, names), a.dtype, decode="float32" if a.dtype == "float32" else "bfloat16")
                for a in self.args if isinstance(a, Out)}
