"""The worker's backend for kernels that are their own programs (:mod:`tuner.contract.program`).

:class:`ProgramBackend` wraps the device's own backend: a config of a
:class:`~tuner.contract.program.ProgramSpec` is "launched" by running its program, which
prints its own time; every other kernel goes to the device backend unchanged. The device
backend still names the GPU (a study stays bound to its device) and reads its clocks, so
the measurement protocol of :mod:`tuner.device.timing` runs unchanged on programs: paired
runs of the candidate's and the reference's programs, the stop rule, the pruner's blocks.

A program that hangs is the supervisor's to catch, as a kernel that hangs: the backend tells
the parent before each run, so ``timeout_s`` bounds one run of a program, and a program dies
with its worker when the worker is killed.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.contract.program import NoResult, ProgramResult, ProgramSpec, checksum_differs, parse_result, program_fields
from tuner.device.timing import Backend, LaunchFailed
from tuner.lifetime import die_with_parent, kill_group
from tuner.measurement.value import Measurement


@dataclass(frozen=True)
class Program:
    """A built config of a program spec, as the worker runs it."""

    spec: ProgramSpec
    path: str


class ProgramBackend:
    """A device backend that also runs programs; see the module documentation."""

    def __init__(self, device: Backend):
        self.device = device
        #: called as each run of a program starts, with its process group: the parent hears that the launch goes
        #: on, and whom to kill with the worker if it hangs (0: none runs now)
        self.beat: Callable[[int], None] = lambda group: None
        self._reference: Program | None = None
        self._checksums: dict[str, float | None] = {}  # a program's path -> the checksum it printed
        self._rounds = 0
        self._programs = False  # the problem prepared is a program's

    def hello(self) -> dict[str, Any]:
        return self.device.hello()

    def prepare(self, spec: Any, problem: dict, seed: int) -> None:
        self._programs = isinstance(spec, ProgramSpec)
        if not self._programs:  # a program makes its own inputs
            self.device.prepare(spec, problem, seed)

    def load(self, spec: Any, config: dict, problem: dict, cubin_path: str) -> Any:
        if isinstance(spec, ProgramSpec):
            return Program(spec, cubin_path)
        return self.device.load(spec, config, problem, cubin_path)

    def load_baseline(self, spec: Any, problem: dict) -> Any:
        if isinstance(spec, ProgramSpec):
            raise LaunchFailed("a program kernel has no host-side baseline: name a config as [measure] reference")
        return self.device.load_baseline(spec, problem)

    def unload(self, handle: Any) -> None:
        if not isinstance(handle, Program):
            self.device.unload(handle)

    def use_reference(self, handle: Any) -> None:
        """The handle every other is paired with, whose checksum the others must print."""
        self._reference = handle if isinstance(handle, Program) else None
        hook = getattr(self.device, "use_reference", None)
        if hook is not None and not isinstance(handle, Program):
            hook(handle)

    def check(self, handle: Any, spec: Any, problem: dict, check_rows: int, seed: int,
              tolerance: dict | None = None) -> Measurement:
        if not isinstance(handle, Program):
            return self.device.check(handle, spec, problem, check_rows, seed, tolerance)
        result = self._run(handle)
        self._checksums[handle.path] = result.checksum
        expected = self._expected_checksum(handle)
        why = checksum_differs(result.checksum, expected, handle.spec.checksum_rtol)
        if why:
            return Measurement("mismatch", reason=why, checksum=result.checksum)
        return Measurement("ok", checksum=result.checksum, extra=dict(program_fields(result)))

    def _expected_checksum(self, handle: Program) -> float | None:
        reference = self._reference
        if reference is None or reference.path == handle.path:
            return self._checksums.get(handle.path)
        if reference.path not in self._checksums:
            self._checksums[reference.path] = self._run(reference).checksum
        return self._checksums[reference.path]

    def time(self, handles: Sequence[Any], rounds: int) -> list[list[float]]:
        if not any(isinstance(h, Program) for h in handles):
            return self.device.time(handles, rounds)
        out = []
        for _ in range(rounds):
            row = [0.0] * len(handles)
            start = self._rounds % len(handles)  # no program always runs first
            for i in [*range(start, len(handles)), *range(start)]:
                row[i] = self._run(handles[i]).ms
            out.append(row)
            self._rounds += 1
        return out

    def profiled(self, handle: Any) -> None:
        if isinstance(handle, Program):  # (refused before: `tuner profile` names the program's own command)
            raise LaunchFailed("a program kernel launches itself: profile its program with ncu")
        self.device.profiled(handle)

    def sensors(self) -> dict[str, float]:
        return self.device.sensors()

    def energy_counter(self) -> Any:
        # a program's run is more than its kernel (start-up, inputs, its own checks): no energy per launch
        if self._programs:
            return None
        return getattr(self.device, "energy_counter", lambda: None)()

    def _run(self, program: Program) -> ProgramResult:
        """Run ``program`` once; what it printed, or :class:`LaunchFailed` saying why not."""
        argv = program.spec.run_argv(program.path)
        try:
            # a group of its own, which the parent kills when the worker is killed for a hang (what the program
            # started too); a program dies with its worker all the same
            proc = subprocess.Popen(argv, cwd=program.spec.path.parent, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                                    preexec_fn=functools.partial(die_with_parent, os.getpid(), signal.SIGKILL))
        except OSError as exc:
            raise LaunchFailed(f"cannot run {argv[0]}: {exc.strerror} (run is a command line, not a shell's: "
                               "put settings such as VAR=value in a script it runs)") from None
        self.beat(proc.pid)
        try:
            stdout, stderr = proc.communicate()
        finally:
            kill_group(proc.pid)  # what it left running
            self.beat(0)
        if proc.returncode != 0:
            raise LaunchFailed(f"the program {_ended(proc.returncode)}{_last_line(stderr or stdout)}")
        try:
            return parse_result(stdout, stderr)
        except NoResult as exc:
            raise LaunchFailed(f"the program {exc}{_last_line(stderr)}") from None


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited {code}"


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return f": {lines[-1][:300]}" if lines else ""
