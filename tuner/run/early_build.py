"""The reference's build, begun with ``tuner run``'s process.

A run's first trial measures its reference config, which must be compiled first (most of a second
with an empty compile cache), and the run only asks for that build once its command line has
imported Optuna and SQLAlchemy (most of a second on a host just started). So :mod:`tuner.cli.launch`
starts the build here, on a thread, before those imports: the study file names the reference without
Optuna (:mod:`tuner.run.reference`), and NVRTC releases the GIL while it compiles. The space's
valid set, which the run needs before its first trial, starts enumerating there too (in other
processes). The run's compile pool then takes the build over (:meth:`EarlyBuild.offer`) when it is
the very build the pool would run, and the run's space the valid set (:meth:`EarlyBuild.share_space`);
any other build stays unused (its result still lands in the compile cache).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported on the thread: this module is imported before anything heavy starts)
    from tuner.compile.nvrtc import CompilePool
    from tuner.search.space import Space
    from tuner.study.file import StudyConfig

#: ``tuner run`` flags that take no value (every other flag takes one)
_SWITCHES = {"--json", "--no-pruner", "--accept-mismatch"}


class EarlyBuild:
    """The reference build of one study file and its space's valid set, on a thread from its creation."""

    def __init__(self, study_file: str, cache_dir: str | None = None) -> None:
        self.space: Future[Space | None] = Future()  # the study's space, its valid set enumerating (None: no study)
        self.job: Future[tuple | None] = Future()  # what the build compiles; None: nothing to build early
        self.build: Future[dict] = Future()  # compile_job's result
        threading.Thread(target=self._run, args=(study_file, cache_dir), daemon=True, name="tuner-early-build").start()

    @classmethod
    def for_run(cls, argv: Sequence[str]) -> EarlyBuild | None:
        """The early build of ``tuner run STUDY ...``'s study file, or None when ``argv`` names none.
        The arguments are only peeked at: a wrong guess costs a build that is never taken."""
        study_file, cache_dir = None, None
        args = list(argv[1:])
        while args:
            arg = args.pop(0)
            flag, has_value, value = arg.partition("=")
            if not flag.startswith("-"):
                study_file = study_file or arg
            elif flag not in _SWITCHES and not has_value:
                value = args.pop(0) if args else ""
            if flag == "--cache-dir":
                cache_dir = value
        return cls(study_file, cache_dir) if study_file and study_file.endswith(".toml") else None

    def share_space(self, space: Space) -> bool:
        """Let ``space`` take the valid set this build's equal space is enumerating (False: none)."""
        early = self.space.result()  # (set as soon as the study file is read)
        return early is not None and space.enumerate_from(early)

    def offer(self, pool: CompilePool, config: dict) -> bool:
        """Hand the build to ``pool`` as its build of ``config``, if it is that build."""
        job = self.job.result()  # the study file's load: short, and under way since the process began
        return job is not None and pool.adopt(config, job, self.build)

    def _run(self, study_file: str, cache_dir: str | None) -> None:
        from tuner.search.space import Space

        job = None
        try:
            cfg, space = Space.load(study_file)  # as the run loads it (without the command line's settings)
            self.space.set_result(space)
            space.enumerate_soon()  # needed before the first trial is asked: in other processes, meanwhile
            job = _reference_job(cfg, space, cache_dir)
        except Exception:  # bad input: the run itself reports it
            pass
        if not self.space.done():
            self.space.set_result(None)
        self.job.set_result(job)
        if job is None:
            return
        from tuner.compile.nvrtc import compile_job

        try:
            data = compile_job(job, catch=False)
        except Exception as exc:
            try:
                self.build.set_exception(exc)
            except InvalidStateError:  # (the pool cancelled it: it no longer waits)
                pass
            return
        try:
            self.build.set_result(data)
        except InvalidStateError:
            pass


def _reference_job(cfg: StudyConfig, space: Space, cache_dir: str | None) -> tuple | None:
    """The compile job of the study's reference, as the run's GPU evaluator will ask it (None: a
    reference that is no kernel build of a fixed arch)."""
    from tuner.compile.build import CompileLimits
    from tuner.compile.nvrtc import CompilePool
    from tuner.contract.arch import NATIVE
    from tuner.run.reference import reference_config
    from tuner.search.enumeration import checked_reason

    if cfg.arch == NATIVE:  # the GPU names the target: known once the worker has started
        return None
    spec = space.spec
    reference = reference_config(cfg, space)
    if not isinstance(reference, dict) or checked_reason(spec, reference, dict(space.problem)):
        return None
    pool = CompilePool(spec, dict(space.problem), cfg.arch, cache_dir, CompileLimits.of(cfg.measure), jobs=0)
    return pool.job(reference)
