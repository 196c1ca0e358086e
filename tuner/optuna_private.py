"""Every use of Optuna internals, in one place (tests/test_optuna_private.py pins the version).

Optuna has no public API for these; each function says what it needs and why. When
Optuna changes, this module and its test are the only things to update.
"""

from __future__ import annotations

import contextlib
from collections.abc import Container, Iterator
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

#: the Optuna release this module was written against (the test fails on another one)
PINNED_OPTUNA = "5.0.0"


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study lives in (to open other studies beside it; Study has no getter)."""
    return study._storage


def cached_trials(study: optuna.Study, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
    """``study.get_trials(deepcopy=False, states=...)`` from the snapshot ``study.optimize`` keeps
    for the current trial: samplers and pruners ask many times per trial, one storage read serves all."""
    return study._get_trials(deepcopy=False, states=states, use_cache=True)


def study_system_attrs(study: optuna.Study) -> dict[str, Any]:
    """A study's system attributes (optuna-dashboard keeps notes there; Study has no getter)."""
    return dict(study._storage.get_study_system_attrs(study._study_id))


def set_study_system_attr(study: optuna.Study, key: str, value: Any) -> None:
    """Write a study system attribute (``Study.set_system_attr`` was removed in Optuna 3)."""
    study._storage.set_study_system_attr(study._study_id, key, value)


def set_trial_system_attr(trial: optuna.Trial, key: str, value: Any) -> None:
    """Mark a running trial for other workers without adding to its user attributes
    (``Trial.set_system_attr`` was removed in Optuna 3)."""
    trial.storage.set_trial_system_attr(trial._trial_id, key, value)


def fail_trial(study: optuna.Study, trial: FrozenTrial, user_attrs: dict[str, Any]) -> None:
    """Set user attrs on a RUNNING trial of another (dead) process, then make it FAIL.

    Raises ``optuna.exceptions.UpdateFinishedTrialError`` when it finished meanwhile.
    Only a live ``optuna.Trial`` has a public ``set_user_attr``; a dead runner's trial
    is known only as a FrozenTrial.
    """
    storage = study._storage
    for key, value in user_attrs.items():
        storage.set_trial_user_attr(trial._trial_id, key, value)
    storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


@contextlib.contextmanager
def journal_lock(backend: JournalFileBackend) -> Iterator[None]:
    """Hold a journal file's own writer lock (to repair its tail without racing a writer)."""
    from optuna.storages.journal._file import get_lock_file

    with get_lock_file(backend._lock):
        yield


def journal_file(storage: BaseStorage) -> str | None:
    """The file behind a JournalStorage on a JournalFileBackend, else None (for labels)."""
    if not isinstance(storage, JournalStorage):
        return None
    path = getattr(storage._backend, "_file_path", None)
    return str(path) if path else None
