"""Energy per launch on a fake counter that steps every 100 ms on a virtual clock (no sleeps).

The counter (tests/fake_backend.py FakeEnergyCounter) publishes the energy drawn only at
its steps, like NVML's. A short window sees no or one step: no value. A long one gives the
true energy per launch within its stated uncertainty. A power above the enforced limit is
never stored.
"""

import pytest

from tests.fake_backend import FakeBackend, FakeEnergyCounter, base_ms
from tests.test_paired import REFERENCE, Recorder, job
from tuner.device.energy import measure_energy
from tuner.device.timing import Measurer


def kernel(counter: FakeEnergyCounter, ms: float, watts: float):
    """``run(n)``: n back-to-back launches of ``ms`` each at ``watts``."""
    def run(n):
        for _ in range(n):
            counter.advance(ms / 1e3, watts)
    return run


@pytest.mark.parametrize("seconds", [0.0, 0.05, 0.15])
def test_a_window_of_fewer_than_three_steps_gives_no_value(seconds):
    counter = FakeEnergyCounter(step_s=0.1)
    energy = measure_energy(kernel(counter, 1.0, 300.0), counter, 1.0, seconds)
    assert energy.mj_per_launch is None and energy.power_w is None
    assert energy.steps < 3 and "fewer than 3" in energy.note
    assert "energy_mj_per_launch" not in energy.attrs() and "power_w" not in energy.attrs()


@pytest.mark.parametrize("ms, watts, seconds", [(1.0, 300.0, 1.0), (0.37, 450.0, 2.0), (2.9, 120.0, 3.0), (0.011, 650.0, 1.0)])
def test_a_long_window_gives_the_true_energy_within_its_uncertainty(ms, watts, seconds):
    counter = FakeEnergyCounter(step_s=0.1)
    counter.advance(0.0437, 80.0)  # idle before: the window must start on a step, not here
    energy = measure_energy(kernel(counter, ms, watts), counter, ms, seconds)
    truth = watts * ms  # mJ per launch
    assert energy.steps >= 3 and energy.window_s >= seconds and energy.note == ""
    assert abs(energy.mj_per_launch - truth) <= energy.mj_per_launch_err
    assert abs(energy.power_w - watts) <= energy.power_w_err
    assert energy.mj_per_launch_err <= 0.01 * truth  # 5 ms batches in a >= 1 s window: about 0.5 %
    assert energy.step_ms == pytest.approx(100.0, rel=0.05)


def test_a_power_above_the_enforced_limit_is_an_error_never_a_value():
    counter = FakeEnergyCounter(step_s=0.1, limit_w=700.0)
    energy = measure_energy(kernel(counter, 1.0, 1500.0), counter, 1.0, 1.0)
    assert energy.mj_per_launch is None and energy.power_w is None
    assert "above the enforced limit 700 W" in energy.note and energy.steps >= 3


def test_a_counter_that_never_moves_gives_no_value():
    counter = FakeEnergyCounter(step_s=1e9)
    energy = measure_energy(kernel(counter, 1.0, 300.0), counter, 1.0, 1.0)
    assert energy.mj_per_launch is None and "did not move" in energy.note


def test_a_trial_stores_candidate_and_reference_energy_from_their_own_windows():
    """Through the measurement protocol: energy_s = 1 gives both kernels' energy per launch
    (300 W x their launch time) within the stated uncertainty; without energy_s, none."""
    measurer = Measurer(FakeBackend())
    config = {"X": 300}
    m, _ = measurer.measure(job(config, energy_s=1.0), Recorder())
    assert m.status == "ok"
    for prefix, ms in (("", base_ms(config)), ("reference_", base_ms(REFERENCE))):
        value, err = m.extra[f"{prefix}energy_mj_per_launch"], m.extra[f"{prefix}energy_mj_per_launch_err"]
        assert abs(value - 300.0 * ms) <= err + 300.0 * ms * 0.06  # the fake's clock drifts +-5 % around nominal
        assert m.extra[f"{prefix}power_w"] == pytest.approx(300.0, abs=m.extra[f"{prefix}power_w_err"] + 0.1)
        assert m.extra[f"{prefix}energy_steps"] >= 10
    plain, _ = measurer.measure(job(config), Recorder())
    assert not {k for k in plain.extra if "energy" in k or "power" in k}


def test_a_trial_of_a_kernel_above_the_power_limit_stores_a_reason_not_a_value(monkeypatch):
    monkeypatch.setenv("FAKE_POWER_LIMIT_W", "700")
    m, _ = Measurer(FakeBackend()).measure(job({"X": 300, "POWER_W": 900}, energy_s=1.0), Recorder())
    assert m.status == "ok" and "energy_mj_per_launch" not in m.extra and "power_w" not in m.extra
    assert "above the enforced limit" in m.extra["energy_note"]
    assert m.extra["reference_power_w"] == pytest.approx(300.0, rel=0.01)  # the reference's own window is fine


def test_energy_relative_to_the_reference_is_the_ratio_of_the_two_with_its_uncertainty():
    counter = FakeEnergyCounter(step_s=0.1)
    own = measure_energy(kernel(counter, 0.8, 400.0), counter, 0.8, 1.0)
    ref = measure_energy(kernel(counter, 1.0, 300.0), counter, 1.0, 1.0)
    attrs = own.relative_to(ref)
    assert attrs["energy_ratio"] == pytest.approx(0.8 * 400.0 / 300.0, rel=0.01)
    # relative errors add in quadrature: larger than either alone, smaller than their sum
    rel = attrs["energy_ratio_err"] / attrs["energy_ratio"]
    own_rel, ref_rel = own.mj_per_launch_err / own.mj_per_launch, ref.mj_per_launch_err / ref.mj_per_launch
    assert max(own_rel, ref_rel) < rel < own_rel + ref_rel
    unmeasured = measure_energy(kernel(counter, 1.0, 300.0), counter, 1.0, 0.05)
    assert own.relative_to(unmeasured) == {} and unmeasured.relative_to(own) == {}


@pytest.mark.parametrize("ms", [1.0, 0.8, 0.1])
def test_the_fake_counter_publishes_every_step_whatever_the_launches_add_up_to(ms):
    """Launches whose times sum to a step only up to float rounding (1,000 x 1 ms) still publish it."""
    counter = FakeEnergyCounter(step_s=0.1)
    published = set()
    for _ in range(round(1000 / ms) + 1):  # one launch past 1 s: its tenth step, not an eleventh
        counter.advance(ms / 1e3, 300.0)
        published.add(counter.read().mj)
    assert len(published - {0.0}) == 10
