"""tuner/store/optuna_private.py against the installed Optuna: each internal it reaches still works.

A new Optuna release fails the pin first: check each function below against it, then move
the pin (tuner.store.optuna_private.PINNED_OPTUNA).
"""

import os

import optuna
import pytest
from optuna.storages import InMemoryStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from tuner.store import optuna_private as op


def test_pinned_to_the_installed_optuna():
    assert optuna.__version__ == op.PINNED_OPTUNA, (
        f"Optuna {optuna.__version__} installed, tuner/store/optuna_private.py was checked against {op.PINNED_OPTUNA}")


def test_storage_and_system_attrs():
    storage = InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="a")
    assert op.storage_of(study) is storage
    optuna.create_study(storage=op.storage_of(study), study_name="b")
    assert sorted(optuna.get_all_study_names(storage)) == ["a", "b"]
    op.set_study_system_attr(study, "dashboard:note_ver", 3)
    assert op.study_system_attrs(study)["dashboard:note_ver"] == 3
    first, second = study.ask(), study.ask()
    assert storage.get_trial(op.trial_id(second)).number == second.number != first.number
    frozen = study.get_trials(deepcopy=False)[1]
    assert op.trial_id(frozen) == op.trial_id(second)


def test_a_database_storage_is_told_apart_behind_optunas_cache(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    study = optuna.create_study(storage=url, study_name="a")  # Optuna wraps an RDB storage in its cache
    assert op.is_database(op.storage_of(study)) and op.is_database(optuna.storages.RDBStorage(url))
    assert not op.is_database(InMemoryStorage())
    assert not op.is_database(JournalStorage(JournalFileBackend(str(tmp_path / "j.log"))))


def test_trial_attrs_and_fail():
    study = optuna.create_study()

    def objective(trial):
        trial.suggest_int("x", 0, 9)
        op.set_trial_system_attr(trial, "tuner:measuring", True)
        return 1.0

    study.optimize(objective, n_trials=3)
    assert all(t.system_attrs["tuner:measuring"] for t in study.trials)

    running = study.ask()
    frozen = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))[0]
    op.fail_trial(study, frozen, {"status": "killed", "reason": "runner died"})
    failed = study.trials[running.number]
    assert failed.state == TrialState.FAIL and failed.user_attrs == {"status": "killed", "reason": "runner died"}
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        op.fail_trial(study, frozen, {"status": "again"})


def test_journal_lock_and_file(tmp_path):
    path = tmp_path / "j.log"
    backend = JournalFileBackend(str(path))
    storage = JournalStorage(backend)
    optuna.create_study(storage=storage, study_name="j")
    assert op.journal_file(storage) == str(path) and op.journal_file(InMemoryStorage()) is None
    before = set(os.listdir(tmp_path))
    with op.journal_lock(backend):
        held = set(os.listdir(tmp_path)) - before
        assert held, "the journal's lock file exists while held"
    assert set(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "journal"])
def test_set_user_attrs_stores_every_key_once(kind, tmp_path, request):
    url = {"sqlite": f"sqlite:///{tmp_path / 'a.db'}", "journal": None,
           "postgres": request.getfixturevalue("postgres_url") if kind == "postgres" else None}[kind]
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "a.log"))) if kind == "journal" else url
    study = optuna.create_study(storage=storage, study_name=f"attrs-{os.getpid()}-{kind}")
    attrs = {f"k{i}": i * 0.5 for i in range(20)} | {"status": "ok", "flags": "-DX=1"}
    trial = study.ask()
    trial.set_user_attr("k0", "overwritten")
    op.set_user_attrs(trial, attrs)
    assert trial.user_attrs == attrs  # the live trial sees them
    study.tell(trial, 1.0)
    assert study.trials[0].user_attrs == attrs  # and so does the storage
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):  # as Trial.set_user_attr on a finished trial
        op.set_user_attrs(trial, {"late": 1, "later": 2})
    assert "late" not in study.trials[0].user_attrs


def test_heartbeat_ages_and_a_lease_by_trial_id(tmp_path):
    """RDB: the age of each RUNNING trial's last heartbeat (the database's clock); journal: a
    system attribute written by trial id (tuner.store.liveness's lease)."""
    from tuner.store.storage import open_storage

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'h.db'}"))  # behind Optuna's cache
    beating, _silent, done = study.ask(), study.ask(), study.ask()
    op.storage_of(study).record_heartbeat(op.trial_id(beating))
    op.storage_of(study).record_heartbeat(op.trial_id(done))
    study.tell(done, 1.0)
    ages = op.heartbeat_ages(op.storage_of(study), op.study_id(study))
    assert set(ages) == {op.trial_id(beating)} and 0 <= ages[op.trial_id(beating)] < 60

    journal = JournalStorage(JournalFileBackend(str(tmp_path / "j.log")))
    jstudy = optuna.create_study(storage=journal)
    trial = jstudy.ask()
    op.set_trial_system_attr_by_id(journal, op.trial_id(trial), "tuner:lease", 12.5)
    assert jstudy.trials[0].system_attrs["tuner:lease"] == 12.5


@pytest.mark.parametrize("kind", ["sqlite", "memory", "journal"])
def test_read_trials_gives_asked_and_new_trials_as_they_are_now(kind, tmp_path):
    """``read_trials``: the trials named, then those from a number on, as get_trials sees them
    (Optuna's cache of an RDB storage without sorting the study; other storages by get_trials);
    ``TrialFeed`` reads again only the trials not finished at its last read; ``waiting_trials``
    as get_trials(states=(WAITING,))."""
    from tuner.store.storage import open_storage

    storage = {"sqlite": lambda: open_storage(f"sqlite:///{tmp_path / 'r.db'}"), "memory": InMemoryStorage,
               "journal": lambda: JournalStorage(JournalFileBackend(str(tmp_path / "r.log")))}[kind]()
    study = optuna.create_study(storage=storage)
    assert isinstance(op.storage_of(study), optuna.storages._CachedStorage) == (kind == "sqlite")
    feed = op.TrialFeed(study)
    assert op.read_trials(study, [], 0) == ([], 0) and feed.read() == []
    done, running = study.ask(), study.ask()
    study.tell(done, 1.0)
    study.enqueue_trial({"x": 1})
    assert [(t.number, t.state) for t in feed.read()] == [
        (0, TrialState.COMPLETE), (1, TrialState.RUNNING), (2, TrialState.WAITING)]
    assert [t.number for t in op.waiting_trials(study)] == [2]
    study.tell(running, 2.0)
    later = study.ask()  # takes the waiting trial 2
    study.ask()
    trials, total = op.read_trials(study, [2, 1], 3)
    assert [t.number for t in trials] == [2, 1, 3] and total == 4
    assert trials[0].state == TrialState.RUNNING and trials[1].state == TrialState.COMPLETE and trials[1].value == 2.0
    # the feed: 1 and 2 again (unfinished at its last read), then the new 3; 0 is not read again
    assert [(t.number, t.state) for t in feed.read()] == [
        (1, TrialState.COMPLETE), (2, TrialState.RUNNING), (3, TrialState.RUNNING)]
    assert op.waiting_trials(study) == []
    study.tell(later, 3.0)
    assert [(t.number, t.state) for t in feed.read()] == [(2, TrialState.COMPLETE), (3, TrialState.RUNNING)]
    assert [t.number for t in study.get_trials(deepcopy=False)] == [0, 1, 2, 3]


def test_the_modules_a_database_storage_imports_on_first_use(tmp_path):
    """A run imports these in a thread while its GPU worker starts (tuner.store.storage.OpeningStorage):
    none is imported before a database storage is opened, each is once it is."""
    import subprocess
    import sys

    code = f"""
import sys
import optuna
from tuner.store import optuna_private
from tuner.store.storage import open_storage
names = optuna_private.RDB_LAZY_MODULES
print(sorted(n for n in names if n in sys.modules))
open_storage("sqlite:///{tmp_path / 'a.db'}")
print(sorted(n for n in names if n not in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "[]"]


def test_a_server_storage_is_only_imported_while_the_worker_starts():
    """OpeningStorage opens a SQLite file on its thread (tests/test_storage_resume.py); a server's
    storage is imported there and opened when the run takes it (nothing is made on a server for a
    run that fails before)."""
    import subprocess
    import sys

    code = """
import sys, threading
from tuner.store import optuna_private
from tuner.store.storage import OpeningStorage
opening = OpeningStorage("postgresql+psycopg://nobody@127.0.0.1:9/none")
opening._thread.join()
print(all(n in sys.modules for n in optuna_private.RDB_LAZY_MODULES), opening._storage, opening._error)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "None", "None"]  # imported; no connection tried
