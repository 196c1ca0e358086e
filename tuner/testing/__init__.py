"""Test helpers shared by the suite (and by anyone testing a kernel spec of their own): the
CLI's JSON summary, a recording's space, a worker's measure job, a study file builder and an
in-process CLI runner. Nothing here touches a GPU."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.study.inline import toml_text

if TYPE_CHECKING:
    from tuner.device.protocol import MeasureJob
    from tuner.evaluate.replay import Recording
    from tuner.search.space import Space

#: the repository's example kernel spec (a small FP32 GEMM), for study files written by tests
EXAMPLE_SGEMM = Path(__file__).resolve().parents[2] / "kernel" / "example_sgemm.py"


def run_summary(result: subprocess.CompletedProcess) -> dict:
    """The last line of a successful ``tuner run/grid --json``: its summary."""
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def replay_space(path: str | Path):
    """(the recording, its space) of a recorded table or Kernel Tuner cache."""
    from tuner.evaluate.replay import load_recording, recording_space

    recording = load_recording(path)
    return recording, recording_space(recording)


def measure_job(spec_path: str | Path, problem: Mapping[str, Any], config: Mapping[str, Any],
                reference: Mapping[str, Any] | None = None, **timing: Any) -> MeasureJob:
    """A measure job as the GPU evaluator sends it to the worker (a fake backend never opens the cubins)."""
    from tuner.device.protocol import Kernel, MeasureJob
    from tuner.device.timing import Timing

    return MeasureJob(spec_path=str(spec_path), problem=dict(problem), seed=0,
                      candidate=Kernel(dict(config), "candidate.cubin"),
                      reference=Kernel(dict(reference or {}), "reference.cubin"),
                      timing=Timing.of({"session_warmup_ms": 10, "warmup_ms": 5, **timing}))


def write_study(folder: str | Path, name: str, *, tier1: Mapping[str, list], tier2: Mapping[str, list] | None = None,
                problem: Mapping[str, Any] | None = None, search: Mapping[str, Any] | None = None,
                measure: Mapping[str, Any] | None = None, kernel: str | Path = EXAMPLE_SGEMM, arch: str = "sm_90a") -> Path:
    """``folder/NAME.toml``: a study of ``kernel`` (default: the example GEMM on a 1024 cube)."""
    tables: dict[str, Mapping[str, Any]] = {
        "study": {"name": name, "kernel": str(kernel), "arch": arch},
        "problem": problem if problem is not None else {"M_DIM": 1024, "N_DIM": 1024, "K_DIM": 1024},
        "space.tier1": tier1,
    }
    for table, values in (("space.tier2", tier2), ("search", search), ("measure", measure)):
        if values:
            tables[table] = values
    path = Path(folder) / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(toml_text(tables))
    return path


@dataclass
class CliResult:
    """What :func:`cli` saw: the exit code and the two streams."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: Any) -> CliResult:
    """``tuner ARGS`` in this process (the console script's code path, less the early worker spawn)."""
    from tuner.cli.commands import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's errors and --help
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


def ask_seconds(space: Space, recording: Recording, trials: int) -> list[float]:
    """Seconds of each ``study.ask()`` of the default sampler over ``trials`` replayed trials (in memory)."""
    import time

    import optuna

    from tuner.search.distributions import suggest
    from tuner.search.sampler import ValidOnlySampler, make_proposer

    study = optuna.create_study(sampler=ValidOnlySampler(space, make_proposer("tpe", 0), seed=0))
    costs = []
    for _ in range(trials):
        started = time.perf_counter()
        trial = study.ask()
        for axis, distribution in space.distributions.items():
            suggest(trial, axis, distribution)
        costs.append(time.perf_counter() - started)
        record = recording.lookup(trial.params)
        if record is not None and record.ms is not None:
            study.tell(trial, record.ms)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return costs


def work_per_trial(argv: list[str], windows: list[tuple[int, int]]) -> tuple[int, list[tuple[float, float]]]:
    """``tuner ARGV`` in this process, and its work per trial over each window ``(start, length)`` of
    finished trials (from the ``start``-th told to ``start + length``-th): Python function calls in
    every thread and SQL statements, counted (not timed: a machine's speed cannot move them).
    Returns the command's exit code and, per window, (calls, statements) per trial."""
    import sys
    import threading

    import optuna
    import sqlalchemy

    from tuner.cli.commands import main

    calls, statements, told = [0], [0], [0]
    marks: dict[int, tuple[int, int]] = {}
    starts = {start for start, _ in windows}
    ends = {start + length for start, length in windows}

    def count(frame, event, arg):
        if event in ("call", "c_call"):
            calls[0] += 1

    def statement(*args):
        statements[0] += 1

    tell = optuna.Study.tell

    def counted_tell(self, *args, **kwargs):
        result = tell(self, *args, **kwargs)
        told[0] += 1
        if told[0] in starts or told[0] in ends:
            marks[told[0]] = (calls[0], statements[0])
        if told[0] in ends:
            sys.setprofile(None)
            threading.setprofile(None)
        if told[0] in starts:
            sys.setprofile(count)
            threading.setprofile(count)
        return result

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", statement)
    optuna.Study.tell = counted_tell  # type: ignore[method-assign]
    try:
        code = main(argv)
    finally:
        optuna.Study.tell = tell  # type: ignore[method-assign]
        sys.setprofile(None)
        threading.setprofile(None)
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", statement)
    per_window = [((marks[s + n][0] - marks[s][0]) / n, (marks[s + n][1] - marks[s][1]) / n) for s, n in windows]
    return code, per_window
