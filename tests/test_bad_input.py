"""Bad input through the real CLI: one line that says what to fix, exit code 2, nothing lost.

Every case runs `tuner` in a subprocess against a SQLite store that already holds a
study; afterwards that study's trials are all still there, unchanged. The parser-level
messages are tested in tests/test_study_file.py; this file checks the whole path.
Passwords in storage URLs never appear in output, reports or stored notes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.conftest import FAKE_BACKEND, PNPOLY, ROOT, tuner
from tuner.contract.arch import limits
from tuner.contract.kernel_spec import load_spec
from tuner.device.supervisor import Supervisor
from tuner.errors import UserError
from tuner.evaluate.gpu import GpuEvaluator
from tuner.study import options
from tuner.study.file import MeasureSettings
from tuner.testing import CliResult, cli

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
    ("a problem key tuned", "UNROLL_K = [0, 1]", "M_DIM = [1024, 2048]", "M_DIM is a problem key of kernel spec "
                                                                          "example_sgemm.py, not a define to tune"),
    ("the kernel's source named", "example_sgemm.py", "example_sgemm.cu", "name the spec (.py) that describes it"),
    ("an energy window too short to measure", "[search]", "[measure]\nenergy_s = 0.001\n\n[search]",
     "[measure.energy_s] must be >= 0.5 (or 0: off), got 0.001"),
    ("a confirmation of one config", "trials = 4", "trials = 4\nconfirm_top = 1", "must be >= 2 (or 0: off), got 1"),
    ("a confirmation too short for an interval", "trials = 4", "trials = 4\nconfirm_rounds = 5", "must be >= 6, got 5"),
    ("objectives a name that is not time", "trials = 4", 'trials = 4\nobjectives = "energy"', "got ['energy']"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding a finished replay study: every case must leave it as it was, byte for byte."""
    folder = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{folder / 'kept.db'}"
    result = tuner("run", "--replay", PNPOLY, "--storage", url, "--study-name", "kept", "--trials", 6, "--seed", 2, "--json")
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(folder / "kept.db") as conn:  # the write-ahead log into the file: its bytes are the store
        conn.execute("pragma wal_checkpoint(truncate)")
    return url, snapshot(url)


class Snapshot(list):
    """A store's trials and its file's bytes: ``==`` compares both."""

    def __init__(self, rows: list[tuple], data: bytes):
        super().__init__(rows)
        self.data = data

    def __eq__(self, other) -> bool:
        return list.__eq__(self, other) and self.data == getattr(other, "data", None)


def snapshot(url: str) -> Snapshot:
    path = url[len("sqlite:///"):]
    data = open(path, "rb").read()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("select t.number, t.state, v.value, p.param_name, p.param_value from trials t "
                            "left join trial_values v on v.trial_id = t.trial_id "
                            "left join trial_params p on p.trial_id = t.trial_id order by t.number, p.param_name").fetchall()
        attrs = conn.execute("select trial_id, key, value_json from trial_user_attributes order by trial_id, key").fetchall()
    return Snapshot(rows + attrs, data)


def assert_one_line_exit_2(result, fragment: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tuner: error: ") and "Traceback" not in result.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


def tuner_here(capsys, monkeypatch, *args) -> CliResult:
    """``tuner.cli.commands.main`` called in this process (same code path as the console script,
    without a Python start-up per case: keeps this file inside the CI budget)."""
    monkeypatch.setenv("TUNER_WORKER_BACKEND", FAKE_BACKEND)
    return cli(*args)


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
    import tuner.compile.nvrtc as compile_mod

    def boom(*a, **k):
        raise AssertionError("NVRTC was reached")

    monkeypatch.setattr(compile_mod, "compile_kernel", boom)
    from tuner.contract.kernel_spec import define_flags

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
    def arch_matches(arch, cc):
        return limits(arch).runs_on(cc)

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


def test_a_host_without_a_gpu_is_told_without_compiling_first(tmp_path):
    """The worker's start failed before the study was loaded: the error comes at once, not after
    the reference config's compile (seconds of NVRTC for nothing)."""
    import time

    supervisor = Supervisor("tests.no_such_backend:Backend")  # fails in the worker, as a missing driver does
    supervisor.start_soon()
    deadline = time.monotonic() + 60
    while not supervisor.failed_to_start and time.monotonic() < deadline:
        time.sleep(0.05)
    assert supervisor.failed_to_start
    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    evaluator = GpuEvaluator(spec, {"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}, "sm_90a", MeasureSettings(),
                             supervisor=supervisor, cache_dir=tmp_path / "cache")
    try:
        with pytest.raises(UserError, match="no usable CUDA GPU here.*--replay"):
            evaluator.start()
        assert evaluator.compiler._executor is None and not (tmp_path / "cache").exists()
    finally:
        evaluator.close()


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


def test_a_scheme_or_driver_the_storage_lacks_is_named(capsys, monkeypatch):
    """A misspelt scheme, or a driver not installed (the postgres extra left out), says what to fix, not
    "is the server up"; no password shows."""
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "status", "--storage", "postgres://me:s3cr3t-pw@db/tuner"),
                           "'postgres' is no database SQLAlchemy knows: use postgresql+psycopg://USER@HOST/DB")
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as without the postgres extra
    result = tuner_here(capsys, monkeypatch, "status", "--storage", "postgresql+psycopg://me:s3cr3t-pw@db/tuner")
    assert_one_line_exit_2(result, "its database driver (psycopg) is not installed: pip install -e '.[postgres]'")
    assert "s3cr3t-pw" not in result.stdout + result.stderr


def test_command_line_slips_are_one_line(store, tmp_path, capsys, monkeypatch):
    url, before = store
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "run", "x.toml", "--trails", "5"),
                           "tuner: error: tuner run: unrecognized arguments: --trails 5 (see tuner run --help)")
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "best", "--study", "kept", "--storage", url, "--heder", "b.h"),
                           "tuner: error: tuner best: unrecognized arguments: --heder (see tuner best --help)")
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "check", ROOT / "studies" / "axpy.toml", "--all"),
                           "--all choose what --compile builds: add --compile")
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "export", "--storage", url, "-o", tmp_path / "trials.xlsx"),
                           "--output " + str(tmp_path / "trials.xlsx") + ": name a .csv file")
    assert not (tmp_path / "trials.xlsx").exists()
    assert snapshot(url) == before


def test_best_of_a_study_whose_every_trial_failed_says_so(tmp_path, capsys, monkeypatch):
    import optuna

    url = f"sqlite:///{tmp_path / 'f.db'}"
    study = optuna.create_study(study_name="broken", storage=url)
    for status in ("compile_error", "compile_error", "hang"):
        trial = study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", f"{status} of trial {trial.number}")
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "best", "--storage", url),
                           "study 'broken': every one of its 3 trials failed (compile_error=2, hang=1) "
                           "(the first compile_error: compile_error of trial 0)")


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
        fragment = "not a Kernel Tuner cache (cache + tune_params) or results list (objects with 'time'), T4 (results + schema_version) or KTT output"
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
    cores = os.cpu_count() or 1
    many = assert_one_line_exit_2(tuner("run", "--replay", PNPOLY, "--workers", 4 * cores + 1, "--storage",
                                        tmp_path / "w.log"), f"--workers {4 * cores + 1} is more than 4 per CPU core")
    assert f"give at most {4 * cores}" in many and not (tmp_path / "w.log").exists()
    folder = tmp_path / "d.log"
    folder.mkdir()
    refused = tuner("run", "--replay", PNPOLY, "--workers", 2, "--storage", folder)
    assert "is a folder" in assert_one_line_exit_2(refused, "d.log") and "started" not in refused.stderr
    assert ".log" in line and "postgresql" in line
    joining = assert_one_line_exit_2(tuner("worker", "--replay", PNPOLY, "--storage", url), "SQLite cannot be shared")
    assert ".log" in joining and "postgresql" in joining
    assert snapshot(url) == before
    default = assert_one_line_exit_2(tuner("worker", "--replay", PNPOLY, cwd=tmp_path), "SQLite cannot be shared")
    assert "(no --storage: the default sqlite:///tuner.db)" in default
    assert not list(tmp_path.glob("tuner.db*"))


# -- passwords ---------------------------------------------------------------------------------------------------


def _database_text(url: str) -> str:
    """Every row of every table of the study database, as text."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = [name for (name,) in conn.execute(sqlalchemy.text(
                "select table_name from information_schema.tables where table_schema = 'public'"))]
            return "\n".join(str(row) for t in tables for row in conn.execute(sqlalchemy.text(f'select * from "{t}"')))
    finally:
        engine.dispose()


# -- every setting of the option table, as a study-file key and as a flag ----------------------------------------


def _bad_values(opt) -> list[tuple[str, object, str]]:
    """(label, bad value, fragment of the message) for one row of the option table."""
    cases: list[tuple[str, object, str]] = []
    if opt.kind in (int, float):
        cases.append(("text", "many", "must be"))
        if opt.minimum is not None:
            cases.append(("below", opt.kind(opt.minimum - 1), ">="))
        if opt.above is not None:
            cases.append(("not above", opt.kind(opt.above), ">"))
        if opt.maximum is not None:
            cases.append(("above max", opt.kind(opt.maximum + 1), "<="))
    if opt.kind is str and opt.choices:
        cases.append(("unknown choice", "nope", "unknown"))
    if opt.kind is bool:
        cases.append(("text", "yes", "true or false"))
    return cases


TOML_CASES = [(o.section, o.name, label, value, fragment) for o in options.OPTIONS
              if o.toml and o.section in ("search", "measure") for label, value, fragment in _bad_values(o)]
FLAG_CASES = [(o.flags[0], label, value, fragment) for o in options.OPTIONS
              if "run" in o.commands and o.kind is not bool for label, value, fragment in _bad_values(o)]


@pytest.mark.parametrize("section,key,label,value,fragment", TOML_CASES,
                         ids=[f"[{c[0]}.{c[1]}] {c[2]}" for c in TOML_CASES])
def test_bad_study_file_setting(section, key, label, value, fragment, tmp_path, store, capsys, monkeypatch):
    url, before = store
    text = GOOD.replace("[search]\ntrials = 4\n", "")
    literal = json.dumps(value) if not isinstance(value, str) else f'"{value}"'
    path = tmp_path / "study.toml"
    path.write_text(f"{text}\n[{section}]\n{key} = {literal}\n")
    result = tuner_here(capsys, monkeypatch, "run", path, "--storage", url, "--study-name", "kept")
    line = assert_one_line_exit_2(result, fragment)
    assert f"[{section}.{key}]" in line and str(path) in line
    assert snapshot(url) == before


@pytest.mark.parametrize("flag,label,value,fragment", FLAG_CASES, ids=[f"{c[0]} {c[1]}" for c in FLAG_CASES])
def test_bad_flag_value(flag, label, value, fragment, store, capsys, monkeypatch):
    url, before = store
    result = tuner_here(capsys, monkeypatch, "run", "--replay", PNPOLY, "--storage", url, "--study-name", "kept", flag, value)
    line = assert_one_line_exit_2(result, fragment)
    assert flag in line
    assert snapshot(url) == before


@pytest.mark.parametrize("top", ["0", "1"])
def test_a_confirmation_of_fewer_than_2_configs_on_the_command_line(top, tmp_path, store, capsys, monkeypatch):
    """The study file's confirm_top 0 turns the confirmation after each run off; `tuner confirm --top` asks
    for one: 2 configs or more, and the line offers no 0."""
    url, before = store
    path = tmp_path / "study.toml"
    path.write_text(GOOD)
    line = assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "confirm", path, "--storage", url, "--top", top),
                                  f"--top must be >= 2, got {top}")
    assert "off" not in line
    assert snapshot(url) == before


ARGPARSE_CASES = [
    ("unknown flag", ("run", "--trails", "3"), "--trails"),
    ("flag without its value", ("run", "--storage"), "--storage"),
    ("unknown command", ("rnu",), "rnu"),
    ("export without -o", ("export", "--study", "kept"), "--output"),
    ("no command", (), "COMMAND"),
]


@pytest.mark.parametrize("args,fragment", [c[1:] for c in ARGPARSE_CASES], ids=[c[0] for c in ARGPARSE_CASES])
def test_bad_command_line(args, fragment, store, capsys, monkeypatch):
    url, before = store
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, *args), fragment)
    assert snapshot(url) == before


STUDY_NAMES = [("path separator", "../x", "path separators"), ("backslash", "a\\b", "path separators"),
               ("control character", "a\x01b", "control characters"), ("newline", "a\nb", "control characters"),
               ("empty", " ", "cannot be empty"), ("too long", "a" * 600, "at most 512")]


@pytest.mark.parametrize("name,fragment", [c[1:] for c in STUDY_NAMES], ids=[c[0] for c in STUDY_NAMES])
def test_bad_study_name(name, fragment, store, tmp_path, capsys, monkeypatch):
    url, before = store
    monkeypatch.chdir(tmp_path)
    result = tuner_here(capsys, monkeypatch, "run", "--replay", PNPOLY, "--storage", url, "--study-name", name, "--trials", 2)
    assert "--study-name" in assert_one_line_exit_2(result, fragment)
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "best", "--study", name, "--storage", url), fragment)
    assert snapshot(url) == before and not list(tmp_path.iterdir())


# -- replay files: every format, every way a recorded value can be wrong ----------------------------------------


def _kernel_tuner_cache() -> dict:
    import gzip

    return json.loads(gzip.decompress(PNPOLY.read_bytes()))


def _kt(edit):
    def make(path):
        data = _kernel_tuner_cache()
        first = next(iter(data["cache"]))
        edit(data, data["cache"][first])
        path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    return make


def _t4(results):
    def make(path):
        path.write_text(json.dumps({"schema_version": "1.0.0", "results": results}))
    return make


def _text(content: str):
    def make(path):
        path.write_text(content)
    return make


def _gzip_bomb(path):
    import gzip

    import tuner.evaluate.replay

    size = tuner.evaluate.replay.MAX_REPLAY_BYTES + 2**20
    with gzip.open(path, "wb", compresslevel=9) as f:  # ~1 MB on disk
        chunk = b" " * 2**20
        for _ in range(size // len(chunk)):
            f.write(chunk)


def _t4_ok(**changes):
    entry = {"configuration": {"A": 1, "B": 2}, "invalidity": "correct", "measurements": [{"name": "time", "value": 1.0}]}
    entry.update(changes)
    return entry


CSV_HEADER = "BLOCK,THREAD_TILE,UNROLL_K,ms,status\n"
REPLAY_CASES = [
    ("kt time negative", _kt(lambda d, e: e.update(time=-5.0)), "finite and positive"),
    ("kt time zero", _kt(lambda d, e: e.update(time=0)), "finite and positive"),
    ("kt time NaN", _kt(lambda d, e: e.update(time=float("nan"))), "finite and positive"),
    ("kt time inf", _kt(lambda d, e: e.update(time=float("inf"))), "finite and positive"),
    ("kt time null", _kt(lambda d, e: e.update(time=None)), "not a number"),
    ("kt time a list", _kt(lambda d, e: e.update(time=[1])), "not a number"),
    ("kt times negative", _kt(lambda d, e: e.update(times=[1.0, -1.0])), "finite and positive"),
    ("kt times not a list", _kt(lambda d, e: e.update(times=3)), "'times' must be a list"),
    ("kt entry without a key", _kt(lambda d, e: e.pop(d["tune_params_keys"][0])), "has no"),
    ("kt entry not an object", _kt(lambda d, e: d["cache"].update({"x": 3})), "is not an object"),
    ("kt value a float", _kt(lambda d, e: e.update({d["tune_params_keys"][0]: 1.5})), "integer or a name"),
    ("kt tune_params empty", _kt(lambda d, e: d.update(tune_params={})), "tune_params"),
    ("kt tune_params value not a list", _kt(lambda d, e: d["tune_params"].update({d["tune_params_keys"][0]: 3})), "non-empty list"),
    ("kt keys unknown", _kt(lambda d, e: d.update(tune_params_keys=["nope"])), "tune_params_keys"),
    ("kt cache a list", _kt(lambda d, e: d.update(cache=[])), "'cache' must be an object"),
    ("t4 no results", _t4([]), "no results"),
    ("t4 without configuration", _t4([{"invalidity": "correct"}]), "no 'configuration'"),
    ("t4 later entry without configuration", _t4([_t4_ok(), {"invalidity": "correct"}]), "result 1 has no 'configuration'"),
    ("t4 configuration missing a key", _t4([_t4_ok(), _t4_ok(configuration={"A": 2})]), "configuration has no B"),
    ("t4 time negative", _t4([_t4_ok(measurements=[{"name": "time", "value": -1}])]), "finite and positive"),
    ("t4 time text", _t4([_t4_ok(measurements=[{"name": "time", "value": "fast"}])]), "not a number"),
    ("t4 correct without a time", _t4([_t4_ok(measurements=[])]), "no 'time' measurement"),
    ("t4 measurements not a list", _t4([_t4_ok(measurements=7)]), "'measurements' must be a list"),
    ("t4 results not a list", lambda p: p.write_text(json.dumps({"schema_version": "1", "results": 3})), "must be a list"),
    ("csv time not a number", _text(CSV_HEADER + "64,4,0,fast,ok\n"), "not a number"),
    ("csv time negative", _text(CSV_HEADER + "64,4,0,-1.5,ok\n"), "finite and positive"),
    ("csv time NaN", _text(CSV_HEADER + "64,4,0,nan,ok\n"), "finite and positive"),
    ("csv time inf", _text(CSV_HEADER + "64,4,0,inf,ok\n"), "finite and positive"),
    ("csv ragged row", _text(CSV_HEADER + "64,4\n"), "line 2"),
    ("csv row too long", _text(CSV_HEADER + "64,4,0,1.0,ok,9,9\n"), "replay file"),
    ("csv regs not a number", _text("BLOCK,THREAD_TILE,UNROLL_K,ms,status,regs\n64,4,0,1.0,ok,many\n"), "regs"),
    ("csv header only", _text(CSV_HEADER), "needs a header"),
    ("csv no ms column", _text("BLOCK,THREAD_TILE,UNROLL_K,status\n64,4,0,ok\n"), "needs a header"),
    ("empty file", _text(""), "replay file"),
    ("gzip bomb", _gzip_bomb, "MiB"),
    ("truncated gzip", lambda p: p.write_bytes(__import__("gzip").compress(b'{"cache": {}}')[:12]), "gzip"),
    ("json array", _text("[1, 2]"), "replay file"),
    ("json broken", _text('{"cache": '), "invalid JSON"),
    ("a folder", lambda p: p.mkdir(), "not found"),
]


@pytest.mark.parametrize("make,fragment", [c[1:] for c in REPLAY_CASES], ids=[c[0] for c in REPLAY_CASES])
def test_bad_replay_file(make, fragment, tmp_path, store, capsys, monkeypatch):
    url, before = store
    path = tmp_path / "recording.json"
    make(path)
    args = ("run", "--replay", path, "--storage", url, "--study-name", "kept", "--trials", 4)
    if path.is_file() and path.read_bytes()[:1] not in (b"", b"{", b"[", b"\x1f"):  # our CSV: with its study file
        study = tmp_path / "study.toml"
        study.write_text(GOOD)
        args = ("run", study, *args[1:])
    line = assert_one_line_exit_2(tuner_here(capsys, monkeypatch, *args), fragment)
    assert str(path) in line
    assert snapshot(url) == before


# -- storages ---------------------------------------------------------------------------------------------------


def _foreign_sqlite(folder):
    path = folder / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table customers (id integer, name text)")
    return f"sqlite:///{path}"


def _corrupt_mid_file(folder):
    """A real tuner database with garbage over its middle pages: the header still says SQLite."""
    path = folder / "mid.db"
    assert tuner("run", "--replay", PNPOLY, "--storage", f"sqlite:///{path}", "--trials", 3).returncode == 0
    with sqlite3.connect(path) as conn:
        conn.execute("pragma wal_checkpoint(truncate)")
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(2 * page, len(data) - page, 2 * page):
        data[start:start + page] = b"\xa5" * page
    path.write_bytes(bytes(data))
    return f"sqlite:///{path}"


STORAGE_CASES = [
    ("sqlite in memory", lambda f: "sqlite://", "in-memory"),
    ("sqlite :memory:", lambda f: "sqlite:///:memory:", "in-memory"),
    ("sqlite folder missing", lambda f: f"sqlite:///{f}/no/such/dir/x.db", "does not exist"),
    ("sqlite path is a folder", lambda f: f"sqlite:///{f}", "is a folder"),
    ("sqlite of another application", _foreign_sqlite, "another application"),
    ("sqlite not a database", lambda f: (f / "junk.db").write_bytes(b"junk" * 500) and f"sqlite:///{f / 'junk.db'}",
     "is damaged"),
    ("sqlite corrupted mid-file", _corrupt_mid_file, "storage"),
    ("journal folder missing", lambda f: str(f / "no" / "j.log"), "does not exist"),
    ("journal folder not writable", lambda f: "/proc/self/j.log", "not writable"),
    ("journal is a folder", lambda f: (f / "d.log").mkdir() or str(f / "d.log"), "is a folder"),
    ("journal corrupt", lambda f: (f / "bad.log").write_text('{"op_code": 0, "worker_id": "x"\n{not json}\n') and str(f / "bad.log"),
     "cannot be read"),
    ("journal that is another file", lambda f: (f / "app.log").write_text("INFO started\nERROR no newline") and str(f / "app.log"),
     "not one line of it is a journal record"),
    ("sqlite in a folder no file can be made in", lambda f: "sqlite:////proc/self/x.db", "is folder /proc/self writable"),
    ("postgres query value the server refuses", lambda f: "postgresql+psycopg://postgres@127.0.0.1/test?connect_timeout=abc",
     "not one the server takes"),
    ("not a URL", lambda f: "somewhere-else", "not a URL"),
    ("unknown database kind", lambda f: "nosuchdb://u@h/d", "'nosuchdb' is no database SQLAlchemy knows"),
    ("postgres unreachable", lambda f: "postgresql+psycopg://u@127.0.0.1:1/db", "is the server up"),
    ("postgres database missing, its name saying invalid", lambda f: "postgresql+psycopg://postgres@127.0.0.1/invalid_db",
     '"invalid_db" does not exist; the server is up; create that database (or user), or name one it has'),
    ("postgres host named invalid", lambda f: "postgresql+psycopg://u@nohost.invalid:1/db", "is the server up"),
    ("postgres password with a raw @", lambda f: "postgresql+psycopg://u:se@cret@127.0.0.1:1/db", "%40"),
]


@pytest.mark.parametrize("make,fragment", [c[1:] for c in STORAGE_CASES], ids=[c[0] for c in STORAGE_CASES])
def test_bad_storage(make, fragment, tmp_path, capsys, monkeypatch):
    url = make(tmp_path)
    before = sorted((p.name, p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*"))
    result = tuner_here(capsys, monkeypatch, "run", "--replay", PNPOLY, "--storage", url, "--trials", 3)
    assert_one_line_exit_2(result, fragment)
    assert "cret" not in result.stderr
    after = sorted((p.name, p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*")
                   if not p.name.endswith((".lock", "-shm", "-wal")))
    assert after == [b for b in before if not b[0].endswith((".lock", "-shm", "-wal"))]  # nothing written, nothing changed


@pytest.mark.parametrize("url", ["sqlite:///{f}/no/such/dir/x.db", "postgresql+psycopg://nobody:secret@127.0.0.1:9/x",
                                 "{f}/no/such/dir/x.log"], ids=["sqlite", "postgres", "journal"])
def test_a_grid_whose_storage_refuses_says_so_before_compiling(url, tmp_path, capsys, monkeypatch):
    (tmp_path / "study.toml").write_text(GOOD)
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    result = tuner_here(capsys, monkeypatch, "grid", tmp_path / "study.toml", "--storage", url.format(f=tmp_path))
    assert_one_line_exit_2(result, "")
    assert "secret" not in result.stderr
    # at most the build the run begins beside its start (its first config's), not the grid's compiles up front
    assert len(list((tmp_path / "cache").rglob("*.cubin"))) <= 1


@pytest.mark.parametrize("command", ["status", "best", "export"])
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_reading_a_missing_storage_creates_nothing(command, kind, tmp_path, capsys, monkeypatch):
    url = f"sqlite:///{tmp_path / 'none.db'}" if kind == "sqlite" else str(tmp_path / "none.log")
    args = {"status": ("status",), "best": ("best", "--study", "x"), "export": ("export", "--study", "x", "-o", tmp_path / "x.csv")}
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, *args[command], "--storage", url), "none.")
    assert not list(tmp_path.iterdir())


def test_too_many_clients_is_reported_as_such():
    import sqlalchemy.exc

    from tuner.errors import as_user_error

    exc = sqlalchemy.exc.OperationalError("select 1", {}, Exception("FATAL:  sorry, too many clients already"))
    message = str(as_user_error(exc))
    assert "too many clients" in message and "max_connections" in message and "length" not in message


def test_accept_mismatch_cannot_change_the_axes(store, capsys, monkeypatch):
    url, before = store
    other = PNPOLY.parent / "gemm_RTX_2080_Ti.json.gz"
    result = tuner_here(capsys, monkeypatch, "run", "--replay", other, "--storage", url, "--study-name", "kept",
                        "--trials", 2, "--accept-mismatch")
    assert "--study-name NEW" in assert_one_line_exit_2(result, "keeps one space")
    assert snapshot(url) == before


def test_changed_axis_values_are_refused(tmp_path, capsys, monkeypatch):
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = tmp_path / "study.toml"
    path.write_text(GOOD)
    ok = tuner("run", path, "--storage", url, "--trials", 2, env={"TUNER_WORKER_BACKEND": FAKE_BACKEND},
               timeout=300)
    assert ok.returncode == 0, ok.stderr
    before = (tmp_path / "s.db").read_bytes()
    path.write_text(GOOD.replace("BLOCK = [64, 128]", "BLOCK = [64, 128, 256]"))
    result = tuner_here(capsys, monkeypatch, "run", path, "--storage", url, "--trials", 3)
    assert_one_line_exit_2(result, "BLOCK")
    assert (tmp_path / "s.db").read_bytes() == before  # the refused run stored nothing


# -- kernel specs that break their contract ---------------------------------------------------------------------


def _spec_study(folder, check_body: str, at_import: str = "") -> Path:
    spec = folder / "broken_spec.py"
    spec.write_text(
        "import sys\nfrom tuner.contract.kernel_spec import load_spec\n"
        f"_BASE = type(load_spec({str(ROOT / 'kernel' / 'example_sgemm.py')!r}))\n{at_import}\n"
        "class Spec(_BASE):\n"
        f"    source = {str(ROOT / 'kernel' / 'example_sgemm.cu')!r}\n"
        "    def check(self, config, problem):\n"
        f"        {check_body}\n")
    study = folder / "study.toml"
    study.write_text(GOOD.replace(str(ROOT / "kernel" / "example_sgemm.py"), str(spec)))
    return study


SPEC_CASES = [
    ("check raises", "raise RuntimeError('boom')", "", "raised RuntimeError: boom"),
    ("check returns a number", "return 3", "", "must return None"),
    ("check returns a list", "return ['bad']", "", "must return None"),
    ("check calls sys.exit(0)", "sys.exit(0)", "", "raised SystemExit"),
    ("check calls sys.exit(1)", "sys.exit(1)", "", "raised SystemExit"),
    ("check loops forever", "while True: pass", "", "ran longer than"),
    ("check hits a recursion limit", "return self.check(config, problem)", "", "RecursionError"),
    ("import calls sys.exit(0)", "return None", "sys.exit(0)", "failed to import: SystemExit"),
    ("import raises", "return None", "raise ValueError('bad spec')", "failed to import: ValueError"),
]


@pytest.mark.parametrize("body,at_import,fragment", [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
@pytest.mark.parametrize("command", ["check", "run"])
def test_spec_breaking_its_contract(command, body, at_import, fragment, tmp_path, store, capsys, monkeypatch):
    import tuner.search.enumeration

    monkeypatch.setattr(tuner.search.enumeration, "CHECK_LIMIT_S", 1.0)
    url, before = store
    study = _spec_study(tmp_path, body, at_import)
    args = ("check", study) if command == "check" else ("run", study, "--storage", url, "--study-name", "kept")
    line = assert_one_line_exit_2(tuner_here(capsys, monkeypatch, *args), fragment)
    assert "broken_spec.py" in line
    assert snapshot(url) == before


@pytest.mark.parametrize("spec_text,fragment", [
    ("from tuner.spec import LightSpec\nclass Spec(LightSpec):\n    problem_keys = ()\n",
     "no source: name the kernel's file in class Spec"),
    ("from tuner.spec import LightSpec\nclass Kernel(LightSpec):\n    source = 'k.cu'\n",
     "must define `class Spec` from tuner.spec (LightSpec, ProgramSpec or KernelSpec)"),
], ids=["no source", "no class Spec"])
def test_a_spec_missing_a_part_says_which(spec_text, fragment, tmp_path, capsys, monkeypatch):
    (tmp_path / "k.cu").write_text("#ifndef BLOCK\n#define BLOCK 64\n#endif\n")
    (tmp_path / "k.py").write_text(spec_text)
    study = tmp_path / "study.toml"
    study.write_text(GOOD.replace(str(ROOT / "kernel" / "example_sgemm.py"), str(tmp_path / "k.py")))
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "check", study), fragment)


def test_a_spec_given_where_the_study_goes_is_named_as_such(capsys, monkeypatch):
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "check", ROOT / "kernel" / "example_sgemm.py"),
                           "example_sgemm.py: a .py file, not a study file: give the study's .toml")


def test_spec_exit_through_the_console_script(tmp_path):
    """sys.exit(0) in a spec's check() must not make `tuner check` exit 0 in silence."""
    result = tuner("check", _spec_study(tmp_path, "sys.exit(0)"), timeout=120)
    assert_one_line_exit_2(result, "raised SystemExit")


def test_define_value_with_a_trailing_newline(tmp_path, store, capsys, monkeypatch):
    url, before = store
    path = tmp_path / "study.toml"
    path.write_text(GOOD.replace("UNROLL_K = [0, 1]", 'UNROLL_K = ["X\\n"]'))
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "run", path, "--storage", url), "integer or a C identifier")
    assert snapshot(url) == before


# -- output paths: refused before any work ----------------------------------------------------------------------


def _output_paths(folder):
    (folder / "a_file").write_text("x")
    (folder / "a_folder").mkdir()
    return {
        "parent is a file": (folder / "a_file" / "out.x", "is a file"),
        "a folder": (folder / "a_folder", "is a folder"),
        "folder not writable": (Path("/proc/self/out.x"), "not writable"),
    }


OUTPUT_KINDS = ["parent is a file", "a folder", "folder not writable"]
OUTPUT_COMMANDS = {
    "export -o": lambda url, out: ("export", "--study", "kept", "--storage", url, "-o", out),
    "export -o json": lambda url, out: ("export", "--study", "kept", "--storage", url, "-o", f"{out}.json" if out.suffix else out),
    "best --header": lambda url, out: ("best", "--study", "kept", "--storage", url, "--header", out),
    "grid --csv": None,  # needs a study file: built in the test
}


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
@pytest.mark.parametrize("command", list(OUTPUT_COMMANDS))
def test_bad_output_path(command, kind, tmp_path, store, capsys, monkeypatch):
    url, before = store
    out, fragment = _output_paths(tmp_path)[kind]
    (tmp_path / "study.toml").write_text(GOOD)  # grid's: the whole space would be measured before the CSV
    if command == "grid --csv":
        args = ("grid", tmp_path / "study.toml", "--storage", url, "--study-name", "kept", "--csv", out)
    else:
        args = OUTPUT_COMMANDS[command](url, out)
    started = __import__("time").monotonic()
    result = tuner_here(capsys, monkeypatch, *args)
    assert_one_line_exit_2(result, fragment)
    assert __import__("time").monotonic() - started < 30  # refused before the work, not after it
    assert snapshot(url) == before


def test_the_suite_covers_at_least_100_kinds():
    from tests.test_passwords import FORMS as PASSWORD_FORMS  # end to end there, every command and file

    kinds = (len(PASSWORD_FORMS) + len(STUDY_FILE_CASES) + len(TOML_CASES) + len(FLAG_CASES) + len(ARGPARSE_CASES) + len(STUDY_NAMES)
             + len(REPLAY_CASES) + len(STORAGE_CASES) + 6 + len(SPEC_CASES) + len(OUTPUT_KINDS) * len(OUTPUT_COMMANDS))
    assert kinds >= 100, kinds


def test_a_replay_of_another_recording_is_refused_under_the_same_study(tmp_path, capsys, monkeypatch):
    """A study file replayed from one recording, then from another of the same space: the second
    recording's times would mix with the first's in one study. Refused, the study untouched;
    --accept-mismatch adds to it anyway."""
    study = ROOT / "studies" / "patch_embed_sm90a_hopper_grid.toml"
    recorded = ROOT / "studies" / "recorded" / "patch_embed_sm90a_hopper_grid_h200.json"
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = tuner_here(capsys, monkeypatch, "run", study, "--replay", recorded, "--storage", url, "--trials", 3)
    assert first.returncode == 0, first.stderr
    cache = json.loads(recorded.read_text())
    for entry in cache["cache"].values():
        entry["time"] *= 1.05  # the same kernel measured again: another recording
    again = tmp_path / recorded.name
    again.write_text(json.dumps(cache))
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("pragma wal_checkpoint(truncate)")
    before = snapshot(url)

    refused = tuner_here(capsys, monkeypatch, "run", study, "--replay", again, "--storage", url, "--trials", 6)
    line = assert_one_line_exit_2(refused, "recorded under a different setup (recording: stored ")
    assert "--accept-mismatch" in line
    assert snapshot(url) == before
    added = tuner_here(capsys, monkeypatch, "run", study, "--replay", again, "--storage", url, "--trials", 6,
                       "--accept-mismatch")
    assert added.returncode == 0, added.stderr
    with sqlite3.connect(tmp_path / "s.db") as conn:  # a replay study stored before recordings were fingerprinted
        conn.execute("delete from study_user_attributes where key = 'recording'")
    resumed = tuner_here(capsys, monkeypatch, "run", study, "--replay", recorded, "--storage", url, "--trials", 9)
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.parametrize("command", ["best", "export"])
def test_a_study_file_the_study_was_not_run_from_is_refused(command, tmp_path, store, capsys, monkeypatch):
    """`tuner best`/`export` read the study's configs: with a study file that is not the one it was run
    from (other defines, another problem size) they would hand out another kernel's flags."""
    url, before = store
    path = tmp_path / "study.toml"
    path.write_text(GOOD)
    extra = ("-o", tmp_path / "x.csv") if command == "export" else ()
    result = tuner_here(capsys, monkeypatch, command, path, "--study", "kept", "--storage", url, *extra)
    line = assert_one_line_exit_2(result, f"study 'kept' was not run from {path} (it searched ")
    assert line.endswith("give the study file it was run from, or --study NAME alone")
    assert snapshot(url) == before and not (tmp_path / "x.csv").exists()


def test_a_refused_run_leaves_a_journal_file_as_it_was(tmp_path, capsys, monkeypatch):
    """Optuna's journal writes a study's creation record even when the study exists: every run of a stored
    study, a refused one too, added a line. A run opens a study it finds, and creates only a missing one."""
    study = ROOT / "studies" / "patch_embed_sm90a_hopper_grid.toml"
    recorded = ROOT / "studies" / "recorded" / "patch_embed_sm90a_hopper_grid_h200.json"
    journal = tmp_path / "study.log"
    first = tuner_here(capsys, monkeypatch, "run", study, "--replay", recorded, "--storage", journal, "--trials", 3)
    assert first.returncode == 0, first.stderr
    cache = json.loads(recorded.read_text())
    for entry in cache["cache"].values():
        entry["time"] *= 1.05
    again = tmp_path / recorded.name
    again.write_text(json.dumps(cache))
    before = journal.read_bytes()

    refused = tuner_here(capsys, monkeypatch, "run", study, "--replay", again, "--storage", journal, "--trials", 6)
    assert_one_line_exit_2(refused, "recorded under a different setup")
    assert journal.read_bytes() == before


def _what_a_study_is_made_of(folder: Path, url: str) -> dict[str, Path]:
    journal = folder / "j.log"
    made = tuner("run", "--replay", PNPOLY, "--storage", str(journal), "--trials", 2, "--json")
    assert made.returncode == 0, made.stderr
    (folder / "k.cu").write_text("#ifndef BLOCK\n#define BLOCK 64\n#endif\n")
    (folder / "k.cuh").write_text("#pragma once\n")
    (folder / "study.toml").write_text(GOOD)
    (folder / "spec.py").write_text("from tuner.spec import LightSpec\n")
    return {"the storage": Path(url[len("sqlite:///"):]), "a journal storage": journal, "a study file": folder / "study.toml",
            "a kernel source": folder / "k.cu", "a kernel header": folder / "k.cuh", "a spec": folder / "spec.py"}


@pytest.mark.parametrize("command", ["export -o", "best --header", "grid --csv"])
def test_an_output_never_replaces_a_storage_or_a_studys_own_files(command, tmp_path, store, capsys, monkeypatch):
    url, before = store
    targets = _what_a_study_is_made_of(tmp_path, url)
    for what, target in targets.items():
        kept = target.read_bytes()
        if command == "grid --csv":
            args = ("grid", tmp_path / "study.toml", "--storage", url, "--study-name", "kept", "--csv", target)
        else:
            args = (*OUTPUT_COMMANDS[command](url, target),)
        line = assert_one_line_exit_2(tuner_here(capsys, monkeypatch, *args), "would replace ")
        assert "give another file name" in line, (what, line)
        assert target.read_bytes() == kept, what
    assert snapshot(url) == before


def test_a_header_or_table_written_before_is_replaced(tmp_path, store, capsys, monkeypatch):
    url, _ = store
    header, table = tmp_path / "best.cuh", tmp_path / "trials.csv"
    for _ in range(2):  # the second time over the first's files
        assert tuner_here(capsys, monkeypatch, *OUTPUT_COMMANDS["best --header"](url, header)).returncode == 0
        assert tuner_here(capsys, monkeypatch, *OUTPUT_COMMANDS["export -o"](url, table)).returncode == 0
    assert header.read_text().startswith("// Best configuration of study kept") and "#define" in header.read_text()
    assert ",number,state,value,ms," in table.read_text().splitlines()[0]


def test_an_export_never_replaces_the_recording_its_study_was_replayed_from(tmp_path, capsys, monkeypatch):
    recording = tmp_path / "pnpoly.json"
    recording.write_bytes(Path(PNPOLY).read_bytes())
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert tuner_here(capsys, monkeypatch, "run", "--replay", recording, "--storage", url, "--trials", 3).returncode == 0
    line = assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "export", "--storage", url, "-o", recording),
                                  "is the recording study ")
    assert "give another file name" in line
    assert recording.read_bytes() == Path(PNPOLY).read_bytes()


def test_check_of_several_study_files_checks_each_and_says_each_bad_one(tmp_path, capsys, monkeypatch):
    (tmp_path / "bad.toml").write_text(GOOD.replace("THREAD_TILE = [4, 8]", "THREAD_TILE = []"))
    result = tuner_here(capsys, monkeypatch, "check", ROOT / "studies" / "axpy.toml", tmp_path / "missing.toml",
                        tmp_path / "bad.toml", ROOT / "studies" / "example_sgemm.toml")
    assert result.returncode == 2
    assert [ln.split(":")[0] for ln in result.stdout.splitlines() if not ln.startswith(" ")] == ["axpy", "example_sgemm"]
    errors = result.stderr.splitlines()
    assert len(errors) == 2 and all(ln.startswith("tuner: error: ") for ln in errors), result.stderr
    assert "missing.toml: study file not found" in errors[0] and "THREAD_TILE" in errors[1]
