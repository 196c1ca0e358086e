"""Time and energy as two objectives, end to end on the worker double (tests/fake_backend.py).

Both objectives are ratios to the reference measured in the same trial (metrics ``ratio`` and
``energy_ratio``); energy per launch in mJ is stored beside them.

A config's power is 150 W x its UNROLL_K define (FAKE_POWER_AXIS) times its nominal time ** -3
(FAKE_POWER_EXP): within one UNROLL_K a faster config draws more energy per launch, so the
UNROLL_K = 1 configs form a front of several configs; the UNROLL_K = 4 ones run above
FAKE_POWER_LIMIT_W, so their energy cannot be measured and they must not be COMPLETE.
"""

import json

import optuna
import pytest
from optuna.trial import TrialState

from dashboards.report import load_study, render_study_page
from tests.conftest import FAKE_BACKEND, tuner
from tuner.testing import run_summary, write_study

FAKE = {"TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_POWER_W": "150", "FAKE_POWER_AXIS": "UNROLL_K",
        "FAKE_POWER_EXP": "3", "FAKE_POWER_LIMIT_W": "300"}


def study_file(tmp_path, objectives=("time", "energy")):
    return write_study(tmp_path, "pareto", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                       tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4], "UNROLL_K": [1, 4]},
                       search={"objectives": list(objectives), "trials": 12, "seed": 1, "confirm_top": 3,
                               "confirm_rounds": 30},
                       measure={"timeout_s": 20})


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("pareto")
    study, url = study_file(tmp_path), f"sqlite:///{tmp_path / 's.db'}"
    result = tuner("run", study, "--storage", url, "--json", "--cache-dir", tmp_path / "cache", env=FAKE)
    return study, url, result


def test_two_objectives_give_a_front_and_no_made_up_energy(ran):
    study, url, result = ran
    summary = run_summary(result)
    stored = optuna.load_study(study_name="pareto", storage=url)
    assert stored.metric_names == ["ratio", "energy_ratio"] and len(stored.directions) == 2
    complete = stored.get_trials(states=(TrialState.COMPLETE,))
    assert complete and all(t.params["UNROLL_K"] == 1 for t in complete)
    for t in complete:  # the second value: energy per launch over the reference's, in the same trial
        a = t.user_attrs
        assert t.values[1] == a["energy_ratio"] and a["energy_ratio_err"] > 0 and a["energy_mj_per_launch_err"] > 0
        assert t.values[1] == pytest.approx(a["energy_mj_per_launch"] / a["reference_energy_mj_per_launch"], rel=1e-4)
        assert t.user_attrs["energy_window_s"] >= 1.0  # energy_s was not set: 1 s, as energy is an objective
    no_energy = [t for t in stored.trials if t.user_attrs.get("status") == "no_energy"]
    assert no_energy and all(t.state == TrialState.PRUNED and t.params["UNROLL_K"] == 4 for t in no_energy)
    assert all("above the enforced limit" in t.user_attrs["reason"] for t in no_energy)
    # a front of several configs, each not dominated by any complete trial
    front = summary["front"]
    assert len(front) >= 2
    for row in front:
        assert not any(t.values[0] < row["ratio"] and t.values[1] < row["energy_ratio"] for t in complete)
        assert row["energy"] == row["energy_ratio"] and row["energy_mj"] == stored.trials[row["trial"]].user_attrs[
            "energy_mj_per_launch"]
    # the confirmation re-measured configs of the front
    assert {r["trial"] for r in summary["confirmed"]["standings"]} <= {r["trial"] for r in front}
    # a notebook reads the same front from the stored study
    import tuner as api

    table = api.load("pareto", storage=url).front
    assert list(table["trial"]) == [r["trial"] for r in front] and {"UNROLL_K", "energy_ratio", "energy_mj", "flags"} <= set(table.columns)


def test_best_pareto_prints_the_front_and_its_trade_off(ran):
    study, url, _ = ran
    answer = json.loads(tuner("best", study, "--storage", url, "--pareto", "--json").stdout)
    front = answer["front"]
    assert answer["metrics"] == ["ratio", "energy_ratio"] and len(front) >= 2
    assert [r["ratio"] for r in front] == sorted(r["ratio"] for r in front)
    energies = [r["energy_ratio"] for r in front]  # along the front, faster costs energy
    assert energies == sorted(energies, reverse=True)
    text = tuner("best", study, "--storage", url, "--pareto")
    assert text.returncode == 0, text.stderr
    assert all(f"  {r['trial']}  " in f"  {line}  " for r, line in zip(front, text.stdout.splitlines()[1:], strict=False))
    fastest = min(front, key=lambda r: r["ratio"])  # the time objective (raw ms drift under a paired measurement)
    frugal = min(front, key=lambda r: r["energy_ratio"])
    assert text.stdout.splitlines()[0].split()[:5] == ["trial", "ratio", "ms", "energy_ratio", "mJ/launch"]
    assert f"time-optimal: trial {fastest['trial']}," in text.stdout
    assert f"energy-optimal: trial {frugal['trial']}," in text.stdout
    assert "J per launch" in text.stdout and "% in energy per launch" in text.stdout
    # `best --json` of a front names its fastest config, in the time objective and in ms
    best = tuner("best", study, "--storage", url, "--json")
    assert best.returncode == 0, best.stderr
    answer = json.loads(best.stdout)
    stored = optuna.load_study(study_name="pareto", storage=url).trials[answer["trial"]]
    assert answer["trial"] in {r["trial"] for r in front} and answer["ratio"] == stored.values[0] and answer["ms"] > 0


def test_an_export_keeps_the_energy_per_launch(ran, tmp_path):
    import pandas as pd

    study, url, _ = ran
    out = tmp_path / "front.csv"
    assert tuner("export", study, "--storage", url, "-o", out).returncode == 0
    table = pd.read_csv(out)
    stored = optuna.load_study(study_name="pareto", storage=url)
    complete = {t.number: t for t in stored.get_trials(states=(TrialState.COMPLETE,))}
    ratios = dict(zip(table["number"], table["energy_ratio"], strict=True))
    mj = dict(zip(table["number"], table["energy_mj"], strict=True))
    assert complete and all(ratios[n] == t.values[1] for n, t in complete.items())
    assert all(mj[n] == t.user_attrs["energy_mj_per_launch"] for n, t in complete.items())


def test_the_report_shows_the_front(ran):
    _, url, _ = ran
    data = load_study(optuna.load_study(study_name="pareto", storage=url))
    page, figs = render_study_page(data, "", "")
    assert 'id="fig-pareto"' in page and "pareto" not in figs.errors and not figs.errors
    assert "Pareto front" in page


def test_pareto_of_a_single_objective_study_is_one_line(tmp_path):
    study, url = study_file(tmp_path, ("time",)), f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="pareto", storage=url)
    result = tuner("best", study, "--storage", url, "--pareto")
    assert result.returncode == 2 and "one objective" in result.stderr and "Traceback" not in result.stderr


def test_energy_s_defaults_when_energy_is_an_objective_and_says_so(tmp_path):
    from tuner.run.session import Session

    said: list[str] = []
    loaded = Session(study_file(tmp_path), say=said.append).load()
    assert loaded.cfg.measure.energy_s == 1.0 and any("energy_s not set" in line for line in said)
    assert Session(study_file(tmp_path, ("time",))).load().cfg.measure.energy_s == 0.0


def test_unknown_objectives_are_one_line(tmp_path):
    study = study_file(tmp_path, ("energy",))
    result = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 's.db'}")
    assert result.returncode == 2 and "objectives must be" in result.stderr and "Traceback" not in result.stderr


def test_energy_is_measured_when_the_objectives_are_a_setting(tmp_path):
    """tune(study, objectives=[...]) and --objectives turn energy on as the study file's key does."""
    from tuner.run.session import Session

    loaded = Session(study_file(tmp_path, ("time",)), given={"objectives": ["time", "energy"]}).load()
    assert loaded.cfg.measure.energy_s == 1.0


@pytest.mark.parametrize("stored,asked", [(("time",), ("time", "energy")), (("time", "energy"), ("time",))])
def test_a_study_resumed_with_other_objectives_is_refused_and_kept(tmp_path, stored, asked):
    url = f"sqlite:///{tmp_path / 's.db'}"
    kept = optuna.create_study(study_name="pareto", storage=url, directions=["minimize"] * len(stored))
    kept.add_trial(optuna.trial.create_trial(values=[1.0] * len(stored)))
    result = tuner("run", study_file(tmp_path, asked), "--storage", url, "--cache-dir", tmp_path / "cache", env=FAKE)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"was created with objectives {list(stored)}, this run asks for {list(asked)}" in result.stderr
    assert len(optuna.load_study(study_name="pareto", storage=url).trials) == 1


def test_a_header_of_the_front_is_refused_in_one_line(tmp_path):
    result = tuner("best", study_file(tmp_path), "--storage", f"sqlite:///{tmp_path / 's.db'}", "--pareto",
                   "--header", tmp_path / "best.h")
    assert result.returncode == 2 and "--header writes one config" in result.stderr and not (tmp_path / "best.h").exists()


def test_the_energy_ratio_holds_on_a_gpu_that_draws_more_where_millijoules_do_not(tmp_path):
    """The same study on a GPU drawing 20 % more power: the same configs, the same energy ratios
    (the reference draws more too), energy per launch 20 % higher. (No clock drift: the fake's swings
    by 5 % within 2,000 launches, two energy windows' worth, which a real GPU's clock does not.)"""
    runs = {}
    for watts in ("150", "180"):
        url = f"sqlite:///{tmp_path / f'{watts}.db'}"
        result = tuner("run", study_file(tmp_path), "--storage", url, "--cache-dir", tmp_path / "cache",
                       env={**FAKE, "FAKE_POWER_W": watts, "FAKE_DRIFT": "0"})
        assert result.returncode == 0, result.stderr
        trials = optuna.load_study(study_name="pareto", storage=url).get_trials(states=(TrialState.COMPLETE,))
        runs[watts] = {tuple(sorted(t.params.items())): t for t in trials}
    assert runs["150"].keys() == runs["180"].keys() and len(runs["150"]) >= 3
    for key, cool in runs["150"].items():
        hot = runs["180"][key]
        assert hot.values[1] == pytest.approx(cool.values[1], rel=0.01)
        assert hot.user_attrs["energy_mj_per_launch"] == pytest.approx(1.2 * cool.user_attrs["energy_mj_per_launch"],
                                                                       rel=0.02)


def test_a_study_made_with_energy_in_millijoules_keeps_them(tmp_path):
    """A time-and-energy study stored before the energy ratio (metric ``energy_mj``) goes on in mJ."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = write_study(tmp_path, "pareto", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},  # all under the limit
                       tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4], "UNROLL_K": [1]},
                       search={"objectives": ["time", "energy"], "seed": 1, "confirm_top": 3, "confirm_rounds": 30},
                       measure={"timeout_s": 20})
    first = tuner("run", path, "--storage", url, "--trials", "3", "--cache-dir", tmp_path / "cache", env=FAKE)
    assert first.returncode == 0, first.stderr
    old = optuna.load_study(study_name="pareto", storage=url)
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        old.set_metric_names(["ratio", "energy_mj"])
    resumed = tuner("run", path, "--storage", url, "--trials", "6", "--cache-dir", tmp_path / "cache", env=FAKE)
    assert resumed.returncode == 0, resumed.stderr
    stored = optuna.load_study(study_name="pareto", storage=url)
    later = [t for t in stored.get_trials(states=(TrialState.COMPLETE,)) if t.number >= 3]
    assert stored.metric_names == ["ratio", "energy_mj"] and later
    assert all(t.values[1] == t.user_attrs["energy_mj_per_launch"] for t in later)
    text = tuner("best", path, "--storage", url, "--pareto")
    assert text.returncode == 0 and text.stdout.splitlines()[0].split()[:4] == ["trial", "ratio", "ms", "mJ/launch"]


def test_a_trial_whose_reference_has_no_energy_is_not_complete_and_says_why(tmp_path):
    """Every UNROLL_K = 4 config runs above the power limit: as the reference, no trial has an energy ratio."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = write_study(tmp_path, "pareto", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                       tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4], "UNROLL_K": [1, 4]},
                       search={"objectives": ["time", "energy"], "trials": 4, "seed": 1},
                       measure={"timeout_s": 20, "reference": {"BLOCK": 64, "THREAD_TILE": 2, "UNROLL_K": 4}})
    result = tuner("run", path, "--storage", url, "--cache-dir", tmp_path / "cache", env=FAKE)
    assert result.returncode == 1, result.stderr  # nothing completed
    trials = optuna.load_study(study_name="pareto", storage=url).trials
    assert trials and not any(t.state == TrialState.COMPLETE for t in trials)
    measured = [t for t in trials if t.params["UNROLL_K"] == 1]
    assert measured and all(t.user_attrs["status"] == "no_energy" for t in measured)
    assert all(t.user_attrs["reason"].startswith("the reference: ") and "above the enforced limit" in
               t.user_attrs["reason"] for t in measured)


def test_objectives_written_as_one_name_are_a_list_of_it():
    """`objectives = "time"` in a study file reads as ["time"], not as the letters of the word."""
    from tuner.errors import UserError
    from tuner.measurement.pareto import check_objectives

    assert check_objectives("time", "w") == ["time"] and check_objectives(["time", "energy"], "w") == ["time", "energy"]
    with pytest.raises(UserError, match=r"got \['energy'\]$"):
        check_objectives("energy", "w")
