"""The session warm-up runs to steady state, and a trial's interval is honest (issue 32, item 1).

The fake backend plants a cold start (raw times ~9 % fast at first, ramping to their loaded
values over FAKE_COLD_LAUNCHES launches; the ratio of X=300 to X=100 starts ~1.5 % off, as
on an H200 that had been idle) and
drift (a sine of the clock). Time is the launches' own device time: nothing sleeps.
"""

import random
import statistics
from dataclasses import replace

import pytest

from tests.fake_backend import FakeBackend, base_ms
from tests.test_paired import REFERENCE, Recorder, job
from tuner.device.timing import Measurer
from tuner.measurement.paired import PairSeries, blocks_differ
from tuner.measurement.steady import SessionWarmUp, SteadyRule, trend, warm_until_steady

CANDIDATE = {"X": 300}
TRUTH = base_ms(CANDIDATE) / base_ms(REFERENCE)  # the warm ratio
RULE = SteadyRule(tolerance=0.005, blocks=4, block_ms=20.0, min_ms=50.0, cap_ms=4000.0)


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setenv("FAKE_DRIFT", "0")
    monkeypatch.setenv("FAKE_NOISE", "0.003")


def reference_runner(backend):
    return lambda n: [r[0] for r in backend.time([REFERENCE], n)]


def test_the_rule_wants_agreeing_blocks_without_a_trend():
    assert trend([1.0, 1.001, 1.002, 1.003]) == pytest.approx(0.003, rel=0.01)
    rule = SteadyRule(tolerance=0.005, blocks=4)
    settled = [1.0, 1.001, 0.999, 1.0]
    assert rule.holds([1.20, *settled, 1.0, 1.002, 0.999, 1.001])
    assert not rule.holds([0.997, 0.9975, 0.998, 0.9985, 0.999, 0.9995, 1.0, 1.0005])  # each block close, but a ramp
    assert not rule.holds([*settled, 1.0, 1.01, 0.999, 1.0])  # one block 1 % off
    assert not rule.holds([1.0, 1.002, 0.999, 1.001])  # too few blocks


@pytest.mark.parametrize("cold_launches", [300, 1000, 2000])  # (slower ramps: under the rule's resolution)
def test_warm_up_stops_soon_after_a_planted_cold_start_ends(quiet, monkeypatch, cold_launches):
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", str(cold_launches))
    backend = FakeBackend()
    warm = warm_until_steady(reference_runner(backend), RULE)
    per_block = round(RULE.block_ms / 1.0)  # launches take 1.0-1.1 ms
    assert warm.steady and 0.9 * cold_launches <= warm.launches <= cold_launches + (2 * RULE.blocks + 2) * per_block
    assert warm.reference_ms == pytest.approx(base_ms(REFERENCE), rel=0.003)  # the warm time, not the cold one


def test_warm_up_without_a_cold_start_takes_its_minimum(quiet):
    """Two windows of blocks (the trend needs them), or min_ms where that is longer."""
    for min_ms in (RULE.min_ms, 600.0):
        rule = SteadyRule(RULE.tolerance, RULE.blocks, RULE.block_ms, min_ms, RULE.cap_ms)
        warm = warm_until_steady(reference_runner(FakeBackend()), rule)
        least = max(min_ms, 2 * RULE.blocks * RULE.block_ms)
        assert warm.steady and least <= warm.ms <= least + 2 * RULE.block_ms


def test_warm_up_is_capped_when_the_time_never_settles(monkeypatch):
    monkeypatch.setenv("FAKE_DRIFT", "0.05")
    monkeypatch.setenv("FAKE_DRIFT_PERIOD", "150")  # the clock swings faster than a few blocks
    warm = warm_until_steady(reference_runner(FakeBackend()), RULE)
    assert not warm.steady and RULE.cap_ms <= warm.ms <= RULE.cap_ms + 2 * RULE.block_ms
    assert warm.drift > RULE.tolerance


def first_and_repeat(timing: dict):
    measurer = Measurer(FakeBackend())
    first, _ = measurer.measure(job(CANDIDATE, **timing), Recorder())
    again = [measurer.measure(job(CANDIDATE, **timing), Recorder())[0] for _ in range(3)]
    return first, again


def test_the_first_config_after_a_cold_start_repeats_like_the_others(quiet, monkeypatch):
    """A cold start of 2,000 launches (~2 s): the first trial is measured warm, and its value
    and interval agree with the repeats of the same config and with the truth."""
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "2000")
    first, again = first_and_repeat({"session_warmup_ms": 50, "steady_block_ms": 20, "steady_tolerance": 0.005})
    assert first.extra["session_steady"] and first.extra["session_warmup_s"] > 2.0
    assert "session_steady" not in again[0].extra  # told once, by the session's first trial
    for m in (first, *again):
        assert m.extra["ratio_lo"] <= TRUTH <= m.extra["ratio_hi"]
    assert first.ratio == pytest.approx(statistics.median(m.ratio for m in again), rel=0.003)


def test_a_warm_up_cut_by_its_cap_says_so(quiet, monkeypatch):
    """The cap ends the warm-up inside a slow cold start: the first trial records a session
    that was not steady, and how far its reference still moved."""
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "3000")
    first, _ = first_and_repeat({"session_warmup_ms": 50, "steady_block_ms": 20, "steady_tolerance": 0.005, "session_warmup_cap_s": 0.5})
    assert first.extra["session_steady"] is False and 0.5 <= first.extra["session_warmup_s"] <= 0.55
    assert first.extra["session_drift"] > 0.001


def test_blocks_that_differ_widen_the_interval_blocks_that_agree_do_not():
    rng = random.Random(3)
    same = PairSeries()
    moving = PairSeries()
    for i in range(60):
        same.add(1.2 * (1 + 0.003 * rng.gauss(0, 1)), 1.0)
        moving.add(1.2 * (1 + 0.003 * rng.gauss(0, 1) + 0.01 * (i >= 30)), 1.0)  # the state moved mid-trial
    assert same.summary(10) == same.summary()
    plain, blocked = moving.summary(), moving.summary(10)
    before, after = statistics.median(moving.ratios[:30]), statistics.median(moving.ratios[30:])
    assert not plain.lo <= before  # the pair-level interval claims more than the trial knows
    assert blocked.lo <= before and blocked.hi >= after and blocked.ratio == plain.ratio


def test_the_block_test_is_calibrated():
    rng = random.Random(4)
    alarms = sum(blocks_differ([[rng.gauss(0, 1) for _ in range(10)] for _ in range(5)]) for _ in range(500))
    assert alarms <= 15  # alpha 0.01: about 5 in 500
    assert blocks_differ([[rng.gauss(k, 1) for _ in range(10)] for k in range(5)])


def test_a_warm_up_stopped_between_blocks_resumes_where_it_stopped(quiet, monkeypatch):
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "1000")
    backend = FakeBackend()
    warming = SessionWarmUp(RULE)
    polls = []
    assert warming.run(reference_runner(backend), lambda: polls.append(1) or len(polls) == 3) is None
    assert backend.launches == warming.launches < 100  # the first launches and two blocks, then it stopped
    outcome = warming.run(reference_runner(backend))
    assert outcome is not None and outcome.steady and outcome.launches == backend.launches >= 900
    assert warming.run(reference_runner(backend), lambda: pytest.fail("asked again")) is outcome  # ended: runs nothing


def test_the_reference_paired_with_itself_is_measured_while_the_gpu_warms(quiet, monkeypatch):
    """A job that arrives during the session warm-up stops it. The reference's own config is measured
    at once (a kernel paired with itself reads 1 at any clock) and keeps no raw times, which are the
    warming GPU's; the next config resumes the warm-up and is measured steady, like its repeats."""
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "2000")
    timing = {"session_warmup_ms": 50, "steady_block_ms": 20, "steady_tolerance": 0.005}
    measurer = Measurer(FakeBackend())
    polls = []
    measurer.warm_up(job(REFERENCE, **timing), lambda: polls.append(1) or len(polls) == 3)  # the first job comes
    warmed = measurer.backend.launches
    itself, _ = measurer.measure(job(REFERENCE, **timing), Recorder())
    assert warmed < 100 and measurer.backend.launches - warmed < 300  # no warm-up of ~2,000 launches before it
    assert itself.status == "ok" and itself.extra["before_steady"] and itself.ms is None and itself.reference_ms is None
    assert itself.extra["ratio_lo"] <= 1.0 <= itself.extra["ratio_hi"] and "session_steady" not in itself.extra
    first, _ = measurer.measure(job(CANDIDATE, **timing), Recorder())
    again = [measurer.measure(job(CANDIDATE, **timing), Recorder())[0] for _ in range(3)]
    assert first.extra["session_steady"] and first.extra["session_warmup_s"] > 1.5  # the session's first steady trial
    for m in (first, *again):
        assert m.extra["ratio_lo"] <= TRUTH <= m.extra["ratio_hi"] and "before_steady" not in m.extra
    assert first.ratio == pytest.approx(statistics.median(m.ratio for m in again), rel=0.003)


def test_without_early_self_pairs_the_reference_waits_for_a_steady_gpu(quiet, monkeypatch):
    """A study whose values are in ms (or that measures energy) needs the reference's raw times: then
    its own config is measured like any other, after the warm-up."""
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "2000")
    timing = {"session_warmup_ms": 50, "steady_block_ms": 20, "steady_tolerance": 0.005, "early_self_pair": False}
    itself, _ = Measurer(FakeBackend()).measure(job(REFERENCE, **timing), Recorder())
    assert itself.extra["session_steady"] and "before_steady" not in itself.extra
    assert itself.reference_ms == pytest.approx(base_ms(REFERENCE), rel=0.01) and itself.ms is not None


def test_the_first_trial_measured_ahead_is_told_when_the_study_asks_it(quiet, monkeypatch):
    """The warm-up job carries the study's likely first trial, the reference paired with itself: it is
    measured before the warm-up and kept. When the study asks it, the worker tells the kept blocks and
    outcome without a launch; the next config is measured steady, as before."""
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "2000")
    timing = {"session_warmup_ms": 50, "steady_block_ms": 20, "steady_tolerance": 0.005}
    measurer = Measurer(FakeBackend())
    first = job(REFERENCE, **timing)
    measurer.warm_up(replace(first, first_trial=first), lambda: measurer.backend.launches > 600)  # asked later
    asked = measurer.backend.launches
    told = Recorder()
    itself, restart = measurer.measure(job(REFERENCE, **timing), told)
    assert measurer.backend.launches == asked and not restart  # told from what was kept
    assert itself.status == "ok" and itself.extra["measured_ahead"] and itself.extra["before_steady"]
    assert itself.ms is None and itself.extra["ratio_lo"] <= 1.0 <= itself.extra["ratio_hi"]
    assert len(told.blocks) >= 2 and [step for step, _, _ in told.blocks] == list(range(len(told.blocks)))
    assert told.blocks[-1][1:] == (itself.ratio, itself.extra["pairs"])
    after, _ = measurer.measure(job(CANDIDATE, **timing), Recorder())
    assert after.extra["session_steady"] and "measured_ahead" not in after.extra
    assert after.extra["ratio_lo"] <= TRUTH <= after.extra["ratio_hi"]
    again, _ = measurer.measure(job(REFERENCE, **timing), Recorder())  # a kept trial is told once
    assert "measured_ahead" not in again.extra and again.ms is not None


def test_a_first_trial_measured_ahead_gives_way_to_a_job_that_comes_sooner_or_another_job(quiet, monkeypatch):
    """A job that arrives while the first trial is measured ahead ends that measurement unkept; a
    first job other than the kept trial is measured as it would have been, and the kept one dropped."""
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "2000")
    timing = {"session_warmup_ms": 50, "steady_block_ms": 20, "steady_tolerance": 0.005}
    first = job(REFERENCE, **timing)
    sooner = Measurer(FakeBackend())
    sooner.warm_up(replace(first, first_trial=first), lambda: sooner.backend.launches > 30)
    assert 30 < sooner.backend.launches < 100  # ended at the first block after the job came
    itself, _ = sooner.measure(job(REFERENCE, **timing), Recorder())
    assert "measured_ahead" not in itself.extra and itself.extra["before_steady"]  # measured early, as before
    other = Measurer(FakeBackend())
    other.warm_up(replace(first, first_trial=first), lambda: other.backend.launches > 600)
    candidate, _ = other.measure(job(CANDIDATE, **timing), Recorder())
    assert "measured_ahead" not in candidate.extra and candidate.extra["session_steady"]
    assert candidate.extra["ratio_lo"] <= TRUTH <= candidate.extra["ratio_hi"]
    dropped, _ = other.measure(job(REFERENCE, **timing), Recorder())
    assert "measured_ahead" not in dropped.extra


def test_the_first_trial_asked_while_it_is_measured_ahead_is_finished_and_told(quiet, monkeypatch):
    """The study asks its first trial while the worker still measures it ahead: the measurement goes on
    to its end (the job waiting is that trial) and is told without another launch."""
    monkeypatch.setenv("FAKE_COLD", "0.1")
    monkeypatch.setenv("FAKE_COLD_LAUNCHES", "2000")
    timing = {"session_warmup_ms": 50, "steady_block_ms": 20, "steady_tolerance": 0.005}
    first = job(REFERENCE, **timing)
    measurer = Measurer(FakeBackend())
    asked = lambda: measurer.backend.launches > 30  # noqa: E731
    measurer.warm_up(replace(first, first_trial=first), asked, lambda: job(REFERENCE, **timing) if asked() else None)
    launched = measurer.backend.launches
    itself, _ = measurer.measure(job(REFERENCE, **timing), Recorder())
    assert itself.extra["measured_ahead"] and measurer.backend.launches == launched
    assert itself.extra["pairs"] >= 20 and itself.extra["ratio_lo"] <= 1.0 <= itself.extra["ratio_hi"]
