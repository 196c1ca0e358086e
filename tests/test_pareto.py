"""Time and energy as two objectives, end to end on the worker double (tests/fake_backend.py).

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
    assert stored.metric_names == ["ratio", "energy_mj"] and len(stored.directions) == 2
    complete = stored.get_trials(states=(TrialState.COMPLETE,))
    assert complete and all(t.params["UNROLL_K"] == 1 for t in complete)
    for t in complete:  # the second value is the stored energy per launch
        assert t.values[1] == t.user_attrs["energy_mj_per_launch"] and t.user_attrs["energy_mj_per_launch_err"] > 0
        assert t.user_attrs["energy_window_s"] >= 1.0  # energy_s was not set: 1 s, as energy is an objective
    no_energy = [t for t in stored.trials if t.user_attrs.get("status") == "no_energy"]
    assert no_energy and all(t.state == TrialState.PRUNED and t.params["UNROLL_K"] == 4 for t in no_energy)
    assert all("above the enforced limit" in t.user_attrs["reason"] for t in no_energy)
    # a front of several configs, each not dominated by any complete trial
    front = summary["front"]
    assert len(front) >= 2
    for row in front:
        assert not any(t.values[0] < row["ratio"] and t.values[1] < row["energy_mj"] for t in complete)
    # the confirmation re-measured configs of the front
    assert {r["trial"] for r in summary["confirmed"]["standings"]} <= {r["trial"] for r in front}
    # a notebook reads the same front from the stored study
    import tuner as api

    table = api.load("pareto", storage=url).front
    assert list(table["trial"]) == [r["trial"] for r in front] and {"UNROLL_K", "energy_mj", "flags"} <= set(table.columns)


def test_best_pareto_prints_the_front_and_its_trade_off(ran):
    study, url, _ = ran
    answer = json.loads(tuner("best", study, "--storage", url, "--pareto", "--json").stdout)
    front = answer["front"]
    assert answer["metrics"] == ["ratio", "energy_mj"] and len(front) >= 2
    assert [r["ratio"] for r in front] == sorted(r["ratio"] for r in front)
    energies = [r["energy_mj"] for r in front]  # along the front, faster costs energy
    assert energies == sorted(energies, reverse=True)
    text = tuner("best", study, "--storage", url, "--pareto")
    assert text.returncode == 0, text.stderr
    assert all(f"  {r['trial']}  " in f"  {line}  " for r, line in zip(front, text.stdout.splitlines()[1:], strict=False))
    fastest = min(front, key=lambda r: r["ratio"])  # the time objective (raw ms drift under a paired measurement)
    frugal = min(front, key=lambda r: r["energy_mj"])
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
    complete = {t.number: t.values[1] for t in stored.get_trials(states=(TrialState.COMPLETE,))}
    exported = dict(zip(table["number"], table["energy_mj"], strict=True))
    assert complete and all(exported[n] == energy for n, energy in complete.items())


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
