"""A confirmation's session factor: its confirmed ratios over the stored ones (issue 32, item 2 in part).

Trials stored with known ratios; a confirmation double measures the same configs with a
planted session shift. The factor comes out as the shift, and `tuner status` shows it and
warns when it moves more than the study's resolution.
"""

import json
import random
import re

import pytest

from tests.conftest import planted_study, tuner
from tuner.evaluate.confirm import confirm_study, session_factors
from tuner.measurement.paired import rank_interleaved

STORED = {(32, 1): 0.95, (32, 2): 0.97, (64, 1): 0.99, (64, 2): 1.02}
AXES = {"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4]}


class ShiftedSession:
    """Times the configs round-robin at their stored ratios x ``shift`` (reference: 1 ms); configs
    with THREAD_TILE 2 x ``tile2`` more (a chip that runs one kind of config otherwise)."""

    def __init__(self, shift: float, tile2: float = 1.0):
        self.shift, self.tile2, self.rng = shift, tile2, random.Random(5)

    def confirm(self, configs, rounds):
        ratios = [STORED[(c["BLOCK"], c["THREAD_TILE"])] * self.shift * (self.tile2 if c["THREAD_TILE"] == 2 else 1)
                  for c in configs]
        times = [[1.0, *(r * (1 + 0.001 * self.rng.gauss(0, 1)) for r in ratios)] for _ in range(rounds)]
        return rank_interleaved(times), {}


@pytest.fixture
def stored(tmp_path):
    return planted_study(tmp_path, AXES, STORED)


def test_each_confirmation_records_its_session_factor(stored):
    url, study, space = stored
    for shift in (1.0, 1.012):
        record = confirm_study(study, space, ShiftedSession(shift), {"name": "Fake GPU"}, top=3, rounds=60)
        assert record["session_factor"] == pytest.approx(shift, abs=0.001) and record["anchors"] == 3
    assert [round(f["factor"], 2) for f in session_factors(study)] == [1.0, 1.01]


def test_status_shows_the_factors_and_warns_beyond_the_resolution(stored):
    url, study, space = stored
    confirm_study(study, space, ShiftedSession(1.0), {"name": "Fake GPU"}, top=3, rounds=60)
    quiet = tuner("status", "--storage", url)
    assert quiet.returncode == 0 and "SESSION_FACTORS" in quiet.stdout and "warning" not in quiet.stderr
    confirm_study(study, space, ShiftedSession(1.012), {"name": "Fake GPU"}, top=3, rounds=60)
    loud = tuner("status", "--storage", url)
    factors = json.loads(tuner("status", "--storage", url, "--json").stdout)["studies"][0]["session_factors"]
    assert [f["factor"] for f in factors] == pytest.approx([1.0, 1.012], abs=0.001)
    assert loud.returncode == 0 and f"{factors[0]['factor']:.4f} {factors[1]['factor']:.4f}" in loud.stdout
    assert loud.stderr.count("warning") == 1 and f"{100 * (factors[1]['factor'] - 1):+.2f} %" in loud.stderr
    assert "Fake GPU" in loud.stderr


@pytest.mark.parametrize(("tile2", "warned"), [(0.995, False), (0.975, True)])
def test_configs_that_moved_unalike_are_a_warning_too(stored, tile2, warned):
    """The median factor stays 1 when one kind of config runs otherwise on this chip (H200s: `CLUSTER_M 2`
    configs 2.5 % apart between machines); the anchors' spread says so, beyond what one machine repeats."""
    url, study, space = stored
    record = confirm_study(study, space, ShiftedSession(1.0, tile2=tile2), {"name": "Other GPU"}, top=3, rounds=60)
    assert record["session_factor"] == pytest.approx(1.0, abs=0.001)  # the two THREAD_TILE 1 anchors
    status = tuner("status", "--storage", url)
    assert status.returncode == 0 and ("orders them otherwise" in status.stderr) == warned, status.stderr
    if warned:
        assert status.stderr.count("warning") == 1 and "Other GPU" in status.stderr
        assert re.search(r"measured its 3 configs -2\.[45]\d % to [+-]0\.0\d % against", status.stderr), status.stderr


def test_status_judges_a_confirmation_by_the_resolution_its_study_ran_at(stored):
    """A study run at ci_target 0.5 %: a session 0.4 % off is within it, in the run's words and in
    `tuner status`'s alike (status reads the resolution from the record, not its own default)."""
    url, study, space = stored
    confirm_study(study, space, ShiftedSession(1.004), {"name": "Fake GPU"}, top=3, rounds=60, resolution=0.005)
    status = tuner("status", "--storage", url)
    assert status.returncode == 0 and "warning" not in status.stderr, status.stderr
    confirm_study(study, space, ShiftedSession(1.004), {"name": "Fake GPU"}, top=3, rounds=60)  # the default 0.25 %
    status = tuner("status", "--storage", url)
    assert status.stderr.count("warning") == 1 and "(+-0.25 %)" in status.stderr, status.stderr
