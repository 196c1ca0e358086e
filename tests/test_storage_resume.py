"""Storage backends, resume, binding to the setup, kill -9 then resume, redaction."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import FAKE_BACKEND, PNPOLY, ROOT, tuner
from tuner.errors import UserError
from tuner.store.storage import open_storage
from tuner.store.url import redact
from tuner.testing import run_summary as summary_of

STUDY = ROOT / "studies" / "example_sgemm.toml"


def run_replay(pnpoly, storage, trials, *extra):
    return tuner("run", "--replay", pnpoly, "--storage", storage, "--trials", trials, "--seed", 1, "--json", *extra)


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgres"])
def test_storage_runs_and_resumes(kind, tmp_path, pnpoly, request, unique_name):
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    elif kind == "journal":
        url = str(tmp_path / "store.log")
    else:
        url = request.getfixturevalue("postgres_url")
    first = summary_of(run_replay(pnpoly, url, 15, "--study-name", unique_name))
    assert first["trials"] == 15 and first["study"] == unique_name
    second = summary_of(run_replay(pnpoly, url, 25, "--study-name", unique_name))
    assert second["trials"] == 25  # resumed: 10 more, not 25 more
    study = optuna.load_study(study_name=unique_name, storage=open_storage(url))
    keys = [tuple(t.params.values()) for t in study.trials]
    assert len(set(keys)) == 25  # the sampler never repeats a config
    assert study.user_attrs["kind"] == "replay" and study.metric_names == ["ms"]
    if kind == "postgres":
        optuna.delete_study(study_name=unique_name, storage=open_storage(url))


def test_resume_refuses_another_setup(tmp_path, pnpoly):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    summary_of(run_replay(pnpoly, url, 5, "--study-name", "shared"))
    other = tmp_path / "other.json"
    data = json.loads(__import__("gzip").open(pnpoly).read())
    data["device_name"] = "Another GPU"
    other.write_text(json.dumps(data))
    refused = tuner("run", "--replay", other, "--storage", url, "--study-name", "shared", "--trials", 8)
    assert refused.returncode == 2
    assert "recorded under a different setup" in refused.stderr and "--accept-mismatch" in refused.stderr
    assert "--study-name NEW" in refused.stderr
    accepted = summary_of(tuner("run", "--replay", other, "--storage", url, "--study-name", "shared", "--trials", 8,
                                "--accept-mismatch", "--json"))
    assert accepted["trials"] == 8
    study = optuna.load_study(study_name="shared", storage=url)
    assert study.user_attrs["accepted_mismatches"][0]["differs"]


def test_a_storage_opened_while_the_worker_starts_is_taken_by_the_run(tmp_path):
    from optuna.storages import RDBStorage

    from tuner.store.storage import OpeningStorage

    url = f"sqlite:///{tmp_path / 'new.db'}"
    storage = OpeningStorage(url).take()
    assert isinstance(storage, RDBStorage) and (tmp_path / "new.db").exists()
    optuna.create_study(study_name="kept", storage=storage)
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["kept"]


@pytest.mark.parametrize("case", ["new", "there before"])
def test_a_run_that_fails_before_taking_its_storage_leaves_no_new_file(tmp_path, case):
    from tuner.store.storage import OpeningStorage

    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    if case == "there before":
        open_storage(url)  # an empty study file the user made
    opening = OpeningStorage(url)
    opening.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if case == "new" else ["s.db"])
    opening.discard()  # once is enough; a second does nothing


def test_a_new_study_file_made_meanwhile_by_another_process_is_kept(tmp_path):
    """--workers start together on a new file: each makes its schema aside; the first to take its
    storage names the file, the others open that one (their drafts are dropped, nothing replaced)."""
    from tuner.store.storage import OpeningStorage

    url = f"sqlite:///{tmp_path / 's.db'}"
    first, second = OpeningStorage(url), OpeningStorage(url)
    optuna.create_study(study_name="first", storage=first.take())
    optuna.create_study(study_name="second", storage=second.take())
    assert sorted(s.study_name for s in optuna.get_all_study_summaries(url)) == ["first", "second"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == ["s.db"]


def test_a_draft_left_by_a_killed_run_is_removed_by_the_next_opening(tmp_path):
    """A run killed while its worker started leaves its draft of a new study file; the next opening
    of that file removes it, and keeps the drafts of live processes and of processes it cannot judge."""
    from tuner.store import storage as storage_module
    from tuner.store.storage import OpeningStorage

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = storage_module._pid_space_tag()
    drafts = {"killed": f".s.db.{here}-{dead.pid}.ab_12.new", "running": f".s.db.{here}-{os.getpid()}.xyz.new",
              "another PID space": f".s.db.0000beef-{dead.pid}.q1.new", "another file's": f".t.db.{here}-{dead.pid}.q2.new"}
    for name in [*drafts.values(), f"{drafts['killed']}-wal"]:
        (tmp_path / name).write_bytes(b"")
    optuna.create_study(study_name="s", storage=OpeningStorage(f"sqlite:///{tmp_path / 's.db'}").take())
    left = {p.name for p in tmp_path.iterdir()}
    assert drafts["killed"] not in left and f"{drafts['killed']}-wal" not in left
    assert {drafts[k] for k in ("running", "another PID space", "another file's")} <= left and "s.db" in left


def test_an_error_opening_the_storage_is_raised_where_the_run_takes_it(tmp_path):
    import sqlite3

    from tuner.store.storage import OpeningStorage

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("create table invoices (id integer)")
    opening = OpeningStorage(f"sqlite:///{other}")
    with pytest.raises(UserError, match="belongs to another application"):
        opening.take()
    opening.discard()
    assert other.exists()  # not ours: never removed


def test_kill_9_mid_trial_then_resume_loses_nothing(tmp_path, cache_dir):
    """A real `tuner run` killed with SIGKILL mid-trial; the rerun re-queues the stale trial."""
    db = tmp_path / "kill.db"
    env = {**os.environ, "TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_TRIAL_DELAY_S": "1.5"}
    # the study chooses its reference from its first 2 configs: they are stored before the kill
    cmd = [sys.executable, "-m", "tuner", "run", str(STUDY), "--storage", f"sqlite:///{db}", "--trials", "8",
           "--cache-dir", str(cache_dir), "--no-pruner", "--reference-probe", "2"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"sqlite:///{db}"
    deadline = time.monotonic() + 120
    finished_before = []
    while time.monotonic() < deadline:
        time.sleep(0.3)
        # The run is stopped while we look, so what we see is what it is killed in: a trial seen
        # running with its config cannot finish between the look and the kill.
        proc.send_signal(signal.SIGSTOP)
        # Read-only peeks with sqlite3: opening an Optuna storage here would race the run's
        # own schema creation.
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
                states = [s for (s,) in conn.execute("select state from trials order by number")]
                # a whole config: as many params as the fullest trial (one being sampled holds part)
                running_with_config = conn.execute(
                    "select count(*) from (select t.trial_id from trials t join trial_params p on p.trial_id = t.trial_id "
                    "where t.state = 'RUNNING' group by t.trial_id having count(*) = "
                    "(select max(n) from (select count(*) as n from trial_params group by trial_id)))").fetchone()[0]
        except sqlite3.Error:
            states, running_with_config = [], 0
        if sum(s in ("COMPLETE", "PRUNED") for s in states) >= 2 and running_with_config:
            proc.send_signal(signal.SIGKILL)
            break
        proc.send_signal(signal.SIGCONT)
    finished_before = [(t.number, t.value, t.user_attrs.get("status"))
                       for t in optuna.load_study(study_name="example_sgemm", storage=url).trials if t.state.is_finished()]
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    killed_study = optuna.load_study(study_name="example_sgemm", storage=url)
    stale = [t for t in killed_study.trials if t.state == TrialState.RUNNING]
    assert len(stale) >= 1  # the measured trial, and those asked ahead of it (compiling)

    env["FAKE_TRIAL_DELAY_S"] = "0"
    rerun = subprocess.run(cmd + ["--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    study = optuna.load_study(study_name="example_sgemm", storage=url)
    assert study.user_attrs["reference_choice"] == killed_study.user_attrs["reference_choice"]  # the same reference
    by_number = {t.number: t for t in study.trials}
    for number, value, status in finished_before:  # nothing finished was lost or changed
        assert by_number[number].value == value and by_number[number].user_attrs.get("status") == status
    axes = set().union(*(t.params for t in study.trials if t.state == TrialState.COMPLETE))
    for trial in stale:
        killed = by_number[trial.number]
        assert killed.state == TrialState.FAIL and killed.user_attrs["status"] == "killed"
        retried = [t for t in study.trials if t.user_attrs.get("requeued_from") == killed.number]
        if set(trial.params) == axes:  # killed before or while its config was sampled: nothing to try again
            assert len(retried) == 1 and retried[0].params == trial.params and retried[0].state.is_finished()
        else:
            assert retried == []  # part of a config is never completed at random
    assert any(set(t.params) == axes for t in stale)  # the trial being measured had its config
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]


def test_bad_storage_urls_are_one_line(tmp_path):
    with pytest.raises(UserError, match="cannot open storage postgresql\\+psycopg://u:\\*\\*\\*@127.0.0.1:1/db"):
        open_storage("postgresql+psycopg://u:secret@127.0.0.1:1/db")
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    with pytest.raises(UserError, match="is damaged .*move it aside"):
        open_storage(f"sqlite:///{corrupt}")
    with pytest.raises(UserError, match="is not a URL"):
        open_storage("somewhere")
    assert corrupt.read_bytes().startswith(b"this is not")  # nothing overwritten


def test_password_never_printed(tmp_path):
    result = tuner("status", "--storage", "postgresql+psycopg://alice:hunter2@127.0.0.1:1/db")
    assert result.returncode == 2
    assert "hunter2" not in result.stderr + result.stdout and "alice:***@" in result.stderr
    assert redact("x postgresql://a:b@h/d y sqlite:///f.db") == "x postgresql://a:***@h/d y sqlite:///f.db"


def test_sqlite_refused_for_several_workers(tmp_path):
    result = tuner("run", STUDY, "--workers", 2, "--storage", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.returncode == 2 and "SQLite cannot be shared" in result.stderr and ".log" in result.stderr


def test_a_new_sqlite_study_file_is_as_readable_as_any_file_its_user_makes(tmp_path):
    """A teammate, or optuna-dashboard run as another user, reads it (the umask decides, as for a journal)."""
    db = tmp_path / "s.db"
    assert tuner("run", "--replay", PNPOLY, "--storage", f"sqlite:///{db}", "--trials", 2).returncode == 0
    (tmp_path / "plain").touch()
    assert db.stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777


def test_a_storage_given_as_a_database_file_path_is_that_sqlite_file(tmp_path, monkeypatch):
    """The README's `--storage b.db`, as the Python API takes it: a path ending .db, .sqlite or .sqlite3."""
    from tests.conftest import PNPOLY
    from tuner.testing import cli

    monkeypatch.chdir(tmp_path)
    run = cli("run", "--replay", PNPOLY, "--storage", "b.db", "--trials", 3)
    assert run.returncode == 0, run.stderr
    assert "study pnpoly_RTX_3090.replay in sqlite:///b.db: 3 trials" in run.stdout
    assert (tmp_path / "b.db").is_file()
    assert cli("status", "--storage", "b.db").returncode == 0
    with pytest.raises(UserError, match="is not a URL"):
        open_storage("somewhere.txt")
