"""The trial record: one measurement's outcome, as stored on every Optuna trial.

Statuses (the trial-record contract of docs/ENGINE.md). ``ok`` and ``duplicate`` trials are COMPLETE
with value = :attr:`Measurement.value` (the paired ratio, or ms); every other status is a PRUNED trial with a ``reason``, so TPE ranks
it as worst instead of ignoring it (as it would a FAIL).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = (
    "ok",
    "invalid",
    "compile_error",
    "too_many_regs",
    "spills",
    "wgmma_serialized",
    "hang",
    "launch_error",
    "mismatch",
    "pruned_slow",
    "duplicate",
)
#: statuses of FAIL trials: a dead runner's (set by recovery), a Ctrl-C'd one (or one asked ahead
#: and never measured: queued again), one created in a race for the budget's last place (never measured)
EXTRA_STATUSES = ("killed", "interrupted", "over_budget")

COMPLETE_STATUSES = ("ok", "duplicate")


@dataclass
class Measurement:
    """One config's outcome. The numbers a trial is ranked and reported by are fields of their
    own (stored under the same user-attribute names); ``extra`` holds the rest (interval,
    pairs, clocks, power)."""

    status: str
    #: the candidate's median time per launch (raw milliseconds: they drift with the GPU's clock)
    ms: float | None = None
    #: the trial's objective value where it is not ``ms`` (a paired measurement's ratio, or
    #: that ratio scaled to milliseconds); never stored as a user attribute (it is the trial's value)
    value: float | None = None
    #: paired timing: median candidate / reference ratio, and the reference's median time
    ratio: float | None = None
    reference_ms: float | None = None
    reason: str = ""
    regs: int | None = None
    spills: int | None = None
    smem_bytes: int | None = None
    compile_s: float | None = None
    flags: str = ""
    checksum: float | None = None
    max_err: float | None = None
    blocks: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    #: texts kept as trial artifacts when an artifact store is configured (never user attrs)
    artifacts: dict[str, str] = field(default_factory=dict)

    def user_attrs(self, flops: float | None) -> dict[str, Any]:
        """JSON-serializable, numeric where sortable; absent rather than null."""
        attrs: dict[str, Any] = {"status": self.status, "reason": self.reason, "flags": self.flags}
        for key in ("ms", "ratio", "reference_ms", "regs", "spills", "smem_bytes", "compile_s", "checksum", "max_err"):
            value = getattr(self, key)
            if value is not None:
                attrs[key] = value
        if self.ms and flops:
            attrs["tflops"] = round(flops / (self.ms * 1e-3) / 1e12, 3)
        attrs.update(self.extra)
        return attrs

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> Measurement:
        names = set(cls.__dataclass_fields__) - {"blocks", "extra", "artifacts", "value"}
        return cls(**{k: v for k, v in attrs.items() if k in names})

    @property
    def objective(self) -> float | None:
        return self.value if self.value is not None else self.ms

    def to_json(self) -> dict:
        return asdict(self)
