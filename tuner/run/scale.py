"""Scale-out on one host: ``tuner run STUDY --workers N`` starts N ``tuner worker`` processes.

Each worker is an ordinary Optuna process joining the same study through the shared
storage (a journal file on one host, Postgres across hosts); there is no scheduler of
our own. GPU workers are pinned one per GPU with ``CUDA_VISIBLE_DEVICES``; replay
workers are not pinned. This module only starts them, shows the study's progress while it
waits (:mod:`tuner.run.watch`), forwards Ctrl-C, and prints one summary of the study they
filled together, as a run of one process ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Sequence

import optuna

from tuner.errors import UserError
from tuner.procfs import started_monotonic
from tuner.progress import shown_on_stderr
from tuner.run.pipeline import Timeline
from tuner.run.session import PARENT_ENV, PEERS_ENV
from tuner.run.watch import StudyWatch
from tuner.store.storage import open_storage, resolve_url
from tuner.store.url import redact
from tuner.study import options
from tuner.table import printable

STOP_GRACE_S = 20.0  # after Ctrl-C, how long workers get to record their trial before SIGKILL


def worker_command(args) -> list[str]:
    """The ``tuner worker`` command line; the settings go by environment (:func:`worker_env`)."""
    return [sys.executable, "-m", "tuner", "worker", *([str(args.study_file)] if args.study_file else []), "--json"]


def worker_settings(args, index: int) -> dict:
    """Worker ``index``'s settings: the run's, with a seed of its own (the same seed would
    propose the same configs)."""
    given = dict(args.given)
    if given.get("seed") is not None:
        given["seed"] = (given["seed"] + index) % (options.SEED_MAX + 1)
    return given


def _gpu_count() -> int:
    """GPUs on this host, without loading the CUDA driver in the parent (nvidia-smi -L)."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def worker_env(args, index: int) -> dict[str, str]:
    env = dict(os.environ)
    if not args.run.replay:  # one GPU each; respects an outer CUDA_VISIBLE_DEVICES list
        outer = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        gpus = outer or [str(i) for i in range(_gpu_count())]
        if gpus:  # more workers than GPUs share them round-robin
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    env["TUNER_WORKER_INDEX"] = str(index)
    env[PEERS_ENV] = str(args.run.workers)
    env[PARENT_ENV] = str(os.getpid())  # the worker dies with this process (:func:`tuner.lifetime.die_with_parent`)
    env["TUNER_STORAGE"] = resolve_url(args.storage)  # not on the command line: a password never shows in `ps`
    env[options.ENV] = options.encode(worker_settings(args, index))
    return env


#: workers a host takes per CPU core (`--workers N` above it is refused: a thousand processes starting at once
#: took minutes to start and left the study empty)
WORKERS_PER_CORE = 4


def run_workers(args) -> int:
    n = args.run.workers
    most = WORKERS_PER_CORE * (os.cpu_count() or 1)
    if n > most:  # each worker is a process with its compiles beside it: beyond that they only wait on each other
        raise UserError(f"--workers {n} is more than {WORKERS_PER_CORE} per CPU core of this host: give at most {most} "
                        "(on a GPU host, one per GPU)")
    url = resolve_url(args.storage)
    storage = open_storage(url)  # a storage the workers cannot open is refused here, once, before any of them starts
    procs: list[subprocess.Popen] = []
    outs, errs = [], []
    spawned: list[float] = []  # when each worker started (time.monotonic())
    watch = None
    started = time.monotonic()
    try:  # (SIGTERM, `kill PARENT`, interrupts as Ctrl-C does: tuner.lifetime.stop_on_sigterm)
        for i in range(n):
            outs.append(tempfile.TemporaryFile("w+"))  # nameless: nothing is left behind, even after kill -9
            errs.append(tempfile.TemporaryFile("w+"))
            spawned.append(time.monotonic())
            procs.append(subprocess.Popen(worker_command(args), env=worker_env(args, i), stdout=outs[i], stderr=errs[i],
                                          stdin=subprocess.DEVNULL))
        plan = _plan(args)
        if not args.json:
            print(f"started {n} workers on {redact(url)}", file=sys.stderr)
            if plan is not None:
                watch = StudyWatch(storage, plan[0], plan[1], shown_on_stderr(args.json))
        codes = _wait(procs, watch)
    except KeyboardInterrupt:
        if watch is not None:
            watch.close()  # its bar ends before the line below
        _stop(procs)
        print("tuner: interrupted; workers stopped, finished trials are stored, run the same command to resume",
              file=sys.stderr)
        return 130
    finally:
        for p in procs:  # never leave a worker behind
            if p.poll() is None:
                p.kill()
                p.wait()
    elapsed = time.monotonic() - started

    summaries, messages = _outputs(outs, errs)
    for line in messages[-20:]:  # each distinct message once, not once per worker
        print(line, file=sys.stderr)

    failed = [c for c in codes if c != 0]
    for i, c in enumerate(codes):
        if c < 0:  # killed from outside (OOM killer, kill -9): its trial is re-queued by the next start
            print(f"tuner: worker {i} was killed by {_signal_name(-c)}; finished trials are stored, "
                  "run the same command to resume", file=sys.stderr)
    finished = [(at, s) for at, s in zip(spawned, summaries, strict=True) if s is not None]
    if not finished:
        code = exit_code(codes) or 1
        if not any(m.startswith("tuner: error") for m in messages):
            print(f"tuner: error: none of the {n} workers finished (exit codes {codes})", file=sys.stderr)
        return code
    from tuner.run.summary import nothing_ran, print_summary, summarize

    study = stored_study(finished[0][1]["study"], storage, url)
    confirmed = None
    if not args.run.replay and not failed:  # once, now that no worker measures: each skipped its own
        confirmed = _confirm(args, study, sum(s.get("trials_run") or 0 for _, s in finished))
    summary = summarize(study, url)
    summary.update(workers=n, worker_exit_codes=codes, elapsed_s=round(elapsed, 2), **run_pace(finished))
    if recorded := [s["recorded_best_ms"] for _, s in finished if s.get("recorded_best_ms")]:  # (a replay's workers)
        from tuner.evaluate.replay import yardstick

        summary.update(yardstick(recorded[0], summary.get("best")))
    if confirmed is not None:
        from tuner.run.session import best_is_the_confirmed_winner

        summary["confirmed"] = confirmed
        best_is_the_confirmed_winner(study, summary)
    if not args.json and (idle := nothing_ran(summary, plan[1] if plan else None)):  # (a worker's own note is in its --json)
        print(idle, file=sys.stderr)
    print_summary(summary, args.json)
    if failed and not args.json:
        print(f"{len(failed)} worker(s) failed: exit codes {codes}", file=sys.stderr)
    return exit_code(codes)


def _confirm(args, study: optuna.Study, trials_run: int) -> dict | None:
    """The study's top configs confirmed on this host's GPU, as a run of one process ends (its lines said
    as that run says them)."""
    from tuner.run.session import Session

    session = Session(args.study_file, storage=args.storage, given=args.given, command="confirm",
                      progress=shown_on_stderr(args.json), say=None if args.json else _say)
    return session.confirm_after_workers(study, trials_run)


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _outputs(outs: Sequence[typing.IO[str]], errs: Sequence[typing.IO[str]]) -> tuple[list[dict | None], list[str]]:
    """Each worker's summary (its last JSON line; None: it ended without one) and the distinct lines
    of their stderr, passwords hidden. The files are closed."""
    summaries: list[dict | None] = []
    messages: list[str] = []
    for out, err in zip(outs, errs, strict=True):
        out.seek(0)
        err.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.startswith("{")]
        summary = None
        if lines:
            try:
                summary = json.loads(lines[-1])
            except ValueError:
                pass
        summaries.append(summary if isinstance(summary, dict) and "study" in summary else None)
        for line in err.read().splitlines():
            line = printable(redact(line))
            if line.strip() and line not in messages:
                messages.append(line)
        out.close()
        err.close()
    return summaries, messages


def _plan(args) -> tuple[str, int | None] | None:
    """The study the workers fill, by the name they give it, and its trial budget (None: tiered, each tier
    has its own); None where the study file is refused (each worker says why)."""
    from tuner.run.session import Session
    from tuner.study.file import load_study

    session = Session(args.study_file, storage=args.storage, given=args.given)
    try:
        cfg = load_study(args.study_file) if args.study_file else None
        name = session.stored_name(cfg, args.run.replay)
        search = session.search(cfg)
    except UserError:
        return None
    if not name:  # neither a study file nor a replay: each worker says so
        return None
    return name, search.trials if search.mode == "joint" else None


def run_pace(finished: list[tuple[float, dict]]) -> dict:
    """This run's pace, as a run of one process reports its own (:meth:`~tuner.run.pipeline.Timeline.report`),
    from its workers' summaries, each with when that worker started (``time.monotonic()``): a worker's
    seconds count from its start, the run's from this process's."""
    ran = [(at, s) for at, s in finished if s.get("trials_run")]
    if not ran:
        return Timeline().report()
    return Timeline(started=started_monotonic(), first_told=min(at + s["first_trial_s"] for at, s in ran),
                    last_told=max(at + s["run_s"] for at, s in ran), told=sum(s["trials_run"] for _, s in ran)).report()


#: ``tuner run --workers N``'s exit code when a worker was killed by a signal (and none failed otherwise)
WORKER_KILLED = 3


def exit_code(codes: list[int]) -> int:
    """The parent's exit code: the first worker's error code (2: bad input), else
    :data:`WORKER_KILLED` if a worker was killed by a signal, else 0. (A killed worker's
    returncode is minus the signal: passed on, the shell would see 256 minus it, e.g. 247.)"""
    errors = [c for c in codes if c > 0]
    if errors:
        return errors[0]
    return WORKER_KILLED if any(c < 0 for c in codes) else 0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def stored_study(name: str, storage: optuna.storages.BaseStorage, url: str) -> optuna.Study:
    """The study the workers filled."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise UserError(f"no study {name!r} in {redact(url)} after the workers ran") from None


def _wait(procs: list[subprocess.Popen], watch: StudyWatch | None) -> list[int]:
    while any(p.poll() is None for p in procs):
        if watch is not None:
            watch.poll()
        time.sleep(0.2)
    if watch is not None:
        watch.finish()
    return [p.returncode for p in procs]


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every worker (it stops as at a Ctrl-C, which it ignores: its trials in flight are failed
    and queued again), then SIGKILL stragglers."""
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        try:
            time.sleep(0.2)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            break
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
