"""Every use of Optuna internals, in one place (tests/test_optuna_private.py pins the version).

Optuna has no public API for these; each function names what it needs and why. When
Optuna changes, this module and its test are the only things to update.
"""

from __future__ import annotations

from typing import Any

import optuna


def study_system_attrs(study: optuna.Study) -> dict[str, Any]:
    """A study's system attributes (optuna-dashboard keeps notes there; Study has no getter)."""
    return dict(study._storage.get_study_system_attrs(study._study_id))


def set_study_system_attr(study: optuna.Study, key: str, value: Any) -> None:
    """Write a study system attribute (``Study.set_system_attr`` was removed in Optuna 3)."""
    study._storage.set_study_system_attr(study._study_id, key, value)


def journal_file(storage: optuna.storages.BaseStorage) -> str | None:
    """The file behind a JournalStorage on a JournalFileBackend, else None (for labels)."""
    if not isinstance(storage, optuna.storages.JournalStorage):
        return None
    path = getattr(storage._backend, "_file_path", None)
    return str(path) if path else None
