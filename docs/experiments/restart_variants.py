"""Restarts in the TuRBO manner for the Parzen search (experiments, not product code).

When the search stops improving (no new best in the last ``k`` observations, ``k`` = the larger of
twice the axes and half the observations since the last restart), the model restarts: the
good / bad split, the plateau rule and the random start-up see only the observations made since
(a fresh search, its own start-up of ``RESTART_STARTUP`` uniform trials), while every failure
stays in the feasibility model. ``OLD_WEIGHT``: the observations before the restart join the bad
set with this weight (a push away from the explored basins) or, None, are forgotten. The
incumbent is never lost: the fraction measured is of the best found by the whole run.

    cd docs/experiments && PYTHONPATH=. python3 sampler_sim.py --seeds 20 --budget 100 --paired restart_variants:NAME
"""
import contextlib

import tuner.search.parzen as P
from tuner.search.pool import Observations

ORIG_SPLIT = P._split


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def window(full: Observations, mark: tuple[int, int]) -> Observations:
    """The measured and slower observations since ``mark``; every failure."""
    sub = Observations()
    for code, value in zip(full.measured[mark[0]:], full.values[mark[0]:], strict=True):
        sub.add(code, value)
    for code in full.slower[mark[1]:]:
        sub.add(code, None)
    sub.failed = list(full.failed)
    return sub


class Restart(P.ParzenSearch):
    OLD_WEIGHT: float | None = 0.3
    RESTART_STARTUP = 5
    #: after a restart, the search runs without the prior too
    DROP_PRIOR = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.mark = (0, 0)  # (measured, slower) observations before the last restart
        self.restarts = 0

    def stalled(self, pool, ordered, full, sub, dims) -> bool:
        """Whether to restart now (``sub``: the observations since the last restart)."""
        since = len(sub.measured) + len(sub.slower)
        return bool(full.measured) and full.since_best >= max(2 * dims, since // 2) \
            and sub.since_best >= max(2 * dims, since // 2) and since >= 4 * dims

    def propose(self, pool, ordered, prior=None):
        full = pool.observations
        dims = sum(1 for n in pool.levels if n > 1)
        sub = window(full, self.mark) if self.mark != (0, 0) else full
        if self.stalled(pool, ordered, full, sub, dims):
            self.mark = (len(full.measured), len(full.slower))
            self.restarts += 1
        if self.mark == (0, 0):
            return super().propose(pool, ordered, prior)
        sub = window(full, self.mark)
        old_good = full.measured[: self.mark[0]] + full.slower[: self.mark[1]]

        def split(sources, weights, good, bad, *share):
            if self.OLD_WEIGHT is not None:
                bad.add(old_good, self.OLD_WEIGHT)
            return ORIG_SPLIT(sources, weights, good, bad, *share)

        with patched(pool, "observations", sub), patched(P, "_split", split), \
                patched(self, "n_startup_trials", len(sub.failed) + self.RESTART_STARTUP):
            return super().propose(pool, ordered, None if self.DROP_PRIOR else prior)


class RestartForget(Restart):
    OLD_WEIGHT = None


class RestartHeavy(Restart):
    OLD_WEIGHT = 1.0


class RestartMix(Restart):
    """After the first restart, proposals alternate between the restarted search and the default
    one over the whole history (the continuation that a plain restart gives up)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.turn = 0

    def propose(self, pool, ordered, prior=None):
        self.turn += 1
        if self.mark != (0, 0) and self.turn % 2:
            return P.ParzenSearch.propose(self, pool, ordered, prior)
        return super().propose(pool, ordered, prior)


class WarmRestart(Restart):
    """A warm run (with a prior) that has gone ``AFTER`` times its axes without a new best (``WIDEN_AFTER``)
    restarts as a cold search: no prior, ``RESTART_STARTUP`` uniform trials, the good / rest split over the
    trials since (the earlier ones in the rest at ``OLD_WEIGHT``); later stalls restart as :class:`Restart`
    does. A run without a prior is the default's."""

    AFTER = P.WIDEN_AFTER

    def propose(self, pool, ordered, prior=None):
        if prior is None or not len(prior):
            return P.ParzenSearch.propose(self, pool, ordered, prior)
        full = pool.observations
        if self.mark == (0, 0):
            dims = sum(1 for n in pool.levels if n > 1)
            if not (full.measured and full.since_best >= self.AFTER * dims):
                return P.ParzenSearch.propose(self, pool, ordered, prior)
            self.mark = (len(full.measured), len(full.slower))
            self.restarts += 1
        return super().propose(pool, ordered, None)


class WarmRestartForget(WarmRestart):
    OLD_WEIGHT = None


class WarmRestartMix(WarmRestartForget):
    """:class:`WarmRestartForget`, its proposals after the restart in turn with the continuation over the
    whole history without the prior (the climb a restart gives up where it still pays)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.turn = 0

    def propose(self, pool, ordered, prior=None):
        if self.mark != (0, 0) and prior is not None:
            self.turn += 1
            if self.turn % 2:
                return P.ParzenSearch.propose(self, pool, ordered, None)
        return super().propose(pool, ordered, prior)


class WarmRestartLate(WarmRestartForget):
    """:class:`WarmRestartForget` after a plateau of five times the axes: a climb that still pays has more
    time to show it."""

    AFTER = 5


class WarmRestartSpent(WarmRestartForget):
    """:class:`WarmRestartForget` only once the plateau is long (``AFTER`` times the axes) and the best
    config's one-axis moves are spent (:meth:`~tuner.search.pool.Pool.steps` has none): the climb from
    it has nowhere left to go, so a restart gives up nothing the continuation would still find."""

    def propose(self, pool, ordered, prior=None):
        if prior is not None and len(prior) and self.mark == (0, 0):
            if pool.observations.measured and not spent(pool, ordered):
                return P.ParzenSearch.propose(self, pool, ordered, prior)
        return super().propose(pool, ordered, prior)


def spent(pool, ordered, obs=None) -> bool:
    """Whether the best config of ``obs`` (the pool's observations) has no one-axis move left
    (:meth:`~tuner.search.pool.Pool.steps`)."""
    obs = pool.observations if obs is None else obs
    return bool(obs.measured) and not any(pool.steps(obs.measured[int(obs.order()[0])], ordered))


class RestartSpent(Restart):
    """:class:`Restart` (cold and warm runs alike) only when the plateau is ``WIDEN_AFTER`` times the axes long
    and the best config's one-axis moves are spent: a search at the top of a basin it has climbed out, not one
    still climbing. Each restart waits for the same of the search since it."""

    DROP_PRIOR = True

    def stalled(self, pool, ordered, full, sub, dims) -> bool:
        return bool(sub.measured) and sub.since_best >= P.WIDEN_AFTER * dims and spent(pool, ordered, sub)


class RestartSpentForget(RestartSpent):
    OLD_WEIGHT = None


class WarmStallColdSpent(P.ParzenSearch):
    """A warm run on a long plateau (``WIDEN_AFTER`` times the axes) whose best config's one-axis moves are spent
    proposes as a cold run does (without the prior: the cold run's plateau rules), its history kept."""

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        n_axes = sum(1 for n in pool.levels if n > 1)
        if prior is not None and own.measured and own.since_best >= P.WIDEN_AFTER * n_axes and spent(pool, ordered):
            prior = None
        return super().propose(pool, ordered, prior)
