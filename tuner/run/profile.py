"""A study's config under Nsight Compute: ``tuner profile STUDY [--trial N]``.

The command runs itself again under ``ncu --profile-from-start off``; that inner run builds the
config as a trial would, checks its output, warms it up and launches it once between
``cuProfilerStart`` and ``cuProfilerStop`` (:meth:`tuner.evaluate.gpu.GpuEvaluator.profile`), so
ncu profiles that launch and nothing else: not the reference, the warm-up or the input generator.
ncu writes its report (``.ncu-rep``, for Nsight Compute's window); its main figures are read back
with ``ncu --import ... --csv`` and printed.

A program kernel (:class:`tuner.contract.program.ProgramSpec`) launches itself: its program, built
as a trial's is, runs under ncu, which profiles the program's first launch of the kernel; the
checksum it prints is compared with the one the trial stored.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from tuner.errors import UserError

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.contract.kernel_spec import KernelSpec
    from tuner.search.space import Space
    from tuner.study.file import StudyConfig

#: the Nsight Compute command line tool (else ``ncu`` on PATH, else CUDA's own folder)
NCU_ENV = "TUNER_NCU"
#: ncu's sections the report holds (its default set: throughput, launch, occupancy), as ncu's options
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis")
_SECTION_OPTIONS = [option for name in SECTIONS for option in ("--section", name)]
#: the metrics printed, by ncu's names, in this order (the report holds every one of its sections)
SHOWN = (
    "Duration", "SM Frequency", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput",
    "L1/TEX Hit Rate", "L2 Hit Rate", "Registers Per Thread", "Dynamic Shared Memory Per Block",
    "Static Shared Memory Per Block", "Theoretical Occupancy", "Achieved Occupancy", "Waves Per SM",
)
#: what the inner run prints as its last line: the launch's check, as JSON
RESULT_MARK = "@@PROFILED "


@dataclass
class Kernel:
    """One kernel launch ncu profiled: its name, its metrics (name -> (value, unit)) and what ncu's
    rules advise (with the speed-up they estimate, where they do)."""

    name: str
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)


    def numbers(self) -> dict[str, tuple[float | str, str]]:
        """The metrics with their values as numbers where ncu printed one (``1,041,050``: 1041050)."""
        return {name: (_number(value), unit) for name, (value, unit) in self.metrics.items()}


def _number(text: str) -> float | str:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


@dataclass
class Profiled:
    """What ``tuner profile`` found: the launch's output check (``ok``, or the status and why) and its kernels."""

    status: str
    reason: str
    kernels: list[Kernel]

    @property
    def check(self) -> str:
        return self.status + (f" ({self.reason})" if self.status != "ok" and self.reason else "")


def check_unchanged(study: optuna.Study, space: Space, accept_mismatch: bool) -> None:
    """The study file and its kernel still make the configs the study's trials ran (the same source,
    problem and defines): else a profile would be of another kernel than the trial it names."""
    from tuner.run.runner import setup_differences

    stored = study.user_attrs
    now = {"source_hash": space.spec.source_hash(), "problem": dict(space.problem), "axes": space.axis_names}
    differs = setup_differences(stored, now, [key for key in now if key in stored])  # (a GPU and NVRTC may differ)
    if differs and not accept_mismatch:
        raise UserError(f"study {study.study_name!r} was recorded under a different setup ({'; '.join(differs)}): "
                        "profile with the study file and kernel it ran, or add --accept-mismatch")


def chosen_trial(study: optuna.Study, number: int | None) -> FrozenTrial:
    """Trial ``number`` (a one-line error if the study has no such trial with a config), else the
    confirmed winner, else the best."""
    if number is None:
        from tuner.evaluate.confirm import confirmed_best

        return confirmed_best(study)[0]
    numbered = {t.number: t for t in study.get_trials(deepcopy=False) if t.params}
    if number not in numbered:
        have = f"trials {min(numbered)}-{max(numbered)}" if numbered else "none yet"
        raise UserError(f"--trial {number}: study {study.study_name!r} has no such trial with a config ({have})")
    return numbered[number]


def profile(ncu: str, report: Path, cfg: StudyConfig, space: Space, trial: FrozenTrial, cache_dir: Path | None) -> Profiled:
    """``trial``'s config profiled by ``ncu`` into ``report`` (an absolute path): in a tuner run inside
    ncu, or a program kernel's own program; :class:`ProfileFailed` when ncu or the launch fails."""
    from tuner.contract.program import ProgramSpec

    if isinstance(space.spec, ProgramSpec):
        status, reason = profile_program(ncu, report, space.spec.profiled_kernel(), cfg, space, trial, cache_dir)
    else:
        inner = [sys.executable, "-m", "tuner", "profile", str(cfg.path), "--launch-params", json.dumps(trial.params)]
        if cache_dir is not None:
            inner += ["--cache-dir", str(cache_dir)]
        status, reason = run_under_ncu(ncu_command(ncu, report, inner))
    kernels = read_report(ncu, report)
    if not kernels:
        raise ProfileFailed(f"ncu profiled no kernel of trial {trial.number} (its report: {report})")
    return Profiled(status, reason, kernels)


def find_ncu() -> str:
    """The ncu to run, or a one-line error that says how to get one."""
    given = os.environ.get(NCU_ENV)
    if given:
        found = shutil.which(given)
        if found is None:
            raise UserError(f"${NCU_ENV}={given}: not an executable; point it at Nsight Compute's ncu")
        return os.path.abspath(found)  # (a program kernel's runs in its spec's folder)
    found = shutil.which("ncu") or shutil.which("/usr/local/cuda/bin/ncu")
    if found is None:
        raise UserError("ncu (Nsight Compute) not found: install it (it comes with the CUDA toolkit), put it on PATH "
                        f"or name it in ${NCU_ENV}")
    return os.path.abspath(found)


def ncu_command(ncu: str, report: Path, inner: list[str]) -> list[str]:
    """``inner`` under ncu: only what runs in the profiler's range, every process (the GPU worker is a child)."""
    return [ncu, "--target-processes", "all", "--profile-from-start", "off", *_SECTION_OPTIONS, "--force-overwrite",
            "--export", str(report), *inner]


def program_command(ncu: str, report: Path, kernel: str, argv: list[str]) -> list[str]:
    """A program kernel's program under ncu: its first launch of ``kernel`` (ncu flushes the caches and
    holds the clocks for each launch it profiles, so the first is as good as any)."""
    return [ncu, "--kernel-name", kernel, "--launch-count", "1", *_SECTION_OPTIONS, "--force-overwrite",
            "--export", str(report), *argv]


def profile_program(ncu: str, report: Path, kernel: str, cfg: StudyConfig, space: Space, trial: FrozenTrial,
                    cache_dir: Path | None) -> tuple[str, str]:
    """Build ``trial``'s config of a program kernel, run its program under ncu; its checksum compared
    with the trial's: (status, reason), as :func:`run_under_ncu` gives the inner run's check."""
    from tuner.compile.program import build_program
    from tuner.contract.program import ProgramSpec, checksum_differs, parse_result

    spec = space.spec
    assert isinstance(spec, ProgramSpec)
    built = build_program(spec, space.full_config(dict(trial.params)), space.problem, _target(cfg, spec), cache_dir)
    if not built.ok or built.cubin_path is None:
        raise ProfileFailed(f"trial {trial.number}'s program did not build: {built.reason}")
    done = subprocess.run(program_command(ncu, report, kernel, spec.run_argv(built.cubin_path)), cwd=spec.path.parent,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        _failed(done)
    try:
        result = parse_result(done.stdout, done.stderr)
    except UserError as exc:
        raise ProfileFailed(f"the profiled program: {exc}") from None
    why = checksum_differs(result.checksum, trial.user_attrs.get("checksum"), spec.checksum_rtol)
    return ("mismatch", why) if why else ("ok", "")


def _target(cfg: StudyConfig, spec: KernelSpec) -> str:
    """The study's target; "native": the one this host's GPU runs (its worker says which GPU that is)."""
    from tuner.compile.targets import run_target
    from tuner.contract.arch import NATIVE

    if cfg.arch != NATIVE:
        return cfg.arch
    from tuner.device.supervisor import Supervisor, WorkerDied

    supervisor = Supervisor.from_env()
    try:
        device = supervisor.start()
    except WorkerDied as exc:
        raise UserError(f"no usable CUDA GPU here ({exc}): a study of arch \"native\" is profiled on its GPU") from None
    finally:
        supervisor.stop()
    return run_target(cfg.arch, spec, device.get("cc", (0, 0)), device.get("name", ""))


def run_under_ncu(command: list[str]) -> tuple[str, str]:
    """Run ``command`` (:func:`ncu_command`); the inner run's check of the launch (status, reason), or an
    error naming ncu's complaint."""
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    result = next((line[len(RESULT_MARK):] for line in reversed(lines) if line.startswith(RESULT_MARK)), None)
    if done.returncode != 0 or result is None:
        _failed(done)
    checked = json.loads(result)
    return checked["status"], checked["reason"]


def _failed(done: subprocess.CompletedProcess) -> NoReturn:
    """Raise what a run under ncu that failed says: ncu's error line, else the run's own last words."""
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    complaint = next((line for line in lines if line.startswith("==ERROR==")), None) or \
        next((line for line in reversed(lines) if line.startswith("tuner:")), None) or \
        next((line for line in reversed(lines) if line.strip()), "")
    if "ERR_NVGPUCTRPERM" in done.stdout + done.stderr:
        complaint = ("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or let "
                     "users profile (NVreg_RestrictProfilingToAdminUsers=0)")
    raise ProfileFailed(f"the profiled run failed (exit {done.returncode}): {complaint.strip()}")


class ProfileFailed(Exception):
    """ncu or the profiled run failed: not bad input, exit 1."""


def read_report(ncu: str, report: Path) -> list[Kernel]:
    """The kernels of ``report`` with their metrics (``ncu --import REPORT --csv --page details``)."""
    done = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "details"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        raise ProfileFailed(f"ncu could not read {report}: {(done.stderr or done.stdout).strip()[:300]}")
    return parse_details(done.stdout)


def parse_details(text: str) -> list[Kernel]:
    """ncu's ``--csv --page details`` output: one row per metric of each profiled launch (by its ID), and
    one per rule of a section that has something to say (no metric name, a description)."""
    body = text[text.find('"ID"'):] if '"ID"' in text else ""  # (ncu may print ==PROF== lines first)
    kernels: dict[str, Kernel] = {}
    for row in csv.DictReader(io.StringIO(body)):
        launch = row.get("ID")
        if launch is None or row.get("Metric Name") is None:
            continue
        kernel = kernels.setdefault(launch, Kernel(row.get("Kernel Name", "")))
        if row["Metric Name"]:
            kernel.metrics.setdefault(row["Metric Name"], (row.get("Metric Value", ""), row.get("Metric Unit", "")))
        elif row.get("Rule Description") and row.get("Rule Type") in ("OPT", "WRN"):  # (INF: a finding, no advice)
            kernel.advice.append(row["Rule Description"].strip() + _estimate(row))
    return list(kernels.values())


def _estimate(row: dict[str, str]) -> str:
    """ncu's estimate of what following a rule gains: of the kernel's duration (global), or of the part of
    the GPU the rule is about (local)."""
    speedup, kind = row.get("Estimated Speedup") or "", row.get("Estimated Speedup Type") or ""
    if not speedup:
        return ""
    if kind == "global":
        return f" (ncu: up to {speedup} % of the kernel's duration to save)"
    return f" (ncu's estimate for the part it names: up to {speedup} %)"


def shown(kernel: Kernel) -> list[tuple[str, str, str]]:
    """The metrics :data:`SHOWN` of ``kernel`` that the report holds: (name, value, unit)."""
    return [(name, *kernel.metrics[name]) for name in SHOWN if name in kernel.metrics]


def print_profiles(labels: list[str], profiles: list[Profiled], file=None) -> None:
    """The figures of each profile (``labels``: whose), side by side where each profiled one kernel of the
    same name; ncu's advice after them."""
    file = file or sys.stdout
    kernels = [p.kernels for p in profiles]
    if len(profiles) > 1 and all(len(k) == 1 for k in kernels) and len({k[0].name for k in kernels}) == 1:
        names = [name for name in SHOWN if any(name in k[0].metrics for k in kernels)]
        cells = [[" ".join(k[0].metrics.get(name, ("-", ""))).strip() for k in kernels] for name in names]
        widths = [max(len(name) for name in names)] + [max(len(row[i]) for row in [labels, *cells]) for i in range(len(labels))]
        print(kernels[0][0].name, file=file)
        for row in [["", *labels], *([name, *cell] for name, cell in zip(names, cells, strict=True))]:
            print("  " + "  ".join(f"{text:<{width}}" for text, width in zip(row, widths, strict=True)).rstrip(), file=file)
        for label, (kernel,) in zip(labels, kernels, strict=True):
            for advice in kernel.advice:
                print(f"  ncu ({label}): {advice}", file=file)
        return
    for label, profiled in zip(labels, profiles, strict=True):
        if len(profiles) > 1:
            print(f"{label}:", file=file)
        for kernel in profiled.kernels:
            print(kernel.name, file=file)
            rows = shown(kernel)
            width = max((len(name) for name, _, _ in rows), default=0)
            for name, value, unit in rows:
                print(f"  {name:<{width}}  {value} {unit}".rstrip(), file=file)
            for advice in kernel.advice:
                print(f"  ncu: {advice}", file=file)
