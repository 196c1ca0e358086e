"""Proposals by a Parzen density ratio over the valid, untried configs (TPE on an index).

Optuna's TPE samples each axis from a density and leaves validity to chance; on a kernel
space most of the product is invalid and a good config's neighbours matter more than its
distant lookalikes. Here the densities score configs drawn from the valid untried set:

* candidates: a bounded uniform sample of the untried configs, plus every untried config one
  axis away from the good ones, so a proposal costs the same whatever the size of the space;
  24 of them are drawn in proportion to ``l(x) * p_ok(x)`` (TPE's draw from ``l``);
* score: ``l(x) / g(x) * p_ok(x)``. ``l`` and ``g`` are mixtures of product kernels (one per
  observation, with a uniform component as the prior) over the good trials (the best
  ``gamma(n)``, Optuna's default split; a config the pruner stopped is ranked by the running
  value it was stopped at) and the rest (failed ones too, and the trials in flight: a constant
  liar). Numeric axes are ordinal: the kernel is a Gaussian over level indices, so order counts
  and the spacing of the values (powers of two, steps of 16) does not; other axes count only
  same / different. The bandwidth follows Scott's rule, on the observations' total weight.
  An axis counted in steps (a block size of 16, 32, ..., 256) also enters as how many times two
  divides its value (:func:`alignments`): a config fast at multiples of a wavefront (64 on AMD
  GPUs) is then near the other multiples, not its slower neighbours 48 and 80;
  Once five configs are good, an ordered axis keeps its ordinal kernel only while that
  predicts which configs are good as well as same / different does (:func:`choose_kernels`):
  a block size whose good values alternate (multiples of a wavefront) is not smooth in its index;
* feasibility: ``p_ok`` is the successes' share of a narrow-kernel density of successes and
  failures (compile, launch, run-time errors, mismatches), learnt online, so a region that
  fails is proposed less without being ruled out; from ``FEASIBILITY_TOP_AFTER`` observations on (a
  prior's too) it weighs only the candidates ``l`` favours most (its cost would otherwise dominate a long
  study's, or a warm one's);
* plateaus: after as many trials without a new best as there are axes, every other proposal
  is the best config's shape on another code path (two of its 0 / 1 flags flipped, such as
  ``use_shmem`` and ``read_only``, once each flip alone is tried; not in a warm run, whose prior
  has measured the paths), or else a one-axis move from the best config (or else the top of
  another basin) that is likely to work (on an ordered axis the nearest untried level, or any
  once those near it are spent, or across a constraint with one other axis changed:
  :meth:`~tuner.search.pool.Pool.steps`); the others stay with the density ratio, which can leap
  to a basin that no chain of one-axis moves from the incumbent reaches through better configs.
  After three times as many trials without a new best, the good set is the best fifth of the
  measured configs, not the best tenth (``WIDE_GOOD_SHARE``): the runners-up's regions weigh in,
  where an optimum one axis from a runner-up but several from the incumbent is held down by ``g``
  (not in a warm run, whose wider good set would be more of the source's runners-up than its own).
  With a prior the moves start at once: the warm start's queue is where the source's search
  ended, and another GPU or shape moves an optimum by an axis or two, not to another basin;
* a prior: observations of a related study or recording (the same kernel on another GPU,
  another shape), mapped onto this space and ranked with the study's own relative to each
  one's best, join the mixtures and the feasibility model with a weight worth at most the
  random start-up (less for a config moved to fit: ``Observations.weights``), fading as the
  study's own trials arrive, and replace the random start-up.

The first ``n_startup_trials`` proposals (without a prior) are uniform over the untried set.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.search.pool import Observations, Pool

#: candidates drawn uniformly from the untried set per proposal (plus the best configs' neighbours)
SAMPLE_SIZE = 1024
#: candidates drawn from l per proposal (Optuna's TPESampler default)
N_EI_CANDIDATES = 24

#: observations a mixture keeps (a uniform subsample beyond): bounds the cost in the number of trials
MAX_COMPONENTS = 128

#: from this many observations in the feasibility model on (a warm start's prior counted), the draw looks only
#: at the FEASIBILITY_TOP candidates ``l`` favours most (its cost then stays flat; a cold study's first 200
#: proposals are as before)
FEASIBILITY_TOP_AFTER = 200
FEASIBILITY_TOP = 256

#: the best measured configs a base is compared with, to tell the top of a basin from its slope
BASIN_TOPS = 512

#: good configs needed before an ordered axis's kernel is checked against the data: with fewer,
#: the leave-one-out choice follows noise and costs the first trials more than it gives
MIN_GOOD_TO_CHOOSE_KERNEL = 5


#: the share of the measured configs that is 'good' (Optuna's TPESampler default), at most 25 configs
GOOD_SHARE = 0.1
#: a plateau this many times as long as the axes widens the good set to WIDE_GOOD_SHARE of the measured configs
WIDEN_AFTER = 3
WIDE_GOOD_SHARE = 0.2


def default_gamma(n: int, share: float = GOOD_SHARE) -> int:
    """How many of ``n`` measured trials are 'good'."""
    return min(int(math.ceil(share * n)), 25)


@dataclass(frozen=True)
class Alignment:
    """How many times two divides an axis's value, as one more ordered column of the densities."""

    axis: int
    #: the axis's level -> the rank of its value's largest power-of-two divisor, among the axis's values
    table: np.ndarray
    levels: int


@functools.lru_cache(maxsize=64)
def alignments(values: tuple[tuple[Any, ...], ...]) -> tuple[Alignment, ...]:
    """An :class:`Alignment` for each axis (``values``: each axis's, in level order) of four or more
    positive integers with a common factor, not all powers of two, that two divides a different number
    of times: a size counted in steps of 8 or 16, where hardware favours multiples of 32 or 64. Counts
    such as tiles of 1, 2, 3, 4 have no common factor, and along powers of two the order says it all."""
    found = []
    for axis, levels in enumerate(values):
        if len(levels) < 4 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in levels):
            continue
        if math.gcd(*levels) < 2 or all(v & (v - 1) == 0 for v in levels):
            continue
        exponents = np.array([(v & -v).bit_length() - 1 for v in levels])
        distinct = np.unique(exponents)
        if len(distinct) >= 2:
            table = np.searchsorted(distinct, exponents)
            table.setflags(write=False)  # cached: shared by every proposal
            found.append(Alignment(axis, table, len(distinct)))
    return tuple(found)


class Mixture:
    """Observations (level-index rows) with weights, as a kernel density over the candidates; each
    of ``aligned`` adds its column to the rows (:func:`alignments`)."""

    def __init__(self, levels: Sequence[int], ordered: Sequence[bool], sharp: bool = False,
                 aligned: Sequence[Alignment] = ()):
        self.aligned = list(aligned)
        self.levels = list(levels) + [a.levels for a in self.aligned]
        self.ordered = list(ordered) + [True] * len(self.aligned)
        self.sharp = sharp  # the narrowest kernel (half a level): a classifier's boundary, not a trend
        # blocks of rows as added (a study's observations arrive as a few arrays, not row by row)
        self._codes: list[np.ndarray] = []
        self._weights: list[np.ndarray] = []

    def add(self, codes: Sequence[np.ndarray] | np.ndarray, weight: float | np.ndarray = 1.0) -> None:
        """Observations as level-index rows, each counting ``weight`` (one for all, or one per row).
        The rows are kept as given (a prior's block is not copied on each proposal)."""
        if len(codes):
            rows = np.asarray(codes)
            self._codes.append(rows)
            self._weights.append(np.broadcast_to(np.asarray(weight, dtype=float), (len(rows),)))

    def _with_alignments(self, codes: np.ndarray) -> np.ndarray:
        if not self.aligned:
            return codes
        return np.column_stack([codes, *(a.table[codes[:, a.axis]] for a in self.aligned)]).astype(codes.dtype)

    def _rows(self, keep: np.ndarray | None = None) -> np.ndarray:
        """The observations' rows (those at positions ``keep`` of all added, in that order), with the
        alignment columns: only the rows a density reads are gathered and recoded."""
        if not self._codes:
            return np.empty((0, len(self.levels)), dtype=np.int32)
        if keep is None:
            return self._with_alignments(np.concatenate(self._codes))
        starts = np.cumsum([0] + [len(rows) for rows in self._codes])
        block = np.searchsorted(starts, keep, side="right") - 1
        dtype = np.result_type(*self._codes)
        out = np.empty((len(keep), self._codes[0].shape[1]), dtype=dtype)
        for b in np.unique(block):
            at = block == b
            out[at] = self._codes[b][keep[at] - starts[b]]
        return self._with_alignments(out)

    @property
    def codes(self) -> np.ndarray:
        return self._rows()

    @property
    def weights(self) -> np.ndarray:
        return np.concatenate(self._weights) if self._weights else np.empty(0)

    def __len__(self) -> int:
        return sum(len(rows) for rows in self._codes)

    @property
    def mass(self) -> float:
        return float(sum(w.sum() for w in self._weights))

    def log_density(self, candidates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """log of (uniform + sum_k w_k prod_axis K(x_axis | o_k,axis)) / (1 + sum_k w_k)."""
        uniform = float(np.exp(-np.sum(np.log(self.levels))))
        candidates = self._with_alignments(candidates)
        if not len(self):
            return np.full(len(candidates), math.log(uniform))
        weights = self.weights
        total = 1.0 + weights.sum()
        keep = None
        if len(weights) > MAX_COMPONENTS:  # a uniform subsample, reweighted to the same mass: the cost stays flat
            keep = rng.choice(len(weights), size=MAX_COMPONENTS, replace=False)
            weights = weights[keep] * (weights.sum() / weights[keep].sum())
        obs = self._rows(keep)
        # the bandwidth follows the observations' total weight, not their count: a prior of a whole
        # recording (thousands of configs, worth the random start-up in all) narrows the kernels as
        # that many trials would, not onto each of its configs
        shrink = 0.0 if self.sharp else scott_shrink(max(1, round(self.mass)), self.levels)
        product = None
        for axis, n in enumerate(self.levels):
            if n == 1:
                continue
            # the observations' columns first (levels x components), then whole rows per candidate:
            # the same numbers as kernel[candidates][:, obs], without a gather per element
            factor = self.axis_kernel(axis, shrink)[:, obs[:, axis]].take(candidates[:, axis], axis=0)
            if product is None:
                product = factor
            else:
                product *= factor
        if product is None:
            product = np.ones((len(candidates), len(obs)))
        return np.log((uniform + product @ weights) / total)

    def axis_kernel(self, axis: int, shrink: float) -> np.ndarray:
        """K[i, j] of one axis (:func:`_kernel`): the weight of its level i for an observation at level j."""
        return _kernel(self.levels[axis], self.ordered[axis], shrink)


def scott_shrink(n: int, levels: Sequence[int]) -> float:
    """Scott's rule: the factor by which ``n`` observations narrow a kernel over these axes."""
    dims = sum(1 for k in levels if k > 1)
    return n ** (-1.0 / (dims + 4))


@functools.lru_cache(maxsize=1024)
def _kernel(levels: int, ordered: bool, shrink: float) -> np.ndarray:
    """K[i, j]: weight of level i for an observation at level j (columns sum to 1). Cached (a
    proposal asks for the same ones many times; read-only)."""
    index = np.arange(levels)
    if ordered:
        distance = np.abs(index[:, None] - index[None, :]).astype(float)
        width = max(0.5, levels / math.sqrt(12.0) * shrink)  # the sd of a uniform over the levels, shrunk
    else:
        distance = (index[:, None] != index[None, :]).astype(float)
        width = max(0.5, shrink)
    weight = np.exp(-0.5 * (distance / width) ** 2)
    kernel = weight / weight.sum(axis=0, keepdims=True)
    kernel.setflags(write=False)
    return kernel


@dataclass
class _Model:
    """One proposal's densities: ``l`` (the good trials), ``g`` (the rest, failures and the trials in
    flight too), the feasibility model's successes and failures, and the good configs, best first."""

    good: Mixture
    bad: Mixture
    ok: Mixture
    failed: Mixture
    best: list[np.ndarray]
    rng: np.random.Generator

    def log_feasible(self, codes: np.ndarray) -> np.ndarray:
        """log p_ok: the successes' share of the kernel mass at each config."""
        if not len(self.failed):
            return np.zeros(len(codes))
        log_ok = self.ok.log_density(codes, self.rng) + math.log(self.ok.mass + 1.0)
        log_fail = self.failed.log_density(codes, self.rng) + math.log(self.failed.mass + 1.0)
        return log_ok - np.logaddexp(log_ok, log_fail)


class ParzenSearch:
    """Chooses the next row of a :class:`~tuner.search.pool.Pool` (see the module docstring)."""

    def __init__(self, seed: int | None = None, n_startup_trials: int = 10, sample_size: int = SAMPLE_SIZE,
                 patience: int | None = None, n_ei_candidates: int = N_EI_CANDIDATES):
        self.n_ei_candidates = n_ei_candidates
        self.n_startup_trials = n_startup_trials
        self.patience = patience
        self.sample_size = sample_size
        self.rng = np.random.default_rng(seed)

    def reseed_rng(self) -> None:
        self.rng = np.random.default_rng()

    def propose(self, pool: Pool, ordered: Sequence[bool], prior: Observations | None = None) -> int | None:
        """The row to try next, or None when nothing is left."""
        own = pool.observations
        started = len(own) + len(pool.in_flight_codes())
        prior = prior if prior is not None and len(prior) else None
        if (prior is None and started < self.n_startup_trials) or (not own.measured and (prior is None or not prior.measured)):
            rows = pool.random_untried(1, self.rng)
            return int(rows[0]) if len(rows) else None

        ordered = choose_kernels(own, pool.levels, ordered)
        n_axes = sum(1 for n in pool.levels if n > 1)
        model = self._model(pool, own, prior, ordered, n_axes)
        if self._on_plateau(own, prior, n_axes):
            # with a prior, the source's whole history has measured the other code paths already
            row = self._other_code_path(pool, own) if prior is None else None
            if row is None:
                row = self._local_move(pool, own, ordered, model.log_feasible)
            if row is not None:
                return row
        return self._by_density_ratio(pool, model)

    def _model(self, pool: Pool, own: Observations, prior: Observations | None, ordered: Sequence[bool],
               n_axes: int) -> _Model:
        """The densities of this proposal: the good trials, the rest, and the feasibility model, with a
        prior's trials weighed in (worth at most the random start-up, fading as the study's own arrive)."""
        # a long plateau: the runners-up's regions weigh in too, not only the incumbent's basin (with a
        # prior, a wider good set would hold more of the source's runners-up than of this study's)
        stalled = prior is None and own.measured and own.since_best >= WIDEN_AFTER * n_axes
        share = WIDE_GOOD_SHARE if stalled else GOOD_SHARE
        aligned = alignments(tuple(tuple(values) for values in pool.values))
        good, bad = Mixture(pool.levels, ordered, aligned=aligned), Mixture(pool.levels, ordered, aligned=aligned)
        ok = Mixture(pool.levels, ordered, sharp=True, aligned=aligned)
        failed = Mixture(pool.levels, ordered, sharp=True, aligned=aligned)
        bad.add(pool.in_flight_codes())  # constant liar: what others measure now is no reason to go there
        if prior is None:
            best = _split([own], [1.0], good, bad, share)
        else:
            scale = self.n_startup_trials / max(self.n_startup_trials, len(prior))
            weight = scale * self.n_startup_trials / (self.n_startup_trials + len(own))
            best = _split([own, prior], [1.0, weight], good, bad, share)
            ok.add(prior.array("measured"), weight)
            ok.add(prior.array("slower"), weight)
            failed.add(prior.array("failed"), weight)
        ok.add(own.array("measured"))
        ok.add(own.array("slower"))
        failed.add(own.array("failed"))
        return _Model(good, bad, ok, failed, best, self.rng)

    def _on_plateau(self, own: Observations, prior: Observations | None, n_axes: int) -> bool:
        """Is this proposal one of a plateau's moves (every other proposal once the best has not
        moved for ``patience`` trials)?"""
        if self.patience is not None:
            patience = self.patience
        elif prior is not None:
            patience = 0  # the queued configs were the source's search: climb from the best of them at once
        else:
            patience = n_axes
        return bool(own.measured) and own.since_best >= patience and (own.since_best - patience) % 2 == 0

    def _by_density_ratio(self, pool: Pool, model: _Model) -> int | None:
        """TPE's proposal over the candidates (a uniform sample of the untried configs and the good
        configs' neighbours): drawn from ``l * p_ok``, the best ``l / g * p_ok`` of those drawn."""
        candidates = [pool.random_untried(self.sample_size, self.rng)]
        candidates += [pool.neighbours(code) for code in model.best]
        rows = np.unique(np.concatenate(candidates)).astype(np.int64)
        if not len(rows):
            return None
        codes = pool.codes[rows]
        log_l = model.good.log_density(codes, self.rng)
        if len(model.ok) + len(model.failed) >= FEASIBILITY_TOP_AFTER and len(model.failed) and len(rows) > FEASIBILITY_TOP:
            # late in a study, or with a prior, the feasibility model (two mixtures of MAX_COMPONENTS sharp
            # kernels over every candidate) is most of a proposal's cost: it weighs only the candidates l favours most
            keep = np.sort(np.argpartition(-log_l, FEASIBILITY_TOP)[:FEASIBILITY_TOP])
            rows, codes, log_l = rows[keep], codes[keep], log_l[keep]
        log_l = log_l + model.log_feasible(codes)
        if len(rows) > self.n_ei_candidates:
            weight = np.exp(log_l - log_l.max())
            pick = self.rng.choice(len(rows), size=self.n_ei_candidates, replace=False, p=weight / weight.sum())
            rows, codes, log_l = rows[pick], codes[pick], log_l[pick]
        score = log_l - model.bad.log_density(codes, self.rng)
        top = np.flatnonzero(score >= score.max() - 1e-12)
        return int(rows[top[self.rng.integers(len(top))]])

    def _other_code_path(self, pool: Pool, own: Observations) -> int | None:
        """The best config's shape on another code path (:meth:`~tuner.search.pool.Pool.other_code_paths`),
        one at random, or None. Not weighed by the feasibility model: a path without evidence is
        what this move is for."""
        paths = pool.other_code_paths(own.measured[int(own.order()[0])])
        return int(paths[self.rng.integers(len(paths))]) if len(paths) else None

    def _local_move(self, pool: Pool, own: Observations, ordered: Sequence[bool], log_feasible) -> int | None:
        """One-axis move that is untried and likely to work (a plateau's way out), from the best
        config that has one, or else from the top of another basin (:func:`_bases`). The move's
        axis is drawn among those with a move, so no axis is favoured for its many values."""
        bases = _bases(own, len(pool.levels))
        # bases in groups of 1, 2, 4, ...: one feasibility evaluation per group, so a study whose
        # bases are spent (late, on a plateau) pays a few evaluations, not one per base
        start = 0
        while start < len(bases):
            group = bases[start:2 * start + 1]
            start = 2 * start + 1
            per_base = [[np.asarray(m) for m in pool.steps(own.measured[index], ordered) if m] for index in group]
            flat = [m for moves in per_base for m in moves]
            if not flat:
                continue
            feasible = log_feasible(pool.codes[np.concatenate(flat)]) > math.log(0.5)
            masks = iter(np.split(feasible, np.cumsum([len(m) for m in flat])[:-1]))
            for moves in per_base:
                kept = [m for m in (m[next(masks)] for m in moves) if len(m)]
                if kept:
                    axis = kept[self.rng.integers(len(kept))]
                    return int(axis[self.rng.integers(len(axis))])
        return None


def choose_kernels(obs: Observations, levels: Sequence[int], ordered: Sequence[bool]) -> list[bool]:
    """Which axes this proposal treats as ordered: an ordered axis of three or more levels stays
    ordered unless counting only same / different predicts better, for each measured, slower or
    failed config left out in turn, whether it is among the good ones (that axis alone, with the
    bandwidth the mixtures use). Unchanged until ``MIN_GOOD_TO_CHOOSE_KERNEL`` configs are good."""
    n_good = default_gamma(len(obs.measured))
    if n_good < MIN_GOOD_TO_CHOOSE_KERNEL:
        return list(ordered)
    codes = np.concatenate([rows for rows in (obs.array("measured"), obs.array("slower"), obs.array("failed")) if len(rows)])
    good = obs.array("measured")[_best(obs.array("values"), n_good)]
    shrink = scott_shrink(len(obs.measured), levels)
    chosen = list(ordered)
    for axis, n in enumerate(levels):
        if ordered[axis] and n >= 3:
            good_counts = np.bincount(good[:, axis], minlength=n)
            rest_counts = np.bincount(codes[:, axis], minlength=n) - good_counts
            ordinal = _held_out_fit(_kernel(n, True, shrink), good_counts, rest_counts)
            same_or_different = _held_out_fit(_kernel(n, False, shrink), good_counts, rest_counts)
            chosen[axis] = ordinal >= same_or_different
    return chosen


def _best(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest values, ties to the earliest (a stable sort's first ``k``,
    in time linear in the study's length)."""
    if k >= len(values):
        return np.arange(len(values))
    kth = np.partition(values, k - 1)[k - 1]
    below = np.flatnonzero(values < kth)
    return np.concatenate([below, np.flatnonzero(values == kth)[: k - len(below)]])


def _held_out_fit(kernel: np.ndarray, good_counts: np.ndarray, rest_counts: np.ndarray) -> float:
    """Log-likelihood of the good / rest labels of one axis's observations (counts per level), each
    label predicted from the other observations by the two classes' kernel densities and sizes."""
    uniform = 1.0 / len(good_counts)
    n_good, n_rest = int(good_counts.sum()), int(rest_counts.sum())
    near_good, near_rest, itself = kernel @ good_counts, kernel @ rest_counts, np.diag(kernel)

    def p_good(good_mass: np.ndarray, good_n: int, rest_mass: np.ndarray, rest_n: int) -> np.ndarray:
        good_part = good_n * (uniform + good_mass) / (1 + good_n)
        rest_part = rest_n * (uniform + rest_mass) / (1 + rest_n)
        return good_part / (good_part + rest_part)

    seen_good, seen_rest = good_counts > 0, rest_counts > 0  # the levels an observation can be left out at
    as_good = p_good((near_good - itself)[seen_good], n_good - 1, near_rest[seen_good], n_rest)
    as_rest = p_good(near_good[seen_rest], n_good, (near_rest - itself)[seen_rest], n_rest - 1)
    return float(good_counts[seen_good] @ np.log(as_good) + rest_counts[seen_rest] @ np.log1p(-as_rest))


def _bases(obs: Observations, n_axes: int, level_within: float = 0.0) -> list[int]:
    """Where local moves start: the overall best config, then the best of each other basin (the
    best config measured with some value of some axis, another method or tile size) from which a
    climb may lead past the incumbent, then the rest of those configs. A config that a measured one
    axis away beats sits on the slope of a basin whose top is already a base: the best at each
    value of a long axis (31 block sizes) is mostly the incumbent's basin again, one axis over.
    A neighbour faster by at most ``level_within`` (a share) counts as level, not above."""
    codes, values, order = obs.array("measured"), obs.array("values"), obs.order()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    best_ranks = []
    for axis in range(n_axes):  # the best rank at each value of the axis: a scatter, not a sort per axis
        best = np.full(int(codes[:, axis].max()) + 1, len(order))
        np.minimum.at(best, codes[:, axis], rank)
        best_ranks.append(best[best < len(order)])
    bases = order[np.unique(np.concatenate(best_ranks))]  # best first; ties in trial order
    better = order[:BASIN_TOPS]  # only the best: a long study's proposal costs no more
    one_axis_away = (codes[bases][:, None, :] != codes[better][None, :, :]).sum(axis=2) == 1
    on_a_slope = (one_axis_away & (values[better][None, :] * (1 + level_within) < values[bases][:, None])).any(axis=1)
    return [int(i) for i in bases[~on_a_slope]] + [int(i) for i in bases[on_a_slope]]


def _split(sources: Sequence[Observations], weights: Sequence[float], good: Mixture, bad: Mixture,
           share: float = GOOD_SHARE) -> list[np.ndarray]:
    """Add the best gamma(n) measured configs (:func:`default_gamma` at ``share``) to ``good`` and the
    rest (and the slower and failed ones) to ``bad``; returns the good ones of the first source, best first. Values are ranked
    relative to each source's best, so a related study's trials mix with this study's own (ties:
    by source, then in trial order). The best of all sources are a prefix of each one's own
    ranking, so only those prefixes are compared: a prior's ranking is read, never re-sorted."""
    ranked = []  # per source with values: its index, measured configs, values relative to its best, counts; best first
    for index, (obs, weight) in enumerate(zip(sources, weights, strict=True)):
        bad.add(obs.array("slower"), weight)
        bad.add(obs.array("failed"), weight)
        if obs.values:
            codes, values, counts = obs.by_value()
            ranked.append((index, codes, values / values[0], weight * counts))
    if not ranked:
        return []
    n_good = default_gamma(sum(len(ratios) for _, _, ratios, _ in ranked), share)
    heads = [ratios[:n_good] for _, _, ratios, _ in ranked]
    head_of = np.concatenate([np.full(len(head), i) for i, head in enumerate(heads)])
    place = np.concatenate([np.arange(len(head)) for head in heads])
    best = np.argsort(np.concatenate(heads), kind="stable")[:n_good]  # ties: by source, then in trial order
    taken = np.bincount(head_of[best], minlength=len(ranked))
    for (_, codes, _, counts), k in zip(ranked, taken, strict=True):
        good.add(codes[:k], counts[:k])
        bad.add(codes[k:], counts[k:])
    if ranked[0][0] == 0 and taken[0]:  # this study's own good configs
        return list(ranked[0][1][: taken[0]])
    return [ranked[i][1][j] for i, j in zip(head_of[best], place[best], strict=True)]
