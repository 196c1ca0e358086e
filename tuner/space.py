"""The search space: the cross product of a study's axes, filtered by the kernel's own model.

Kernel spaces are small (thousands of configs), so the valid set is enumerated once and
the sampler draws only from it: an invalid config never costs a compile or a GPU launch.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from tuner.errors import UserError
from tuner.spec import Config, KernelSpec, Problem, Value

MAX_CONFIGS = 2_000_000


def config_key(params: dict[str, Value], axes: Iterable[str]) -> tuple:
    """A hashable identity of a configuration over the given axes."""
    return tuple(params[a] for a in axes)


def reason_kind(reason: str) -> str:
    """Group reasons that differ only in numbers ("SMEM 240000 > 232448" -> "SMEM N > N")."""
    return re.sub(r"\d+", "N", reason)


@dataclass
class Space:
    spec: KernelSpec
    problem: Problem
    axes: dict[str, list[Value]]
    tier1: list[str]
    tier2: list[str]
    fixed: dict[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = set(self.spec.params)
        for name in [*self.axes, *self.fixed]:
            if name not in known:
                raise UserError(
                    f"define {name} is not a parameter of kernel spec {self.spec.path.name}; "
                    f"known: {', '.join(sorted(known))}"
                )
        missing = [k for k in self.spec.problem_keys if k not in self.problem]
        if missing:
            raise UserError(f"[problem] misses {', '.join(missing)} needed by kernel spec {self.spec.path.name}")
        total = 1
        for values in self.axes.values():
            total *= len(values)
        if total > MAX_CONFIGS:
            raise UserError(f"space has {total} configs, over {MAX_CONFIGS}: split it into tiers or studies")
        self.total = total
        self.valid: list[dict[str, Value]] = []
        self.invalid: Counter[str] = Counter()
        self.invalid_examples: dict[str, str] = {}
        for combo in itertools.product(*self.axes.values()):
            params = dict(zip(self.axes, combo))
            reason = self.spec.check(self.full_config(params), self.problem)
            if reason is None:
                self.valid.append(params)
            else:
                kind = reason_kind(reason)
                self.invalid[kind] += 1
                self.invalid_examples.setdefault(kind, reason)
        self._valid_keys = {self.key(p) for p in self.valid}

    @classmethod
    def from_study(cls, study, spec: KernelSpec) -> "Space":
        return cls(spec, dict(study.problem), study.axes, list(study.tier1), list(study.tier2), dict(study.fixed))

    @property
    def axis_names(self) -> list[str]:
        return list(self.axes)

    def key(self, params: dict[str, Value]) -> tuple:
        return config_key(params, self.axes)

    def full_config(self, params: dict[str, Value]) -> Config:
        """Spec defaults, then fixed values, then the sampled axes."""
        return {**self.spec.params, **self.fixed, **params}

    def is_valid(self, params: dict[str, Value]) -> bool:
        return self.key(params) in self._valid_keys

    def check(self, params: dict[str, Value]) -> str | None:
        return self.spec.check(self.full_config(params), self.problem)

    def require_valid(self) -> None:
        """Raise the error that says how to fix a space with no valid configuration."""
        if not self.valid:
            reasons = "; ".join(f"{k} x{n}" for k, n in self.invalid.most_common(3))
            raise UserError(f"no valid configuration in the space ({self.total} total; invalid: {reasons}): widen the axes")

    def defaults(self) -> dict[str, Value]:
        """The axes at the spec's defaults (or the first value where the default is absent)."""
        return {a: self.spec.params[a] if self.spec.params[a] in v else v[0] for a, v in self.axes.items()}

    def tier1_candidates(self) -> list[dict[str, Value]]:
        """Tier 1 of the tiered plan: tier-2 axes held at their defaults."""
        held = {a: v for a, v in self.defaults().items() if a in self.tier2}
        return [p for p in self.valid if all(p[a] == v for a, v in held.items())]

    def tier2_candidates(self, winner: dict[str, Value]) -> list[dict[str, Value]]:
        """Tier 2 of the tiered plan: every tier-2 combination on the tier-1 winner."""
        return [p for p in self.valid if all(p[a] == winner[a] for a in self.tier1)]

    def summary(self) -> dict:
        return {"total": self.total, "valid": len(self.valid), "invalid": dict(self.invalid.most_common())}
