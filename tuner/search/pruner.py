"""Stop a measurement early when it is clearly slower than the best so far.

The worker reports block medians as intermediate values (step = block index). Once a
few blocks are in, a config whose running median exceeds the best finished time by
more than ``margin`` cannot win: finishing it would only spend GPU time.
"""

from __future__ import annotations

import statistics

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from tuner.store import optuna_private


class MarginPruner(BasePruner):
    def __init__(self, margin: float = 0.10, min_blocks: int = 2):
        self.margin = margin
        self.min_blocks = min_blocks
        self._best_cache: tuple[int, float | None] = (-1, None)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        values = list(trial.intermediate_values.values())
        if len(values) < self.min_blocks:
            return False
        best = self._best(study)
        if best is None:
            return False
        return statistics.median(values) > best * (1.0 + self.margin)

    def _best(self, study: optuna.Study) -> float | None:
        complete = optuna_private.cached_trials(study, (TrialState.COMPLETE,))
        if len(complete) == self._best_cache[0]:
            return self._best_cache[1]
        best = min((t.value for t in complete if t.value is not None), default=None)
        self._best_cache = (len(complete), best)
        return best
