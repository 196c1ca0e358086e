"""A study's start configs (``[search] start``, ``[measure] reference``) as full parameter sets.

Kept apart from the warm start's queue (:mod:`tuner.search.warm_start`, which needs Optuna) so that a
run can name its reference before Optuna is imported (:mod:`tuner.run.early_build`).
"""

from __future__ import annotations

from tuner.errors import UserError
from tuner.search.space import Space


def hold_tier2(space: Space, params: dict, tiered: bool) -> dict:
    """In tiered mode tier 1 is searched first with tier 2 at its defaults."""
    return {**params, **{a: space.defaults()[a] for a in space.tier2}} if tiered else params


def start_params(space: Space, configs: list[dict], tiered: bool = False, what: str = "[search.start] #{}") -> list[dict]:
    """The study file's ``[search] start`` configs as full parameter sets (axes not named take the
    defaults; in tiered mode tier 2 is held at its defaults); one the constraint model rejects is an
    error that says why (``what`` names it), raised before anything is stored."""
    out = []
    for i, config in enumerate(configs):
        params = hold_tier2(space, {**space.defaults(), **config}, tiered)
        reason = space.check(params)
        if reason:
            raise UserError(f"{what.format(i + 1)} is rejected by the kernel's constraint model: {reason}")
        out.append(params)
    return out
