"""A run killed with SIGKILL at each point of a trial's life, on each storage: the rerun of
the same command ends with the budget's worth of measured trials and nothing RUNNING. A run
stopped by Ctrl-C at each point leaves nothing RUNNING already, before any rerun."""

import logging
import os
import signal
import sqlite3
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import FAKE_BACKEND, ROOT
from tuner.store.storage import open_storage

pytestmark = pytest.mark.slow  # processes killed at each point of a run: minutes

STUDY = ROOT / "studies" / "example_sgemm.toml"
BUDGET = 6
POINTS = ["ask", "sample", "admit", "compile", "measure", "record", "tell"]
#: statuses of trials that were stopped, not measured: the config is queued again
STOPPED = {"killed", "interrupted"}


def _url(kind, tmp_path, request):
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'kill.db'}"
    if kind == "journal":
        return str(tmp_path / "kill.log")
    return request.getfixturevalue("postgres_url")


def _args(url, name, cache_dir):
    return ["run", str(STUDY), "--storage", url, "--study-name", name, "--trials", str(BUDGET),
            "--cache-dir", str(cache_dir), "--no-pruner", "--seed", "3"]


def _env(**extra):
    return {**os.environ, "TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_TRIAL_DELAY_S": "0.05", **extra}


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgres"])
@pytest.mark.parametrize("point", POINTS)
def test_killed_at_any_point_then_resumed(point, kind, tmp_path, cache_dir, request, unique_name):
    url = _url(kind, tmp_path, request)
    args, env = _args(url, unique_name, cache_dir), _env()
    # capture_output: the call returns only once every process holding the run's stderr is
    # gone, so a compile process outliving the kill fails this test by its timeout
    killed = subprocess.run([sys.executable, str(ROOT / "tests" / "kill_at.py"), point, "3", *args],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stderr[-2000:]}"
    _resumes_to_the_budget(url, unique_name, args, env)


@pytest.mark.parametrize("point", POINTS)
def test_ctrl_c_at_any_point_leaves_nothing_running(point, tmp_path, cache_dir, unique_name):
    url = f"sqlite:///{tmp_path / 'int.db'}"
    args = _args(url, unique_name, cache_dir)
    stopped = subprocess.run([sys.executable, str(ROOT / "tests" / "kill_at.py"), point, "3", *args],
                             env=_env(KILL_AT_SIGNAL="SIGINT"), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 130, f"not stopped at {point}: {stopped.stderr[-2000:]}"
    assert "interrupted" in stopped.stderr and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    trials = optuna.load_study(study_name=unique_name, storage=open_storage(url)).trials
    assert not [t.number for t in trials if t.state == TrialState.RUNNING], [(t.number, t.state.name) for t in trials]
    _resumes_to_the_budget(url, unique_name, args, _env())


def _resumes_to_the_budget(url, unique_name, args, env):
    storage = open_storage(url)
    before = optuna.load_study(study_name=unique_name, storage=storage).trials
    finished_before = {t.number: (t.state, t.value) for t in before if t.state.is_finished()}

    rerun = subprocess.run([sys.executable, "-m", "tuner", *args], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    study = optuna.load_study(study_name=unique_name, storage=open_storage(url))
    trials = study.trials
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    for number, (state, value) in finished_before.items():  # nothing finished was lost or changed
        assert (trials[number].state, trials[number].value) == (state, value)
    measured = [t for t in trials if t.state.is_finished() and t.user_attrs.get("status") not in STOPPED]
    assert len(measured) == BUDGET, [(t.number, t.state.name, t.user_attrs.get("status")) for t in trials]
    assert len({tuple(sorted(t.params.items())) for t in measured}) == BUDGET  # no config measured twice
    if url.startswith("postgresql"):
        optuna.delete_study(study_name=unique_name, storage=storage)


def test_a_query_cut_by_ctrl_c_prints_no_storage_traceback(tmp_path, capsys):
    """Ctrl-C in a query's fetch: SQLAlchemy invalidates the connection (closes it), then closes the
    result's cursor on it on the way out, fails, and logs "Error closing cursor" with both tracebacks
    (the Ctrl-C test above at ``compile`` printed that once, the signal meeting the main thread in a
    fetch). The run says "interrupted" in one line instead; SQLAlchemy's other records still reach
    stderr, passwords hidden."""
    import sqlalchemy as sa
    from sqlalchemy import orm

    from tuner.cli import commands as cli

    url = f"sqlite:///{tmp_path / 'logs.db'}"
    optuna.create_study(storage=url, study_name="logs")
    assert cli.main(["status", "--storage", url]) == 0
    capsys.readouterr()

    class CutCursor(sqlite3.Cursor):
        def fetchall(self):
            raise KeyboardInterrupt  # as a Ctrl-C arriving while the driver reads rows

    class CutConnection(sqlite3.Connection):
        def cursor(self, factory=CutCursor):
            return super().cursor(factory)

    class Base(orm.DeclarativeBase):
        pass

    class Study(Base):  # Optuna's table, read through the ORM as Optuna reads it
        __tablename__ = "studies"
        study_id = sa.Column(sa.Integer, primary_key=True)

    logged = []
    seen = logging.Handler()
    seen.emit = logged.append  # type: ignore[method-assign]
    logging.getLogger("sqlalchemy").addHandler(seen)
    try:
        engine = sa.create_engine(url, connect_args={"factory": CutConnection})
        with pytest.raises(KeyboardInterrupt), orm.Session(engine) as session:
            session.query(Study).all()
        engine.dispose()
    finally:
        logging.getLogger("sqlalchemy").removeHandler(seen)
    assert [r.getMessage() for r in logged] == ["Error closing cursor"]  # SQLAlchemy's own record, as in the failure
    assert capsys.readouterr().err == ""
    pool_log = logging.getLogger("sqlalchemy.pool.impl.QueuePool")
    try:
        raise sqlite3.OperationalError("could not reach postgresql+psycopg://tuner:s3cret-pw@db/tuning")
    except sqlite3.OperationalError:
        pool_log.error("Exception during reset or similar", exc_info=True)
    err = capsys.readouterr().err
    assert "Exception during reset or similar" in err and "OperationalError" in err and "s3cret-pw" not in err, err
