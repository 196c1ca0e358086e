"""A study without start chooses a near-top reference from its first configs (issue 32, item 2).

`tuner run` on the worker double (tests/fake_backend.py; compiles are real NVRTC): a config's
nominal time grows with the sum of its integer defines and the clock drifts, so the fastest
of the first configs is known in advance, and so is every config's ratio to it. A planted
session shift (FAKE_SESSION_SHIFT) moves every ratio in a later session.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tests.fake_backend import base_ms
from tuner.errors import UserError
from tuner.evaluate.evaluator import Evaluator
from tuner.run.probe import CHOICE, PROBING, adopt
from tuner.testing import run_summary, write_study

FAKE = {"TUNER_WORKER_BACKEND": FAKE_BACKEND}
PROBE = 4


def study_file(tmp_path, confirm_top=0, **measure):
    # six configs, 0.4 % or more apart; the defaults (BLOCK 64, BLOCK_K 16) are the fourth fastest
    return write_study(tmp_path, "probe", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                       tier1={"BLOCK": [32, 64], "BLOCK_K": [8, 16, 32]},
                       search={"sampler": "random", "seed": 4, "trials": 5, "pruner": False,
                               "confirm_top": confirm_top, "confirm_rounds": 60},
                       measure={"timeout_s": 20, "ci_target": 0.001, "reference_probe": PROBE, **measure})


def run(study, url, cache_dir, *flags, env=None):
    result = tuner("run", study, "--storage", url, "--json", "--cache-dir", cache_dir, *flags, env={**FAKE, **(env or {})})
    return run_summary(result), result.stderr


def run_text(study, url, cache_dir, *flags, env=None):
    """A run as a person sees it: the summary on stdout, the notes and warnings on stderr."""
    result = tuner("run", study, "--storage", url, "--cache-dir", cache_dir, *flags, env={**FAKE, **(env or {})})
    assert result.returncode == 0, result.stderr
    return result


def nominal(choice: dict, trial) -> float:
    """The trial's nominal time: its config is the chosen one's with its own axis values."""
    return base_ms({**choice["config"], **trial.params})


def test_the_fastest_of_the_first_configs_is_the_reference_and_values_are_relative_to_it(tmp_path, cache_dir):
    url = f"sqlite:///{tmp_path / 's.db'}"
    # quiet launches: the values are checked to 0.2 % below
    summary, _ = run(study_file(tmp_path), url, cache_dir, env={"FAKE_NOISE": "0.0005"})
    study = optuna.load_study(study_name="probe", storage=url)
    choice = study.user_attrs[CHOICE]
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 5 and all(t.user_attrs["status"] == "ok" for t in trials)
    probed = trials[:PROBE]
    fastest = min(probed, key=lambda t: nominal(choice, t))
    assert choice["why"] == f"chosen as the fastest of the first {PROBE} configs" and choice["trial"] == fastest.number
    assert {k: choice["config"][k] for k in fastest.params} == fastest.params
    # the study's fingerprint names the chosen config, no longer the defaults
    assert study.user_attrs["objective"]["reference"] == choice["flags"] == fastest.user_attrs["flags"]
    assert choice["defaults"] != choice["flags"] and nominal(choice, fastest) < base_ms(choice["config"] | {
        "BLOCK": 64, "BLOCK_K": 16})
    assert fastest.value == pytest.approx(1.0, abs=1e-12) and fastest.user_attrs["ratio"] == pytest.approx(1.0, abs=1e-12)
    for t in trials:  # probed (re-based) and measured after the choice alike
        expected = nominal(choice, t) / nominal(choice, fastest)
        assert t.value == pytest.approx(expected, rel=0.002), t.params
        assert t.user_attrs["ratio_lo"] <= t.value <= t.user_attrs["ratio_hi"]
        assert t.user_attrs["ms"] / t.user_attrs["reference_ms"] == pytest.approx(t.value, rel=0.01)
        assert not t.intermediate_values or t.number >= PROBE  # no values in the defaults' frame
    defaults = base_ms(choice["config"] | {"BLOCK": 64, "BLOCK_K": 16})
    for t in probed:  # measured again against the chosen one; the probe's ratio to the defaults kept beside
        if t.number != fastest.number:
            assert t.user_attrs["probe_ratio"] == pytest.approx(nominal(choice, t) / defaults, rel=0.002), t.params
    assert "probe_ratio" not in fastest.user_attrs and all("probe_ratio" not in t.user_attrs for t in trials[PROBE:])
    assert [t.number for t in sorted(probed, key=lambda t: t.value)] == \
        [t.number for t in sorted(probed, key=lambda t: nominal(choice, t))]
    assert summary["reference"].startswith(f"reference: chosen as the fastest of the first {PROBE} configs")
    status = tuner("status", "--storage", url)
    assert status.returncode == 0 and f"study probe: reference: chosen as the fastest of the first {PROBE}" in status.stdout


def test_without_a_probe_the_defaults_stay_the_reference(tmp_path, cache_dir):
    url = f"sqlite:///{tmp_path / 's.db'}"
    run(study_file(tmp_path, reference_probe=0), url, cache_dir, "--trials", 2)
    study = optuna.load_study(study_name="probe", storage=url)
    assert CHOICE not in study.user_attrs
    assert "-DBLOCK=64 " in study.user_attrs["objective"]["reference"] + " "
    # a later run with a probe keeps them: the stored values are relative to them
    summary, _ = run(study_file(tmp_path), url, cache_dir, "--trials", 3)
    assert summary["trials"] == 3 and "reference" not in summary
    assert CHOICE not in optuna.load_study(study_name="probe", storage=url).user_attrs


def test_a_resume_keeps_the_reference_and_warns_when_the_session_moves_its_values(tmp_path, cache_dir):
    url = f"sqlite:///{tmp_path / 's.db'}"
    quiet = {"FAKE_NOISE": "0.0005"}  # stored values well within the resolution: a shift of 1 % stands out
    first = run_text(study_file(tmp_path, confirm_top=3), url, cache_dir, env=quiet)
    assert "confirmed winner" in first.stderr and "warning" not in first.stderr
    assert f"reference: chosen as the fastest of the first {PROBE} configs" in first.stdout
    choice = optuna.load_study(study_name="probe", storage=url).user_attrs[CHOICE]

    # another session, whose ratios sit 1 % above the first's (the resolution is 0.1 %)
    second = run_text(study_file(tmp_path, confirm_top=3), url, cache_dir, "--trials", 6,
                      env={**quiet, "FAKE_SESSION_SHIFT": "0.01"})
    study = optuna.load_study(study_name="probe", storage=url)
    assert study.user_attrs[CHOICE] == choice and study.user_attrs["objective"]["reference"] == choice["flags"]
    new = study.trials[-1]
    fastest = study.trials[choice["trial"]]
    assert new.state == TrialState.COMPLETE and new.number >= 5
    assert new.value == pytest.approx(1.01 * nominal(choice, new) / nominal(choice, fastest), rel=0.002)
    factor = study.user_attrs["confirmations"][-1]["session_factor"]
    assert factor == pytest.approx(1.01, abs=0.002)
    warnings = [line for line in second.stderr.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and f"{100 * (factor - 1):+.2f} %" in warnings[0] and "+-0.10 %" in warnings[0]
    status = tuner("status", "--storage", url)
    assert status.stderr.count("warning") == 1
    factors = json.loads(tuner("status", "--storage", url, "--json").stdout)["studies"][0]["session_factors"]
    assert factors[0]["factor"] == pytest.approx(1.0, abs=0.002) and factors[1]["factor"] == factor


class _Evaluator(Evaluator):
    reference_probe = 0  # a process that does not choose (a worker of several)


def test_a_worker_does_not_join_a_study_still_choosing_its_reference(tmp_path):
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    study.set_user_attr(CHOICE, {"state": PROBING, "probed": 8})
    with pytest.raises(UserError, match="is choosing its reference"):
        adopt(study, _Evaluator(), {})


def test_a_second_run_does_not_choose_another_reference_while_one_chooses(tmp_path):
    """Two runs started on a new study: one chooses the reference, the other is told to wait, so the
    study's values keep one base. A probe whose run is gone (or was this process's) is taken over."""
    from types import SimpleNamespace

    from tuner.run.probe import Probe
    from tuner.store.liveness import runner_attrs

    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    evaluator = SimpleNamespace(reference_probe=8)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = {**runner_attrs(), "runner_pid": other.pid, "runner_started": _started(other.pid)}
        study.set_user_attr(CHOICE, {"state": PROBING, "probed": 8, "at": time.time(), **alive})
        with pytest.raises(UserError, match=rf"choosing its reference in another run \(\S+ pid {other.pid}"):
            Probe.plan(study, evaluator)
    finally:
        other.kill()
        other.wait()
    assert Probe.plan(study, evaluator) is not None  # its run is gone
    assert study.user_attrs[CHOICE]["runner_pid"] == os.getpid()
    assert Probe.plan(study, evaluator) is not None  # this process's own, left by a call it stopped


def _started(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


HELD = [(32, "ok", 0.9), (64, "mismatch", 0.5), (128, "ok", 0.8)]  # (BLOCK, status, ratio to the defaults)


def held_probe(tmp_path, settings, measure_again, reference_ms: float):
    """A probe of the example GEMM holding :data:`HELD` as the pipeline holds them; the evaluator's
    second measurements come from ``measure_again(params, config, report)`` (no GPU here)."""
    from types import SimpleNamespace

    from tuner.contract.kernel_spec import load_spec
    from tuner.evaluate.gpu import GpuEvaluator
    from tuner.measurement.value import Measurement
    from tuner.run.objective import Begun
    from tuner.run.probe import Probe
    from tuner.testing import EXAMPLE_SGEMM

    spec = load_spec(EXAMPLE_SGEMM)
    problem = {"M_DIM": 256, "N_DIM": 256, "K_DIM": 256}
    evaluator = GpuEvaluator(spec, problem, "sm_90a", settings, reference_probe=3)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    evaluator.bind(study)
    evaluator.evaluate = measure_again
    probe = Probe(study, evaluator, 3)
    for number, (block, status, ratio) in enumerate(HELD):
        config = {**spec.params, **problem, "BLOCK": block}
        probe.hold(SimpleNamespace(number=number), Begun({"BLOCK": block}, config),
                   Measurement(status, ms=reference_ms * ratio, ratio=ratio, reference_ms=reference_ms,
                               value=reference_ms * ratio, extra={"ratio_lo": ratio - 0.01, "ratio_hi": ratio + 0.01}))
    return study, evaluator, probe


def test_only_a_checked_config_is_chosen_and_a_milliseconds_study_keeps_its_values(tmp_path):
    """A probe held as the pipeline holds it: a wrong output never becomes the reference, however
    fast; with ``value = "ms"`` the values stay (ratio x the reference's time: both move). A config
    whose second measurement (against the chosen one) fails keeps its first, re-based."""
    from tuner.measurement.value import Measurement
    from tuner.study.options import MeasureSettings

    def fails(params, config, report):
        return Measurement("launch_error", reason="planted")

    study, evaluator, probe = held_probe(tmp_path, MeasureSettings(value="ms"), fails, reference_ms=2.0)
    study.set_user_attr("reference_ms", 2.0)  # the defaults' time in the first session
    record = probe.choose()
    assert record["trial"] == 2 and record["to_defaults"] == 0.8 and evaluator.reference["BLOCK"] == 128
    assert study.user_attrs[CHOICE] == record and study.user_attrs["objective"]["reference"] == record["flags"]
    assert "-DBLOCK=128" in record["flags"] and "-DBLOCK=64" in record["defaults"]
    assert study.user_attrs["reference_ms"] == pytest.approx(1.6)
    first, _, chosen = (m for _, _, m in probe.held)
    assert (chosen.ratio, chosen.value, chosen.reference_ms) == pytest.approx((1.0, 1.6, 1.6))
    assert (first.ratio, first.value, first.extra["ratio_lo"]) == pytest.approx((1.125, 1.8, 0.89 / 0.8))
    assert "probe_ratio" not in first.extra


def test_the_probed_configs_are_measured_again_against_the_chosen_one(tmp_path):
    """Held as the pipeline holds them: after the choice every other config that measured ok is
    measured again (against the chosen one) and that measurement is told; a wrong output is not."""
    from tuner.measurement.value import Measurement
    from tuner.study.options import MeasureSettings

    again = []

    def measure_again(params, config, report):
        again.append((params["BLOCK"], evaluator.reference["BLOCK"]))
        return Measurement("ok", ratio=1.13, value=1.13, ms=1.13, reference_ms=1.0)

    _, evaluator, probe = held_probe(tmp_path, MeasureSettings(), measure_again, reference_ms=1.0)
    probe.choose()
    assert again == [(32, 128)]  # the other ok config, paired with the chosen one
    first, wrong, chosen = (m for _, _, m in probe.held)
    assert (first.ratio, first.extra["probe_ratio"]) == (1.13, 0.9)
    assert wrong.status == "mismatch" and chosen.ratio == pytest.approx(1.0)


def stopped_while_choosing(tmp_path, cache_dir, measured: int, **env) -> tuple[optuna.Study, str]:
    """A first run Ctrl-C'd once ``measured`` configs of its probe of 4 are measured (1 s each): the
    study, and its storage URL."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    cmd = [sys.executable, "-m", "tuner", "run", str(study_file(tmp_path)), "--storage", url, "--cache-dir", str(cache_dir)]
    checked = tmp_path / "checked.log"  # a line per output check: a config measured
    env = {**os.environ, **FAKE, "FAKE_TRIAL_DELAY_S": "1", "FAKE_TOLERANCE_LOG": str(checked), **env}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if checked.exists() and len(checked.read_text().splitlines()) >= measured:
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            break
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    return optuna.load_study(study_name="probe", storage=url), url


def test_a_run_stopped_while_choosing_stores_no_value_and_the_next_run_chooses(tmp_path, cache_dir):
    study, url = stopped_while_choosing(tmp_path, cache_dir, 2)
    assert study.user_attrs[CHOICE]["state"] == PROBING
    assert not study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))  # nothing told against the defaults
    held = [t for t in study.trials if "chose its reference" in t.user_attrs.get("reason", "")]
    assert held and all(t.state == TrialState.FAIL for t in held)
    queued = study.get_trials(states=(TrialState.WAITING,))
    assert {t.user_attrs.get("requeued_from") for t in queued} >= {t.number for t in held}  # (and the probe's others)

    summary, _ = run(study_file(tmp_path), url, cache_dir)
    study = optuna.load_study(study_name="probe", storage=url)
    assert summary["statuses"]["ok"] == 5 and "config" in study.user_attrs[CHOICE]
    assert study.trials[study.user_attrs[CHOICE]["trial"]].value == pytest.approx(1.0, abs=1e-12)


def test_the_first_configs_are_measured_while_the_valid_set_is_enumerated(tmp_path, monkeypatch):
    """The probe's configs are drawn without the valid set (each axis at random, the invalid rejected
    by the kernel's own check), so a study without start measures them while a large space is still
    being enumerated; they are the same configs as when the valid set is known at once."""
    import tuner
    from tuner.search.space import Space

    monkeypatch.setenv("TUNER_WORKER_BACKEND", FAKE_BACKEND)
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    study = study_file(tmp_path)
    quick = tuner.tune(study, storage=f"sqlite:///{tmp_path / 'quick.db'}")

    enumerate_now = Space.enumerate
    told_when_known: list[int] = []
    url = f"sqlite:///{tmp_path / 'slow.db'}"

    def told() -> int:
        try:
            return len(optuna.load_study(study_name="probe", storage=url).get_trials(states=(TrialState.COMPLETE,)))
        except KeyError:  # not created yet
            return 0

    def slow_enumeration(space):  # ends once the probe's configs are told (or after 30 s)
        deadline = time.monotonic() + 30
        while told() < PROBE and time.monotonic() < deadline:
            time.sleep(0.05)
        told_when_known.append(told())
        return enumerate_now(space)

    monkeypatch.setattr(Space, "enumerate", slow_enumeration)
    slow = tuner.tune(study, storage=url)
    assert told_when_known and told_when_known[0] == PROBE  # the reference was chosen before the valid set was known
    assert [t.params for t in slow.study.trials[:PROBE]] == [t.params for t in quick.study.trials[:PROBE]]
    assert slow.summary["trials"] == 5 and "config" in slow.study.user_attrs[CHOICE]


def test_the_probe_queues_its_draws_after_the_queue_and_none_where_the_space_is_too_small():
    """The probe's configs count those already queued (a warm start, a killed run's) and draw the rest;
    where the draws cannot find them all, none are queued and the search draws them from the valid set."""
    from tuner.contract.kernel_spec import load_spec
    from tuner.run.probe import Probe
    from tuner.search.space import Space
    from tuner.study.file import load_study

    cfg = load_study(ROOT / "tests" / "fixtures" / "sm100a_grid_plan.toml")
    space = Space.from_study(cfg, load_spec(cfg.kernel))  # 69 valid configs of 108
    study = optuna.create_study()
    for params in space.draw_valid(3, np.random.default_rng(7)):
        study.enqueue_trial(params)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert Probe(study, None, 8).queue_draws(space, waiting, None, seed=1) == 5
    queued = [t.system_attrs["fixed_params"] for t in study.get_trials(states=(TrialState.WAITING,))]
    assert len({space.key(p) for p in queued}) == 8 and all(space.check(p) is None for p in queued)
    assert Probe(study, None, 4).queue_draws(space, waiting, None, seed=1) == 1  # a probe of 4: one more than the 3

    empty = optuna.create_study()
    assert Probe(empty, None, 100).queue_draws(space, [], None, seed=1) == 0 and not empty.trials
    assert Probe(empty, None, 100).queue_draws(space, [], 2, seed=1) == 2  # a run of 2 trials probes 2


def test_a_run_stopped_while_choosing_keeps_the_failures_it_measured(tmp_path, cache_dir):
    """A config whose output failed is failed whatever the reference: a Ctrl-C during the probe keeps it
    as measured (mismatch), and only the configs that measured ok wait for the next run's choice."""
    study, _ = stopped_while_choosing(tmp_path, cache_dir, 3, FAKE_MISMATCH_IF="BLOCK=32")
    measured = study.get_trials(states=(TrialState.PRUNED,))
    assert measured and all(t.user_attrs["status"] == "mismatch" and t.params["BLOCK"] == 32 for t in measured)
    held = [t for t in study.trials if "chose its reference" in t.user_attrs.get("reason", "")]
    assert all(t.params["BLOCK"] == 64 for t in held)
    assert not study.get_trials(states=(TrialState.COMPLETE,))


@pytest.mark.parametrize("trials", [6, 7])
def test_a_budget_as_large_as_the_space_measures_every_config(tmp_path, trials):
    """The probe queues as many first configs as the space holds: the run must still ask for them (it once
    saw no untried config left, all being queued, and ran nothing)."""
    study = study_file(tmp_path, reference_probe=8)
    summary, err = run(study, f"sqlite:///{tmp_path / 't.db'}", tmp_path / "cache", "--trials", trials)
    assert summary["trials"] == 6 and summary["statuses"] == {"ok": 6}, err
