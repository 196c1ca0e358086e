"""``tuner``: the command line.

    tuner run STUDY.toml [--storage URL] [--replay FILE] [--json]   Bayesian search
    tuner grid STUDY.toml [--csv FILE]                              every valid config, as a table and a CSV
    tuner check STUDY.toml... [--compile [--all] [--arch A]] [--json]  space summary; the preflight without a GPU
    tuner best STUDY.toml|--study NAME [--header FILE] [--json]     the winner's -D flags
    tuner status [--storage URL] [--json]                           studies in a storage
    tuner export STUDY.toml|--study NAME -o FILE.csv                trials to CSV
    tuner worker STUDY.toml --storage URL                           join a study from any host
    tuner report / tuner dashboard                                  Plotly reports, optuna-dashboard

Bad input exits with code 2 and one line that says what to fix.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
import typing
import warnings
from pathlib import Path

import optuna

from tuner import __version__, options
from tuner.errors import UserError, as_user_error, interrupted
from tuner.storage import DEFAULT_URL

if typing.TYPE_CHECKING:
    from tuner.supervisor import Supervisor

#: entry points in this group add subcommands: each is called with the subparsers object
#: (views such as ``dashboards`` register ``report`` and ``dashboard`` this way)
COMMANDS_GROUP = "tuner.commands"


def main(argv: list[str] | None = None, worker: Supervisor | None = None) -> int:
    """``worker``: a GPU worker already starting for this command (:mod:`tuner.launch`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.gpu_worker = worker
    # tuner reports every trial's outcome itself; Optuna's per-trial warnings would repeat it
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    try:
        args.given = options.from_flags(args, args.command)
        if args.command == "worker" and os.environ.get(options.ENV):
            args.given = {**options.decode(os.environ[options.ENV]), **args.given}
        args.run = options.run_options(args.given)
        return args.func(args) or 0
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:  # `tuner check ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if interrupted(exc):  # something broke while Ctrl-C unwound the run
            return _interrupted()
        error = as_user_error(exc)
        if error is None:  # a bug: the traceback is for us
            raise
        _error(str(error))
        return error.exit_code


def _error(message: str) -> None:
    """The one line of a failed command, passwords hidden."""
    from tuner.storage import redact

    print(f"tuner: error: {' '.join(redact(message).split())}", file=sys.stderr)


def _interrupted() -> int:
    print("tuner: interrupted; finished trials are stored, run the same command to resume", file=sys.stderr)
    return 130


class _Parser(argparse.ArgumentParser):
    """argparse with the project's one-line errors (``tuner: error: ...``, exit code 2); the
    usage stays a ``--help`` away."""

    def error(self, message: str) -> typing.NoReturn:
        from tuner.storage import redact

        print(f"tuner: error: {self.prog}: {' '.join(redact(message).split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tuner", description="Bayesian autotuning of CUDA kernel defines.")
    parser.add_argument("--version", action="version", version=f"tuner {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def storage_arg(p):
        p.add_argument("--storage", help=f"sqlite:///FILE.db (default {DEFAULT_URL}), postgresql+psycopg://..., or FILE.log")

    run = sub.add_parser("run", help="search a study (Bayesian by default)")
    run.add_argument("study_file", nargs="?", help="studies/NAME.toml (optional with a Kernel Tuner --replay file)")
    storage_arg(run)
    options.add_flags(run, "run")
    run.add_argument("--json", action="store_true", help="end with one JSON line for scripts")
    run.set_defaults(func=cmd_run)

    worker = sub.add_parser("worker", help="join a shared study as one more worker (one GPU)",
                            description=f"Settings not given as flags come from ${options.ENV} (JSON), "
                                        "which `tuner run --workers N` sets for its workers.")
    worker.add_argument("study_file", nargs="?", help="studies/NAME.toml (optional with a Kernel Tuner --replay file)")
    storage_arg(worker)
    options.add_flags(worker, "worker")
    worker.add_argument("--json", action="store_true")
    worker.set_defaults(func=cmd_worker)

    grid = sub.add_parser("grid", help="evaluate every valid config; print the table and a CSV")
    grid.add_argument("study_file")
    storage_arg(grid)
    options.add_flags(grid, "grid")
    grid.add_argument("--csv", type=Path, help="where to write the table as CSV (default NAME_grid.csv)")
    grid.add_argument("--json", action="store_true")
    grid.set_defaults(func=cmd_grid)

    check = sub.add_parser("check", help="count valid configs; with --compile, the preflight: compile and check them (no GPU)",
                           description="Exit codes: 0 all checked configs pass (or are rejected by the constraint "
                                       "model or compile limits), 1 the preflight found a config that would fail on "
                                       "a GPU, 2 bad input.")
    check.add_argument("study_file", nargs="+")
    check.add_argument("--compile", action="store_true",
                       help="compile the valid configs and check each CUBIN against its launch and the target's limits")
    check.add_argument("--all", action="store_true", help="with --compile: every valid config, not a stratified sample")
    check.add_argument("--arch", help="with --compile: the target of an arch = \"native\" study (default: every target of the spec)")
    options.add_flags(check, "check")
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=cmd_check)

    confirm = sub.add_parser("confirm", help="re-measure a study's best configs against each other on this GPU")
    confirm.add_argument("study_file")
    storage_arg(confirm)
    options.add_flags(confirm, "confirm")
    confirm.add_argument("--json", action="store_true")
    confirm.set_defaults(func=cmd_confirm)

    best = sub.add_parser("best", help="print the best config's -D flags")
    best.add_argument("study_file", nargs="?")
    best.add_argument("--study", help="study name in the storage")
    storage_arg(best)
    best.add_argument("--header", type=Path, help="write a header of #defines")
    best.add_argument("--json", action="store_true")
    best.set_defaults(func=cmd_best)

    status = sub.add_parser("status", help="studies in a storage: trials per status, best, device")
    storage_arg(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    export = sub.add_parser("export", help="trials to CSV")
    export.add_argument("study_file", nargs="?")
    export.add_argument("--study", help="study name in the storage")
    storage_arg(export)
    export.add_argument("-o", "--output", type=Path, required=True,
                        help="FILE.csv: the results table; FILE.json: a Kernel Tuner cache")
    export.set_defaults(func=cmd_export)

    for plugin in importlib.metadata.entry_points(group=COMMANDS_GROUP):
        plugin.load()(sub)
    return parser


# -- building blocks ------------------------------------------------------------------------


def _load(args):
    """Study file (or a Kernel Tuner replay file alone) -> (config or None, space, recording or None)."""
    from tuner.replay import load_recording, recording_space
    from tuner.space import Space
    from tuner.spec import load_spec
    from tuner.study_file import load_study
    from tuner.targets import check_supported

    recording = load_recording(args.run.replay) if args.run.replay else None
    if not args.study_file:
        if recording is None:
            raise UserError("give a study file (studies/NAME.toml), or --replay FILE with a Kernel Tuner cache")
        if recording.format == "csv":
            raise UserError(f"replay file {recording.path} is our CSV: give the study file it was recorded from too")
        return None, recording_space(recording), recording
    cfg = load_study(args.study_file)
    spec = load_spec(cfg.kernel)
    check_supported(cfg.arch, spec, str(cfg.path))
    space = Space.from_study(cfg, spec)
    if recording is not None:
        missing = [a for a in space.axes if a not in recording.axes]
        if missing:
            raise UserError(f"replay file {recording.path} has no column for {', '.join(missing)}: record it from this study")
    return cfg, space, recording


def _search(args, cfg) -> options.SearchSettings:
    """The study file's [search] settings with the flags given on top."""
    search = options.apply(cfg.search if cfg else options.SearchSettings(), args.given)
    if args.func is cmd_grid:  # every valid config once, in order, measured to the end
        search = options.apply(search, {"sampler": "grid", "mode": args.given.get("mode", "joint"), "trials": None,
                                        "timeout_min": None, "seed": 0, "pruner": False})
    return search


def _settings(args, cfg, space, attrs, name):
    from tuner.pipeline import process_started
    from tuner.runner import RunSettings
    from tuner.scale import PEERS_ENV

    search = _search(args, cfg)
    if args.func is cmd_grid:
        search.trials = len(space.valid)
    return RunSettings(
        **vars(search),
        study_name=name,
        accept_mismatch=args.run.accept_mismatch,
        progress=not args.json and sys.stderr.isatty(),
        artifact_dir=str(args.run.artifacts) if args.run.artifacts else None,
        warm_start=args.run.warm_start,
        warm_start_top=args.run.warm_start_top,
        study_attrs=attrs,
        started=process_started(),
        peers=int(os.environ.get(PEERS_ENV, "1")) if args.func is cmd_worker else 1,
    )


def _evaluator(args, cfg, space, recording, supervisor=None):
    """(evaluator, study attrs, study name, closer)."""
    from tuner.runner import study_attrs

    measure = cfg.measure if cfg else options.MeasureSettings()
    from tuner.storage import check_study_name

    if args.run.study_name is not None:
        check_study_name(args.run.study_name)
    base_name = args.run.study_name or (cfg.name if cfg else recording.path.name.split(".")[0])
    shape = cfg.shape if cfg else (recording.kernel or base_name)
    if recording is not None:
        from tuner.replay import ReplayEvaluator

        name = args.run.study_name or f"{base_name}.replay"
        device = {"name": f"replay of {recording.device or recording.path.name}"}
        attrs = study_attrs("replay", space, cfg.arch if cfg else "", device, "", shape,
                            {"replay_file": str(recording.path), "replay_format": recording.format,
                             "baseline_ms": cfg.baseline if cfg else {}})
        return ReplayEvaluator(recording, measure.block), attrs, name, lambda: None
    from tuner.compile import nvrtc_version
    from tuner.gpu import GpuEvaluator

    evaluator = GpuEvaluator(space.spec, dict(space.problem), cfg.arch, measure, supervisor=supervisor,
                             cache_dir=args.run.cache_dir,
                             seed=_search(args, cfg).seed or 0, reference=_reference(cfg, space),
                             compile_jobs=_search(args, cfg).compile_ahead)
    device = evaluator.start()
    attrs = study_attrs("gpu", space, evaluator.arch, device, nvrtc_version(), shape,
                        {"baseline_ms": cfg.baseline, **evaluator.objective_attrs()})
    return evaluator, attrs, base_name, evaluator.close


def _reference(cfg, space):
    """The config every trial is paired with: [measure] reference, else the first [search] start, else defaults."""
    from tuner.gpu import BASELINE
    from tuner.warm_start import start_params

    chosen = cfg.measure.reference
    if chosen == BASELINE:
        return BASELINE
    if chosen is not None:
        return space.full_config(start_params(space, [chosen], what="[measure] reference")[0])
    if cfg.search.start:
        return space.full_config(start_params(space, cfg.search.start[:1])[0])
    # the spec's defaults where the model accepts them, else the first valid config: never an invalid one
    defaults = space.defaults()
    if space.check(defaults) is None:
        return space.full_config(defaults)  # no enumeration needed: the worker's start overlaps it
    space.require_valid()
    return space.full_config(space.valid[0])


def _check_output(path: Path | None, flag: str) -> None:
    """Refuse an output path that cannot be written, before any work is done for it."""
    if path is None:
        return
    if path.is_dir():
        raise UserError(f"{flag} {path} is a folder: give a file name")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise UserError(f"{flag} {path} is not writable: give a path you can write")
        return
    folder = path.parent
    while not folder.exists():  # the folders that do not exist yet are created on writing
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{flag} {path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: folder {folder} is not writable; give a path you can write")


def _write_note(runner) -> None:
    """The study's Markdown note for optuna-dashboard (problem, device, best flags, how to reproduce)."""
    from tuner.notes import write_study_note
    from tuner.storage import redact

    write_study_note(runner.study, redact(runner.storage_url))


def _print_summary(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    statuses = ", ".join(f"{k}={v}" for k, v in sorted(summary["statuses"].items()))
    print(f"study {summary['study']} in {summary['storage']}: {summary['trials']} trials ({statuses})")
    best = summary.get("best")
    if best and "ratio" in best:
        print(f"best: {best['ratio']:.4f} x the reference, {best['ms']:.4g} ms (trial {best['trial']})  {best['flags']}")
    elif best:
        print(f"best: {best['ms']:.4g} ms (trial {best['trial']})  {best['flags']}")
    else:
        print("best: none yet (no trial completed)")
    if summary.get("trials_run"):
        rate = summary.get("trials_per_s")
        print(f"this run: {summary['trials_run']} trials in {summary['run_s']:.1f} s, first result after "
              f"{summary['first_trial_s']:.2f} s" + (f", {rate:.2f} trials/s sustained" if rate else ""))


# -- commands ---------------------------------------------------------------------------------


def cmd_run(args) -> int:
    from tuner.runner import Runner
    from tuner.storage import check_workers

    if args.run.workers > 1:
        check_workers(args.storage, args.run.workers)
        from tuner.scale import run_workers

        return run_workers(args)
    startup = StartupClock()
    startup.mark("command_started")  # the command line's imports are done
    supervisor = None
    if not args.run.replay:  # the worker's CUDA start-up overlaps loading the study
        supervisor = args.gpu_worker  # already spawned by tuner.launch, before those imports
        if supervisor is None:
            from tuner.supervisor import Supervisor

            supervisor = Supervisor.from_env()
            supervisor.start_soon()
        startup.mark("worker_spawned", supervisor.spawned)
    try:
        cfg, space, recording = _load(args)
        startup.mark("study_loaded")
        space.enumerate_soon()  # overlaps the worker's CUDA start and its inputs
        evaluator, attrs, name, close = _evaluator(args, cfg, space, recording, supervisor)
        startup.mark("worker_ready")
    except BaseException:
        if supervisor is not None:
            supervisor.discard()
        raise
    try:
        runner = Runner(space, evaluator, _settings(args, cfg, space, attrs, name), args.storage)
        startup.mark("storage_and_space_ready")
        if runner.requeued and not args.json:
            print(f"re-queued {len(runner.requeued)} trial(s) left RUNNING by a dead process: {runner.requeued}", file=sys.stderr)
        if runner.warm_queued and not args.json:
            print(f"warm start: {len(runner.warm_queued)} config(s) from {', '.join(args.run.warm_start)} queued first", file=sys.stderr)
        if runner.start_queued and not args.json:
            print(f"start: {len(runner.start_queued)} config(s) from [search] start queued first", file=sys.stderr)
        summary = runner.run()
        summary["startup_s"] = dict(sorted(startup.marks.items(), key=lambda mark: mark[1]))
        _confirm_after_run(args, cfg, space, evaluator, runner.study, recording, summary)
        _write_note(runner)
    finally:
        close()
    _print_summary(summary, args.json)
    return 0


class StartupClock:
    """Seconds from the process's start to each step of a run's start (``--json``: ``startup_s``),
    beside ``first_trial_s``: where a slow start goes."""

    def __init__(self) -> None:
        from tuner.pipeline import process_started

        self.started = process_started()
        self.marks: dict[str, float] = {}

    def mark(self, step: str, at: float | None = None) -> None:
        """``step`` happened now, or at ``at`` (``time.monotonic()``)."""
        self.marks[step] = round((time.monotonic() if at is None else at) - self.started, 3)


def _confirm_after_run(args, cfg, space, evaluator, study, recording, summary: dict) -> None:
    search = _search(args, cfg) if cfg else None
    if recording is None and search is not None and search.confirm_top >= 2:
        summary["confirmed"] = _confirm(study, space, evaluator, search.confirm_top, search.confirm_rounds, args.json)


def _confirm(study, space, evaluator, top: int, rounds: int, quiet: bool) -> dict | None:
    from tuner.confirm import confirm_study, describe

    if not quiet:
        print(f"confirming the top {top} configs ({rounds} rounds, round-robin)...", file=sys.stderr)
    record = confirm_study(study, space, evaluator, evaluator.supervisor.device, top, rounds)
    if record is None:
        return None
    if not quiet:
        print(describe(record), file=sys.stderr)
    return {"winner": record["winner"], "tied": record["tied"], "standings": record["standings"]}


def cmd_confirm(args) -> int:
    """Re-measure a stored study's top configs in this session (a later one, or another GPU of the model)."""
    from tuner.runner import bind_study
    from tuner.storage import open_storage

    cfg, space, _ = _load(args)
    search = _search(args, cfg)
    if search.confirm_top < 2:
        raise UserError("--top must be >= 2: a confirmation compares configs")
    evaluator, attrs, name, close = _evaluator(args, cfg, space, None)
    try:
        try:
            study = optuna.load_study(study_name=name, storage=open_storage(args.storage, create=False))
        except KeyError:
            raise UserError(f"no study {name!r} in this storage: run it first (tuner run {args.study_file})") from None
        bind_study(study, attrs, args.run.accept_mismatch)
        confirmed = _confirm(study, space, evaluator, search.confirm_top, search.confirm_rounds, args.json)
    finally:
        close()
    if confirmed is None:
        raise UserError(f"study {name!r} has fewer than 2 completed configs: nothing to confirm yet")
    if args.json:
        print(json.dumps({"study": name, **confirmed}))
    else:
        for row in confirmed["standings"]:
            print(f"trial {row['trial']:>5}  x{row['to_winner']:.4f} of the winner "
                  f"[{row['to_winner_ci'][0]:.4f}, {row['to_winner_ci'][1]:.4f}]  {'TIED' if row['tied'] else ''}")
    return 0


def cmd_worker(args) -> int:
    from tuner.scale import PARENT_ENV

    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit():  # a worker of `tuner run --workers N`: it stops when that run dies
        import signal

        from tuner.lifetime import die_with_parent

        signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: trials in flight are failed and queued again
        die_with_parent(int(parent), signal.SIGTERM)
    return cmd_run(args)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_grid(args) -> int:
    import datetime as dt

    from tuner.results import ranked, trials_frame, write_table
    from tuner.runner import Runner
    from tuner.table import seed_table

    _check_output(args.csv, "--csv")
    cfg, space, recording = _load(args)
    evaluator, attrs, name, close = _evaluator(args, cfg, space, recording)
    if args.run.study_name is None and recording is None:
        name = f"{name}.grid"
    try:
        if recording is None:  # compile every config up front, in parallel, into the cache
            _precompile(cfg, space, args, evaluator.arch)
        runner = Runner(space, evaluator, _settings(args, cfg, space, attrs, name), args.storage)
        summary = runner.run()
        _confirm_after_run(args, cfg, space, evaluator, runner.study, recording, summary)
        _write_note(runner)
    finally:
        close()
    table = ranked(trials_frame(runner.study.get_trials(deepcopy=False), space.axis_names))
    csv_path = args.csv or Path(f"{name}.csv")
    write_table(table, csv_path, device=attrs.get("device_name", ""), date=dt.date.today().isoformat())
    if args.json:
        _print_summary(summary, True)
    else:
        print(seed_table(table, space.axis_names))
        print(f"\n{len(table)} configs; CSV written to {csv_path}")
        _print_summary(summary, False)
    return 0


def _precompile(cfg, space, args, arch: str) -> None:
    from tuner.compile import CompileLimits, compile_many

    progress = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(space.valid), desc="compiling", unit="config", file=sys.stderr)
        progress = lambda: bar.update(1)  # noqa: E731
    full = [space.full_config(p) for p in space.valid]
    compile_many(space.spec, full, space.problem, arch, args.run.cache_dir,
                 CompileLimits(cfg.measure.max_regs, cfg.measure.reject_spills), None, progress)


def cmd_check(args) -> int:
    return max(_check_study(args, Path(path)) for path in args.study_file)


def _check_study(args, path: Path) -> int:
    from tuner.compile import CompileLimits
    from tuner.preflight import run_preflight
    from tuner.space import Space
    from tuner.spec import load_spec, user_code
    from tuner.study_file import load_study
    from tuner.table import SHORT, render
    from tuner.targets import check_supported, check_targets

    cfg = load_study(path)
    spec = load_spec(cfg.kernel)
    check_supported(cfg.arch, spec, str(path))
    space = Space.from_study(cfg, spec)
    summary = space.summary()
    configs: list[dict[str, typing.Any]] = []
    preflight = None
    if args.compile:
        targets = check_targets(cfg.arch, spec, str(path), args.arch)
        progress = None
        if not args.json and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(desc="compiling", unit="config", file=sys.stderr)
            progress = lambda: bar.update(1)  # noqa: E731
        preflight = run_preflight(spec, space.problem, space.valid, space.full_config, targets,
                                  CompileLimits(cfg.measure.max_regs, cfg.measure.reject_spills), every=args.all,
                                  study=cfg.name, cache_dir=args.run.cache_dir, jobs=args.run.jobs, progress=progress)
        skipped = [a for a in spec.archs if a not in targets] if cfg.arch == "native" and not args.arch else []
        if skipped:
            preflight.notes.append(f"not built for {', '.join(skipped)}: this NVRTC cannot compile for them")
        for checked in preflight.checked:
            r = checked.compiled
            with user_code(spec.path, "derive()"):
                smem = spec.derive(space.full_config(checked.params), space.problem).get("smem_bytes", r.smem_static)
            configs.append({"params": checked.params, "arch": checked.arch, "regs": r.regs, "spills": r.spills,
                            "smem_bytes": smem, "status": r.status, "reason": r.reason, "compile_s": round(r.compile_s, 3),
                            "preflight": checked.status, "problems": checked.reasons})
        compiled: dict[str, int] = {}
        for c in configs:
            compiled[c["status"]] = compiled.get(c["status"], 0) + 1
        summary["compiled"] = compiled
        summary["preflight"] = preflight.to_json()
    code = preflight.exit_code if preflight else 0
    if args.json:
        print(json.dumps({**summary, "study": cfg.name, "configs": configs}))
        return code
    print(f"{cfg.name}: {summary['total']} configs, {summary['valid']} valid, {summary['total'] - summary['valid']} invalid")
    for kind, count in space.invalid.most_common():
        print(f"  invalid x{count}: {space.invalid_examples[kind]}" + ("  (and like it)" if count > 1 else ""))
    if preflight is not None:
        axes = space.axis_names
        several = len({c["arch"] for c in configs}) > 1
        headers = [SHORT.get(a, a) for a in axes] + (["ARCH"] if several else []) + ["REGS", "SPILL", "SMEM_KB", "STATUS"]
        order = sorted(configs, key=lambda c: (c["preflight"] == "passed", c["status"] != "ok", [str(c["params"][a]) for a in axes]))
        print(render(headers, [[c["params"][a] for a in axes] + ([c["arch"]] if several else []) + [
            c["regs"], c["spills"], round(c["smem_bytes"] / 1024, 1) if c["smem_bytes"] is not None else None,
            "ok" if c["preflight"] == "passed" else f"{c['status']}: {c['reason'][:60]}" if c["preflight"] == "rejected"
            else f"failed: {c['problems'][0][:80]}"] for c in order]))
        print("compiled: " + ", ".join(f"{k}={v}" for k, v in sorted(summary["compiled"].items())))
        for note in preflight.notes:
            print(f"note: {note}")
        counts = preflight.counts()
        print(f"preflight: {'passed' if preflight.ok else 'FAILED'}: " + ", ".join(f"{k}={counts.get(k, 0)}" for k in
              ("passed", "rejected", "failed")) + f" ({preflight.seconds:.1f} s)")
        for count, reason in preflight.by_reason():
            print(f"  x{count}: {reason}")
    return code


def _open_study(args):
    from tuner.storage import check_study_name, open_storage, redact, resolve_url

    name = args.study
    if name is None:
        if not args.study_file:
            raise UserError("give a study file or --study NAME")
        from tuner.study_file import load_study

        name = load_study(args.study_file).name
    else:
        check_study_name(name, "--study")
    storage = open_storage(args.storage, create=False)
    try:
        return optuna.load_study(study_name=name, storage=storage), storage
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise UserError(
            f"no study {name!r} in {redact(resolve_url(args.storage))}; studies there: {', '.join(names) or 'none'}"
        ) from None


def cmd_best(args) -> int:
    from tuner.confirm import confirmed_best, describe

    _check_output(args.header, "--header")
    study, _ = _open_study(args)
    best, confirmation = confirmed_best(study)
    flags = best.user_attrs.get("flags", "")
    metric = (study.metric_names or ["ms"])[0]
    if args.header:
        lines = [f"// Best configuration of study {study.study_name}: {best.value:.4g} {metric} (trial {best.number})",
                 f"// device: {study.user_attrs.get('device_name', '')}; kernel source {study.user_attrs.get('source_hash', '')}",
                 "#pragma once"]
        for flag in flags.split():
            name, _, value = flag[2:].partition("=")
            lines += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
        args.header.write_text("\n".join(lines) + "\n")
    tied = confirmation["tied"] if confirmation else None
    if args.json:
        print(json.dumps({"study": study.study_name, metric: best.value, "params": best.params, "flags": flags,
                          "trial": best.number, "confirmed": confirmation is not None, "tied": tied}))
    else:
        print(flags)
        if confirmation:  # stdout stays the flags alone, for $(tuner best ...)
            print(describe(confirmation), file=sys.stderr)
    return 0


def cmd_status(args) -> int:
    from tuner.runner import summarize
    from tuner.storage import open_storage, redact, resolve_url
    from tuner.table import render

    storage = open_storage(args.storage, create=False)
    rows = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        summary = summarize(study, resolve_url(args.storage))
        trials = study.get_trials(deepcopy=False)
        ends = [end for t in trials if (end := t.datetime_complete or t.datetime_start) is not None]
        summary.update(
            device=study.user_attrs.get("device_name", ""),
            kind=study.user_attrs.get("kind", ""),
            last_update=max(ends).isoformat(timespec="seconds") if ends else None,
        )
        rows.append(summary)
    if args.json:
        print(json.dumps({"storage": redact(resolve_url(args.storage)), "studies": rows}))
        return 0
    if not rows:
        print(f"no studies in {redact(resolve_url(args.storage))}")
        return 0
    print(render(
        ["STUDY", "KIND", "DEVICE", "TRIALS", "STATUSES", "BEST_MS", "LAST_UPDATE"],
        [[r["study"], r["kind"], r["device"], r["trials"],
          " ".join(f"{k}={v}" for k, v in sorted(r["statuses"].items())),
          r["best"]["ms"] if r["best"] else None, r["last_update"]] for r in rows],
    ))
    return 0


def cmd_export(args) -> int:
    from tuner.results import trials_frame, write_table

    _check_output(args.output, "--output")
    study, _ = _open_study(args)
    axes = study.user_attrs.get("axes")
    trials = study.get_trials(deepcopy=False)
    device = study.user_attrs.get("device_name", "")
    if args.output.suffix == ".json":  # the Kernel Tuner cache format, which replay also reads
        from tuner.results import kernel_tuner_cache

        names = axes if isinstance(axes, list) else list(dict.fromkeys(n for t in trials for n in t.params))
        problem = study.user_attrs.get("problem")
        cache = kernel_tuner_cache(trials, names, device=device, kernel=str(study.user_attrs.get("kernel", "")),
                                   problem=problem if isinstance(problem, dict) else {})
        args.output.write_text(json.dumps(cache, indent=1))
        print(f"{len(cache['cache'])} configs of {study.study_name} written to {args.output} (Kernel Tuner cache)")
        return 0
    frame = trials_frame(trials, axes if isinstance(axes, list) else None)
    write_table(frame, args.output, device=device)
    print(f"{len(frame)} trials of {study.study_name} written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
