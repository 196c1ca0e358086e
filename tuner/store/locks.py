"""Locks that make a step one across the processes of a study."""

from __future__ import annotations

import hashlib
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy


class ProposalLock:
    """Makes "choose a config, store it on the trial" one step across the workers of a study.

    Without it two workers that sample at the same moment both see the other's trial without
    params and may choose the same config (the second then reuses the first's value, but its
    place in the run is lost). One host (journal or SQLite file): a lock file beside it;
    Postgres: an advisory lock on the study; in-process storages need none. Best effort: if the
    lock cannot be had the proposal goes on unlocked (the twin check still catches repeats).
    """

    def __init__(self, storage, url: str, study_name: str):
        from tuner.store.storage import is_journal, journal_path
        from tuner.store.url import sqlite_file

        self._file: IO[str] | None = None  # the lock file (journal or SQLite storage)
        self._engine: sqlalchemy.Engine | None = None  # a Postgres storage's engine
        self._conn: sqlalchemy.Connection | None = None  # the advisory lock's session (Postgres)
        self._key = int.from_bytes(hashlib.sha256(study_name.encode()).digest()[:8], "big") >> 1  # a bigint
        beside = journal_path(url) if is_journal(url) else sqlite_file(url) if url.startswith("sqlite") else None
        if beside is not None:
            try:
                self._file = open(f"{beside}.propose.lock", "a+")
            except OSError:
                self._file = None
        elif getattr(storage, "engine", None) is not None and storage.engine.dialect.name == "postgresql":
            self._engine = storage.engine

    def __enter__(self) -> ProposalLock:
        try:
            if self._file is not None:
                import fcntl

                fcntl.flock(self._file, fcntl.LOCK_EX)
            elif self._engine is not None:
                self._sql("select pg_advisory_lock(:k)")
        except Exception:
            pass
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._file is not None:
                import fcntl

                fcntl.flock(self._file, fcntl.LOCK_UN)
            elif self._conn is not None:
                self._sql("select pg_advisory_unlock(:k)")
        except Exception:
            pass

    def _sql(self, statement: str) -> None:
        import sqlalchemy

        if self._conn is None:
            assert self._engine is not None  # (only called where there is one)
            self._conn = self._engine.connect()
        self._conn.execute(sqlalchemy.text(statement), {"k": self._key})
        self._conn.commit()

    def close(self) -> None:
        for thing in (self._file, self._conn):
            try:
                if thing is not None:
                    thing.close()
            except Exception:
                pass
        self._file = self._conn = None
