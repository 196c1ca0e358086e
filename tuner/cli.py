"""``tuner``: the command line.

    tuner run STUDY.toml [--storage URL] [--replay FILE] [--json]   Bayesian search
    tuner grid STUDY.toml [--csv FILE]                              every valid config, the seed's table
    tuner check STUDY.toml [--compile] [--json]                     space summary, compile without a GPU
    tuner best STUDY.toml|--study NAME [--header FILE] [--json]     the winner's -D flags
    tuner status [--storage URL] [--json]                           studies in a storage
    tuner export STUDY.toml|--study NAME -o FILE.csv                trials to CSV
    tuner worker STUDY.toml --storage URL                           join a study from any host
    tuner report / tuner dashboard                                  Plotly reports, optuna-dashboard

Bad input exits with code 2 and one line that says what to fix.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import optuna

from tuner import __version__
from tuner.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # tuner reports every trial's outcome itself; Optuna's per-trial warnings would repeat it
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    try:
        return args.func(args) or 0
    except UserError as exc:
        from tuner.storage import redact

        print(f"tuner: error: {redact(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tuner: interrupted; finished trials are stored, run the same command to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tuner check ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tuner", description="Bayesian autotuning of CUDA kernel defines.")
    parser.add_argument("--version", action="version", version=f"tuner {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def storage_arg(p):
        p.add_argument("--storage", help="sqlite:///FILE.db (default sqlite:///tuner.db), postgresql+psycopg://..., or FILE.log")

    run = sub.add_parser("run", help="search a study (Bayesian by default)")
    run.add_argument("study_file", nargs="?", help="studies/NAME.toml (optional with a Kernel Tuner --replay file)")
    storage_arg(run)
    run.add_argument("--replay", metavar="FILE", help="evaluate against a recorded table (our CSV, Kernel Tuner cache or T4) instead of a GPU")
    run.add_argument("--study-name", help="store under this name instead of the file's")
    run.add_argument("--sampler", choices=("tpe", "gp", "random", "grid"))
    run.add_argument("--mode", choices=("joint", "tiered"))
    run.add_argument("--trials", type=int, help="trials the study should reach (resume counts what is stored)")
    run.add_argument("--timeout-min", type=float, help="stop after this many minutes")
    run.add_argument("--seed", type=int)
    run.add_argument("--no-pruner", action="store_true", help="measure every config to the end")
    run.add_argument("--workers", type=int, default=1, help="worker processes, one per GPU (needs a journal or Postgres storage)")
    run.add_argument("--accept-mismatch", action="store_true", help="resume even if GPU, kernel source or NVRTC differ")
    run.add_argument("--warm-start", metavar="STUDY", action="append", default=[],
                     help="queue the best configs of an earlier study in the same storage first (repeatable)")
    run.add_argument("--warm-start-top", type=int, default=5, metavar="N", help="configs taken from each warm-start study")
    run.add_argument("--json", action="store_true", help="end with one JSON line for scripts")
    run.add_argument("--cache-dir", type=Path, help="compile cache (default ~/.cache/tuner/cubin or $TUNER_CACHE_DIR)")
    run.add_argument("--artifacts", type=Path, help="keep each trial's compile log as an optuna artifact in this folder")
    run.set_defaults(func=cmd_run)

    worker = sub.add_parser("worker", help="join a shared study as one more worker (one GPU)")
    worker.add_argument("study_file", nargs="?", help="studies/NAME.toml (optional with a Kernel Tuner --replay file)")
    storage_arg(worker)
    worker.add_argument("--replay", metavar="FILE")
    worker.add_argument("--study-name")
    worker.add_argument("--sampler", choices=("tpe", "gp", "random", "grid"))
    worker.add_argument("--mode", choices=("joint", "tiered"))
    worker.add_argument("--trials", type=int, help="trials the whole study should reach (all workers together)")
    worker.add_argument("--timeout-min", type=float)
    worker.add_argument("--seed", type=int)
    worker.add_argument("--no-pruner", action="store_true")
    worker.add_argument("--accept-mismatch", action="store_true")
    worker.add_argument("--json", action="store_true")
    worker.add_argument("--cache-dir", type=Path)
    worker.add_argument("--artifacts", type=Path)
    worker.set_defaults(func=cmd_worker, workers=1)

    grid = sub.add_parser("grid", help="evaluate every valid config; print the seed's table and a CSV")
    grid.add_argument("study_file")
    storage_arg(grid)
    grid.add_argument("--replay", metavar="FILE")
    grid.add_argument("--study-name")
    grid.add_argument("--mode", choices=("joint", "tiered"), help="joint = full cross (default), tiered = tier 1 then tier 2 on the winner")
    grid.add_argument("--csv", type=Path, help="where to write the table as CSV (default NAME_grid.csv)")
    grid.add_argument("--accept-mismatch", action="store_true")
    grid.add_argument("--cache-dir", type=Path)
    grid.add_argument("--artifacts", type=Path)
    grid.add_argument("--json", action="store_true")
    grid.set_defaults(func=cmd_grid, sampler="grid", trials=None, timeout_min=None, seed=0, no_pruner=True, workers=1)

    check = sub.add_parser("check", help="count valid configs; with --compile, compile them all (no GPU)")
    check.add_argument("study_file")
    check.add_argument("--compile", action="store_true", help="compile every valid config in parallel and print REGS/SPILL/SMEM")
    check.add_argument("--jobs", type=int, help="compile processes (default: CPU count)")
    check.add_argument("--json", action="store_true")
    check.add_argument("--cache-dir", type=Path)
    check.set_defaults(func=cmd_check)

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
    export.add_argument("-o", "--output", type=Path, required=True)
    export.set_defaults(func=cmd_export)

    try:
        from dashboards.cli import register
    except ImportError:  # dashboards not installed alongside: the engine still works
        pass
    else:
        register(sub)
    return parser


# -- building blocks ------------------------------------------------------------------------


def _load(args):
    """Study file (or a Kernel Tuner replay file alone) -> (config or None, space, recording or None)."""
    from tuner.replay import load_recording, make_replay_spec
    from tuner.space import Space
    from tuner.spec import load_spec
    from tuner.study_file import load_study

    recording = load_recording(args.replay) if getattr(args, "replay", None) else None
    if not args.study_file:
        if recording is None:
            raise UserError("give a study file (studies/NAME.toml), or --replay FILE with a Kernel Tuner cache")
        if recording.format == "csv":
            raise UserError(f"replay file {recording.path} is our CSV: give the study file it was recorded from too")
        spec = make_replay_spec(recording)
        return None, Space(spec, {}, recording.axes, list(recording.axes), []), recording
    cfg = load_study(args.study_file)
    spec = load_spec(cfg.kernel)
    if cfg.arch not in spec.archs and spec.archs:
        raise UserError(f"{cfg.path}: [study.arch] {cfg.arch} is not a target of {spec.path.name} ({', '.join(spec.archs)})")
    space = Space.from_study(cfg, spec)
    if recording is not None:
        missing = [a for a in space.axes if a not in recording.axes]
        if missing:
            raise UserError(f"replay file {recording.path} has no column for {', '.join(missing)}: record it from this study")
    return cfg, space, recording


def _settings(args, cfg, space, attrs, name):
    from tuner.runner import RunSettings
    from tuner.study_file import SearchSettings

    s = cfg.search if cfg else SearchSettings()
    trials = args.trials if args.trials is not None else (s.trials if args.func is not cmd_grid else None)
    if args.func is cmd_grid:
        trials = len(space.valid)
    return RunSettings(
        **{**vars(s),
           "sampler": args.sampler or s.sampler,
           "mode": args.mode or (s.mode if args.func is not cmd_grid else "joint"),
           "trials": trials,
           "timeout_min": args.timeout_min if args.timeout_min is not None else s.timeout_min,
           "seed": args.seed if args.seed is not None else s.seed,
           "pruner": s.pruner and not args.no_pruner},
        study_name=name,
        accept_mismatch=args.accept_mismatch,
        progress=not args.json and sys.stderr.isatty(),
        artifact_dir=str(args.artifacts) if getattr(args, "artifacts", None) else None,
        warm_start=list(getattr(args, "warm_start", None) or []),
        warm_start_top=getattr(args, "warm_start_top", 5),
        study_attrs=attrs,
    )


def _evaluator(args, cfg, space, recording):
    """(evaluator, study attrs, study name, closer)."""
    from tuner.runner import study_attrs
    from tuner.study_file import MeasureSettings

    measure = cfg.measure if cfg else MeasureSettings()
    base_name = args.study_name or (cfg.name if cfg else recording.path.name.split(".")[0])
    shape = cfg.shape if cfg else (recording.kernel or base_name)
    if recording is not None:
        from tuner.replay import ReplayEvaluator

        name = args.study_name or f"{base_name}.replay"
        device = {"name": f"replay of {recording.device or recording.path.name}"}
        attrs = study_attrs("replay", space, cfg.arch if cfg else "", device, "", shape,
                            {"replay_file": str(recording.path), "replay_format": recording.format,
                             "baseline_ms": cfg.baseline if cfg else {}})
        return ReplayEvaluator(recording, measure.block), attrs, name, lambda: None
    from tuner.compile import nvrtc_version
    from tuner.gpu import GpuEvaluator

    evaluator = GpuEvaluator(space.spec, dict(space.problem), cfg.arch, measure, cache_dir=args.cache_dir,
                             seed=args.seed if args.seed is not None else 0)
    device = evaluator.start()
    attrs = study_attrs("gpu", space, cfg.arch, device, nvrtc_version(), shape, {"baseline_ms": cfg.baseline})
    return evaluator, attrs, base_name, evaluator.close


def _write_note(runner) -> None:
    """The study's Markdown note for optuna-dashboard (problem, device, best flags, how to reproduce)."""
    try:
        from dashboards.serve import write_study_note
        from tuner.storage import redact

        write_study_note(runner.study, redact(runner.storage_url))
    except ImportError:  # optuna-dashboard not installed: notes are optional
        pass


def _print_summary(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    statuses = ", ".join(f"{k}={v}" for k, v in sorted(summary["statuses"].items()))
    print(f"study {summary['study']} in {summary['storage']}: {summary['trials']} trials ({statuses})")
    best = summary.get("best")
    if best:
        print(f"best: {best['ms']:.4g} ms (trial {best['trial']})  {best['flags']}")
    else:
        print("best: none yet (no trial completed)")


# -- commands ---------------------------------------------------------------------------------


def cmd_run(args) -> int:
    from tuner.runner import Runner
    from tuner.storage import check_workers

    if args.workers > 1:
        check_workers(args.storage, args.workers)
        from tuner.scale import run_workers

        return run_workers(args)
    cfg, space, recording = _load(args)
    evaluator, attrs, name, close = _evaluator(args, cfg, space, recording)
    try:
        runner = Runner(space, evaluator, _settings(args, cfg, space, attrs, name), args.storage)
        if runner.requeued and not args.json:
            print(f"re-queued {len(runner.requeued)} trial(s) left RUNNING by a dead process: {runner.requeued}", file=sys.stderr)
        if runner.warm_queued and not args.json:
            print(f"warm start: {len(runner.warm_queued)} config(s) from {', '.join(args.warm_start)} queued first", file=sys.stderr)
        if runner.start_queued and not args.json:
            print(f"start: {len(runner.start_queued)} config(s) from [search] start queued first", file=sys.stderr)
        summary = runner.run()
        _write_note(runner)
    finally:
        close()
    _print_summary(summary, args.json)
    return 0


def cmd_worker(args) -> int:
    return cmd_run(args)


def cmd_grid(args) -> int:
    from tuner.runner import Runner
    from tuner.table import seed_table, trial_rows, write_csv

    cfg, space, recording = _load(args)
    evaluator, attrs, name, close = _evaluator(args, cfg, space, recording)
    if args.study_name is None and recording is None:
        name = f"{name}.grid"
    try:
        if recording is None:  # compile every config up front, in parallel, into the cache
            _precompile(cfg, space, args)
        runner = Runner(space, evaluator, _settings(args, cfg, space, attrs, name), args.storage)
        summary = runner.run()
        _write_note(runner)
    finally:
        close()
    rows = trial_rows(runner.study, space.axis_names)
    device = attrs.get("device_name", "")
    csv_path = args.csv or Path(f"{name}.csv")
    import datetime as dt

    write_csv(rows, space.axis_names, csv_path, {"device": device, "date": dt.date.today().isoformat()})
    if args.json:
        _print_summary(summary, True)
    else:
        print(seed_table(rows, space.axis_names))
        print(f"\n{len(rows)} configs; CSV written to {csv_path}")
        _print_summary(summary, False)
    return 0


def _precompile(cfg, space, args) -> None:
    from tuner.compile import CompileLimits, compile_many

    progress = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(space.valid), desc="compiling", unit="config", file=sys.stderr)
        progress = lambda: bar.update(1)  # noqa: E731
    full = [space.full_config(p) for p in space.valid]
    compile_many(space.spec, full, space.problem, cfg.arch, args.cache_dir,
                 CompileLimits(cfg.measure.max_regs, cfg.measure.reject_spills), None, progress)


def cmd_check(args) -> int:
    from tuner.compile import CompileLimits, compile_many
    from tuner.space import reason_kind
    from tuner.spec import load_spec
    from tuner.study_file import load_study
    from tuner.space import Space
    from tuner.table import SHORT, render

    cfg = load_study(args.study_file)
    spec = load_spec(cfg.kernel)
    space = Space.from_study(cfg, spec)
    summary = space.summary()
    configs = []
    if args.compile:
        limits = CompileLimits(cfg.measure.max_regs, cfg.measure.reject_spills)
        progress = None
        if not args.json and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(total=len(space.valid), desc="compiling", unit="config", file=sys.stderr)
            progress = lambda: bar.update(1)  # noqa: E731
        full = [space.full_config(p) for p in space.valid]
        results = compile_many(spec, full, space.problem, cfg.arch, args.cache_dir, limits, args.jobs, progress)
        for params, config, r in zip(space.valid, full, results):
            smem = spec.derive(config, space.problem).get("smem_bytes", r.smem_static)
            configs.append({"params": params, "regs": r.regs, "spills": r.spills, "smem_bytes": smem,
                            "status": r.status, "reason": r.reason, "compile_s": round(r.compile_s, 3)})
        compiled = {}
        for c in configs:
            compiled[c["status"]] = compiled.get(c["status"], 0) + 1
        summary["compiled"] = compiled
    if args.json:
        print(json.dumps({**summary, "configs": configs}))
        return 0
    print(f"{cfg.name}: {summary['total']} configs, {summary['valid']} valid, {summary['total'] - summary['valid']} invalid")
    for kind, count in space.invalid.most_common():
        print(f"  invalid x{count}: {space.invalid_examples[kind]}" + ("  (and like it)" if count > 1 else ""))
    if configs:
        axes = space.axis_names
        headers = [SHORT.get(a, a) for a in axes] + ["REGS", "SPILL", "SMEM_KB", "STATUS"]
        order = sorted(configs, key=lambda c: (c["status"] != "ok", [str(c["params"][a]) for a in axes]))
        print(render(headers, [[c["params"][a] for a in axes] + [c["regs"], c["spills"],
                                round(c["smem_bytes"] / 1024, 1) if c["smem_bytes"] is not None else None,
                                c["status"] if c["status"] == "ok" else f"{c['status']}: {reason_kind(c['reason'])[:60]}"]
                               for c in order]))
        print("compiled: " + ", ".join(f"{k}={v}" for k, v in sorted(summary["compiled"].items())))
    return 0


def _open_study(args):
    from tuner.storage import open_storage, redact, resolve_url

    name = args.study
    if name is None:
        if not args.study_file:
            raise UserError("give a study file or --study NAME")
        from tuner.study_file import load_study

        name = load_study(args.study_file).name
    storage = open_storage(args.storage)
    try:
        return optuna.load_study(study_name=name, storage=storage), storage
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise UserError(
            f"no study {name!r} in {redact(resolve_url(args.storage))}; studies there: {', '.join(names) or 'none'}"
        ) from None


def cmd_best(args) -> int:
    from optuna.trial import TrialState

    study, _ = _open_study(args)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        raise UserError(f"study {study.study_name!r} has no completed trial yet: run it first")
    best = min(complete, key=lambda t: t.value)
    flags = best.user_attrs.get("flags", "")
    if args.header:
        lines = [f"// Best configuration of study {study.study_name}: {best.value:.4g} ms (trial {best.number})",
                 f"// device: {study.user_attrs.get('device_name', '')}; kernel source {study.user_attrs.get('source_hash', '')}",
                 "#pragma once"]
        for flag in flags.split():
            name, _, value = flag[2:].partition("=")
            lines += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
        args.header.write_text("\n".join(lines) + "\n")
    if args.json:
        print(json.dumps({"study": study.study_name, "ms": best.value, "params": best.params, "flags": flags, "trial": best.number}))
    else:
        print(flags)
    return 0


def cmd_status(args) -> int:
    from tuner.runner import summarize
    from tuner.storage import open_storage, redact, resolve_url
    from tuner.table import render

    storage = open_storage(args.storage)
    rows = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        summary = summarize(study, resolve_url(args.storage))
        trials = study.get_trials(deepcopy=False)
        ends = [t.datetime_complete or t.datetime_start for t in trials if (t.datetime_complete or t.datetime_start)]
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
    study, _ = _open_study(args)
    frame = study.trials_dataframe(attrs=("number", "value", "params", "user_attrs", "state", "datetime_start", "datetime_complete"))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.output, index=False)
    print(f"{len(frame)} trials of {study.study_name} written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
