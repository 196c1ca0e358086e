"""Paired timing on a backend whose clock drifts: the protocol, its statistics, the pruner, confirmation.

The fake backend (tests/fake_backend.py) runs the real measurement protocol of
tuner/device/timing.py; its GPU slows down and speeds up by +-5 % in a slow sine, as a
power-capped GPU does, so raw times move while the ratios must not.
"""

import math
import random

import pytest

from tests.conftest import ROOT
from tests.fake_backend import FakeBackend, base_ms
from tuner.device.protocol import ConfirmJob, Kernel
from tuner.device.timing import Measurer
from tuner.measurement.paired import SlowerTest, StopRule, median_ci, rank_interleaved, sign_test_greater
from tuner.testing import measure_job

SPEC = str(ROOT / "kernel" / "example_sgemm.py")
PROBLEM = {"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}
REFERENCE = {"X": 100}  # 1.100 ms nominal


class Recorder:
    """The parent's side of the channel: keeps the blocks, answers with a stop rule."""

    def __init__(self, stop=None):
        self.blocks = []
        self.stop = stop or (lambda samples: False)
        self.samples = []

    def ready(self):
        pass

    def block(self, step, value, samples, pairs):
        self.blocks.append((step, value, pairs))
        self.samples += samples
        return self.stop(self.samples)


def job(config, **timing):
    return measure_job(SPEC, PROBLEM, config, REFERENCE, **{"warmup_ms": 20, "session_warmup_ms": 50, "ci_target": 0.0025,
                                                           **timing})


@pytest.fixture
def drifting(monkeypatch):
    monkeypatch.setenv("FAKE_DRIFT", "0.05")
    monkeypatch.setenv("FAKE_DRIFT_PERIOD", "3000")
    monkeypatch.setenv("FAKE_NOISE", "0.003")
    return Measurer(FakeBackend())


def test_median_ci_covers_the_median_at_its_confidence():
    rng = random.Random(1)
    hits = 0
    for _ in range(400):
        sample = [rng.lognormvariate(0, 0.5) for _ in range(41)]
        lo, hi = median_ci(sample)
        hits += lo <= 1.0 <= hi  # the lognormal's median is exactly 1
    assert 0.93 <= hits / 400 <= 0.995
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few values: the whole range


def test_median_ci_of_more_values_than_a_float_power_of_two_holds():
    """`tuner confirm --rounds 1030`: 2**1030 is no float; the interval is the binomial one still."""
    values = [float(v) for v in range(2000)]
    lo, hi = median_ci(values)
    half = 1.96 * math.sqrt(2000) / 2  # the normal approximation of the binomial order statistics
    assert abs(lo - (1000 - half)) <= 2 and abs(hi - (1000 + half)) <= 2


def test_sign_test_tells_slower_from_tied():
    rng = random.Random(2)
    tied = [1.0 + rng.gauss(0, 0.003) for _ in range(100)]
    slower = [1.01 + rng.gauss(0, 0.003) for _ in range(100)]
    assert sign_test_greater(tied, 1.0) > 0.01
    assert sign_test_greater(slower, 1.0) < 1e-6


def test_ratio_holds_still_while_raw_times_drift(drifting):
    """The same config measured at six points of the clock's cycle: raw ms move by
    several per cent, the paired ratio stays within +-0.3 % of the truth."""
    config = {"X": 122}
    truth = base_ms(config) / base_ms(REFERENCE)
    ratios, raw = [], []
    for _ in range(6):
        m, restart = drifting.measure(job(config), Recorder())
        assert m.status == "ok" and not restart
        ratios.append(m.ratio)
        raw.append(m.ms)
        drifting.backend.launches += 500  # the next measurement meets the clock elsewhere in its cycle
        assert m.extra["ratio_lo"] <= m.ratio <= m.extra["ratio_hi"]
        assert m.extra["pairs"] >= 20 and m.reference_ms > 0 and "sm_clock_mhz" in m.extra
    assert (max(raw) - min(raw)) / min(raw) > 0.03  # the drift is real ...
    assert all(abs(r / truth - 1) < 0.003 for r in ratios)  # ... and cancelled


def test_measuring_stops_at_the_interval_target_or_the_cap(drifting):
    quiet, _ = drifting.measure(job({"X": 110}, ci_target=0.01), Recorder())
    assert quiet.extra["pairs"] == 20  # the minimum already meets +-1 %
    capped, _ = drifting.measure(job({"X": 110}, ci_target=1e-6, max_pairs=60), Recorder())
    assert capped.extra["pairs"] == 60
    assert (capped.extra["ratio_hi"] - capped.extra["ratio_lo"]) / 2 / capped.ratio > 1e-6


def test_sign_test_prunes_planted_slow_configs_never_the_winner(drifting):
    """Incumbent at ratio 1.0 (the reference itself): configs 2-10 % slower are stopped
    early, a 2 % faster winner and a true tie run to the end."""
    test = SlowerTest()

    def measure(config):
        recorder = Recorder(stop=lambda samples: test.slower(samples, 1.0))
        m, _ = drifting.measure(job(config, ci_target=1e-6, max_pairs=200), recorder)
        return m, recorder

    for slow in ({"X": 122}, {"X": 133}, {"X": 210}):  # 2 %, 3 %, 10 % slower than the reference
        m, recorder = measure(slow)
        assert m.status == "pruned_slow", slow
        assert recorder.blocks[-1][2] < 200  # stopped before the cap
    winner, _ = measure({"X": 78})  # 2 % faster
    tie, _ = measure({"X": 100})
    assert winner.status == "ok" and winner.extra["pairs"] == 200
    assert tie.status == "ok"


def test_confirmation_finds_the_planted_tie_set(drifting):
    """Five configs round-robin: two tie for first, the rest are 1-3 % slower."""
    # nominal 1.080, 1.091, 1.080, 1.102, 1.113 ms (a float value does not count in base_ms)
    configs = [{"X": 80}, {"X": 91}, {"X": 80, "Z": 0.5}, {"X": 102}, {"X": 113}]
    base = job({})
    kernels = [Kernel(c, f"k{i}") for i, c in enumerate(configs)]
    m, _ = drifting.confirm(ConfirmJob(spec_path=base.spec_path, problem=base.problem, reference=base.reference,
                                       timing=base.timing, kernels=kernels, rounds=150), Recorder())
    assert m.status == "ok"
    standings = rank_interleaved(m.extra["times"], reference=0, tolerance=0.0025)
    tied = {s.index for s in standings if s.tied}
    assert tied == {1, 3}  # kernels 0 and 2, counted from 1 after the reference
    assert standings[0].index in tied
    assert all(s.to_winner.ratio > 1.005 for s in standings if not s.tied)
    # with no tolerance the tie stays (the same nominal time); a 1 % tolerance takes in kernel 1 (+1.0 %)
    assert {s.index for s in rank_interleaved(m.extra["times"], 0, tolerance=0.0) if s.tied} == {1, 3}
    assert {s.index for s in rank_interleaved(m.extra["times"], 0, tolerance=0.012) if s.tied} == {1, 2, 3}


def test_stop_rule():
    from tuner.measurement.paired import RatioSummary

    rule = StopRule(ci_target=0.0025, min_pairs=20, max_pairs=100)
    narrow = RatioSummary(1.0, 0.999, 1.001, 20)
    assert rule.done(narrow) and not rule.done(RatioSummary(1.0, 0.999, 1.001, 19))
    assert not rule.done(RatioSummary(1.0, 0.99, 1.01, 50)) and rule.done(RatioSummary(1.0, 0.99, 1.01, 100))


def test_session_warm_up_runs_before_the_first_job_until_it_arrives(drifting):
    """The worker warms the GPU with the reference while the tuner sets up: at least
    session_warmup_ms, then on until a job waits; the first trial then skips it."""
    backend = drifting.backend
    polls = []
    drifting.warm_up(job({}), lambda: polls.append(1) or len(polls) > 3)
    warm_launches = backend.launches
    assert warm_launches * 1.1 >= 50 and len(polls) == 4  # 50 ms of ~1.1 ms launches, then until the job came
    m, _ = drifting.measure(job({"X": 122}), Recorder())
    fresh = Measurer(FakeBackend())
    fresh.measure(job({"X": 122}), Recorder())
    assert m.status == "ok" and fresh.backend.launches > backend.launches - warm_launches  # no second session warm-up
    drifting.warm_up(job({}), lambda: pytest.fail("warmed up twice"))
