"""Evaluate configs for real: compile here (NVRTC), measure in the isolated worker.

Every trial is timed in pairs against one reference, compiled once per session: by
default a config of the same kernel (``[measure] reference``, else the first ``[search]
start`` config, else the fastest of the study's first configs: :mod:`tuner.run.probe`), or the
spec's host-side baseline (``reference = "baseline"``, e.g. cuBLAS). The trial's value is the
median ratio candidate / reference; see :mod:`tuner.measurement.paired`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from tuner.compile.build import CompileLimits, CompileResult
from tuner.compile.nvrtc import CompilePool
from tuner.compile.targets import run_target
from tuner.contract.arch import NATIVE
from tuner.contract.kernel_spec import KernelSpec, Problem, Value
from tuner.contract.precision import Tolerance
from tuner.contract.program import ProgramSpec
from tuner.device.protocol import Baseline, ConfirmJob, Kernel, MeasureJob, PrepareJob, ProfileJob, Reference, WarmUpJob
from tuner.device.supervisor import REFERENCE_HANG, Report, Supervisor, WorkerDied
from tuner.device.timing import Timing
from tuner.errors import UserError
from tuner.evaluate.ahead import AheadDepth
from tuner.evaluate.evaluator import Evaluator
from tuner.measurement.paired import Standing, rank_interleaved
from tuner.measurement.value import Measurement
from tuner.search.enumeration import checked_reason
from tuner.study.file import MeasureSettings

BASELINE = "baseline"


@dataclasses.dataclass(frozen=True)
class ReferenceOrigin:
    """Where a run's reference came from, for what an error about it says (:mod:`tuner.run.reference`)."""

    named: str = "[measure] reference"  # the subject of "... does not build"
    fix: str = "choose another"


#: the first reasons a host-side check of the reference's launch names (the rest: `tuner check --compile`)
REFERENCE_REASONS = 2

#: the shortest wait for a profiled launch (Nsight Compute runs it many times over)
PROFILE_TIMEOUT_S = 300.0


class GpuEvaluator(Evaluator):
    kind = "gpu"

    def __init__(
        self,
        spec: KernelSpec,
        problem: Problem,
        arch: str,
        measure: MeasureSettings,
        supervisor: Supervisor | None = None,
        cache_dir: Path | None = None,
        seed: int = 0,
        reference: dict[str, Value] | str | None = None,
        compile_jobs: int | None = None,
        tolerance: Tolerance | None = None,
        reference_probe: int | None = None,
        reference_origin: ReferenceOrigin = ReferenceOrigin(),
    ):
        self.spec = spec
        self.problem = problem
        self.arch = arch
        self.measure_settings = measure
        #: the full-output check's tolerance (the study's precision class); None: the spec's own
        self.tolerance = tolerance
        self.supervisor = supervisor or Supervisor.from_env()
        self.cache_dir = cache_dir
        self.seed = seed
        self.limits = CompileLimits.of(measure)
        #: a full config of the kernel, or BASELINE for the spec's host-side baseline
        self.reference = reference if reference is not None else dict(spec.params)
        #: None: the reference is the one the study's settings name; else the spec's defaults stand in
        #: until the study chooses its own from this many first configs (0: this process does not choose)
        self.reference_probe = reference_probe
        self.reference_origin = reference_origin
        self._reference_job: Reference | None = None
        self._study = None  # set by bind(): where "ms" values keep the first session's reference time
        #: the GPU the worker reports (:meth:`start`): its UUID is written on each trial it measures
        self.device: dict[str, Any] = {}
        #: compiles ahead of the measurement (None: one process per core, 0: each config when measured)
        self.compiler = CompilePool(spec, problem, arch, cache_dir, self.limits, compile_jobs)
        #: how far ahead proposing pays now (at most ``ahead``): :mod:`tuner.evaluate.ahead`
        self._depth = AheadDepth(self.compiler.jobs)

    @property
    def timing(self) -> Timing:
        m = self.measure_settings
        return Timing(warmup=m.warmup, warmup_ms=m.warmup_ms, block=m.block, min_pairs=m.min_pairs,
                      max_pairs=m.repeats, ci_target=m.ci_target, regime=m.regime, idle_s=m.idle_s,
                      energy_s=m.energy_s,
                      # raw times and energy of the reference paired with itself wait for a steady GPU
                      early_self_pair=m.value == "ratio" and m.energy_s == 0,
                      program=isinstance(self.spec, ProgramSpec))

    def objective_attrs(self) -> dict:
        """What a study's values mean: a resumed study must have been measured the same way."""
        if isinstance(self.reference, dict):
            reference = self.spec.flags(self.reference, self.problem)
        else:
            reference = BASELINE
        metric = "ratio" if self.measure_settings.value == "ratio" else "ms"
        precision = self.tolerance.precision if self.tolerance is not None else "fast"
        return {"objective": {"metric": metric, "reference": reference, "regime": self.measure_settings.regime,
                              "precision": precision}}

    def bind(self, study) -> None:
        self._study = study

    def use_reference(self, config: dict[str, Value], factor: float = 1.0) -> None:
        """Pair with ``config`` from now on; ``factor``: its ratio to the reference it replaces (the
        study's ``reference_ms`` of ``value = "ms"`` moves with it, so values in ms stay as they were)."""
        self.reference = dict(config)
        self._reference_job = None
        stored = self._study.user_attrs.get("reference_ms") if self._study is not None else None
        if stored is not None and factor != 1.0:
            self._study.set_user_attr("reference_ms", stored * factor)

    def rebase(self, m: Measurement, factor: float) -> None:
        """A measurement against the old reference as one against a config ``factor`` x its time."""
        if m.ratio is None:
            return
        m.ratio /= factor
        for key in ("ratio_lo", "ratio_hi"):
            if m.extra.get(key) is not None:
                m.extra[key] /= factor
        if m.reference_ms is not None:  # the new reference's time in this trial's session
            m.reference_ms *= factor
        if m.value is not None:
            m.value = m.ratio * (self._scale(None) or 1.0)

    def _scale(self, reference_ms: float | None) -> float | None:
        """Ratio -> value: 1, or (``value = "ms"``) the reference's time in the study's first session."""
        if self.measure_settings.value == "ratio":
            return 1.0
        if self._study is None:
            return None
        stored = self._study.user_attrs.get("reference_ms")
        if stored is None and reference_ms is not None:
            self._study.set_user_attr("reference_ms", reference_ms)
            stored = reference_ms
        return stored

    def reference_job(self) -> Reference:
        """The reference as the worker loads it (compiled on first use, then from the cache)."""
        if self._reference_job is None:
            if not isinstance(self.reference, dict):  # BASELINE
                self._reference_job = Baseline()
            else:
                origin = self.reference_origin
                reason = checked_reason(self.spec, self.reference, self.problem)
                if reason:
                    raise UserError(f"{origin.named} is rejected by the kernel's constraint model: {reason}: {origin.fix}")
                built = self.compiler.result(self.reference)
                if not built.ok:
                    raise UserError(f"{origin.named} does not build ({built.status}: {built.reason}): {origin.fix}")
                self._reference_job = _kernel(self.reference, built)
        return self._reference_job

    def check_reference_launch(self) -> None:
        """The spec's launch of the reference checked here, as ``tuner check --compile`` checks each
        config (grid, block, arguments against the inputs and the CUBIN's entry, the reference
        function): a spec mistake stops the run with its reason before any trial, not trial by trial
        on the GPU."""
        from tuner.check.preflight import check_built, check_launch, check_spec
        from tuner.compile.cubin import CubinError
        from tuner.contract.arch import limits

        if not isinstance(self.reference, dict) or isinstance(self.spec, ProgramSpec):
            return  # (a program launches its kernel itself)
        row = limits(self.arch)
        buffers, reasons = check_spec(self.spec, self.problem, self.arch)
        launch = None
        if not reasons:
            launch, reasons = check_launch(self.spec, self.reference, self.problem, row, buffers)
        if launch is not None and not reasons:
            try:
                reasons = check_built(self.spec, launch, self.compiler.result(self.reference), row)
            except (OSError, CubinError):
                pass  # a CUBIN this reader cannot parse: the driver loads it, and says what is wrong
        if reasons:
            more = len(reasons) - REFERENCE_REASONS
            raise UserError(f"the kernel spec fails before its first launch: {'; '.join(reasons[:REFERENCE_REASONS])}"
                            f"{f' (and {more} more)' if more > 0 else ''}; `tuner check --compile STUDY` checks "
                            "it without a GPU")

    def start(self) -> dict:
        """Start the worker and check that this GPU can run the study's arch."""
        reference = self.reference
        buildable = reference if isinstance(reference, dict) and checked_reason(self.spec, reference, self.problem) is None else None
        if buildable is not None and self.arch != NATIVE and not self.supervisor.failed_to_start:  # needed by the first trial: builds while the worker starts
            self.compiler.submit(buildable)  # (not on a host without a GPU: its error would wait for the compile)
        try:
            device = self.supervisor.start()
        except WorkerDied as exc:
            raise UserError(
                f"no usable CUDA GPU here ({exc}): replay a recording with `tuner run STUDY --replay FILE`, "
                "or check compiles with `tuner check --compile STUDY`"
            ) from None
        self.device = device
        try:  # "native" becomes this GPU's target here, before anything is compiled for it
            self.arch = self.compiler.arch = run_target(self.arch, self.spec, device.get("cc", (0, 0)), device.get("name", ""))
        except UserError:
            self.supervisor.stop()
            raise
        if buildable is not None:  # native: builds while the worker prepares the inputs (a fixed arch: already submitted)
            self.compiler.submit(buildable)
        self.supervisor.prepare(PrepareJob(spec_path=str(self.spec.path), problem=self.problem, seed=self.seed))
        try:  # the reference's compile finishes while the worker builds the inputs
            reference_job = self.reference_job()
            # a study's first trial is, usually, the reference's own config: measured while the tuner sets up
            first = MeasureJob(**self._job(), candidate=reference_job) if isinstance(reference_job, Kernel) else None
            self.supervisor.prepare(WarmUpJob(spec_path=str(self.spec.path), problem=self.problem, seed=self.seed,
                                              reference=reference_job, timing=self.timing, first_trial=first))
            self.check_reference_launch()  # (while the worker warms up)
        except UserError:
            self.close()
            raise  # before the study is opened: nothing is stored under a reference that cannot run
        return device

    @property
    def ahead(self) -> int:
        """How many trials the runner may propose ahead of the one measured (0: none); ``depth()``
        says how many of them pay now."""
        return self.compiler.jobs

    def depth(self) -> int:
        return self._depth()

    def prefetch(self, config: dict[str, Value]) -> None:
        """Start compiling ``config`` now; :meth:`evaluate` picks the result up."""
        self.compiler.submit(config)

    def close(self) -> None:
        self.compiler.close()
        self.supervisor.stop()

    def _job(self) -> dict[str, Any]:
        """The fields every checked job of this study shares."""
        return dict(spec_path=str(self.spec.path), problem=self.problem, seed=self.seed, reference=self.reference_job(),
                    timing=self.timing, check_rows=self.measure_settings.check_rows or 0,  # 0: the spec's own count
                    tolerance=self.tolerance.as_job() if self.tolerance else None)

    def evaluate(self, params: dict[str, Value], config: dict[str, Value], report: Report) -> Measurement:
        built = self.compiler.result(config)
        started = time.monotonic()
        try:
            return self._measure(config, built, report)
        finally:
            self._depth.add(built.compile_s, time.monotonic() - started)

    def _measure(self, config: dict[str, Value], built: CompileResult, report: Report) -> Measurement:
        derived = self.spec.derive(config, self.problem)
        common: dict[str, Any] = dict(regs=built.regs, spills=built.spills, smem_bytes=derived.get("smem_bytes", built.smem_static),
                      compile_s=round(built.compile_s, 4), flags=built.flags)
        logs = {"compile.log": built.log}
        if not built.ok:
            return Measurement(built.status, reason=built.reason, artifacts=logs, **common)
        scale = self._scale(None)

        def scaled(step: int, value: float, samples: list[float]) -> bool:
            k = scale or 1.0
            return report(step, value * k, [x * k for x in samples])

        m = self.supervisor.measure(MeasureJob(**self._job(), candidate=_kernel(config, built)),
                                    self.measure_settings.timeout_s, scaled)
        if self.device.get("uuid"):  # which of several GPUs (workers, sessions) measured it
            m.extra["gpu"] = self.device["uuid"]
        if m.extra.get(REFERENCE_HANG):  # no config can be timed against it
            flags = self.objective_attrs()["objective"]["reference"]
            raise UserError(f"{m.reason}: the reference ({flags}) does not finish on this GPU; name one that runs as "
                            "[measure] reference or the first [search] start config")
        if m.status == "ok" and m.ratio is not None:
            m.value = m.ratio * (self._scale(m.reference_ms) or 1.0)
        printed = _number(m.extra.get("program_tflops"))
        if printed is not None and not self.spec.flops(self.problem):  # a program's own figure, where the spec has none
            m.extra.setdefault("tflops", printed)
        for key, value in common.items():
            if getattr(m, key) in (None, ""):
                setattr(m, key, value)
        m.artifacts = logs
        return m

    def profile(self, config: dict[str, Value]) -> Measurement:
        """Build ``config``, check its output, and launch it once inside the profiler's range (the launch
        ``tuner profile``'s Nsight Compute reports). The measurement says whether the output was right."""
        built = self.compiler.result(config)
        if not built.ok:
            return Measurement(built.status, reason=built.reason)
        # (ncu replays the launch once per pass of its sections, saving and restoring its memory each time)
        return self.supervisor.profile(ProfileJob(**self._job(), candidate=_kernel(config, built)),
                                       max(self.measure_settings.timeout_s, PROFILE_TIMEOUT_S))

    def confirm(self, configs: list[dict[str, Value]], rounds: int) -> tuple[list[Standing], dict]:
        """Time ``configs`` round-robin with the reference; their standings, best first, and what
        the session recorded (``left_out``: configs whose output failed its check here, each with
        its index, status and reason).

        ``Standing.index`` counts from 1 in ``configs`` order (0 is the reference).
        """
        kernels = []
        for config in configs:
            self.compiler.submit(config)
        for config in configs:
            built = self.compiler.result(config)
            if not built.ok:
                raise UserError(f"cannot confirm {built.flags}: {built.status}: {built.reason}")
            kernels.append(_kernel(config, built))
        timeout = self.measure_settings.timeout_s * max(1, len(configs))
        m = self.supervisor.confirm(ConfirmJob(**self._job(), kernels=kernels, rounds=rounds), timeout)
        if m.status != "ok":
            raise UserError(f"confirmation stopped: {m.status}: {m.reason}")
        times, kept = m.extra.pop("times"), m.extra.pop("kept")
        left_out = [{**entry, "index": entry["index"] + 1} for entry in m.extra.pop("left_out")]
        extra = {**m.extra, **({"left_out": left_out} if left_out else {})}
        if len(kept) < 2:
            return [], extra
        standings = rank_interleaved(times, reference=0, tolerance=self.measure_settings.ci_target)
        # a column of the rounds is a kept config: its index in ``configs`` counts from 1 as well
        return [dataclasses.replace(s, index=kept[s.index - 1] + 1) for s in standings], extra


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _kernel(config: dict[str, Value], built: CompileResult) -> Kernel:
    """A config that built, as the worker loads it (a build that is ok has its CUBIN on disk)."""
    assert built.cubin_path is not None, f"{built.status} build without a CUBIN"
    return Kernel(config, built.cubin_path)
