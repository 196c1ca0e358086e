"""A study's precision class: how close every output must be to the FP32 reference.

``[study] precision`` in a study file:

- ``"fast"`` (the default): the kernel spec's ``atol``/``rtol`` against ``max(|reference|,
  RMS of the reference row)``. The row-RMS floor forgives outputs near zero, whose error is
  that of the whole row's sums: the numerics of cuBLAS FP8 with ``use_fast_accum=True``.
- ``"precise"``: ``0.02 + 2 %`` of ``|reference|`` itself, no floor, and no output may exceed
  it: the numerics of cuBLAS FP8 with ``use_fast_accum=False`` (FP32 promotion of the sums).
  A spec whose own ``atol``/``rtol`` are tighter (an FP32 kernel's) keeps them: the precise
  class is never looser than the fast one.
- a number in (0, 0.01]: an error budget, the fraction of outputs that may be off by more
  than the precise tolerance.

A config whose full output is outside its study's tolerance is a ``mismatch``: never a winner.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tuner.errors import UserError

CLASSES = ("fast", "precise")
PRECISE_ATOL = 0.02
PRECISE_RTOL = 0.02
MAX_BUDGET = 0.01   # a larger share of wrong outputs is no longer a precision class


@dataclass(frozen=True)
class Tolerance:
    """What the full-output check accepts. An output fails when
    ``|got - ref| > atol + rtol * (max(|ref|, row RMS) if rms_floor else |ref|)``;
    the check fails when more than ``max_bad_fraction`` of the outputs fail (or any is NaN)."""

    atol: float
    rtol: float
    rms_floor: bool = True
    max_bad_fraction: float = 0.0
    precision: str = "fast"

    def allowed_bad(self, checked: int) -> int:
        """How many of ``checked`` outputs may fail."""
        return math.floor(self.max_bad_fraction * checked)

    def as_job(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_job(cls, data: dict[str, Any] | None, spec: Any) -> Tolerance:
        """The tolerance a job carries, else the spec's own (the fast class)."""
        return cls(**data) if data else fast(spec)


def fast(spec: Any) -> Tolerance:
    return Tolerance(float(spec.atol), float(spec.rtol), rms_floor=True, precision="fast")


def parse_precision(value: Any, where: str) -> str | float:
    """``[study] precision`` as given: "fast", "precise" or an error budget; one-line errors."""
    if isinstance(value, str):
        if value not in CLASSES:
            raise UserError(f"{where} {value!r} unknown: \"fast\", \"precise\", or an error budget "
                            f"(the fraction of outputs allowed off by more than {PRECISE_ATOL} + {PRECISE_RTOL:.0%}, "
                            f"in (0, {MAX_BUDGET}])")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_BUDGET:
        raise UserError(f"{where} {value!r}: give \"fast\", \"precise\", or an error budget in (0, {MAX_BUDGET}] "
                        f"(the fraction of outputs allowed off by more than {PRECISE_ATOL} + {PRECISE_RTOL:.0%})")
    return float(value)


def tolerance(precision: str | float, spec: Any) -> Tolerance:
    """The check's tolerance for a study's precision class."""
    if precision == "fast":
        return fast(spec)
    atol, rtol = min(PRECISE_ATOL, float(spec.atol)), min(PRECISE_RTOL, float(spec.rtol))
    if precision == "precise":
        return Tolerance(atol, rtol, rms_floor=False, precision="precise")
    return Tolerance(atol, rtol, rms_floor=False, max_bad_fraction=float(precision),
                     precision=f"budget {float(precision):g}")
