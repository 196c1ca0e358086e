"""Run `tuner` and SIGKILL the run itself at one point of a trial's life (the kill-point tests).

    [KILL_AT_SIGNAL=SIGINT] python tests/kill_at.py POINT N tuner-args...

POINT names the step, N the how-manieth time the run reaches it; the process then sends itself
SIGKILL (or the signal named by KILL_AT_SIGNAL: SIGINT is a Ctrl-C), as `kill` from outside
would at that moment, without a timing race. With KILL_AT_PAUSE=FILE it writes FILE instead and
waits there (its other threads, the lease's heartbeat, go on) until FILE is removed, or until a
test kills it:

- ``ask``: a trial was created (runner recorded) and nothing sampled yet;
- ``sample``: the sampler chose some of a trial's params and is choosing the next;
- ``admit``: a trial's config is stored, and the run checks it is within the study's budget;
- ``compile``: the run waits for a config's CUBIN;
- ``measure``: the worker measures a trial (the job sent, its result not back);
- ``record``: a trial's result attributes are stored and its state is not;
- ``tell``: a trial's state is being written.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

SIGNAL = getattr(signal, os.environ.get("KILL_AT_SIGNAL", "SIGKILL"))
PAUSE = os.environ.get("KILL_AT_PAUSE")


def _stop_here() -> None:
    if not PAUSE:
        os.kill(os.getpid(), SIGNAL)
        return
    with open(PAUSE, "w") as f:
        f.write(str(os.getpid()))
    while os.path.exists(PAUSE):  # the test removes it to let this run go on
        time.sleep(0.05)


def _kill_on(n: int, before: bool = True) -> Callable[[Callable], Callable]:
    calls = 0

    def wrap(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if before and calls == n:
                _stop_here()
            try:
                return function(*args, **kwargs)
            finally:  # after the step, whether it returned or raised (a pruned trial)
                if not before and calls == n:
                    _stop_here()
        return wrapper
    return wrap


def install(point: str, n: int) -> None:
    import optuna

    from tuner.compile import nvrtc as compile_module
    from tuner.device import supervisor
    from tuner.run import objective, pipeline, runner
    from tuner.store import optuna_private

    if point == "ask":
        pipeline.ask_with_user_attrs = _kill_on(n, before=False)(optuna_private.ask_with_user_attrs)
    elif point == "sample":
        _kill_at_second_param(n)
    elif point == "admit":
        make_admits = runner.Runner._admits
        runner.Runner._admits = lambda self, *args: _kill_on(n)(make_admits(self, *args))  # type: ignore[method-assign]
    elif point == "compile":
        compile_module.CompilePool.result = _kill_on(n)(compile_module.CompilePool.result)
    elif point == "measure":
        supervisor.Supervisor.measure = _kill_on(n)(supervisor.Supervisor.measure)
    elif point == "record":
        objective.Objective.record = _kill_on(n, before=False)(objective.Objective.record)
    elif point == "tell":
        optuna.Study.tell = _kill_on(n)(optuna.Study.tell)
    else:
        raise SystemExit(f"unknown kill point {point!r}")


def _kill_at_second_param(n: int) -> None:
    """Kill as trial n's second param is chosen: its first param is stored, the rest are not."""
    import optuna

    original = optuna.Trial.suggest_categorical
    seen: dict[int, int] = {}

    def suggest_categorical(self: Any, name: str, choices: Any) -> Any:
        seen[self.number] = seen.get(self.number, 0) + 1
        if len(seen) == n and seen[self.number] == 2:
            os.kill(os.getpid(), SIGNAL)
        return original(self, name, choices)

    optuna.Trial.suggest_categorical = suggest_categorical  # type: ignore[method-assign]


if __name__ == "__main__":
    install(sys.argv[1], int(sys.argv[2]))
    from tuner.cli.commands import main

    sys.exit(main(sys.argv[3:]))
