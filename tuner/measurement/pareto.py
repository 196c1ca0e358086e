"""More than one objective: time and energy per launch, and the Pareto front of a study.

``[search] objectives = ["time", "energy"]`` makes the study an Optuna multi-objective study
(both minimised; metric names ``ratio``/``ms`` and ``energy_mj``). A trial's values are its
time value (the paired ratio, or ms) and the candidate's energy per launch in mJ
(:mod:`tuner.device.energy`). A trial whose energy could not be measured is PRUNED with status
``no_energy`` and the energy note as its reason, never COMPLETE with a made-up value.

The sampler: our valid-only, never-repeat wrapper (:class:`tuner.search.sampler.ValidOnlySampler`)
around Optuna's multivariate TPE, which handles several objectives; each proposal is moved to
the nearest valid, untried config as for ``sampler = "gp"``. The pruner (a test on time alone)
is off: a slower config may still be on the front by its energy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.samplers import BaseSampler, TPESampler
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from tuner.errors import UserError
from tuner.measurement.value import Measurement

OBJECTIVES = ("time", "energy")
ENERGY_METRIC = "energy_mj"
ENERGY_ATTR = "energy_mj_per_launch"
#: [measure] energy_s used when energy is an objective and none was set
DEFAULT_ENERGY_S = 1.0
NO_ENERGY = "no_energy"


def check_objectives(objectives: Sequence[str], where: str) -> list[str]:
    """``objectives`` as given, or a :class:`UserError`: known names, each once, time first."""
    names = list(objectives)
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or not names or len(set(names)) != len(names) or names[0] != "time":
        raise UserError(f"{where}: objectives must be [\"time\"] or [\"time\", \"energy\"], got {names!r}")
    return names


def multi(objectives: Sequence[str]) -> bool:
    return len(objectives) > 1


def is_multi(study: optuna.Study) -> bool:
    return len(study.directions) > 1


def metric_names(time_metric: str, objectives: Sequence[str]) -> list[str]:
    return [time_metric] + [ENERGY_METRIC for name in objectives[1:] if name == "energy"]


def values(measurement: Measurement, objectives: Sequence[str]) -> list[float] | None:
    """The trial's values (time, energy); None when energy is an objective and was not measured."""
    time_value = measurement.objective
    if time_value is None:
        return None
    out = [time_value]
    if "energy" in objectives:
        energy = measurement.extra.get(ENERGY_ATTR)
        if energy is None:
            return None
        out.append(float(energy))
    return out


def sampler(seed: int | None, n_startup_trials: int = 10) -> BaseSampler:
    """Optuna's multivariate TPE: it models several objectives (its proposals are made valid and untried by our wrapper)."""
    import warnings

    with warnings.catch_warnings():  # multivariate is "experimental" in Optuna's words since 2.2
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return TPESampler(seed=seed, multivariate=True, n_startup_trials=n_startup_trials)


def front(study: optuna.Study) -> list[FrozenTrial]:
    """The Pareto front of the COMPLETE trials, one trial per config, by time."""
    seen: set[tuple] = set()
    out = []
    for t in sorted(study.best_trials, key=lambda t: (t.values[0], t.number)):
        key = tuple(sorted(t.params.items()))
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def front_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per front config: trial, time value, ms, energy per launch (mJ and its error), flags."""
    rows = []
    for t in front(study):
        a = t.user_attrs
        rows.append({"trial": t.number, "time": t.values[0], study.metric_names[0] if study.metric_names else "value": t.values[0],
                     "ms": a.get("ms"), "energy_mj": t.values[1], "energy_mj_err": a.get("energy_mj_per_launch_err"),
                     "power_w": a.get("power_w"), "flags": a.get("flags", ""), "params": dict(t.params)})
    return rows


def trade_off(rows: list[dict[str, Any]]) -> list[str]:
    """What the time-optimal and the energy-optimal configs of the front give up, in words."""
    if not rows:
        return ["front: none yet (no trial completed with both time and energy)"]
    # the time objective is the stored value (a paired ratio where there is one), not the raw ms, which drift
    fastest = min(rows, key=lambda r: (r["time"], r["trial"]))
    frugal = min(rows, key=lambda r: (r["energy_mj"], r["trial"]))
    lines = [f"time-optimal: trial {fastest['trial']}, {_ms(fastest)}, {fastest['energy_mj'] / 1e3:.4g} J per launch",
             f"energy-optimal: trial {frugal['trial']}, {_ms(frugal)}, {frugal['energy_mj'] / 1e3:.4g} J per launch"]
    if fastest["trial"] != frugal["trial"]:
        lines.append(f"the energy-optimal config is {100 * (frugal['time'] / fastest['time'] - 1):+.2f} % in time and "
                     f"{100 * (frugal['energy_mj'] / fastest['energy_mj'] - 1):+.2f} % in energy per launch "
                     "against the time-optimal one")
    return lines


def print_front(study: optuna.Study, as_json: bool = False) -> int:
    """``tuner best --pareto``: the front (a table, or JSON) and what its two ends give up."""
    import json

    from tuner.table import render

    if not is_multi(study):
        raise UserError(f"study {study.study_name!r} has one objective (time): --pareto needs a study run with "
                        '[search] objectives = ["time", "energy"]')
    rows = front_rows(study)
    if as_json:
        print(json.dumps({"study": study.study_name, "metrics": study.metric_names, "front": rows,
                          "trade_off": trade_off(rows)}))
        return 0
    metric = (study.metric_names or ["value"])[0]
    ratio = metric != "ms"  # a paired study's value is a ratio: its ms beside it; else the value is the ms
    print(render(["trial", metric, *(["ms"] if ratio else []), "mJ/launch", "+-", "W", "flags"],
                 [[r["trial"], f"{r[metric]:.4f}", *([_num(r["ms"])] if ratio else []), f"{r['energy_mj']:.4g}",
                   _num(r["energy_mj_err"]), _num(r["power_w"]), r["flags"]] for r in rows]))
    for line in trade_off(rows):
        print(line)
    return 0


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.4g}"


def _ms(row: dict[str, Any]) -> str:
    return f"{row['ms']:.4g} ms" if row["ms"] is not None else "? ms"


def directions(objectives: Sequence[str]) -> list[StudyDirection]:
    return [StudyDirection.MINIMIZE] * len(objectives)
