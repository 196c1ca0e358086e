"""The paired objective end to end: `tuner run` on the worker double, then `tuner confirm` and `tuner best`.

Compiles are real NVRTC; the worker double (tests/fake_backend.py) times configs under a
drifting clock. A config's nominal time grows with the sum of its integer defines, so
the example study's best config is known in advance.
"""

import datetime
import json

from tests.conftest import FAKE_BACKEND, tuner
from tests.fake_backend import base_ms
from tuner.device.protocol import MeasureJob, WarmUpJob
from tuner.device.supervisor import Supervisor
from tuner.measurement.value import Measurement
from tuner.run.session import Session
from tuner.testing import run_summary, write_study

FAKE = {"TUNER_WORKER_BACKEND": FAKE_BACKEND}


def study_file(tmp_path, **measure):
    return write_study(tmp_path, "paired", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                       tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4]},
                       search={"sampler": "grid", "trials": 6, "confirm_top": 3, "confirm_rounds": 60, "pruner": False},
                       measure={"timeout_s": 20, **measure})


def run_json(*args):
    return run_summary(tuner(*args, env=FAKE))


def test_run_stores_ratios_and_a_confirmed_winner(tmp_path, cache_dir):
    import optuna

    study, url = study_file(tmp_path), f"sqlite:///{tmp_path / 's.db'}"
    summary = run_json("run", study, "--storage", url, "--json", "--cache-dir", cache_dir)
    assert summary["trials"] == 5 and set(summary["statuses"]) <= {"ok", "spills"}  # 5 of the 6 are valid
    assert summary["statuses"]["ok"] >= 3
    stored = optuna.load_study(study_name="paired", storage=url)
    assert stored.metric_names == ["ratio"]
    assert stored.user_attrs["objective"]["metric"] == "ratio"
    for t in stored.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        a = t.user_attrs
        assert a["ratio_lo"] <= t.value <= a["ratio_hi"] and a["pairs"] >= 20 and a["regime"] == "sustained"
        assert abs(a["ms"] / a["reference_ms"] - t.value) < 0.01
    # the config with the smallest nominal time is the confirmed winner; the confirmation is stored
    fastest = min(stored.get_trials(states=(optuna.trial.TrialState.COMPLETE,)),
                  key=lambda t: base_ms(dict(t.params)))
    confirmed = summary["confirmed"]
    winner = stored.trials[confirmed["winner"]]
    assert winner.params == fastest.params
    assert confirmed["winner"] not in confirmed["tied"] and len(confirmed["standings"]) == 3  # tied: the others
    assert len(stored.user_attrs["confirmations"]) == 1

    best = tuner("best", study, "--storage", url, "--json")
    assert best.returncode == 0, best.stderr
    answer = json.loads(best.stdout)
    assert answer["confirmed"] is True and answer["trial"] == confirmed["winner"] and "ratio" in answer
    text = tuner("best", study, "--storage", url)
    assert text.stdout.strip() == winner.user_attrs["flags"]

    assert "confirmed winner: trial" in text.stderr

    # run again with every valid config measured: nothing runs, and the confirmation stands (not measured again)
    rerun = tuner("run", study, "--storage", url, "--cache-dir", cache_dir, env=FAKE)
    assert rerun.returncode == 0 and "confirming" not in rerun.stderr, rerun.stderr
    assert "with no trial since: `tuner confirm` measures again" in rerun.stderr
    assert len(optuna.load_study(study_name="paired", storage=url).user_attrs["confirmations"]) == 1
    # the run's best is the confirmed winner, as `tuner best` names it, not the best value (a later
    # confirmation that named another config, as another session's may)
    runner_up = max((t for t in stored.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
                     if t.number != confirmed["winner"]), key=lambda t: t.value)  # not the best value
    record = {**stored.user_attrs["confirmations"][0], "winner": runner_up.number,
              "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    stored.set_user_attr("confirmations", [*stored.user_attrs["confirmations"], record])
    named = run_json("run", study, "--storage", url, "--json", "--cache-dir", cache_dir)
    assert named["best"]["trial"] == runner_up.number == named["confirmed"]["winner"]
    stored.set_user_attr("confirmations", stored.user_attrs["confirmations"][:1])

    # a later session confirms again: a second record, same winner
    again = run_json("confirm", study, "--storage", url, "--json", "--top", "4", "--cache-dir", cache_dir)
    assert again["winner"] == confirmed["winner"] and len(again["standings"]) == 4
    assert len(optuna.load_study(study_name="paired", storage=url).user_attrs["confirmations"]) == 2

    # a later session where the winner's output fails its check: the rest are confirmed without it
    failing = ",".join(f"{k}={v}" for k, v in winner.params.items())
    again = tuner("confirm", study, "--storage", url, "--cache-dir", cache_dir, env={**FAKE, "FAKE_MISMATCH_IF": failing})
    assert again.returncode == 0, again.stderr
    assert f"left out: trial {winner.number} failed its output check here (mismatch" in again.stderr
    record = optuna.load_study(study_name="paired", storage=url).user_attrs["confirmations"][-1]
    assert record["left_out"][0]["trial"] == winner.number and len(record["standings"]) == 2
    assert record["winner"] != winner.number
    assert json.loads(tuner("best", study, "--storage", url, "--json").stdout)["trial"] == record["winner"]


def test_resume_with_another_reference_is_refused(tmp_path, cache_dir):
    url = f"sqlite:///{tmp_path / 's.db'}"
    import optuna

    run_json("run", study_file(tmp_path), "--storage", url, "--json", "--cache-dir", cache_dir, "--trials", 2)
    chosen = optuna.load_study(study_name="paired", storage=url).user_attrs["reference_choice"]["config"]
    other = study_file(tmp_path, reference={"BLOCK": 96 - chosen["BLOCK"], "THREAD_TILE": 2})  # not the one it chose
    refused = tuner("run", other, "--storage", url, "--cache-dir", cache_dir, env=FAKE)
    assert refused.returncode == 2 and "objective" in refused.stderr and "--study-name" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_bad_reference_is_a_one_line_error(tmp_path, cache_dir):
    bad = study_file(tmp_path, reference={"BLOCK": 48})
    result = tuner("run", bad, "--storage", f"sqlite:///{tmp_path / 's.db'}", env=FAKE)
    assert result.returncode == 2 and "measure.reference" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


START = {"BLOCK": 64, "THREAD_TILE": 2}


def ahead_study(tmp_path):
    """A new study whose reference is its first start config: its first trial can be measured ahead."""
    return write_study(tmp_path, "ahead", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                       tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4]},
                       search={"trials": 3, "seed": 1, "start": [START], "confirm_top": 0, "pruner": False},
                       measure={"timeout_s": 20})


def test_a_new_studys_first_trial_is_the_one_the_worker_measured_ahead(tmp_path, cache_dir):
    """Its reference is its first start config: the worker measures that trial while the tuner sets
    up and tells it when asked, however soon the study asks (the job waits its turn). The next
    trials are measured as they come."""
    import optuna

    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_json("run", ahead_study(tmp_path), "--storage", url, "--json", "--cache-dir", cache_dir)
    trials = optuna.load_study(study_name="ahead", storage=url).trials
    assert trials[0].params == START and trials[0].user_attrs["measured_ahead"] is True
    assert trials[0].user_attrs["ratio_lo"] <= 1.0 <= trials[0].user_attrs["ratio_hi"]
    assert len(trials[0].intermediate_values) >= 2  # its blocks, told as measured
    assert not any(t.user_attrs.get("measured_ahead") for t in trials[1:])


class _RecordingSupervisor(Supervisor):
    """The parent's side only: the jobs a run sends are kept; every trial reads 1."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list = []

    def start(self, timeout_s: float = 120.0) -> dict:
        self.device = {"name": "recorded", "sm_count": 132, "cc": [9, 0], "max_smem_per_block": 232448}
        return self.device

    def prepare(self, job) -> None:
        self.sent.append(job)

    def measure(self, job, timeout_s, report) -> Measurement:
        self.sent.append(job)
        report(0, 1.0, [1.0] * 20)
        return Measurement("ok", ms=1.0, ratio=1.0, reference_ms=1.0, extra={"pairs": 20})

    def stop(self) -> None:
        pass


def test_the_study_asks_its_first_trial_as_the_warm_up_job_announced_it(tmp_path):
    """The worker can only tell a trial measured ahead if the study's first measure job is that very job:
    a study whose reference is its first start config asks it first, field for field."""
    supervisor = _RecordingSupervisor()
    Session(ahead_study(tmp_path), storage=f"sqlite:///{tmp_path / 'a.db'}", given={"cache_dir": tmp_path / "cache"}).run(supervisor)
    warm_up = next(job for job in supervisor.sent if isinstance(job, WarmUpJob) and not isinstance(job, MeasureJob))
    measured = [job for job in supervisor.sent if isinstance(job, MeasureJob)]
    assert warm_up.first_trial is not None and {k: warm_up.first_trial.candidate.config[k] for k in START} == START
    assert measured[0] == warm_up.first_trial and warm_up.first_trial not in measured[1:]  # (a config is measured once)


def test_a_winner_that_failed_its_check_since_is_named_with_a_warning():
    import optuna

    from tuner.evaluate.confirm import CONFIRMATIONS, describe, failed_since

    study = optuna.create_study()
    won = {"at": "t1", "device_name": "H100", "winner": 3, "tied": [3], "standings": [{}, {}], "rounds": 9}
    failed = {"at": "t2", "device_name": "H200", "winner": None, "tied": [], "standings": [], "rounds": 9,
              "left_out": [{"trial": 3, "status": "mismatch", "reason": "row 0"}]}
    study.set_user_attr(CONFIRMATIONS, [won])
    assert failed_since(study, 3) is None
    study.set_user_attr(CONFIRMATIONS, [won, failed])
    assert failed_since(study, 3).startswith("warning: trial 3 failed its output check in the confirmation of t2 on H200")
    assert describe(failed).startswith("no confirmed winner: fewer than 2 of the top configs passed")
    study.set_user_attr(CONFIRMATIONS, [won, failed, {**won, "at": "t3"}])
    assert failed_since(study, 3) is None


def test_a_run_with_one_measured_config_promises_no_confirmation(tmp_path, cache_dir):
    result = tuner("run", study_file(tmp_path), "--storage", f"sqlite:///{tmp_path / 's.db'}", "--trials", 2,
                   "--cache-dir", cache_dir, env=FAKE)  # the grid's second config spills
    assert result.returncode == 0, result.stderr
    assert "2 trials (ok=1, spills=1)" in result.stdout and "confirming" not in result.stdout + result.stderr


def test_a_reference_whose_output_fails_its_check_is_warned_of(tmp_path, cache_dir):
    """The reference is the yardstick, timed and never checked as such: measured as a trial (a start
    config), its mismatch is said once, with what it means for every value."""
    study = write_study(tmp_path, "refbug", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                        tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4], "PLANT_BUG": [1, 0]},
                        search={"trials": 4, "confirm_top": 0, "start": [{"BLOCK": 32, "THREAD_TILE": 2, "PLANT_BUG": 1}]},
                        measure={"timeout_s": 20})
    result = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--cache-dir", cache_dir, env=FAKE)
    import optuna

    completed = optuna.load_study(study_name="refbug", storage=f"sqlite:///{tmp_path / 's.db'}").get_trials(
        states=(optuna.trial.TrialState.COMPLETE,))
    assert result.returncode == (0 if completed else 1), result.stderr  # 1: every config drawn had the planted bug
    assert result.stderr.count("warning: the reference config fails its output check (trial 0: ") == 1
