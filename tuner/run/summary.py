"""A run in words: its study's trials by status, best and reference (``--json``), and the lines
``tuner run`` prints of them."""

from __future__ import annotations

import json
from collections import Counter

import optuna

from tuner.measurement import pareto
from tuner.run.probe import describe as describe_reference
from tuner.search.enumeration import reason_kind
from tuner.store.results import metric_of, status_of, time_of, value_of, value_text, winner
from tuner.store.url import redact
from tuner.table import printable

#: statuses that are no failure of the config (a run stopped, a reused value)
NOT_FAILURES = ("ok", "duplicate", "interrupted", "killed", "waiting", "running")


#: `tuner run` / `grid`: the study holds failed configs and none that completed (the kernel, its spec or
#: its build needs a fix before anything is measured; bad input is 2, a stop 130)
EXIT_NONE_COMPLETED = 1


def exit_code(summary: dict) -> int:
    return EXIT_NONE_COMPLETED if summary.get("failure") else 0


def summarize(study: optuna.Study, storage_url: str) -> dict:
    trials = study.get_trials(deepcopy=False)
    statuses = Counter(status_of(t) for t in trials)
    b = winner(study.user_attrs, trials, study.directions[0])  # several objectives: the fastest (tuner best --pareto: the front)
    best = None if b is None else best_entry(study, b, trials)
    summary = {
        "study": study.study_name,
        "storage": redact(storage_url),
        "trials": len(trials),
        "statuses": dict(statuses),
        "best": best,
    }
    if best is None and (failure := commonest_failure(trials)):  # what to fix before anything is measured
        summary["failure"] = failure
    reference = describe_reference(study)
    if reference is not None:  # the study chose its reference (tuner.run.probe)
        summary["reference"] = reference
    if pareto.is_multi(study):
        summary["front"] = pareto.front_rows(study)
    return summary


def best_entry(study: optuna.Study, trial: optuna.trial.FrozenTrial,
               trials: list[optuna.trial.FrozenTrial] | None = None) -> dict:
    """A summary's ``best``: the trial's defines, time, value, flags and number."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    return {"params": trial.params, "ms": time_of(trial, trials), metric_of(study): value_of(trial),
            "flags": trial.user_attrs.get("flags", ""), "trial": trial.number}


def nothing_ran(summary: dict, trials: int | None, command: str = "run") -> str:
    """Why a run measured nothing, where its study held its budget already ("" where it ran, or fell short)."""
    if summary.get("trials_run") or not trials or summary["trials"] < trials:
        return ""
    if command == "grid":
        return "the grid holds every config of its plan already: nothing ran"
    return f"the study holds its --trials {trials} already: nothing ran (raise --trials to go on)"


def study_line(summary: dict) -> str:
    """The summary's study in one line: its trials by status, and the queued ones apart (a warm
    start's or the start configs a short run left: the next run of the study measures them first)."""
    statuses = dict(summary["statuses"])
    waiting = statuses.pop("waiting", 0)
    counts = ", ".join(f"{k}={v}" for k, v in sorted(statuses.items()))
    line = f"study {printable(summary['study'])} in {printable(summary['storage'])}: {summary['trials'] - waiting} trials ({counts})"
    if waiting:
        line += f", {waiting} more queued: the study's next run measures {'it' if waiting == 1 else 'them'} first"
    return line


def commonest_failure(trials: list[optuna.trial.FrozenTrial]) -> str:
    """The commonest way the finished trials failed, with one of its reasons ("" when none failed)."""
    kinds: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], str] = {}
    for t in trials:
        status, reason = status_of(t), str(t.user_attrs.get("reason") or "")
        if t.state.is_finished() and status not in NOT_FAILURES and reason:
            kind = (status, reason_kind(reason))
            kinds[kind] += 1
            examples.setdefault(kind, reason)
    if not kinds:
        return ""
    kind, n = kinds.most_common(1)[0]
    return f"{kind[0]} x{n}, e.g. {examples[kind]}"


def best_line(best: dict | None, failure: str = "") -> str:
    """The summary's best trial in one line, with its unit (``best`` as :func:`summarize` gives it);
    without one, ``failure``: the commonest way the trials failed."""
    if not best:
        return f"best: none yet (no trial completed{': ' + printable(failure) if failure else ''})"
    if "ratio" in best:
        return f"best: {value_text(best['ratio'], 'ratio')}, {best['ms']:.4g} ms (trial {best['trial']})  {best['flags']}"
    return f"best: {value_text(best['ms'], 'ms')} (trial {best['trial']})  {best['flags']}"


def print_summary(summary: dict, as_json: bool) -> None:
    """How ``tuner run`` and ``grid`` end (``tuner run --workers N`` too, its ``workers`` counted): the
    study, its best and its reference, a replay's yardstick and this run's pace; or one JSON line."""
    if as_json:
        print(json.dumps(summary))
        return
    print(study_line(summary))
    print(best_line(summary.get("best"), summary.get("failure", "")))
    if summary.get("reference"):
        print(printable(summary["reference"]))
    if summary.get("recorded_best_ms"):
        reached = summary.get("fraction_of_recorded_best")
        print(f"the recording's fastest config: {summary['recorded_best_ms']:.4g} ms"
              + (f" (this study's best reaches {reached:.3f} of its speed)" if reached else ""))
    if summary.get("trials_run"):
        rate, workers = summary.get("trials_per_s"), summary.get("workers")
        print(f"this run: {summary['trials_run']} trials{f' by {workers} workers' if workers else ''} in "
              f"{summary['run_s']:.1f} s, first result after {summary['first_trial_s']:.2f} s"
              + (f", {rate:.2f} trials/s sustained" if rate else ""))
