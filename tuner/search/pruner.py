"""Stop a measurement early when it is clearly slower than the best so far.

The worker reports block medians as intermediate values (step = block index). Once a
few blocks are in, a config whose running median exceeds the best finished time by
more than ``margin`` cannot win: finishing it would only spend GPU time.
"""

from __future__ import annotations

import math
import statistics
import time

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

#: how old the best value a pruning decision reads may be: it is asked after every block on the
#: measuring thread, and an older best only prunes less
BEST_MAX_AGE_S = 0.5


class BestValue:
    """A study's best complete value, read from the storage at most every ``max_age_s``.

    Not from Optuna's per-trial snapshot of the trials (``study._get_trials(use_cache=True)``):
    that snapshot belongs to the thread that asks, and the measuring thread's own would be filled
    once and never renewed, so it would never see a trial finish."""

    def __init__(self, max_age_s: float = BEST_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._read_at = -math.inf
        self._best: float | None = None

    def __call__(self, study: optuna.Study) -> float | None:
        if time.monotonic() - self._read_at > self.max_age_s:
            complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            self._best = min((t.value for t in complete if t.value is not None), default=None)
            self._read_at = time.monotonic()
        return self._best


class MarginPruner(BasePruner):
    def __init__(self, margin: float = 0.10, min_blocks: int = 2, best_max_age_s: float = BEST_MAX_AGE_S):
        self.margin = margin
        self.min_blocks = min_blocks
        self._best = BestValue(best_max_age_s)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        values = list(trial.intermediate_values.values())
        if len(values) < self.min_blocks:
            return False
        best = self._best(study)
        if best is None:
            return False
        return statistics.median(values) > best * (1.0 + self.margin)
