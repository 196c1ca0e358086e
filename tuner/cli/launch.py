"""The ``tuner`` command's entry: the GPU worker starts before the command line's own imports.

A GPU run's first trial waits for the worker (a fresh process that initialises CUDA and builds
the inputs), and the command line imports Optuna, SQLAlchemy and the samplers first (most of a
second on a GPU host). So when the arguments ask for a measured run, the worker is spawned
here, from a module that imports only the standard library and the supervisor, and it
initialises CUDA while the rest loads; so does the forkserver of the compile processes
(:func:`tuner.lifetime.start_helpers`), and the reference config's build
(:mod:`tuner.run.early_build`). The arguments are only peeked at: a wrong guess costs a worker
that is stopped unused, never a wrong run (the command line parses them properly).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tuner.device.supervisor import Supervisor
from tuner.lifetime import children_skip_user_main, ctrl_c_ignored, start_helpers, stop_helpers
from tuner.run.early_build import EarlyBuild


def runs_on_the_gpu(argv: Sequence[str]) -> bool:
    """Will ``tuner ARGV`` measure on this host with one worker (``tuner run STUDY``)?"""
    if not argv or argv[0] != "run" or len(argv) < 2:
        return False
    for index, arg in enumerate(argv[1:], start=1):
        flag, _, inline = arg.partition("=")
        if flag in ("-h", "--help", "--replay"):
            return False
        if flag == "--workers":
            value = inline or (argv[index + 1] if index + 1 < len(argv) else "")
            if value.strip() != "1":
                return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    worker, early_build = None, None
    # the `tuner` script is imported again by no child (the worker, the compile helpers)
    with children_skip_user_main():
        try:
            if runs_on_the_gpu(argv):
                start_helpers()  # (first: started while this process has no other thread to take a Ctrl-C)
                worker = Supervisor.from_env()
                worker.start_soon()
                early_build = EarlyBuild.for_run(argv)
            from tuner.cli.commands import main as cli_main

            return cli_main(argv, worker=worker, early_build=early_build)
        except KeyboardInterrupt:  # a Ctrl-C while the command starts: nothing was stored yet
            print("tuner: interrupted", file=sys.stderr)
            return 130
        finally:
            with ctrl_c_ignored():  # the command is over: a second Ctrl-C has nothing left to stop
                if worker is not None:  # stopped by the run unless it never got that far (bad input, --help)
                    worker.discard()
                stop_helpers()  # work nobody will read (the early build's enumeration, say) does not hold the exit up
