"""``tuner``: the command line.

    tuner run STUDY.toml [--storage URL] [--replay FILE] [--json]   Bayesian search
    tuner grid STUDY.toml [--csv FILE]                              every valid config, as a table and a CSV
    tuner check STUDY.toml... [--compile [--all] [--arch A]] [--json]  space summary; the preflight without a GPU
    tuner check STUDY.toml --host-dry-run                           a GPU not at hand: its launches into a stub here
    tuner best STUDY.toml|--study NAME [--header FILE] [--json]     the winner's -D flags
    tuner profile STUDY.toml [--trial N]... [-o FILE.ncu-rep]      the winner (or trials) under Nsight Compute (ncu)
    tuner status [--storage URL] [--json]                           studies in a storage
    tuner export STUDY.toml|--study NAME -o FILE.csv                trials to CSV
    tuner worker STUDY.toml --storage URL                           join a study from any host
    tuner report / tuner dashboard                                  Plotly reports, optuna-dashboard

Bad input exits with code 2 and one line that says what to fix.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import logging
import os
import sys
import threading
import typing
import warnings
from pathlib import Path

import optuna

from tuner import __version__
from tuner.errors import UserError, as_user_error, check_output_path, interrupted
from tuner.store.storage import DEFAULT_URL
from tuner.study import options

if typing.TYPE_CHECKING:
    from tuner.check.preflight import Preflight
    from tuner.device.supervisor import Supervisor
    from tuner.run.early_build import EarlyBuild
    from tuner.run.session import Session
    from tuner.search.space import Space
    from tuner.study.file import StudyConfig

#: commands that store trials or a confirmation: SIGTERM stops them as Ctrl-C does (a view just ends)
STUDY_COMMANDS = ("run", "grid", "worker", "confirm", "profile")
#: entry points in this group add subcommands: each is called with the subparsers object
#: (views such as ``dashboards`` register ``report`` and ``dashboard`` this way)
COMMANDS_GROUP = "tuner.commands"


def main(argv: list[str] | None = None, worker: Supervisor | None = None, early_build: EarlyBuild | None = None) -> int:
    """``worker``: a GPU worker already starting for this command, ``early_build``: its reference's
    build under way (:mod:`tuner.cli.launch`)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.gpu_worker, args.early_build = worker, early_build
    if args.command in STUDY_COMMANDS and threading.current_thread() is threading.main_thread():
        from tuner.lifetime import stop_on_sigterm

        stop_on_sigterm()
    # tuner reports every trial's outcome itself; Optuna's per-trial warnings would repeat it
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    _show_storage_logs()
    try:
        args.given = options.from_flags(args, args.command)
        if args.command == "worker" and os.environ.get(options.ENV):
            args.given = {**options.decode(os.environ[options.ENV]), **args.given}
        args.run = options.run_options(args.given)
        return args.func(args) or 0
    except KeyboardInterrupt:
        return _interrupted(args.command)
    except BrokenPipeError:  # `tuner check ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if interrupted(exc):  # something broke while Ctrl-C unwound the run
            return _interrupted(args.command)
        error = as_user_error(exc)
        if error is None:  # a bug: the traceback is for us
            raise
        _error(str(error))
        return error.exit_code


def _error(message: str) -> None:
    """The one line of a failed command, passwords hidden."""
    from tuner.store.url import redact
    from tuner.table import printable

    print(f"tuner: error: {printable(' '.join(redact(message).split()))}", file=sys.stderr)


class _StorageLog(logging.Handler):
    """SQLAlchemy's own records (a cursor it could not close, a connection it could not reset) on
    stderr, as Python prints them without a handler, but with passwords hidden and none while
    Ctrl-C unwinds the run: a Ctrl-C in an ORM query's fetch makes SQLAlchemy invalidate (close) the
    connection, then close the result's cursor on it on the way out, which fails and is logged with
    both tracebacks; the run reports the interruption itself."""

    def emit(self, record: logging.LogRecord) -> None:
        from tuner.store.url import redact

        if record.exc_info and record.exc_info[1] is not None and interrupted(record.exc_info[1]):
            return
        try:
            print(redact(self.format(record)), file=sys.stderr)  # the stderr of now (a test may swap it)
        except Exception:
            self.handleError(record)


def _show_storage_logs() -> None:
    logger = logging.getLogger("sqlalchemy")
    if not any(isinstance(handler, _StorageLog) for handler in logger.handlers):
        logger.addHandler(_StorageLog(logging.WARNING))
        logger.propagate = False


def _interrupted(command: str) -> int:
    if command in ("run", "grid", "worker"):
        print("tuner: interrupted; finished trials are stored, run the same command to resume", file=sys.stderr)
    else:  # it stores no trials (a confirmation is stored whole, or not at all)
        print("tuner: interrupted", file=sys.stderr)
    return 130


class _Parser(argparse.ArgumentParser):
    """argparse with the project's one-line errors (``tuner: error: ...``, exit code 2); the
    usage stays a ``--help`` away."""

    def error(self, message: str) -> typing.NoReturn:
        from tuner.store.url import redact

        where = "" if self.prog == "tuner" else f"{self.prog}: "  # a subcommand's parser names it
        print(f"tuner: error: {where}{' '.join(redact(message).split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tuner", description="Bayesian autotuning of CUDA kernel defines.")
    parser.add_argument("--version", action="version", version=f"tuner {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def storage_arg(p):
        p.add_argument("--storage", help=f"sqlite:///FILE.db (default {DEFAULT_URL}), postgresql+psycopg://..., or FILE.log")

    run = sub.add_parser("run", help="search a study (Bayesian by default)")
    run.add_argument("study_file", nargs="?", help="studies/NAME.toml (optional with --replay FILE: its recorded configs are then the space)")
    storage_arg(run)
    options.add_flags(run, "run")
    run.add_argument("--json", action="store_true", help="end with one JSON line for scripts")
    run.set_defaults(func=cmd_run)

    worker = sub.add_parser("worker", help="join a shared study as one more worker (one GPU)",
                            description=f"Settings not given as flags come from ${options.ENV} (JSON), "
                                        "which `tuner run --workers N` sets for its workers.")
    worker.add_argument("study_file", nargs="?", help="studies/NAME.toml (optional with --replay FILE: its recorded configs are then the space)")
    storage_arg(worker)
    options.add_flags(worker, "worker")
    worker.add_argument("--json", action="store_true", help="end with one JSON line for scripts")
    worker.set_defaults(func=cmd_worker)

    grid = sub.add_parser("grid", help="evaluate every valid config; print the table and a CSV")
    grid.add_argument("study_file")
    storage_arg(grid)
    options.add_flags(grid, "grid")
    grid.add_argument("--csv", type=Path, help="where to write the table as CSV (default: the stored study's name .csv: NAME.grid.csv, "
                      "or NAME.replay.csv for a replay; one that another storage's grid wrote is kept, not replaced)")
    grid.add_argument("--json", action="store_true", help="end with one JSON line for scripts")
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
    check.add_argument("--host-dry-run", action="store_true",
                       help="on a GPU host: every valid config's launch into an ABI twin of a kernel for a GPU not "
                            "at hand (sm_100a on an H100), compared byte for byte with what the spec meant")
    options.add_flags(check, "check")
    check.add_argument("--json", action="store_true", help="print one JSON object per study file (counts, configs, preflight), one per line, instead of the tables")
    check.set_defaults(func=cmd_check)

    confirm = sub.add_parser("confirm", help="re-measure a study's best configs against each other on this GPU")
    confirm.add_argument("study_file")
    storage_arg(confirm)
    options.add_flags(confirm, "confirm")
    confirm.add_argument("--json", action="store_true", help="end with one JSON line for scripts")
    confirm.set_defaults(func=cmd_confirm)

    profile = sub.add_parser("profile", help="profile a study's best config (or --trial N) with Nsight Compute (ncu)",
                             description="Exit codes: 0 profiled, 1 ncu or the profiled run failed, 2 bad input.")
    profile.add_argument("study_file")
    storage_arg(profile)
    profile.add_argument("--study", help="study name in the storage (default: the study file's run, grid or replay)")
    profile.add_argument("--trial", type=int, action="append", help="a trial whose config to profile (default: the "
                         "confirmed winner, else the best); repeated: each, their figures side by side")
    profile.add_argument("-o", "--output", type=Path, help="the report for Nsight Compute, with one trial (default "
                                                           "NAME-trialN.ncu-rep)")
    profile.add_argument("--json", action="store_true", help="print the profiled kernels' metrics as one JSON object")
    profile.add_argument("--launch-params", help=argparse.SUPPRESS)  # the run inside ncu: these params, once
    options.add_flags(profile, "profile")
    profile.set_defaults(func=cmd_profile)

    best = sub.add_parser("best", help="print the best config's -D flags")
    best.add_argument("study_file", nargs="?")
    best.add_argument("--study", help="study name in the storage")
    storage_arg(best)
    best.add_argument("--header", type=Path, help="write a header of #defines")
    best.add_argument("--json", action="store_true", help="print the winner as one JSON object")
    best.add_argument("--pareto", action="store_true", help="the Pareto front of time and energy ([search] objectives)")
    best.set_defaults(func=cmd_best)

    status = sub.add_parser("status", help="studies in a storage: trials per status, best, device")
    storage_arg(status)
    status.add_argument("--json", action="store_true", help="print the studies as one JSON object")
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
    for command in sub.choices.values():  # what a command does not know is said with its own usage
        command.set_defaults(command_parser=command)
    return parser


# -- building blocks ------------------------------------------------------------------------


def _session(args) -> Session:
    """What this command is asked to do, for :mod:`tuner.run.session` (which runs every command's study)."""
    from tuner.progress import shown_on_stderr
    from tuner.run.session import Session

    quiet = getattr(args, "json", False)
    return Session(args.study_file, storage=args.storage, given=args.given, command=args.command,
                   progress=shown_on_stderr(quiet), say=None if quiet else _say)


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _file_named(name: str, suffix: str) -> Path:
    """``NAME{suffix}`` in the working folder; one line if the name cannot be a file name."""
    path = Path(f"{name}{suffix}")
    if len(path.name.encode()) > 255:  # NAME_MAX of Linux file systems
        raise UserError(f"study name of {len(name)} characters is too long for the file {name[:40]}...{suffix}: "
                        "give --csv FILE, or a shorter --study-name")
    return path


# -- commands ---------------------------------------------------------------------------------


def cmd_run(args) -> int:
    from tuner.run.session import StartupClock
    from tuner.store.storage import check_workers

    if args.run.workers > 1:
        check_workers(args.storage, args.run.workers)
        from tuner.run.scale import run_workers

        return run_workers(args)
    startup = StartupClock()
    startup.mark("command_started")  # the command line's imports are done
    # the worker spawned by tuner.cli.launch before those imports: its CUDA start overlaps loading the study
    summary, _ = _session(args).run(None if args.run.replay else args.gpu_worker, startup, early_build=args.early_build)
    from tuner.run.summary import exit_code, print_summary

    print_summary(summary, args.json)
    return exit_code(summary)


def cmd_confirm(args) -> int:
    """Re-measure a stored study's top configs in this session (a later one, or another GPU of the model)."""
    name, confirmed = _session(args).confirm_stored()
    if confirmed is None:
        raise UserError(f"study {name!r} has fewer than 2 completed configs: nothing to confirm yet")
    if args.json:
        print(json.dumps({"study": name, **confirmed}))
    elif confirmed["winner"] is not None:  # (none: all but one config failed their output check, as said)
        from tuner.evaluate.confirm import standings_table

        print("\n".join(standings_table(confirmed)))
    return 0


def cmd_profile(args) -> int:
    """A stored trial's config launched once under Nsight Compute; its main figures printed, its report kept."""
    from tuner.contract.program import ProgramSpec
    from tuner.run import profile
    from tuner.search.space import Space

    if args.launch_params is not None:  # the run ncu started
        launched = _session(args).launch_profiled(json.loads(args.launch_params))
        print(profile.RESULT_MARK + json.dumps({"status": launched.status, "reason": launched.reason}), flush=True)
        return 0
    cfg, space = Space.load(args.study_file)
    if isinstance(space.spec, ProgramSpec):
        space.spec.profiled_kernel()  # a program kernel's ncu needs its name: said before anything runs
    ncu = profile.find_ncu()
    study = _open_study(args, run_from=False)  # (check_unchanged compares the whole setup, --accept-mismatch aside)
    profile.check_unchanged(study, space, args.run.accept_mismatch)
    numbers = list(dict.fromkeys(args.trial)) if args.trial else [None]  # (a trial named twice is profiled once)
    trials = [profile.chosen_trial(study, number) for number in numbers]
    if args.output and len(trials) > 1:
        raise UserError("-o names one report: give it with one --trial (several get NAME-trialN.ncu-rep each)")
    check_output_path(args.output, "--output")
    reports = [args.output or Path(f"{study.study_name}-trial{t.number}.ncu-rep") for t in trials]
    reports = [r if r.suffix == ".ncu-rep" else r.with_name(r.name + ".ncu-rep") for r in reports]  # (ncu adds it)
    for report in reports:
        check_output_path(report, "--output")
    # the flags as built now (a study accepted with another problem: not the trial's stored ones)
    flags = [space.spec.flags(space.full_config(dict(t.params)), space.problem) for t in trials]
    profiles = []
    for trial, report, built in zip(trials, reports, flags, strict=True):
        if not args.json:
            _say(f"profiling trial {trial.number} ({built}) with {ncu}")
        report.absolute().parent.mkdir(parents=True, exist_ok=True)
        try:
            profiles.append(profile.profile(ncu, report.absolute(), cfg, space, trial, args.run.cache_dir))  # (a program runs in its spec's folder)
        except profile.ProfileFailed as exc:
            _error(str(exc))
            return 1
    if args.json:
        print(json.dumps({"study": study.study_name, "profiles": [
            {"trial": t.number, "params": t.params, "flags": f, "status": p.status, "reason": p.reason, "report": str(r),
             "kernels": [{"name": k.name, "metrics": k.numbers(), "advice": k.advice} for k in p.kernels]}
            for t, f, p, r in zip(trials, flags, profiles, reports, strict=True)]}))
        return 0
    profile.print_profiles([f"trial {t.number}" for t in trials], profiles)
    for trial, profiled, report in zip(trials, profiles, reports, strict=True):
        _say(f"trial {trial.number}: output check: {profiled.check}; report: {report} (open it in Nsight Compute: "
             f"ncu-ui {report})")
    return 0


def cmd_worker(args) -> int:
    from tuner.run.session import PARENT_ENV

    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit():  # a worker of `tuner run --workers N`: it stops (SIGTERM) when that run dies
        import signal

        from tuner.lifetime import die_with_parent, ignore_interrupts

        die_with_parent(int(parent), signal.SIGTERM)
        # the terminal's Ctrl-C reaches every worker as it reaches the run, which then stops each one with
        # SIGTERM: one stop, whose clean-up (its trials failed and queued again) no second one cuts short
        ignore_interrupts()
    else:
        from tuner.store.storage import check_workers

        check_workers(args.storage, 1, joining=True)
    return cmd_run(args)


def _rejected_rows(space, measured, tiered: bool) -> list[dict[str, typing.Any]] | None:
    """Rows (status ``invalid``, with the reason) for the configs of the grid's plan that the kernel's
    model rejected before compiling, as the seed's table lists them: the whole product, or tiered,
    tier 1 with tier 2 at its defaults and tier 2 on tier 1's winner (``measured``'s best row).
    None when the plan's product is too large to list."""
    plans: list[dict[str, typing.Any] | None] = [None]
    if tiered:
        plans = [{a: v for a, v in space.defaults().items() if a in space.tier2}]
        best = measured[measured["status"] == "ok"].head(1).to_dict("records")
        if best:
            plans.append({a: best[0][a] for a in space.tier1})
    rows: dict[tuple, dict[str, typing.Any]] = {}
    for held in plans:
        found = space.rejected(held)
        if found is None:
            return None
        for params, reason in found:
            rows.setdefault(space.key(params), {**params, "status": "invalid", "reason": reason})
    return list(rows.values())


def cmd_grid(args) -> int:
    import datetime as dt

    import pandas as pd

    from tuner.measurement.value import EXTRA_STATUSES
    from tuner.run.summary import exit_code, print_summary
    from tuner.store.results import ranked, trials_frame, write_table
    from tuner.store.storage import storage_identity
    from tuner.table import seed_table

    check_output_path(args.csv, "--csv")
    storage = storage_identity(args.storage)

    def default_csv_writable(name: str) -> None:  # NAME.csv must be writable before the grid runs, not after
        if args.csv is None:
            path = _file_named(name, ".csv")
            check_output_path(path, "the grid's CSV (name it with --csv)")
            _check_csv_is_this_storages(path, storage)

    summary, runner = _session(args).run(named=default_csv_writable)
    axes = runner.space.axis_names
    frame = trials_frame(runner.study.get_trials(deepcopy=False), axes)
    # a trial a stop or a dead process cut short was queued again: its config's row is the later trial's
    measured = ranked(frame[~frame["status"].isin(EXTRA_STATUSES)])
    winner = (summary.get("best") or {}).get("trial")  # the confirmed winner, first (the row marked BEST)
    if winner is not None:
        first = measured["number"] == winner
        measured = pd.concat([measured[first], measured[~first]])
    rejected = _rejected_rows(runner.space, measured, runner.settings.mode == "tiered")
    table = measured if rejected is None else pd.concat([measured, pd.DataFrame(rejected, columns=measured.columns)],
                                                        ignore_index=True)
    csv_path = args.csv or _file_named(runner.settings.study_name, ".csv")
    write_table(table, csv_path, device=runner.study.user_attrs.get("device_name", ""), date=dt.date.today().isoformat(),
                storage=storage)
    if args.json:
        print_summary(summary, True)
    else:
        print(seed_table(table, axes))
        rejected_note = "" if rejected is None else f" and {len(rejected)} rejected before compiling"
        print(f"\n{len(measured)} configs measured{rejected_note}; CSV written to {csv_path}")
        print_summary(summary, False)
    return exit_code(summary)


def _check_csv_is_this_storages(path: Path, storage: str) -> None:
    """The grid's default CSV is replaced only where this storage's grid wrote it: the study's grid in
    another storage writes the same NAME.grid.csv, and its table would be lost unasked."""
    from tuner.store.results import storage_of_table

    if not path.exists():
        return
    owner = storage_of_table(path)
    if owner == storage:
        return
    whose = (f"the grid of another storage, {owner}" if owner else
             "a table that names no storage (an older tuner's grid, or another file)")
    raise UserError(f"{path} holds {whose}: give --csv FILE for the table of this grid in {storage} "
                    f"(--csv {path} replaces that one)")


def cmd_check(args) -> int:
    compile_only = [flag for flag, given in (("--all", args.all), ("--arch", args.arch)) if given]
    if compile_only and not args.compile:
        raise UserError(f"{' and '.join(compile_only)} choose what --compile builds: add --compile")
    codes = []
    for path in args.study_file:
        try:
            codes.append(_check_study(args, Path(path)))
        except Exception as exc:  # one bad study file of several: said, and the others checked still
            error = as_user_error(exc)
            if error is None or len(args.study_file) == 1 or interrupted(exc):
                raise
            sys.stdout.flush()  # (its line after the files checked before it)
            _error(str(error))
            codes.append(error.exit_code)
    return max(codes)


def _check_study(args, path: Path) -> int:
    from tuner.search.space import Space
    from tuner.search.start import start_params

    cfg, space = Space.load(path)
    spec = space.spec
    # the configs `tuner run` starts from: one the kernel's model rejects is refused here as there
    start_params(space, cfg.search.start, cfg.search.mode == "tiered")
    if isinstance(cfg.measure.reference, dict):
        start_params(space, [cfg.measure.reference], what="[measure] reference")
    if args.host_dry_run:
        from tuner.check.host_dry_run import command
        from tuner.contract.program import ProgramSpec

        if isinstance(spec, ProgramSpec):
            raise UserError(f"{path}: --host-dry-run checks the launch a spec describes; {cfg.kernel.name}'s program "
                            "launches its kernel itself: build it with --compile, run it with `tuner run`")
        return command(cfg, spec, space, args.run.jobs, args.json)
    summary = space.summary()
    configs: list[dict[str, typing.Any]] = []
    preflight = None
    if args.compile:
        preflight, configs = _compile_and_check(args, path, cfg, space)
        compiled: dict[str, int] = {}
        for c in configs:
            compiled[c["status"]] = compiled.get(c["status"], 0) + 1
        summary["compiled"] = compiled
        summary["preflight"] = preflight.to_json()
    code = preflight.exit_code if preflight else 0
    if args.json:
        print(json.dumps({**summary, "study": cfg.name, "configs": configs}))
        space.require_valid()  # nothing to run: bad input, as `tuner run` says
        return code
    print(f"{cfg.name}: {summary['total']} configs, {summary['valid']} valid, {summary['total'] - summary['valid']} invalid")
    for kind, count in space.invalid.most_common():
        print(f"  invalid x{count}: {space.invalid_examples[kind]}" + ("  (and like it)" if count > 1 else ""))
    sys.stdout.flush()
    space.require_valid()
    if preflight is not None:
        _print_preflight(space, configs, summary["compiled"], preflight)
    return code


def _compile_and_check(args, path: Path, cfg: StudyConfig, space: Space) -> tuple[Preflight, list[dict[str, typing.Any]]]:
    """`tuner check --compile`: each config built and checked (:func:`tuner.check.preflight.run_preflight`),
    and one row per build."""
    from tuner.check.preflight import run_preflight
    from tuner.compile.build import CompileLimits
    from tuner.compile.targets import check_targets
    from tuner.contract.kernel_spec import user_code
    from tuner.progress import shown_on_stderr

    spec = space.spec
    targets = check_targets(cfg.arch, spec, str(path), args.arch)
    preflight = run_preflight(spec, space.problem, space.valid, space.full_config, targets,
                              CompileLimits.of(cfg.measure), every=args.all, study=cfg.name,
                              cache_dir=args.run.cache_dir, jobs=args.run.jobs, shown=shown_on_stderr(args.json))
    skipped = [a for a in spec.archs if a not in targets] if cfg.arch == "native" and not args.arch else []
    if skipped:
        preflight.notes.append(f"not built for {', '.join(skipped)}: this NVRTC cannot compile for them")
    configs = []
    for checked in preflight.checked:
        r = checked.compiled
        with user_code(spec.path, "derive()"):
            smem = spec.derive(space.full_config(checked.params), space.problem).get("smem_bytes", r.smem_static)
        configs.append({"params": checked.params, "arch": checked.arch, "regs": r.regs, "spills": r.spills,
                        "smem_bytes": smem, "status": r.status, "reason": r.reason, "compile_s": round(r.compile_s, 3),
                        "preflight": checked.status, "problems": checked.reasons})
    return preflight, configs


def _print_preflight(space: Space, configs: list[dict[str, typing.Any]], compiled: dict[str, int], preflight: Preflight) -> None:
    """The builds' table (the ones that passed last), then the preflight's counts and reasons."""
    from tuner.table import SHORT, render

    axes = space.axis_names
    several = len({c["arch"] for c in configs}) > 1
    headers = [SHORT.get(a, a) for a in axes] + (["ARCH"] if several else []) + ["REGS", "SPILL", "SMEM_KB", "STATUS"]
    order = sorted(configs, key=lambda c: (c["preflight"] == "passed", c["status"] != "ok", [_sort_key(c["params"][a]) for a in axes]))
    print(render(headers, [[c["params"][a] for a in axes] + ([c["arch"]] if several else []) + [
        c["regs"], c["spills"], round(c["smem_bytes"] / 1024, 1) if c["smem_bytes"] is not None else None,
        "ok" if c["preflight"] == "passed" else f"{c['status']}: {c['reason'][:60]}" if c["preflight"] == "rejected"
        else f"failed: {c['problems'][0][:80]}"] for c in order]))
    print("compiled: " + ", ".join(f"{k}={v}" for k, v in sorted(compiled.items())))
    for note in preflight.notes:
        print(f"note: {note}")
    counts = preflight.counts()
    spec_failed = f", spec checks failed={len(preflight.spec_failures)}" if preflight.spec_failures else ""  # not per config
    print(f"preflight: {'passed' if preflight.ok else 'FAILED'}: " + ", ".join(f"{k}={counts.get(k, 0)}" for k in
          ("passed", "rejected", "failed")) + f"{spec_failed} ({preflight.seconds:.1f} s)")
    for count, reason in preflight.by_reason():
        print(f"  x{count}: {reason}")


def _sort_key(value: typing.Any) -> tuple:
    """Numbers in their order (2 before 16), names after them in theirs."""
    return (0, value, "") if isinstance(value, int | float) else (1, 0, str(value))


def _open_study(args, run_from: bool = True):
    from tuner.run.session import open_study

    return open_study(args.storage, args.study_file, args.study, run_from=run_from)


def cmd_best(args) -> int:
    from tuner.evaluate.confirm import confirmed_best, describe, failed_since, tied_with_winner
    from tuner.store.header import HEADER_MARK, write_header
    from tuner.store.results import metric_of, time_of, value_of

    check_output_path(args.header, "--header", ours=HEADER_MARK.encode())
    if args.pareto and args.header:
        raise UserError("--header writes one config, --pareto lists the front: tuner best --header FILE writes the "
                        "fastest; the front's other configs are in tuner best --pareto --json")
    study = _open_study(args)
    if args.pareto:
        from tuner.measurement.pareto import print_front

        return print_front(study, args.json)
    best, confirmation = confirmed_best(study)
    flags = best.user_attrs.get("flags", "")
    metric = metric_of(study)
    if args.header:
        write_header(args.header, study, best)
    tied = tied_with_winner(confirmation) if confirmation else None
    if args.json:
        # (several objectives: the time one, as the summary's best; `--pareto` gives the front)
        print(json.dumps({"study": study.study_name, metric: value_of(best), "ms": time_of(best, study.get_trials(deepcopy=False)),
                          "params": best.params, "flags": flags, "trial": best.number,
                          "confirmed": confirmation is not None, "tied": tied}))
    else:
        print(flags)
        if confirmation:  # stdout stays the flags alone, for $(tuner best ...)
            print(describe(confirmation), file=sys.stderr)
        warning = failed_since(study, best.number)
        if warning:
            print(warning, file=sys.stderr)
    return 0


def cmd_status(args) -> int:
    from tuner.evaluate.confirm import factor_warning, session_factors
    from tuner.run.summary import summarize
    from tuner.store.results import CONFIRMATIONS
    from tuner.store.storage import open_storage, resolve_url
    from tuner.store.url import redact
    from tuner.table import printable, render

    storage = open_storage(args.storage, create=False)
    rows, confirmations = [], []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        summary = summarize(study, resolve_url(args.storage))
        trials = study.get_trials(deepcopy=False)
        ends = [end for t in trials if (end := t.datetime_complete or t.datetime_start) is not None]
        summary.update(
            device=study.user_attrs.get("device_name", ""),
            # the GPUs that measured its trials (UUID: trials): several workers, or sessions on other GPUs
            gpus=dict(collections.Counter(t.user_attrs["gpu"] for t in trials if "gpu" in t.user_attrs)),
            kind=study.user_attrs.get("kind", ""),
            last_update=max(ends).isoformat(timespec="seconds") if ends else None,
            session_factors=session_factors(study),
        )
        rows.append(summary)
        confirmations.append(study.user_attrs.get(CONFIRMATIONS) or [])
    if args.json:
        print(json.dumps({"storage": redact(resolve_url(args.storage)), "studies": rows}))
        return 0
    if not rows:
        print(f"no studies in {redact(resolve_url(args.storage))}")
        return 0
    print(render(
        ["STUDY", "KIND", "DEVICE", "TRIALS", "STATUSES", "BEST_MS", "SESSION_FACTORS", "LAST_UPDATE"],
        [[r["study"], r["kind"], r["device"] + (f" ({len(r['gpus'])} GPUs)" if len(r["gpus"]) > 1 else ""), r["trials"],
          " ".join(f"{k}={v}" for k, v in sorted(r["statuses"].items())),
          r["best"]["ms"] if r["best"] else None, " ".join(f"{f['factor']:.4f}" for f in r["session_factors"]) or None,
          r["last_update"]] for r in rows],
    ))
    for r in rows:
        if r.get("reference"):
            print(f"study {printable(r['study'])}: {printable(r['reference'])}")
    for r, records in zip(rows, confirmations, strict=True):  # a session that measured the same configs otherwise
        for record in records:
            warning = factor_warning(r["study"], record)
            if warning:
                print(warning, file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from tuner.store.results import trials_frame, write_table
    from tuner.table import printable

    check_output_path(args.output, "--output")
    if args.output.suffix.lower() not in (".csv", ".json"):
        raise UserError(f"--output {args.output}: name a .csv file (the results table) or a .json file (a Kernel Tuner cache)")
    study = _open_study(args)
    recording = study.user_attrs.get("replay_file")
    if isinstance(recording, str) and args.output.exists() and Path(recording).exists() and args.output.samefile(recording):
        raise UserError(f"--output {args.output} is the recording study {printable(study.study_name)} was replayed from, "
                        "which it would replace: give another file name")
    axes = study.user_attrs.get("axes")
    trials = study.get_trials(deepcopy=False)
    device = study.user_attrs.get("device_name", "")
    if args.output.suffix.lower() == ".json":  # the Kernel Tuner cache format, which replay also reads
        from tuner.search.distributions import stored_axes
        from tuner.store.results import kernel_tuner_cache, metric_of

        space = stored_axes(study) or {}
        names = axes if isinstance(axes, list) else list(dict.fromkeys(n for t in trials for n in t.params))
        values = {a: space.get(a) or sorted({t.params[a] for t in trials if a in t.params},
                                            key=lambda x: (isinstance(x, str), x)) for a in names}
        problem = study.user_attrs.get("problem")
        problem = problem if isinstance(problem, dict) else {}
        problem_size = study.user_attrs.get("problem_size")  # a Kernel Tuner cache's, replayed
        if problem_size is None:
            problem_size = [problem[k] for k in ("M", "N", "K") if k in problem] or list(problem.values())
        cache = kernel_tuner_cache(trials, values, device=device.removeprefix("replay of "),
                                   kernel=str(study.user_attrs.get("kernel", "")), problem_size=problem_size,
                                   metric=metric_of(study))
        args.output.write_text(json.dumps(cache, indent=1))
        print(f"{len(cache['cache'])} configs of {printable(study.study_name)} written to {args.output} (Kernel Tuner cache)")
        return 0
    frame = trials_frame(trials, axes if isinstance(axes, list) else None)
    write_table(frame, args.output, device=device)
    print(f"{len(frame)} trials of {printable(study.study_name)} written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
