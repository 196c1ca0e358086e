"""A long axis is stored once per study, not with every trial (issue 33, item 9); studies
stored before keep working."""

import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution

from tests.test_bad_input import assert_one_line_exit_2, tuner_here
from tuner.search.distributions import AXES_ATTR, LONG_AXIS
from tuner.store.optuna_private import study_system_attrs
from tuner.store.storage import open_storage

N = 5 * LONG_AXIS  # values of the long axis


def _cache(path, n=N):
    """A Kernel Tuner cache: x (long, integers) x mode (names)."""
    cache = {}
    for x in range(n):
        for mode in ("a", "b"):
            cache[f"{x},{mode}"] = {"x": x, "mode": mode, "time": 1.0 + abs(x - n // 3) / n + (mode == "b") * 0.1}
    path.write_text(json.dumps({"tune_params_keys": ["x", "mode"], "tune_params": {"x": list(range(n)), "mode": ["a", "b"]},
                                "objective": "time", "cache": cache}))
    return path


def _bytes_per_trial(db) -> float:
    import sqlite3

    with sqlite3.connect(db) as conn:
        size = conn.execute("select sum(length(distribution_json)) from trial_params").fetchone()[0]
        trials = conn.execute("select count(*) from trials").fetchone()[0]
    return size / trials


@pytest.mark.parametrize("sampler", ["tpe", "gp", "random", "grid"])
def test_a_long_axis_is_stored_once_and_every_sampler_proposes_its_values(sampler, tmp_path, capsys, monkeypatch):
    db = tmp_path / "t.db"
    url = f"sqlite:///{db}"
    result = tuner_here(capsys, monkeypatch, "run", "--replay", _cache(tmp_path / "c.json"), "--storage", url,
                        "--study-name", "s", "--trials", 12, "--sampler", sampler, "--seed", 1, "--json")
    assert result.returncode == 0, result.stderr
    study = optuna.load_study(study_name="s", storage=open_storage(url))
    trials = study.get_trials()
    assert len(trials) == 12
    for t in trials:
        assert isinstance(t.distributions["x"], IntDistribution) and isinstance(t.distributions["mode"], CategoricalDistribution)
        assert t.params["x"] in range(N) and t.params["mode"] in ("a", "b")
    assert len({(t.params["x"], t.params["mode"]) for t in trials}) == 12  # never one config twice
    assert study_system_attrs(study)[AXES_ATTR] == {"x": list(range(N)), "mode": ["a", "b"]}
    assert _bytes_per_trial(db) < 200  # the choices of x would be ~6 bytes each, N of them


def test_a_study_stored_the_old_way_resumes(tmp_path, capsys, monkeypatch):
    """Trials that carry the long axis as a categorical (before compact axes): resuming keeps that kind."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    cache = _cache(tmp_path / "c.json")
    old = {"x": CategoricalDistribution(list(range(N))), "mode": CategoricalDistribution(["a", "b"])}
    study = optuna.create_study(study_name="old", storage=open_storage(url))
    for x in (3, 50, 200):
        study.add_trial(optuna.trial.create_trial(params={"x": x, "mode": "a"}, distributions=old, value=1.0 + x / N,
                                                  user_attrs={"status": "ok", "ms": 1.0 + x / N}))
    result = tuner_here(capsys, monkeypatch, "run", "--replay", cache, "--storage", url, "--study-name", "old",
                        "--trials", 8, "--accept-mismatch", "--json")
    assert result.returncode == 0, result.stderr
    trials = optuna.load_study(study_name="old", storage=open_storage(url)).get_trials()
    assert len(trials) == 3 + 8 and all(isinstance(t.distributions["x"], CategoricalDistribution) for t in trials)


def test_other_values_on_a_long_axis_are_refused(tmp_path, capsys, monkeypatch):
    url = f"sqlite:///{tmp_path / 't.db'}"
    args = ("--storage", url, "--study-name", "s", "--trials", 3)
    assert tuner_here(capsys, monkeypatch, "run", "--replay", _cache(tmp_path / "c.json"), *args).returncode == 0
    result = tuner_here(capsys, monkeypatch, "run", "--replay", _cache(tmp_path / "d.json", N + 1), *args, "--accept-mismatch")
    assert_one_line_exit_2(result, "searched x over")
