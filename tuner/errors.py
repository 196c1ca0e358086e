"""Errors that reach the user as one line and exit code 2."""

from __future__ import annotations

import errno
import json
import os
import zlib
from pathlib import Path


class UserError(Exception):
    """Bad input: the message says what to fix. Printed without a traceback."""

    exit_code = 2

    def _render_traceback_(self) -> list[str]:
        """IPython and Jupyter show it as the command prints it: one line, none of our frames."""
        return [f"{type(self).__name__}: {self}"]


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a Ctrl-C (or SIGTERM) unwound the program: an
    interruption, whatever broke on the way out (say, a storage's lock file)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False


def as_user_error(exc: BaseException) -> UserError | None:
    """The one-line error for an exception that bad input or the environment causes (a file
    that cannot be written, a database that refuses, bytes that do not parse), else None: the
    places that know more (the file, the key) raise :class:`UserError` themselves first."""

    if isinstance(exc, UserError):
        return exc
    database = _database_cause(exc)
    if database is not None:
        return UserError(_database_message(database))
    if isinstance(exc, OSError) and exc.errno is not None:
        where = exc.filename or ""
        what = _OS_HINTS.get(exc.errno, "")
        return UserError(f"{where}: {exc.strerror}{what}" if where else f"{exc.strerror}{what}")
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError, zlib.error, EOFError)):
        return UserError(f"unreadable data ({type(exc).__name__}: {first_line(exc)})")
    return None


def _database_cause(exc: BaseException) -> BaseException | None:
    """The database's own error behind ``exc``: SQLAlchemy's, or the driver's, also where
    Optuna wraps it (``StorageInternalError ... from e``)."""
    import sqlite3

    import sqlalchemy.exc

    seen: BaseException | None = exc
    for _ in range(5):
        if isinstance(seen, (sqlalchemy.exc.SQLAlchemyError, sqlite3.Error)):
            return seen
        if seen is None:
            return None
        seen = seen.__cause__
    return None


_OS_HINTS = {
    errno.EACCES: ": give a path you can write",
    errno.EPERM: ": give a path you can write",
    errno.EROFS: ": the file system is read-only; give another path",
    errno.ENOSPC: ": free some space or give another path",
    errno.ENOENT: ": check the path",
    errno.ENOTDIR: ": a part of the path is a file, not a folder",
    errno.EISDIR: ": give a file name, not a folder",
}


#: what to do when a database server refuses another connection
TOO_MANY_CLIENTS = ("the database server has too many clients already: close other sessions, run fewer workers, "
                    "or raise its max_connections")


def too_many_clients(message: str) -> bool:
    """Is ``message`` a server's refusal of another connection (PostgreSQL's two wordings)?"""
    lower = message.lower()
    return "too many clients" in lower or "remaining connection slots" in lower


def _database_message(exc: BaseException) -> str:
    text = first_line(getattr(exc, "orig", None) or exc)
    lower = text.lower()
    if too_many_clients(text):
        return f"{TOO_MANY_CLIENTS} ({text})"
    if "readonly database" in lower or "read-only" in lower:
        return f"the storage is read-only ({text}): make the file and its folder writable, or give another --storage"
    if "disk is full" in lower or "no space left" in lower:
        return f"the storage's disk is full ({text}): free some space and rerun the same command to resume"
    if "malformed" in lower or "not a database" in lower:
        return (f"the storage is damaged ({text}): recover what is readable with "
                "`sqlite3 FILE .recover | sqlite3 NEW.db`, or move it aside to start afresh")
    if "database is locked" in lower:
        return f"the storage is locked by another process ({text}): use a journal file or Postgres for several processes"
    return f"storage error: {type(getattr(exc, 'orig', None) or exc).__name__}: {text}"


def first_line(exc: BaseException, width: int = 200) -> str:
    """An exception's message cut to its first line (a database's error runs on for lines); its
    type's name where it has none. Not redacted: what prints it redacts (:func:`tuner.store.url.redact`)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:width] if lines else type(exc).__name__


#: files a study is made of (its study file, the kernel's spec, source and headers): no output replaces one
SOURCE_SUFFIXES = frozenset({".toml", ".py", ".cu", ".cuh", ".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx"})
#: the first bytes of a SQLite database, and of an Optuna journal file: a storage, whatever its name
_STORAGE_MAGIC = {b"SQLite format 3\x00": "a SQLite database", b'{"op_code":': "an Optuna journal file"}


def check_output_path(path: Path | None, flag: str, *, ours: bytes = b"") -> None:
    """Refuse an output path that cannot be written, before any work is done for it (``flag``: how
    the caller named it, ``--output`` or ``to_header(path)``), and one that would replace what a
    study is stored in or made of: a storage, a study file, a spec, a kernel's source (``ours``: the
    first bytes of a file this output writes, which it may replace whatever its suffix)."""
    if path is None:
        return
    if path.is_dir():
        raise UserError(f"{flag} {path} is a folder: give a file name")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise UserError(f"{flag} {path} is not writable: give a path you can write")
        _refuse_replacing_inputs(path, flag, ours)
        return
    folder = path.parent
    while not folder.exists():  # the folders that do not exist yet are created on writing
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{flag} {path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: folder {folder} is not writable; give a path you can write")


def _refuse_replacing_inputs(path: Path, flag: str, ours: bytes) -> None:
    try:
        with path.open("rb") as file:
            head = file.read(max(len(ours), 16))
    except OSError:
        return  # (not readable: writing it says why)
    if ours and head.startswith(ours):
        return
    for magic, what in _STORAGE_MAGIC.items():
        if head.startswith(magic):
            raise UserError(f"{flag} {path} would replace {what} (a study storage): give another file name")
    if path.suffix.lower() in SOURCE_SUFFIXES:
        raise UserError(f"{flag} {path} would replace a study's or a kernel's own file ({path.suffix}): give another file name")
