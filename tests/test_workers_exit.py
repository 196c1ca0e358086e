"""``tuner run --workers N`` when one worker is killed (issue 33, item 11): the parent says which
worker and by what signal, exits with the documented code 3 (not 247, minus SIGKILL seen by
the shell), and the next start of the same command ends the study at its budget."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import FAKE_BACKEND, ROOT
from tests.test_reliability import stop_when, wait_for
from tuner.run.scale import WORKER_KILLED, exit_code
from tuner.store.storage import open_storage

STUDY = ROOT / "studies" / "example_sgemm.toml"
BUDGET = 6


def test_exit_code_rule():
    assert exit_code([0, 0]) == 0
    assert exit_code([0, -signal.SIGKILL]) == WORKER_KILLED == 3
    assert exit_code([-signal.SIGKILL, 2, 1]) == 2  # a worker's own error says more


def _running_pid(url: str, name: str, pids: set[int]) -> int | None:
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(url, create=False))
    except Exception:  # not created yet
        return None
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("runner_pid") in pids and t.params:
            return t.user_attrs["runner_pid"]
    return None


def _children(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(p) for p in f.read().split()}


def test_a_worker_killed_mid_trial(tmp_path, unique_name):
    url = str(tmp_path / "w.log")
    args = ["run", str(STUDY), "--workers", "2", "--storage", url, "--study-name", unique_name, "--trials", str(BUDGET),
            "--cache-dir", str(tmp_path / "cache"), "--no-pruner", "--seed", "3"]
    env = {**os.environ, "TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_TRIAL_DELAY_S": "1.0"}
    parent = subprocess.Popen([sys.executable, "-m", "tuner", *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        victim = wait_for(lambda: _running_pid(url, unique_name, _children(parent.pid)), 180, "a worker mid-trial")
        os.kill(victim, signal.SIGKILL)
        out, err = parent.communicate(timeout=300)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert parent.returncode == WORKER_KILLED, (parent.returncode, err[-2000:])
    assert "was killed by SIGKILL" in err and "run the same command to resume" in err, err[-2000:]
    assert "Traceback" not in err

    env["FAKE_TRIAL_DELAY_S"] = "0"
    rerun = subprocess.run([sys.executable, "-m", "tuner", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    trials = optuna.load_study(study_name=unique_name, storage=open_storage(url)).trials
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    measured = [t for t in trials if t.state.is_finished() and t.user_attrs.get("status") not in ("killed", "interrupted")]
    assert len(measured) >= BUDGET


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_ctrl_c_or_a_sigterm_stops_a_run_in_one_line(tmp_path, how):
    """A terminal's Ctrl-C reaches every process of the group: the GPU worker and the compile helpers
    leave the stop to the run, which prints its one line (no child's traceback under it). SIGTERM
    (Slurm, docker stop) to the run alone stops it the same way: no trial is left RUNNING."""
    db = tmp_path / "s.db"
    env = {**os.environ, "TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_TRIAL_DELAY_S": "0.5"}
    run = subprocess.Popen([sys.executable, "-m", "tuner", "run", ROOT / "studies" / "example_sgemm.toml", "--storage",
                            f"sqlite:///{db}", "--trials", "200"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True, env=env, cwd=tmp_path)
    err = stop_when(run, lambda: db.exists() and len(optuna.load_study(study_name="example_sgemm", storage=f"sqlite:///{db}")
                                                    .get_trials(states=(TrialState.COMPLETE,))) >= 2, "two trials",
                    *((signal.SIGINT, True) if how == "ctrl-c" else (signal.SIGTERM, False)))
    assert run.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "tuner: interrupted; finished trials are stored, run the same command to resume"
    study = optuna.load_study(study_name="example_sgemm", storage=f"sqlite:///{db}")
    assert not study.get_trials(states=(TrialState.RUNNING,))


@pytest.mark.parametrize("gap_s", [0.2, 0.5])
def test_a_second_ctrl_c_while_the_first_stops_the_builds_still_ends_the_command(tmp_path, gap_s):
    """An impatient user: Ctrl-C, then again while the compile pool shuts down. The pool, dropped as
    the second interrupt unwound its shutdown, left its processes waiting for work, and the
    interpreter's exit joined them for ever."""
    import time

    check = subprocess.Popen([sys.executable, "-m", "tuner", "check", "--compile", "--all",
                              ROOT / "studies" / "patch_embed_sm90a.toml"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True, cwd=tmp_path,
                             env={**os.environ, "TUNER_CACHE_DIR": str(tmp_path / "cache")})
    try:
        wait_for(lambda: len(list((tmp_path / "cache").glob("*.cubin"))) >= 2, 120, "two builds")
        os.killpg(check.pid, signal.SIGINT)
        time.sleep(gap_s)
        os.killpg(check.pid, signal.SIGINT)
        _, err = check.communicate(timeout=60)
    finally:
        if check.poll() is None:
            os.killpg(check.pid, signal.SIGKILL)
            check.wait()
    assert check.returncode in (130, -signal.SIGINT) and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == "tuner: interrupted"


def test_a_ctrl_c_while_the_command_ends_its_helpers_is_ignored(monkeypatch, capsys):
    """The command is over (a first Ctrl-C stopped it): a second one, landing while its helpers are
    ended, has nothing left to stop and cuts nothing short."""
    import tuner.cli.commands
    from tuner.cli import launch

    ended = []

    def stop_helpers_interrupted() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # delivered to this, the main thread, before the call returns
        ended.append(True)

    monkeypatch.setattr(tuner.cli.commands, "main", lambda argv, **_: 130)
    monkeypatch.setattr(launch, "stop_helpers", stop_helpers_interrupted)
    handler = signal.getsignal(signal.SIGINT)  # (an earlier command of this process may have set its own)
    assert handler not in (signal.SIG_IGN, None)
    assert launch.main(["status", "nothing.db"]) == 130
    assert ended == [True]
    assert signal.getsignal(signal.SIGINT) is handler  # put back as it was


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


@pytest.mark.parametrize("children", [1, 2, 3])
def test_a_ctrl_c_while_the_run_starts_its_worker_and_helpers_is_one_line(tmp_path, children):
    """The terminal's Ctrl-C reaches the worker and the compile helpers' forkserver while they still
    import: they ignore it from their first instruction, so no traceback of theirs is printed."""
    import time

    run = subprocess.Popen([sys.executable, "-m", "tuner", "run", ROOT / "studies" / "fc2_sm90a.toml", "--storage",
                            f"sqlite:///{tmp_path / 's.db'}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True, cwd=tmp_path,
                           env={**os.environ, "TUNER_WORKER_BACKEND": FAKE_BACKEND, "TUNER_CACHE_DIR": str(tmp_path / "c")})
    try:
        deadline = time.monotonic() + 60
        while len(_children(run.pid)) < children and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.005)
        os.killpg(run.pid, signal.SIGINT)  # the children have just been started
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert len(err.strip().splitlines()) == 1 and err.startswith("tuner: interrupted"), err[-3000:]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_whose_interrupt_a_finalizer_dropped_is_raised_again(monkeypatch):
    """Python prints and drops a KeyboardInterrupt raised in a weakref callback (SQLAlchemy has some): a SIGTERM
    that lands there must still stop the run, at the next wait on the worker or the next trial."""
    import gc
    import weakref

    from tuner import lifetime

    monkeypatch.setattr(lifetime, "_stop_asked", False)
    lifetime.stop_if_asked()  # nothing asked: nothing raised

    class Thing:
        pass

    thing = Thing()
    keep = weakref.ref(thing, lambda ref: lifetime._raise_interrupt(signal.SIGTERM, None))
    del thing
    gc.collect()  # the callback's KeyboardInterrupt is dropped ("Exception ignored in ...")
    assert keep() is None
    with pytest.raises(KeyboardInterrupt):
        lifetime.stop_if_asked()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_inside_a_deferred_block_is_raised_once_the_block_is_done(monkeypatch, sig):
    """What the run stores in one step (a trial asked and known to the run) is never cut in half by a
    stop: Ctrl-C, and SIGTERM as ``tuner run`` handles it, wait for the block's end."""
    import time

    from tuner import lifetime

    monkeypatch.setattr(lifetime, "_stop_asked", False)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        lifetime.stop_on_sigterm()
        finished = False
        with pytest.raises(KeyboardInterrupt):
            with lifetime.stop_deferred():
                os.kill(os.getpid(), sig)
                time.sleep(0.05)  # the handler runs here, in this thread
                finished = True
        assert finished
        assert {s: signal.getsignal(s) for s in before} == {s: lifetime._raise_interrupt for s in before}
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_worker_of_a_run_stops_once_on_the_runs_sigterm_and_ignores_the_terminals_ctrl_c(tmp_path):
    """The terminal's Ctrl-C reaches each worker of `tuner run --workers N` as it reaches the run, which
    then stops each worker itself: a worker taking both stopped twice, and the second stop cut short
    the first's clean-up (trials left RUNNING). A worker ignores the Ctrl-C and stops on the run's
    SIGTERM, its trials finished or queued again."""
    import time

    from tests.conftest import PNPOLY
    from tuner.run.session import PARENT_ENV

    log = tmp_path / "s.log"
    worker = subprocess.Popen([sys.executable, "-m", "tuner", "worker", "--replay", PNPOLY, "--storage", log,
                               "--trials", "4000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, PARENT_ENV: str(os.getpid())})
    try:
        storage = None

        def some_trials() -> bool:
            nonlocal storage
            if not log.exists():
                return False
            storage = storage or open_storage(str(log), create=False)
            studies = optuna.get_all_study_names(storage)
            return bool(studies) and len(optuna.load_study(study_name=studies[0], storage=storage).trials) >= 20

        wait_for(some_trials, 120, "20 trials")
        worker.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert worker.poll() is None, worker.communicate()[1][-2000:]  # the Ctrl-C is the run's to act on
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode in (130, 143, -signal.SIGTERM) and "Traceback" not in err, err[-2000:]
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=open_storage(str(log), create=False))
    assert not study.get_trials(states=(TrialState.RUNNING,)) and len(study.trials) < 4000
