"""The pipelined loop on CPU: compile and measure overlap, compile rejections never reach the
worker, nothing is left RUNNING however the run ends, and the summary's timings.

The GPU is the worker double (tests/fake_backend.py) and NVRTC its stand-in ``fake_nvrtc``,
both with fixed delays, so the timing claims are about the loop, not about this machine.
"""

from __future__ import annotations

import collections
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tuner.evaluate.ahead import START_DEPTH, WINDOW, AheadDepth
from tuner.store.storage import open_storage
from tuner.testing import run_summary

STUDY = ROOT / "studies" / "example_sgemm.toml"
FAKE_COMPILER = f"{ROOT / 'tests' / 'fake_backend.py'}:fake_nvrtc"
COMPILE_S, MEASURE_S = 0.6, 0.3
MEASURED = ("ok", "pruned_slow", "mismatch")  # statuses that took the worker's time


def fake_env(**delays: float) -> dict[str, str]:
    env = {"TUNER_WORKER_BACKEND": FAKE_BACKEND, "TUNER_COMPILER": FAKE_COMPILER}
    env.update({f"FAKE_{k.upper()}_S": str(v) for k, v in delays.items()})
    return env


def run_json(*args, env) -> dict:
    return run_summary(tuner("run", *args, "--json", env=env))


def loop_costs(db: str, name: str) -> tuple[float, float]:
    """(the run's serial cost of trials 2..n, their wall time): compile + measure of each, and
    from the first trial's end to the last's."""
    trials = sorted(optuna.load_study(study_name=name, storage=db).trials, key=lambda t: t.datetime_complete)
    serial = sum(COMPILE_S + (MEASURE_S if t.user_attrs["status"] in MEASURED else 0) for t in trials[1:])
    wall = (trials[-1].datetime_complete - trials[0].datetime_complete).total_seconds()
    return serial, wall


def test_compile_and_measure_overlap(tmp_path):
    """Serial: each trial costs compile + measure. Pipelined with 2 compile processes: about
    max(compile / 2, measure) per trial."""
    env = fake_env(compile_delay=COMPILE_S, trial_delay=MEASURE_S)
    walls = {}
    for ahead in (0, 2):
        db = f"sqlite:///{tmp_path / f'{ahead}.db'}"
        # no reference probe: its first trials would all be stored at once, and their ends are what is timed
        summary = run_json(STUDY, "--storage", db, "--trials", 14, "--compile-ahead", ahead, "--no-pruner",
                           "--reference-probe", 0, "--cache-dir", tmp_path / f"cache{ahead}", env=env)
        assert summary["trials"] == summary["trials_run"] == 14
        walls[ahead] = loop_costs(db, "example_sgemm")
    serial_cost, serial_wall = walls[0]
    assert serial_wall >= 0.95 * serial_cost  # the delays are real: without the pipeline they add up
    pipelined_cost, pipelined_wall = walls[2]
    assert pipelined_wall < 0.7 * pipelined_cost, walls
    per_trial = pipelined_wall / 13
    assert per_trial < 1.5 * max(COMPILE_S / 2, MEASURE_S) + 0.15, walls  # ~ the bottleneck, plus bookkeeping


def test_compile_rejections_are_recorded_without_the_worker(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    summary = run_json(STUDY, "--storage", db, "--trials", 48, "--sampler", "grid", "--no-pruner",
                       "--cache-dir", tmp_path / "cache", env=fake_env(compile_delay=0.05))
    study = optuna.load_study(study_name="example_sgemm", storage=db)
    spilled = [t for t in study.trials if t.params["THREAD_TILE"] == 8]
    assert spilled and summary["statuses"]["spills"] == len(spilled)
    for t in spilled:  # recorded from the compile alone: no pairs timed, no output checked
        assert t.state == TrialState.PRUNED and t.user_attrs["status"] == "spills"
        assert t.user_attrs["spills"] == 128 and "pairs" not in t.user_attrs and "checksum" not in t.user_attrs
    assert all("pairs" in t.user_attrs for t in study.trials if t.params["THREAD_TILE"] != 8)
    assert [t.number for t in study.trials] == list(range(48)) and summary["trials_run"] == 48


def _study_for(arch: str, folder) -> Path:
    """The example study with its kernel path absolute and ``arch`` set."""
    text = STUDY.read_text().replace('arch = "native"', f'arch = "{arch}"')
    text = text.replace('kernel = "../kernel/', f'kernel = "{STUDY.parent.parent}/kernel/')
    path = Path(folder) / f"example_{arch}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("arch", ["sm_90a", "native"])
def test_first_trial_while_the_worker_starts(tmp_path, arch):
    """The worker starts and builds inputs while the first configs compile: the first result
    comes after about the longest of them, not after their sum. A native study learns its target
    from the worker's device report, so its compiles start then: after ``start``, not at once."""
    start, prepare, compile_s = 2.0, 6.0, 3.0
    summary = run_json(_study_for(arch, tmp_path), "--storage", "memory", "--trials", 3, "--no-pruner",
                       "--reference-probe", 0, "--cache-dir", tmp_path / "c",
                       env=fake_env(start_delay=start, prepare_delay=prepare, compile_delay=compile_s))
    # the reference and the first config compile while the worker prepares its inputs (a native
    # study's compiles wait for the worker's device report, after ``start``)
    overlapped = max(start + prepare, 2 * compile_s) if arch != "native" else start + max(prepare, 2 * compile_s)
    serial = start + prepare + 2 * compile_s
    # the interpreter, its imports and the study's creation come on top: a few seconds on a loaded
    # 2-core host, less than half of what the overlap saves
    assert summary["first_trial_s"] < (overlapped + serial) / 2, summary["first_trial_s"]


def _states(url: str) -> list:
    try:
        return optuna.load_study(study_name="example_sgemm", storage=open_storage(url)).trials
    except Exception:  # not created yet
        return []


@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_no_trial_left_running_however_the_run_ends(how, tmp_path):
    """Trials asked ahead are failed and queued again on Ctrl-C, or found by their dead runner
    on the next run after kill -9; the resumed study reaches its budget with nothing lost."""
    log = str(tmp_path / "j.log")
    env = {**os.environ, **fake_env(compile_delay=0.3, trial_delay=0.6)}
    cmd = [sys.executable, "-m", "tuner", "run", str(STUDY), "--storage", log, "--trials", 10, "--no-pruner",
           "--compile-ahead", 2, "--cache-dir", str(tmp_path / "cache"), "--reference-probe", 0]  # trials told one by one
    proc = subprocess.Popen(list(map(str, cmd)), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        trials = _states(log)
        if sum(t.state == TrialState.COMPLETE for t in trials) >= 2 and sum(t.state == TrialState.RUNNING for t in trials) >= 3:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("never saw 2 finished trials and 3 in flight")
    proc.send_signal(signal.SIGINT if how == "sigint" else signal.SIGKILL)
    proc.wait(timeout=60)
    left = _states(log)
    running = [t for t in left if t.state == TrialState.RUNNING]
    if how == "sigint":
        assert proc.returncode == 130 and not running, proc.stderr.read().decode()[-3000:]
        abandoned = [t for t in left if t.user_attrs.get("status") == "interrupted"]
        assert len(abandoned) >= 2  # the measured one and those asked ahead
        assert len([t for t in left if t.state == TrialState.WAITING]) >= 2  # queued again
    else:
        assert len(running) >= 3  # in flight when killed: the measured one and those asked ahead
    done = {t.number: t.value for t in left if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}

    env.update(FAKE_COMPILE_DELAY_S="0", FAKE_TRIAL_DELAY_S="0")
    rerun = subprocess.run(list(map(str, cmd + ["--json"])), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    after = _states(log)
    assert not [t for t in after if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert all(after[n].value == v for n, v in done.items())  # nothing finished was lost
    measured = [t for t in after if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(measured) == 10  # the budget, exactly
    # every trial the interrupted run had in flight with a whole config was run again (one killed
    # while its config was being sampled holds part of one, which is never completed at random)
    axes = set().union(*(m.params for m in measured))
    for t in left:
        if set(t.params) == axes and (t.state == TrialState.RUNNING or t.user_attrs.get("status") == "interrupted"):
            assert any(m.params == t.params for m in measured), t.number


# -- many workers on one study -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["journal", "postgres"])
def test_eight_replay_workers_no_waste(kind, tmp_path, request):
    """8 workers, one budget: every trial measures a config nobody else did, the budget is met
    exactly, nothing is lost. Budget 200 here (2 CI cores); bench/load_test.py runs 1,000."""
    sys.path.insert(0, str(ROOT / "bench"))
    from load_test import DATASETS, run_one

    if kind == "postgres":
        request.getfixturevalue("postgres_url")
    budget = 200
    report = run_one(kind, DATASETS / "pnpoly_RTX_3090.json.gz", workers=8, trials=budget, seed=2, workdir=tmp_path)
    assert report["lost"] == 0 and report["measured"] == budget
    assert report["duplicate_trials_reused"] <= 0.02 * report["trials"]
    assert report["configs_measured_twice"] == 0
    assert report["trials"] == budget + report["duplicate_trials_reused"] + report["over_budget"]
    assert len(report["trials_per_worker"]) >= 4  # the workers really shared the study


def test_gpu_workers_share_a_small_budget(tmp_path):
    """Asked-ahead trials hold places in the budget: with --workers 2 neither worker may take
    them all (each keeps at most its share in flight), so both measure. A worker's share takes
    4 s to measure, so one that starts a few seconds late on a busy host still finds its own."""
    log = tmp_path / "two.log"
    env = {**os.environ, **fake_env(compile_delay=0.05, trial_delay=1.0), "CUDA_VISIBLE_DEVICES": "0,1"}
    result = tuner("run", STUDY, "--storage", log, "--workers", 2, "--trials", 8, "--compile-ahead", 16, "--no-pruner",
                   "--cache-dir", tmp_path / "cache", "--json", env=env)
    assert result.returncode == 0, result.stderr
    trials = _states(str(log))
    per_runner = collections.Counter(t.user_attrs.get("runner_pid") for t in trials if t.state.is_finished())
    assert sum(per_runner.values()) == 8 and len(per_runner) == 2 and max(per_runner.values()) <= 5, per_runner
    # one GPU each: every measured trial names the GPU its worker measured it on, and the export keeps it
    measured = [t for t in trials if t.state.is_finished() and "ms" in t.user_attrs]
    gpu_of = {(t.user_attrs["runner_pid"], t.user_attrs["gpu"]) for t in measured}
    assert {gpu for _, gpu in gpu_of} == {"GPU-fake-0", "GPU-fake-1"} and len(gpu_of) == 2, gpu_of
    exported = tuner("export", "--study", "example_sgemm", "--storage", log, "-o", tmp_path / "t.csv")
    assert exported.returncode == 0, exported.stderr
    table = pd.read_csv(tmp_path / "t.csv")
    assert sorted(table["gpu"].dropna()) == sorted(t.user_attrs["gpu"] for t in measured)
    status = tuner("status", "--storage", log)
    assert "Fake GPU (2 GPUs)" in status.stdout, status.stdout
    (row,) = json.loads(tuner("status", "--storage", log, "--json").stdout)["studies"]
    assert row["gpus"] == dict(collections.Counter(t.user_attrs["gpu"] for t in measured))


def test_the_depth_of_the_pipeline_follows_littles_law():
    """Configs compiling at once = compile time / GPU time per config, plus one ready; two before
    anything is measured; never more than the compile processes; the latest configs count."""
    depth = AheadDepth(limit=16)
    assert depth() == START_DEPTH == 2
    depth.add(compile_s=0.4, gpu_s=0.2)
    assert depth() == 3
    depth.add(compile_s=0.4, gpu_s=0.0)  # a compile error: the GPU is free at once, more must be ready
    assert depth() == 1 + math.ceil(0.4 / 0.1)
    for _ in range(WINDOW):
        depth.add(compile_s=3.0, gpu_s=0.1)
    assert depth() == 16  # 31 would keep up; the processes bound it
    for _ in range(WINDOW):
        depth.add(compile_s=0.0, gpu_s=0.5)  # cached builds: nothing needs to be proposed early
    assert depth() == 1


def _most_in_flight(db: str) -> int:
    """The most trials asked and not finished when another was asked."""
    trials = optuna.load_study(study_name="example_sgemm", storage=db).trials
    return max(sum(1 for j in trials if j.number < k.number and j.datetime_complete > k.datetime_start) for k in trials)


def test_trials_are_proposed_only_as_far_ahead_as_the_compiles_need(tmp_path):
    """A config proposed ahead is proposed without the results of those before it. With 8 compile
    processes and compiles far shorter than a measurement, the loop keeps 2 configs ahead, not 8;
    with compiles 6 x a measurement it keeps more, so the GPU does not wait for them."""
    for label, compile_s, measure_s in (("fast", 0.05, 0.3), ("slow", 0.6, 0.1)):
        db = f"sqlite:///{tmp_path / f'{label}.db'}"
        summary = run_json(STUDY, "--storage", db, "--trials", 16, "--compile-ahead", 8, "--no-pruner",
                           "--reference-probe", 0, "--cache-dir", tmp_path / label,
                           env=fake_env(compile_delay=compile_s, trial_delay=measure_s))
        assert summary["trials_run"] == 16
        most = _most_in_flight(db)
        if label == "fast":
            assert most <= 2, most  # 1 + ceil(0.05 / 0.3)
        else:
            assert 5 <= most <= 8, most  # 1 + ceil(0.6 / 0.1) = 7, reached once the first results are in


def test_a_deadline_mid_trial_lets_that_trial_end_before_anything_else_asks_the_worker(tmp_path):
    """--timeout-min passing while a config is measured: the run stops at the next result, when the
    measuring thread has begun the next config already. That measurement now ends and is told before
    the run goes on (to its reference's choice, the confirmation, its end); before, the run went on
    beside it on the worker's one connection: a garbled reply (a traceback), both sides waiting for
    each other for ever, or, as here, a measured config abandoned."""
    log = str(tmp_path / "j.log")
    env = fake_env(trial_delay=7)  # each config's output check: 7 s; the deadline (6 s) falls in the first
    run = tuner("run", STUDY, "--storage", log, "--trials", 10, "--timeout-min", 0.1, "--reference-probe", 0,
                "--seed", 0, "--cache-dir", tmp_path / "cache", env=env)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    trials = _states(log)
    told = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    # the first measured config, whose result came after the deadline, and the one begun as it came
    assert len(told) == 2 and [t.number for t in told] == [0, 1], [(t.state, t.user_attrs.get("status")) for t in trials]
    assert not [t for t in trials if t.state == TrialState.RUNNING]
