"""The worker protocol's messages survive the pipe: each one encoded to plain data and back is itself."""

import json

import pytest

from tuner.device import protocol
from tuner.device.protocol import (
    Answer,
    Baseline,
    Block,
    ConfirmJob,
    Exit,
    Hello,
    HostDryRunJob,
    Kernel,
    Launching,
    MeasureJob,
    PrepareJob,
    Ready,
    Reply,
    StartFailed,
    WarmUpJob,
)
from tuner.device.timing import Timing
from tuner.measurement.value import Measurement

PROBLEM = {"spec_path": "kernel/spec.py", "problem": {"M_DIM": 64}, "seed": 7}
CANDIDATE = Kernel({"BM": 128, "STAGES": 3}, "c.cubin")
REFERENCE = Kernel({"BM": 64, "STAGES": 2}, "r.cubin")

MESSAGES = [
    PrepareJob(**PROBLEM),
    WarmUpJob(**PROBLEM, reference=Baseline(), timing=Timing(regime="burst", idle_s=0.5)),
    WarmUpJob(**PROBLEM, reference=REFERENCE, first_trial=MeasureJob(**PROBLEM, reference=REFERENCE, candidate=REFERENCE,
                                                                     check_rows=16, tolerance={"rtol": 0.01})),
    MeasureJob(**PROBLEM, reference=REFERENCE, candidate=CANDIDATE, timing=Timing(max_pairs=40), check_rows=16,
               tolerance={"rtol": 0.01}),
    ConfirmJob(**PROBLEM, reference=Baseline(), kernels=[CANDIDATE, REFERENCE], rounds=30),
    HostDryRunJob(**PROBLEM, cases=[{"kernel_name": "k", "record_size": 64}]),
    Exit(), Answer(stop=True), Answer(stop=False), Hello({"name": "H200", "cc": [9, 0]}), StartFailed("no driver"),
    Ready(), Launching("reference"), Block(3, 0.98, [0.97, 0.99], 40),
    Reply(Measurement("ok", ms=1.2, ratio=0.98, reference_ms=1.22, extra={"pairs": 40}), restart=False),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_message_round_trips_through_plain_data(message):
    data = protocol.encode(message)
    assert protocol.decode(json.loads(json.dumps(data))) == message  # JSON-able, and nothing lost


def test_a_baseline_reference_stays_a_baseline_and_a_kernel_a_kernel():
    warm = protocol.decode(protocol.encode(WarmUpJob(**PROBLEM, reference=Baseline())))
    measure = protocol.decode(protocol.encode(MeasureJob(**PROBLEM, reference=REFERENCE, candidate=CANDIDATE)))
    assert isinstance(warm, WarmUpJob) and isinstance(warm.reference, Baseline)
    assert isinstance(measure, MeasureJob) and measure.reference == REFERENCE and measure.candidate == CANDIDATE
    assert isinstance(measure.timing, Timing)


def test_a_jobs_timing_defaults_are_the_options_tables():
    """A job built without the study's settings (a test's, a tool's) is timed as a study with none."""
    from tuner.evaluate.gpu import GpuEvaluator
    from tuner.study.options import MeasureSettings

    evaluator = GpuEvaluator.__new__(GpuEvaluator)  # only its settings and its kernel's kind are read
    evaluator.measure_settings = MeasureSettings()
    evaluator.spec = None
    assert evaluator.timing == Timing()
