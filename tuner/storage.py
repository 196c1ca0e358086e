"""Where trials live: one URL picks SQLite (default), Postgres, or an Optuna journal file.

- ``sqlite:///tuner.db`` (the default, a file in the working directory);
- any SQLAlchemy URL, e.g. ``postgresql+psycopg://user@host/db`` (many hosts);
- a path ending in ``.log`` (or ``journal:PATH``): an Optuna journal file, for several
  processes on one host, as optuna-dashboard takes it;
- ``memory``: in-process only, for benchmarks.

Passwords never leave this module unredacted: use :func:`redact` for anything printed.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from pathlib import Path

import optuna
import warnings

from optuna.storages import InMemoryStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from tuner.errors import UserError
from tuner.optuna_private import fail_trial

DEFAULT_URL = "sqlite:///tuner.db"
HEARTBEAT_S = 20
GRACE_S = 60
MAX_RETRY = 2

_PASSWORD = re.compile(r"(://[^:/@\s]+:)([^@\s]*)(@)")
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&\s]*")


def redact(text: str) -> str:
    """Hide the password of every URL in ``text`` (``user:***@host``, ``?password=***``)."""
    return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1***\3", str(text)))


def describe_storage(storage: optuna.storages.BaseStorage) -> str:
    """A password-free description of a storage object (for page footers)."""
    if isinstance(storage, RDBStorage):
        return storage.engine.url.render_as_string(hide_password=True)
    from tuner.optuna_private import journal_file

    path = journal_file(storage)
    return f"journal file {path}" if path else type(storage).__name__


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith(".log")


def journal_path(url: str) -> Path:
    return Path(url[len("journal:"):] if url.startswith("journal:") else url)


def resolve_url(url: str | None) -> str:
    return url or os.environ.get("TUNER_STORAGE") or DEFAULT_URL


def open_storage(url: str | None = None, pool_size: int = 2) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the storage ``url`` names; one-line error if it can't."""
    url = resolve_url(url)
    if url == "memory":  # for benchmarks and tests: nothing persists
        return InMemoryStorage()
    if is_journal(url):
        path = journal_path(url)
        if path.parent and not path.parent.exists():
            raise UserError(f"journal file {path}: folder {path.parent} does not exist")
        try:
            backend = JournalFileBackend(str(path))
            _repair_partial_tail(backend, path)
            return JournalStorage(backend)
        except UserError:
            raise
        except Exception as exc:  # a corrupt or foreign file
            raise UserError(
                f"journal file {path} cannot be read ({type(exc).__name__}: {_first_line(exc)}); "
                "move it aside to start afresh, or fix its last line"
            ) from None
    if "://" not in url:
        raise UserError(
            f"storage {redact(url)!r} is not a URL: use sqlite:///FILE.db, postgresql+psycopg://USER@HOST/DB, or FILE.log"
        )
    engine_kwargs: dict = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        # Bounded pools: N workers x (pool + overflow) must stay under max_connections.
        engine_kwargs.update(pool_size=pool_size, max_overflow=1, pool_recycle=300)
    for attempt in range(4):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=GRACE_S,
                    heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY),
                )
            if url.startswith("sqlite"):
                _sqlite_wal(storage.engine)
            return storage
        except Exception as exc:
            # Several processes creating one new database's schema at once collide
            # ("table already exists", "database is locked"): the loser retries.
            if attempt < 3 and _transient(exc):
                time.sleep(0.5 * (attempt + 1))
                continue
            hint = "is the server up and the URL right?"
            if url.startswith("sqlite"):
                hint = "is it a SQLite file written by tuner/optuna (not corrupted)? move it aside to start afresh"
            raise UserError(f"cannot open storage {redact(url)}: {type(exc).__name__}: {_first_line(exc)}; {hint}") from None
    raise AssertionError("unreachable")


def _sqlite_wal(engine) -> None:
    """Write-ahead log, synced at checkpoints: a trial's ~20 attribute writes no longer wait
    for an fsync each (the loop's largest cost on SQLite). A killed process loses nothing
    committed; a power cut at most the last commits, never the file's consistency."""
    import sqlalchemy

    def on_connect(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    sqlalchemy.event.listen(engine, "connect", on_connect)
    engine.dispose()  # pooled connections were opened before the listener


def _repair_partial_tail(backend: JournalFileBackend, path: Path) -> None:
    """Move a partial last record (a writer died mid-line) aside, under the journal's lock.

    Optuna skips such a line when reading but appends the next record right after it,
    which merges both into one bad line and makes the whole file unreadable from then on.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    from tuner.optuna_private import journal_lock

    with journal_lock(backend):
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return
            start = size
            while start > 0:  # find the end of the last complete line
                step = min(65536, start)
                f.seek(start - step)
                chunk = f.read(step)
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    start = start - step + nl + 1
                    break
                start -= step
            f.seek(start)
            tail = f.read()
            side = path.with_name(f"{path.name}.partial-{int(time.time())}")
            side.write_bytes(tail)
            f.truncate(start)
            f.flush()
            os.fsync(f.fileno())
    print(f"tuner: journal file {path} ended with a partial record ({len(tail)} bytes, a writer died mid-write): "
          f"moved to {side}", file=sys.stderr)


def _transient(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("already exists", "database is locked", "duplicate key", "unique constraint"))


def _first_line(exc: BaseException) -> str:
    text = redact(str(exc)).strip().splitlines()
    return text[0][:200] if text else ""


def supports_heartbeat(storage) -> bool:
    return isinstance(storage, RDBStorage)


def check_workers(url: str, workers: int) -> None:
    """SQLite serialises writers and locks under load: refuse it for several workers."""
    if workers > 1 and resolve_url(url).startswith("sqlite"):
        raise UserError(
            "SQLite cannot be shared safely by several workers (writers lock each other out): "
            "use --storage FILE.log (one host) or --storage postgresql+psycopg://USER@HOST/DB (many hosts)"
        )


# -- who runs a trial, so that a dead runner's trial can be found -------------------------

HOST_ATTR = "runner_host"
PID_ATTR = "runner_pid"


def mark_runner(trial: optuna.Trial) -> None:
    trial.set_user_attr(HOST_ATTR, socket.gethostname())
    trial.set_user_attr(PID_ATTR, os.getpid())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def runner_dead(trial) -> bool:
    """True when ``trial``'s runner is a process on this host that no longer exists."""
    pid = trial.user_attrs.get(PID_ATTR)
    return (trial.user_attrs.get(HOST_ATTR) == socket.gethostname() and isinstance(pid, int)
            and pid != os.getpid() and not _pid_alive(pid))


def recover_stale_trials(study: optuna.Study, mine: bool = False, why: str = "storage connection lost mid-trial") -> list[int]:
    """Fail the RUNNING trials whose runner on this host is dead, and queue them again.

    Optuna's heartbeat does this for RDB storages after a grace period; this does it at
    once for trials we can prove dead (same host, process gone), and for journal
    storages, which have no heartbeat.
    """
    host = socket.gethostname()
    requeued = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.user_attrs.get(HOST_ATTR) != host:
            continue
        pid = trial.user_attrs.get(PID_ATTR)
        if mine:  # this process lost the storage mid-trial: its own RUNNING trial is stale
            if pid != os.getpid():
                continue
        elif not isinstance(pid, int) or pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            fail_trial(study, trial, {"status": "killed", "reason": why if mine else f"runner pid {pid} died mid-trial"})
        except optuna.exceptions.UpdateFinishedTrialError:  # another process got there first
            continue
        if trial.params:
            study.enqueue_trial(trial.params, user_attrs={"requeued_from": trial.number}, skip_if_exists=False)
        requeued.append(trial.number)
    return requeued
