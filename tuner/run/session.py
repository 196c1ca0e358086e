"""One run wired together: study file (or a replay file alone), space, evaluator, settings.

``tuner run``, ``grid``, ``worker`` and ``confirm`` and the Python API (:mod:`tuner.api`) all
start here, so a setting means the same from the command line and from a notebook. A
:class:`Session` is what one command is asked to do; it loads the study, builds the
evaluator (GPU or replay) and the run's settings, and runs the study with the confirmation
at its end. Printing stays with the caller: what the session would say goes to ``say``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from tuner.errors import UserError
from tuner.store.storage import GRID_SUFFIX, REPLAY_SUFFIX
from tuner.study import options

if TYPE_CHECKING:
    from tuner.device.supervisor import Supervisor
    from tuner.evaluate.evaluator import Evaluator
    from tuner.evaluate.replay import Recording
    from tuner.measurement.value import Measurement
    from tuner.progress import Shown
    from tuner.run.early_build import EarlyBuild
    from tuner.run.runner import RunSettings
    from tuner.search.space import Space
    from tuner.study.file import StudyConfig

#: the most recent distinct configs a run's end looks at for a define the kernel never reads, and the
#: fewest of them compared before it says so (two configs alike may be the compiler's choice, not the define's)
INERT_CHECK_CONFIGS = 400
INERT_MIN_COMPARED = 8


#: the pid of the ``tuner run --workers N`` process, in its workers' environment
PARENT_ENV = "TUNER_PARENT_PID"
#: how many workers share the study's budget, in each worker's environment
PEERS_ENV = "TUNER_PEERS"


@dataclass
class Loaded:
    """A study file (None with a Kernel Tuner replay file alone), its space, the recording replayed."""

    cfg: StudyConfig | None
    space: Space
    recording: Recording | None


@dataclass
class Evaluation:
    """The evaluator of a run with what binds a study to it."""

    evaluator: Evaluator
    attrs: dict[str, Any]  # the study's fingerprint (tuner.run.runner.study_attrs)
    name: str  # the study's name in the storage
    close: Callable[[], None]


class StartupClock:
    """Seconds from the process's start to each step of a run's start (``--json``: ``startup_s``),
    beside ``first_trial_s``: where a slow start goes."""

    def __init__(self, started: float | None = None) -> None:
        from tuner.procfs import started_monotonic

        #: a command's clock starts with its process; an API call's, with the call (a notebook's kernel is older)
        self.started = started_monotonic() if started is None else started
        self.marks: dict[str, float] = {}

    def mark(self, step: str, at: float | None = None) -> None:
        """``step`` happened now, or at ``at`` (``time.monotonic()``)."""
        self.marks[step] = round((time.monotonic() if at is None else at) - self.started, 3)


@dataclass
class Session:
    """What one command (or API call) is asked to do.

    ``given``: settings by name on top of the study file's ([search], [measure] and the
    command-line-only :class:`~tuner.study.options.RunOptions`), checked by :mod:`tuner.study.options`.
    ``command``: ``run``, ``worker``, ``grid`` or ``confirm``.
    """

    study_file: str | Path | None
    storage: str | None = None
    given: dict[str, Any] = field(default_factory=dict)
    command: str = "run"
    #: long work shown as a bar (the trials too), or as lines (the grid's compiles up front; trials report at the end)
    progress: Shown = None
    say: Callable[[str], None] | None = None  # where the run's notes go (the CLI: stderr)
    #: ``time.monotonic()`` when the command began (None: its process's start); a run's timeout counts from it
    started: float | None = None

    def __post_init__(self) -> None:
        self.run_options = options.run_options(self.given)

    @property
    def clock_started(self) -> float:
        from tuner.procfs import started_monotonic

        return started_monotonic() if self.started is None else self.started

    def _say(self, text: str) -> None:
        if self.say is not None:
            self.say(text)

    # -- building blocks ------------------------------------------------------------------
    def load(self) -> Loaded:
        """Study file (or a Kernel Tuner replay file alone) -> its space and the recording."""
        from tuner.contract.program import ProgramSpec
        from tuner.evaluate.replay import load_recording, recording_space
        from tuner.search.space import Space
        from tuner.study.file import check_given_configs

        replay = self.run_options.replay
        recording = load_recording(replay) if replay else None
        if recording is not None:
            for note in recording.notes:
                self._say(f"replay file {recording.path}: {note}")
        if not self.study_file:
            if recording is None:
                raise UserError("give a study file (studies/NAME.toml), or --replay FILE (a Kernel Tuner cache, T4 file, KTT output or results table)")
            if recording.format == "csv":  # a study's export, or a table of a grid run elsewhere
                recorded = sum(r.status != "invalid" for r in recording.records.values())  # (a grid lists its rejects)
                self._say(f"replay file {recording.path}: no study file: the space is the {recorded} configs "
                          "it records (give the study file for its whole space and constraints)")
            return Loaded(None, recording_space(recording), recording)
        cfg, space = Space.load(self.study_file)
        self.given = check_given_configs(self.given, dict(space.axes))
        if recording is not None and len(self.search(cfg).objectives) > 1:
            raise UserError(f"replay file {recording.path} records times, no energy: replay the study with "
                            'objectives = ["time"] (time and energy are measured on a GPU)')
        if isinstance(space.spec, ProgramSpec):
            self._program_settings(cfg)
        cfg.measure = options.apply(cfg.measure, self.given)
        objectives = self.search(cfg).objectives
        if len(objectives) > 1 and cfg.measure.energy_s <= 0:  # energy is an objective: measure it
            from tuner.measurement.pareto import DEFAULT_ENERGY_S

            cfg.measure.energy_s = DEFAULT_ENERGY_S
            self._say(f"objectives {objectives}: [measure] energy_s not set, measuring energy for "
                      f"{DEFAULT_ENERGY_S:g} s per config")
        if recording is not None:
            recording.pin(space, {**cfg.problem, **cfg.fixed}, Path(self.study_file).name)
            recorded = len(recording.in_space(space))
            if recorded < len(space.valid):
                self._say(f"replay file {recording.path} records {recorded} of the study's {len(space.valid)} valid "
                          "configs: the others read as invalid (not in the recording); without the study file the "
                          "search keeps to the recorded ones")
        return Loaded(cfg, space, recording)

    def _program_settings(self, cfg: StudyConfig) -> None:
        """A program kernel's settings where neither the study file nor the command line sets them;
        those it cannot serve are refused."""
        from tuner.contract.program import PROGRAM_DEFAULTS

        where = cfg.path or "the study"
        if options.apply(cfg.measure, self.given).reference == "baseline":
            raise UserError(f'{where}: [measure] reference = "baseline": a program kernel has no host-side baseline; '
                            "name one of its configs, or leave reference out")
        if len(self.search(cfg).objectives) > 1:
            raise UserError(f"{where}: [search] objectives: a program kernel's energy per launch cannot be measured "
                            '(a run of its program is more than its launches): use objectives = ["time"]')
        unset = {k: v for k, v in PROGRAM_DEFAULTS.items() if k not in cfg.given and k not in self.given}
        cfg.measure = options.apply(cfg.measure, unset)
        cfg.search = options.apply(cfg.search, unset)
        for key in ("block", "min_pairs"):  # as a study file's short repeats shrink them
            if key in unset:
                setattr(cfg.measure, key, min(getattr(cfg.measure, key), cfg.measure.repeats))

    def search(self, cfg: StudyConfig | None) -> options.SearchSettings:
        """The study file's [search] settings with the given ones on top."""
        search = options.apply(cfg.search if cfg else options.SearchSettings(), self.given)
        if self.command == "grid":  # every valid config once, in order, measured to the end
            search = options.apply(search, {"sampler": "grid", "trials": None,
                                            "timeout_min": None, "seed": 0, "pruner": False})
        return search

    def settings(self, loaded: Loaded, evaluation: Evaluation) -> RunSettings:
        from tuner.run.runner import RunSettings

        search = self.search(loaded.cfg)
        if self.command == "grid":
            search.trials = len(loaded.space.valid)
        run = self.run_options
        return RunSettings(
            **vars(search),
            study_name=evaluation.name,
            accept_mismatch=run.accept_mismatch,
            progress=self.progress,
            artifact_dir=str(run.artifacts) if run.artifacts else None,
            warm_start=run.warm_start,
            warm_start_top=run.warm_start_top,
            study_attrs=evaluation.attrs,
            started=self.clock_started,
            peers=int(os.environ.get(PEERS_ENV, "1")) if self.command == "worker" else 1,
        )

    def evaluation(self, loaded: Loaded, supervisor: Supervisor | None = None,
                   early_build: EarlyBuild | None = None) -> Evaluation:
        """The run's evaluator: a replay of the recording, else the GPU (its worker started; the
        reference's build taken from ``early_build`` where that is the same build)."""
        from tuner.run.runner import study_attrs

        cfg, space, recording = loaded.cfg, loaded.space, loaded.recording
        measure = cfg.measure if cfg else options.MeasureSettings()
        name = self.stored_name(cfg, recording.path if recording else None)
        # a recording alone: the kernel it names, else the study's name before its suffix
        shape = cfg.shape if cfg else (recording.kernel or self.run_options.study_name or _file_stem(recording.path)
                                       if recording else "")
        if recording is not None:
            from tuner.evaluate.replay import ReplayEvaluator

            recorded_on = recording.device or recording.path.name
            # (a replay's export keeps "replay of X" as its device: replayed again, it is still X's recording)
            device = {"name": recorded_on if recorded_on.startswith("replay of ") else f"replay of {recorded_on}"}
            attrs = study_attrs("replay", space, cfg.arch if cfg else "", device, "", shape,
                                {"replay_file": str(recording.path), "recording": recording.digest(),
                                 "replay_format": recording.format,
                                 "baseline_ms": cfg.baseline if cfg else {},
                                 **({"problem_size": recording.problem_size} if recording.problem_size is not None else {})})
            return Evaluation(ReplayEvaluator(recording, measure.block), attrs, name, lambda: None)
        if cfg is None:  # load() gives a study file or a recording
            raise UserError("give a study file (studies/NAME.toml)")
        from tuner.compile.nvrtc import nvrtc_version
        from tuner.contract.precision import tolerance
        from tuner.evaluate.gpu import GpuEvaluator
        from tuner.run.reference import reference_config, reference_origin

        search = self.search(cfg)
        evaluator = GpuEvaluator(space.spec, dict(space.problem), cfg.arch, measure, supervisor=supervisor,
                                 cache_dir=self.run_options.cache_dir, seed=search.seed or 0,
                                 reference=reference_config(cfg, space), compile_jobs=search.compile_ahead,
                                 tolerance=tolerance(cfg.precision, space.spec),
                                 reference_probe=self.reference_probe(cfg),
                                 reference_origin=reference_origin(cfg, space))
        if early_build is not None and isinstance(evaluator.reference, dict):
            early_build.offer(evaluator.compiler, evaluator.reference)
        device = evaluator.start()
        attrs = study_attrs("gpu", space, evaluator.arch, device, nvrtc_version(), shape,
                            {"baseline_ms": cfg.baseline, **evaluator.objective_attrs()})
        return Evaluation(evaluator, attrs, name, evaluator.close)

    def stored_name(self, cfg: StudyConfig | None, replay: str | Path | None) -> str:
        """The study's name in the storage: ``--study-name``, else the study file's [study] name, else the
        replay file's name up to its first dot; a replay's with ``.replay``, a GPU grid's with ``.grid``
        (``tuner run --workers N`` watches the study by it before a worker has created it)."""
        from tuner.store.storage import check_study_name

        given = self.run_options.study_name
        if given is not None:
            return check_study_name(given)
        base = cfg.name if cfg else _file_stem(replay) if replay else ""
        if replay:
            return check_study_name(f"{base}{REPLAY_SUFFIX}", f"replay file {replay}")
        return f"{base}{GRID_SUFFIX}" if self.command == "grid" else base

    # -- runs -----------------------------------------------------------------------------
    def run(self, supervisor: Supervisor | None = None, startup: StartupClock | None = None,
            named: Callable[[str], None] | None = None, early_build: EarlyBuild | None = None) -> tuple[dict, Any]:
        """Run the study (then confirm its top configs on a GPU): (the summary, the Runner).

        ``supervisor``: a GPU worker already starting (``tuner run`` spawns it before its imports);
        without one, a GPU run starts its own here. ``named``: called with the study's name before
        any work is done for it (``tuner grid`` checks its default CSV file there). ``early_build``: the
        reference's build begun with the process (:mod:`tuner.run.early_build`).
        """
        from tuner.run.runner import Runner
        from tuner.run.summary import nothing_ran
        from tuner.store.storage import OpeningStorage

        startup = startup or StartupClock(self.started)
        if not self.run_options.replay and supervisor is None:
            from tuner.device.supervisor import Supervisor
            from tuner.lifetime import start_helpers

            supervisor = Supervisor.from_env()
            supervisor.start_soon()
            start_helpers()  # (the compile processes' forkserver)
        if supervisor is not None:
            startup.mark("worker_spawned", supervisor.spawned)
        opening = None
        try:
            loaded = self.load()
            startup.mark("study_loaded")
            if early_build is None or not early_build.share_space(loaded.space):
                loaded.space.enumerate_soon()  # overlaps the worker's CUDA start and its inputs
            opening = OpeningStorage(self.storage)  # and so does opening the storage
            evaluation = self.evaluation(loaded, supervisor, early_build)
            if supervisor is not None and supervisor.greeted is not None:
                startup.mark("worker_greeted", supervisor.greeted)
            startup.mark("worker_ready")
            if named is not None:
                named(evaluation.name)
        except BaseException:
            if supervisor is not None:
                supervisor.discard()
            if opening is not None:
                opening.discard()
            raise
        try:
            if self.command == "grid" and loaded.recording is None:  # every config compiled up front, in parallel
                opening.open_now()
                precompile(loaded, self.search(loaded.cfg).mode, evaluation.evaluator.arch, self.run_options.cache_dir,
                           self.progress)
            runner = Runner(loaded.space, evaluation.evaluator, self.settings(loaded, evaluation), self.storage,
                            storage=opening.take())
            startup.mark("storage_and_space_ready")
            self._say_queued(runner)
            summary = runner.run()
            if loaded.recording is not None:
                summary.update(loaded.recording.best_against(loaded.space, summary.get("best")))
            if idle := nothing_ran(summary, runner.settings.trials, self.command):  # a re-run of a finished study
                self._say(idle)
            if self.command != "grid":
                summary["startup_s"] = dict(sorted(startup.marks.items(), key=lambda mark: mark[1]))
            self._warn_of_a_wrong_reference(loaded.space, evaluation, runner.study)
            self._note_inert_axes(loaded.space, evaluation, runner.study)
            self._confirm_after_run(loaded, evaluation, runner.study, summary)
            write_note(runner)
        finally:
            opening.discard()  # (nothing once the runner took the storage)
            evaluation.close()
        return summary, runner

    def _say_queued(self, runner) -> None:
        from tuner.store.url import redact

        if self.command == "worker" and runner.started_study and not os.environ.get(PARENT_ENV):
            self._say(f"study {runner.study.study_name} was not in {redact(runner.storage_url)}: this worker started it, "
                      "alone (to join a `tuner run`, give the --storage that run uses)")
        if runner.search_changed:
            self._say(runner.search_changed)
        if runner.requeued:
            self._say(f"re-queued {len(runner.requeued)} trial(s) left RUNNING by a dead process: {runner.requeued}")
        if runner.transfer:
            self._say(runner.transfer)
        if runner.start_queued:
            self._say(f"start: {len(runner.start_queued)} config(s) from [search] start queued first")
            if held := tier2_held(runner.space, runner.settings.start, runner.settings.mode):
                self._say(f"start: tiered mode measures tier 1 with tier 2 at its defaults: {held} wait for tier 2, "
                          "which tries every tier-2 value on tier 1's winner")

    def _note_inert_axes(self, space: Space, evaluation: Evaluation, study: optuna.Study) -> None:
        """A define the kernel never reads, seen among the study's latest builds (those the compile cache
        holds), said as ``tuner check --compile`` says it: its trials are spent on configs that are one."""
        from tuner.check.preflight import ConfigCheck, inert_axes, inert_note
        from tuner.evaluate.gpu import GpuEvaluator

        evaluator = evaluation.evaluator
        if not isinstance(evaluator, GpuEvaluator):
            return
        latest: dict[tuple, dict] = {}
        for t in reversed(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))):
            if len(latest) >= INERT_CHECK_CONFIGS:
                break
            if set(t.params) == set(space.axis_names):
                latest.setdefault(space.key(t.params), dict(t.params))
        configs, checks = [], []
        for params in latest.values():
            config = space.full_config(params)
            built = evaluator.compiler.cached(config)
            if built is not None and built.ok:
                configs.append(config)
                checks.append(ConfigCheck(params, evaluator.arch, built))
        for axis, compared in inert_axes(space.spec, dict(space.problem), configs, checks).items():
            if compared >= INERT_MIN_COMPARED:
                self._say(f"note: {inert_note(axis, compared)}")

    def _warn_of_a_wrong_reference(self, space: Space, evaluation: Evaluation, study: optuna.Study) -> None:
        """The reference is timed, never checked, as the yardstick of every trial: where its config,
        measured as a trial, failed its output check, say that the values are ratios to a wrong kernel."""
        reference = evaluation.evaluator.reference
        if not isinstance(reference, dict) or not all(a in reference for a in space.axis_names):
            return
        key = space.key(reference)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
            if trial.user_attrs.get("status") == "mismatch" and len(trial.params) == len(space.axis_names) \
                    and space.key(trial.params) == key:
                self._say(f"warning: the reference config fails its output check (trial {trial.number}: "
                          f"{trial.user_attrs.get('reason', 'mismatch')}): every value is a ratio to a wrong kernel's "
                          "time; name a reference that passes ([measure] reference, or the first [search] start)")
                return

    def _confirm_after_run(self, loaded: Loaded, evaluation: Evaluation, study: optuna.Study, summary: dict) -> None:
        search = self.search(loaded.cfg) if loaded.cfg else None
        if loaded.recording is None and search is not None and search.confirm_top >= 2:
            if os.environ.get(PEERS_ENV):  # a worker of `tuner run --workers N`, which confirms once all have ended
                return
            summary["confirmed"] = self._standing(study, summary.get("trials_run", 0)) or self.confirm(
                study, loaded.space, evaluation.evaluator, search)
            best_is_the_confirmed_winner(study, summary)

    def _standing(self, study: optuna.Study, trials_run: int) -> dict | None:
        """The study's last confirmation where this run measured nothing and no trial came after it:
        it stands (said), and is not measured again."""
        from tuner.evaluate.confirm import standing_confirmation

        standing = None if trials_run else standing_confirmation(study)
        if standing is None:
            return None
        self._say(f"confirmed at {standing['at']}, with no trial since: `tuner confirm` measures again")
        return _gist(standing)

    def confirm_after_workers(self, study: optuna.Study, trials_run: int) -> dict | None:
        """``tuner run --workers N`` once every worker has ended (none confirms on its own): the study's top
        configs confirmed once, on this host's GPU, as a run of one process confirms them; the record's gist
        (None: the study file turns the confirmation off, or fewer than 2 configs to compare)."""
        from tuner.study.file import load_study

        if self.study_file is None or self.search(load_study(self.study_file)).confirm_top < 2:
            return None
        return self._standing(study, trials_run) or self.confirm_stored()[1]

    def confirm(self, study: optuna.Study, space: Space, evaluator: Any, search: options.SearchSettings) -> dict | None:
        """Re-measure the study's top configs against each other on this GPU; the record's gist."""
        from tuner.evaluate.confirm import confirm_study, describe, factor_warning, top_trials

        top, rounds = search.confirm_top, search.confirm_rounds
        compared = len(top_trials(study, space, top))
        if compared < 2:
            return None  # nothing to compare
        self._say(f"confirming the top {compared} configs ({rounds} rounds, round-robin)...")
        resolution = evaluator.measure_settings.ci_target
        record = confirm_study(study, space, evaluator, evaluator.supervisor.device, top, rounds, resolution)
        if record is None:
            return None
        self._say(describe(record))
        warning = factor_warning(study.study_name, record)
        if warning:
            self._say(warning)
        return _gist(record)

    def confirm_stored(self) -> tuple[str, dict | None]:
        """``tuner confirm``: re-measure a stored study's top configs in this session: (name, record's gist)."""
        from tuner.run.probe import adopt
        from tuner.run.runner import bind_study
        from tuner.store.storage import open_storage, resolve_url, sqlite_read_only

        sqlite_read_only(resolve_url(self.storage), create=True)  # a confirmation is stored: say so before the GPU runs
        loaded = self.load()
        search = self.search(loaded.cfg)
        if search.confirm_top < 2:  # (0: the study file turns the confirmation after each run off)
            raise UserError("a confirmation compares 2 configs or more, and the study file's confirm_top is 0: give --top N")
        evaluation = self.evaluation(Loaded(loaded.cfg, loaded.space, None))
        try:
            storage = open_storage(self.storage, create=False)
            name = evaluation.name
            if self.run_options.study_name is None:  # its GPU run, else its `tuner grid` (as `tuner best` finds it)
                names = optuna.get_all_study_names(storage)
                name = next((n for n in (name, name + GRID_SUFFIX) if n in names), name)
            try:
                study = optuna.load_study(study_name=name, storage=storage)
            except KeyError:
                raise UserError(f"no study {name!r} in this storage: run it first "
                                f"(tuner run {self.study_file})") from None
            adopt(study, evaluation.evaluator, evaluation.attrs)
            bind_study(study, evaluation.attrs, self.run_options.accept_mismatch)
            return name, self.confirm(study, loaded.space, evaluation.evaluator, search)
        finally:
            evaluation.close()


    def launch_profiled(self, params: dict[str, Any]) -> Measurement:
        """Inside Nsight Compute (:mod:`tuner.run.profile`): ``params`` built, checked and launched once in
        the profiler's range; the measurement is its output check's."""
        from tuner.evaluate.gpu import GpuEvaluator

        loaded = self.load()
        reason = loaded.space.check(params)
        if reason is not None:
            raise UserError(f"{', '.join(f'{k}={v}' for k, v in params.items())} is not a valid config of "
                            f"{self.study_file}: {reason}")
        evaluation = self.evaluation(Loaded(loaded.cfg, loaded.space, None))
        try:
            assert isinstance(evaluation.evaluator, GpuEvaluator)  # (a study file, no recording: the GPU's)
            return evaluation.evaluator.profile(loaded.space.full_config(params))
        finally:
            evaluation.close()

    def reference_probe(self, cfg: StudyConfig) -> int | None:
        """None: the study names its reference; else how many first configs this process measures to
        choose one (:mod:`tuner.run.probe`; 0 where several processes share the study's first trials)."""
        if cfg.measure.reference is not None or cfg.search.start:
            return None
        return cfg.measure.reference_probe if self.command in ("run", "grid") else 0


def tier2_held(space: Space, start: list[dict], mode: str) -> str:
    """The tier-2 values of the start configs that tier 1 holds at their defaults, in words ("" none)."""
    if mode != "tiered":
        return ""
    defaults = space.defaults()
    held = {f"{a}={v}" for config in start for a, v in config.items() if a in space.tier2 and v != defaults[a]}
    return ", ".join(sorted(held))


def _file_stem(path: str | Path) -> str:
    """A replay file's name up to its first dot (``pnpoly_RTX_3090.json.gz``: ``pnpoly_RTX_3090``)."""
    return Path(path).name.split(".")[0]


def precompile(loaded: Loaded, mode: str, arch: str, cache_dir: Path | None, shown: Shown) -> None:
    """Compile every valid config the grid measures first into the cache, in parallel (``tuner grid``;
    tiered: tier 1's, as tier 2's depend on its winner and compile as they are measured)."""
    from tuner.compile.build import CompileLimits
    from tuner.compile.nvrtc import compile_many
    from tuner.progress import progress

    cfg, space = loaded.cfg, loaded.space
    assert cfg is not None  # a GPU grid has a study file
    configs = space.tier1_candidates() if mode == "tiered" else space.valid
    full = [space.full_config(p) for p in configs]
    with progress(len(full), "compiling", "config", shown) as tick:
        compile_many(space.spec, full, space.problem, arch, cache_dir, CompileLimits.of(cfg.measure), None, tick)


def write_note(runner) -> None:
    """The study's Markdown note for optuna-dashboard (problem, device, best flags, how to reproduce)."""
    from tuner.store.notes import write_study_note
    from tuner.store.url import redact

    write_study_note(runner.study, redact(runner.storage_url))


def open_study(storage_url: str | None, study_file: str | Path | None = None, name: str | None = None,
               run_from: bool = True) -> optuna.Study:
    """A stored study by ``name``, or the one run from ``study_file``: stored under its name by a
    GPU run, ``NAME.grid`` by ``tuner grid``, ``NAME.replay`` by a replay (the first found).
    ``run_from``: refuse a study file the study was not run from (its defines, its problem)."""
    from tuner.store.storage import check_study_name, open_storage, resolve_url, stored_as
    from tuner.store.url import redact

    if name is not None:
        check_study_name(name, "--study")
    storage = open_storage(storage_url, create=False)
    names = optuna.get_all_study_names(storage)
    where = redact(resolve_url(storage_url))
    if name is not None:  # that study exactly
        found, wanted = (name if name in names else None), [name]
    elif study_file:  # its GPU run, grid or replay
        from tuner.study.file import load_study

        base = load_study(study_file).name
        found, wanted = stored_as(base, names), [base, base + GRID_SUFFIX, base + REPLAY_SUFFIX]
    elif len(names) == 1:  # the storage's only study, as a first replay leaves it
        found, wanted = names[0], names
    else:
        raise UserError(f"{f'{len(names)} studies' if names else 'no studies'} in {where}"
                        f"{': ' + ', '.join(names) if names else ''}; give a study file or --study NAME")
    if found is None:
        raise UserError(f"no study {' or '.join(map(repr, wanted))} in {where}; studies there: {', '.join(names) or 'none'}")
    study = optuna.load_study(study_name=found, storage=storage)
    if study_file and run_from:
        _check_run_from(study, study_file)
    return study


def _check_run_from(study: optuna.Study, study_file: str | Path) -> None:
    """Refuse a study file that is not the one ``study`` was run from (its defines, or a problem size it
    sets otherwise): what is read out of the study (``tuner best``'s flags) would be another kernel's."""
    from tuner.study.file import load_study

    cfg = load_study(study_file)
    attrs = study.user_attrs
    stored_axes, stored_problem = attrs.get("axes"), attrs.get("problem")
    differs = []
    if isinstance(stored_axes, list) and set(stored_axes) != set(cfg.axes):
        differs.append(f"it searched {', '.join(map(str, stored_axes))}, the file {', '.join(cfg.axes)}")
    if isinstance(stored_problem, dict):
        differs += [f"{key}={stored_problem[key]} there, {value} in the file" for key, value in cfg.problem.items()
                    if key in stored_problem and stored_problem[key] != value]
    if differs:
        raise UserError(f"study {study.study_name!r} was not run from {study_file} ({'; '.join(differs)}): give the "
                        "study file it was run from, or --study NAME alone")


def best_is_the_confirmed_winner(study: optuna.Study, summary: dict) -> None:
    """The summary's best is its confirmation's winner, where one was confirmed (as `tuner best` names it)."""
    from tuner.run.summary import best_entry

    winner = (summary.get("confirmed") or {}).get("winner")
    if winner is not None:
        summary["best"] = best_entry(study, study.trials[winner])


def _gist(record: dict) -> dict:
    """What a run's summary keeps of a confirmation record."""
    from tuner.evaluate.confirm import tied_with_winner

    return {"winner": record["winner"], "tied": tied_with_winner(record), "standings": record["standings"],
            "session_factor": record.get("session_factor"), "resolution": record.get("resolution")}
