"""The CLI as a user runs it: check, run (with notes and artifacts), best, status, export, grid."""

import csv
import itertools
import json

import optuna
import pytest

from tests.conftest import FAKE_BACKEND, PNPOLY, ROOT, tuner
from tuner.store import optuna_private

STUDY = ROOT / "studies" / "example_sgemm.toml"
FAKE = {"TUNER_WORKER_BACKEND": FAKE_BACKEND}


def test_check_json_counts_and_compiles(cache_dir):
    result = tuner("check", STUDY, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["total"], data["valid"]) == (72, 48)
    assert sum(data["invalid"].values()) == 24 and data["configs"] == []
    compiled = json.loads(tuner("check", STUDY, "--compile", "--arch", "sm_90a", "--json", "--cache-dir", cache_dir, "--jobs", 2).stdout)
    assert len(compiled["configs"]) == 48
    statuses = {c["status"] for c in compiled["configs"]}
    assert statuses <= {"ok", "spills"} and "ok" in statuses
    for c in compiled["configs"]:
        assert set(c) >= {"params", "regs", "spills", "smem_bytes", "status"}
        assert c["regs"] and c["smem_bytes"] == 4 * c["params"]["BLOCK_K"] * (2 * c["params"]["BLOCK"] + 1)
    table = tuner("check", STUDY, "--compile", "--arch", "sm_90a", "--cache-dir", cache_dir)
    assert "REGS" in table.stdout and "SMEM_KB" in table.stdout and "compiled: ok=" in table.stdout
    native = tuner("check", STUDY, "--compile", "--arch", "native")  # one target, named: native is the study's arch
    assert native.returncode == 2 and native.stderr.startswith("tuner: error: --arch native: --arch names one target")


def test_run_best_status_export_notes_artifacts(tmp_path, cache_dir):
    db = f"sqlite:///{tmp_path / 't.db'}"
    art = tmp_path / "artifacts"
    run = tuner("run", STUDY, "--storage", db, "--trials", 6, "--json", "--cache-dir", cache_dir, "--artifacts", art, env=FAKE)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(summary) == {"study", "storage", "trials", "statuses", "best", "confirmed", "reference",
                            "trials_run", "first_trial_s", "trials_per_s", "run_s", "startup_s"}
    assert summary["reference"].startswith("reference: chosen as the fastest of the first 6 configs")
    assert summary["trials"] == 6 and summary["trials_run"] == 6
    marks = summary["startup_s"]  # when each step of the start finished; the worker is spawned before the CLI's imports
    assert marks["worker_spawned"] < marks["command_started"] <= marks["study_loaded"] <= marks["worker_ready"] <= marks["storage_and_space_ready"]
    assert 0 < summary["first_trial_s"] <= summary["run_s"] and summary["trials_per_s"] > 0 and summary["best"]["flags"].startswith("-DM_DIM=2048")
    confirmed = summary["confirmed"]  # the top configs re-measured against each other at the end of the run
    assert confirmed["winner"] not in confirmed["tied"] and len(confirmed["standings"]) >= 2  # tied: the others

    study = optuna.load_study(study_name="example_sgemm", storage=db)
    assert study.user_attrs["device_name"] == "Fake GPU" and study.user_attrs["source_hash"]
    assert study.user_attrs["nvrtc_version"].startswith("13.")
    trial = study.best_trial
    for key in ("ms", "tflops", "regs", "spills", "smem_bytes", "compile_s", "status", "reason", "flags"):
        assert key in trial.user_attrs, key
    assert isinstance(trial.user_attrs["regs"], int) and isinstance(trial.user_attrs["ms"], float)
    note_keys = [k for k in optuna_private.study_system_attrs(study) if "note" in k]
    assert note_keys, "optuna-dashboard note written"
    assert any(art.iterdir()), "compile logs kept as artifacts"

    header = tmp_path / "best.h"
    best = tuner("best", "--study", "example_sgemm", "--storage", db, "--header", header)
    winner = next(r for r in confirmed["standings"] if r["trial"] == confirmed["winner"])
    assert best.returncode == 0 and best.stdout.strip() == winner["flags"]
    text = header.read_text()
    assert "#define BLOCK " in text and "#ifndef THREAD_TILE" in text

    status = json.loads(tuner("status", "--storage", db, "--json").stdout)
    (row,) = status["studies"]
    assert row["study"] == "example_sgemm" and row["trials"] == 6 and row["device"] == "Fake GPU"

    out = tmp_path / "trials.csv"
    assert tuner("export", STUDY, "--storage", db, "-o", out).returncode == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 6 and "status" in rows[0] and "BLOCK" in rows[0] and "user_attrs_status" not in rows[0]


def test_grid_table_and_csv_replay_roundtrip(tmp_path, cache_dir):
    db = f"sqlite:///{tmp_path / 'g.db'}"
    csv_path = tmp_path / "grid.csv"
    grid = tuner("grid", ROOT / "studies" / "example_sgemm.toml", "--storage", db, "--csv", csv_path, "--cache-dir", cache_dir, env=FAKE)
    assert grid.returncode == 0, grid.stderr
    lines = grid.stdout.splitlines()
    assert lines[0].split()[-7:] == ["REGS", "SPILL", "SMEM_KB", "MS", "TFLOPS", "CHECKSUM", "STATUS"]
    assert lines[1].split()[-1] == "BEST"
    rows = list(csv.DictReader(csv_path.open()))
    measured = [r for r in rows if r["status"] != "invalid"]
    assert len(measured) == 48 and {r["status"] for r in measured} == {"ok", "spills"}
    # the configs the kernel's model rejected are listed too, with why, as the seed's table lists them
    rejected = [r for r in rows if r["status"] == "invalid"]
    assert len(rejected) == 24 and all("threads per block" in r["reason"] for r in rejected)
    assert "48 configs measured and 24 rejected before compiling" in grid.stdout
    # the recorded table replays: the same study name is refused (another setup), a new one works
    replay = tuner("run", ROOT / "studies" / "example_sgemm.toml", "--replay", csv_path, "--storage", db, "--trials", 10, "--json")
    assert replay.returncode == 0, replay.stderr
    summary = json.loads(replay.stdout.strip().splitlines()[-1])
    assert summary["study"] == "example_sgemm.replay" and summary["trials"] == 10
    best_recorded = min(float(r["ms"]) for r in measured if r["status"] == "ok")
    assert summary["best"]["ms"] >= best_recorded


def test_a_tiered_studys_grid_measures_tier_1_then_tier_2_on_its_winner(tmp_path, cache_dir):
    """`tuner grid` follows the study file's mode (its --help says so): a tiered study's grid is tier 1
    with tier 2 at its defaults, then every tier-2 combination on the tier-1 winner."""
    from tuner.contract.kernel_spec import load_spec
    from tuner.search.space import Space
    from tuner.study.file import load_study
    from tuner.testing import write_study

    study = write_study(tmp_path, "tiered", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                        tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4]}, tier2={"UNROLL_K": [1, 2, 4]},
                        search={"mode": "tiered"})
    cfg = load_study(study)
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    grid = tuner("grid", study, "--storage", f"sqlite:///{tmp_path / 'g.db'}", "--csv", tmp_path / "g.csv",
                 "--cache-dir", cache_dir, "--json", env=FAKE)
    assert grid.returncode == 0, grid.stderr
    summary = json.loads(grid.stdout.strip().splitlines()[-1])
    tier1 = len(space.tier1_candidates())
    assert summary["trials"] == tier1 + len(space.tier2_candidates(summary["best"]["params"])) - 1 < len(space.valid)
    # its table lists the configs of that plan the kernel's model rejected, not the whole product's
    winner = summary["best"]["params"]
    product = [dict(zip(space.axes, v, strict=True)) for v in itertools.product(*space.axes.values())]
    planned = [p for p in product if p["UNROLL_K"] == space.defaults()["UNROLL_K"]
               or all(p[a] == winner[a] for a in space.tier1)]
    expected = {tuple(p.values()) for p in planned if not space.is_valid(p)}
    rows = list(csv.DictReader((tmp_path / "g.csv").open()))
    listed = {(int(r["BLOCK"]), int(r["THREAD_TILE"]), int(r["UNROLL_K"])) for r in rows if r["status"] == "invalid"}
    assert listed == expected and expected


def test_no_gpu_says_so_and_shows_replay():
    result = tuner("run", STUDY, "--storage", "memory", env={"TUNER_WORKER_BACKEND": "cuda"})
    assert result.returncode == 2
    assert "no usable CUDA GPU" in result.stderr and "--replay" in result.stderr


def test_tiered_mode_runs_tier1_then_tier2_on_the_winner(tmp_path, cache_dir):
    """Tiered mode: tier 1 with tier-2 defines at their defaults, then tier 2 on the winner."""
    csv_path = tmp_path / "grid.csv"
    assert tuner("grid", STUDY, "--storage", f"sqlite:///{tmp_path / 'g.db'}", "--csv", csv_path,
                 "--cache-dir", cache_dir, env=FAKE).returncode == 0
    db = f"sqlite:///{tmp_path / 't.db'}"
    run = tuner("run", STUDY, "--replay", csv_path, "--mode", "tiered", "--trials", 8, "--storage", db, "--json", "--no-pruner")
    assert run.returncode == 0, run.stderr
    study = optuna.load_study(study_name="example_sgemm.replay", storage=db)
    tier1 = [t for t in study.trials if t.user_attrs["phase"] == "tier1"]
    tier2 = [t for t in study.trials if t.user_attrs["phase"] == "tier2"]
    assert len(tier1) == 8 and all(t.params["UNROLL_K"] == 1 for t in tier1)  # tier 2 held at the default
    winner = min((t for t in tier1 if t.value is not None), key=lambda t: t.value).params
    assert tier2, "tier 2 ran on the tier-1 winner"
    for t in tier2:
        assert {k: v for k, v in t.params.items() if k != "UNROLL_K"} == {k: v for k, v in winner.items() if k != "UNROLL_K"}
    assert {t.params["UNROLL_K"] for t in tier2} | {1} == {0, 1}


def test_ctrl_c_ends_cleanly_and_resumes(tmp_path, cache_dir):
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    db = tmp_path / "c.db"
    env = {**__import__("os").environ, **FAKE, "FAKE_TRIAL_DELAY_S": "1.0"}
    # no reference probe: its trials are stored together at its end (the probe's own Ctrl-C: test_reference_probe)
    cmd = [sys.executable, "-m", "tuner", "run", str(STUDY), "--storage", f"sqlite:///{db}", "--trials", 6,
           "--cache-dir", str(cache_dir), "--no-pruner", "--reference-probe", 0]
    proc = subprocess.Popen(list(map(str, cmd)), env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, states = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None:  # interrupt mid-trial, once something is stored
        time.sleep(0.3)
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                states = [s for (s,) in conn.execute("select state from trials order by number")]
        except sqlite3.Error:
            continue
        if "COMPLETE" in states and states[-1] == "RUNNING":
            break
    running = proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert running, f"the run ended before Ctrl-C (trial states seen last: {states}): {err[-1500:]}"
    assert proc.returncode == 130, f"trial states when interrupted: {states}\n{err[-1500:]}"
    assert "interrupted" in err and "Traceback" not in err
    study = optuna.load_study(study_name="example_sgemm", storage=f"sqlite:///{db}")
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    done = [t for t in study.trials if t.state.is_finished() and t.state != optuna.trial.TrialState.FAIL]
    rerun = tuner("run", STUDY, "--storage", f"sqlite:///{db}", "--trials", 6, "--cache-dir", cache_dir, "--json",
                  "--reference-probe", 0, env=FAKE)
    assert rerun.returncode == 0, rerun.stderr
    again = optuna.load_study(study_name="example_sgemm", storage=f"sqlite:///{db}")
    assert len([t for t in again.trials if t.state.is_finished() and t.state != optuna.trial.TrialState.FAIL]) == 6
    assert all(again.trials[t.number].value == t.value for t in done)


def test_an_ignored_ctrl_c_stays_ignored(tmp_path, cache_dir):
    """A run started with SIGINT ignored (a background job of a script, nohup) runs to its budget."""
    import signal
    import subprocess
    import sys
    import time

    db = tmp_path / "i.db"
    env = {**__import__("os").environ, **FAKE, "FAKE_TRIAL_DELAY_S": "0.3"}
    cmd = [sys.executable, "-m", "tuner", "run", str(STUDY), "--storage", f"sqlite:///{db}", "--trials", "8",
           "--cache-dir", str(cache_dir), "--no-pruner", "--json"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not db.exists():
        time.sleep(0.1)
    for _ in range(20):  # Ctrl-C at many moments of the loop, the deferred blocks included
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "interrupted" not in err
    study = optuna.load_study(study_name="example_sgemm", storage=f"sqlite:///{db}")
    assert len([t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]) == 8


def test_warm_start_does_not_queue_a_config_already_waiting():
    """Two workers that start together: the second must not queue the first's winners again."""
    from tuner.evaluate.replay import load_recording, recording_space
    from tuner.search.warm_start import MARK, study_source, warm_start

    space = recording_space(load_recording(PNPOLY))
    storage = optuna.storages.InMemoryStorage()
    source = optuna.create_study(study_name="src", storage=storage)
    distributions = {a: optuna.distributions.CategoricalDistribution(v) for a, v in space.axes.items()}
    for value, params in enumerate(space.valid[:4]):
        source.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=float(value + 1)))
    target = optuna.create_study(study_name="dst", storage=storage)
    first = warm_start(target, space, [study_source(storage, "src")], top=3)
    target.set_user_attr(MARK, None)  # as a second worker sees it before the first marks the study
    second = warm_start(target, space, [study_source(storage, "src")], top=3)
    assert len(first) == 3 and [m.params for m in second] == [space.valid[3]]
    assert len(target.get_trials(states=(optuna.trial.TrialState.WAITING,))) == 4


def test_warm_start_queues_an_earlier_studys_winners_first(tmp_path, cache_dir):
    db = f"sqlite:///{tmp_path / 'w.db'}"
    # no pruner: every source trial completes, so it has 3 winners to give whichever configs the sampler picked
    first = tuner("run", STUDY, "--storage", db, "--trials", 8, "--no-pruner", "--json", "--cache-dir", cache_dir, env=FAKE)
    assert first.returncode == 0, first.stderr
    source = optuna.load_study(study_name="example_sgemm", storage=db)
    ranked = [t.params for t in sorted((t for t in source.trials if t.value is not None), key=lambda t: t.value)]

    small = tmp_path / "small.toml"  # a new shape: the same kernel at another size
    small.write_text(STUDY.read_text().replace('name = "example_sgemm"', 'name = "example_small"')
                     .replace("= 2048", "= 1024").replace('"../kernel/', f'"{ROOT}/kernel/'))
    run = tuner("run", small, "--storage", db, "--trials", 5, "--warm-start", "example_sgemm", "--warm-start-top", 3,
                "--cache-dir", cache_dir, env=FAKE)
    assert run.returncode == 0, run.stderr
    n_source = len([t for t in source.trials if t.state.is_finished()])
    assert f"warm start: 3 configs queued, prior from {n_source} trials of example_sgemm" in run.stderr
    target = optuna.load_study(study_name="example_small", storage=db)
    assert [t.params for t in target.trials[:3]] == ranked[:3]
    assert target.trials[0].user_attrs["warm_started_from"].startswith("example_sgemm#")
    assert len(target.trials) == 5 and len({tuple(t.params.values()) for t in target.trials}) == 5

    again = tuner("run", small, "--storage", db, "--trials", 6, "--warm-start", "example_sgemm", "--cache-dir", cache_dir, env=FAKE)
    # queued once per study; on resume the source's trials are the prior again
    assert again.returncode == 0 and f"warm start: prior from {n_source} trials of example_sgemm\n" in again.stderr
    missing = tuner("run", small, "--storage", db, "--trials", 7, "--warm-start", "nope", "--study-name", "other", env=FAKE)
    assert missing.returncode == 2 and "--warm-start: no study 'nope'" in missing.stderr


def test_a_kernel_tuner_cache_of_another_gpu_is_a_warm_start_source(tmp_path):
    """A user with a Kernel Tuner cache of the kernel on another GPU (or our CSV export) starts from it
    as from a study in the storage: its fastest configs first, every config it recorded as the prior."""
    from tuner.evaluate.replay import load_recording

    other = PNPOLY.parent / "pnpoly_RTX_2080_Ti.json.gz"
    recording = load_recording(other)
    fastest = [dict(zip(recording.axes, key, strict=True))
               for _, key in sorted((r.ms, key) for key, r in recording.records.items() if r.status == "ok")[:3]]
    recorded = sum(r.status != "invalid" for r in recording.records.values())
    db = f"sqlite:///{tmp_path / 'k.db'}"
    run = tuner("run", "--replay", PNPOLY, "--storage", db, "--study-name", "dst", "--trials", 5, "--seed", 0,
                "--warm-start", other, "--warm-start-top", 3)
    assert run.returncode == 0, run.stderr
    assert f"warm start: 3 configs queued, prior from {recorded} trials of pnpoly_RTX_2080_Ti.json.gz" in run.stderr
    target = optuna.load_study(study_name="dst", storage=db)
    assert [t.params for t in target.trials[:3]] == fastest
    assert target.trials[0].user_attrs["warm_started_from"].startswith("pnpoly_RTX_2080_Ti.json.gz#")
    # our own export is a recording too: a study of another machine's storage, passed as a file
    exported = tmp_path / "dst.csv"
    assert tuner("export", "--storage", db, "--study", "dst", "-o", exported).returncode == 0
    again = tuner("run", "--replay", PNPOLY, "--storage", db, "--study-name", "again", "--trials", 2, "--warm-start", exported)
    assert again.returncode == 0 and "prior from 5 trials of dst.csv" in again.stderr, again.stderr

    broken = tmp_path / "broken.csv"
    broken.write_text("not,a\nrecording")
    # KTT's recording of this kernel and GPU spells the defines in capitals: it says nothing of these configs
    ktt = ROOT / "tests/data/ktt/KTPnpolyOutput_3090.json.gz"
    for source, message in ((broken, "--warm-start: replay file"), (tmp_path / "missing.csv", "no study"),
                            (tmp_path / "missing.toml", "--warm-start " + str(tmp_path / "missing.toml") + ": no such study file"),
                            (ktt, "tunes none of this study's defines (the names differ in case")):
        bad = tuner("run", "--replay", PNPOLY, "--storage", db, "--study-name", "other", "--trials", 2, "--warm-start", source)
        assert bad.returncode == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "other" not in optuna.get_all_study_names(db)


def test_a_warm_start_queue_longer_than_the_run_waits_for_the_next_run(tmp_path):
    """`--trials 2` with three configs queued: the run measures two, and its summary counts the third
    apart, as what the study's next run measures first (which it does)."""
    from tuner.evaluate.replay import load_recording

    other = PNPOLY.parent / "pnpoly_RTX_2080_Ti.json.gz"
    db = f"sqlite:///{tmp_path / 'k.db'}"
    run = tuner("run", "--replay", PNPOLY, "--storage", db, "--study-name", "dst", "--trials", 2, "--seed", 0,
                "--warm-start", other, "--warm-start-top", 3)
    assert run.returncode == 0, run.stderr
    assert ": 2 trials (ok=2), 1 more queued: the study's next run measures it first" in run.stdout, run.stdout
    assert optuna.load_study(study_name="dst", storage=db).trials[2].state == optuna.trial.TrialState.WAITING
    again = tuner("run", "--replay", PNPOLY, "--storage", db, "--study-name", "dst", "--trials", 3)
    assert again.returncode == 0 and ": 3 trials (" in again.stdout and "queued" not in again.stdout, again.stdout
    recording = load_recording(other)
    third_fastest = sorted((r.ms, key) for key, r in recording.records.items() if r.status == "ok")[2][1]
    measured = optuna.load_study(study_name="dst", storage=db).trials[2]
    assert measured.params == dict(zip(recording.axes, third_fastest, strict=True)), measured.params


def test_the_readme_replay_then_bare_best_export_and_a_warm_start_by_name(tmp_path):
    """A newcomer's first hour without a GPU: a replay, then `tuner best` and `tuner export` with no study named
    (the storage's only study), then another shape warm-started by the first one's name or study file (its
    replay is what is stored)."""
    grid, recorded = ROOT / "studies", ROOT / "studies" / "recorded"
    first = tuner("run", grid / "patch_embed_sm90a_hopper_grid.toml", "--replay",
                  recorded / "patch_embed_sm90a_hopper_grid_h200.json", "--trials", 3, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    best = tuner("best", cwd=tmp_path)
    assert best.returncode == 0 and "-DBLOCK_N=" in best.stdout, best.stderr
    export = tuner("export", "-o", "trials.csv", cwd=tmp_path)
    assert export.returncode == 0 and "3 trials of patch_embed_sm90a_hopper_grid.replay" in export.stdout, export.stderr
    for source, name in (("patch_embed_sm90a_hopper_grid", "by_name"), (grid / "patch_embed_sm90a_hopper_grid.toml", "by_file")):
        warm = tuner("run", grid / "fc2_sm90a_hopper_grid.toml", "--replay", recorded / "fc2_sm90a_hopper_grid_h200.json",
                     "--study-name", name, "--trials", 3, "--warm-start", source, cwd=tmp_path)
        assert warm.returncode == 0, warm.stderr
        assert "prior from 3 trials of patch_embed_sm90a_hopper_grid.replay" in warm.stderr, warm.stderr
    several = tuner("best", cwd=tmp_path)
    assert several.returncode == 2 and several.stderr.strip() == (
        "tuner: error: 3 studies in sqlite:///tuner.db: patch_embed_sm90a_hopper_grid.replay, by_name, by_file; "
        "give a study file or --study NAME"), several.stderr


def test_search_start_configs_are_tried_first_once(tmp_path, cache_dir):
    db = f"sqlite:///{tmp_path / 's.db'}"
    study = tmp_path / "start.toml"
    study.write_text(STUDY.read_text().replace('"../kernel/', f'"{ROOT}/kernel/').replace(
        "pruner_margin = 0.10", "pruner_margin = 0.10\nstart = [{BLOCK = 64, THREAD_TILE = 4}, {BLOCK = 128, BLOCK_K = 32}]"))
    run = tuner("run", study, "--storage", db, "--trials", 4, "--cache-dir", cache_dir, env=FAKE)
    assert run.returncode == 0, run.stderr
    assert "start: 2 config(s) from [search] start queued first" in run.stderr
    trials = optuna.load_study(study_name="example_sgemm", storage=db).trials
    # axes a start entry leaves out take the space's defaults
    assert {k: trials[0].params[k] for k in ("BLOCK", "THREAD_TILE")} == {"BLOCK": 64, "THREAD_TILE": 4}
    assert {k: trials[1].params[k] for k in ("BLOCK", "BLOCK_K")} == {"BLOCK": 128, "BLOCK_K": 32}
    assert [t.user_attrs.get("start_config") for t in trials[:3]] == [1, 2, None]
    again = tuner("run", study, "--storage", db, "--trials", 5, "--cache-dir", cache_dir, env=FAKE)
    assert again.returncode == 0 and "start:" not in again.stderr  # once per study, not on resume


def test_bad_search_start_is_one_line_and_stores_nothing(tmp_path, cache_dir):
    db = tmp_path / "bad.db"
    base = STUDY.read_text().replace('"../kernel/', f'"{ROOT}/kernel/')
    cases = {
        "start = [{BLOCK = 48}]": "[search.start #1.BLOCK] 48 is not one of the axis values [32, 64, 128]",
        "start = [{NOPE = 1}]": "[search.start #1.NOPE] is not a search axis",
        "start = {BLOCK = 64}": "[search.start] must be a list of inline tables",
        "start = [{BLOCK = 32, THREAD_TILE = 8}]":
            "[search.start] #1 is rejected by the kernel's constraint model: 16 threads per block < one warp",
    }
    for line, message in cases.items():
        study = tmp_path / "bad.toml"
        study.write_text(base.replace("pruner_margin = 0.10", f"pruner_margin = 0.10\n{line}"))
        run = tuner("run", study, "--storage", f"sqlite:///{db}", "--trials", 2, "--cache-dir", cache_dir, env=FAKE)
        assert run.returncode == 2 and message in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1
    assert not db.exists() or optuna.get_all_study_summaries(f"sqlite:///{db}") == []


def test_workers_honour_every_setting_of_the_run(tmp_path):
    """`--workers 2` hands the run's settings to both workers: here the warm start."""
    from tuner.store.storage import open_storage

    url = str(tmp_path / "store.log")
    first = tuner("run", "--replay", PNPOLY, "--storage", url, "--study-name", "src", "--trials", 10, "--seed", 1, "--json")
    assert first.returncode == 0, first.stderr
    run = tuner("run", "--replay", PNPOLY, "--storage", url, "--study-name", "dst", "--trials", 6, "--workers", 2,
                "--warm-start", "src", "--warm-start-top", 3, "--seed", 5, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["workers"] == 2
    storage = open_storage(url)
    source = optuna.load_study(study_name="src", storage=storage)
    top3 = {tuple(sorted(t.params.items())) for t in sorted(
        source.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)), key=lambda t: t.value)[:3]}
    target = optuna.load_study(study_name="dst", storage=storage)
    assert target.user_attrs["warm_started_from"] == ["src"]
    warm = [t for t in target.trials if "warm_started_from" in t.user_attrs]
    assert {tuple(sorted(t.params.items())) for t in warm} == top3
    # measured (the pruner may stop one that is significantly slower than the best), none left waiting
    assert all(t.state.is_finished() and t.value is not None for t in warm), \
        [(t.number, t.state.name, t.value, t.user_attrs.get("status")) for t in target.trials]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--trials", 0), "--trials must be >= 1, got 0"),
        (("--trials", -3), "--trials must be >= 1, got -3"),
        (("--trials", "ten"), "--trials must be an integer, got 'ten'"),
        (("--timeout-min", 0), "--timeout-min must be > 0, got 0.0"),
        (("--timeout-min", -1), "--timeout-min must be > 0, got -1.0"),
        (("--timeout-min", "nan"), "--timeout-min must be a finite number, got nan"),
        (("--workers", 0), "--workers must be >= 1, got 0"),
        (("--workers", -2), "--workers must be >= 1, got -2"),
        (("--warm-start-top", -1), "--warm-start-top must be >= 1, got -1"),
        (("--seed", -1), "--seed must be >= 0, got -1"),
        (("--seed", 2**32), f"--seed must be <= {2**32 - 1}, got {2**32}"),
        (("--sampler", "annealing"), "--sampler 'annealing' unknown; expected one of tpe, gp, random, grid"),
    ],
)
def test_bad_numbers_on_the_command_line_are_one_line_exit_2(tmp_path, args, message):
    result = tuner("run", "--replay", PNPOLY, "--storage", tmp_path / "s.log", *args)
    assert result.returncode == 2 and result.stderr == f"tuner: error: {message}\n", result.stderr
    assert not (tmp_path / "s.log").exists()  # refused before a study is made


def test_worker_and_check_flags_follow_the_same_rules(tmp_path):
    worker = tuner("worker", "--replay", PNPOLY, "--storage", tmp_path / "s.log", "--seed", -1)
    assert worker.returncode == 2 and worker.stderr == "tuner: error: --seed must be >= 0, got -1\n"
    check = tuner("check", STUDY, "--jobs", 0)
    assert check.returncode == 2 and check.stderr == "tuner: error: --jobs must be >= 1, got 0\n"
    handed = tuner("worker", "--replay", PNPOLY, "--storage", tmp_path / "s.log", env={"TUNER_OPTIONS": '{"trials": 0}'})
    assert handed.returncode == 2 and handed.stderr == "tuner: error: $TUNER_OPTIONS trials must be >= 1, got 0\n"


@pytest.mark.parametrize(("argv", "expected"), [
    (["run", "s.toml"], True),
    (["run", "s.toml", "--trials", "5", "--workers", "1"], True),
    (["run", "s.toml", "--workers=1"], True),
    (["run", "s.toml", "--workers", "2"], False),
    (["run", "s.toml", "--workers=4"], False),
    (["run", "s.toml", "--workers"], False),
    (["run", "--replay", "cache.json"], False),
    (["run", "s.toml", "--replay=cache.json"], False),
    (["run", "s.toml", "--help"], False),
    (["run"], False),
    (["grid", "s.toml"], False),
    ([], False),
])
def test_the_worker_is_spawned_early_only_for_a_measured_run(argv, expected):
    from tuner.cli.launch import runs_on_the_gpu

    assert runs_on_the_gpu(argv) is expected


def test_an_early_worker_is_stopped_when_the_arguments_are_bad(tmp_path):
    """The launcher spawns the worker before the arguments are parsed; bad input still exits 2 at once."""
    result = tuner("run", STUDY, "--trials", "many", "--storage", f"sqlite:///{tmp_path / 't.db'}",
                   env={**FAKE, "FAKE_START_DELAY_S": "60"}, timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--trials" in result.stderr


def test_a_worker_that_finds_no_study_says_it_started_one_alone(tmp_path):
    """`tuner worker` on another host without the run's --storage would search a study of its own in
    a local file, thinking it helps the run: it says so. Joining a study that exists says nothing."""
    storage = tmp_path / "s.log"
    alone = tuner("worker", "--replay", PNPOLY, "--storage", storage, "--trials", 3)
    assert alone.returncode == 0, alone.stderr
    assert (f"study pnpoly_RTX_3090.replay was not in {storage}: this worker started it, alone (to join a `tuner run`, "
            "give the --storage that run uses)") in alone.stderr
    joined = tuner("worker", "--replay", PNPOLY, "--storage", storage, "--trials", 6)
    assert joined.returncode == 0, joined.stderr
    assert "was not in" not in joined.stderr
    run = tuner("run", "--replay", PNPOLY, "--storage", tmp_path / "r.log", "--trials", 3)
    assert run.returncode == 0 and "was not in" not in run.stderr


def test_the_grid_table_marks_the_winner_and_leaves_out_trials_queued_again(tmp_path, cache_dir):
    """The row marked BEST is the winner the summary and `tuner best` name (a confirmation may name
    another config than the best value); a trial a stop cut short was queued again, and the later
    trial is its config's row. A finished grid run again says it holds its plan, with no --trials hint
    (grid has no such flag)."""
    from tuner.testing import write_study

    study = write_study(tmp_path, "grid_best", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                           tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4]}, search={"confirm_top": 3},
                           measure={"timeout_s": 20})
    log = tmp_path / "s.log"
    first = tuner("grid", study, "--storage", log, "--cache-dir", cache_dir, "--csv", tmp_path / "a.csv", env=FAKE)
    assert first.returncode == 0, first.stderr
    stored = optuna.load_study(study_name="grid_best.grid", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(log))))
    complete = sorted(stored.get_trials(states=(optuna.trial.TrialState.COMPLETE,)), key=lambda t: t.value)
    runner_up = complete[1]
    finished = len([t for t in stored.trials if t.state.is_finished()])
    record = {**stored.user_attrs["confirmations"][-1], "winner": runner_up.number}
    stored.set_user_attr("confirmations", [*stored.user_attrs["confirmations"], record])
    stored.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params=complete[0].params,
                                               distributions=complete[0].distributions,
                                               user_attrs={"status": "interrupted", "reason": "queued again"}))

    again = tuner("grid", study, "--storage", log, "--cache-dir", cache_dir, "--csv", tmp_path / "b.csv", env=FAKE)
    assert again.returncode == 0, again.stderr
    assert "the grid holds every config of its plan already: nothing ran" in again.stderr and "--trials" not in again.stderr
    lines = again.stdout.splitlines()
    assert lines[1].split()[-1] == "BEST"
    assert lines[1].split()[:2] == [str(runner_up.params["BLOCK"]), str(runner_up.params["THREAD_TILE"])]
    assert f"(trial {runner_up.number})" in next(line for line in lines if line.startswith("best:"))
    assert f"\n{finished} configs measured" in again.stdout
    rows = list(csv.DictReader((tmp_path / "b.csv").open()))
    assert float(rows[0]["number"]) == runner_up.number and "interrupted" not in {r["status"] for r in rows}
    # `tuner confirm` finds the grid's study as `tuner best` does, in a journal file too
    confirm = tuner("confirm", study, "--storage", log, "--top", 2, "--cache-dir", cache_dir, env=FAKE)
    assert confirm.returncode == 0 and "confirmed winner: trial" in confirm.stderr, confirm.stderr
    assert len(optuna.load_study(study_name="grid_best.grid", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(log)))).user_attrs["confirmations"]) == 3


def _progress_lines(stderr: str) -> list[tuple[int, int]]:
    """(done, total) of each ``compiling N/M configs (S s)`` line."""
    import re

    found = [re.fullmatch(r"compiling (\d+)/(\d+) configs \(\d+ s\)", line) for line in stderr.splitlines()]
    return [(int(m[1]), int(m[2])) for m in found if m]


def test_compiling_up_front_prints_lines_off_a_terminal(tmp_path, monkeypatch):
    """In a log or a pipe no bar draws, and minutes of compiles would print nothing: `tuner grid`'s
    compiles up front and `tuner check --compile`'s print a line each time another tenth is done, the
    last one with every config; `--json` prints none."""
    from tuner import progress
    from tuner.testing import cli, write_study

    monkeypatch.setattr(progress, "LINE_EVERY_S", float("inf"))  # the tenths alone: the same lines on any machine
    monkeypatch.setenv("TUNER_WORKER_BACKEND", FAKE_BACKEND)
    monkeypatch.chdir(tmp_path)
    study = write_study(tmp_path, "lines", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                        tier1={"BLOCK": [32, 64], "BLOCK_K": [8, 16], "THREAD_TILE": [1, 2, 4]}, measure={"timeout_s": 20})
    cache = ("--cache-dir", tmp_path / "cache")
    valid = json.loads(cli("check", study, "--json").stdout)["valid"]
    tenths = [(-(-k * valid // 10), valid) for k in range(1, 11)]  # the first count past each tenth
    assert valid >= 10
    grid = cli("grid", study, "--storage", tmp_path / "s.log", *cache)
    assert grid.returncode == 0, grid.stderr
    assert _progress_lines(grid.stderr) == tenths and "\r" not in grid.stderr
    check = cli("check", study, "--compile", *cache)
    assert check.returncode == 0, check.stderr
    assert _progress_lines(check.stderr) == tenths and "\r" not in check.stderr
    quiet = cli("check", study, "--compile", "--json", *cache)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_progress_lines_say_each_tenth_or_after_a_while_and_the_last_at_close(monkeypatch):
    from tuner import progress

    said: list[str] = []
    monkeypatch.setattr(progress, "LINE_EVERY_S", float("inf"))
    lines = progress.ProgressLines(40, "compiling", "config", said.append)
    for _ in range(13):
        lines.update()
    lines.close()  # (stopped short: the count it reached)
    assert [line.split(" (")[0] for line in said] == ["compiling 4/40 configs", "compiling 8/40 configs",
                                                      "compiling 12/40 configs", "compiling 13/40 configs"]
    said.clear()
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # the time passed: every unit done says so
    lines = progress.ProgressLines(40, "compiling", "config", said.append)
    for _ in range(3):
        lines.update()
    lines.close()
    assert [line.split(" (")[0] for line in said] == [f"compiling {n}/40 configs" for n in (1, 2, 3)]


@pytest.mark.parametrize("where", ["start", "reference"])
def test_check_refuses_a_start_or_reference_config_the_kernels_model_rejects(tmp_path, where):
    """`tuner check` passes only what `tuner run` starts from: a start config or a reference the kernel's
    constraint model rejects (16384 threads per block) is refused by both, in the same line."""
    from tuner.testing import write_study

    rejected = {"BLOCK": 128, "THREAD_TILE": 1}
    study = write_study(tmp_path, "rejected_start", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                        tier1={"BLOCK": [32, 128], "THREAD_TILE": [1, 2]},
                        **({"search": {"start": [rejected]}} if where == "start" else {"measure": {"reference": rejected}}))
    named = "[search.start] #1" if where == "start" else "[measure] reference"
    line = f"tuner: error: {named} is rejected by the kernel's constraint model: 16384 threads per block > 1024\n"
    check = tuner("check", study)
    assert check.returncode == 2 and check.stderr == line, check.stderr
    run = tuner("run", study, "--storage", tmp_path / "s.log", env=FAKE)
    assert run.returncode == 2 and run.stderr == line, run.stderr


def test_a_tiered_run_says_where_a_start_configs_tier2_values_go(tmp_path, cache_dir):
    """Tiered mode measures tier 1 with tier 2 at its defaults: a start config's own tier-2 values are not
    what tier 1 measures of it, and the run says so."""
    from tuner.testing import write_study

    study = write_study(tmp_path, "tiered_start", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                        tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4]}, tier2={"UNROLL_K": [1, 2, 4]},
                        search={"mode": "tiered", "trials": 3, "confirm_top": 0,
                                "start": [{"BLOCK": 64, "THREAD_TILE": 2, "UNROLL_K": 4}]})
    run = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 't.db'}", "--cache-dir", cache_dir, env=FAKE)
    assert run.returncode == 0, run.stderr
    assert ("start: tiered mode measures tier 1 with tier 2 at its defaults: UNROLL_K=4 wait for tier 2, which tries "
            "every tier-2 value on tier 1's winner") in run.stderr, run.stderr


def test_a_run_off_a_terminal_prints_its_trials_progress_as_lines(tmp_path):
    """In a log (CI, nohup) a run's bar would show nothing until the end: a line comes with each tenth of
    the trials instead, the best so far in it; none with --json."""
    log = tmp_path / "s.log"
    run = tuner("run", "--replay", PNPOLY, "--storage", log, "--trials", 20, "--seed", 1)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("pnpoly_RTX_3090.replay [joint] ")]
    counts = [int(line.split()[2].split("/")[0]) for line in lines]
    assert counts == sorted(set(counts)) and counts[-1] == 20 and len(counts) >= 10, run.stderr
    assert all("/20 trials, last=" in line and " best=" in line for line in lines) and "\r" not in run.stderr
    quiet = tuner("run", "--replay", PNPOLY, "--storage", log, "--trials", 30, "--seed", 1, "--json")
    assert quiet.returncode == 0 and "trials, last=" not in quiet.stderr, quiet.stderr


def test_every_command_has_a_help_that_prints():
    """argparse formats help texts with %: an option's help that says "95 % interval" broke `--help`."""
    import argparse
    import contextlib
    import io

    from tuner.cli.commands import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"run", "confirm", "grid", "check", "best"} <= set(commands.choices)
    for name, command in commands.choices.items():
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            command.print_help()
        assert shown.getvalue().startswith("usage: "), name
    assert "95 % interval" in commands.choices["confirm"].format_help()
