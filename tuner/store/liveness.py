"""Who runs a trial, and whether that runner still lives: the rule that lets any worker find a
dead worker's trial, across hosts, containers and PID namespaces.

Every trial records its runner as it is created: host name, PID, the process's start time and
its *PID space* -- the kernel's boot id and the PID namespace's inode, the only context in which a
PID names a process. While a trial is in flight its runner beats a lease in the storage every
:func:`heartbeat_s` seconds (RDB storages: Optuna's ``trial_heartbeats`` table, on the database
server's clock; journal files: a trial system attribute, on the writers' wall clock).

A RUNNING trial's runner is dead when

- it ran in this process's PID space and its process (PID and start time) is gone: at once;
- else (another host, container or PID namespace) its lease is older than :func:`grace_s`,
  or it never beat and the trial is older than that.

A trial whose lease is fresh is never failed unless its process is proven gone in our own PID
space; host names decide nothing (containers share them and change them).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Collection, Mapping
from functools import cache

import optuna
from optuna.storages import JournalStorage
from optuna.trial import FrozenTrial, TrialState

from tuner import procfs
from tuner.store.optuna_private import fail_trial, heartbeat_ages, is_database, set_trial_system_attr_by_id
from tuner.store.optuna_private import trial_id as id_of

HOST_ATTR = "runner_host"
PID_ATTR = "runner_pid"
#: the runner's start time (clock ticks after boot): a pid reused by a later process -- as in a
#: restarted container, where a rerun often gets the dead run's pid -- is not the runner
STARTED_ATTR = "runner_started"
#: "BOOT_ID/PIDNS_INODE": where ``runner_pid`` means something (PIDs of another kernel or
#: namespace say nothing about processes here)
PID_SPACE_ATTR = "runner_pid_space"
#: journal storages' lease: the epoch seconds of the runner's last beat (a trial system attribute)
LEASE_ATTR = "tuner:lease"

DEFAULT_HEARTBEAT_S = 20
DEFAULT_GRACE_S = 60


def heartbeat_s() -> int:
    """Seconds between a runner's beats (``$TUNER_HEARTBEAT_S``, default 20)."""
    return _positive_int("TUNER_HEARTBEAT_S", DEFAULT_HEARTBEAT_S)


def grace_s() -> int:
    """A lease this old (seconds) is expired (``$TUNER_GRACE_S``, default 60; at least two beats)."""
    return max(_positive_int("TUNER_GRACE_S", DEFAULT_GRACE_S), 2 * heartbeat_s())


def _positive_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


# -- identity ---------------------------------------------------------------------------------
@cache
def pid_space() -> str:
    """This process's PID space: kernel boot id and PID namespace inode ("" if unknown)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def _start_ticks_of_self() -> int | None:
    found = procfs.stat("self")  # /proc/self: right inside a PID namespace too
    return None if found is None else found.start_ticks


def runner_attrs() -> dict[str, object]:
    """This process, as a trial's runner (user attributes, stored as the trial is created:
    :func:`tuner.store.optuna_private.ask_with_user_attrs`)."""
    attrs: dict[str, object] = {HOST_ATTR: socket.gethostname(), PID_ATTR: os.getpid()}
    started = _start_ticks_of_self()
    if started is not None:
        attrs[STARTED_ATTR] = started
    if pid_space():
        attrs[PID_SPACE_ATTR] = pid_space()
    return attrs


def _here(attrs: Mapping[str, object]) -> bool:
    """Does the trial's runner PID name a process of this PID space?"""
    return bool(pid_space()) and attrs.get(PID_SPACE_ATTR) == pid_space()


def runner_alive(attrs: Mapping[str, object]) -> bool | None:
    """Does the process ``attrs`` name (:func:`runner_attrs`) live? None where this process cannot
    tell (another host, container or PID namespace)."""
    pid = attrs.get(PID_ATTR)
    if not isinstance(pid, int) or not _here(attrs):
        return None
    return procfs.alive(pid, attrs.get(STARTED_ATTR))


def is_mine(trial: FrozenTrial) -> bool:
    attrs = trial.user_attrs
    return _here(attrs) and attrs.get(PID_ATTR) == os.getpid() and attrs.get(STARTED_ATTR) == _start_ticks_of_self()


# -- the lease --------------------------------------------------------------------------------
def has_lease(storage: optuna.storages.BaseStorage) -> bool:
    """Storages other processes share: RDB (behind Optuna's cache wrapper) and journal files."""
    return is_database(storage) or isinstance(storage, JournalStorage)


def beat(storage: optuna.storages.BaseStorage, trial_id: int) -> None:
    """Renew the lease of a trial this process runs."""
    if isinstance(storage, JournalStorage):
        set_trial_system_attr_by_id(storage, trial_id, LEASE_ATTR, time.time())
    else:
        storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]


def lease_ages(study: optuna.Study, running: Collection[FrozenTrial]) -> dict[int, float]:
    """Seconds since each RUNNING trial's last beat, by trial id (trials that never beat: absent)."""
    from tuner.store.optuna_private import storage_of, study_id

    storage = storage_of(study)
    if isinstance(storage, JournalStorage):
        now = time.time()
        return {id_of(t): now - float(t.system_attrs[LEASE_ATTR]) for t in running if LEASE_ATTR in t.system_attrs}
    if has_lease(storage):
        return heartbeat_ages(storage, study_id(study))
    return {}


def runner_dead(trial: FrozenTrial, ages: Mapping[int, float] | None = None) -> bool:
    """True when ``trial`` (RUNNING) provably has no live runner (see the module's rule).
    ``ages``: :func:`lease_ages`; without them only a runner of this PID space can be judged
    (and a trial that never named its runner, by age)."""
    attrs = trial.user_attrs
    pid = attrs.get(PID_ATTR)
    if isinstance(pid, int) and _here(attrs):
        return not is_mine(trial) and not procfs.alive(pid, attrs.get(STARTED_ATTR))
    age = None if ages is None else ages.get(id_of(trial))
    if age is not None:
        return age > grace_s()
    if ages is None and isinstance(pid, int):
        return False
    started = trial.datetime_start  # never beat: killed before its first beat, or an older tuner's trial
    # (no start at all: a stand-in for a damaged journal record, see tuner.store.journal_file)
    return started is None or (dt.datetime.now() - started).total_seconds() > grace_s()


def recover_stale_trials(study: optuna.Study, axes: Collection[str], mine: bool = False,
                         why: str = "storage connection lost mid-trial") -> list[int]:
    """Fail the RUNNING trials no live process runs, and queue their configs again (a whole
    config only, one with every name in ``axes``: a partial one was never chosen, and
    completing it at random could give an invalid config). ``mine``: this process lost the
    storage mid-trial, and its own RUNNING trials are the stale ones."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return []
    ages = None if mine else lease_ages(study, running)
    requeued = []
    for trial in running:
        if mine:
            if not is_mine(trial):
                continue
            reason = why
        elif runner_dead(trial, ages):
            reason = _death(trial, ages or {})
        else:
            continue
        try:
            fail_trial(study, trial, {"status": "killed", "reason": reason})
        except optuna.exceptions.UpdateFinishedTrialError:  # another process got there first
            continue
        requeue(study, trial.number, trial.params, axes)
        requeued.append(trial.number)
    return requeued


def requeue(study: optuna.Study, number: int, params: Mapping[str, object], axes: Collection[str]) -> None:
    """Queue an abandoned trial's config again, marked ``requeued_from`` it: only a whole config (one
    with every name in ``axes``; a partial one was never chosen)."""
    if set(params) == set(axes):
        study.enqueue_trial(dict(params), user_attrs={"requeued_from": number}, skip_if_exists=False)


def _death(trial: FrozenTrial, ages: Mapping[int, float]) -> str:
    attrs = trial.user_attrs
    pid, host = attrs.get(PID_ATTR), attrs.get(HOST_ATTR)
    if isinstance(pid, int) and _here(attrs):
        return f"runner pid {pid} died mid-trial"
    if id_of(trial) in ages:
        return f"runner {host} pid {pid} stopped beating ({ages[id_of(trial)]:.0f} s > {grace_s()} s): lost mid-trial"
    if pid is not None:
        return f"runner {host} pid {pid} never beat in {grace_s()} s: lost mid-trial"
    return "its process died before it was marked"


class StaleCheck:
    """:func:`recover_stale_trials` at most once a beat (loops that ask often call it each time)."""

    def __init__(self, study: optuna.Study, axes: Collection[str], first_now: bool = True):
        self.study, self.axes = study, list(axes)
        self._next = 0.0 if first_now else time.monotonic() + heartbeat_s()

    def __call__(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + heartbeat_s()
            recover_stale_trials(self.study, self.axes)
