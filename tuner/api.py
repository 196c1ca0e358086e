"""The Python API: tune a study, or a kernel given as data, and read the result, in a notebook.

    result = tuner.tune("studies/example_sgemm.toml", trials=40)
    result.best_flags, result.best_params, result.tied, result.trials  # a pandas DataFrame
    result.notes                                                        # what the run said, e.g. its warm start
    result.to_header("best.h")
    tuner.load("studies/example_sgemm.toml").best_params                # a later session

Both run on :class:`tuner.run.session.Session`, as ``tuner run`` and ``tuner best`` do: the same
settings, storage, resume and confirmation. Bad input raises :class:`tuner.errors.UserError`
with the line the command would print.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from tuner.contract.kernel_spec import KernelSpec, Scalar, Value
from tuner.contract.light import In, Out
from tuner.errors import UserError
from tuner.lifetime import children_skip_user_main
from tuner.measurement.pareto import check_objectives
from tuner.store import results
from tuner.study import options
from tuner.study.inline import in_call_terms


@dataclass
class Result:
    """A stored study's outcome: the confirmed winner (else the best trial) and every trial."""

    study: optuna.Study
    #: the winner; None where no trial completed (every one failed: :attr:`trials` says why)
    best_trial: FrozenTrial | None
    #: the latest confirmation's record (standings, tied trials, device), or None
    confirmation: dict[str, Any] | None
    #: what the run printed as ``--json`` (None for :func:`load`)
    summary: dict[str, Any] | None = None
    #: the lines ``tuner run`` prints about the run besides its trials (how a recording was read, what a
    #: warm start transferred, the confirmation); empty for :func:`load`
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, study: optuna.Study, summary: dict[str, Any] | None = None, notes: list[str] | None = None) -> Result:
        from tuner.evaluate.confirm import confirmed_best, no_winner

        notes = list(notes or [])
        if results.best_trial(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), study.directions[0]) is None:
            notes.append(no_winner(study))  # the trials stay readable: they say why
            return cls(study, None, None, summary, notes)
        best, confirmation = confirmed_best(study)
        return cls(study, best, confirmation, summary, notes)

    def __repr__(self) -> str:
        if self.best_trial is None:
            return f"<Result {self.study.study_name!r}: {len(self.study.trials)} trials, no winner>"
        return (f"<Result {self.study.study_name!r}: {len(self.study.trials)} trials, best {self.best_params} "
                f"at {self.best_value:.4g} {self.metric}{', confirmed' if self.confirmation else ''}>")

    @property
    def winner(self) -> FrozenTrial:
        """The winning trial; a study without one raises :class:`~tuner.errors.UserError` saying why."""
        if self.best_trial is None:
            from tuner.evaluate.confirm import no_winner

            raise UserError(no_winner(self.study))
        return self.best_trial

    @property
    def best_params(self) -> dict[str, Value]:
        """The winner's tuned defines."""
        return dict(self.winner.params)

    @property
    def best_flags(self) -> str:
        """The winner's ``-D`` flags, problem keys included (what ``tuner best`` prints)."""
        return str(self.winner.user_attrs.get("flags", ""))

    @property
    def best_value(self) -> float:
        """The winner's value, in :attr:`metric` units (several objectives: its time); raises
        :class:`tuner.UserError` where no trial completed, as :attr:`best_params` does."""
        return self.winner.values[0]

    @property
    def metric(self) -> str:
        """``ratio`` (to the reference config, paired timing) or ``ms``."""
        from tuner.store.results import metric_of

        return metric_of(self.study)

    @property
    def front(self) -> pd.DataFrame:
        """A time-and-energy study's Pareto front, fastest first (as ``tuner best --pareto``): trial,
        the two objectives (``time``, ``energy``: ratios to the reference in a paired study, also under
        their metric names), ms, energy per launch in mJ and its error, power, flags, and the defines;
        empty for a study of time alone."""
        from tuner.measurement import pareto

        rows = pareto.front_rows(self.study) if pareto.is_multi(self.study) else []
        return pd.DataFrame([{**row.pop("params"), **row} for row in rows])

    @property
    def tied(self) -> list[dict[str, Value]]:
        """The other configs statistically tied with the winner in its confirmation (``tuner best --json``'s
        ``tied``, as params); empty without a tie or a confirmation (replays, or fewer than two configs measured)."""
        from tuner.evaluate.confirm import tied_with_winner

        if self.confirmation is None:
            return []
        by_number = {t.number: t for t in self.study.get_trials(deepcopy=False)}
        return [dict(by_number[n].params) for n in tied_with_winner(self.confirmation) if n in by_number]

    @property
    def trials(self) -> pd.DataFrame:
        """Every trial in the results schema (:mod:`tuner.store.results`): the defines, then value, ms, status, ..."""
        from tuner.store.results import trials_frame

        axes = self.study.user_attrs.get("axes")
        return trials_frame(self.study.get_trials(deepcopy=False), axes if isinstance(axes, list) else None)

    def to_header(self, path: str | Path) -> Path:
        """Write the winner's defines as ``#ifndef`` / ``#define`` guards; the path written."""
        from tuner.errors import check_output_path
        from tuner.store.header import HEADER_MARK, write_header

        check_output_path(Path(path), "to_header(path):", ours=HEADER_MARK.encode())
        return write_header(Path(path), self.study, self.winner)


#: what the settings that take a list or a dict look like
_EXAMPLES = {"start": "[{'BLOCK': 64}, ...]", "reference": "{'BLOCK': 64}", "objectives": "['time', 'energy']"}


#: what a study keeps for good (its results keep one meaning), no setting of a call: where each is set
STUDY_FILE_ONLY = {"precision": "[study] precision in the study file", "arch": "[study] arch in the study file "
                   "(tune_kernel takes arch=)", "atol": "atol on the kernel spec (tune_kernel takes atol=)",
                   "rtol": "rtol on the kernel spec (tune_kernel takes rtol=)"}


def _given(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword settings by the option table's names, checked as the study file's keys are."""
    given = {}
    for name, value in settings.items():
        opt = options.BY_NAME.get(name)
        if opt is None and name in STUDY_FILE_ONLY:
            raise UserError(f"{name}: a study keeps it for good, so no call sets it: {STUDY_FILE_ONLY[name]}")
        if opt is None:
            raise UserError(f"unknown setting {name!r}; expected one of {', '.join(sorted(options.BY_NAME))}")
        structured = opt.toml and opt.kind in (list, dict)  # start, reference: checked against the space later
        if structured and not isinstance(value, (list, tuple) if opt.kind is list else (dict, str)):  # str: "baseline"
            example = _EXAMPLES.get(name, "[...]" if opt.kind is list else "{...}")
            raise UserError(f"{name}: a {opt.kind.__name__}, e.g. {name}={example}; got {value!r}")
        if name == "objectives":  # as the study file's: else an unknown name is said as a mismatch with the study
            value = check_objectives(value, name)
        given[name] = value if structured else opt.check(value, name)
    if given.get("workers", 1) > 1:
        raise UserError("workers: several GPUs on one study run from the command line (tuner run --workers N)")
    return given


def _check_study(study: Any, expected: str) -> None:
    """A study is given by a path (a str or a Path) or a name: anything else is the one line saying what it takes."""
    if not isinstance(study, (str, os.PathLike)):
        raise UserError(f"study: {expected}, not a {type(study).__name__}")


def _storage_url(storage: Any) -> str | None:
    """``storage`` as ``--storage`` takes it: a URL, or a path (``FILE.log`` a journal, else a SQLite
    file; as a string, a path ending .db, .sqlite or .sqlite3)."""
    if storage is None or isinstance(storage, str):  # (a path ending .db: tuner.store.storage.resolve_url)
        return storage
    if isinstance(storage, os.PathLike):
        path = Path(storage)
        return str(path) if path.suffix == ".log" else f"sqlite:///{path}"
    raise UserError(f"storage: a URL (sqlite:///FILE.db, postgresql+psycopg://USER@HOST/DB, FILE.log, memory) or a "
                    f"path, not a {type(storage).__name__}")


_quiet = threading.Lock()
_quiet_calls = 0
_verbosity_before = optuna.logging.WARNING


@contextlib.contextmanager
def _api_call(study: str | Path | None = None) -> Iterator[Callable[[str], str]]:
    """Optuna's per-trial log lines repeat what the trials record (the CLI silences them too); the
    level comes back when the last of overlapping calls returns. A bad input's message, and each
    note (the function yielded), is in the caller's terms: the API's keywords, not the command's
    flags, and for a kernel that tune_kernel wrote as ``study``, its arguments, not the files."""
    global _quiet_calls, _verbosity_before

    def in_api_terms(message: str) -> str:
        message = options.in_api_terms(message)
        return message if study is None else in_call_terms(message, Path(study))

    with _quiet:
        if not _quiet_calls:
            _verbosity_before = optuna.logging.get_verbosity()
            optuna.logging.set_verbosity(optuna.logging.ERROR)
        _quiet_calls += 1
    try:
        with children_skip_user_main():
            yield in_api_terms
    except UserError as exc:
        raise type(exc)(in_api_terms(str(exc))) from None
    finally:
        with _quiet:
            _quiet_calls -= 1
            if not _quiet_calls:
                optuna.logging.set_verbosity(_verbosity_before)


def tune(study: str | Path | None = None, *, trials: int | None = None, storage: str | Path | None = None,
         replay: str | Path | None = None, progress: bool = False, **settings: Any) -> Result:
    """Run (or resume) a study as ``tuner run`` does; its result.

    ``study``: a study file (left out with a Kernel Tuner, T4 or KTT ``replay`` file alone); ``trials``: the
    study's total to reach (default: the file's; a call again resumes the study); ``storage``: as
    ``--storage`` (default ``sqlite:///tuner.db``), or a path (``FILE.log``: a journal, else a
    SQLite file); ``"memory"`` keeps nothing past the call; ``replay``: a recorded table instead of
    the GPU (stored as ``NAME.replay``); ``progress``: a progress bar (a widget in Jupyter);
    ``settings``: any [search] / [measure] key or run option by name (``sampler="random"``,
    ``seed=3``, ``repeats=100``, ``study_name="x"``, ``timeout_min=5`` counted from this call, ...).
    """
    from tuner.run.session import Session

    if study is not None:
        _check_study(study, "a study file's path (left out with replay=FILE alone)")
    if not isinstance(progress, bool):  # "no" would draw a bar
        raise UserError(f"progress: True or False (a progress bar), not {progress!r}")
    given = _given({**settings, **({"trials": trials} if trials is not None else {}),
                    **({"replay": replay} if replay is not None else {})})
    notes: list[str] = []
    with _api_call(study) as in_api_terms:
        summary, runner = Session(study, storage=_storage_url(storage), given=given, command="run", progress="bar" if progress else None,
                                  say=lambda note: notes.append(in_api_terms(note)),
                                  started=time.monotonic()).run()
        return Result.of(runner.study, summary, notes)


def load(study: str | Path, *, storage: str | Path | None = None) -> Result:
    """A stored study's result, as ``tuner best`` reads it: ``study`` is a study file (its GPU
    run, else its grid, else its replay) or a study's name in the storage."""
    from tuner.run.session import open_study

    _check_study(study, "a study file's path or a study's name in the storage")
    path, url = Path(study), _storage_url(storage)
    with _api_call(study):
        if path.suffix == ".toml" or path.is_file():
            return Result.of(open_study(url, study_file=path))
        return Result.of(open_study(url, name=str(study)))


def tune_kernel(kernel_name: str, kernel_source: str, problem: Mapping[str, Value], arguments: Sequence[In | Out | Scalar],
                tune_params: Mapping[str, Sequence[Value]], *, grid: Sequence[int | str], block: Sequence[int | str],
                reference: str, restrictions: Sequence[str | tuple[str, str]] = (), derived: Mapping[str, str] | None = None,
                flops: str | None = None, arch: str = "native", folder: str | Path | None = None,
                atol: float | None = None, rtol: float | None = None,
                trials: int | None = None, storage: str | Path | None = None, replay: str | Path | None = None,
                **settings: Any) -> Result:
    """Tune a simple kernel given as data, as Kernel Tuner's ``tune_kernel`` does; its result.

    ``kernel_source``: CUDA text with an ``extern "C" __global__`` entry ``kernel_name``;
    ``problem``: sizes passed as ``-D`` defines too; ``arguments``: :class:`tuner.In`,
    :class:`tuner.Out` (shapes by numbers or names) and :class:`tuner.Scalar`, in order;
    ``tune_params``: ``{DEFINE: [values]}`` (the first value is the default);
    ``grid``/``block``: three numbers or expressions over problem, defines and ``derived``;
    ``reference``: an expression for the first output's ``rows`` (inputs by name, ``np``),
    e.g. ``"2 * x[rows] + y[rows]"``; ``restrictions``: expressions that must hold (or
    ``(expression, message)``); ``flops``: an expression over the problem; ``atol``/``rtol``: the output
    check's tolerance (default: 1e-3 for float32 outputs, 2e-2 for BF16 ones). The kernel is
    written to ``folder`` (default: under the compile cache, named by its content) and
    tuned as :func:`tune` tunes a study file (:func:`kernel_study` gives that file), with
    :func:`tune`'s settings, but for :func:`tune`'s ``reference`` (the config each trial is timed
    against; here the name is the expected output's): ``tune(kernel_study(...), reference={...})``.
    """
    study = kernel_study(kernel_name, kernel_source, problem, arguments, tune_params, grid=grid, block=block,
                         reference=reference, restrictions=restrictions, derived=derived, flops=flops, arch=arch,
                         folder=folder, atol=atol, rtol=rtol)
    return tune(study, trials=trials, storage=storage, replay=replay, **settings)


def kernel_study(kernel_name: str, kernel_source: str, problem: Mapping[str, Value], arguments: Sequence[In | Out | Scalar],
                 tune_params: Mapping[str, Sequence[Value]], *, grid: Sequence[int | str], block: Sequence[int | str],
                 reference: str, restrictions: Sequence[str | tuple[str, str]] = (), derived: Mapping[str, str] | None = None,
                 flops: str | None = None, arch: str = "native", folder: str | Path | None = None,
                 atol: float | None = None, rtol: float | None = None) -> Path:
    """:func:`tune_kernel`'s kernel written as a study: the study file's path (for ``tuner check
    --compile``, ``tuner run``, or :func:`tune` with settings of its own). Bad input is said now, as
    far as it shows without a build: the restrictions, grid, block and reference evaluated for the
    first config, the arguments against the inputs, ``kernel_name`` among the source's functions."""
    from tuner.study.inline import write_kernel

    with _api_call():
        path = write_kernel(kernel_name, kernel_source, problem, arguments, tune_params, grid=grid, block=block,
                            reference=reference, restrictions=restrictions, derived=derived, flops=flops, arch=arch,
                            folder=folder, atol=atol, rtol=rtol)
    with _api_call(path):  # what the files written say, in the terms of this call
        _check_kernel(path)
    return path


#: the target a kernel for ``arch = "native"`` is checked against before a GPU names its own
CHECK_TARGET = "sm_80"


def _check_kernel(study: Path) -> None:
    """What fails in a kernel's folder before any build, as a :class:`UserError`: the restrictions,
    grid, block and reference evaluated for the first config, the arguments against the inputs,
    the kernel's name among the source's ``__global__`` functions."""
    from tuner.check.preflight import check_launch, check_spec
    from tuner.contract.arch import NATIVE, limits
    from tuner.contract.source import SourceBundle
    from tuner.search.space import Space

    cfg, space = Space.load(study)
    spec, problem = space.spec, dict(space.problem)
    found = SourceBundle.load(spec.source_path).global_functions()
    if found and spec.kernel_name not in found:
        raise UserError(f"kernel_name {spec.kernel_name!r} is not a __global__ function of the source (it has "
                        f"{', '.join(found)})")
    _check_names(spec, problem)
    space.check(space.defaults())  # the restrictions, evaluated for the first config
    target = CHECK_TARGET if cfg.arch == NATIVE else cfg.arch
    buffers, failures = check_spec(spec, problem, target)
    if not failures:
        failures = check_launch(spec, space.full_config(space.defaults()), problem, limits(target), buffers)[1]
    if failures:
        raise UserError(failures[0])


def _check_names(spec: KernelSpec, problem: Mapping[str, Value]) -> None:
    """A restriction or derived value that reads a name no config has (a misspelt define, say) fails
    now, also where it sits in a branch the first config does not take."""
    from tuner.contract.light import FUNCTIONS, LightSpec, names_read

    assert isinstance(spec, LightSpec)  # (tune_kernel's spec)
    known = sorted({*spec.params, *problem, *spec.derived})
    restrictions = [r if isinstance(r, str) else r[0] for r in spec.restrictions]
    for argument, expressions in (("restrictions", restrictions), ("derived", list(spec.derived.values()))):
        for expr in expressions:
            unknown = sorted(names_read(expr) - set(known))
            if unknown:
                raise UserError(f"{argument}: {expr!r} reads {', '.join(unknown)}, which is no define, problem key "
                                f"or derived value; known: {', '.join(known)}; functions: {', '.join(FUNCTIONS)}")
