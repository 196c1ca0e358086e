"""The trial record: a measurement's numbers keep their meaning on the way to storage, and a
config's flags are built once and read back the same."""

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tests.conftest import ROOT
from tuner.contract.kernel_spec import load_spec, parse_flags
from tuner.evaluate.confirm import confirm_study, confirmed_best
from tuner.evaluate.evaluator import Evaluator
from tuner.measurement.paired import rank_interleaved
from tuner.measurement.value import Measurement
from tuner.run.objective import Objective
from tuner.search.space import Space
from tuner.study.file import load_study

STUDY = ROOT / "studies" / "example_sgemm.toml"
FLOPS = 2.0 * 2048**3


class PairedEvaluator(Evaluator):
    """A paired measurement: the value is the ratio, ``ms`` the candidate's raw time."""

    kind = "gpu"

    def __init__(self):
        self.calls = 0

    def evaluate(self, params, config, report):
        self.calls += 1
        return Measurement("ok", ms=2.0, value=0.8, ratio=0.8, reference_ms=2.5)


@pytest.fixture
def space():
    cfg = load_study(STUDY)
    return Space.from_study(cfg, load_spec(cfg.kernel))


def test_a_repeated_config_keeps_its_milliseconds_ratio_and_tflops(space):
    """A repeat reuses the stored result: ``ms`` stays the kernel's time (not the trial's
    ratio), the ratio is kept, and TFLOPS is the original's."""
    evaluator = PairedEvaluator()
    objective = Objective(space, evaluator, flops=FLOPS)
    study = optuna.create_study()
    params = space.valid[0]
    for _ in range(2):
        study.enqueue_trial(params)
        study.optimize(objective, n_trials=1)
    first, repeat = study.trials
    assert evaluator.calls == 1 and repeat.user_attrs["status"] == "duplicate"
    assert repeat.value == first.value == 0.8
    for key in ("ms", "ratio", "reference_ms", "tflops", "flags"):
        assert repeat.user_attrs[key] == first.user_attrs[key], key
    assert repeat.user_attrs["ms"] == 2.0 and repeat.user_attrs["tflops"] == round(FLOPS / 2e-3 / 1e12, 3)


def test_measurement_fields_round_trip_through_user_attrs():
    m = Measurement("ok", ms=2.0, value=0.8, ratio=0.8, reference_ms=2.5, extra={"pairs": 40})
    attrs = m.user_attrs(flops=None)
    assert attrs["ratio"] == 0.8 and attrs["reference_ms"] == 2.5 and attrs["pairs"] == 40 and "value" not in attrs
    back = Measurement.from_attrs(attrs)
    assert (back.ms, back.ratio, back.reference_ms, back.value) == (2.0, 0.8, 2.5, None)


def test_flags_are_built_once_and_parse_back(space):
    config = space.full_config(space.valid[0])
    flags = space.spec.flags(config, space.problem)
    assert flags.startswith("-DM_DIM=2048 -DN_DIM=2048 -DK_DIM=2048 ")
    assert parse_flags(flags) == {k: str(v) for k, v in space.spec.defines(config, space.problem).items()}


class RoundRobin:
    """Confirms configs by fixed per-config times (the first config given is the fastest)."""

    def __init__(self):
        self.configs = []

    def confirm(self, configs, rounds):
        self.configs = configs
        times = [[1.0] + [0.9 + 0.05 * i + 0.001 * (r % 3) for i in range(len(configs))] for r in range(rounds)]
        return rank_interleaved(times, reference=0), {}


def test_a_run_whose_pruner_stopped_all_but_one_config_still_confirms(space):
    """One config measured to the end, two stopped by the pruner: the confirmation re-measures
    the winner against those two (it used to find < 2 configs and record nothing: ``confirmed``
    was null), and ``tuner best`` names the confirmed winner."""
    study = optuna.create_study()
    distributions = {a: CategoricalDistribution(v) for a, v in space.axes.items()}
    outcomes = [(TrialState.COMPLETE, 0.90, "ok"), (TrialState.PRUNED, 0.95, "pruned_slow"),
                (TrialState.PRUNED, 0.97, "pruned_slow"), (TrialState.PRUNED, None, "spills")]
    for params, (state, value, status) in zip(space.valid, outcomes, strict=False):
        study.add_trial(optuna.trial.create_trial(state=state, value=value, params=params, distributions=distributions,
                                                  user_attrs={"status": status, "flags": str(params)}))
    evaluator = RoundRobin()
    record = confirm_study(study, space, evaluator, {"name": "test"}, top=5, rounds=30)
    assert record is not None and len(evaluator.configs) == 3  # the spilled config is never re-measured
    assert [r["trial"] for r in record["standings"]] == [0, 1, 2] and record["winner"] == 0
    best, confirmation = confirmed_best(study)
    assert best.number == 0 and confirmation == record
