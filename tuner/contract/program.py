"""A kernel that is its own program: the user's build command and a binary that times itself.

Many kernel engineers already have a harness: a ``.cu`` file with a ``main`` that builds its
inputs, launches the kernel, checks it and prints a time. :class:`ProgramSpec` tunes that
program as it is. Per config the tuner runs the spec's ``build`` command (``nvcc`` with the
config's ``-D`` flags, a ``make`` target, ...) and then runs the binary; the binary prints one
line the tuner reads::

    @@RESULT ms=0.630 checksum=1769472.0 [tflops=1739 ...]

``ms`` is required (the program's own timing of its kernel). ``checksum``, where printed, must
equal the reference config's within ``checksum_rtol``: a config whose checksum differs fails its
check (status ``mismatch``). Trials are timed as every kernel is: runs of the candidate's
program alternate with runs of the reference's, and a trial's value is the median ratio.

The space's defaults, restrictions and derived values work as in a :class:`LightSpec`; the
kernel's arguments, grid and block are the program's business.
"""

from __future__ import annotations

import math
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tuner.contract.kernel_spec import Config, Problem, Value
from tuner.contract.light import LightSpec, guarded_defines_in
from tuner.contract.source import SourceBundle
from tuner.errors import UserError

#: the names a ``build`` command may use, and a ``run`` command
PLACEHOLDERS = ("source", "flags", "binary", "arch", "dir")
RUN_PLACEHOLDERS = ("binary", "dir")
#: a __global__ function's name (after its return type and launch bounds)
#: what a program prints for the tuner
RESULT_MARK = "@@RESULT"
#: [measure] and [search] defaults for a program kernel, where a study sets none: a launch is a whole
#: program run (start-up, inputs, its own warm-up and timed loop), seconds rather than microseconds
PROGRAM_DEFAULTS: dict[str, Any] = {"warmup": 1, "min_pairs": 3, "block": 3, "repeats": 20, "ci_target": 0.005,
                                    "timeout_s": 120.0, "confirm_rounds": 20}


class ProgramSpec(LightSpec):
    """A light spec whose kernel is built and timed by the user's own program.

    Subclasses set ``source``, ``archs``, ``build`` and, where the binary needs arguments,
    ``run``; optionally ``problem_keys``, ``restrictions``, ``derived`` and ``flops``.
    """

    #: the shell command that builds one config, run in an empty folder: ``{source}``, ``{flags}`` (the ``-D``
    #: options), ``{binary}`` (where to write the program), ``{arch}`` (e.g. sm_90a), ``{dir}`` (the spec's
    #: folder); paths come quoted for the shell
    build: ClassVar[str] = ""
    #: how to run the program (no shell: a program that hangs dies with the tuner's worker)
    run: ClassVar[str] = "{binary}"
    #: how far a config's checksum may be from the reference config's, relative to it
    checksum_rtol: ClassVar[float] = 1e-6
    #: the longest a build may take
    build_timeout_s: ClassVar[float] = 600.0
    #: builds run in parallel, each in an empty folder of its own; False: one at a time on this host (a build
    #: that writes into a shared folder, e.g. ``make -C {dir}`` with its objects there)
    parallel_builds: ClassVar[bool] = True
    #: other files the build reads, relative to the spec (globs): the compile cache keys on them too (the
    #: source and the local files it includes are keyed already; so are the build command and the compiler)
    build_inputs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, path: Path):
        super().__init__(path)
        if self.source_path.is_file():  # a harness often includes the kernel's own file: its guards are defines too
            bundle = SourceBundle.load(self.source_path)
            guards: dict[str, Value] = {}
            for text in [*bundle.headers.values(), bundle.text]:
                guards.update(guarded_defines_in(text))
            # a harness guards other macros too (M_PI, a name string): only what a -D could tune is a define
            guards = {k: v for k, v in guards.items() if isinstance(v, int) or str(v).isidentifier()}
            self.params = {k: v for k, v in guards.items() if k not in self.problem_keys}
            self.problem_defaults = {k: v for k, v in guards.items() if k in self.problem_keys}
        if not isinstance(self.build, str) or not self.build.strip():
            raise UserError(f"kernel spec {self.path.name}: a ProgramSpec needs build = \"...\": the command that "
                            "builds one config, e.g. \"nvcc -O3 -arch={arch} {flags} {source} -o {binary}\"")
        _check_template(self.path.name, "build", self.build, PLACEHOLDERS)
        _check_template(self.path.name, "run", self.run, RUN_PLACEHOLDERS)
        if "{binary}" not in self.build:
            raise UserError(f"kernel spec {self.path.name}: build must write the program to {{binary}}")
        if "{flags}" not in self.build:
            raise UserError(f"kernel spec {self.path.name}: build must pass the config's defines: put {{flags}} in it")

    def build_command(self, config: Config, problem: Problem, arch: str, binary: Path) -> str:
        """The shell command that builds ``config`` into ``binary``."""
        return self.build.format(source=shlex.quote(str(self.source_path)), flags=self.flags(config, problem),
                                 binary=shlex.quote(str(binary)), arch=arch, dir=shlex.quote(str(self.path.parent)))

    def profiled_kernel(self) -> str:
        """The kernel ``tuner profile`` profiles in the program: the spec's ``kernel_name``, else the one
        ``__global__`` function of the source and the local files it includes."""
        if type(self).kernel_name:
            return type(self).kernel_name
        names = sorted(SourceBundle.load(self.source_path).global_functions())
        if len(names) != 1:
            found = f"{len(names)} __global__ functions ({', '.join(names)})" if names else "no __global__ function"
            raise UserError(f"kernel spec {self.path.name}: {self.source_path.name} has {found}: name the one to profile as "
                            "kernel_name = \"...\" in the spec")
        return names[0]

    def run_argv(self, binary: str | Path) -> list[str]:
        """The command line that runs a built program."""
        return [part.format(binary=str(binary), dir=str(self.path.parent)) for part in shlex.split(self.run)]

    def launch(self, *args, **kwargs):
        raise UserError(f"kernel spec {self.path.name}: a ProgramSpec's kernel is launched by its own program")

    def inputs(self, *args, **kwargs):  # the program builds its own
        return {}

    def outputs(self, *args, **kwargs):  # and checks them itself, or prints a checksum
        return {}


def _check_template(spec_name: str, name: str, template: str, names: tuple[str, ...]) -> None:
    if not isinstance(template, str):
        raise UserError(f"kernel spec {spec_name}: {name} must be a command string")
    try:
        used = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as exc:
        raise UserError(f"kernel spec {spec_name}: {name} {template!r}: {exc}; a brace the tuner does not fill "
                        "is written twice: ${{CUDA_HOME}}") from None
    for placeholder in used:
        if placeholder not in names:
            raise UserError(f"kernel spec {spec_name}: {name} uses {{{placeholder}}}; its names are "
                            f"{', '.join('{' + p + '}' for p in names)} (write a brace the tuner does not fill twice: "
                            "${{CUDA_HOME}})")


@dataclass
class ProgramResult:
    """What one run of a program printed on its ``@@RESULT`` line."""

    ms: float
    checksum: float | None = None
    #: every other key=value of the line, as text
    extra: dict[str, str] = field(default_factory=dict)


class NoResult(ValueError):
    """The program's output has no usable ``@@RESULT`` line; the message says what is wrong."""


def parse_result(output: str, errors: str = "") -> ProgramResult:
    """The ``@@RESULT`` line of a program's output (``errors``: its stderr, where a misplaced line is found)."""
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith(RESULT_MARK)]
    if not lines:
        where = " on stdout (it printed one on stderr)" if RESULT_MARK in errors else ""
        printed = [line.strip() for line in output.splitlines() if line.strip()]
        last = f"; its last line: {printed[-1][:120]!r}" if printed and not where else ""
        raise NoResult(f"printed no {RESULT_MARK} line{where} (print one: {RESULT_MARK} ms=<time of one launch>){last}")
    if len(lines) > 1:
        raise NoResult(f"printed {len(lines)} {RESULT_MARK} lines; print one, for the timed launches")
    fields: dict[str, str] = {}
    for item in lines[-1].split()[1:]:
        key, sep, value = item.partition("=")
        if not sep:
            raise NoResult(f"{RESULT_MARK} item {item!r} is not key=value")
        fields[key] = value
    ms = _number(fields.pop("ms", None), "ms")
    if ms is None or not 0 < ms < math.inf:
        raise NoResult(f"{RESULT_MARK} line has no positive ms=: {lines[-1][:200]!r}")
    checksum = _number(fields.pop("checksum", None), "checksum")  # (NaN: an output never written; the check says so)
    return ProgramResult(ms, checksum, fields)


def _number(text: str | None, key: str) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise NoResult(f"{RESULT_MARK} {key}={text!r} is not a number") from None


def checksum_differs(checksum: float | None, expected: float | None, rtol: float) -> str | None:
    """Why ``checksum`` is not the reference's, or None (also when neither printed one)."""
    if checksum is None:
        return None if expected is None else "printed no checksum, where the reference config printed one"
    if not math.isfinite(checksum):
        return f"checksum {checksum!r}: part of the output is not a number (never written, or overflowed)"
    if expected is None or not math.isfinite(expected):
        return None
    if abs(checksum - expected) <= rtol * max(abs(expected), 1e-30):
        return None
    return f"checksum {checksum!r} differs from the reference config's {expected!r} (checksum_rtol {rtol:g})"


def program_fields(result: ProgramResult) -> Mapping[str, str]:
    """The extra keys a program printed, as a trial keeps them (``program_<key>``)."""
    return {f"program_{k}": v for k, v in result.extra.items()}
