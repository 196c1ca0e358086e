"""A worker lost on another host or in another PID namespace (issue 33, items 1 and 2).

A replay worker runs under another host name (``unshare --uts``) or in a PID namespace of its
own with the host's name (``unshare --pid``: it records PID 1). It stops mid-trial (its result
recorded, its state not told: tests/kill_at.py's ``record`` point, paused) while its lease beats.
First it lives: a survivor's start and run must not fail its trial, and it then finishes it.
Then another one is killed with SIGKILL there: after the survivor's next start the study has
its budget of measured trials, nothing RUNNING, and only the killed trial failed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import PNPOLY, POSTGRES_URL, ROOT
from tests.test_reliability import wait_for
from tuner.store import liveness
from tuner.store.storage import open_storage

BUDGET = 6
MORE = 4
#: short beats so the lost worker's lease expires within the test; the grace leaves room for a busy machine
LEASE_ENV = {"TUNER_HEARTBEAT_S": "1", "TUNER_GRACE_S": "10"}
ISOLATION = {
    "hostname": ["unshare", "--uts", "--fork", "sh", "-c", 'hostname lost-host && exec "$0" "$@"'],
    "pidns": ["unshare", "--pid", "--fork"],
}


@pytest.fixture
def fresh_postgres():
    """A database of its own on the local server, dropped afterwards."""
    import sqlalchemy

    name = f"t_live_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(POSTGRES_URL.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'create database "{name}"'))
    except Exception as exc:
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is not usable: {exc}")
    yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f'drop database if exists "{name}" with (force)'))
    admin.dispose()


def _args(url: str, trials: int) -> list[str]:
    return ["run", "--replay", str(PNPOLY), "--storage", url, "--study-name", "lost", "--trials", str(trials),
            "--seed", "5"]


def _isolated_worker(isolation: str, url: str, trials: int, marker: Path, env: dict) -> subprocess.Popen:
    cmd = [*ISOLATION[isolation], sys.executable, str(ROOT / "tests" / "kill_at.py"), "record", "2", *_args(url, trials)]
    return subprocess.Popen(cmd, env={**env, "KILL_AT_PAUSE": str(marker)}, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _survivor(url: str, trials: int, env: dict) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "tuner", *_args(url, trials)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _study(url: str) -> optuna.Study:
    return optuna.load_study(study_name="lost", storage=open_storage(url))


def _paused_trial(url: str, marker: Path) -> optuna.trial.FrozenTrial:
    wait_for(marker.exists, 120, "the isolated worker to stop mid-trial")
    running = [t for t in _study(url).get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
    assert len(running) == 1, [(t.number, t.state.name) for t in running]
    return running[0]


def _measured(study: optuna.Study) -> list:
    return [t for t in study.trials if t.state.is_finished() and t.user_attrs.get("status") not in ("killed", "interrupted")]


@pytest.mark.slow
@pytest.mark.parametrize("store", ["postgres", "journal"])
@pytest.mark.parametrize("isolation", ["hostname", "pidns"])
def test_lost_worker_on_another_host_or_pid_namespace(isolation, store, tmp_path, request, monkeypatch):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("this test needs unshare(1) and root (namespaces)")
    for key, value in LEASE_ENV.items():
        monkeypatch.setenv(key, value)  # this process judges leases as the workers do
    url = request.getfixturevalue("fresh_postgres") if store == "postgres" else str(tmp_path / "lost.log")
    env = {**os.environ, **LEASE_ENV}
    marker = tmp_path / "paused"

    # 1. alive: its trial survives a survivor's start and run, and it finishes it
    worker = _isolated_worker(isolation, url, BUDGET, marker, env)
    try:
        paused = _paused_trial(url, marker)
        attrs = paused.user_attrs
        assert attrs[liveness.PID_SPACE_ATTR] != liveness.pid_space() if isolation == "pidns" else attrs[liveness.PID_SPACE_ATTR] == liveness.pid_space()
        if isolation == "pidns":
            assert attrs[liveness.PID_ATTR] == 1  # what the host took for its own init
        else:
            assert attrs[liveness.HOST_ATTR] == "lost-host"
        study = _study(url)
        ages = liveness.lease_ages(study, [paused])
        assert paused._trial_id in ages and ages[paused._trial_id] < liveness.grace_s()  # the lease is recorded (item 1)
        _survivor(url, BUDGET, env)
        assert _study(url).trials[paused.number].state == TrialState.RUNNING  # a live trial is not failed
        marker.unlink()  # let it go on
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-2000:]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
    study = _study(url)
    assert len(_measured(study)) == BUDGET
    assert not [t.number for t in study.trials if t.state == TrialState.FAIL]

    # 2. lost: killed mid-trial; the survivors' next start ends the study at its budget
    worker = _isolated_worker(isolation, url, BUDGET + MORE, marker, env)
    try:
        lost = _paused_trial(url, marker)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    if isolation == "pidns":  # no PID tells; the lease expires (wait on it, bounded)
        wait_for(lambda: liveness.lease_ages(_study(url), [lost]).get(lost._trial_id, 0) > liveness.grace_s(),
                 120, "the lost worker's lease to expire")
    before = {t.number: (t.state, t.value) for t in _study(url).trials if t.state.is_finished()}
    _survivor(url, BUDGET + MORE, env)
    study = _study(url)
    trials = study.trials
    assert not [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert {n: (trials[n].state, trials[n].value) for n in before} == before  # nothing finished lost or changed
    assert len(_measured(study)) == BUDGET + MORE
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert [t.number for t in failed] == [lost.number]  # no live trial failed
    assert failed[0].user_attrs["status"] == "killed"
    retried = [t for t in trials if t.user_attrs.get("requeued_from") == lost.number]
    assert len(retried) == 1 and retried[0].params == lost.params and retried[0].state in (TrialState.COMPLETE, TrialState.PRUNED)
