"""The search space: the cross product of a study's axes, filtered by the kernel's own model.

Kernel spaces are enumerable (at most a few million configs), so the valid set is enumerated
once, on first use, and the sampler draws only from it: an invalid config never costs a
compile or a GPU launch.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tuner.compile.build import default_cache_dir
from tuner.contract.kernel_spec import Config, KernelSpec, Problem, Value
from tuner.errors import UserError
from tuner.search.enumeration import Enumeration, enumerate_cached

if TYPE_CHECKING:
    from tuner.study.file import StudyConfig

MAX_CONFIGS = 2_000_000

#: draws a config asked of :meth:`Space.draw_valid` may take (a space where fewer than 1 in
#: this many configs is valid is left to the enumeration)
DRAWS_PER_CONFIG = 500


def config_key(params: dict[str, Value], axes: Iterable[str]) -> tuple:
    """A hashable identity of a configuration over the given axes."""
    return tuple(params[a] for a in axes)


@dataclass
class Space:
    spec: KernelSpec
    problem: Problem
    axes: dict[str, list[Value]]
    tier1: list[str]
    tier2: list[str]
    fixed: dict[str, Value] = field(default_factory=dict)
    source: str = ""  # the study file, named in errors about its values
    #: the valid set when it is known without the kernel's model (a recording holds its configs): the
    #: product is then never checked, so its size is no limit
    known: Enumeration | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        defines = set(self.spec.params)
        for name in [*self.axes, *self.fixed]:
            if name in self.spec.problem_keys:
                raise UserError(f"{name} is a problem key of kernel spec {self.spec.path.name}, not a define to "
                                "tune: set it under [problem] (a new shape is a new study)")
            if name not in defines:
                raise UserError(
                    f"define {name} is not a parameter of kernel spec {self.spec.path.name}; "
                    f"known: {', '.join(sorted(defines))}"
                )
        missing = [k for k in self.spec.problem_keys if k not in self.problem]
        if missing:
            unread = [k for k in self.problem if k not in self.spec.problem_keys]  # a misspelt key, most likely
            also = f" ({', '.join(unread)}: not a problem key of the spec)" if unread else ""
            raise UserError(f"[problem] misses {', '.join(missing)} needed by kernel spec {self.spec.path.name}{also}")
        self._check_value_types()
        total = 1
        for values in self.axes.values():
            total *= len(values)
        if total > MAX_CONFIGS and self.known is None:
            raise UserError(f"space has {total} configs, over {MAX_CONFIGS}: split it into tiers or studies")
        self.total = total
        self._enumeration: Enumeration | None = self.known
        self._valid_keys: set[tuple] | None = None
        self._enumerating = threading.Lock()
        self._twin: Space | None = None  # an equal space whose valid set this one takes (enumerate_from)
        self._distributions: dict | None = None

    # -- the valid set, enumerated on first use (so a GPU worker can start meanwhile) ------------
    def enumerate(self) -> Enumeration:
        with self._enumerating:
            if self._enumeration is None:  # (a failed enumeration is retried by the next caller, to raise)
                self._enumeration = self._twin.enumerate() if self._twin is not None else enumerate_cached(
                    self.spec, self.problem, self.axes, self.fixed, self.total, default_cache_dir() / "spaces")
            if self._valid_keys is None:
                self._valid_keys = {self.key(p) for p in self._enumeration.valid}
            return self._enumeration

    @property
    def enumerated(self) -> bool:
        """Is the valid set known (nothing to wait for)?"""
        return self._enumeration is not None or (self._twin is not None and self._twin.enumerated)

    def enumerate_from(self, twin: Space) -> bool:
        """Take the valid set of ``twin``, an equal space (the same kernel file, problem, axes and
        fixed defines) already enumerating it, instead of enumerating it again; False if not equal."""
        if (twin.spec.path, twin.problem, twin.axes, twin.fixed) != (self.spec.path, self.problem, self.axes, self.fixed):
            return False
        self._twin = twin
        return True

    def enumerate_soon(self) -> None:
        """Start enumerating in the background (the work runs in other processes when large)."""
        threading.Thread(target=self._enumerate_quietly, name="enumerate-space", daemon=True).start()

    def _enumerate_quietly(self) -> None:
        try:
            self.enumerate()
        except BaseException:  # the error is raised again where the valid set is first needed
            pass

    @property
    def valid(self) -> list[dict[str, Value]]:
        return self.enumerate().valid

    @property
    def invalid(self) -> Counter[str]:
        return self.enumerate().invalid

    @property
    def invalid_examples(self) -> dict[str, str]:
        return self.enumerate().invalid_examples

    def _check_value_types(self) -> None:
        """A number define given a word (``PAD = [0, 1, "yes"]``) is the study's mistake: say so here,
        before the kernel's model meets it."""
        problem_defaults = getattr(self.spec, "problem_defaults", {})
        where = f"{self.source}: " if self.source else ""
        for section, values, defaults in (("problem", {k: [v] for k, v in self.problem.items()}, problem_defaults),
                                          ("space", self.axes, self.spec.params),
                                          ("fixed", {k: [v] for k, v in self.fixed.items()}, self.spec.params)):
            for name, choices in values.items():
                default = defaults.get(name)
                if not isinstance(default, int):
                    continue
                for value in choices:
                    if not isinstance(value, int):
                        key = f"space.{'tier1' if name in self.tier1 else 'tier2'}" if section == "space" else section
                        raise UserError(f"{where}[{key}.{name}] {value!r} is not an integer: {name} is a number "
                                        f"in {self.spec.source} (default {default})")

    @classmethod
    def from_study(cls, study: StudyConfig, spec: KernelSpec) -> Space:
        return cls(spec, dict(study.problem), study.axes, list(study.tier1), list(study.tier2), dict(study.fixed),
                   str(study.path) if study.path else "")

    @classmethod
    def load(cls, study_file: str | Path) -> tuple[StudyConfig, Space]:
        """A study file and its space, as every command reads them: the file, its kernel's spec (which
        must list the study's arch) and the space of the two."""
        from tuner.compile.targets import check_supported
        from tuner.contract.kernel_spec import load_spec
        from tuner.study.file import load_study

        cfg = load_study(study_file)
        spec = load_spec(cfg.kernel)
        check_supported(cfg.arch, spec, str(cfg.path or study_file))
        return cfg, cls.from_study(cfg, spec)

    @property
    def distributions(self) -> dict:
        """How each axis is stored on Optuna trials (:mod:`tuner.search.distributions`): compact for
        a long axis; a resumed study's own kinds once :meth:`adopt_stored` has read it."""
        if self._distributions is None:
            from tuner.search.distributions import space_distributions

            self._distributions = space_distributions(self.axes)
        return self._distributions

    def adopt_stored(self, study) -> None:
        """Store trials as ``study`` stored them so far (a study from before compact axes)."""
        from tuner.search.distributions import space_distributions

        self._distributions = space_distributions(self.axes, study)

    @property
    def axis_names(self) -> list[str]:
        return list(self.axes)

    def key(self, params: dict[str, Value]) -> tuple:
        return config_key(params, self.axes)

    def full_config(self, params: dict[str, Value]) -> Config:
        """Spec defaults, then fixed values, then the sampled axes."""
        return {**self.spec.params, **self.fixed, **params}

    @property
    def valid_keys(self) -> set[tuple]:
        """The keys of :attr:`valid` (built once with it)."""
        self.enumerate()
        assert self._valid_keys is not None
        return self._valid_keys

    def is_valid(self, params: dict[str, Value]) -> bool:
        return self.key(params) in self.valid_keys

    def check(self, params: dict[str, Value]) -> str | None:
        from tuner.search.enumeration import checked_reason

        return checked_reason(self.spec, self.full_config(params), self.problem)

    def draw_valid(self, n: int, rng: np.random.Generator, exclude: Collection[tuple] = ()) -> list[dict[str, Value]]:
        """``n`` distinct valid configs at random, none keyed in ``exclude``, without the valid set:
        each axis drawn uniformly and the invalid draws rejected by the kernel's own check, which is
        uniform over the valid set. Fewer (maybe none) where :data:`DRAWS_PER_CONFIG` draws
        per config did not find them: a sparse space, or one with fewer configs left."""
        drawn: dict[tuple, dict[str, Value]] = {}
        seen = set(exclude)  # and every config checked: none is checked twice (a spec's check may be slow)
        for _ in range(n * DRAWS_PER_CONFIG):
            if len(drawn) == n:
                break
            params = {axis: values[rng.integers(len(values))] for axis, values in self.axes.items()}
            key = self.key(params)
            if key not in seen:
                seen.add(key)
                if self.check(params) is None:
                    drawn[key] = params
        return list(drawn.values())

    def require_valid(self) -> None:
        """Raise the error that says how to fix a space with no valid configuration."""
        if not self.valid:
            reasons = "; ".join(f"{self.invalid_examples[k]} x{n}" for k, n in self.invalid.most_common(3))
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

    def rejected(self, held: Mapping[str, Value] | None = None, limit: int = 10_000) -> list[tuple[dict[str, Value], str]] | None:
        """The configs of the axes' product (the axes in ``held`` at those values) that the kernel's
        model rejects, each with why, in the product's order; None when the product is over ``limit``."""
        axes = {a: [held[a]] if held and a in held else v for a, v in self.axes.items()}
        if math.prod(len(v) for v in axes.values()) > limit:
            return None
        valid = self.valid_keys
        out = []
        for values in itertools.product(*axes.values()):
            params = dict(zip(axes, values, strict=True))
            if self.key(params) not in valid:
                out.append((params, self.check(params) or "rejected"))
        return out

    def summary(self) -> dict:
        return {"total": self.total, "valid": len(self.valid), "invalid": dict(self.invalid.most_common())}
