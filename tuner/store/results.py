"""The results table: one row per trial, one schema for every file of results.

Columns: the tuned defines as plain columns (``BLOCK_M``, ...), then :data:`COLUMNS`
(``value`` is the objective, ``ms`` the kernel time, ``energy_mj`` its energy per launch where
it was measured and ``energy_ratio`` that over the reference's in the same trial, ``gpu`` the UUID of the GPU that measured it). ``tuner grid --csv`` and
``tuner export`` write it, replay reads it back (and also the ``params_`` /
``user_attrs_`` columns of Optuna's ``trials_dataframe``, which older exports used),
and the reports draw from it. :func:`winner` is the one rule for "the winner".
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

if TYPE_CHECKING:  # pandas where a table is built or read: a run's start imports this module without it
    import optuna
    import pandas as pd

#: the columns after the defines, in order
COLUMNS = (
    "number", "state", "value", "ms", "tflops", "energy_mj", "energy_ratio", "status", "reason", "regs", "spills", "smem_bytes",
    "compile_s", "checksum", "max_err", "flags", "phase", "gpu", "datetime_start", "datetime_complete",
)
#: columns a file may carry for all its rows (what it was measured on; ``storage``: the storage whose grid wrote it)
FILE_COLUMNS = ("device", "date", "arch", "kernel", "source_hash", "storage")
#: user attributes that become columns
_ATTR_COLUMNS = ("ms", "tflops", "regs", "spills", "smem_bytes", "compile_s", "checksum", "max_err", "flags",
                 "reason", "phase", "gpu", "energy_ratio")
#: status of a trial without one recorded
_STATE_STATUS = {TrialState.COMPLETE: "ok", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed",
                 TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}


def status_of(trial: FrozenTrial) -> str:
    status = trial.user_attrs.get("status")
    if isinstance(status, str) and status:
        return status
    return _STATE_STATUS.get(trial.state, trial.state.name.lower())


def metric_of(study: optuna.Study) -> str:
    """What a study's values are: ``ratio`` (candidate / reference, paired timing) or ``ms``."""
    return (study.metric_names or ["ms"])[0]


def value_text(value: float, metric: str) -> str:
    """A trial's value with its unit."""
    return f"{value:.4f} x the reference" if metric == "ratio" else f"{value:.4g} ms"


def primary(trial: FrozenTrial) -> float | None:
    """A trial's time value (the first objective; ``trial.value`` raises on a multi-objective study)."""
    values = trial.values
    return values[0] if values else None


def value_of(trial: FrozenTrial) -> float:
    """A complete trial's objective value: the key trials are ranked by (time, the first objective)."""
    value = primary(trial)
    if value is None:
        raise ValueError(f"trial {trial.number} has no value")
    return value


def best_trial(trials: Iterable[FrozenTrial], direction: StudyDirection = StudyDirection.MINIMIZE,
               phase: str | None = None) -> FrozenTrial | None:
    """The COMPLETE trial with the best value (of ``phase`` when given), or None.

    Only COMPLETE trials carry a value: every failure is PRUNED or FAIL, so an invalid
    configuration is never best.
    """
    done = [t for t in trials if t.state == TrialState.COMPLETE and primary(t) is not None
            and (phase is None or t.user_attrs.get("phase") == phase)]
    if not done:
        return None
    pick = max if direction == StudyDirection.MAXIMIZE else min
    return pick(done, key=value_of)


#: study user attr: every confirmation of the study's top configs, oldest first (:mod:`tuner.evaluate.confirm`)
CONFIRMATIONS = "confirmations"


def last_confirmation_of(attrs: Mapping[str, Any]) -> dict | None:
    """The latest confirmation that named a winner (one that left all but one config out names none),
    from a study's user attributes."""
    history = [r for r in attrs.get(CONFIRMATIONS) or [] if r.get("winner") is not None]
    return history[-1] if history else None


def winner(attrs: Mapping[str, Any], trials: Sequence[FrozenTrial],
           direction: StudyDirection = StudyDirection.MINIMIZE) -> FrozenTrial | None:
    """The study's winner: its latest confirmation's (the top configs measured again against each other,
    which may name a config the pruner had stopped), else the trial with the best value; None before
    any trial completed. ``attrs``: the study's user attributes, ``trials``: its trials."""
    best = best_trial(trials, direction)
    if best is None:
        return None
    record = last_confirmation_of(attrs)
    if record is not None:
        confirmed = next((t for t in trials if t.number == record["winner"]), None)
        if confirmed is not None:
            return confirmed
    return best


def trials_frame(trials: Iterable[FrozenTrial], axes: Sequence[str] | None = None) -> pd.DataFrame:
    """The results table of ``trials``: define columns (``axes``, else every param seen), then :data:`COLUMNS`."""
    import pandas as pd

    trials = list(trials)
    if axes is None:
        axes = list(dict.fromkeys(name for t in trials for name in t.params))
    rows: list[dict[str, Any]] = []
    timeless: list[dict[str, Any]] = []  # rows of trials that kept no raw time of their own
    for t in trials:
        row: dict[str, Any] = {axis: t.params.get(axis) for axis in axes}
        row.update({key: t.user_attrs.get(key) for key in _ATTR_COLUMNS})
        row["energy_mj"] = t.user_attrs.get("energy_mj_per_launch")  # a time-and-energy study's second objective
        row.update(number=t.number, state=t.state.name, status=status_of(t),
                   value=primary(t) if t.state == TrialState.COMPLETE else None,
                   datetime_start=t.datetime_start, datetime_complete=t.datetime_complete)
        if row["ms"] is None and t.state == TrialState.COMPLETE:
            row["ms"] = time_of(t, trials)
            timeless.append(row)
        rows.append(row)
    work = [r["tflops"] * r["ms"] for r in rows if _number(r["tflops"]) and _number(r["ms"])]
    for row in timeless:  # TFLOPS at the time shown, for the work the other rows did (the same problem)
        if work and row["ms"]:
            row["tflops"] = round(statistics.median(work) / row["ms"], 3)
    frame = pd.DataFrame(rows, columns=[*axes, *COLUMNS])
    for axis in axes:  # a trial stopped while its params were chosen leaves a gap: whole numbers stay whole
        present = [row[axis] for row in rows if row[axis] is not None]
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            frame[axis] = frame[axis].astype("Int64")
    for column in ("value", "ms", "tflops", "energy_mj", "energy_ratio", "regs", "spills", "smem_bytes", "compile_s", "checksum", "max_err"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def ranked(frame: pd.DataFrame) -> pd.DataFrame:
    """Finished rows, the measured ones first by their value (the table ``tuner grid`` prints): a
    paired study's ratio to the reference cancels the clock drift its raw ``ms`` carries."""
    done = frame[frame["state"].isin(["COMPLETE", "PRUNED", "FAIL"])]
    key = done["status"].ne("ok").astype(int) * 1e300 + done["value"].fillna(done["ms"]).fillna(float("inf"))
    return done.assign(_rank=key).sort_values("_rank", kind="stable").drop(columns="_rank")


def write_table(frame: pd.DataFrame, path: str | Path, **file_columns: Any) -> None:
    """Write ``frame`` as CSV, with ``file_columns`` (device, date, ...) on every row."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.assign(**file_columns).to_csv(path, index=False)


def storage_of_table(path: str | Path) -> str | None:
    """The storage whose grid wrote the CSV at ``path`` (its ``storage`` column); None where the file
    does not say (an older tuner's table, or another file)."""
    import csv

    try:
        with Path(path).open(newline="", encoding="utf-8") as file:
            row = next(csv.DictReader(file), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return (row or {}).get("storage") or None


class TableError(ValueError):
    """The file is not a results table (the message says what is missing)."""


def read_table(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """A results CSV as (frame in this schema, define columns); Optuna exports are renamed."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TableError(f"not a CSV table ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    return normalise(frame)


def normalise(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rename an Optuna ``trials_dataframe`` export into this schema; find the define columns."""
    renames: dict[str, str] = {}
    dropped: list[str] = []
    prefixed = any(c.startswith("params_") for c in frame.columns)
    for column in frame.columns:
        if column.startswith("params_"):
            renames[column] = column[len("params_"):]
        elif column.startswith("user_attrs_"):
            name = column[len("user_attrs_"):]
            if name in COLUMNS or name in FILE_COLUMNS:
                renames[column] = name
            else:  # host, pid, ...: where it ran, not what it measured
                dropped.append(column)
        elif column.startswith("system_attrs_") or (prefixed and column == "duration"):
            dropped.append(column)
        elif column.startswith("value"):  # value, or value_<metric> once metric names are set
            renames[column] = "value"
    frame = frame.drop(columns=dropped).rename(columns=renames)
    if "ms" not in frame.columns and "value" in frame.columns:
        frame["ms"] = frame["value"]
    if "status" not in frame.columns and "state" in frame.columns:
        frame["status"] = [_STATE_STATUS.get(TrialState[s], s.lower()) if s in TrialState.__members__ else s
                           for s in frame["state"]]
    if "status" not in frame.columns and "ms" in frame.columns:  # a table of times from a grid run elsewhere
        frame["status"] = ["failed" if str(ms).strip() in ("", "-", "nan") else "ok" for ms in frame["ms"]]
    if "ms" not in frame.columns:
        raise TableError("a results table needs a header with the define columns and 'ms' (and 'status': "
                         "without it, a row with a time is ok and one without failed)")
    if prefixed:
        axes = [renames[c] for c in renames if c.startswith("params_")]
    else:
        axes = [c for c in frame.columns if c not in COLUMNS and c not in FILE_COLUMNS and c != "trial"]
    if not axes:
        raise TableError(f"no define columns besides {', '.join(COLUMNS)}")
    return frame, axes


def time_of(trial: FrozenTrial, trials: Sequence[FrozenTrial]) -> float | None:
    """A complete trial's time in ms: its own median, or where it kept none (the reference paired
    with itself before the GPU was steady) its ratio on the scale of :func:`paired_ms`."""
    ms = trial.user_attrs.get("ms")
    if isinstance(ms, (int, float)):
        return float(ms)
    return paired_ms(trials).get(trial.number, primary(trial))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reference_ms(trials: Sequence[FrozenTrial]) -> float | None:
    """The reference's median time over a paired study's trials: the scale its ratios are read on."""
    references = [t.user_attrs["reference_ms"] for t in trials
                  if isinstance(t.user_attrs.get("reference_ms"), (int, float)) and t.user_attrs.get("ratio")]
    return statistics.median(references) if references else None


def paired_ms(trials: Sequence[FrozenTrial]) -> dict[int, float]:
    """Per trial, its time on one scale: the paired ratio x the reference's median time.

    A trial's own median (``ms``) moves with the clock state it met (1-3 % on a power-capped
    GPU); its ratio to the reference launched alternately does not. Trials of a study with a
    milliseconds objective keep their value.
    """
    scale = reference_ms(trials)
    out = {}
    for t in trials:
        ratio = t.user_attrs.get("ratio")
        if scale is not None and isinstance(ratio, (int, float)):
            out[t.number] = float(ratio) * scale
        elif isinstance(t.user_attrs.get("ms"), (int, float)):
            out[t.number] = float(t.user_attrs["ms"])
    return out


#: Kernel Tuner's failure strings (a cache's ``time`` of a config that failed), in our statuses
KT_FAILURES = {"InvalidConfig": "invalid", "CompilationFailedConfig": "compile_error", "RuntimeFailedConfig": "launch_error"}
#: the same, by our status (a failure of another kind is written as RuntimeFailedConfig)
KT_FAILURE_OF = {status: name for name, status in KT_FAILURES.items()}


def kernel_tuner_cache(trials: Sequence[FrozenTrial], axes: Mapping[str, Sequence[Any]], *, device: str, kernel: str,
                       problem_size: Any, metric: str) -> dict[str, Any]:
    """The trials as a Kernel Tuner cache (the format of the published autotuning spaces), over
    the whole space ``axes`` (each define's values).

    ``time`` is :func:`paired_ms` (one scale for the whole recording); ``raw_time`` the
    config's own median, ``ratio`` the objective. A config measured more than once keeps its
    first finished result. A config the pruner stopped as slower ran: its ``time`` is its last
    block median (on the same scale); failures carry Kernel Tuner's failure strings. Each
    entry not measured whole names our status beside (``status``), which replay reads back.
    """
    times = paired_ms(trials)
    scale = reference_ms(trials) if metric == "ratio" else 1.0
    cache: dict[str, dict[str, Any]] = {}
    for t in trials:
        if not t.state.is_finished() or not all(a in t.params for a in axes):
            continue
        key = ",".join(str(t.params[a]) for a in axes)
        if key in cache:
            continue
        entry: dict[str, Any] = {a: t.params[a] for a in axes}
        status = status_of(t)
        if t.state == TrialState.COMPLETE and t.number in times:
            entry.update(time=times[t.number], raw_time=t.user_attrs.get("ms"), ratio=t.user_attrs.get("ratio"),
                         ratio_ci=[t.user_attrs.get("ratio_lo"), t.user_attrs.get("ratio_hi")],
                         pairs=t.user_attrs.get("pairs"), sm_clock_mhz=t.user_attrs.get("sm_clock_mhz"))
        elif status == "pruned_slow" and t.intermediate_values and scale:
            entry.update(time=t.intermediate_values[max(t.intermediate_values)] * scale, status=status)
        else:
            entry.update(time=KT_FAILURE_OF.get(status, "RuntimeFailedConfig"), status=status)
        entry["compile_time"] = t.user_attrs.get("compile_s")
        cache[key] = entry
    return {
        "version": "1.0.0",
        "device_name": device,
        "kernel_name": kernel,
        "problem_size": problem_size,
        "tune_params_keys": list(axes),
        "tune_params": {a: list(v) for a, v in axes.items()},
        "objective": "time",
        "cache": cache,
    }
