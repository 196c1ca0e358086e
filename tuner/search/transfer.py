"""Configs of another study (another shape, another GPU) mapped onto this study's space.

A warm start's source may search values this space does not (FC1 fixes ``EXTRA_TMA`` at 0 where
patch_embed's winners use 1), or its configs may be invalid here (another problem size, another
limit). Dropping them leaves the warm start empty and silent; instead each one moves to the
nearest config this space can run:

* per axis, a value the axis lists is kept; a number it does not list takes the nearest listed
  number (ties: the smaller); any other value, or an axis the source did not tune, takes this
  space's default;
* a config the constraint model rejects then moves to the nearest valid one: fewest differing
  axes, then fewest level steps (ordered axes: steps along the order; others: one per change),
  ties by enumeration order, so the mapping is the same each run.

Each mapped config names the defines whose value changed (:attr:`Mapped.moved`): its axes, and
the source's defines that this space does not search but runs at another value (FC1 runs
patch_embed's ``EPI_BATCH = 8`` at the kernel's default).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.search.pool import Pool, distance_ranks
from tuner.search.space import Space


@dataclass(frozen=True)
class Mapped:
    params: dict[str, Any]
    #: defines whose value differs from the source config's: axes (a value not listed here, or moved to a
    #: valid config), then defines this space does not search and runs at another value
    moved: tuple[str, ...]
    #: axes the source did not tune, given values here (:func:`tuner.search.warm_start.warm_start`)
    untuned: tuple[str, ...] = ()
    #: the source config is queued at each combination of their values (else at one, in turn)
    each_value: bool = False
    #: the source's defines that this kernel does not have (another version of it): left out
    left_out: tuple[str, ...] = ()


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def nearest_value(value: Any, values: Sequence[Any], default: Any) -> Any:
    """``value`` if the axis lists it, else the nearest listed number (ties: the smaller), else ``default``."""
    if value in values:
        return value
    numbers = [v for v in values if _number(v)]
    if not _number(value) or not numbers:
        return default
    return min(numbers, key=lambda v: (abs(v - value), v))


class SpaceMap:
    """Maps configs onto ``candidates`` (this space's valid set, or tier 1's) as described above."""

    def __init__(self, space: Space, candidates: Sequence[dict[str, Any]], ordered: Sequence[bool], hold: dict[str, Any] | None = None):
        self.space = space
        self.candidates = candidates
        self.ordered = np.asarray(ordered, dtype=bool)
        self.hold = hold or {}  # axes held at a value (tiered mode: tier 2 at its defaults)
        self._pool: Pool | None = None  # built on the first config that is invalid here
        self._runs_at = space.full_config({})  # the value of each define this space does not search

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            self._pool = Pool(self.space, self.candidates)
        return self._pool

    def map(self, params: dict[str, Any]) -> Mapped | None:
        """``params`` (a source config: any axes) on this space, or None when no config is valid here."""
        defaults = self.space.defaults()
        out = {a: nearest_value(params.get(a, defaults[a]), values, defaults[a]) for a, values in self.space.axes.items()}
        out.update(self.hold)
        if not self._allowed(out):
            pool = self.pool
            if not pool.size:
                return None
            out = pool.decode(pool.codes[self._nearest_row(pool, pool.encode(out))])
        moved = tuple(a for a in self.space.axes if a in params and a not in self.hold and params[a] != out[a])
        unsearched = tuple(a for a, v in params.items() if a not in out and a in self._runs_at and v != self._runs_at[a])
        left_out = tuple(a for a in params if a not in out and a not in self._runs_at)
        return Mapped(out, moved + unsearched, left_out=left_out)

    def _allowed(self, params: dict[str, Any]) -> bool:
        if self._pool is not None:
            return self._pool.row(self._pool.encode(params)) is not None
        return self.space.is_valid(params) and all(params[a] == v for a, v in self.hold.items())

    def _nearest_row(self, pool: Pool, code: Sequence[int]) -> int:
        """The valid row nearest ``code`` (fewest differing axes, then level steps; the first of ties).
        A row one axis away is looked up directly; only when there is none is every row scanned."""
        target = np.asarray(code)
        rows = np.array(sorted(pool.one_axis_away(target)), dtype=np.int64)  # row order: ties to the first
        score = distance_ranks(pool.codes[rows] if len(rows) else pool.codes, target, self.ordered)
        best = int(np.argmin(score))  # the first of ties: enumeration order
        return int(rows[best]) if len(rows) else best
