"""optuna-dashboard on a tuner storage.

:func:`run_dashboard` serves optuna-dashboard on the same storage the tuner writes (SQLite
or Postgres URL, or a journal ``.log`` file), optionally with the artifact store where
the engine keeps compile logs. Study notes and artifacts are written by the engine
(:mod:`tuner.store.notes`); this module only shows them.

How "best" is chosen: optuna-dashboard asks the storage for its best trial
(``storage.get_best_trial``), which looks at COMPLETE trials only and does *not* read
Optuna's ``constraints`` system attribute (constraints only change the colour of a
trial in some plots). The tuner therefore never stores an invalid configuration as
COMPLETE: every failure status is a PRUNED trial without a value (or FAIL for a killed
process), so it can never be "best" in either view.
"""

from __future__ import annotations

import os

from optuna.storages import BaseStorage

from tuner.errors import UserError
from tuner.store.notes import artifact_store
from tuner.store.storage import describe_storage, open_storage
from tuner.store.url import redact

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def run_dashboard(storage_url: str | BaseStorage, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                  artifact_dir: str | os.PathLike | None = None, quiet: bool = False) -> None:
    """Serve optuna-dashboard on ``storage_url`` until interrupted (blocks).

    ``storage_url`` is a SQLAlchemy URL (``sqlite:///tuner.db``,
    ``postgresql+psycopg://user@host/db``), a journal ``.log`` file path, or an Optuna
    storage object. With ``artifact_dir`` the trials' artifacts can be viewed.
    """
    try:
        import optuna_dashboard
    except ImportError:
        raise UserError("tuner dashboard needs optuna-dashboard: pip install -e '.[dashboard]'") from None

    storage = storage_url if isinstance(storage_url, BaseStorage) else open_storage(storage_url)
    store = artifact_store(artifact_dir) if artifact_dir else None
    _check_address(host, port)
    label = describe_storage(storage) if not isinstance(storage_url, str) else redact(storage_url)
    if not quiet:
        shown = "localhost" if host in ("127.0.0.1", "::1") else host
        print(f"optuna-dashboard on http://{shown}:{port}/dashboard  (storage: {label}"
              + (f", artifacts: {artifact_dir}" if artifact_dir else "") + "); Ctrl-C stops it", flush=True)
    try:
        optuna_dashboard.run_server(storage, host=host, port=port, artifact_store=store)
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # taken meanwhile
        raise UserError(_address_error(host, port, exc)) from None


def _check_address(host: str, port: int) -> None:
    """Refuse an address the server could not listen on (a port in use, a host not of this machine)
    before saying where the dashboard is."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(_address_error(host, port, exc)) from None
    family, kind, _, _, address = infos[0]
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise UserError(_address_error(host, port, exc)) from None


def _address_error(host: str, port: int, exc: OSError) -> str:
    return (f"cannot serve on --host {host} --port {port}: {exc.strerror or exc}: give another --port "
            "(or --host: an address of this machine)")
