"""Evaluate configs for real: compile here (NVRTC), measure in the isolated worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from tuner.compile import CompileLimits, compile_kernel
from tuner.errors import UserError
from tuner.record import Measurement
from tuner.spec import KernelSpec, Problem, Value
from tuner.study_file import MeasureSettings
from tuner.supervisor import Supervisor, WorkerDied

ARCH_OF_CC = {(9, 0): "sm_90a", (10, 0): "sm_100a", (8, 0): "sm_80", (8, 6): "sm_86", (8, 9): "sm_89", (12, 0): "sm_120a"}


def arch_matches(arch: str, cc: tuple[int, int]) -> bool:
    """Can a CUBIN for ``arch`` run on a device of compute capability ``cc``?"""
    digits = "".join(ch for ch in arch if ch.isdigit())
    major, minor = int(digits[:-1]), int(digits[-1])
    if arch.endswith("a"):  # arch-specific features: exactly this chip
        return (major, minor) == tuple(cc)
    return (major, minor) <= tuple(cc) and major == cc[0]


class GpuEvaluator:
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
    ):
        self.spec = spec
        self.problem = problem
        self.arch = arch
        self.measure_settings = measure
        # TUNER_WORKER_BACKEND swaps the CUDA backend for a test double (see tests/fake_backend.py).
        self.supervisor = supervisor or Supervisor(os.environ.get("TUNER_WORKER_BACKEND", "cuda"))
        self.cache_dir = cache_dir
        self.seed = seed
        self.limits = CompileLimits(measure.max_regs, measure.reject_spills)

    def start(self) -> dict:
        """Start the worker and check that this GPU can run the study's arch."""
        try:
            device = self.supervisor.start()
        except WorkerDied as exc:
            raise UserError(
                f"no usable CUDA GPU here ({exc}): replay a recording with `tuner run STUDY --replay FILE`, "
                "or check compiles with `tuner check --compile STUDY`"
            ) from None
        cc = tuple(device.get("cc", (0, 0)))
        if not arch_matches(self.arch, cc):
            self.supervisor.stop()
            raise UserError(
                f"this GPU ({device.get('name')}, sm_{cc[0]}{cc[1]}) cannot run {self.arch} code: run the study on a matching GPU, "
                f"or verify it here without launching: tuner check --compile STUDY"
            )
        return device

    def close(self) -> None:
        self.supervisor.stop()

    def evaluate(self, params: dict[str, Value], config: dict[str, Value], report: Callable[[int, float], bool]) -> Measurement:
        derived = self.spec.derive(config, self.problem)
        built = compile_kernel(self.spec, config, self.problem, self.arch, self.cache_dir, self.limits)
        common = dict(regs=built.regs, spills=built.spills, smem_bytes=derived.get("smem_bytes", built.smem_static),
                      compile_s=round(built.compile_s, 4), flags=built.flags)
        logs = {"compile.log": built.log}
        if not built.ok:
            return Measurement(built.status, reason=built.reason, artifacts=logs, **common)
        m = self.supervisor.measure(
            {
                "spec_path": str(self.spec.path),
                "problem": self.problem,
                "config": config,
                "cubin_path": built.cubin_path,
                "warmup": self.measure_settings.warmup,
                "warmup_ms": self.measure_settings.warmup_ms,
                "repeats": self.measure_settings.repeats,
                "block": self.measure_settings.block,
                "check_rows": self.measure_settings.check_rows,
                "seed": self.seed,
            },
            self.measure_settings.timeout_s,
            report,
        )
        for key, value in common.items():
            if getattr(m, key) in (None, ""):
                setattr(m, key, value)
        m.artifacts = logs
        return m
