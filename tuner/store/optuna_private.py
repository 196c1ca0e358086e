"""Every use of Optuna internals, in one place (tests/test_optuna_private.py pins the version).

Optuna has no public API for these; each function says what it needs and why. When
Optuna changes, this module and its test are the only things to update.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterable, Iterator
from typing import Any, cast

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, _CachedStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

#: the Optuna release this module was written against (the test fails on another one)
PINNED_OPTUNA = "5.1.0"


#: what ``RDBStorage`` imports on first use (SQLAlchemy's engine and ORM, Alembic, Optuna's table
#: models): ~0.6 s of a run's start
RDB_LAZY_MODULES = ("sqlalchemy.engine", "sqlalchemy.orm", "alembic.command", "alembic.config", "alembic.migration",
                    "alembic.script", "optuna.storages._rdb.models")


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study lives in (to open other studies beside it; Study has no getter)."""
    return study._storage


def study_id(study: optuna.Study) -> int:
    """A study's id in its storage (Study has no getter)."""
    return study._study_id


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """A trial's id in its storage (the key heartbeats are recorded under; neither Trial nor
    FrozenTrial has a getter)."""
    return trial._trial_id


def is_database(storage: BaseStorage) -> bool:
    """An RDB storage, also behind the cache wrapper ``optuna.load_study`` puts around one."""
    return isinstance(storage, RDBStorage) or (isinstance(storage, _CachedStorage)
                                               and isinstance(storage._backend, RDBStorage))


def read_trials(study: optuna.Study, numbers: Iterable[int], start: int) -> tuple[list[FrozenTrial], int]:
    """After one read of the storage: the trials numbered ``numbers`` (in that order), then those
    numbered ``start`` on; and how many trials the study has.

    ``study.get_trials`` filters and sorts the whole study on every call (its cost grows with
    the study); a reader that keeps what it learnt from finished trials asks only for the new
    ones and those it saw unfinished. Optuna's cache of an RDB storage (``_CachedStorage``)
    holds the trials by number, synced by the same query ``get_trials`` makes (finished trials
    are not read again); other storages: one ``get_trials``.
    """
    storage = study._storage
    if not isinstance(storage, _CachedStorage):
        trials = study.get_trials(deepcopy=False)
        return [trials[n] for n in numbers if n < len(trials)] + trials[start:], len(trials)
    storage._read_trials_from_remote_storage(study._study_id)
    with storage._lock:
        by_number = storage._studies[study._study_id].trials  # numbers 0 .. n-1
        picked = [by_number[n] for n in numbers if n in by_number]
        picked += [by_number[n] for n in range(start, len(by_number)) if n in by_number]
        return picked, len(by_number)


class TrialFeed:
    """The trials of a study a reader has not seen finished: each :meth:`read` gives those
    created since the last one and again those that were not finished then, by number.
    A reader that keeps what finished trials told it reads each of them once."""

    def __init__(self, study: optuna.Study):
        self.study = study
        self._next = 0  # trials read so far: numbers 0 .. _next - 1
        self._open: list[int] = []  # of those, the ones not finished at the last read

    def read(self) -> list[FrozenTrial]:
        trials, total = read_trials(self.study, self._open, self._next)
        self._open = [t.number for t in trials if not t.state.is_finished()]
        self._next = max(self._next, total)
        return trials


def waiting_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's WAITING trials by number, as ``get_trials(states=(WAITING,))``, without
    filtering the whole study: Optuna's cache of an RDB storage keeps the unfinished ones apart."""
    storage = study._storage
    if not isinstance(storage, _CachedStorage):
        return storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.WAITING,))
    storage._read_trials_from_remote_storage(study._study_id)
    with storage._lock:
        info = storage._studies[study._study_id]
        numbers = (storage._trial_id_to_study_id_and_number[i][1] for i in info.unfinished_trial_ids)
        trials = [info.trials[n] for n in numbers]
    return sorted((t for t in trials if t.state == TrialState.WAITING), key=lambda t: t.number)


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


def set_trial_system_attr_by_id(storage: BaseStorage, trial_id: int, key: str, value: Any) -> None:
    """Write a system attribute of a running trial known by id (a lease renewed by a thread
    that holds no ``optuna.Trial``)."""
    storage.set_trial_system_attr(trial_id, key, value)


def heartbeat_ages(storage: BaseStorage, study_id: int) -> dict[int, float]:
    """Seconds since each RUNNING trial's last heartbeat in an RDB storage's ``trial_heartbeats``
    table, on the database server's clock (workers' clocks may differ), by trial id.

    Optuna's ``_get_stale_trial_ids`` gives only the ids past its grace period, and skips
    trials that never beat; the caller judges both.
    """
    import sqlalchemy
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    backend = cast(RDBStorage, getattr(storage, "_backend", storage))  # behind optuna's _CachedStorage
    beats = models.TrialHeartbeatModel
    with _create_scoped_session(backend.scoped_session) as session:
        now = session.execute(sqlalchemy.select(sqlalchemy.func.now())).scalar()
        rows = session.execute(
            sqlalchemy.select(beats.trial_id, beats.heartbeat)
            .join(models.TrialModel, models.TrialModel.trial_id == beats.trial_id)
            .where(models.TrialModel.study_id == study_id, models.TrialModel.state == TrialState.RUNNING)
        ).all()
    assert now is not None
    now = now.replace(tzinfo=None)  # Postgres answers with a time zone, the stored beats without
    return {tid: (now - beat.replace(tzinfo=None)).total_seconds() for tid, beat in rows}


def ask_with_user_attrs(study: optuna.Study, user_attrs: dict[str, Any]) -> optuna.Trial:
    """``study.ask()``, with ``user_attrs`` on the trial from the moment it is RUNNING.

    A new trial is created with them in one storage write (a template trial, as
    ``enqueue_trial`` makes WAITING ones); a queued trial gets them just before it is taken.
    ``study.ask()`` then ``set_user_attr`` leaves a window in which a killed process leaves a
    RUNNING trial that names no process (what finds dead runners' trials relies on the names).
    Taking a queued trial is as in ``Study._pop_waiting_trial_id``; without a proposal lock, a
    process that loses the race for it writes its name on the winner's trial.
    """
    storage = study._storage
    study._thread_local.cached_all_trials = None  # as ask(): sync with the storage once per trial
    for waiting in waiting_trials(study):
        try:
            for key, value in user_attrs.items():
                storage.set_trial_user_attr(waiting._trial_id, key, value)
            if storage.set_trial_state_values(waiting._trial_id, state=TrialState.RUNNING):
                return optuna.Trial(study, waiting._trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    template = FrozenTrial(
        number=-1, state=TrialState.RUNNING, value=None, datetime_start=datetime.datetime.now(),
        datetime_complete=None, params={}, distributions={}, user_attrs=dict(user_attrs), system_attrs={},
        intermediate_values={}, trial_id=-1,
    )
    return optuna.Trial(study, storage.create_new_trial(study._study_id, template_trial=template))


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


def set_user_attrs(trial: optuna.Trial, attrs: dict[str, Any]) -> None:
    """Several user attributes of a running trial: in one transaction on an RDB storage.

    ``Trial.set_user_attr`` commits once per key; a trial's record has ~20 keys, and on
    SQLite each commit is a few milliseconds of fsync on the thread that feeds the GPU.
    One transaction also stores the record whole or not at all. Other storages: key by key.
    """
    storage = trial.storage
    backend = getattr(storage, "_backend", storage)  # RDBStorage sits behind optuna's _CachedStorage
    if not isinstance(backend, RDBStorage) or len(attrs) < 2:
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return
    import json

    import sqlalchemy
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    table = models.TrialUserAttributeModel
    with _create_scoped_session(backend.scoped_session, True) as session:
        row = models.TrialModel.find_or_raise_by_id(trial._trial_id, session)
        # Optuna's models annotate their fields as Columns; on a loaded row the field is the value
        backend.check_trial_is_updatable(trial._trial_id, cast(TrialState, row.state))
        # replace the keys in two statements (Optuna upserts key by key: three statements each)
        session.execute(sqlalchemy.delete(table).where(table.trial_id == trial._trial_id, table.key.in_(list(attrs))))
        session.execute(sqlalchemy.insert(table),
                        [{"trial_id": trial._trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()])
    trial._cached_frozen_trial.user_attrs.update(attrs)  # what Trial.set_user_attr keeps in step
