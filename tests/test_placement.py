"""Timing over several placements of a problem's buffers (tuner/device/placement.py).

The hardware effect (a ratio that depends on where the data lies) is measured on a GPU
(docs/experiments/MEASUREMENT.md); here: how many copies a worker keeps, and that the study's
setting reaches the backend. tests/test_gpu.py runs the copies on a GPU.
"""

from __future__ import annotations

import dataclasses

from tests.fake_backend import FakeBackend
from tests.test_paired import Recorder, job
from tuner.device.placement import L2_MULTIPLE, copies_that_fit
from tuner.device.timing import Measurer
from tuner.study.file import MeasureSettings

GB = 1 << 30
L2 = 50 << 20


def test_a_problem_streaming_from_memory_gets_the_copies_it_asks_for():
    assert copies_that_fit(4, set_bytes=6 * GB, free_bytes=70 * GB, l2_bytes=L2) == 4


def test_copies_take_at_most_half_the_free_memory():
    assert copies_that_fit(4, set_bytes=10 * GB, free_bytes=40 * GB, l2_bytes=L2) == 3  # the original + 2 of 10 GB
    assert copies_that_fit(4, set_bytes=30 * GB, free_bytes=40 * GB, l2_bytes=L2) == 1


def test_a_problem_that_lives_in_l2_gets_no_copies():
    assert copies_that_fit(4, set_bytes=L2_MULTIPLE * L2 - 1, free_bytes=70 * GB, l2_bytes=L2) == 1
    assert copies_that_fit(4, set_bytes=L2_MULTIPLE * L2, free_bytes=70 * GB, l2_bytes=L2) == 4


def test_one_placement_asked_is_one_kept():
    assert copies_that_fit(1, set_bytes=6 * GB, free_bytes=70 * GB, l2_bytes=L2) == 1


class _Asked(FakeBackend):
    def prepare(self, spec, problem, seed, placements=1):
        self.asked = getattr(self, "asked", [])
        self.asked.append(placements)
        super().prepare(spec, problem, seed, placements)


def test_the_study_setting_reaches_the_backend_and_a_new_count_prepares_again():
    assert MeasureSettings().placements == 1  # off unless a study asks
    settings = MeasureSettings(placements=3)
    backend = _Asked()
    measurer = Measurer(backend)
    first = dataclasses.replace(job({"X": 100}), placements=settings.placements)
    measurer.measure(first, Recorder())
    measurer.measure(first, Recorder())  # the same problem: prepared once
    measurer.measure(dataclasses.replace(first, placements=1), Recorder())
    assert backend.asked == [3, 1]
