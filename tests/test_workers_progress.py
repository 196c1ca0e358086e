"""``tuner run --workers N`` while it runs and as it ends: the study's progress on stderr (read from
the shared storage), and the summary a run of one process prints, with its workers counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import optuna
import pytest
import sqlalchemy.exc
from optuna.trial import TrialState, create_trial

from tests.conftest import FAKE_BACKEND, PNPOLY, ROOT, tuner
from tests.test_reliability import stop_when
from tuner import progress
from tuner.run import watch
from tuner.run.watch import StudyWatch
from tuner.store.storage import open_storage

STUDY = ROOT / "studies" / "example_sgemm.toml"
REPLAY_NAME = "pnpoly_RTX_3090.replay"
SUMMARY = ("study ", "best: ", "the recording's fastest config: ", "this run: ")


def _summary_lines(stdout: str, ran: bool = True) -> list[str]:
    """The summary's lines, as a replay ends (without "this run" where no trial ran)."""
    lines = stdout.splitlines()
    expected = SUMMARY if ran else SUMMARY[:-1]
    assert len(lines) == len(expected), stdout
    assert [line[:len(start)] for line, start in zip(lines, expected, strict=True)] == list(expected), stdout
    return lines


def test_workers_show_the_studys_progress_and_end_as_one_process_does(tmp_path):
    """Off a terminal the progress is a line now and then, and one as the workers end: the study's
    budget reached, its best as the summary names it. The summary has the lines of a run of one process."""
    log = tmp_path / "s.log"
    run = tuner("run", "--replay", PNPOLY, "--storage", log, "--trials", 20, "--workers", 2, "--seed", 1)
    assert run.returncode == 0, run.stderr
    progress = [line for line in run.stderr.splitlines() if line.startswith(f"{REPLAY_NAME} ")]
    assert progress and progress[-1].startswith(f"{REPLAY_NAME} 20/20 trials, best="), run.stderr
    study, best, recorded, this_run = _summary_lines(run.stdout)
    assert study.startswith(f"study {REPLAY_NAME} in {log}: 20 trials (")
    assert progress[-1].split(", best=")[1].split(" (")[0] == best.removeprefix("best: ").split(" (trial")[0]
    assert this_run.startswith("this run: 20 trials by 2 workers in ")  # (a run of one process has no "by")

    alone = tuner("run", "--replay", PNPOLY, "--storage", log, "--study-name", "alone", "--trials", 20, "--seed", 1)
    assert alone.returncode == 0, alone.stderr
    assert _summary_lines(alone.stdout)[2].split(" (")[0] == recorded.split(" (")[0]  # the same recording's fastest

    again = tuner("run", "--replay", PNPOLY, "--storage", log, "--trials", 20, "--workers", 2, "--seed", 1)
    assert again.returncode == 0, again.stderr
    assert _summary_lines(again.stdout, ran=False)[:2] == [study, best]  # the budget was reached: nothing ran
    assert "the study holds its --trials 20 already: nothing ran (raise --trials to go on)" in again.stderr, again.stderr

    more = tuner("run", "--replay", PNPOLY, "--storage", log, "--trials", 30, "--workers", 2, "--seed", 1, "--json")
    assert more.returncode == 0, more.stderr
    (line,) = more.stdout.splitlines()  # one JSON line, the progress left out as a run of one process leaves it
    summary = json.loads(line)
    assert more.stderr == ""
    assert 10 <= summary["trials_run"] <= summary["trials"] - 20 and summary["workers"] == 2
    assert 0 < summary["first_trial_s"] <= summary["run_s"] and summary["recorded_best_ms"] > 0
    assert 0 < summary["fraction_of_recorded_best"] <= 1


def test_workers_end_with_the_reference_and_the_confirmation_as_one_process_does(tmp_path):
    """A study whose first run chose its reference, resumed by two workers: their summary names the
    reference as that run's did, and the winner is confirmed once, after the last trial of either
    worker (not once by each, each as its own trials end), and said before it."""
    url = str(tmp_path / "s.log")
    common = ["--storage", url, "--cache-dir", tmp_path / "cache", "--seed", 3]
    env = {"TUNER_WORKER_BACKEND": FAKE_BACKEND}
    first = tuner("run", STUDY, "--trials", 6, *common, env=env)
    assert first.returncode == 0, first.stderr
    (reference,) = [line for line in first.stdout.splitlines() if line.startswith("reference: ")]
    run = tuner("run", STUDY, "--trials", 10, "--workers", 2, *common, env=env)
    assert run.returncode == 0, run.stderr
    assert reference in run.stdout.splitlines(), run.stdout
    assert [line for line in run.stderr.splitlines() if line.startswith("confirmed winner: trial ")], run.stderr
    assert "example_sgemm 10/10 trials, best=" in run.stderr
    study = optuna.load_study(study_name="example_sgemm", storage=open_storage(url, create=False))
    first_confirmation, confirmation = study.user_attrs["confirmations"]  # the first run's, and the workers' one
    last_trial = max(t.datetime_complete for t in study.get_trials(deepcopy=False) if t.datetime_complete)
    assert confirmation["at"] >= last_trial.astimezone().isoformat(timespec="seconds")
    assert f"(trial {confirmation['winner']})" in next(ln for ln in run.stdout.splitlines() if ln.startswith("best: "))


def test_a_ctrl_c_stops_workers_while_the_run_watches_their_study(tmp_path):
    """The terminal's Ctrl-C reaches the run while it reads the study or waits: one line, exit 130,
    nothing left RUNNING."""
    log = tmp_path / "s.log"
    run = subprocess.Popen([sys.executable, "-m", "tuner", "run", "--replay", PNPOLY, "--storage", log, "--trials", "4000",
                            "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def some_trials() -> bool:
        study = optuna.load_study(study_name=REPLAY_NAME, storage=open_storage(str(log), create=False))
        return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))) >= 20

    err = stop_when(run, some_trials, "20 trials")
    assert run.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("tuner: interrupted; workers stopped"), err[-2000:]
    study = optuna.load_study(study_name=REPLAY_NAME, storage=open_storage(str(log), create=False))
    assert not study.get_trials(states=(TrialState.RUNNING,))


# -- the watch itself -----------------------------------------------------------------------------


@pytest.fixture
def every_read(monkeypatch):
    """Each poll reads the study; a line comes with each tenth of the budget, never for the time passed."""
    monkeypatch.setattr(watch, "POLL_S", 0.0)
    monkeypatch.setattr(progress, "LINE_EVERY_S", 86400.0)


def _trial(ms: float, status: str = "ok") -> optuna.trial.FrozenTrial:
    return create_trial(value=ms, user_attrs={"status": status})


def test_the_watch_waits_for_the_study_and_shows_a_line_as_the_count_moves(tmp_path, capsys, every_read):
    storage = open_storage(str(tmp_path / "s.log"))
    seen = StudyWatch(storage, "w", 3, "lines")
    seen.poll()  # no study yet: the first worker creates it
    assert capsys.readouterr().err == ""
    study = optuna.create_study(study_name="w", storage=storage)
    study.add_trial(_trial(2.0))
    seen.poll()
    seen.poll()  # the same count: no line
    study.add_trials([_trial(1.5), _trial(1.5, "duplicate")])  # a reused value takes no place in the budget
    seen.poll()
    seen.finish()  # the last count was said: no line again
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["w 1/3 trials, best=2 ms", "w 2/3 trials, best=1.5 ms"]


def test_a_storage_that_fails_a_read_is_read_again_and_a_ctrl_c_in_a_read_stops(tmp_path, capsys, every_read, monkeypatch):
    storage = open_storage(str(tmp_path / "s.log"))
    optuna.create_study(study_name="w", storage=storage).add_trial(_trial(2.0))
    read = storage.get_all_trials

    def fails(*args, **kwargs):
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # no budget: a line as the count moves after a while
    seen = StudyWatch(storage, "w", None, "lines")
    monkeypatch.setattr(storage, "get_all_trials", fails)
    seen.poll()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(storage, "get_all_trials", read)
    seen.poll()
    assert capsys.readouterr().err.startswith("w 1 trials, best=2 ms")

    def interrupted(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("the read was cut short")) from None

    monkeypatch.setattr(storage, "get_all_trials", interrupted)
    with pytest.raises(KeyboardInterrupt):
        seen.poll()


def test_the_watch_on_a_terminal_is_a_bar(tmp_path, capsys, every_read):
    storage = open_storage(str(tmp_path / "s.log"))
    optuna.create_study(study_name="w", storage=storage).add_trials([_trial(2.0), _trial(1.25)])
    seen = StudyWatch(storage, "w", 4, "bar")
    seen.poll()
    seen.finish()
    err = capsys.readouterr().err
    assert "2/4" in err and "best=1.25 ms" in err and "trials done" not in err
