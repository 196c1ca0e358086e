"""Paired timing statistics: a candidate's launches alternate with a reference's.

A GPU under a power cap moves its clock with load and history, so a raw time says as
much about the GPU's state as about the kernel. Two launches back to back run under
(nearly) the same clock: the ratio candidate / reference of one pair cancels it. A
measurement is a series of pair ratios; its value is their median, with a
distribution-free confidence interval (order statistics of the binomial), and it stops
when the interval is narrow enough or when a sign test says the candidate is slower
than the incumbent. Nothing here touches a GPU: the worker feeds it times.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

#: default half-width of the ratio's 95 % interval, relative to the ratio
CI_TARGET = 0.0025
#: the fewest values whose median has a 95 % interval: the range of 6 misses it with probability 2 / 2**6
#: (3 %), of 5 with 6 % (a confirmation of fewer rounds could not tell a winner from chance)
FEWEST_FOR_INTERVAL = 6


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of ``values`` (binomial order statistics).

    The interval between the j-th and (n-j+1)-th smallest values covers the true median
    with probability >= ``confidence`` for any continuous distribution. With fewer than
    six values no such interval exists at 95 %: the whole range is returned.
    """
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("no values")
    alpha = 1.0 - confidence
    # largest j with P(Bin(n, 1/2) <= j - 1) <= alpha / 2
    cumulative, j, term, total = 0, 0, 1, 2**n  # whole numbers: 2.0**n overflows past 1023 values
    for k in range(n):
        cumulative += term  # comb(n, k)
        term = term * (n - k) // (k + 1)
        if cumulative / total > alpha / 2:
            break
        j = k + 1
    if j == 0:
        return data[0], data[-1]
    return data[j - 1], data[n - j]


def sign_test_greater(values: Sequence[float], threshold: float) -> float:
    """One-sided p-value of "the median of ``values`` is above ``threshold``" (sign test).

    Under the null (median <= threshold) each value exceeds the threshold with
    probability <= 1/2; ties carry no information and are dropped.
    """
    above = sum(1 for v in values if v > threshold)
    below = sum(1 for v in values if v < threshold)
    n = above + below
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(above, n + 1)) / 2.0**n


def blocks_differ(blocks: Sequence[Sequence[float]], alpha: float = 0.01) -> bool:
    """Kruskal-Wallis: do the blocks come from distributions with different medians?

    (H with mid-ranks, against chi-square with len(blocks) - 1 degrees of freedom.)
    """
    values = sorted((v, i) for i, block in enumerate(blocks) for v in block)
    n = len(values)
    rank_sums = [0.0] * len(blocks)
    start = 0
    while start < n:  # mid-ranks over runs of equal values
        end = start
        while end + 1 < n and values[end + 1][0] == values[start][0]:
            end += 1
        for k in range(start, end + 1):
            rank_sums[values[k][1]] += (start + end) / 2 + 1
        start = end + 1
    h = 12.0 / (n * (n + 1)) * sum(r * r / len(b) for r, b in zip(rank_sums, blocks, strict=True)) - 3 * (n + 1)
    return _chi2_sf(h, len(blocks) - 1) < alpha


def _chi2_sf(x: float, df: int) -> float:
    """P(chi2(df) > x): the regularized upper incomplete gamma Q(df/2, x/2), by its series."""
    if x <= 0:
        return 1.0
    a, z = df / 2, x / 2
    term = total = 1.0 / a
    for k in range(1, 500):
        term *= z / (a + k)
        total += term
        if term < total * 1e-15:
            break
    return max(0.0, 1.0 - math.exp(a * math.log(z) - z - math.lgamma(a)) * total)


@dataclass
class PairSeries:
    """Candidate and reference times of alternating launches, pair by pair."""

    candidate_ms: list[float] = field(default_factory=list)
    reference_ms: list[float] = field(default_factory=list)

    def add(self, candidate_ms: float, reference_ms: float) -> float:
        self.candidate_ms.append(candidate_ms)
        self.reference_ms.append(reference_ms)
        return candidate_ms / reference_ms

    @property
    def ratios(self) -> list[float]:
        return [c / r for c, r in zip(self.candidate_ms, self.reference_ms, strict=True)]

    def __len__(self) -> int:
        return len(self.candidate_ms)

    def summary(self, block: int | None = None) -> RatioSummary:
        """Median ratio and its interval. The pair-level interval takes the pairs as independent,
        but pairs of one block share the GPU's state of the moment: with ``block``, when the
        blocks differ (a rank test, :func:`blocks_differ`) the interval also covers the block
        medians' interval (their range under six blocks), as a state that moved during the
        trial makes it."""
        ratios = self.ratios
        summary = RatioSummary.of(ratios, statistics.median(self.candidate_ms), statistics.median(self.reference_ms))
        if not block or len(ratios) < 2 * block:
            return summary
        blocks = [ratios[i:i + block] for i in range(0, len(ratios) - block + 1, block)]
        if not blocks_differ(blocks):
            return summary
        block_lo, block_hi = median_ci([statistics.median(b) for b in blocks])
        return dataclasses.replace(summary, lo=min(summary.lo, block_lo), hi=max(summary.hi, block_hi))


@dataclass(frozen=True)
class RatioSummary:
    ratio: float
    lo: float
    hi: float
    pairs: int
    candidate_ms: float | None = None
    reference_ms: float | None = None

    @classmethod
    def of(cls, ratios: Sequence[float], candidate_ms: float | None = None, reference_ms: float | None = None) -> RatioSummary:
        lo, hi = median_ci(ratios)
        return cls(statistics.median(ratios), lo, hi, len(ratios), candidate_ms, reference_ms)

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the ratio (0.0025 = +-0.25 %)."""
        return (self.hi - self.lo) / 2.0 / self.ratio


@dataclass(frozen=True)
class StopRule:
    """When a paired measurement has seen enough pairs."""

    ci_target: float = CI_TARGET
    min_pairs: int = 20
    max_pairs: int = 200

    def done(self, summary: RatioSummary) -> bool:
        if summary.pairs >= self.max_pairs:
            return True
        return summary.pairs >= self.min_pairs and summary.half_width <= self.ci_target


@dataclass(frozen=True)
class SlowerTest:
    """Stop a candidate once a sign test says its median ratio is above the incumbent's.

    The test is repeated after every block, so ``alpha`` is small: a candidate that
    ties with the incumbent is rarely stopped, one a few per cent slower is stopped
    after a few dozen pairs.
    """

    alpha: float = 1e-3
    min_pairs: int = 10

    def slower(self, ratios: Sequence[float], incumbent: float | None) -> bool:
        if incumbent is None or len(ratios) < self.min_pairs:
            return False
        return sign_test_greater(ratios, incumbent) < self.alpha


@dataclass(frozen=True)
class Standing:
    """One config's place in a confirmation: its ratio to the winner, and whether it ties."""

    index: int
    to_reference: RatioSummary
    to_winner: RatioSummary
    tied: bool


def rank_interleaved(times: Sequence[Sequence[float]], reference: int = 0, tolerance: float = CI_TARGET) -> list[Standing]:
    """Rank configs timed round-robin: ``times[r][i]`` is config i's time in round r.

    Each config's ratio to ``reference`` and to the winner (the lowest median ratio) is
    taken round by round. A config is tied with the winner when its interval of the
    ratio to the winner reaches 1 + ``tolerance``: not provably slower by more than the
    resolution the study measures to. (Within one session the intervals get narrower
    than that, but another session's clocks shift such small differences.) Sorted best
    first; the reference itself is left out.
    """
    n = len(times[0])
    per_round = [[row[i] / row[reference] for row in times] for i in range(n)]
    candidates = [i for i in range(n) if i != reference]
    summaries = {i: RatioSummary.of(per_round[i], statistics.median(r[i] for r in times),
                                    statistics.median(r[reference] for r in times)) for i in candidates}
    winner = min(candidates, key=lambda i: summaries[i].ratio)
    standings = []
    for i in candidates:
        to_winner = RatioSummary.of([row[i] / row[winner] for row in times])
        standings.append(Standing(i, summaries[i], to_winner, tied=to_winner.lo <= 1.0 + tolerance))
    return sorted(standings, key=lambda s: s.to_reference.ratio)
