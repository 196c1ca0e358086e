"""One results schema: grid/export write it, replay reads it (and older Optuna exports)."""

import json

import optuna
import pandas as pd
import pytest

from tests.conftest import PNPOLY, ROOT, tuner
from tuner.evaluate.replay import load_recording
from tuner.store.results import COLUMNS, best_trial, read_table, trials_frame

RECORDED = sorted((ROOT / "studies" / "recorded").glob("*.csv"))
STUDIES = sorted((ROOT / "studies").glob("*.toml"), key=lambda p: -len(p.stem))


def _study_of(recording) -> str:
    """studies/NAME.toml for studies/recorded/NAME_<how>_<gpu>.csv (the longest matching name)."""
    return next(str(s) for s in STUDIES if recording.stem.startswith(s.stem + "_"))


def test_there_are_recordings():
    assert len(RECORDED) >= 4


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_every_recording_is_in_the_schema_and_replays(path):
    frame, axes = read_table(path)
    assert list(frame.columns[: len(axes)]) == axes and set(COLUMNS) <= set(frame.columns)
    assert not [c for c in frame.columns if c.startswith(("params_", "user_attrs_"))]
    recording = load_recording(path)
    ok = [r.ms for r in recording.records.values() if r.status == "ok"]
    assert ok and all(ms > 0 for ms in ok)
    result = tuner("run", _study_of(path), "--replay", path, "--storage", "memory", "--trials", 12, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["trials"] == 12
    assert summary["best"]["ms"] in ok  # a recorded time, the winner of what was replayed


def test_export_replays_and_old_optuna_exports_read_the_same(tmp_path):
    """tuner export writes the schema; Optuna's trials_dataframe (params_/user_attrs_) reads alike."""
    recording = ROOT / "studies" / "recorded" / "patch_embed_sm90a_grid_h200.csv"
    study_file = ROOT / "studies" / "patch_embed_sm90a_grid.toml"
    db = f"sqlite:///{tmp_path / 'r.db'}"
    assert tuner("run", study_file, "--replay", recording, "--storage", db, "--trials", 15, "--json").returncode == 0
    out = tmp_path / "export.csv"
    exported = tuner("export", "--study", "patch_embed_sm90a_grid.replay", "--storage", db, "-o", out)
    assert exported.returncode == 0, exported.stderr
    frame, axes = read_table(out)
    study = optuna.load_study(study_name="patch_embed_sm90a_grid.replay", storage=db)
    assert axes == study.user_attrs["axes"] and len(frame) == 15
    assert list(pd.read_csv(out).columns) == [*axes, *COLUMNS, "device"]

    old = tmp_path / "old.csv"
    study.trials_dataframe().to_csv(old, index=False)
    assert any(c.startswith("params_") for c in pd.read_csv(old).columns)
    new_rec, old_rec = load_recording(out), load_recording(old)
    def by_config(rec):  # Optuna orders params by name, the export as the study's axes
        return {frozenset(zip(rec.axes, k, strict=True)): (r.status, r.ms) for k, r in rec.records.items()}

    assert {a: set(v) for a, v in new_rec.axes.items()} == {a: set(v) for a, v in old_rec.axes.items()}
    assert by_config(new_rec) == by_config(old_rec) and len(new_rec.records) == 15
    best = best_trial(study.trials)
    assert best is not None and min(r.ms for r in new_rec.records.values() if r.status == "ok") == best.value
    again = tuner("run", study_file, "--replay", out, "--storage", "memory", "--trials", 5, "--json")
    assert again.returncode == 0, again.stderr


def test_kernel_tuner_export_replays_with_the_same_results(tmp_path):
    """tuner export FILE.json writes a Kernel Tuner cache that replay reads back unchanged."""
    recording = ROOT / "studies" / "recorded" / "patch_embed_sm90a_grid_h200.csv"
    study_file = ROOT / "studies" / "patch_embed_sm90a_grid.toml"
    db = f"sqlite:///{tmp_path / 'k.db'}"
    assert tuner("run", study_file, "--replay", recording, "--storage", db, "--trials", 10, "--json").returncode == 0
    out = tmp_path / "cache.json"
    exported = tuner("export", "--study", "patch_embed_sm90a_grid.replay", "--storage", db, "-o", out)
    assert exported.returncode == 0, exported.stderr
    data = json.loads(out.read_text())
    study = optuna.load_study(study_name="patch_embed_sm90a_grid.replay", storage=db)
    assert data["tune_params_keys"] == study.user_attrs["axes"] and len(data["cache"]) == 10
    back = load_recording(out)
    assert back.format == "kernel_tuner"
    measured = {tuple(t.params[a] for a in back.axes): t.user_attrs["ms"] for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE}
    assert measured and all(back.records[k].ms == ms for k, ms in measured.items())
    upper = tmp_path / "CACHE.JSON"  # the format goes by the suffix, whatever its case
    assert tuner("export", "--study", "patch_embed_sm90a_grid.replay", "--storage", db, "-o", upper).returncode == 0
    assert json.loads(upper.read_text())["cache"] == data["cache"]


def test_a_replays_export_replayed_again_names_the_gpu_it_was_recorded_on(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    csv = ROOT / "studies" / "recorded" / "patch_embed_sm90a_grid_h200.csv"
    study_file = ROOT / "studies" / "patch_embed_sm90a_grid.toml"
    assert tuner("run", study_file, "--replay", csv, "--storage", db, "--trials", 3).returncode == 0
    out = tmp_path / "again.csv"
    assert tuner("export", "--study", "patch_embed_sm90a_grid.replay", "--storage", db, "-o", out).returncode == 0
    assert tuner("run", study_file, "--replay", out, "--storage", db, "--study-name", "again", "--trials", 3).returncode == 0
    for name in ("patch_embed_sm90a_grid.replay", "again"):
        assert optuna.load_study(study_name=name, storage=db).user_attrs["device"]["name"] == "replay of NVIDIA H200"


def test_a_config_stopped_as_slower_keeps_its_status_through_a_kernel_tuner_export(tmp_path):
    """Kernel Tuner's failure strings cannot say "stopped as slower": our export keeps the status beside
    them, and replay reads it back, as the CSV round trip does."""
    db = f"sqlite:///{tmp_path / 'p.db'}"
    assert tuner("run", "--replay", PNPOLY, "--storage", db, "--study-name", "p", "--trials", 20, "--seed", 0).returncode == 0
    out = tmp_path / "p.json"
    assert tuner("export", "--study", "p", "--storage", db, "-o", out).returncode == 0
    back = load_recording(out)
    study = optuna.load_study(study_name="p", storage=db)
    statuses = {tuple(t.params[a] for a in back.axes): t.user_attrs["status"] for t in study.trials
                if t.state != optuna.trial.TrialState.COMPLETE}
    assert "pruned_slow" in statuses.values() and all(back.records[k].status == s for k, s in statuses.items())


def test_a_kernel_tuner_export_is_a_cache_kernel_tuner_resumes(tmp_path):
    """What Kernel Tuner checks and reads: the source's device and problem size, the whole space's
    values, a failure string only for a config that failed (one stopped as slower ran: its time)."""
    import gzip

    source = json.loads(gzip.open(PNPOLY).read())
    db = f"sqlite:///{tmp_path / 'p.db'}"
    assert tuner("run", "--replay", PNPOLY, "--storage", db, "--study-name", "p", "--trials", 20, "--seed", 0).returncode == 0
    out = tmp_path / "p.json"
    assert tuner("export", "--study", "p", "--storage", db, "-o", out).returncode == 0
    cache = json.loads(out.read_text())
    assert cache["device_name"] == source["device_name"] and cache["problem_size"] == source["problem_size"]
    assert cache["tune_params"] == source["tune_params"]
    study = optuna.load_study(study_name="p", storage=db)
    for t in study.trials:
        entry = cache["cache"][",".join(str(t.params[a]) for a in source["tune_params_keys"])]
        if t.user_attrs["status"] in ("ok", "pruned_slow"):
            assert isinstance(entry["time"], float) and entry["time"] > 0
        if t.user_attrs["status"] == "pruned_slow":  # slower than the best it was stopped against
            assert entry["time"] > min(e["time"] for e in cache["cache"].values() if "status" not in e)
    assert any(e.get("status") == "pruned_slow" for e in cache["cache"].values())


@pytest.mark.parametrize("path", sorted((ROOT / "studies" / "recorded").glob("*.json")), ids=lambda p: p.name)
def test_recorded_kernel_tuner_caches_replay(path):
    result = tuner("run", _study_of(path), "--replay", path, "--storage", "memory", "--trials", 12, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["trials"] == 12


def test_a_trial_stopped_before_its_params_were_chosen_leaves_whole_numbers_whole(tmp_path):
    study = optuna.create_study()
    distributions = {"BLOCK_N": optuna.distributions.CategoricalDistribution([128, 192]),
                     "METHOD": optuna.distributions.CategoricalDistribution(["a", "b"])}
    study.tell(study.ask(distributions), 1.0)
    study.ask()  # killed before it chose any param: RUNNING, no BLOCK_N
    frame = trials_frame(study.trials, ["BLOCK_N", "METHOD"])
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    lines = path.read_text().splitlines()
    assert lines[1].split(",")[:2] in (["128", "a"], ["128", "b"], ["192", "a"], ["192", "b"])  # not 192.0
    assert lines[2].split(",")[:2] == ["", ""]


def test_trials_frame_and_best_trial():
    study = optuna.create_study()
    for value in (3.0, 1.0, None):
        trial = study.ask({"X": optuna.distributions.CategoricalDistribution([1, 2, 3])})
        trial.set_user_attr("status", "ok" if value else "mismatch")
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, value)
    frame = trials_frame(study.trials, ["X"])
    assert list(frame.columns) == ["X", *COLUMNS]
    assert frame["status"].tolist() == ["ok", "ok", "mismatch"] and frame["value"].isna().tolist() == [False, False, True]
    best = best_trial(study.trials)
    assert best is not None and best.value == 1.0
    assert best_trial(study.trials, optuna.study.StudyDirection.MAXIMIZE).value == 3.0
    assert best_trial([t for t in study.trials if t.value is None]) is None


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # set_metric_names, as the runner
def test_a_trial_without_its_own_time_shows_its_ratio_on_the_studys_scale():
    """The reference paired with itself before the GPU was steady keeps no raw times: its time in
    the table (and as the best) is its ratio x the median of the other trials' reference times, and
    its TFLOPS are those of that time."""
    from tuner.run.summary import summarize

    study = optuna.create_study()
    study.set_metric_names(["ratio"])
    axis = {"X": optuna.distributions.CategoricalDistribution([1, 2, 3])}
    for attrs in ({"ratio": 0.999}, {"ratio": 1.2, "ms": 1.25, "reference_ms": 1.04, "tflops": 800.0},
                  {"ratio": 1.5, "ms": 1.52, "reference_ms": 1.02, "tflops": 657.9}):
        trial = study.ask(axis)
        for key, value in {"status": "ok", **attrs}.items():
            trial.set_user_attr(key, value)
        study.tell(trial, attrs["ratio"])
    frame = trials_frame(study.trials, ["X"])
    assert frame["ms"].tolist() == pytest.approx([0.999 * 1.03, 1.25, 1.52])
    assert frame["tflops"][0] == pytest.approx(1000.0 / (0.999 * 1.03), rel=1e-3)  # the work the others did
    assert summarize(study, "sqlite:///:memory:")["best"]["ms"] == pytest.approx(0.999 * 1.03)


def test_a_trial_without_a_recorded_status_is_named_alike_by_status_export_and_note():
    """A trial that failed outside the objective (no status attribute) reads "failed" everywhere."""
    from tuner.run.summary import summarize
    from tuner.store.notes import study_note

    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"status": "ok"}))
    assert summarize(study, "sqlite:///x.db")["statuses"] == {"failed": 1, "ok": 1}
    assert list(trials_frame(study.trials)["status"]) == ["failed", "ok"]
    assert "(failed 1, ok 1)" in study_note(study)


def test_the_confirmed_winner_is_the_winner_everywhere():
    """A confirmation may name another config than the best value (the top configs measured again
    against each other): `tuner status`, a run's summary, the study note, the report and `tuner best`
    all name its winner, a config the pruner had stopped too; without one, the best value."""
    from dashboards.report import load_study
    from tuner.evaluate.confirm import confirmed_best
    from tuner.run.summary import summarize
    from tuner.store.notes import study_note
    from tuner.store.results import CONFIRMATIONS, winner

    study = optuna.create_study()
    for value, state, status in ((1.00, "COMPLETE", "ok"), (0.98, "COMPLETE", "ok"), (0.99, "COMPLETE", "ok"),
                                 (1.02, "PRUNED", "pruned_slow")):  # stopped at 1.02 (Optuna's value of a pruned trial)
        study.add_trial(optuna.trial.create_trial(
            params={"X": len(study.trials)}, distributions={"X": optuna.distributions.IntDistribution(0, 9)},
            value=value, state=getattr(optuna.trial.TrialState, state), user_attrs={"status": status, "ms": value}))
    assert winner(study.user_attrs, study.trials).number == 1 == summarize(study, "sqlite:///x.db")["best"]["trial"]
    for confirmed in (2, 3):
        record = {"at": "2026-12-02T08:00:00+00:00", "winner": confirmed, "standings": [{"trial": confirmed, "value": 0.97}]}
        study.set_user_attr(CONFIRMATIONS, [{"at": "2026-12-01T08:00:00+00:00", "winner": None}, record])
        assert winner(study.user_attrs, study.trials).number == confirmed
        assert summarize(study, "sqlite:///x.db")["best"]["trial"] == confirmed
        assert f"**Best**: trial {confirmed}," in study_note(study)
        assert confirmed_best(study)[0].number == confirmed and confirmed_best(study)[1] == record
        row = load_study(study).best()
        assert row["number"] == confirmed and row["value"] == (0.99 if confirmed == 2 else 0.97)  # (its confirmation's)


def test_the_grid_table_ranks_a_paired_study_by_its_ratios():
    """Raw medians carry the clock's drift; the ratios to the reference launched alternately do not."""
    from tuner.store.results import ranked

    study = optuna.create_study()
    axis = {"X": optuna.distributions.CategoricalDistribution([1, 2])}
    # X=1 ran while the clock was slow: the larger raw median, the smaller ratio
    for x, ratio, ms in ((1, 1.00, 1.06), (2, 1.06, 1.00)):
        study.add_trial(optuna.trial.create_trial(params={"X": x}, distributions=axis, value=ratio,
                                                  user_attrs={"status": "ok", "ms": ms}))
    assert list(ranked(trials_frame(study.trials, ["X"]))["X"]) == [1, 2]
