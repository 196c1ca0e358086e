"""Trial results: the one "best trial" rule (the results table joins it in this module)."""

from __future__ import annotations

from typing import Iterable

from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState


def best_trial(trials: Iterable[FrozenTrial], direction: StudyDirection = StudyDirection.MINIMIZE,
               phase: str | None = None) -> FrozenTrial | None:
    """The COMPLETE trial with the best value (of ``phase`` when given), or None.

    Only COMPLETE trials carry a value: every failure is PRUNED or FAIL, so an invalid
    configuration is never best.
    """
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
            and (phase is None or t.user_attrs.get("phase") == phase)]
    if not done:
        return None
    pick = max if direction == StudyDirection.MAXIMIZE else min
    return pick(done, key=lambda t: t.value)
