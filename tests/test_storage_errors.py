"""Storage errors are one line with the right hint (issue 33, items 6, 7, 8 and 11).

A damaged SQLite file and a full disk say so (exit 2, no traceback); a read-only file is read,
not called damaged; a reading command leaves an empty file empty; a Postgres server that
accepts and never answers fails the command after the connect timeout; a statement that runs
too long is cancelled by the server.
"""

from __future__ import annotations

import hashlib
import random
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import FAKE_BACKEND, PNPOLY, ROOT, tuner

STUDY = "pnpoly_RTX_3090.replay"


def _one_line(result, *needles: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tuner: error:"), result.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _recorded(db: Path, trials: int = 40) -> str:
    url = f"sqlite:///{db}"
    result = tuner("run", "--replay", PNPOLY, "--storage", url, "--trials", trials, "--seed", 2, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    return url


@pytest.fixture
def mount(tmp_path):
    """``mount(args, target)``: a mount undone after the test (needs root)."""
    mounted: list[Path] = []

    def do(args: list[str], target: Path) -> Path:
        result = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.fail(f"this test mounts file systems: run it as root ({result.stderr.strip()})")
        mounted.append(target)
        return target

    yield do
    for target in reversed(mounted):
        subprocess.run(["umount", str(target)], capture_output=True)


def test_sqlite_garbage_in_the_middle_is_one_line(tmp_path):
    db = tmp_path / "g.db"
    url = _recorded(db)
    data = bytearray(db.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8192] = random.Random(7).randbytes(8192)  # pages mid-file overwritten
    db.write_bytes(bytes(data))
    for args in (("status",), ("best", "--study", STUDY), ("export", "--study", STUDY, "-o", tmp_path / "x.csv"),
                 ("run", "--replay", PNPOLY, "--trials", 60)):
        _one_line(tuner(*args, "--storage", url), "damaged", ".recover")
    assert db.read_bytes() == bytes(data)


def test_sqlite_on_a_full_disk_is_one_line(tmp_path, mount):
    full = tmp_path / "full"
    full.mkdir()
    mount(["-t", "tmpfs", "-o", "size=256k", "tmpfs"], full)
    url = f"sqlite:///{full / 'f.db'}"
    result = tuner("run", "--replay", PNPOLY, "--storage", url, "--trials", 400, "--seed", 2)
    _one_line(result, "disk is full", "free some space")
    status = tuner("status", "--storage", url, "--json")  # what was stored is still readable
    assert status.returncode == 0, status.stderr


def test_a_read_only_sqlite_file_is_read_not_called_damaged(tmp_path, mount):
    folder = tmp_path / "rw"
    folder.mkdir()
    url = _recorded(folder / "t.db").replace(str(folder), str(tmp_path / "ro"))
    (tmp_path / "ro").mkdir()
    mount(["--bind", str(folder)], tmp_path / "ro")
    mount(["-o", "remount,bind,ro"], tmp_path / "ro")
    before = hashlib.sha256((folder / "t.db").read_bytes()).hexdigest()
    status = tuner("status", "--storage", url, "--json")
    assert status.returncode == 0, status.stderr
    assert '"trials": 40' in status.stdout
    best = tuner("best", "--study", STUDY, "--storage", url)
    assert best.returncode == 0 and "-D" in best.stdout, best.stderr
    export = tuner("export", "--study", STUDY, "--storage", url, "-o", tmp_path / "x.csv")
    assert export.returncode == 0 and len((tmp_path / "x.csv").read_text().splitlines()) == 41, export.stderr
    report = tuner("report", "--study", STUDY, "--storage", url, "-o", tmp_path / "rep")
    assert report.returncode == 0 and (tmp_path / "rep" / "index.html").is_file(), report.stderr
    line = _one_line(tuner("run", "--replay", PNPOLY, "--storage", url, "--trials", 50), "read-only")
    assert "damaged" not in line and "move it aside" not in line
    # a confirmation is stored too: said before the GPU measures anything
    _one_line(tuner("confirm", ROOT / "studies" / "example_sgemm.toml", "--storage", url,
                    env={"TUNER_WORKER_BACKEND": FAKE_BACKEND}), "read-only")
    assert hashlib.sha256((folder / "t.db").read_bytes()).hexdigest() == before


@pytest.mark.parametrize("name", ["empty.db", "empty.log"])
def test_status_leaves_an_existing_empty_file_empty(tmp_path, name):
    path = tmp_path / name
    path.touch()
    url = f"sqlite:///{path}" if name.endswith(".db") else str(path)
    result = tuner("status", "--storage", url)
    if name.endswith(".db"):
        _one_line(result, "is empty")
    else:  # an empty journal is a journal with no studies yet
        assert result.returncode == 0, result.stderr
    assert path.stat().st_size == 0


@pytest.fixture
def silent_server():
    """A TCP server on a free local port that accepts and never answers (for 120 s at most)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    held: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    done.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()


def test_postgres_that_never_answers_times_out(silent_server):
    url = f"postgresql+psycopg://tuner:s3cret@127.0.0.1:{silent_server}/db"
    started = time.monotonic()
    result = tuner("status", "--storage", url, env={"TUNER_DB_CONNECT_TIMEOUT_S": "2"}, timeout=60)
    elapsed = time.monotonic() - started
    line = _one_line(result, "did not answer within 2 s", "TUNER_DB_CONNECT_TIMEOUT_S")
    assert "s3cret" not in line
    assert elapsed < 30, elapsed  # start-up and one connect attempt; without a timeout it hangs


def test_postgres_statement_timeout(postgres_url, monkeypatch):
    import sqlalchemy

    from tuner.store.storage import open_storage

    monkeypatch.setenv("TUNER_DB_STATEMENT_TIMEOUT_S", "1")
    storage = open_storage(postgres_url)
    started = time.monotonic()
    with pytest.raises(sqlalchemy.exc.OperationalError, match="statement timeout"):
        with storage.engine.connect() as conn:
            conn.execute(sqlalchemy.text("select pg_sleep(10)"))
    assert time.monotonic() - started < 8
    storage.engine.dispose()


def test_bad_timeout_setting_is_one_line():
    result = tuner("status", "--storage", "postgresql+psycopg://u@127.0.0.1:1/db", env={"TUNER_DB_CONNECT_TIMEOUT_S": "soon"})
    _one_line(result, "TUNER_DB_CONNECT_TIMEOUT_S", "whole number of seconds")
