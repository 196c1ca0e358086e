"""Where trials live: one URL picks SQLite (default), Postgres, or an Optuna journal file.

- ``sqlite:///tuner.db`` (the default, a file in the working directory);
- any SQLAlchemy URL, e.g. ``postgresql+psycopg://user@host/db`` (many hosts);
- a path ending in ``.log`` (or ``journal:PATH``): an Optuna journal file, for several
  processes on one host, as optuna-dashboard takes it;
- ``memory``: in-process only, for benchmarks.

Passwords never leave this module unredacted: use :func:`redact` for anything printed.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import optuna
from optuna.storages import InMemoryStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from tuner import procfs
from tuner.errors import TOO_MANY_CLIENTS, UserError, as_user_error, first_line, too_many_clients
from tuner.store import optuna_private
from tuner.store.journal_file import TolerantJournalFile
from tuner.store.liveness import grace_s, heartbeat_s, pid_space
from tuner.store.url import hidden, optuna_template, raw_password, redact, remember, sqlite_file, sqlite_url

DEFAULT_URL = "sqlite:///tuner.db"

def describe_storage(storage: optuna.storages.BaseStorage) -> str:
    """A password-free description of a storage object (for page footers)."""
    if isinstance(storage, RDBStorage):
        return hidden(storage.engine.url.render_as_string(hide_password=False))
    from tuner.store.optuna_private import journal_file

    path = journal_file(storage)
    return f"journal file {path}" if path else type(storage).__name__


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith(".log")


def journal_path(url: str) -> Path:
    return Path(url[len("journal:"):] if url.startswith("journal:") else url)


#: a storage given as a path with one of these endings is a SQLite file (``--storage b.db``)
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def resolve_url(url: str | None) -> str:
    """The storage URL to use (``--storage``, else ``$TUNER_STORAGE``, else the default; a path
    ending .db, .sqlite or .sqlite3 is that SQLite file's URL); its password is hidden from every
    later :func:`redact`."""
    url = url or os.environ.get("TUNER_STORAGE") or DEFAULT_URL
    if "://" not in url and Path(url).suffix in SQLITE_SUFFIXES:
        url = f"sqlite:///{url}"
    remember(url)
    return url


def storage_identity(url: str | None) -> str:
    """The storage a file made from it names (a grid's CSV, a report folder): a file's absolute path
    (``sqlite:///tuner.db`` is another file in each folder it is run from), else its URL, password hidden."""
    url = resolve_url(url)
    path = journal_path(url) if is_journal(url) else sqlite_file(url) if url.startswith("sqlite") else None
    return str(Path(path).resolve()) if path is not None else redact(url)


#: Optuna's RDB schema keeps study names in VARCHAR(512)
MAX_STUDY_NAME = 512
_NAME_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")


#: what ``tuner grid`` stores study NAME as
GRID_SUFFIX = ".grid"
#: what a replay of study NAME is stored as (a GPU run of the same study keeps NAME)
REPLAY_SUFFIX = ".replay"


def stored_as(name: str, names: list[str]) -> str | None:
    """Which of ``names`` (a storage's) holds study ``name``: its GPU run (``name``), else its
    ``tuner grid`` (``NAME.grid``), else its replay (``NAME.replay``); None when none does."""
    return next((c for c in (name, name + GRID_SUFFIX, name + REPLAY_SUFFIX) if c in names), None)


def check_study_name(name: str, where: str = "--study-name") -> str:
    """A study name every storage keeps as given, and that is safe in a file name (``tuner
    grid`` writes NAME.csv): no path separators or control characters, at most 512 characters."""
    if not name or not name.strip():
        raise UserError(f"{where}: a study name cannot be empty")
    if _NAME_FORBIDDEN.search(name) or name in (".", ".."):
        raise UserError(f"{where} {name[:80]!r}: a study name holds no path separators or control characters")
    if len(name) > MAX_STUDY_NAME:
        raise UserError(f"{where}: a study name has at most {MAX_STUDY_NAME} characters, got {len(name)}")
    return name


class OpeningStorage:
    """A run's storage, opened on a thread while the run waits for its GPU worker: the storage's
    modules are imported there, and a new SQLite study file's schema (0.2-0.7 s) is made there,
    aside, in a draft file of this process. Other storages are opened when taken.

    :meth:`take` gives the storage, or raises what opening raised, at the point the run needs it. A
    draft becomes the study file then, unless a file of that name appeared meanwhile (another
    process's: it is opened as it is). :meth:`discard` (a run that failed before taking it) removes
    the draft: a run that fails before it leaves no database behind, and never touches a file another
    process may be using."""

    def __init__(self, url: str | None) -> None:
        self.url = resolve_url(url)
        self._storage: optuna.storages.BaseStorage | None = None
        self._error: BaseException | None = None
        self._draft: tuple[Path, Path] | None = None  # (the schema made aside, the study file it becomes)
        self._done = False
        self._thread = threading.Thread(target=self._open if self.url.startswith("sqlite") else self._import,
                                        name="storage-opening", daemon=True)
        self._thread.start()

    def _import(self) -> None:
        if self.url == "memory" or is_journal(self.url):
            return
        for name in optuna_private.RDB_LAZY_MODULES:
            with contextlib.suppress(ImportError):  # opening the storage then says what is missing
                importlib.import_module(name)

    def _open(self) -> None:
        self._import()
        path = _plain_sqlite_file(self.url)
        if path is not None and not path.exists():
            draft = self._drafted(path)
            self._draft = None if draft is None else (draft, path)
            return  # (without a draft the study file is made when taken, which then says what is wrong)
        try:
            self._storage = open_storage(self.url)
        except BaseException as exc:  # raised again where the run takes the storage
            self._error = exc

    def _drafted(self, path: Path) -> Path | None:
        """A new SQLite file beside ``path`` holding the study schema, or None where one cannot be made."""
        _remove_orphaned_drafts(path)
        try:
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.{_draft_owner()}.", suffix=".new", dir=path.parent)
            os.fchmod(fd, 0o666 & ~_UMASK)  # readable as any file this user makes (mkstemp's is private)
            os.close(fd)  # (an empty file is a new database to SQLite)
        except OSError:  # a folder that cannot be written
            return None
        draft = Path(name)
        try:
            made = open_storage(_sqlite_url_of(self.url, draft))
            if isinstance(made, RDBStorage):
                made.engine.dispose()  # (the last connection's close empties its write-ahead log)
            if not Path(f"{draft}-wal").exists():
                return draft
        except Exception:
            pass
        _remove_sqlite_file(draft)
        return None

    def open_now(self) -> None:
        """Open the storage without taking it, or raise what opening raises: a storage that refuses
        is said before long work whose results it would keep (``tuner grid``'s compiles up front)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._storage is None and self._draft is None:
            self._storage = open_storage(self.url)

    def take(self) -> optuna.storages.BaseStorage:
        self._thread.join()
        self._done = True
        if self._draft is not None:
            draft, path = self._draft
            # atomic, and never over a file: one another process made meanwhile is kept as it is (and
            # where the file system has no links, the study file is made below as without a draft)
            with contextlib.suppress(OSError):
                os.link(draft, path)
            _remove_sqlite_file(draft)
        if self._error is not None:
            raise self._error
        return self._storage if self._storage is not None else open_storage(self.url)

    def discard(self) -> None:
        """The run ends without having taken the storage (nothing if it took it)."""
        if self._done:
            return
        self._done = True
        self._thread.join()
        if self._draft is not None:
            _remove_sqlite_file(self._draft[0])
        if isinstance(self._storage, RDBStorage):
            self._storage.engine.dispose()


def _pid_space_tag() -> str:
    return hashlib.sha256(pid_space().encode()).hexdigest()[:8]


def _draft_owner() -> str:
    """This process, in its drafts' names: its PID space (hashed) and PID."""
    return f"{_pid_space_tag()}-{os.getpid()}"


def _remove_orphaned_drafts(path: Path) -> None:
    """Remove the drafts of ``path`` whose process died before taking them (killed while its worker
    started). Only a process of this PID space can be judged; any other draft is kept."""
    if not pid_space():
        return
    named = re.compile(rf"\.{re.escape(path.name)}\.{_pid_space_tag()}-(\d+)\.[^.]+\.new")
    with contextlib.suppress(OSError):
        for draft in path.parent.glob(f".{glob.escape(path.name)}.*.new"):
            owner = named.fullmatch(draft.name)
            if owner and not procfs.alive(int(owner.group(1))):
                _remove_sqlite_file(draft)


def _plain_sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL that names one plainly (no ``file:`` URI, no ``?mode=``), else None."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
        path = sqlite_file(url)
    except Exception:
        return None
    if path is None or parsed.query or str(parsed.database).startswith("file:"):
        return None
    return path


def _sqlite_url_of(url: str, path: Path) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=str(path)).render_as_string(hide_password=False)


def _read_umask() -> int:
    """This process's file mode creation mask (read by setting it, put back at once: done on import,
    before the threads that make files start)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _remove_sqlite_file(path: Path) -> None:
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        with contextlib.suppress(OSError):
            name.unlink()


def _check_driver(url: str) -> None:
    """A scheme SQLAlchemy does not know, or a database driver not installed, fails here in words
    (not as a server that does not answer)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        dialect = make_url(url).get_dialect()
        dialect.import_dbapi()
    except (NoSuchModuleError, ArgumentError):
        scheme = url.split("://", 1)[0]
        raise UserError(f"storage {redact(url)}: {scheme!r} is no database SQLAlchemy knows: use "
                        "postgresql+psycopg://USER@HOST/DB, sqlite:///FILE.db, or FILE.log") from None
    except ValueError:  # a port that is no number: often a password whose "@" was left out
        raise UserError(f"storage {redact(url)}: its port is not a number (if that is a password, an at sign goes "
                        "between it and the host)") from None
    except ImportError as exc:
        fix = f"install the Python module {exc.name}"
        if exc.name == "psycopg":
            fix = "pip install -e '.[postgres]'"
        elif url.startswith("postgres"):  # postgresql:// is psycopg2's in SQLAlchemy; the postgres extra brings psycopg 3
            fix = f"write postgresql+psycopg:// (the postgres extra: pip install -e '.[postgres]'), or {fix}"
        raise UserError(f"storage {redact(url)}: its database driver ({exc.name}) is not installed: {fix}") from None


def open_storage(url: str | None = None, pool_size: int = 2, create: bool = True) -> optuna.storages.BaseStorage:
    """Open the storage ``url`` names; one-line error if it can't. ``create=False``: only an
    existing one (commands that read must not leave an empty database behind)."""
    url = resolve_url(url)
    if url == "memory":  # for benchmarks and tests: nothing persists
        return InMemoryStorage()
    if is_journal(url):
        return _open_journal(journal_path(url), create)
    if "://" not in url:
        raise UserError(
            f"storage {redact(url)!r} is not a URL: use sqlite:///FILE.db, postgresql+psycopg://USER@HOST/DB, or FILE.log"
        )
    if "@" in (raw_password(url) or ""):  # the driver would take the password's tail for the host
        raise UserError(f"storage {redact(url)}: the password contains '@': write it percent-encoded, as %40")
    _check_driver(url)
    read_only = False
    if url.startswith("sqlite"):
        _check_sqlite_file(url, create)
        read_only = sqlite_read_only(url, create)
        url = sqlite_url(url)  # ?mode=ro reaches SQLite
        read_only = read_only or "mode=ro" in url  # (then no write-ahead-log pragma either)
    engine_kwargs: dict = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": 60}
        if read_only:
            engine_kwargs["creator"] = _sqlite_reader(url)
    else:
        # Bounded pools: N workers x (pool + overflow) must stay under max_connections.
        engine_kwargs.update(pool_size=pool_size, max_overflow=1, pool_recycle=300)
        engine_kwargs.update(server_timeouts(url))
    for attempt in range(4):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = RDBStorage(
                    optuna_template(url),
                    engine_kwargs=engine_kwargs,
                    # the lease of tuner.store.liveness; its rule fails and re-queues stale trials
                    heartbeat_interval=heartbeat_s(),
                    grace_period=grace_s(),
                )
            if url.startswith("sqlite") and not read_only:
                _sqlite_wal(storage.engine)
            return storage
        except Exception as exc:
            # Several processes creating one new database's schema at once collide
            # ("table already exists", "database is locked"): the loser retries.
            if attempt < 3 and _transient(exc):
                time.sleep(0.5 * (attempt + 1))
                continue
            hint = "is the server up and the URL right?"
            if "does not exist" in str(exc).lower():  # the server answered: no such database or role
                hint = "the server is up; create that database (or user), or name one it has"
            elif "?" in url and ("invalid" in str(exc).lower() or "bad value" in str(exc).lower()):  # an option the URL sets
                hint = "a setting in the URL's ?query is not one the server takes"
            elif "timeout" in str(exc).lower():
                hint = (f"the server did not answer within {connect_timeout_s()} s: is it up and the URL right? "
                        "(TUNER_DB_CONNECT_TIMEOUT_S sets the limit)")
            if too_many_clients(str(exc)):
                hint = TOO_MANY_CLIENTS
            elif url.startswith("sqlite"):
                known = as_user_error(exc)
                if known is not None and "storage error:" not in str(known):  # read-only, disk full, damaged
                    raise UserError(f"cannot open storage {redact(url)}: {known}") from None
                path = sqlite_file(url)
                hint = ("is it a SQLite file written by tuner/optuna (not damaged)? move it aside to start afresh"
                        if path is not None and path.exists() else
                        f"no file could be made there: is folder {path.parent if path else '?'} writable?")
            raise UserError(f"cannot open storage {redact(url)}: {type(exc).__name__}: {redact(first_line(exc))}; {hint}") from None
    raise AssertionError("unreachable")


def connect_timeout_s() -> int:
    """Seconds to wait for a database server to accept a session (``$TUNER_DB_CONNECT_TIMEOUT_S``)."""
    return _env_seconds("TUNER_DB_CONNECT_TIMEOUT_S", 10)


def statement_timeout_s() -> int:
    """Seconds a server may spend on one statement (``$TUNER_DB_STATEMENT_TIMEOUT_S``)."""
    return _env_seconds("TUNER_DB_STATEMENT_TIMEOUT_S", 120)


def _env_seconds(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        raise UserError(f"{name}={os.environ[name]!r}: give a whole number of seconds") from None
    if value <= 0:
        raise UserError(f"{name}={value}: give a positive number of seconds")
    return value


def server_timeouts(url: str) -> dict:
    """Engine arguments that bound a Postgres session: a server that accepts and never answers
    fails the command after the connect timeout instead of hanging it; a statement stuck on a
    lock fails after the statement timeout. Settings the URL gives itself are kept."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return {}
    args: dict = {}
    if "connect_timeout" not in parsed.query:
        args["connect_timeout"] = max(2, connect_timeout_s())  # libpq's least
    if "options" not in parsed.query:
        args["options"] = f"-c statement_timeout={statement_timeout_s() * 1000}"
    return {"connect_args": args} if args else {}


def sqlite_read_only(url: str, create: bool) -> bool:
    """Open an existing SQLite file for reading only? For commands that read (``create=False``)
    when the file or its folder cannot be written (a read-only mount, an archive): such a file
    is not damaged. A command that writes gets one line saying so. A reading command never
    writes a schema into an existing empty file."""

    path = sqlite_file(url)
    if path is None or not path.is_file():
        return False
    if not create and path.stat().st_size == 0:
        raise UserError(f"SQLite file {path} is empty: no studies in it yet; give the --storage a run wrote")
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    if writable:
        return False
    if create:
        raise UserError(f"SQLite file {path} is read-only (or its folder is): `tuner run` and `tuner confirm` store in it; "
                        "make both writable, or give another --storage (status, best, export and report read it as it is)")
    return True


def _sqlite_reader(url: str):
    """A connection factory that opens the file read-only (SQLite's URI ``mode=ro``; where the
    folder is read-only too and no write-ahead log is pending, ``immutable=1``: no lock files)."""
    import sqlite3
    from urllib.parse import quote


    path = (sqlite_file(url) or Path()).resolve()
    wal = path.with_name(path.name + "-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    flags = "immutable=1" if not os.access(path.parent, os.W_OK) and not pending else "mode=ro"
    target = f"file:{quote(str(path))}?{flags}"
    return lambda: sqlite3.connect(target, uri=True, timeout=60, check_same_thread=False)


def _open_journal(path: Path, create: bool) -> optuna.storages.BaseStorage:
    folder = path.parent
    if not path.exists():
        if not create:
            raise UserError(f"no journal file {path}: give the --storage a run wrote, or run `tuner run` first")
        if not folder.is_dir():
            raise UserError(f"journal file {path}: folder {folder} does not exist")
    if path.is_dir():
        raise UserError(f"journal file {path} is a folder: give a file name ending in .log")
    # Optuna's lock files live beside the journal: even reading needs the folder writable
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.R_OK | os.W_OK)):
        raise UserError(f"journal file {path} is not writable (folder {folder}): give a path in a folder you can write")
    try:
        backend = TolerantJournalFile(str(path))  # a damaged line is skipped and reported, not fatal
        storage = JournalStorage(backend)  # reads the whole file (a partial last line waits to be whole)
        if backend.foreign:  # another file given by mistake: left as it is
            raise UserError(f"journal file {path} cannot be read: not one line of it is a journal record; "
                            "is it another file? move it aside to start afresh")
        _repair_partial_tail(backend, path)
        return storage
    except UserError:
        raise
    except PermissionError as exc:
        raise UserError(f"journal file {path} is not writable ({exc.strerror}): give a path in a folder you can write") from None
    except Exception as exc:  # a corrupt or foreign file
        raise UserError(
            f"journal file {path} cannot be read ({type(exc).__name__}: {redact(first_line(exc))}); "
            "move it aside to start afresh"
        ) from None


def _check_sqlite_file(url: str, create: bool) -> None:
    """Refuse an in-memory database (nothing would be kept, and every worker thread would see
    another one), a missing file when reading, and another application's database."""
    try:
        path = sqlite_file(url)
    except Exception as exc:
        raise UserError(f"storage {redact(url)!r} is not a valid URL ({redact(first_line(exc))}): use sqlite:///FILE.db") from None
    if path is None or "mode=memory" in url:
        raise UserError(f"storage {redact(url)} is an in-memory database: nothing would be kept; use sqlite:///FILE.db")
    if not path.exists():
        if not create:
            raise UserError(f"no SQLite database {path}: give the --storage a run wrote, or run `tuner run` first")
        if not path.parent.is_dir():
            raise UserError(f"SQLite database {path}: folder {path.parent} does not exist")
        return
    if path.is_dir():
        raise UserError(f"SQLite database {path} is a folder: give a file name, e.g. sqlite:///{path}/tuner.db")
    tables = _sqlite_tables(path)
    if tables and "studies" not in tables:
        shown = ", ".join(sorted(tables)[:5])
        raise UserError(f"SQLite file {path} belongs to another application (tables {shown}): give a new file for the tuner")


def _sqlite_tables(path: Path) -> set[str]:
    """The table names of SQLite file ``path``, read-only (empty if it is not readable as SQLite:
    opening it then reports that)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as conn:
            return {name for (name,) in conn.execute("select name from sqlite_master where type = 'table'")}
    except sqlite3.Error:
        return set()


def _sqlite_wal(engine) -> None:
    """Write-ahead log, synced at checkpoints: a trial's ~20 attribute writes do not wait
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


#: from this many trials on, a SQLite study file's query planner is told the tables' sizes
PLANNER_STATISTICS_FROM = 64


def give_planner_statistics(storage: optuna.storages.BaseStorage) -> None:
    """``ANALYZE`` a SQLite study file, sampled (``analysis_limit``: a few ms at any size).

    Without statistics SQLite takes the index on ``trials.study_id`` for a selective one and
    serves Optuna's sync query (``study_id = ? AND (trial_id IN (...) OR trial_id > ?)``, run
    several times a trial) by scanning every trial of the study: 0.16 ms at 2,000 trials, and
    growing. With them it looks the trials up by id (0.006 ms). Other storages plan for
    themselves; a file that cannot be written keeps the slower plan."""
    import sqlalchemy

    if not isinstance(storage, RDBStorage) or storage.engine.dialect.name != "sqlite":
        return
    try:
        with storage.engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA analysis_limit = 1000")
            connection.exec_driver_sql("ANALYZE")
            connection.commit()
    except sqlalchemy.exc.OperationalError:  # read-only, or busy past the timeout
        pass


def _ends_whole(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _repair_partial_tail(backend: JournalFileBackend, path: Path) -> None:
    """Move a partial last record (a writer died mid-line) aside, under the journal's lock.

    Optuna skips such a line when reading but appends the next record right after it,
    which merges both into one bad line and makes the whole file unreadable from then on.
    """
    if not path.is_file() or path.stat().st_size == 0 or _ends_whole(path):
        return  # (the lock only where there is something to repair: a stale lock file stalls whoever takes it)
    from tuner.store.optuna_private import journal_lock

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


def check_workers(url: str | None, workers: int, joining: bool = False) -> None:
    """SQLite serialises writers and locks under load: refuse it for several workers, and for a
    worker that joins (``joining``: ``tuner worker``, a second writer by its purpose)."""
    if (workers > 1 or joining) and resolve_url(url).startswith("sqlite"):
        given = "" if url else f" (no --storage: the default {DEFAULT_URL})"
        raise UserError(
            f"SQLite cannot be shared safely by several workers (writers lock each other out){given}: "
            "use --storage FILE.log (one host) or --storage postgresql+psycopg://USER@HOST/DB (many hosts)"
        )
