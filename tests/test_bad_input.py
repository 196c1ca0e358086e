"""Bad input through the real CLI: one line that says what to fix, exit code 2, nothing lost.

Every case runs `tuner` in a subprocess against a SQLite store that already holds a
study; afterwards that study's trials are all still there, unchanged. The parser-level
messages are tested in tests/test_study_file.py; this file checks the whole path.
Passwords in storage URLs never appear in output, reports or stored notes.
"""

from __future__ import annotations

import json
import re

import optuna
import pytest

from tuner import optuna_private
from tuner.errors import UserError
from tuner.gpu import GpuEvaluator, arch_matches
from tuner.spec import load_spec
from tuner.storage import open_storage
from tuner.study_file import MeasureSettings
from tuner.supervisor import Supervisor
from tests.conftest import FAKE_BACKEND, PNPOLY, ROOT, tuner

GOOD = f"""
[study]
name = "bad_input"
kernel = "{ROOT / 'kernel' / 'example_sgemm.py'}"
arch = "sm_90a"

[problem]
M_DIM = 1024
N_DIM = 1024
K_DIM = 1024

[space.tier1]
BLOCK = [64, 128]
THREAD_TILE = [4, 8]

[space.tier2]
UNROLL_K = [0, 1]

[search]
trials = 4
"""

# (case, text to replace in GOOD, replacement, a fragment the one line must contain)
STUDY_FILE_CASES = [
    ("malformed TOML", "[search]", "[search\n", "not valid TOML"),
    ("unknown key", "trials = 4", "trials = 4\ntrails = 5", "trails"),
    ("unknown section", "[search]", "[serch]", "serch"),
    ("wrong type", "trials = 4", 'trials = "many"', "trials"),
    ("empty axis", "THREAD_TILE = [4, 8]", "THREAD_TILE = []", "THREAD_TILE"),
    ("axis value a float", "BLOCK = [64, 128]", "BLOCK = [64, 1.5]", "BLOCK"),
    ("axis value a table", "BLOCK = [64, 128]", "BLOCK = [64, {a = 1}]", "BLOCK"),
    ("unknown define for the kernel", "UNROLL_K = [0, 1]", "UNROLL_Q = [0, 1]", "UNROLL_Q"),
    ("unknown kernel spec", "example_sgemm.py", "no_such_kernel.py", "no_such_kernel.py"),
    ("no valid config", "THREAD_TILE = [4, 8]", "THREAD_TILE = [64]", "widen"),
    ("unknown arch", 'arch = "sm_90a"', 'arch = "sm_42"', "sm_42"),
    ("define name smuggling an option", "UNROLL_K = [0, 1]", '"TN=1 -Xptxas" = [1]', "C identifier"),
    ("value smuggling an option", "UNROLL_K = [0, 1]", 'UNROLL_K = ["1 -Xptxas=-O0"]', "integer or a C identifier"),
    ("value with a semicolon", "UNROLL_K = [0, 1]", 'UNROLL_K = ["1;rm"]', "integer or a C identifier"),
    ("value with quotes", "UNROLL_K = [0, 1]", "UNROLL_K = ['\"x\"']", "integer or a C identifier"),
    ("value with a space", "UNROLL_K = [0, 1]", 'UNROLL_K = ["0 1"]', "integer or a C identifier"),
    ("fixed value smuggling", "[search]", '[fixed]\nPLANT_BUG = "0 -G"\n\n[search]', "integer or a C identifier"),
    ("name with a semicolon", "UNROLL_K = [0, 1]", '"A;B" = [1]', "C identifier"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding a finished replay study: every case must leave it as it was."""
    folder = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{folder / 'kept.db'}"
    result = tuner("run", "--replay", PNPOLY, "--storage", url, "--study-name", "kept", "--trials", 6, "--seed", 2, "--json")
    assert result.returncode == 0, result.stderr
    return url, snapshot(url)


def snapshot(url: str) -> list[tuple]:
    study = optuna.load_study(study_name="kept", storage=open_storage(url))
    return [(t.number, t.state, t.value, sorted(t.params.items()), sorted(t.user_attrs.items())) for t in study.trials]


def assert_one_line_exit_2(result, fragment: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tuner: error: ") and "Traceback" not in result.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


class InProcess:
    """``tuner.cli.main`` called in this process (same code path as the console script,
    without a Python start-up per case: keeps this file inside the CI budget)."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def tuner_here(capsys, monkeypatch, *args) -> InProcess:
    from tuner.cli import main

    monkeypatch.setenv("TUNER_WORKER_BACKEND", FAKE_BACKEND)
    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:  # argparse errors
        code = exc.code
    out, err = capsys.readouterr()
    return InProcess(code, out, err)


@pytest.mark.parametrize("case,old,new,fragment", STUDY_FILE_CASES, ids=[c[0] for c in STUDY_FILE_CASES])
def test_bad_study_file(case, old, new, fragment, tmp_path, store, capsys, monkeypatch):
    url, before = store
    assert old in GOOD
    path = tmp_path / "study.toml"
    path.write_text(GOOD.replace(old, new, 1))
    result = tuner_here(capsys, monkeypatch, "run", path, "--storage", url, "--study-name", "kept")
    assert_one_line_exit_2(result, fragment)
    assert snapshot(url) == before


def test_bad_study_file_through_the_console_script(tmp_path, store):
    """Two of the cases above in a real subprocess: the exit code and the line are the same."""
    url, before = store
    for old, new, fragment in (("[search]", "[search\n", "not valid TOML"),
                               ("UNROLL_K = [0, 1]", '"TN=1 -Xptxas" = [1]', "C identifier")):
        path = tmp_path / "study.toml"
        path.write_text(GOOD.replace(old, new, 1))
        assert_one_line_exit_2(tuner("run", path, "--storage", url, env={"TUNER_WORKER_BACKEND": FAKE_BACKEND}), fragment)
    assert snapshot(url) == before


def test_defines_never_reach_nvrtc(tmp_path, monkeypatch):
    """Smuggling is refused before any compile: NVRTC is never called."""
    import tuner.compile as compile_mod

    def boom(*a, **k):
        raise AssertionError("NVRTC was reached")

    monkeypatch.setattr(compile_mod, "compile_kernel", boom)
    from tuner.spec import define_flags

    for name, value in (("TN", "1 -Xptxas"), ("TN=1 -Xptxas", 1), ("X", "1;rm"), ("Y", '"q"'), ("Z", "a b"), ("W", "-G")):
        with pytest.raises(UserError, match="C identifier|integer or a C identifier"):
            define_flags({name: value})


def test_missing_study_file(tmp_path, store):
    url, before = store
    line = assert_one_line_exit_2(tuner("run", tmp_path / "nope.toml", "--storage", url), "not found")
    assert "nope.toml" in line
    assert snapshot(url) == before


def test_gpu_arch_mismatch_is_refused_with_the_way_out(tmp_path, store):
    url, before = store
    path = tmp_path / "b200.toml"
    path.write_text(GOOD.replace('arch = "sm_90a"', 'arch = "sm_100a"'))
    result = tuner("run", path, "--storage", url, env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})  # the double is an sm_90
    line = assert_one_line_exit_2(result, "cannot run sm_100a code")
    assert "tuner check --compile" in line and "sm_90" in line
    assert snapshot(url) == before


def test_arch_matches_and_evaluator_start():
    assert arch_matches("sm_90a", (9, 0)) and arch_matches("sm_80", (8, 6)) and arch_matches("sm_100a", (10, 0))
    assert not arch_matches("sm_100a", (9, 0)) and not arch_matches("sm_90a", (10, 0)) and not arch_matches("sm_86", (8, 0))
    assert not arch_matches("sm_90", (10, 0))  # another major: no
    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    evaluator = GpuEvaluator(spec, {"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}, "sm_100a", MeasureSettings(),
                             supervisor=Supervisor(FAKE_BACKEND))
    with pytest.raises(UserError, match=r"Fake GPU, sm_90\) cannot run sm_100a code.*tuner check --compile"):
        evaluator.start()
    assert not evaluator.supervisor.alive  # the worker was stopped, not leaked
    ok = GpuEvaluator(spec, {"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}, "sm_90a", MeasureSettings(),
                      supervisor=Supervisor(FAKE_BACKEND))
    try:
        assert ok.start()["cc"] == [9, 0]
    finally:
        ok.close()


@pytest.mark.parametrize("command", ["run", "status", "best"])
def test_storage_that_cannot_connect(command):
    url = "postgresql+psycopg://alice:s3cr3t-pw@127.0.0.1:1/db"
    args = {"run": ("run", "--replay", PNPOLY, "--trials", 2), "status": ("status",), "best": ("best", "--study", "x")}[command]
    result = tuner(*args, "--storage", url)
    line = assert_one_line_exit_2(result, "cannot open storage postgresql+psycopg://alice:***@127.0.0.1:1/db")
    assert "is the server up" in line
    assert "s3cr3t-pw" not in result.stdout + result.stderr


def test_storage_that_is_not_a_url(store):
    url, before = store
    assert_one_line_exit_2(tuner("status", "--storage", "somewhere-else"), "is not a URL")


def test_study_that_does_not_exist(store):
    url, before = store
    line = assert_one_line_exit_2(tuner("best", "--study", "nope", "--storage", url), "no study 'nope'")
    assert "kept" in line  # names the studies that do exist
    assert_one_line_exit_2(tuner("export", "--study", "nope", "--storage", url, "-o", "/tmp/x.csv"), "no study 'nope'")
    assert snapshot(url) == before


@pytest.mark.parametrize("kind", ["text", "json", "gzip", "csv", "missing"])
def test_replay_file_of_the_wrong_format(kind, tmp_path, store, capsys, monkeypatch):
    url, before = store
    path = tmp_path / f"rec.{kind}"
    if kind == "text":
        path.write_bytes(b"\x00\xff binary junk")
        fragment = "not text"
    elif kind == "json":
        path.write_text(json.dumps({"hello": "world"}))
        fragment = "neither a Kernel Tuner cache"
    elif kind == "gzip":
        path.write_bytes(b"\x1f\x8b\x08broken")
        fragment = "broken gzip"
    elif kind == "csv":
        path.write_text("a,b\n1,2\n")
        fragment = "needs a header"
    else:
        fragment = "not found"
    result = tuner_here(capsys, monkeypatch, "run", "--replay", path, "--storage", url, "--study-name", "kept", "--trials", 8)
    assert_one_line_exit_2(result, fragment)
    assert snapshot(url) == before


def test_replay_mismatch_with_study_file(tmp_path, store):
    url, before = store
    path = tmp_path / "study.toml"
    path.write_text(GOOD)
    assert_one_line_exit_2(tuner("run", path, "--replay", PNPOLY, "--storage", url), "has no column for")


def test_sqlite_refused_for_workers_before_anything_runs(tmp_path, store):
    url, before = store
    line = assert_one_line_exit_2(tuner("run", "--replay", PNPOLY, "--workers", 3, "--storage", url), "SQLite cannot be shared")
    assert ".log" in line and "postgresql" in line
    assert snapshot(url) == before


# -- passwords ---------------------------------------------------------------------------------------------------


def test_password_never_printed_stored_or_reported(tmp_path, postgres_url, unique_name):
    """Trust auth ignores the password, so a URL with one really connects: look everywhere."""
    secret = "pw-" + unique_name
    url = re.sub(r"://([^@/]+)@", rf"://\1:{secret}@", postgres_url)
    assert secret in url
    outputs = []
    for args in (("run", "--replay", PNPOLY, "--study-name", unique_name, "--trials", 3, "--json"),
                 ("run", "--replay", PNPOLY, "--study-name", unique_name, "--trials", 6, "--workers", 2),
                 ("run", "--replay", PNPOLY, "--study-name", unique_name, "--trials", 8, "--workers", 2, "--json"),
                 ("status",), ("status", "--json"), ("best", "--study", unique_name, "--json"),
                 ("report", "--study", unique_name, "-o", tmp_path / "report")):
        result = tuner(*args, "--storage", url)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout + result.stderr)
    text = "\n".join(outputs)
    assert secret not in text and ":***@" in text
    for page in (tmp_path / "report").rglob("*"):
        if page.is_file():
            assert secret not in page.read_text(errors="replace"), page
    study = optuna.load_study(study_name=unique_name, storage=open_storage(url))
    system = optuna_private.study_system_attrs(study)
    stored = json.dumps([study.user_attrs, system] + [(t.user_attrs, t.system_attrs) for t in study.trials],
                        default=str)
    assert secret not in stored  # incl. optuna-dashboard notes (study system attrs)
    optuna.delete_study(study_name=unique_name, storage=open_storage(postgres_url))
