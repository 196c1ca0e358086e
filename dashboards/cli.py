"""``tuner report`` and ``tuner dashboard``: the two views over a tuner storage.

:func:`register` is this package's ``tuner.commands`` entry point (pyproject.toml): the
tuner's CLI finds it there and calls it with its subparsers, without importing this
package by name. ``python -m dashboards`` runs the same two commands on their own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tuner.errors import UserError
from tuner.store.storage import DEFAULT_URL, open_storage, resolve_url
from tuner.store.url import redact


def cmd_report(args: argparse.Namespace) -> int:
    from dashboards.report import write_report

    url = resolve_url(args.storage)
    names = args.studies if args.studies else None
    before = (Path(args.out) / "index.html").exists()
    paths = write_report(url, args.out, study_names=names, force=args.force)
    done = "wrote" if not before else "replaced the report with" if args.force else "updated"
    studies = len(paths) - 1
    what = f"the index and {studies} study page{'s' * (studies != 1)}" if studies else "the index (no study there yet)"
    print(f"{done} {what} in {Path(args.out)}/ from {redact(url)}; open {paths[0]}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    import optuna

    from dashboards.serve import run_dashboard
    from tuner.store.notes import write_study_note

    url = resolve_url(args.storage)
    if args.port < 0 or args.port > 65535:
        raise UserError(f"--port {args.port} is not a TCP port (0-65535)")
    storage = open_storage(url, create=False)  # viewing never makes an empty database
    if args.notes:
        for name in optuna.get_all_study_names(storage):
            write_study_note(optuna.load_study(study_name=name, storage=storage), url)
    run_dashboard(storage, host=args.host, port=args.port, artifact_dir=args.artifacts)
    return 0


def register(subparsers: Any) -> None:
    """Add ``report`` and ``dashboard`` to the tuner CLI's ``add_subparsers()`` object."""
    storage_help = (f"storage URL: sqlite:///FILE.db, postgresql+psycopg://USER@HOST/DB or a journal "
                    f"FILE.log (default: $TUNER_STORAGE or {DEFAULT_URL})")
    rep = subparsers.add_parser(
        "report", help="write self-contained Plotly HTML reports of studies",
        description="Write index.html (all studies, shapes side by side) and one page per study "
                    "into DIR; plotly.js is embedded, so the pages open offline.")
    rep.add_argument("--storage", metavar="URL", help=storage_help)
    which = rep.add_mutually_exclusive_group()
    which.add_argument("--study", dest="studies", action="append", metavar="NAME",
                       help="report this study (repeatable); default: all studies")
    which.add_argument("--all", action="store_true", help="report every study (the default)")
    rep.add_argument("-o", "--out", metavar="DIR", required=True, help="output folder (created)")
    rep.add_argument("--force", action="store_true",
                     help="replace the report of another storage in DIR (a report of the same storage is updated)")
    rep.set_defaults(func=cmd_report)

    dash = subparsers.add_parser(
        "dashboard", help="serve optuna-dashboard on the tuner's storage",
        description="Start optuna-dashboard on the same storage the tuner writes; Ctrl-C stops it.")
    dash.add_argument("--storage", metavar="URL", help=storage_help)
    dash.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    dash.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    dash.add_argument("--artifacts", metavar="DIR",
                      help="artifact folder (compile logs, ptxas output) to show with the trials")
    dash.add_argument("--notes", action="store_true",
                      help="(re)write every study's note (problem, device, best flags) before serving")
    dash.set_defaults(func=cmd_dashboard)


def main(argv: list[str] | None = None) -> int:
    """``python -m dashboards report|dashboard ...`` (the same commands as ``tuner``)."""
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # as tuner's: the report says what it wrote
    try:
        return args.func(args)
    except UserError as exc:
        from tuner.table import printable

        print(f"error: {printable(redact(str(exc)))}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
