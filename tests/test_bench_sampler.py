"""bench/bench_sampler.py --own-kernel: counted configs to within 1 % of a recording's optimum (replay, CPU)."""

import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_sampler import WITHIN, configs_to_optimum, own_kernel, random_median_to_optimum  # noqa: E402


def _tiny_recording(path: Path) -> Path:
    """A Kernel Tuner cache of 48 configs over two axes, a bowl with noise: a few within 1 % of its best."""
    rng = np.random.default_rng(7)
    cache = {}
    for x, y in itertools.product(range(8), range(6)):
        cache[f"{x},{y}"] = {"x": x, "y": y, "time": float(1.0 + 0.02 * ((x - 5) ** 2 + (y - 2) ** 2) + 0.015 * rng.random())}
    path.write_text(json.dumps({"tune_params_keys": ["x", "y"], "tune_params": {"x": list(range(8)), "y": list(range(6))},
                                "cache": cache}))
    return path


def test_own_kernel_counts_configs_to_the_optimum(tmp_path):
    path = _tiny_recording(tmp_path / "tiny.json")
    times = [e["time"] for e in json.loads(path.read_text())["cache"].values()]
    # the budget covers the space: every run gets there; the source saw every config, so the
    # transferred run's first config (the source's best, queued by the warm start) is the optimum
    cold, warm = own_kernel([("tiny", path, path)], seeds=2, budget=48, source_budget=48)
    assert cold.configs == 48 and cold.near == sum(t <= (1 + WITHIN) * min(times) for t in times) < 48
    assert all(1 <= n <= 48 for n in cold.tpe + cold.random)
    assert (warm.start, warm.tpe, warm.random) == ("transferred", [1, 1], None)


def test_configs_to_optimum():
    assert configs_to_optimum([3.0, 1.5, 1.011, 1.009, 1.0], 1.0) == 4
    assert configs_to_optimum([3.0, math.inf], 1.0) == math.inf


@pytest.mark.parametrize(("n", "near"), [(6, 1), (6, 2), (7, 3), (5, 5)])
def test_random_median_is_that_of_every_draw_order(n, near):
    """The exact median against all n! orders of drawing without repeats."""
    firsts = sorted(next(i + 1 for i, c in enumerate(order) if c < near) for order in itertools.permutations(range(n)))
    assert random_median_to_optimum(n, near) == firsts[(len(firsts) - 1) // 2]
