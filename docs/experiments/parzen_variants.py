"""Variants of ParzenSearch tried against the default (experiments, not product code).

Each patches one step of ``tuner.search.parzen`` for the duration of a proposal; compare with

    cd docs/experiments && PYTHONPATH=. python3 sampler_sim.py --seeds 40 --budget 100 --paired parzen_variants:NAME

Results: results_sampler.md, "fourth session".
"""
import contextlib
import itertools
import math

import numpy as np

import tuner.search.parzen as P


@contextlib.contextmanager
def patched(name, value):
    old = getattr(P, name)
    setattr(P, name, value)
    try:
        yield
    finally:
        setattr(P, name, old)


class RandomGamma(P.ParzenSearch):
    """Each proposal splits good/rest at a random size: 1 .. 2*gamma(n) (capped at 25)."""

    def propose(self, pool, ordered, prior=None):
        rng = self.rng
        orig = P.default_gamma

        def split(sources, weights, good, bad, *share):
            n = sum(len(o.values) for o in sources)
            hi = min(25, 2 * orig(n))
            k = int(rng.integers(1, hi + 1))
            with patched("default_gamma", lambda *_: k):
                return ORIG_SPLIT(sources, weights, good, bad, *share)

        with patched("_split", split):
            return super().propose(pool, ordered, prior)


ORIG_SPLIT = P._split


class Subspace(P.ParzenSearch):
    """Each proposal's l/g over a random subset of the axes (each kept with probability KEEP)."""
    KEEP = 0.5

    def propose(self, pool, ordered, prior=None):
        n_axes = len(pool.levels)
        keep = self.rng.random(n_axes) < self.KEEP
        if not keep.any():
            keep[self.rng.integers(n_axes)] = True
        # an axis left out counts as one level in the candidates and the observations alike
        orig_ld = P.Mixture.log_density

        def log_density(mix, candidates, rng):
            if mix.sharp:
                return orig_ld(mix, candidates, rng)
            masked = candidates.copy()
            saved = mix._codes
            mix._codes = [np.where(keep, c, 0) for c in saved]
            masked[:, ~keep] = 0
            saved_levels = mix.levels
            mix.levels = [n if k else 1 for n, k in zip(saved_levels, keep)]
            try:
                return orig_ld(mix, masked, rng)
            finally:
                mix._codes, mix.levels = saved, saved_levels

        P.Mixture.log_density = log_density
        try:
            return super().propose(pool, ordered, prior)
        finally:
            P.Mixture.log_density = orig_ld


class Subspace70(Subspace):
    KEEP = 0.7


class Maximin(P.ParzenSearch):
    """Start-up trials: of CANDS untried configs, the farthest (min normalised distance) from those started."""
    CANDS = 64

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        started_codes = [*own.measured, *own.slower, *own.failed, *pool.in_flight_codes()]
        if prior is None and 0 < len(started_codes) < self.n_startup_trials:
            rows = pool.random_untried(self.CANDS, self.rng)
            if len(rows):
                cand = pool.codes[rows].astype(float)
                seen = np.stack(started_codes).astype(float)
                levels = np.asarray(pool.levels, dtype=float)
                span = np.maximum(levels - 1, 1)
                ordered_mask = np.asarray(ordered, dtype=bool)
                diff = np.abs(cand[:, None, :] - seen[None, :, :])
                dist = np.where(ordered_mask, diff / span, (diff > 0).astype(float))
                dist = dist[:, :, levels > 1].sum(axis=2)
                nearest = dist.min(axis=1)
                top = np.flatnonzero(nearest >= nearest.max() - 1e-12)
                return int(rows[top[self.rng.integers(len(top))]])
        return super().propose(pool, ordered, prior)


class Maximin256(Maximin):
    CANDS = 256


class Maximin4(Maximin):
    CANDS = 4


class Maximin8(Maximin):
    CANDS = 8


class Bootstrap(P.ParzenSearch):
    """Each proposal's split on a bootstrap resample of the study's own measured configs."""

    def propose(self, pool, ordered, prior=None):
        rng = self.rng

        def split(sources, weights, good, bad, *share):
            own = sources[0]
            if len(own.values) >= 2:
                idx = rng.integers(len(own.values), size=len(own.values))
                res = type(own)()
                for i in idx:
                    res.add(own.measured[i].copy(), own.values[i])
                res.slower, res.failed = own.slower, own.failed
                sources = [res, *sources[1:]]
            return ORIG_SPLIT(sources, weights, good, bad, *share)

        with patched("_split", split):
            return super().propose(pool, ordered, prior)


def proposed_with(search, pool, ordered, prior, extra):
    """``search.propose`` with the rows ``extra`` among its candidates (joined to the first good
    config's neighbours)."""
    one_step = pool.neighbours
    done = {"first": False}

    def neighbours(code):
        rows = one_step(code)
        if not done["first"]:
            done["first"] = True
            rows = np.concatenate([rows, extra])
        return rows

    pool.neighbours = neighbours
    try:
        return search.propose(pool, ordered, prior)
    finally:
        del pool.neighbours


class TwoAxis(P.ParzenSearch):
    """Candidates also every untried config two axes from the incumbent (a denser local search
    scored by the density ratio)."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        if not own.measured:
            return super().propose(pool, ordered, prior)
        best = own.measured[int(np.argmin(own.values))]
        extra = []
        base = [int(i) for i in best]
        for a in range(len(pool.levels)):
            for la in range(pool.levels[a]):
                if la == base[a]:
                    continue
                for b in range(a + 1, len(pool.levels)):
                    for lb in range(pool.levels[b]):
                        if lb == base[b]:
                            continue
                        code = list(base)
                        code[a], code[b] = la, lb
                        row = pool._row_of.get(tuple(code))
                        if row is not None and pool.tried[row] == 0:
                            extra.append(row)
        return proposed_with(super(), pool, ordered, prior, np.array(extra, dtype=np.int64))


class RecentWalk(P.ParzenSearch):
    """Plateau moves: once the incumbent has no one-axis move left, from the best of the recent
    proposals (the last 2 x axes measured) before the best of the other basins: a leap of the
    density ratio gets a local follow-up (iterated local search)."""

    def _local_move(self, pool, own, ordered, log_feasible):
        window = 2 * sum(1 for n in pool.levels if n > 1)
        orig_bases = P._bases

        def bases(obs, n_axes):
            ranked = orig_bases(obs, n_axes)
            if len(obs.values) <= window:
                return ranked
            recent = len(obs.values) - window + int(np.argmin(obs.values[-window:]))
            return [ranked[0], recent] + [i for i in ranked[1:] if i != recent]

        with patched("_bases", bases):
            return super()._local_move(pool, own, ordered, log_feasible)



def product_levels(pool, prefixes):
    """(axes, table, n) for the product of the numeric axes whose names start with one of
    ``prefixes``: ``table`` maps each combination of their levels to the product's level (its rank
    among the ``n`` distinct products); None where fewer than two axes match."""
    axes = [a for a, name in enumerate(pool.axes) if name.startswith(tuple(prefixes))
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pool.values[a])]
    if len(axes) < 2:
        return None
    grids = np.meshgrid(*[np.asarray(pool.values[a], dtype=float) for a in axes], indexing="ij")
    product = np.prod(grids, axis=0)
    distinct = np.unique(product)
    return axes, np.searchsorted(distinct, product), len(distinct)


def recoded_mixture(levels_of, recode):
    """A Mixture that scores candidates and observations in recoded level indices (``recode``)
    over the recoded axes' level counts (``levels_of``)."""

    class Recoded(ORIG_MIXTURE):
        def __init__(self, levels, ordered, sharp=False):
            levels, ordered = levels_of(levels, ordered)
            super().__init__(levels, ordered, sharp)

        def log_density(self, candidates, rng):
            saved = self.codes
            self.codes = list(recode(np.stack(saved))) if saved else saved
            try:
                return super().log_density(recode(candidates), rng)
            finally:
                self.codes = saved

    return Recoded


ORIG_MIXTURE = P.Mixture
#: Kernel Tuner's names of the thread-block dimensions and of the work per thread
PRODUCT_PREFIXES = ("block_size", "tile_size")


class Derived(P.ParzenSearch):
    """The densities also see the thread count (product of the ``block_size_*`` axes) and the
    work per thread (product of the ``tile_size_*`` axes) as two more ordinal axes."""

    def propose(self, pool, ordered, prior=None):
        derived = [d for d in (product_levels(pool, [p]) for p in PRODUCT_PREFIXES) if d is not None]
        if not derived:
            return super().propose(pool, ordered, prior)

        def levels_of(levels, ordered_):
            return list(levels) + [n for *_, n in derived], list(ordered_) + [True] * len(derived)

        def recode(codes):
            codes = np.asarray(codes)
            return np.column_stack([codes, *(table[tuple(codes[:, a] for a in axes)] for axes, table, _ in derived)])

        with patched("Mixture", recoded_mixture(levels_of, recode)):
            return super().propose(pool, ordered, prior)


class Reparam(P.ParzenSearch):
    """As ``Derived``, but each product replaces the second of its axes in the densities (the
    block shape as x and thread count, not x and y)."""

    def propose(self, pool, ordered, prior=None):
        derived = [d for d in (product_levels(pool, [p]) for p in PRODUCT_PREFIXES) if d is not None]
        if not derived:
            return super().propose(pool, ordered, prior)
        replaced = {axes[1]: (axes, table, n) for axes, table, n in derived}

        def levels_of(levels, ordered_):
            return [replaced[a][2] if a in replaced else n for a, n in enumerate(levels)], ordered_

        def recode(codes):
            codes = np.asarray(codes)
            out = codes.copy()
            for a, (axes, table, _) in replaced.items():
                out[:, a] = table[tuple(codes[:, b] for b in axes)]
            return out

        with patched("Mixture", recoded_mixture(levels_of, recode)):
            return super().propose(pool, ordered, prior)


class AxisUniformStart(P.ParzenSearch):
    """Start-up trials as the `random` sampler draws them: each axis uniform over its levels, then the
    nearest untried valid config (fewest differing axes, then fewest level steps, ties at random).
    Not uniform over the valid set: it favours valid configs beside invalid regions (the largest
    tiles that still fit), which on our own kernels are often the fast ones."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        started = len(own) + len(pool.in_flight_codes())
        if prior is None and started < self.n_startup_trials:
            untried = np.flatnonzero(pool.tried == 0)
            if not len(untried):
                return None
            target = np.array([self.rng.integers(n) for n in pool.levels])
            codes = pool.codes[untried]
            differing = (codes != target).sum(axis=1)
            steps = np.where(np.asarray(ordered, dtype=bool), np.abs(codes - target), codes != target).sum(axis=1)
            score = differing * (1 + int(steps.max(initial=0))) + steps
            best = np.flatnonzero(score == score.min())
            return int(untried[best[self.rng.integers(len(best))]])
        return super().propose(pool, ordered, prior)


class _DrawnBase(P.ParzenSearch):
    """Plateau moves from a base drawn among all the bases with a likely move, rather than from the
    incumbent until it is spent (results_sampler.md, "seventh session"). ``mode``: "uniform"; "half"
    (the first such base half the time, else another); "rank" (weights 1 / position)."""

    mode = "uniform"

    def _local_move(self, pool, own, ordered, log_feasible):
        bases = P._bases(own, len(pool.levels))
        per_base = [[np.asarray(m) for m in pool.steps(own.measured[i], ordered) if m] for i in bases]
        flat = [m for moves in per_base for m in moves]
        if not flat:
            return None
        feasible = iter(np.split(log_feasible(pool.codes[np.concatenate(flat)]) > np.log(0.5),
                                 np.cumsum([len(m) for m in flat])[:-1]))
        options = [[m for m in (m[next(feasible)] for m in moves) if len(m)] for moves in per_base]
        live = [i for i, kept in enumerate(options) if kept]
        if not live:
            return None
        if self.mode == "half" and len(live) > 1 and self.rng.random() >= 0.5:
            pick = live[1 + self.rng.integers(len(live) - 1)]
        elif self.mode == "rank":
            weights = 1.0 / (np.arange(len(live)) + 1.0)
            pick = live[self.rng.choice(len(live), p=weights / weights.sum())]
        else:
            pick = live[0] if self.mode == "half" else live[self.rng.integers(len(live))]
        axis = options[pick][self.rng.integers(len(options[pick]))]
        return int(axis[self.rng.integers(len(axis))])


class DrawnBaseUniform(_DrawnBase):
    mode = "uniform"


class DrawnBaseHalf(_DrawnBase):
    mode = "half"


class DrawnBaseRank(_DrawnBase):
    mode = "rank"


class TwoStep(P.ParzenSearch):
    """Once the incumbent has no one-axis move left, half the plateau's moves are a two-axis move
    from it (adjacent levels of two axes, any value of an unordered one) that is likely to work."""

    def _local_move(self, pool, own, ordered, log_feasible):
        incumbent = [int(i) for i in own.measured[P._bases(own, len(pool.levels))[0]]]
        if any(pool.steps(incumbent, ordered)) or self.rng.random() >= 0.5:
            return super()._local_move(pool, own, ordered, log_feasible)

        def adjacent(axis):
            here, n = incumbent[axis], pool.levels[axis]
            if ordered[axis]:
                return [v for v in (here - 1, here + 1) if 0 <= v < n]
            return [v for v in range(n) if v != here]

        rows = []
        axes = [a for a, n in enumerate(pool.levels) if n > 1]
        for i, a in enumerate(axes):
            for b in axes[i + 1:]:
                for level_a in adjacent(a):
                    for level_b in adjacent(b):
                        code = list(incumbent)
                        code[a], code[b] = level_a, level_b
                        row = pool.row(code)
                        if row is not None and not pool.tried[row]:
                            rows.append(row)
        if rows:
            rows = np.asarray(rows)
            rows = rows[log_feasible(pool.codes[rows]) > np.log(0.5)]
            if len(rows):
                return int(rows[self.rng.integers(len(rows))])
        return super()._local_move(pool, own, ordered, log_feasible)



class Crossover(P.ParzenSearch):
    """Candidates also ``CHILDREN`` uniform crossovers of two good configs (each axis's value from
    one parent or the other), where valid and untried: configs built of values the good set shares,
    two or more axes from any of them, which the uniform sample seldom holds."""

    CHILDREN = 256

    def parents(self, pool):
        own = pool.observations
        n_good = P.default_gamma(len(own.measured))
        return own.array("measured")[P._best(own.array("values"), n_good)] if n_good >= 2 else None

    def propose(self, pool, ordered, prior=None):
        parents = self.parents(pool)
        if parents is None:
            return super().propose(pool, ordered, prior)
        first = parents[self.rng.integers(len(parents), size=self.CHILDREN)]
        second = parents[self.rng.integers(len(parents), size=self.CHILDREN)]
        children = np.where(self.rng.random(first.shape) < 0.5, first, second)
        rows = [pool._row_of.get(tuple(c)) for c in children.tolist()]
        extra = np.unique(np.array([r for r in rows if r is not None and pool.tried[r] == 0], dtype=np.int64))
        return proposed_with(super(), pool, ordered, prior, extra)


class CrossoverBases(Crossover):
    """As ``Crossover``, the parents the tops of basins (``_bases``, the first 16) once the search is
    on a plateau (as long without a new best as there are axes), else the good configs."""

    def parents(self, pool):
        own = pool.observations
        dims = sum(1 for n in pool.levels if n > 1)
        if not own.measured or own.since_best < dims:
            return super().parents(pool)
        return own.array("measured")[P._bases(own, len(pool.levels))[:16]]


class WarmPatience(P.ParzenSearch):
    """With a prior, the plateau's moves start at once only while the study has fewer than
    ``2 * n_startup_trials`` own trials; then they wait as a cold study's do (as many trials
    without a new best as there are axes). Run with ``warm_pairs.py --search``."""

    def propose(self, pool, ordered, prior=None):
        if prior is None or len(prior) == 0 or len(pool.observations) < 2 * self.n_startup_trials:
            return super().propose(pool, ordered, prior)
        self.patience = sum(1 for n in pool.levels if n > 1)
        try:
            return super().propose(pool, ordered, prior)
        finally:
            self.patience = None


class WarmUniform(P.ParzenSearch):
    """With a prior, every other proposal is uniform while fewer than ``2 * n_startup_trials`` trials
    have started: half of the cold start-up's uniform trials, so a warm study's own observations are
    not all in the region its source favoured. Run with ``warm_pairs.py --search``."""

    def uniform_at(self, started: int) -> bool:
        return started < 2 * self.n_startup_trials and started % 2 == 1

    def propose(self, pool, ordered, prior=None):
        started = len(pool.observations) + len(pool.in_flight_codes())
        if prior is not None and len(prior) and self.uniform_at(started):
            rows = pool.random_untried(1, self.rng)
            return int(rows[0]) if len(rows) else None
        return super().propose(pool, ordered, prior)


def prior_agreement(prior, own, levels, ordered, rng) -> float:
    """Spearman's rank correlation between the prior's own density ratio l / g (the source's good
    against its rest) at the study's measured configs and how fast they ran (1: the prior ranks
    them as they ran; 0: no better than chance)."""
    good, bad = P.Mixture(levels, ordered), P.Mixture(levels, ordered)
    P._split([prior], [1.0], good, bad)
    codes, values = own.array("measured"), own.array("values")
    score = good.log_density(codes, rng) - bad.log_density(codes, rng)
    return spearman(score, -values)


def spearman(x, y) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (0 where either is constant)."""
    a, b = _ranks(x), _ranks(y)
    a, b = a - a.mean(), b - b.mean()
    spread = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / spread) if spread else 0.0


def _ranks(x):
    """Ranks from 0, ties sharing their mean rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse = np.unique(x, return_inverse=True)
    return (np.bincount(inverse, ranks) / np.bincount(inverse))[inverse]


class Probation(WarmUniform):
    """A prior on probation: with a prior, every other proposal is uniform while fewer than
    ``2 * n_startup_trials`` trials have started (``WarmUniform``); from ``CHECK_AFTER`` measured
    configs on, the prior is dropped (the study goes on as a cold one) while it ranks the study's
    own configs no better than chance (``prior_agreement`` <= ``THRESHOLD``)."""

    CHECK_AFTER = 8
    THRESHOLD = 0.0
    UNIFORM = True

    def propose(self, pool, ordered, prior=None):
        if prior is not None and len(prior) and len(pool.observations.measured) >= self.CHECK_AFTER and \
                prior_agreement(prior, pool.observations, pool.levels, list(ordered), self.rng) <= self.THRESHOLD:
            prior = None
        return super().propose(pool, ordered, prior) if self.UNIFORM else P.ParzenSearch.propose(self, pool, ordered, prior)


class ProbationNoUniform(Probation):
    """``Probation`` without the uniform proposals: the prior is judged on the configs it led to."""

    UNIFORM = False


def _diverse_queue(min_axes):
    """A warm start queues a config only where it differs from each config queued before in
    ``min_axes`` axes or more: the climb from the best queued config tries its neighbours anyway,
    so the other places in the queue go to other regions of the source's best."""
    from tuner.search import warm_start

    if getattr(warm_start._Queue, "min_axes", None) == min_axes:
        return
    add = warm_start._Queue.add if not hasattr(warm_start._Queue, "plain_add") else warm_start._Queue.plain_add

    def diverse_add(queue, params, user_attrs):
        if any(sum(params[a] != q[a] for a in queue.space.axis_names) < min_axes for q in queue.queued):
            return False
        return add(queue, params, user_attrs)

    warm_start._Queue.plain_add = add
    warm_start._Queue.add = diverse_add
    warm_start._Queue.min_axes = min_axes


class _WarmStartPatched(P.ParzenSearch):
    """The default search, with the warm start changed by ``PATCH`` (run with ``warm_pairs.py --search``)."""

    PATCH = staticmethod(lambda: None)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.PATCH()


class DiverseQueue(_WarmStartPatched):
    """A warm start's queue as ``_diverse_queue(2)``."""

    PATCH = staticmethod(lambda: _diverse_queue(2))


class DiverseQueue3(_WarmStartPatched):
    PATCH = staticmethod(lambda: _diverse_queue(3))


def _queue_top(top):
    """Every warm start queues ``top`` configs of its source (``--warm-start-top``; default 5)."""
    from tuner.run import runner

    plain = getattr(runner, "plain_warm_start", runner.warm_start)
    runner.plain_warm_start = plain
    runner.warm_start = lambda study, space, names, _top, tiered=False: plain(study, space, names, top, tiered)


class Top3(_WarmStartPatched):
    """A warm start queues 3 configs."""

    PATCH = staticmethod(lambda: _queue_top(3))


class Top10(_WarmStartPatched):
    PATCH = staticmethod(lambda: _queue_top(10))


class Top1(_WarmStartPatched):
    """A warm start queues 1 config of each source (with several sources: one each)."""

    PATCH = staticmethod(lambda: _queue_top(1))


class _EffectiveMixture(P.Mixture):
    """A mixture whose bandwidth follows its observations' total weight, not their count: a prior of
    a whole recording (thousands of configs, worth ten trials in all) no longer narrows the kernels
    to each of its configs. Without a prior every weight is 1: the same bandwidth as the default."""

    def log_density(self, candidates, rng):
        plain = P.scott_shrink
        P.scott_shrink = lambda n, levels: plain(max(1, round(self.mass)), levels)
        try:
            return super().log_density(candidates, rng)
        finally:
            P.scott_shrink = plain


class EffectiveBandwidth(_WarmStartPatched):
    """The density's bandwidth by the observations' weight (``_EffectiveMixture``)."""

    PATCH = staticmethod(lambda: setattr(P, "Mixture", _EffectiveMixture))


def _split_prior_apart(share):
    """``_split`` with the prior ranked apart from the study: the study's own trials split as a cold
    study's; the prior's best ``default_gamma`` configs carry ``share`` of its mass (None: their
    count's share, as when ranked together) and its rest the remainder. With a whole recording the
    shared ranking gives its 25 best configs 25 / 4,000 of a weight worth ten trials: nothing in ``l``."""
    plain = P._split

    def split(sources, weights, good, bad, *gamma_share):
        if len(sources) < 2:
            return plain(sources, weights, good, bad, *gamma_share)
        (own, prior), (own_weight, prior_weight) = sources, weights
        best = plain([own], [own_weight], good, bad, *gamma_share)
        bad.add(prior.array("slower"), prior_weight)
        bad.add(prior.array("failed"), prior_weight)
        if not prior.values:
            return best
        codes, counts = prior.array("measured"), prior_weight * prior.array("weights")
        order = np.argsort(prior.array("values"), kind="stable")
        n_good = P.default_gamma(len(order))
        top, rest = order[:n_good], order[n_good:]
        if share is not None and len(rest):
            mass = counts.sum()
            counts = counts.copy()
            counts[top] *= share * mass / counts[top].sum()
            counts[rest] *= (1 - share) * mass / counts[rest].sum()
        good.add(codes[top], counts[top])
        bad.add(codes[rest], counts[rest])
        return best if len(best) else list(codes[top])

    return split


class _PriorApart(P.ParzenSearch):
    SHARE: float | None = None

    def propose(self, pool, ordered, prior=None):
        with patched("_split", _split_prior_apart(self.SHARE)):
            return super().propose(pool, ordered, prior)


class PriorApart(_PriorApart):
    """The prior ranked apart, its best configs at their count's share of its mass."""


class PriorGoodTenth(_PriorApart):
    """The prior's best configs carry a tenth of its mass (a random start-up's good share)."""

    SHARE = 0.1


class PriorGoodHalf(_PriorApart):
    SHARE = 0.5


class RankedMoves(P.ParzenSearch):
    """With a prior, a plateau's one-axis move is the one whose config the prior measured fastest
    (relative to its best), among the feasible moves of the first base that has any; a move the prior
    did not measure is drawn as by the default only when none of them was. With a whole recording
    the prior's densities barely speak of speed (its good configs weigh 25 / 4,000 of it; its rest is
    the space's own shape), so its times reach the search mostly through the queue and ``g``."""

    def propose(self, pool, ordered, prior=None):
        self._prior = prior if prior is not None and len(prior) and prior.values else None
        return super().propose(pool, ordered, prior)

    def _lookup(self):
        prior = self._prior
        key = (id(prior), len(prior.values))
        if getattr(self, "_lookup_key", None) != key:
            values = prior.array("values")
            self._lookup_map = {tuple(c): v / values.min() for c, v in zip(prior.array("measured").tolist(), values, strict=True)}
            self._lookup_key = key
        return self._lookup_map

    def _local_move(self, pool, own, ordered, log_feasible):
        if self._prior is None:
            return super()._local_move(pool, own, ordered, log_feasible)
        lookup = self._lookup()
        for index in P._bases(own, len(pool.levels)):
            per_axis = [np.asarray(m) for m in pool.steps(own.measured[index], ordered) if m]
            if not per_axis:
                continue
            flat = np.concatenate(per_axis)
            feasible = log_feasible(pool.codes[flat]) > np.log(0.5)
            if not feasible.any():
                continue
            rows = flat[feasible]
            known = np.array([lookup.get(tuple(code), np.inf) for code in pool.codes[rows].tolist()])
            if np.isfinite(known).any():
                best = np.flatnonzero(known <= known.min() + 1e-12)
                return int(rows[best[self.rng.integers(len(best))]])
            kept = [m[f] for m, f in zip(per_axis, np.split(feasible, np.cumsum([len(m) for m in per_axis])[:-1]), strict=True) if f.any()]
            axis = kept[self.rng.integers(len(kept))]
            return int(axis[self.rng.integers(len(axis))])
        return None


class PiBO(RankedMoves):
    """With a prior, the density-ratio step weighs each candidate by the prior's belief, as piBO
    (Hvarfner et al., 2022) weighs an acquisition: ``log l`` gains ``BETA / n`` times the log of the
    prior's speed at that config relative to its best (n: the study's own observations; a config the
    prior did not measure gets the prior's median). The moves stay the default's (``RankedMoves``
    lends only its lookup of the prior's times)."""

    BETA = 10.0
    _local_move = P.ParzenSearch._local_move

    def propose(self, pool, ordered, prior=None):
        self._prior = prior if prior is not None and len(prior) and prior.values else None
        if self._prior is None:
            return P.ParzenSearch.propose(self, pool, ordered, prior)
        lookup = self._lookup()
        neutral = float(np.median(np.log(list(lookup.values()))))
        weight = self.BETA / max(1, len(pool.observations))
        plain, made = P.Mixture, []

        class Belief(plain):
            def log_density(self, candidates, rng):
                density = super().log_density(candidates, rng)
                if self is not made[0]:
                    return density
                belief = np.array([-math.log(lookup[c]) if c in lookup else -neutral
                                   for c in map(tuple, candidates.tolist())])
                return density + weight * belief

        def make(*args, **kwargs):
            mixture = Belief(*args, **kwargs)
            made.append(mixture)
            return mixture

        with patched("Mixture", make):
            return P.ParzenSearch.propose(self, pool, ordered, prior)


class PiBO30(PiBO):
    BETA = 30.0


class PriorFeasibilityOnly(P.ParzenSearch):
    """The prior informs the feasibility model (and the warm start's queue) only, not ``l`` and ``g``."""

    def propose(self, pool, ordered, prior=None):
        plain = P._split
        with patched("_split", lambda sources, weights, good, bad, *share: plain(sources[:1], weights[:1], good, bad, *share)):
            return super().propose(pool, ordered, prior)


def _octave_steps(pool, code, ordered, min_levels=6):
    """``Pool.steps`` plus, on an ordered numeric axis of ``min_levels`` or more, the untried valid
    configs nearest to twice and half the value: along a block size whose speed rises and falls
    (32, 40, ..., 256), one-level moves stay in the dip next to the incumbent; an octave may cross it."""
    from tuner.search.pool import Pool

    moves = Pool.steps(pool, code, ordered)
    base = [int(i) for i in code]
    for axis, levels in enumerate(pool.levels):
        values = pool.values[axis]
        here = base[axis]
        if not ordered[axis] or levels < min_levels or not all(isinstance(v, (int, float)) and v > 0 for v in values):
            continue
        for factor in (2.0, 0.5):
            target = math.log(values[here] * factor)
            ranked = sorted((abs(math.log(v) - target), level) for level, v in enumerate(values) if level != here)
            for _, level in ranked[:3]:  # the nearest valid untried of the three levels nearest the octave
                base[axis] = level
                row = pool._row_of.get(tuple(base))
                base[axis] = here
                if row is not None and not pool.tried[row]:
                    if row not in moves[axis]:
                        moves[axis].append(row)
                    break
    return moves


class OctaveMoves(P.ParzenSearch):
    """A plateau's one-axis moves also jump to twice and half the value on long numeric axes."""

    def _local_move(self, pool, own, ordered, log_feasible):
        pool.steps = lambda code, ordered_: _octave_steps(pool, code, ordered_)
        try:
            return super()._local_move(pool, own, ordered, log_feasible)
        finally:
            del pool.steps


class WarmStallUniform(P.ParzenSearch):
    """With a prior, once the study has gone as many trials without a new best as a cold study waits
    (its axes), one proposal in four is uniform over the untried set: the random start-up a warm
    study skipped, spent only where the source's region has stopped paying."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        axes = sum(1 for n in pool.levels if n > 1)
        if prior is not None and len(prior) and own.measured and own.since_best >= axes and own.since_best % 4 == 3:
            rows = pool.random_untried(1, self.rng)
            if len(rows):
                return int(rows[0])
        return super().propose(pool, ordered, prior)


class ScoredMoves(P.ParzenSearch):
    """A plateau's one-axis move is the feasible move of the first base with any that the density
    ratio (``l / g * p_ok``, the same as a ratio turn's) scores best, rather than one on an axis
    drawn uniformly: with 13 axes and about eight moves in a 25-trial warm start, the one move that
    mattered (FC1 on an H200: ``L2_PROMO`` 0 -> 256) was missed on one of six runs."""

    def propose(self, pool, ordered, prior=None):
        plain, self._made = P.Mixture, []

        def make(*args, **kwargs):
            mixture = plain(*args, **kwargs)
            self._made.append(mixture)
            return mixture

        with patched("Mixture", make):
            return super().propose(pool, ordered, prior)

    def _local_move(self, pool, own, ordered, log_feasible):
        good, bad = self._made[0], self._made[1]
        for index in P._bases(own, len(pool.levels)):
            per_axis = [np.asarray(m) for m in pool.steps(own.measured[index], ordered) if m]
            if not per_axis:
                continue
            rows = np.concatenate(per_axis)
            codes = pool.codes[rows]
            feasible = log_feasible(codes)
            keep = feasible > np.log(0.5)
            if not keep.any():
                continue
            rows, codes = rows[keep], codes[keep]
            score = good.log_density(codes, self.rng) - bad.log_density(codes, self.rng) + feasible[keep]
            top = np.flatnonzero(score >= score.max() - 1e-12)
            return int(rows[top[self.rng.integers(len(top))]])
        return None


class FewestMovedAxis(P.ParzenSearch):
    """A plateau's move is drawn on an axis along which the fewest configs one move from its base
    were tried (each axis once before any twice, as coordinate descent sweeps), not on any axis
    with a move: eight draws from 13 axes with replacement leave about seven of them untried."""

    def _local_move(self, pool, own, ordered, log_feasible):
        tried = [a for a in (own.array("measured"), own.array("slower"), own.array("failed")) if len(a)]
        tried = np.concatenate(tried) if tried else np.empty((0, len(pool.levels)), dtype=np.int32)
        for index in P._bases(own, len(pool.levels)):
            base = np.asarray(own.measured[index])
            per_axis = pool.steps(base, ordered)
            moves = []
            for axis, rows in enumerate(per_axis):
                if rows:
                    rows = np.asarray(rows)
                    ok = log_feasible(pool.codes[rows]) > np.log(0.5)
                    if ok.any():
                        moves.append((axis, rows[ok]))
            if not moves:
                continue
            differs = tried != base
            single = differs.sum(axis=1) == 1
            spent = np.bincount(np.argmax(differs[single], axis=1), minlength=len(pool.levels)) if single.any() \
                else np.zeros(len(pool.levels), dtype=np.int64)
            fewest = min(spent[axis] for axis, _ in moves)
            choice = [rows for axis, rows in moves if spent[axis] == fewest]
            rows = choice[self.rng.integers(len(choice))]
            return int(rows[self.rng.integers(len(rows))])
        return None


class WarmAllMoves(P.ParzenSearch):
    """With a prior, every proposal after the queue is a plateau move while one is left (not every
    other), so a 25-trial warm run on FC1's 13 axes can try most axes' moves from its best. Measured
    within the noise (results_sampler.md, twelfth session): not kept."""

    share = 1  # of every ``period`` proposals, this many are moves

    period = 1

    def propose(self, pool, ordered, prior=None):
        since = pool.observations.since_best
        if prior is not None and len(prior):
            # the parent moves when since_best >= patience and (since_best - patience) is even
            self.patience = since if since % self.period < self.share else since + 1
        else:
            self.patience = None
        return super().propose(pool, ordered, prior)


class WarmTwoThirdsMoves(WarmAllMoves):
    """The same, two proposals in three."""

    share, period = 2, 3


class _StepsVariant(P.ParzenSearch):
    """A change to ``Pool.steps`` (a plateau's moves) for the duration of a local move: ``moves`` wraps the
    pool's own."""

    def moves(self, pool, steps):
        raise NotImplementedError

    def _local_move(self, pool, own, ordered, log_feasible):
        pool.steps = self.moves(pool, pool.steps)
        try:
            return super()._local_move(pool, own, ordered, log_feasible)
        finally:
            del pool.steps


class AxisLineMoves(_StepsVariant):
    """On an ordered axis whose near moves are spent (every level within ``REACH`` tried levels of the
    base), a plateau's move may go to any untried level of that axis: a climb whose axis rises and falls
    along its length (dedispersion W7800: ``block_size_y`` 40-120 slower than 32, 128 faster) is not
    held at the nearest levels. Kept: ``Pool.steps`` does this now, so on the current tree this class
    proposes as the default does; on an older one it is the change as measured."""

    def moves(self, pool, steps):

        def line_steps(code, ordered_axes):
            moves = steps(code, ordered_axes)
            base = [int(i) for i in code]
            for axis, levels in enumerate(pool.levels):
                if moves[axis] or not ordered_axes[axis] or levels < 3:
                    continue
                here, far = base[axis], []
                for level in range(levels):
                    base[axis] = level
                    row = pool._row_of.get(tuple(base))
                    if level != here and row is not None and not pool.tried[row]:
                        far.append(row)
                base[axis] = here
                moves[axis] = far
            return moves

        return line_steps


def _queue_in_all(top):
    """A warm start queues ``top`` configs in all, shared among its sources (the first ones take the
    remainder), not ``top`` of each: five sources and a 25-trial budget leave the search no trial."""
    from tuner.run import runner
    from tuner.search.warm_start import MARK

    plain = getattr(runner, "plain_warm_start", runner.warm_start)
    runner.plain_warm_start = plain

    def in_all(study, space, sources, _top, tiered=False):
        if study.user_attrs.get(MARK):
            return None
        queued = []
        for index, source in enumerate(sources):
            share = top // len(sources) + (index < top % len(sources))
            if share:
                study.set_user_attr(MARK, [])  # one source at a time
                queued += plain(study, space, [source], share, tiered) or []
        study.set_user_attr(MARK, [source.name for source in sources])
        return queued

    runner.warm_start = in_all


class QueueFiveInAll(_WarmStartPatched):
    """Five configs queued in all, whatever the number of sources. Kept: ``warm_start`` does this now
    (and passes on the share a source too short to fill leaves), so on the current tree this class
    queues as the default does wherever every source has five valid configs."""

    PATCH = staticmethod(lambda: _queue_in_all(5))


class PatternMoves(P.ParzenSearch):
    """Right after a new best, the next proposal continues the change that found it (Hooke and Jeeves'
    pattern move): the new best plus its difference from the previous best, in level steps along each
    ordered axis that changed (clipped to the axis; unordered axes as in the new best). Where that config
    is invalid or tried, one more level along one of those axes, drawn at random. After the start-up only
    (or with a prior): a difference between two uniform draws says nothing of a direction."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        started = len(own) + len(pool.in_flight_codes())
        has_prior = prior is not None and len(prior)
        if own.since_best == 0 and len(own.measured) >= 2 and (has_prior or started >= self.n_startup_trials):
            row = self._pattern(pool, own, ordered)
            if row is not None:
                return row
        return super().propose(pool, ordered, prior)

    def _pattern(self, pool, own, ordered):
        values = own.array("values")
        best = int(np.argmin(values))
        if best == 0:
            return None
        previous = int(np.argmin(values[:best]))
        codes = own.array("measured")
        new, old = codes[best].astype(int), codes[previous].astype(int)
        levels = np.asarray(pool.levels)
        delta = np.where(np.asarray(ordered, dtype=bool), new - old, 0)
        if not delta.any():
            return None
        target = np.clip(new + delta, 0, levels - 1)
        row = pool.row(target)
        if row is not None and not pool.tried[row] and (target != new).any():
            return int(row)
        singles = []
        for axis in np.flatnonzero(delta):
            step = new.copy()
            step[axis] = new[axis] + np.sign(delta[axis])
            if 0 <= step[axis] < levels[axis]:
                r = pool.row(step)
                if r is not None and not pool.tried[r]:
                    singles.append(int(r))
        return singles[self.rng.integers(len(singles))] if singles else None


def alignment_levels(pool):
    """(axis, table, n) for each ordered axis of positive integers, not all powers of two, whose values
    divide by different powers of two (a block size in steps of 16): ``table`` maps the axis's level to
    the rank of its value's largest power-of-two divisor among the ``n`` distinct ones."""
    extra = []
    if hasattr(P, "alignments"):  # the product's own (stepped axes): not added twice
        done = {a.axis for a in P.alignments(tuple(tuple(v) for v in pool.values))}
    else:
        done = set()
    for axis, values in enumerate(pool.values):
        if axis in done:
            continue
        if len(values) < 4 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            continue
        if all(v & (v - 1) == 0 for v in values):
            continue  # powers of two: the divisor is the value itself, the axis's order says it
        exponents = np.array([(v & -v).bit_length() - 1 for v in values])
        distinct = np.unique(exponents)
        if len(distinct) >= 2:
            extra.append((axis, np.searchsorted(distinct, exponents), len(distinct)))
    return extra


class Aligned(P.ParzenSearch):
    """The densities also see, for each axis of ``alignment_levels``, how many times two divides its
    value, as one more ordinal axis: a block size fast at multiples of a wavefront (64 on AMD) is
    near 128 and 256 there, not 48 and 80."""

    def propose(self, pool, ordered, prior=None):
        extra = alignment_levels(pool)
        if not extra:
            return super().propose(pool, ordered, prior)

        def recode(codes):
            codes = np.asarray(codes)
            return np.column_stack([codes, *(table[codes[:, axis]] for axis, table, _ in extra)]).astype(codes.dtype)

        class AlignedMixture(ORIG_MIXTURE):
            def __init__(self, levels, ordered_, sharp=False):
                super().__init__(list(levels) + [n for *_, n in extra], list(ordered_) + [True] * len(extra), sharp)

            def add(self, codes, weight=1.0):
                if len(codes):
                    codes = recode(np.asarray(codes))
                super().add(codes, weight)

            def log_density(self, candidates, rng):
                return super().log_density(recode(candidates), rng)

        with patched("Mixture", AlignedMixture):
            return super().propose(pool, ordered, prior)


class AlignedSteps(Aligned):
    """As ``Aligned``, only on axes whose values share a factor (block sizes in steps of 8 or 16): a
    count of 1, 2, 3, 4 (a tile) has no alignment to keep. Kept: ``parzen.alignments`` does this now, so
    on the current tree this class proposes as the default does; on an older one it is the change as
    measured."""

    def propose(self, pool, ordered, prior=None):
        import math as _math

        def stepped():
            return [(a, t, n) for a, t, n in plain_alignment_levels(pool) if _math.gcd(*pool.values[a]) >= 2]

        with patched_alignment(stepped):
            return super().propose(pool, ordered, prior)


plain_alignment_levels = alignment_levels


@contextlib.contextmanager
def patched_alignment(function):
    global alignment_levels
    old = alignment_levels
    alignment_levels = lambda pool: function()  # noqa: E731
    try:
        yield
    finally:
        alignment_levels = old


class RepairedMoves(_StepsVariant):
    """A plateau's move along an ordered axis toward an end where no level is valid with the base's other
    values (a tile of 1 only with a stride of 0) goes to the nearest level there anyway, with one other
    axis moved as little as makes it valid: constraints couple axes, and the climb otherwise never
    crosses them. Kept: ``Pool.steps`` does this now; on the current tree this class adds each such
    move a second time (run it on an older one: the change as measured)."""

    def moves(self, pool, steps):

        def repaired_steps(code, ordered_axes):
            moves = steps(code, ordered_axes)
            base = [int(i) for i in code]
            for axis, levels in enumerate(pool.levels):
                if not ordered_axes[axis] or levels < 2:
                    continue
                here = base[axis]
                for direction in (range(here - 1, -1, -1), range(here + 1, levels)):
                    if not len(direction):
                        continue
                    if any(pool.row(base[:axis] + [level] + base[axis + 1:]) is not None for level in direction):
                        continue  # a valid level that way: the move passes invalid ones as before
                    target = direction[0]
                    best, best_distance = None, None
                    for other, other_levels in enumerate(pool.levels):
                        if other == axis:
                            continue
                        for level in range(other_levels):
                            if level == base[other]:
                                continue
                            code2 = list(base)
                            code2[axis], code2[other] = target, level
                            row = pool.row(code2)
                            if row is None or pool.tried[row]:
                                continue
                            distance = abs(level - base[other]) if ordered_axes[other] else 1
                            if best_distance is None or distance < best_distance:
                                best, best_distance = row, distance
                    if best is not None:
                        moves[axis] = list(moves[axis]) + [best]
            return moves

        return repaired_steps


class RepairedOnMovingAxes(_StepsVariant):
    """``Pool.steps``'s repaired moves (one other axis changed to make the level valid) only on an axis that
    has a one-axis move too: an axis whose only moves are repaired ones is not drawn, so the draw among the
    axes is the one before repaired moves. (On a tree without them, this class proposes as the default.)"""

    def moves(self, pool, steps):

        def filtered(code, ordered_axes):
            moves = steps(code, ordered_axes)
            base = np.asarray(code)
            for axis, rows in enumerate(moves):
                if rows and all(int((pool.codes[row] != base).sum()) == 2 for row in rows):
                    moves[axis] = []
            return moves

        return filtered


class MeaningfulStall(P.ParzenSearch):
    """(Not kept.) A plateau counts from the last new best that beat the best before it by more than ``EPSILON`` (a
    relative margin): a basin of many near-equal configs, each a hair faster than the last, is a plateau.
    The count is the default's (every observation since the best) or, where longer, the measured configs
    since the last such best."""

    EPSILON = 0.01

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        kept = own.since_best
        best, last = math.inf, 0
        for index, value in enumerate(own.values):
            if value < best * (1 - self.EPSILON):
                last = index
            best = min(best, value)
        own.since_best = max(kept, len(own.values) - 1 - last) if own.values else kept
        try:
            return super().propose(pool, ordered, prior)
        finally:
            own.since_best = kept


class MeaningfulStallTwo(MeaningfulStall):
    EPSILON = 0.02


class WarmUniformFew(WarmUniform):
    """(Not kept.) With a prior, three proposals uniform over the untried configs (the 7th, 11th and 15th to
    start): a few of the cold start-up's spread-out trials, so a flat target's better region outside the
    source's is met."""

    def uniform_at(self, started: int) -> bool:
        return started in (6, 10, 14)


class GeometricSteps(_StepsVariant):
    """(Not kept.) On an ordered axis of eight or more positive integers, a plateau's move may also go to twice or half the
    base's value (a block size of 32 -> 64 or 16), as well as to the nearest untried levels: hardware sizes scale by
    factors, and a 29-level axis in steps of 8 takes a climb six moves from 32 to 128."""

    def moves(self, pool, steps):
        def wrapped(code, ordered):
            moves = steps(code, ordered)
            base = [int(i) for i in code]
            for axis, values in enumerate(pool.values):
                if not ordered[axis] or len(values) < 8 or not all(isinstance(v, int) and v > 0 for v in values):
                    continue
                here = values[base[axis]]
                extra = []
                for target in (here * 2, here // 2 if here % 2 == 0 else None):
                    if target in values:
                        row = pool._row_of.get(tuple(base[:axis] + [values.index(target)] + base[axis + 1:]))
                        if row is not None and not pool.tried[row] and row not in moves[axis]:
                            extra.append(row)
                if extra:
                    moves[axis] = list(moves[axis]) + extra
            return moves
        return wrapped


class PriorNoFailures(P.ParzenSearch):
    """A prior's failed configs join neither the feasibility model nor the rest (g): a config that failed on
    another GPU (a launch over that GPU's limits) may run here, fastest of all (convolution MI250X's optimum
    region, use_shmem 0 with tiles of 4, fails on the A100)."""

    _kept: tuple = (None, None)

    def propose(self, pool, ordered, prior=None):
        if prior is not None and prior.failed:
            if self._kept[0] is not prior or len(self._kept[1]) != len(prior) - len(prior.failed):
                from tuner.search.pool import Observations
                self._kept = (prior, Observations(measured=prior.measured, values=prior.values, weights=prior.weights,
                                                  slower=prior.slower))
            prior = self._kept[1]
        return super().propose(pool, ordered, prior)


class MovesIgnorePriorFailures(PriorNoFailures):
    """As :class:`PriorNoFailures` on the proposals that are a plateau's one-axis moves only (a warm run makes
    one every other proposal): the move's "likely to work" filter then reads this study's failures alone, while
    the density ratio keeps the prior's failures."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        if prior is not None and own.measured and own.since_best % 2 == 0 and self.patience is None:
            return PriorNoFailures.propose(self, pool, ordered, prior)
        return P.ParzenSearch.propose(self, pool, ordered, prior)


class NeglectedSlice(P.ParzenSearch):
    """On a stall, one plateau proposal in four is the density ratio's choice within the least explored
    value of a low-cardinality axis (2 .. ``max_levels`` levels: a code path such as ``use_shmem``),
    while that value holds under ``ratio`` of its share of the valid configs in trials. What the model
    learnt of the other axes (tile shapes, block sizes) is carried into a code path the search starved."""

    max_levels = 4
    ratio = 0.5
    every = 4

    def neglected(self, pool):
        own = pool.observations
        tried = [a for a in (own.array("measured"), own.array("slower"), own.array("failed")) if len(a)]
        codes = np.concatenate(tried)
        found, lowest = None, self.ratio
        for axis, n in enumerate(pool.levels):
            if not 2 <= n <= self.max_levels:
                continue
            space_share = np.bincount(pool.codes[:, axis], minlength=n) / pool.size
            trial_share = np.bincount(codes[:, axis], minlength=n) / len(codes)
            for level in range(n):
                if space_share[level] > 0 and trial_share[level] / space_share[level] < lowest:
                    lowest, found = trial_share[level] / space_share[level], (axis, level)
        return found

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        n_axes = sum(1 for n in pool.levels if n > 1)
        if own.measured and own.since_best >= n_axes and (own.since_best - n_axes) % self.every == 1:
            found = self.neglected(pool)
            if found is not None:
                axis, level = found
                inside = np.flatnonzero((pool.codes[:, axis] == level) & (pool.tried == 0))
                if len(inside):
                    one_step = pool.neighbours

                    def random_untried(k, rng):
                        return rng.choice(inside, size=min(k, len(inside)), replace=False)

                    def neighbours(code):
                        rows = one_step(code)
                        return rows[pool.codes[rows, axis] == level]

                    pool.random_untried, pool.neighbours = random_untried, neighbours
                    try:
                        return super().propose(pool, ordered, prior)
                    finally:
                        del pool.random_untried, pool.neighbours
        return super().propose(pool, ordered, prior)


class NeglectedSliceBinary(NeglectedSlice):
    max_levels = 2


class NeglectedSliceRare(NeglectedSlice):
    ratio = 0.3


class WarmFlatUniform(WarmUniform):
    """(Not kept.) With a prior, every other proposal is uniform while the study's own measured
    configs all run within ``FLAT`` of each other: on a flat target the source's favoured region is
    no better than any other, and a uniform trial there risks little (the best found stays), while
    the cold start-up's spread finds the target's own best region."""

    FLAT = 0.10

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        started = len(own) + len(pool.in_flight_codes())
        values = own.values
        flat = len(values) >= 4 and not own.failed and max(values) <= (1 + self.FLAT) * min(values)
        if prior is not None and len(prior) and flat and started % 2 == 1:
            rows = pool.random_untried(1, self.rng)
            return int(rows[0]) if len(rows) else None
        return P.ParzenSearch.propose(self, pool, ordered, prior)


class SharpCategories(P.ParzenSearch):
    """(Not kept.) An axis counted as same / different (a code path's flag, a method) gets the narrowest kernel in
    every density, as the feasibility model's: a config on another code path counts little towards this one's
    density, so the densities model each code path's shapes apart instead of pooling them."""

    def propose(self, pool, ordered, prior=None):
        original = P._kernel

        def kernel(levels, is_ordered, shrink):
            return original(levels, is_ordered, shrink if is_ordered else 0.0)

        P._kernel = kernel
        try:
            return super().propose(pool, ordered, prior)
        finally:
            P._kernel = original


class CodePaths(P.ParzenSearch):
    """(Not kept as is: the product's rule is ``Pool.other_code_paths``.) On a plateau's move turn, first the
    incumbent's shape on another code path: the configs equal to the best one on every axis of three or more levels
    and differing from it in two or more two-level axes (flags
    such as use_shmem and read_only), untried and valid, one at random. The one-axis moves flip one flag at a time,
    and a code path two flags away whose other neighbours are slow is never reached by them, though the shape the
    search learnt is often good there too (convolution A4000, sixteenth session)."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        patience = 0 if prior is not None and len(prior) else sum(1 for n in pool.levels if n > 1)
        if own.measured and own.since_best >= patience and (own.since_best - patience) % 2 == 0:
            rows = self._other_paths(pool, own)
            if rows:
                return rows[self.rng.integers(len(rows))]
        return super().propose(pool, ordered, prior)

    @staticmethod
    def _other_paths(pool, own):
        flags = [axis for axis, n in enumerate(pool.levels) if n == 2]
        if len(flags) < 2:
            return []
        best = own.by_value()[0][0]
        rows = []
        for combination in itertools.product((0, 1), repeat=len(flags)):
            code = best.copy()
            code[flags] = combination
            if int((code != best).sum()) >= 2:
                row = pool.row(code)
                if row is not None and not pool.tried[row]:
                    rows.append(row)
        return rows


class CodePathsTwo(CodePaths):
    """(Not kept.) :class:`CodePaths` with exactly two flags changed (fewer trials where there are four flags)."""

    @staticmethod
    def _other_paths(pool, own):
        return [row for row in CodePaths._other_paths(pool, own)
                if int((pool.codes[row] != own.by_value()[0][0]).sum()) == 2]


class CodePathsOnce(CodePaths):
    """(Not kept.) :class:`CodePaths`, a code path visited again only once the incumbent is 5 % faster than at
    its last visit (a basin of near-equal configs, each a hair faster, would send its shape to every path each time)."""

    IMPROVEMENT = 0.05

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._visited = {}  # code path -> the incumbent's value when the incumbent's shape was last tried there

    def _other_paths(self, pool, own):
        flags = [axis for axis, n in enumerate(pool.levels) if n == 2]
        rows = CodePaths._other_paths(pool, own)
        best = own.best
        kept = [row for row in rows
                if best < (1 - self.IMPROVEMENT) * self._visited.get(tuple(pool.codes[row][flags]), math.inf)]
        if not kept:
            return []
        row = kept[self.rng.integers(len(kept))]
        self._visited[tuple(pool.codes[row][flags])] = best
        return [row]


class CodePathsStarved(CodePathsTwo):
    """(Not kept.) :class:`CodePathsTwo`, only into a code path whose share of the tried configs is below half its
    share of the valid ones (a path the search has starved; one it measured as much as its size is known)."""

    def _other_paths(self, pool, own):
        rows = CodePathsTwo._other_paths(pool, own)
        if not rows:
            return rows
        flags = [axis for axis, n in enumerate(pool.levels) if n == 2]
        weights = 1 << np.arange(len(flags))
        path_of = pool.codes[:, flags] @ weights
        valid = np.bincount(path_of, minlength=1 << len(flags)) / pool.size
        tried = np.bincount(path_of[pool.tried > 0], minlength=1 << len(flags)) / max(1, pool.n_tried)
        return [row for row in rows if tried[path_of[row]] < 0.5 * valid[path_of[row]]]


def two_flag_flips(pool, code) -> list[int]:
    """Untried valid rows equal to ``code`` but in exactly two of its two-level axes: its shape on another code path."""
    flags = [axis for axis, n in enumerate(pool.levels) if n == 2]
    rows = []
    for first, second in itertools.combinations(flags, 2):
        other = np.array(code, copy=True)
        other[[first, second]] = 1 - other[[first, second]]
        row = pool.row(other)
        if row is not None and not pool.tried[row]:
            rows.append(row)
    return rows


class CodePathsAxis(P.ParzenSearch):
    """(Not kept.) A plateau move may also flip two two-level axes of its base at once (the base's shape on another
    code path): one more option beside the axes, drawn as often as any axis, feasibility-checked as the others."""

    def _local_move(self, pool, own, ordered, log_feasible):
        steps = pool.steps
        pool.steps = lambda code, ordered_: steps(code, ordered_) + [two_flag_flips(pool, code)]
        try:
            return super()._local_move(pool, own, ordered, log_feasible)
        finally:
            del pool.steps


class NeutralSlope(P.ParzenSearch):
    """A base one axis from a faster config by 2 % or less is not on a slope (a neighbour within the
    measurements' noise is a step along a ridge, not down a slope)."""

    tolerance = 0.02

    def propose(self, pool, ordered, prior=None):
        original = P._bases
        with patched("_bases", lambda obs, n_axes: original(obs, n_axes, level_within=self.tolerance)):
            return super().propose(pool, ordered, prior)


class NeutralSlopeFive(NeutralSlope):
    tolerance = 0.05


class StarvedHalf(P.ParzenSearch):
    """On a plateau, every other density-ratio turn searches the half of the space (one flag at one
    value) that the study has tried least for its size, by a density ratio fitted on that half's own
    observations: a code path whose good shapes differ from the others' (``use_shmem 0``: one-row
    blocks, tall tiles) is searched by its own best configs, not by the shapes the other paths favour."""

    starved_below = 0.5

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        patience = sum(1 for n in pool.levels if n > 1)
        if (prior is None and own.measured and own.since_best >= patience
                and (own.since_best - patience) % 4 == 3):
            row = self._half_search(pool, own, ordered)
            if row is not None:
                return row
        return super().propose(pool, ordered, prior)

    def _half_search(self, pool, own, ordered):
        if not pool.flags:
            return None
        tried = [a for a in (own.array("measured"), own.array("slower"), own.array("failed")) if len(a)]
        tried = np.concatenate(tried)
        found = None
        for f in pool.flags:
            for level in (0, 1):
                ratio = (tried[:, f] == level).mean() / max((pool.codes[:, f] == level).mean(), 1e-12)
                if ratio < self.starved_below and (found is None or ratio < found[0]):
                    found = (ratio, f, level)
        if found is None:
            return None
        _, f, level = found
        sample = pool.random_untried(4 * self.sample_size, self.rng)
        sample = sample[pool.codes[sample, f] == level]
        if not len(sample):
            return None
        codes, values, _ = own.by_value()
        inside = codes[:, f] == level
        if inside.sum() < 4:
            return int(sample[self.rng.integers(len(sample))])
        sub = P.Observations()
        for code, value in zip(codes[inside], values[inside]):
            sub.add(code, float(value))
        aligned = P.alignments(tuple(tuple(v) for v in pool.values))
        good, bad = P.Mixture(pool.levels, ordered, aligned=aligned), P.Mixture(pool.levels, ordered, aligned=aligned)
        best = P._split([sub], [1.0], good, bad)
        candidates = [sample] + [pool.neighbours(code) for code in best]
        rows = np.unique(np.concatenate(candidates)).astype(np.int64)
        rows = rows[pool.codes[rows, f] == level]
        codes_ = pool.codes[rows]
        score = good.log_density(codes_, self.rng) - bad.log_density(codes_, self.rng)
        top = np.flatnonzero(score >= score.max() - 1e-12)
        return int(rows[top[self.rng.integers(len(top))]])


class SharpFlags(P.ParzenSearch):
    """The good and rest densities nearly conditional on the flags (axes of values 0 and 1): their
    same / different kernel narrowed to ``flag_width`` levels, so the shapes good on one code path
    say little of those on another (the convolution paths without shared memory favour other shapes)."""

    flag_width = 0.3

    def propose(self, pool, ordered, prior=None):
        flags, other = set(pool.flags), math.exp(-0.5 / self.flag_width ** 2)
        narrow = np.array([[1.0, other], [other, 1.0]]) / (1.0 + other)

        class FlagMixture(ORIG_MIXTURE):
            def axis_kernel(self, axis, shrink):
                if self.sharp or axis not in flags:
                    return super().axis_kernel(axis, shrink)
                return narrow

        with patched("Mixture", FlagMixture):
            return super().propose(pool, ordered, prior)


class SharpFlagsHalf(SharpFlags):
    flag_width = 0.5


def reshapes(pool, code):
    """Untried valid rows that change two numeric axes of ``code`` and keep their product (a thread
    block of 16 x 32 reshaped to 4 x 128, a tile of 1 x 4 to 2 x 2): the moves that keep the work
    per block or per thread while changing its shape, which no one-axis move makes."""
    numeric = [a for a, values in enumerate(pool.values)
               if len(values) >= 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values)]
    base = [int(i) for i in code]
    rows = []
    for a, b in itertools.combinations(numeric, 2):
        product = pool.values[a][base[a]] * pool.values[b][base[b]]
        level_b = {v: i for i, v in enumerate(pool.values[b])}
        for level_a, va in enumerate(pool.values[a]):
            if level_a == base[a]:
                continue
            other = level_b.get(product / va)  # 128 / 4 == 32.0 finds the level of 32
            if other is None or other == base[b]:
                continue
            moved = list(base)
            moved[a], moved[b] = level_a, other
            row = pool._row_of.get(tuple(moved))
            if row is not None and not pool.tried[row]:
                rows.append(row)
    return rows


class ReshapeMoves(_StepsVariant):
    """A plateau's moves also hold the base's reshapes (:func:`reshapes`), as one more axis of moves."""

    def moves(self, pool, steps):

        def with_reshapes(code, ordered_axes):
            return steps(code, ordered_axes) + [reshapes(pool, code)]

        return with_reshapes


class ReshapeCandidates(P.ParzenSearch):
    """The density ratio's candidates also hold the reshapes of the good configs (beside their one-axis
    neighbours)."""

    def propose(self, pool, ordered, prior=None):
        plain = pool.neighbours

        def neighbours(code):
            extra = np.array(reshapes(pool, code), dtype=np.int64)
            return np.concatenate([plain(code), extra]) if len(extra) else plain(code)

        pool.neighbours = neighbours
        try:
            return super().propose(pool, ordered, prior)
        finally:
            del pool.neighbours


class ReshapeBoth(ReshapeMoves, ReshapeCandidates):
    """Both of the above."""


class DirectionalSteps(_StepsVariant):
    """On an ordered axis, the move on the side where it passes a tried level slower than the base is
    dropped while the other side's move passes no tried level: a climb goes on the way the values
    rise (a tile of 3 beat the tile of 4 above it; the next move is to 2, not past 4 to 5)."""

    def moves(self, pool, steps):
        own = pool.observations
        value = {tuple(int(i) for i in c): v for c, v in zip(own.measured, own.values, strict=True)}
        value.update((tuple(int(i) for i in c), math.inf) for c in own.slower + own.failed)

        def directional(code, ordered_axes):
            moves = steps(code, ordered_axes)
            base = [int(i) for i in code]
            at_base = value.get(tuple(base), math.inf)
            for axis, rows in enumerate(moves):
                if not ordered_axes[axis] or len(rows) < 2:
                    continue
                here, sides = base[axis], {-1: [], 1: []}
                for row in rows:
                    level = int(pool.codes[row][axis])
                    sides[1 if level > here else -1].append((row, level))

                def passes(level, worse_only):
                    step = 1 if level > here else -1
                    for between in range(here + step, level, step):
                        probe = list(base)
                        probe[axis] = between
                        seen = value.get(tuple(probe))
                        if seen is not None and (not worse_only or seen > at_base):
                            return True
                    return False

                for side in (-1, 1):
                    mine, other = sides[side], sides[-side]
                    if mine and other and all(passes(level, True) for _, level in mine) \
                            and any(not passes(level, False) for _, level in other):
                        moves[axis] = [row for row, _ in other]
                        break
            return moves

        return directional


def forced_axes(pool, codes):
    """Per row of ``codes`` and axis: whether the constraints leave that axis no other valid level with
    the row's other values (a tile of 1 runs only with a stride of 0). Kept per config on the pool."""
    cache = pool.__dict__.setdefault("_forced", {})
    out = np.zeros(codes.shape, dtype=bool)
    for i, code in enumerate(codes):
        key = tuple(int(c) for c in code)
        mask = cache.get(key)
        if mask is None:
            base, mask = list(key), np.ones(len(key), dtype=bool)
            for axis, levels in enumerate(pool.levels):
                here = base[axis]
                for level in range(levels):
                    if level != here:
                        base[axis] = level
                        if tuple(base) in pool._row_of:
                            mask[axis] = False
                            break
                base[axis] = here
            cache[key] = mask
        out[i] = mask
    return out


def log_density_adjusted(mix, candidates, rng, adjust):
    """Mixture.log_density with each axis's factor (candidates x kept observations) passed through
    ``adjust(axis, levels, factor, keep)`` first (``keep``: the observations kept, None for all)."""
    uniform = float(np.exp(-np.sum(np.log(mix.levels))))
    candidates = mix._with_alignments(candidates)
    weights = mix.weights
    total = 1.0 + weights.sum()
    keep = None
    if len(weights) > P.MAX_COMPONENTS:
        keep = rng.choice(len(weights), size=P.MAX_COMPONENTS, replace=False)
        weights = weights[keep] * (weights.sum() / weights[keep].sum())
    obs = mix._rows(keep)
    shrink = P.scott_shrink(max(1, round(mix.mass)), mix.levels)
    product = None
    for axis, n in enumerate(mix.levels):
        if n == 1:
            continue
        factor = mix.axis_kernel(axis, shrink)[:, obs[:, axis]].take(candidates[:, axis], axis=0)
        adjust(axis, n, factor, obs, keep)
        product = factor if product is None else product * factor
    if product is None:
        product = np.ones((len(candidates), len(obs)))
    return np.log((uniform + product @ weights) / total)


def _log_density_forced_uniform(pool):
    """Mixture.log_density where an observation's forced axes (:func:`forced_axes`) weigh every level
    alike: the value there was the constraint's choice, not the speed's."""

    def log_density(self, candidates, rng):
        if self.sharp or not len(self):
            return ORIG_LOG_DENSITY(self, candidates, rng)
        n_axes = len(pool.levels)

        def flatten_forced(axis, n, factor, obs, keep):
            column = axis if axis < n_axes else self.aligned[axis - n_axes].axis
            forced = forced_axes(pool, obs[:, :n_axes])[:, column]
            if forced.any():
                factor[:, forced] = 1.0 / n

        return log_density_adjusted(self, candidates, rng, flatten_forced)

    return log_density


ORIG_LOG_DENSITY = P.Mixture.log_density


class ForcedAxes(P.ParzenSearch):
    """An observation says nothing of an axis whose value the constraints forced (no other level is
    valid with its other values): l and g weigh every level of that axis alike for it. Aimed at the
    transfer pair below cold (dedispersion MI250X -> A6000: the source's winners have tiles of 1, so
    ``tile_stride_y`` 0, and the prior favoured stride 0 where the target's optimum has 1)."""

    only_with_prior = False

    def propose(self, pool, ordered, prior=None):
        if self.only_with_prior and (prior is None or not len(prior)):
            return super().propose(pool, ordered, prior)
        P.Mixture.log_density = _log_density_forced_uniform(pool)
        try:
            return super().propose(pool, ordered, prior)
        finally:
            P.Mixture.log_density = ORIG_LOG_DENSITY


class ForcedAxesWarm(ForcedAxes):
    """:class:`ForcedAxes` in warm runs only (a cold run is the default's)."""

    only_with_prior = True


class WarmCodePaths(P.ParzenSearch):
    """A warm run's plateau moves try the best config's shape on a code path two flags away, as a cold
    run's do (the default leaves them out with a prior: the source measured the paths, but on its GPU)."""

    def propose(self, pool, ordered, prior=None):
        if prior is None or not len(prior):
            return super().propose(pool, ordered, prior)
        own = pool.observations
        if own.measured and own.since_best >= 0 and own.since_best % 2 == 0:
            row = self._other_code_path(pool, own)
            if row is not None:
                return row
        return super().propose(pool, ordered, prior)


def axis_agreement(prior, own, levels, ordered, shrink_to=5):
    """Per axis: how well the prior's one-axis density ratio (its good configs' levels against its
    rest's) ranks the study's own measured configs, Spearman's correlation clipped at 0 and shrunk
    towards 1 as if ``shrink_to`` configs agreed fully; 1 where the study has too little to judge."""
    weights = np.ones(len(levels))
    codes, values = own.array("measured"), own.array("values")
    if len(values) < 5:
        return weights
    prior_codes, prior_values, prior_counts = prior.by_value()
    n_good = P.default_gamma(len(prior_values))
    shrink = P.scott_shrink(max(1, round(float(prior_counts.sum()))), levels)
    for axis, n in enumerate(levels):
        if n < 2 or len(np.unique(codes[:, axis])) < 2:
            continue
        kernel = P._kernel(n, bool(ordered[axis]), shrink)
        good = np.bincount(prior_codes[:n_good, axis], prior_counts[:n_good], minlength=n)
        rest = np.bincount(prior_codes[n_good:, axis], prior_counts[n_good:], minlength=n)
        score = np.log((1 / n + kernel @ good) / (1 + good.sum())) - np.log((1 / n + kernel @ rest) / (1 + rest.sum()))
        rho = spearman(score[codes[:, axis]], -values)
        weights[axis] = (len(values) * max(rho, 0.0) + shrink_to) / (len(values) + shrink_to)
    return weights


class _AxisWeightedMixture(P.Mixture):
    """A Mixture whose prior rows (``PRIOR_ARRAYS``) weigh each axis's kernel by ``AXIS_WEIGHTS``: a
    weight of w keeps w of the kernel and spreads the rest evenly over the axis's levels."""

    PRIOR_ARRAYS = ()
    AXIS_WEIGHTS = None

    def add(self, codes, weight=1.0):
        super().add(codes, weight)
        if len(codes):
            self.__dict__.setdefault("_is_prior", []).append(
                any(np.shares_memory(np.asarray(codes), p) for p in self.PRIOR_ARRAYS if p.size))

    def log_density(self, candidates, rng):
        flags = self.__dict__.get("_is_prior", [])
        if self.sharp or self.AXIS_WEIGHTS is None or not any(flags) or not len(self):
            return super().log_density(candidates, rng)
        is_prior = np.concatenate([np.full(len(c), f) for c, f in zip(self._codes, flags, strict=True)])
        axis_weights = np.concatenate([self.AXIS_WEIGHTS, [self.AXIS_WEIGHTS[a.axis] for a in self.aligned]])

        def flatten_prior(axis, n, factor, obs, keep):
            w = axis_weights[axis]
            if w < 1:
                prior = is_prior if keep is None else is_prior[keep]
                factor[:, prior] = w * factor[:, prior] + (1 - w) / n

        return log_density_adjusted(self, candidates, rng, flatten_prior)


class AxisAgreement(P.ParzenSearch):
    """The prior down-weighted per axis: on an axis where its one-axis density ratio ranks the study's
    own configs no better than chance (:func:`axis_agreement`), its kernels flatten towards uniform."""

    def propose(self, pool, ordered, prior=None):
        if prior is None or not len(prior):
            return super().propose(pool, ordered, prior)
        _AxisWeightedMixture.AXIS_WEIGHTS = axis_agreement(prior, pool.observations, pool.levels, list(ordered))
        _AxisWeightedMixture.PRIOR_ARRAYS = tuple(
            a for a in (prior.by_value()[0], prior.array("slower"), prior.array("failed"), prior.array("measured")) if a.ndim == 2)
        with patched("Mixture", _AxisWeightedMixture):
            try:
                return super().propose(pool, ordered, prior)
            finally:
                _AxisWeightedMixture.AXIS_WEIGHTS, _AxisWeightedMixture.PRIOR_ARRAYS = None, ()


class Gamma15(P.ParzenSearch):
    """The good set is the best 15 % of the measured configs (Optuna's default: 10 %), at most 25."""

    share = 0.15

    def propose(self, pool, ordered, prior=None):
        with patched("default_gamma", lambda n, share=0.1: min(int(math.ceil(self.share * n)), 25)):
            return super().propose(pool, ordered, prior)


class PlateauGamma(Gamma15):
    """On a plateau (as many trials without a new best as there are axes), the good set is the best
    ``share`` of the measured configs: a stalled search widens what it calls good, so configs near the
    runners-up weigh in (our FC1: the optimum is one axis from a 0.92 config, three from the 0.94 best)."""

    share = 0.2

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        if own.measured and own.since_best >= sum(1 for n in pool.levels if n > 1):
            return super().propose(pool, ordered, prior)
        return P.ParzenSearch.propose(self, pool, ordered, prior)


class PlateauGamma15(PlateauGamma):
    share = 0.15


class PlateauGammaLong(PlateauGamma):
    """:class:`PlateauGamma` after a plateau three times as long (three times the axes)."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        if own.measured and own.since_best >= 3 * sum(1 for n in pool.levels if n > 1):
            return Gamma15.propose(self, pool, ordered, prior)
        return P.ParzenSearch.propose(self, pool, ordered, prior)


class NarrowGood(P.ParzenSearch):
    """The search before its good set widened on a long plateau (``WIDE_GOOD_SHARE``): a tenth of the
    measured configs throughout. Pair it with the default to measure that rule."""

    def propose(self, pool, ordered, prior=None):
        with patched("WIDE_GOOD_SHARE", 0.1):
            return super().propose(pool, ordered, prior)


_ORIG_SPLIT = P._split


class _Blocks:
    """Records the blocks a split adds to a mixture, to be moved and then added as they were."""

    def __init__(self):
        self.blocks = []

    def add(self, codes, weight=1.0):
        self.blocks.append([codes, weight])


def _split_own_wider(own_share):
    """``_split`` whose first source (the study's own trials) contributes at least its best ``own_share``
    (at most 25) to the good set, the other sources as ranked together as before: the default split,
    then the own rest block's best rows moved to the own good block."""

    def split(sources, weights, good, bad, share=P.GOOD_SHARE):
        good_blocks, bad_blocks = _Blocks(), _Blocks()
        own_good = _ORIG_SPLIT(sources, weights, good_blocks, bad_blocks, share)
        own = sources[0]
        if own.values:  # the split adds each source's slower and failed to bad, then per source good / rest
            good_block, rest_block = good_blocks.blocks[0], bad_blocks.blocks[2 * len(sources)]
            wide = min(P.default_gamma(len(own.values), own_share), len(own.values))
            codes, _, counts = own.by_value()
            counts = weights[0] * counts
            if wide > len(own_good):
                good_block[:] = codes[:wide], counts[:wide]
                rest_block[:] = codes[wide:], counts[wide:]
                own_good = list(codes[:wide])
        for mixture, recorded in ((good, good_blocks), (bad, bad_blocks)):
            for codes, weight in recorded.blocks:
                mixture.add(codes, weight)
        return own_good

    return split


class WarmWidenOwn(P.ParzenSearch):
    """A warm run on a long plateau (``WIDEN_AFTER`` times the axes without a new best) widens its good set
    with its own runners-up only: its own best fifth joins the good set whatever the source's configs rank
    (the cold rule, without the source's runners-up that cost FC2 transferred when widened with them)."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        n_axes = sum(1 for n in pool.levels if n > 1)
        if prior is not None and len(prior) and own.measured and own.since_best >= P.WIDEN_AFTER * n_axes:
            with patched("_split", _split_own_wider(P.WIDE_GOOD_SHARE)):
                return super().propose(pool, ordered, prior)
        return super().propose(pool, ordered, prior)


class WarmStallCold(P.ParzenSearch):
    """A warm run on a long plateau (``after`` times the axes without a new best) proposes as a cold run
    does: without the prior, so with the cold run's plateau rules (code-path moves, a wider good set)."""

    after = P.WIDEN_AFTER

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        n_axes = sum(1 for n in pool.levels if n > 1)
        if prior is not None and own.measured and own.since_best >= self.after * n_axes:
            prior = None
        return super().propose(pool, ordered, prior)


class WarmStallColdOne(WarmStallCold):
    after = 1


class WarmStallRestart(WarmStallCold):
    """:class:`WarmStallCold`, and the first ``uniform`` proposals of the stall uniform over the untried set:
    the random start-up the warm run skipped, spent once the source's region has stopped paying."""

    uniform = 5

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        after = self.after * sum(1 for n in pool.levels if n > 1)
        if prior is not None and len(prior) and own.measured and after <= own.since_best < after + self.uniform:
            rows = pool.random_untried(1, self.rng)
            if len(rows):
                return int(rows[0])
        return super().propose(pool, ordered, prior)


class WarmStallColdTwo(WarmStallCold):
    after = 2


class FlatFlags(AxisAgreement):
    """(Twenty-third session.) The prior's kernels on the 0 / 1 flags (``Pool.flags``: code paths such as shared
    memory for A or B) keep only ``FLAG_WEIGHT`` of their mass, the rest spread evenly: which code path is fastest
    is what changes most between GPUs (and vendors), while a tile shape carries."""

    FLAG_WEIGHT = 0.5

    def propose(self, pool, ordered, prior=None):
        if prior is None or not len(prior) or not pool.flags:
            return P.ParzenSearch.propose(self, pool, ordered, prior)
        weights = np.ones(len(pool.levels))
        weights[pool.flags] = self.FLAG_WEIGHT
        _AxisWeightedMixture.AXIS_WEIGHTS = weights
        _AxisWeightedMixture.PRIOR_ARRAYS = tuple(
            a for a in (prior.by_value()[0], prior.array("slower"), prior.array("failed"), prior.array("measured")) if a.ndim == 2)
        with patched("Mixture", _AxisWeightedMixture):
            try:
                return P.ParzenSearch.propose(self, pool, ordered, prior)
            finally:
                _AxisWeightedMixture.AXIS_WEIGHTS, _AxisWeightedMixture.PRIOR_ARRAYS = None, ()


class FlatFlagsZero(FlatFlags):
    FLAG_WEIGHT = 0.0


def _split_diverse(limit):
    """``_split`` for a cold run whose good set takes the measured configs best first, but skips one within one
    axis of ``limit`` or more configs already good: a dense basin of near-equal configs fills a few places of the
    good set, not all, and the next basins' best take the others."""
    def split(sources, weights, good, bad, share=P.GOOD_SHARE):
        if len(sources) != 1:
            return _ORIG_SPLIT(sources, weights, good, bad, share)
        obs, weight = sources[0], weights[0]
        bad.add(obs.array("slower"), weight)
        bad.add(obs.array("failed"), weight)
        if not obs.values:
            return []
        codes, values, counts = obs.by_value()
        n_good = P.default_gamma(len(values), share)
        chosen, rest = [], []
        for i in range(len(codes)):
            if len(chosen) < n_good:
                near = int(((codes[chosen] != codes[i]).sum(axis=1) <= 1).sum()) if chosen else 0
                if near < limit:
                    chosen.append(i)
                    continue
            rest.append(i)
        chosen_, rest_ = np.array(chosen, dtype=np.int64), np.array(rest, dtype=np.int64)
        good.add(codes[chosen_], weight * counts[chosen_])
        bad.add(codes[rest_], weight * counts[rest_])
        return list(codes[chosen_])
    return split


class DiverseGood(P.ParzenSearch):
    """(Twenty-third session.) A cold run's good set spread over basins (:func:`_split_diverse`, at most 2 good
    configs within one axis of a third)."""

    LIMIT = 2

    def propose(self, pool, ordered, prior=None):
        if prior is not None and len(prior):
            return super().propose(pool, ordered, prior)
        with patched("_split", _split_diverse(self.LIMIT)):
            return super().propose(pool, ordered, prior)


class DiverseGoodOne(DiverseGood):
    LIMIT = 1


class LeastTriedAxis(P.ParzenSearch):
    """(Twenty-third session.) A plateau move's axis is the one along which the fewest configs one axis from the
    base are measured (ties drawn), not one drawn among all with a move: a climb sweeps the axes as coordinate
    descent does, so in a warm run's 20 proposals after its queue every axis of 13 gets a move (GEMM A6000 -> W7800:
    `SB` never did)."""

    def _local_move(self, pool, own, ordered, log_feasible):
        bases = P._bases(own, len(pool.levels))
        start = 0
        while start < len(bases):
            group = bases[start:2 * start + 1]
            start = 2 * start + 1
            per_base = [[(axis, np.asarray(m)) for axis, m in enumerate(pool.steps(own.measured[index], ordered)) if m]
                        for index in group]
            flat = [m for moves in per_base for _, m in moves]
            if not flat:
                continue
            feasible = log_feasible(pool.codes[np.concatenate(flat)]) > math.log(0.5)
            masks = iter(np.split(feasible, np.cumsum([len(m) for m in flat])[:-1]))
            for index, moves in zip(group, per_base):
                kept = [(axis, m) for axis, m in ((axis, m[next(masks)]) for axis, m in moves) if len(m)]
                if kept:
                    base = own.measured[index]
                    tried = np.array(own.measured + own.slower + own.failed)
                    differs = tried != base
                    one_away = differs.sum(axis=1) == 1
                    counts = np.array([int((one_away & differs[:, axis]).sum()) for axis, _ in kept])
                    least = np.flatnonzero(counts == counts.min())
                    _, axis_moves = kept[least[self.rng.integers(len(least))]]
                    return int(axis_moves[self.rng.integers(len(axis_moves))])
        return None


class LeastTriedAxisWarm(LeastTriedAxis):
    """:class:`LeastTriedAxis` in warm runs only (a cold run's moves as the default's)."""

    def propose(self, pool, ordered, prior=None):
        self._warm = prior is not None and len(prior) > 0
        return super().propose(pool, ordered, prior)

    def _local_move(self, pool, own, ordered, log_feasible):
        if getattr(self, "_warm", False):
            return super()._local_move(pool, own, ordered, log_feasible)
        return P.ParzenSearch._local_move(self, pool, own, ordered, log_feasible)


def _off_beside_a_progression(values) -> bool:
    """0 beside two or more positive values in a geometric progression (1, 2, 4, 8; 0, 8, 32): an 'off'
    (no unrolling, no batching), not one step below the smallest value."""
    if 0 not in values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return False
    positive = sorted(v for v in values if v > 0)
    return len(positive) >= 2 and len({b / a for a, b in zip(positive, positive[1:])}) == 1


class ZeroApart(P.ParzenSearch):
    """An axis of 0 beside a geometric progression counts only same / different (twenty-fourth session)."""

    def propose(self, pool, ordered, prior=None):
        ordered = [o and not _off_beside_a_progression(list(v)) for o, v in zip(ordered, pool.values)]
        return super().propose(pool, ordered, prior)


class WarmProbe(P.ParzenSearch):
    """A warm run tests its prior against chance (twenty-fourth session): right after the queue (``PROBE_AT``
    started trials) come ``PROBES`` uniform proposals; if one of them runs faster than every config the
    prior led to, the prior is dropped and the study goes on as a cold one (its own trials as the start-up)."""

    PROBE_AT = 5
    PROBES = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.probes: list[bytes] = []
        self.dropped = False

    def propose(self, pool, ordered, prior=None):
        if prior is None or not len(prior):
            return super().propose(pool, ordered, prior)
        own = pool.observations
        started = len(own) + len(pool.in_flight_codes())
        if self.PROBE_AT <= started < self.PROBE_AT + self.PROBES:
            rows = pool.random_untried(1, self.rng)
            if len(rows):
                self.probes.append(pool.codes[int(rows[0])].tobytes())
                return int(rows[0])
        if not self.dropped and started >= self.PROBE_AT + self.PROBES and own.measured:
            codes, values = own.array("measured"), own.array("values")
            probe = np.array([c.tobytes() in self.probes for c in codes])
            if probe.any() and (~probe).any() and values[probe].min() < values[~probe].min():
                self.dropped = True
        return super().propose(pool, ordered, None if self.dropped else prior)
