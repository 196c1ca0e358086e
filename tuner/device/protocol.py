"""The messages between the supervisor and the GPU worker, typed.

The parent sends a job (:class:`PrepareJob`, :class:`WarmUpJob`, :class:`MeasureJob`,
:class:`ConfirmJob`, :class:`ProfileJob`, :class:`HostDryRunJob`) or :class:`Exit`; the worker greets with
:class:`Hello` (or :class:`StartFailed`), answers a job with :class:`Ready` once the inputs
are in place, one :class:`Block` per timed block (the parent answers :class:`Answer`:
continue or stop), then :class:`Reply`. Prepare and warm-up jobs get no answer.

:func:`encode` and :func:`decode` are the one place where these become plain dicts (what
goes through the pipe) and back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tuner.measurement.paired import StopRule
from tuner.measurement.steady import SteadyRule
from tuner.measurement.value import Measurement


@dataclass(frozen=True)
class Timing:
    """How one measurement is timed (the ``timing`` part of a job)."""

    warmup: int = 5
    warmup_ms: float = 100.0
    block: int = 10
    min_pairs: int = 20
    max_pairs: int = 200
    ci_target: float = 0.0025
    regime: str = "sustained"
    idle_s: float = 2.0  # burst: the GPU rests this long before the candidate's pairs
    # sustained: the reference runs at least this long before the first trial, then on until its time is
    # steady (tuner.measurement.steady), at most the cap
    session_warmup_ms: float = SteadyRule.min_ms
    session_warmup_cap_s: float = SteadyRule.cap_ms / 1e3
    steady_tolerance: float = SteadyRule.tolerance
    steady_block_ms: float = SteadyRule.block_ms
    energy_s: float = 0.0  # after timing, the candidate and then the reference run alone this long for energy
    # sustained: the reference's own config, as a trial, is measured before the session warm-up ends (a kernel
    # paired with itself reads 1 at any clock), so a study's first result need not wait for a steady GPU
    early_self_pair: bool = True
    # each launch is a run of the kernel's own program (tuner.contract.program), which warms the GPU and
    # times many launches itself: no session warm-up, and warm-up by rounds only
    program: bool = False

    @property
    def stop_rule(self) -> StopRule:
        return StopRule(self.ci_target, self.min_pairs, self.max_pairs)

    @property
    def steady_rule(self) -> SteadyRule:
        return SteadyRule(tolerance=self.steady_tolerance, block_ms=self.steady_block_ms,
                          min_ms=self.session_warmup_ms, cap_ms=self.session_warmup_cap_s * 1e3)

    @classmethod
    def of(cls, data: dict | None) -> Timing:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass(frozen=True)
class Kernel:
    """A compiled config of the study's kernel."""

    config: dict[str, Any]
    cubin_path: str


@dataclass(frozen=True)
class Baseline:
    """The spec's host-side baseline (e.g. cuBLAS) as the reference."""


Reference = Kernel | Baseline


@dataclass(frozen=True, kw_only=True)
class PrepareJob:
    """Build a problem's inputs on the device (every job names its problem this way)."""

    spec_path: str
    problem: dict[str, Any]
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class WarmUpJob(PrepareJob):
    """Warm the GPU up with the reference before the first trial (sustained regime).

    ``first_trial``: the study's likely first trial, the reference paired with itself, to measure
    at once and keep until it is asked (:meth:`tuner.device.timing.Measurer.warm_up`).
    """

    reference: Reference
    timing: Timing = field(default_factory=Timing)
    first_trial: MeasureJob | None = None


@dataclass(frozen=True, kw_only=True)
class CheckedJob(WarmUpJob):
    """A job whose kernels are checked before they are timed."""

    check_rows: int = 0  # 0: the spec's own count
    tolerance: dict[str, Any] | None = None  # Tolerance.as_job(); None: the spec's class


@dataclass(frozen=True, kw_only=True)
class MeasureJob(CheckedJob):
    """One trial: check the candidate, then time it in pairs with the reference."""

    candidate: Kernel


@dataclass(frozen=True, kw_only=True)
class ConfirmJob(CheckedJob):
    """Time several kernels round-robin with the reference (index 0)."""

    kernels: list[Kernel]
    rounds: int = 100


@dataclass(frozen=True, kw_only=True)
class ProfileJob(CheckedJob):
    """Check the candidate, warm it up, then launch it once inside the profiler's range (what Nsight
    Compute profiles when started with ``--profile-from-start off``: ``tuner profile``)."""

    candidate: Kernel


@dataclass(frozen=True, kw_only=True)
class HostDryRunJob(PrepareJob):
    """Launch stubs that write back what they receive (:mod:`tuner.check.host_dry_run`)."""

    cases: list[dict[str, Any]]


Job = PrepareJob | WarmUpJob | MeasureJob | ConfirmJob | ProfileJob | HostDryRunJob


@dataclass(frozen=True)
class Exit:
    """The worker leaves."""


@dataclass(frozen=True)
class Answer:
    """The parent's answer to a block: stop (pruned) or go on."""

    stop: bool


@dataclass(frozen=True)
class Hello:
    device: dict[str, Any]


@dataclass(frozen=True)
class StartFailed:
    error: str


@dataclass(frozen=True)
class Ready:
    """The job's inputs are in place: timing starts (the parent's deadline shortens)."""


@dataclass(frozen=True)
class Launching:
    """Between jobs, the worker launches ``what`` ("reference": the session warm-up, whose silence past
    the parent's timeout is the reference's hang; "job": that is over). Sent again while it lasts.
    ``group``: the process group of a program the worker runs now (a kernel in its own harness), which
    the parent kills with the worker when it hangs; 0 for none."""

    what: str
    group: int = 0


@dataclass(frozen=True)
class Block:
    step: int
    value: float
    samples: list[float]
    pairs: int


@dataclass(frozen=True)
class Reply:
    """A job's outcome; ``restart``: a sticky CUDA error poisoned the worker's context."""

    measurement: Measurement
    restart: bool = False


Message = Job | Exit | Answer | Hello | StartFailed | Ready | Launching | Block | Reply

_KINDS: dict[str, type] = {cls.__name__: cls for cls in (
    PrepareJob, WarmUpJob, MeasureJob, ConfirmJob, ProfileJob, HostDryRunJob, Exit, Answer, Hello, StartFailed, Ready, Launching,
    Block, Reply)}


def encode(message: Message) -> dict[str, Any]:
    """``message`` as a JSON-able dict (its class name under ``"kind"``)."""
    data: dict[str, Any] = {"kind": type(message).__name__}
    for f in fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        if isinstance(value, Measurement):
            value = value.to_json()
        elif isinstance(value, Baseline):
            value = {"baseline": True}
        elif isinstance(value, (Kernel, Timing)):
            value = asdict(value)
        elif f.name == "kernels":
            value = [asdict(k) for k in value]
        elif f.name == "first_trial" and value is not None:
            value = encode(value)
        data[f.name] = value
    return data


def decode(data: dict[str, Any]) -> Message:
    """The message :func:`encode` made ``data`` of."""
    fields_ = {k: v for k, v in data.items() if k != "kind"}
    cls = _KINDS[data["kind"]]
    if "reference" in fields_:
        ref = fields_["reference"]
        fields_["reference"] = Baseline() if ref.get("baseline") else Kernel(**ref)
    if "candidate" in fields_:
        fields_["candidate"] = Kernel(**fields_["candidate"])
    if "kernels" in fields_:
        fields_["kernels"] = [Kernel(**k) for k in fields_["kernels"]]
    if "timing" in fields_:
        fields_["timing"] = Timing.of(fields_["timing"])
    if "measurement" in fields_:
        fields_["measurement"] = Measurement(**fields_["measurement"])
    if fields_.get("first_trial") is not None:
        fields_["first_trial"] = decode(fields_["first_trial"])
    return cls(**fields_)
