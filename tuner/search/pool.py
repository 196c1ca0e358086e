"""The candidate configurations as an integer index, and what a study has tried and learnt of them.

A sampler must never propose a config that is invalid, already measured or in flight, and its
cost per proposal must not grow with the space (up to millions of valid configs) nor with the
trials already finished. So the candidates are encoded once, per phase, as a matrix of level
indices (one row per config, one column per axis), with a dict from config to row; what is tried
is a count per row, updated from the trials new since the last look (plus the few still in
flight, whose fate may change); what was learnt is a list of observations in the same encoding,
read by the search as arrays that convert only the observations new since its last read.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.measurement.value import COMPLETE_STATUSES
from tuner.search.space import Space
from tuner.store import optuna_private

#: a config as level indices, one per axis
Code = Sequence[int] | np.ndarray
#: trials whose config counts as taken: measured, or being / about to be measured
TRIED_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
#: how many tried valid levels a one-axis move on an ordered axis may pass to reach an untried one
REACH = 2
#: configs whose valid neighbours a pool keeps (the good set drifts slowly; cleared when full)
NEIGHBOURS_KEPT = 4096
IN_FLIGHT = (TrialState.RUNNING, TrialState.WAITING)
#: PRUNED statuses that say "slower", not "broken" (the rest are failures: compile, launch, run, check)
SLOWER_STATUSES = ("pruned_slow",)
#: user attr of a warm start's prior trial: how much it counts (tuner/search/warm_start.py)
PRIOR_WEIGHT = "prior_weight"


def trial_params(trial: FrozenTrial, axes: Sequence[str]) -> dict[str, Any] | None:
    """The config a trial ran or will run (an enqueued trial has only fixed params yet)."""
    params = trial.params or trial.system_attrs.get("fixed_params") or {}
    return params if all(a in params for a in axes) else None


def distance_ranks(codes: np.ndarray, target: np.ndarray, ordered: Sequence[bool] | np.ndarray) -> np.ndarray:
    """How far each row of ``codes`` is from ``target``, as one number to rank by: fewest differing
    axes first, then fewest level steps (raw steps along an ordered axis, one on any other; so an
    axis with many values is not favoured)."""
    differing = (codes != target).sum(axis=1).astype(np.int64)
    steps = np.where(ordered, np.abs(codes - target), codes != target).sum(axis=1)
    return differing * (1 + int(steps.max(initial=0))) + steps


class _Stacked:
    """A growing list read as one array: each read converts only the items appended since the
    last, so a long study's proposals do not restack every observation."""

    def __init__(self) -> None:
        self._array: np.ndarray | None = None
        self._items: list | None = None

    def of(self, items: list) -> np.ndarray:
        if items is not self._items or self._array is None or len(self._array) > len(items):  # a new list
            self._array, self._items = None, items
        done = 0 if self._array is None else len(self._array)
        if self._array is None or done < len(items):
            new = np.asarray(items[done:])
            self._array = new if self._array is None else np.concatenate([self._array, new])
        return self._array


@dataclass
class Observations:
    """What finished trials taught, as level-index rows: values of measured configs, configs
    stopped as slower, configs that failed (compile, launch, run, check)."""

    measured: list[np.ndarray] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    #: how much each measured config counts (a warm start's prior: less for each define it moved)
    weights: list[float] = field(default_factory=list)
    slower: list[np.ndarray] = field(default_factory=list)
    failed: list[np.ndarray] = field(default_factory=list)
    #: observations since the best value so far was found (how long the search has stagnated)
    since_best: int = 0
    best: float = math.inf
    _stacked: dict[str, _Stacked] = field(default_factory=dict, init=False, repr=False, compare=False)
    _order: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64), init=False, repr=False, compare=False)
    _by_value: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.measured) + len(self.slower) + len(self.failed)

    def array(self, name: Literal["measured", "values", "weights", "slower", "failed"]) -> np.ndarray:
        """One of the lists above (``measured``, ``values``, ``weights``, ``slower``, ``failed``) as an
        array; empty code lists give ``(0, 0)``."""
        items = getattr(self, name)
        if not items:
            return np.empty((0, 0) if name in ("measured", "slower", "failed") else 0)
        return self._stacked.setdefault(name, _Stacked()).of(items)

    def order(self) -> np.ndarray:
        """Indices of the measured configs, fastest first (ties in trial order). Values that arrived
        since the last call are merged into the order kept, not sorted again with the rest: a
        proposal late in a long study costs no sort of its whole history."""
        known = len(self._order)
        if known < len(self.values):
            values = self.array("values")
            new = known + np.argsort(values[known:], kind="stable")
            # after the equal values already ranked: ties stay in trial order
            at = np.searchsorted(values[self._order], values[new], side="right")
            self._order = np.insert(self._order, at, new)
        return self._order

    def by_value(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The measured configs, their values and weights, fastest first (ties in trial order);
        gathered again only when a value arrived, so a warm start's prior of a whole recording
        (tens of thousands of configs, none arriving) is ranked once, not on each proposal."""
        if self._by_value is None or len(self._by_value[1]) != len(self.values):
            order = self.order()
            self._by_value = (self.array("measured")[order], self.array("values")[order], self.array("weights")[order])
        return self._by_value

    def add(self, code: np.ndarray, value: float | None, failed: bool = False, weight: float = 1.0,
            stopped: bool = False) -> None:
        """A measured config (``value``, counting ``weight``); one stopped as slower than the best
        (``stopped``), ranked by the running ``value`` it was stopped at where it has one but never
        the best, as that value is an estimate; one slower without a value (None); or a failure."""
        self.since_best += 1
        if failed:
            self.failed.append(code)
        elif value is None:
            self.slower.append(code)
        else:
            if value < self.best and not stopped:
                self.best, self.since_best = value, 0
            self.measured.append(code)
            self.values.append(value)
            self.weights.append(weight)


class Pool:
    """Candidates of one phase as level indices; tried counts and observations kept incrementally."""

    def __init__(self, space: Space, candidates: Sequence[dict[str, Any]]):
        self.axes = space.axis_names
        self.levels = [len(v) for v in space.axes.values()]
        self._level_of = [{value: i for i, value in enumerate(values)} for values in space.axes.values()]
        self.values = [list(values) for values in space.axes.values()]  # per axis, in level order
        #: axes of values 0 and 1 (a code path's switch; :meth:`other_code_paths`)
        self.flags = [axis for axis, values in enumerate(self.values) if len(values) == 2 and set(values) == {0, 1}]
        # one column per axis: a million candidates encode in a second, not one encode() call each
        self.codes = np.empty((len(candidates), len(self.axes)), dtype=np.int32)
        for j, (axis, level) in enumerate(zip(self.axes, self._level_of, strict=True)):
            self.codes[:, j] = np.fromiter((level[c[axis]] for c in candidates), dtype=np.int32, count=len(candidates))
        self._row_of = {tuple(code): row for row, code in enumerate(self.codes.tolist())}
        self._neighbour_rows: dict[tuple[int, ...], np.ndarray] = {}  # a config's valid neighbours (they never change)
        self.size = len(candidates)
        self.tried = np.zeros(self.size, dtype=np.int32)  # trials holding each config (a repeat holds it twice)
        self.n_tried = 0  # rows with tried > 0
        self.observations = Observations()
        self.in_flight: dict[int, np.ndarray | None] = {}  # trial number -> its config's levels (None: not sampled yet)
        self._seen = 0  # trials read so far (numbers 0 .. _seen-1)

    # -- encoding ---------------------------------------------------------------------------
    def encode(self, params: dict[str, Any]) -> list[int]:
        return [level[params[a]] for a, level in zip(self.axes, self._level_of, strict=True)]

    def decode(self, code: Code) -> dict[str, Any]:
        return {a: values[int(i)] for a, values, i in zip(self.axes, self.values, code, strict=True)}

    def row(self, code: Code) -> int | None:
        return self._row_of.get(tuple(int(i) for i in code))

    # -- what the study did -----------------------------------------------------------------
    def update(self, study: optuna.Study, exclude: int | None = None) -> None:
        """Read the trials new since the last call, and those that were in flight then."""
        trials, total = optuna_private.read_trials(study, list(self.in_flight), self._seen)
        for trial in trials:
            if trial.number == exclude:  # being sampled now: read again next time, with its params
                self.in_flight.setdefault(trial.number, None)
            else:
                self._read(trial)
        self._seen = max(self._seen, total)

    def _read(self, trial: FrozenTrial) -> None:
        known = trial.number in self.in_flight
        before = self.in_flight.pop(trial.number, None)
        params = trial_params(trial, self.axes)
        code = np.array(self.encode(params), dtype=np.int32) if params is not None else None
        if known and before is not None:
            self._take(before, -1)  # counted while in flight: count it again below by its present state
        if trial.state in IN_FLIGHT:
            self.in_flight[trial.number] = code
        if code is None or trial.state not in TRIED_STATES:
            return
        self._take(code, +1)
        if trial.state in IN_FLIGHT:
            return
        status = trial.user_attrs.get("status", "")
        value = trial.values[0] if trial.values and math.isfinite(trial.values[0]) else None  # time: the first objective
        weight = float(trial.user_attrs.get(PRIOR_WEIGHT, 1.0))
        if trial.state == TrialState.COMPLETE and status in (*COMPLETE_STATUSES, ""):
            if status != "duplicate" and value is not None:
                self.observations.add(code, float(value), weight=weight)
        elif trial.state == TrialState.PRUNED:
            # a config stopped as slower keeps the running value it was stopped at (Optuna's value of a pruned
            # trial, its last intermediate): with the pruner on, most trials stop early, and "slower" alone
            # would leave the densities a handful of ranked configs
            failed = bool(status) and status not in SLOWER_STATUSES
            self.observations.add(code, None if failed or value is None else float(value), failed=failed,
                                  weight=weight, stopped=True)

    def _take(self, code: np.ndarray, step: int) -> None:
        row = self.row(code)
        if row is None:  # outside this phase's candidates
            return
        before = self.tried[row]
        self.tried[row] += step
        self.n_tried += int(self.tried[row] > 0) - int(before > 0)

    # -- what is left -----------------------------------------------------------------------
    @property
    def untried(self) -> int:
        return self.size - self.n_tried

    def in_flight_codes(self) -> list[np.ndarray]:
        return [c for c in self.in_flight.values() if c is not None]

    def random_untried(self, k: int, rng: np.random.Generator) -> np.ndarray:
        """Up to ``k`` distinct untried rows, uniformly; cost O(k) while most rows are untried."""
        if self.untried == 0:
            return np.empty(0, dtype=np.int64)
        if self.n_tried * 2 <= self.size:
            draw = np.unique(rng.integers(self.size, size=2 * k + 8))
            rows = draw[self.tried[draw] == 0]
            rng.shuffle(rows)
            if len(rows) >= min(k, self.untried) or len(rows) >= k // 2:
                return rows[:k]
        # over half tried: as many trials as rows were needed to get here, so one scan costs O(1) per trial
        rows = np.flatnonzero(self.tried == 0)
        return rng.choice(rows, size=min(k, len(rows)), replace=False)

    def neighbours(self, code: Code) -> np.ndarray:
        """Untried rows that differ from ``code`` in one axis, by any value (in axis, then level order)."""
        rows = self._valid_neighbours(tuple(int(i) for i in code))
        return rows[self.tried[rows] == 0]

    def _valid_neighbours(self, key: tuple[int, ...]) -> np.ndarray:
        """:meth:`one_axis_away` as an array, kept: each proposal asks for the neighbours of the good configs,
        which change by a config or two a trial, and the lookups are most of a proposal's candidates' cost."""
        rows = self._neighbour_rows.get(key)
        if rows is None:
            if len(self._neighbour_rows) >= NEIGHBOURS_KEPT:
                self._neighbour_rows.clear()
            rows = self._neighbour_rows[key] = np.array(self.one_axis_away(key), dtype=np.int64)
            rows.setflags(write=False)
        return rows

    def _untried_along(self, base: list[int], axis: int) -> list[int]:
        """Untried rows that differ from ``base`` in ``axis`` only, in level order."""
        here, rows = base[axis], []
        for level in range(self.levels[axis]):
            if level != here:
                base[axis] = level
                row = self._row_of.get(tuple(base))
                if row is not None and self.tried[row] == 0:
                    rows.append(row)
        base[axis] = here
        return rows

    def steps(self, code: Code, ordered: Sequence[bool]) -> list[list[int]]:
        """Per axis, the untried rows one move away from ``code``: on an ordered axis the nearest
        untried valid level below and above, passing at most ``REACH`` tried ones, or where both are
        spent every untried level of the axis (its speed may rise and fall along it: fast at 32 and
        from 128 on, slower between); on another axis every other value. Toward an end of an ordered
        axis where no level is valid with the other values of ``code``, the move goes to the next level
        anyway, with one other axis changed as little as makes it valid (:meth:`_repaired`), on an
        axis that has a one-axis move too."""
        moves: list[list[int]] = []
        base = [int(i) for i in code]
        for axis, levels in enumerate(self.levels):
            if not ordered[axis]:
                moves.append(self._untried_along(base, axis))
                continue
            here = base[axis]
            found: list[int] = []
            repaired: list[int] = []
            for direction in (range(here - 1, -1, -1), range(here + 1, levels)):
                passed, valid = 0, False  # valid levels passed (tried); any valid level that way
                for level in direction:
                    base[axis] = level
                    row = self._row_of.get(tuple(base))
                    if row is None:
                        continue  # invalid there: the move goes on to the next level
                    valid = True
                    if not self.tried[row]:
                        found.append(row)
                        break
                    passed += 1
                    if passed > REACH:
                        break
                base[axis] = here
                if not valid and len(direction):
                    row = self._repaired(base, axis, direction[0], ordered)
                    if row is not None:
                        repaired.append(row)
            one_axis = found or self._untried_along(base, axis)
            # repaired moves only beside one-axis ones: an axis with repaired moves alone would join the
            # draw among the axes, and a constrained space (GEMM's tile sizes) has many of them
            moves.append(one_axis + repaired if one_axis else [])
        return moves

    def _repaired(self, base: list[int], axis: int, level: int, ordered: Sequence[bool]) -> int | None:
        """The untried row with ``axis`` at ``level`` and one other axis of ``base`` changed, the fewest
        level steps (ordered) or one change (other axes); the first in axis and level order among ties.
        Constraints couple axes (a tile of 1 runs only with a stride of 0), and a climb one axis at a
        time would never cross them."""
        code = np.array(base)
        code[axis] = level
        best, best_distance = None, 0
        for row in self.one_axis_away(code):
            changed = self.codes[row] != code
            if changed[axis] or self.tried[row]:
                continue
            other = int(np.flatnonzero(changed)[0])
            distance = abs(int(self.codes[row][other]) - base[other]) if ordered[other] else 1
            if best is None or distance < best_distance:
                best, best_distance = row, distance
        return best

    def other_code_paths(self, code: Code) -> np.ndarray:
        """Untried valid rows equal to ``code`` but in two of its flags (axes of values 0 and 1),
        each of whose single flips is tried or not valid: its shape on another code path, once the
        one-axis moves to the paths between are spent. Flags such as ``use_shmem`` and
        ``read_only`` select code paths, and a path two flags away is where one-axis moves never
        lead when each single flip is slower, though the tile and block shape learnt on one path
        is often good on the others. Two sizes (``BLOCK_M`` 128 or 256) are not a flag."""
        base = [int(i) for i in code]

        def flipped(*axes: int) -> int | None:
            other = list(base)
            for axis in axes:
                other[axis] = 1 - other[axis]
            return self._row_of.get(tuple(other))

        spent = [axis for axis in self.flags if (row := flipped(axis)) is None or self.tried[row]]
        rows = []
        for first, second in itertools.combinations(spent, 2):
            row = flipped(first, second)
            if row is not None and not self.tried[row]:
                rows.append(row)
        return np.array(rows, dtype=np.int64)

    def one_axis_away(self, code: Code) -> list[int]:
        """Valid rows (tried or not) that differ from ``code`` in exactly one axis, in axis then level order."""
        rows = []
        base = [int(i) for i in code]
        for axis, levels in enumerate(self.levels):
            here = base[axis]
            for level in range(levels):
                if level != here:
                    base[axis] = level
                    row = self._row_of.get(tuple(base))
                    if row is not None:
                        rows.append(row)
            base[axis] = here
        return rows

    def first_untried(self, start: int) -> int | None:
        """The first untried row at or after ``start`` (grid order)."""
        step = 1024
        while start < self.size:
            block = np.flatnonzero(self.tried[start : start + step] == 0)
            if len(block):
                return start + int(block[0])
            start += step
            step *= 2
        return None
