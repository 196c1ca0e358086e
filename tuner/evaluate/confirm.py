"""A statistical winner: the study's top configs re-measured against each other.

Trials are measured one after another, each against the reference; configs whose
values lie within a fraction of a per cent of each other may trade places on another
day. A confirmation times the top ``k`` distinct configs round-robin in one session
and reports the winner together with every config statistically tied with it (see
:func:`tuner.measurement.paired.rank_interleaved`). Each confirmation is kept on the study
(session, device, clocks), so drift between sessions and GPUs stays visible: its
``session_factor`` is the median of the confirmed ratios over the ratios the same configs
were stored with (1: this session measures as the earlier ones did; ``tuner status`` shows
it, and it and the run warn when it moves more than the study's resolution, or when the configs
moved unalike: :func:`factor_warning`).
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import statistics
from collections import Counter
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.contract.kernel_spec import Value
from tuner.errors import UserError
from tuner.measurement.paired import CI_TARGET, Standing
from tuner.measurement.pareto import front, is_multi
from tuner.search.space import Space
from tuner.store.results import CONFIRMATIONS, last_confirmation_of, status_of, value_of, winner


class Confirms(Protocol):
    def confirm(self, configs: list[dict[str, Value]], rounds: int) -> tuple[list[Standing], dict]: ...


#: statuses of PRUNED trials whose config was measured in part: a confirmation may take them
#: when fewer than ``k`` configs were measured to the end (the sign test stops at 95 %, not for sure)
PARTLY_MEASURED = ("pruned_slow",)


def top_trials(study: optuna.Study, space: Space, k: int) -> list[FrozenTrial]:
    """The ``k`` best complete trials, one per config (a duplicate's original stands for it);
    where fewer configs were complete, the best of those the pruner stopped fill the places, so
    a short run whose pruner stopped all but one config still confirms its winner against the
    nearest others."""
    seen: set[tuple] = set()
    chosen = []
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    if is_multi(study):  # several objectives: the Pareto set, fastest first (no trial is pruned for time)
        trials = front(study)
    complete = sorted((t for t in trials if t.state == TrialState.COMPLETE), key=value_of)
    stopped = sorted((t for t in trials if t.state == TrialState.PRUNED and t.values
                      and t.user_attrs.get("status") in PARTLY_MEASURED), key=value_of)
    for trial in [*complete, *stopped]:
        if not trial.params or not all(a in trial.params for a in space.axis_names):
            continue
        key = space.key(trial.params)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(trial)
        if len(chosen) == k:
            break
    return chosen


def confirm_study(study: optuna.Study, space: Space, evaluator: Confirms, device: dict[str, Any],
                  top: int = 5, rounds: int = 100, resolution: float = CI_TARGET) -> dict | None:
    """Re-measure the top configs against each other; store and return the record (None: < 2 configs).
    ``resolution``: the study's ``ci_target``, kept in the record for what later judges its session factor.
    A config whose output fails its check in this session (a stricter precision class, another GPU)
    is left out and named in the record (``left_out``); with fewer than 2 left the record names no
    winner (``winner`` None)."""
    trials = top_trials(study, space, top)
    if len(trials) < 2:
        return None
    standings, sensors = evaluator.confirm([space.full_config(dict(t.params)) for t in trials], rounds)
    left_out = [{"trial": trials[entry["index"] - 1].number, "status": entry["status"], "reason": entry["reason"]}
                for entry in sensors.pop("left_out", [])]
    rows = []
    for place, s in enumerate(standings):  # the winner first
        trial = trials[s.index - 1]
        rows.append({
            "trial": trial.number,
            "value": value_of(trial) if trial.values else None,
            "ratio": s.to_reference.ratio,
            "to_winner": s.to_winner.ratio,
            "to_winner_ci": [s.to_winner.lo, s.to_winner.hi],
            "tied": s.tied and place > 0,  # tied with the winner: another config (the winner ties with itself)
            "flags": trial.user_attrs.get("flags", ""),
        })
    record = {
        **session_factor(trials, standings),
        "at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "session": f"{socket.gethostname()}:{os.getpid()}",
        "device_name": device.get("name", ""),
        "device_uuid": device.get("uuid", ""),
        "rounds": rounds,
        "resolution": resolution,
        "winner": rows[0]["trial"] if rows else None,
        "tied": [r["trial"] for r in rows if r["tied"]],  # the others tied with the winner
        "standings": rows,
        **({"left_out": left_out} if left_out else {}),
        **sensors,
    }
    study.set_user_attr(CONFIRMATIONS, [*study.user_attrs.get(CONFIRMATIONS, []), record])
    return record


def session_factor(trials: list[FrozenTrial], standings: list[Standing]) -> dict[str, Any]:
    """This session against the stored trials: confirmed ratio / stored ratio, per config (the
    anchors), and their median; nothing where no trial stored a paired ratio."""
    factors = [s.to_reference.ratio / stored for s in standings
               if (stored := trials[s.index - 1].user_attrs.get("ratio"))]
    if not factors:
        return {}
    return {"session_factor": round(statistics.median(factors), 5),
            "session_factor_range": [round(min(factors), 5), round(max(factors), 5)], "anchors": len(factors)}


def session_factors(study: optuna.Study) -> list[dict[str, Any]]:
    """Every confirmation's session factor, oldest first."""
    return [factor_row(r) for r in study.user_attrs.get(CONFIRMATIONS) or [] if r.get("session_factor") is not None]


def factor_row(record: dict) -> dict[str, Any]:
    """A confirmation's session factor: when, where, the factor, how many anchors."""
    return {"at": record["at"], "device_name": record.get("device_name", ""), "factor": record["session_factor"],
            "anchors": record.get("anchors", 0)}


#: the anchors' factors may differ among themselves by this many resolutions before a confirmation
#: says the GPU orders the configs otherwise (H200s, 2026-11-27: two invocations on one machine differed
#: per config by at most 1.0 %; between machines `CLUSTER_M 2` configs by 2.0-2.9 %, a chip effect)
SPREAD_RESOLUTIONS = 6


def factor_warning(study_name: str, record: dict, resolution: float = CI_TARGET) -> str | None:
    """One line when a confirmation measured its anchors further from their stored values than the
    study's resolution (``ci_target``: the record's, else ``resolution``), or unalike (configs that run otherwise on this chip): values
    of different sessions then do not compare."""
    if record.get("session_factor") is None:
        return None
    resolution = record.get("resolution", resolution)  # the study's own, where the record keeps it
    f = factor_row(record)
    where = f"warning: study {study_name}: the confirmation of {f['at']} on {f['device_name']} measured its {f['anchors']} configs"
    if abs(f["factor"] - 1.0) > resolution:
        return (f"{where} {100 * (f['factor'] - 1):+.2f} % against their stored values, more than "
                f"the resolution (+-{100 * resolution:.2f} %): compare values within one session")
    low, high = record.get("session_factor_range") or (f["factor"], f["factor"])
    if high / low - 1 > SPREAD_RESOLUTIONS * resolution:
        return (f"{where} {100 * (low - 1):+.2f} % to {100 * (high - 1):+.2f} % against their stored values: this GPU "
                "orders them otherwise than the sessions that stored them; compare values within one session")
    return None


def last_confirmation(study: optuna.Study) -> dict | None:
    """The latest confirmation that named a winner (one that left all but one config out names none)."""
    return last_confirmation_of(study.user_attrs)


def standing_confirmation(study: optuna.Study) -> dict | None:
    """The last confirmation, where no trial finished after it: nothing it compared has changed."""
    record = last_confirmation(study)
    if record is None:
        return None
    # "at" is kept to the second: a trial within the second before it finished before it
    after = _dt.datetime.fromisoformat(record["at"]) + _dt.timedelta(seconds=1)
    local = _dt.datetime.now().astimezone().tzinfo  # Optuna's times are naive local ones
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        done = t.datetime_complete
        if done is not None and done.replace(tzinfo=done.tzinfo or local) > after:
            return None
    return record


def no_winner(study: optuna.Study) -> str:
    """Why a study without a completed trial names no winner."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.FAIL, TrialState.PRUNED, TrialState.COMPLETE))
    if finished:  # every config failed: running on will not find a winner by itself
        statuses = Counter(status_of(t) for t in finished)
        most = statuses.most_common(1)[0][0]
        reason = next((str(t.user_attrs["reason"]) for t in finished
                       if status_of(t) == most and t.user_attrs.get("reason")), "")
        example = f" (the first {most}: {reason})" if reason else ""
        return (f"study {study.study_name!r}: every one of its {len(finished)} trials failed "
                f"({', '.join(f'{k}={v}' for k, v in sorted(statuses.items()))}){example}: `tuner export` lists "
                "each one's reason; fix what they name, then run it again")
    return f"study {study.study_name!r} has no completed trial yet: run it first"


def confirmed_best(study: optuna.Study) -> tuple[FrozenTrial, dict | None]:
    """The winner of the latest confirmation, else the trial with the best value."""
    attrs = study.user_attrs
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    best = winner(attrs, trials, study.directions[0])
    if best is None:
        raise UserError(no_winner(study))
    record = last_confirmation_of(attrs)
    return best, record if record is not None and record["winner"] == best.number else None


def failed_since(study: optuna.Study, trial: int) -> str | None:
    """A warning when ``trial``'s config failed its output check in a confirmation after the last
    one it won (a session with a stricter class, another GPU): None when it did not."""
    for record in reversed(study.user_attrs.get(CONFIRMATIONS) or []):
        if record.get("winner") == trial:
            return None
        for entry in record.get("left_out", []):
            if entry["trial"] == trial:
                return (f"warning: trial {trial} failed its output check in the confirmation of {record['at']} on "
                        f"{record['device_name']} ({entry['status']}: {entry['reason']}): confirm again where it "
                        "runs, or choose another config")
    return None


def tied_with_winner(record: dict) -> list[int]:
    """The trials a confirmation found statistically tied with its winner, the winner left out
    (records stored before 2026-12 list it among them too)."""
    return [n for n in record["tied"] if n != record["winner"]]


def standings_table(record: dict) -> list[str]:
    """``tuner confirm``'s table: each config's median ratio to the reference (the winner has the lowest:
    the table's order) and, for the others, the interval of its ratio to the winner that ties it or not.
    (The median of the ratios to the winner is left out: medians of per-round ratios do not compose, so a
    config tied with the winner may have one below 1 while its median ratio to the reference is above
    the winner's.)"""
    resolution = record.get("resolution", CI_TARGET)
    lines = [f"WINNER: the lowest median ratio to the reference; TIED: not provably slower than it by more than "
             f"{100 * resolution:.2f} % (the 95 % interval of its ratio to the winner, round by round, reaches "
             f"{1 + resolution:.4f})"]
    for row in record["standings"]:
        lo, hi = row["to_winner_ci"]
        against_winner = ("WINNER" if row["trial"] == record["winner"]
                          else f"x[{lo:.4f}, {hi:.4f}] of the winner{'  TIED' if row['tied'] else ''}")
        lines.append(f"trial {row['trial']:>5}  x{row['ratio']:.4f} of the reference  {against_winner}")
    return lines


def describe(record: dict) -> str:
    """One line: the confirmed winner and its tie set, and the configs left out."""
    left_out = "; ".join(f"trial {e['trial']} failed its output check here ({e['status']}: {e['reason']})"
                         for e in record.get("left_out", []))
    if record["winner"] is None:
        return (f"no confirmed winner: fewer than 2 of the top configs passed their output check on "
                f"{record['device_name']} at {record['at']}: {left_out}")
    others = tied_with_winner(record)
    ties = f"tied with trial(s) {', '.join(map(str, others))}" if others else "no tie"
    line = (f"confirmed winner: trial {record['winner']} ({ties}; {len(record['standings'])} configs, "
            f"{record['rounds']} rounds on {record['device_name']} at {record['at']})")
    return f"{line}; left out: {left_out}" if left_out else line
