"""What a run asks of the thing that measures its configs.

Two evaluators exist: :class:`tuner.evaluate.gpu.GpuEvaluator` (compiles, and measures on a GPU
against a reference) and :class:`tuner.evaluate.replay.ReplayEvaluator` (looks recorded times up).
The run loop (:mod:`tuner.run.pipeline`, :mod:`tuner.run.runner`) reads only what is declared here;
the defaults are those of an evaluator that works on one config at a time and has no reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import optuna

    from tuner.contract.kernel_spec import Value
    from tuner.device.supervisor import Report
    from tuner.measurement.value import Measurement


class Evaluator:
    """Measures one config of a study at a time."""

    #: "gpu" or "replay": what a trial's time is (a replay's comes from a recording, at once)
    kind: ClassVar[str] = ""
    #: the target configs are compiled for (``sm_90a``; "": none, a replay)
    arch: str = ""
    #: the config every trial is paired with (``None``: none; a replay's recorded times are absolute)
    reference: dict[str, Value] | str | None = None
    #: how many first configs this process measures to choose the study's reference (``None``: the
    #: study names its reference; 0: another process chooses): :mod:`tuner.run.probe`
    reference_probe: int | None = None

    def evaluate(self, params: dict[str, Value], config: dict[str, Value], report: Report) -> Measurement:
        """``config`` (``params`` and what the spec derives from them) measured."""
        raise NotImplementedError

    @property
    def ahead(self) -> int:
        """How many trials the run may ask beyond the one measured, so that work on them starts early."""
        return 0

    def depth(self) -> int:
        """How many of the :attr:`ahead` trials pay now (:mod:`tuner.evaluate.ahead`)."""
        return self.ahead

    def prefetch(self, config: dict[str, Value]) -> None:
        """Start the work ``config`` needs before it is measured (its compile); :meth:`evaluate` picks it up."""

    def bind(self, study: optuna.Study) -> None:
        """The study the trials are told to (where a reference's time is kept between sessions)."""

    # -- a reference the study chooses (:mod:`tuner.run.probe`): asked only where ``reference_probe`` is set

    def objective_attrs(self) -> dict:
        """What the study's values mean (``{"objective": {"reference": flags, ...}}``): a resumed study
        must have been measured the same way."""
        raise NotImplementedError

    def use_reference(self, config: dict[str, Value], factor: float = 1.0) -> None:
        """Pair with ``config`` from now on; ``factor``: its ratio to the reference it replaces."""
        raise NotImplementedError

    def rebase(self, m: Measurement, factor: float) -> None:
        """``m``, measured against the reference replaced, as one against a config ``factor`` x its time."""
        raise NotImplementedError
