"""Opening storages and redacting their URLs.

The engine's :mod:`tuner.storage` owns both operations; this module defers to it when it
is importable and otherwise falls back to the same rules, so the dashboards work (and are
tested) against plain Optuna storages as well.
"""

from __future__ import annotations

import os
import re
from typing import Any

import optuna
from optuna.storages import BaseStorage

DEFAULT_STORAGE_URL = "sqlite:///tuner.db"

_PASSWORD_RE = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^/@:]*:)(?P<pw>[^/@]*)(?P<tail>@)")


def _tuner_storage() -> Any | None:
    try:
        from tuner import storage as tuner_storage  # the lead's module
    except ImportError:
        return None
    if not hasattr(tuner_storage, "open_storage") or not hasattr(tuner_storage, "redact"):
        return None
    return tuner_storage


def redact(url: Any) -> str:
    """``url`` with any password replaced by ``***`` (safe to print, store or render)."""
    if isinstance(url, BaseStorage):
        return describe_storage(url)
    tuner_storage = _tuner_storage()
    if tuner_storage is not None:
        return tuner_storage.redact(str(url))
    text = str(url)
    text = _PASSWORD_RE.sub(lambda m: m.group("head") + "***" + m.group("tail"), text)
    # query-string passwords (?password=...)
    return re.sub(r"(?i)(password=)[^&]*", r"\1***", text)


def describe_storage(storage: BaseStorage) -> str:
    """A password-free description of a storage object (for page footers)."""
    engine = getattr(storage, "engine", None)
    if engine is not None:  # RDBStorage
        try:
            return engine.url.render_as_string(hide_password=True)
        except Exception:  # pragma: no cover - defensive
            return type(storage).__name__
    backend = getattr(storage, "_backend", None)
    path = getattr(backend, "_file_path", None)
    if path:
        return f"journal file {path}"
    return type(storage).__name__


def open_storage(url: str | BaseStorage) -> BaseStorage:
    """An Optuna storage for an RDB URL, a journal ``.log`` path, or a storage object."""
    if isinstance(url, BaseStorage):
        return url
    tuner_storage = _tuner_storage()
    if tuner_storage is not None:
        return tuner_storage.open_storage(url)
    return _open_storage_fallback(str(url))


def _open_storage_fallback(url: str) -> BaseStorage:
    from tuner.errors import UserError

    if "://" not in url:
        if url.endswith(".log") or os.path.isfile(url) and not _is_sqlite_file(url):
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            if not os.path.exists(url):
                raise UserError(f"journal file {url} does not exist: check --storage")
            return JournalStorage(JournalFileBackend(url))
        if _is_sqlite_file(url):
            url = "sqlite:///" + os.path.abspath(url)
        else:
            raise UserError(
                f"cannot open storage {redact(url)}: give a sqlite:///file.db or "
                "postgresql+psycopg://... URL, or a journal .log file"
            )
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        if path and path != ":memory:" and not os.path.exists(path):
            raise UserError(f"no database at {path}: check --storage (nothing has been tuned there yet?)")
    try:
        return optuna.storages.RDBStorage(url, skip_compatibility_check=False)
    except Exception as exc:  # connection refused, bad driver, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot open storage {redact(url)}: {redact(first)}") from None


def _is_sqlite_file(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False
