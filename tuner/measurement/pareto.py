"""More than one objective: time and energy per launch, and the Pareto front of a study.

``[search] objectives = ["time", "energy"]`` makes the study an Optuna multi-objective study
(both minimised). A trial's values are its time value and its energy value, each relative to the
reference where the study's time is (metric names ``ratio`` and ``energy_ratio``: the candidate's
energy per launch over the reference's, both run alone in the same trial, so a study resumed on
another GPU or another day stays comparable, as its time does), else absolute (``ms`` and
``energy_mj``, the energy per launch in mJ; also the metric of studies made before the ratio).
Energy per launch in mJ is stored on every trial either way (:mod:`tuner.device.energy`). A trial
whose energy could not be measured is PRUNED with status ``no_energy`` and the energy note as its
reason, never COMPLETE with a made-up value.

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
ENERGY_RATIO = "energy_ratio"
ENERGY_MJ = "energy_mj"
#: the trial attribute holding each energy metric's value
ENERGY_ATTRS = {ENERGY_RATIO: "energy_ratio", ENERGY_MJ: "energy_mj_per_launch"}
#: [measure] energy_s used when energy is an objective and none was set
DEFAULT_ENERGY_S = 1.0
NO_ENERGY = "no_energy"


def check_objectives(objectives: Sequence[str], where: str) -> list[str]:
    """``objectives`` as given, or a :class:`UserError`: known names, each once, time first."""
    names = [objectives] if isinstance(objectives, str) else list(objectives)  # "time": a list of one, as written
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or not names or len(set(names)) != len(names) or names[0] != "time":
        raise UserError(f"{where}: objectives must be [\"time\"] or [\"time\", \"energy\"], got {names!r}")
    return names


def multi(objectives: Sequence[str]) -> bool:
    return len(objectives) > 1


def is_multi(study: optuna.Study) -> bool:
    return len(study.directions) > 1


def metric_names(time_metric: str, objectives: Sequence[str]) -> list[str]:
    """A new study's metrics: energy is a ratio where time is one."""
    energy = ENERGY_RATIO if time_metric == "ratio" else ENERGY_MJ
    return [time_metric] + [energy for name in objectives[1:] if name == "energy"]


def energy_metric(study: optuna.Study) -> str | None:
    """The energy metric a study was made with (None: time alone)."""
    if not is_multi(study):
        return None
    names = study.metric_names
    return names[1] if names and names[1] in ENERGY_ATTRS else ENERGY_MJ


def values(measurement: Measurement, energy: str | None) -> list[float] | None:
    """The trial's values (time, and energy in the metric ``energy``); None when energy is an
    objective and was not measured."""
    time_value = measurement.objective
    if time_value is None:
        return None
    if energy is None:
        return [time_value]
    energy_value = measurement.extra.get(ENERGY_ATTRS[energy])
    return None if energy_value is None else [time_value, float(energy_value)]


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
    """One row per front config: trial, the two objectives (``time``, ``energy``, and under their
    metric names), ms, energy per launch (mJ and its error), power, flags."""
    time_metric, energy = (study.metric_names or ["value"])[0], energy_metric(study)
    rows = []
    for t in front(study):
        a = t.user_attrs
        mj = t.values[1] if energy == ENERGY_MJ else a.get(ENERGY_ATTRS[ENERGY_MJ])
        rows.append({"trial": t.number, "time": t.values[0], time_metric: t.values[0], "energy": t.values[1],
                     energy or ENERGY_MJ: t.values[1], "ms": a.get("ms"), "energy_mj": mj,
                     "energy_mj_err": a.get("energy_mj_per_launch_err"), "power_w": a.get("power_w"),
                     "flags": a.get("flags", ""), "params": dict(t.params)})
    return rows


def trade_off(rows: list[dict[str, Any]]) -> list[str]:
    """What the time-optimal and the energy-optimal configs of the front give up, in words."""
    if not rows:
        return ["front: none yet (no trial completed with both time and energy)"]
    # the objectives as stored (ratios to the reference where there are), not the raw ms and mJ, which drift
    fastest = min(rows, key=lambda r: (r["time"], r["trial"]))
    frugal = min(rows, key=lambda r: (r["energy"], r["trial"]))
    lines = [f"time-optimal: trial {fastest['trial']}, {_ms(fastest)}, {_joules(fastest)}",
             f"energy-optimal: trial {frugal['trial']}, {_ms(frugal)}, {_joules(frugal)}"]
    if fastest["trial"] != frugal["trial"]:
        lines.append(f"the energy-optimal config is {100 * (frugal['time'] / fastest['time'] - 1):+.2f} % in time and "
                     f"{100 * (frugal['energy'] / fastest['energy'] - 1):+.2f} % in energy per launch "
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
    metric, energy = (study.metric_names or ["value"])[0], energy_metric(study)
    ratio = metric != "ms"  # a paired study's value is a ratio: its ms beside it; else the value is the ms
    relative = energy == ENERGY_RATIO  # the energy objective is a ratio: the mJ beside it
    print(render(["trial", metric, *(["ms"] if ratio else []), *([ENERGY_RATIO] if relative else []), "mJ/launch",
                  "+-", "W", "flags"],
                 [[r["trial"], f"{r[metric]:.4f}", *([_num(r["ms"])] if ratio else []),
                   *([f"{r['energy']:.4f}"] if relative else []), _num(r["energy_mj"]), _num(r["energy_mj_err"]),
                   _num(r["power_w"]), r["flags"]] for r in rows]))
    for line in trade_off(rows):
        print(line)
    return 0


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.4g}"


def _ms(row: dict[str, Any]) -> str:
    return f"{row['ms']:.4g} ms" if row["ms"] is not None else "? ms"


def _joules(row: dict[str, Any]) -> str:
    return f"{row['energy_mj'] / 1e3:.4g} J per launch" if row["energy_mj"] is not None else "? J per launch"


def directions(objectives: Sequence[str]) -> list[StudyDirection]:
    return [StudyDirection.MINIMIZE] * len(objectives)
