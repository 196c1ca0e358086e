"""Study names and output folders (issue 33, items 6 and 11): a name that cannot be stored or
be a file fails before any work; a name from a storage never reaches the terminal raw; a
second report into a folder does not silently replace another storage's report."""

import os

import optuna
import pytest

from tests.conftest import PNPOLY, ROOT, tuner
from tests.test_bad_input import GOOD, assert_one_line_exit_2, tuner_here

AXPY = f"""
[study]
name = "NAME"
kernel = "{ROOT / 'kernel' / 'axpy.py'}"
arch = "sm_90"
[problem]
ROWS = 64
COLS = 64
[space.tier1]
BLOCK_SIZE = [64, 128]
"""


@pytest.mark.parametrize("name,fragment", [
    ("a\\u0000b", "control characters"),
    ("a\\u001b[31mred", "control characters"),
    ("x" * 600, "at most 512 characters"),
], ids=["NUL", "escape sequence", "600 characters"])
def test_a_study_name_that_cannot_be_stored_fails_before_any_work(name, fragment, tmp_path, capsys, monkeypatch):
    study = tmp_path / "s.toml"
    study.write_text(AXPY.replace("NAME", name))
    monkeypatch.chdir(tmp_path)
    storage = ("--storage", f"sqlite:///{tmp_path / 't.db'}")
    for args in (("grid", study, *storage), ("run", study, *storage), ("check", study)):
        assert_one_line_exit_2(tuner_here(capsys, monkeypatch, *args), fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]  # no database, no CSV


def test_a_300_character_name_fails_before_the_grid_runs(tmp_path, capsys, monkeypatch):
    """The grid's default CSV is NAME.grid.csv: too long for a file name, said before measuring."""
    study = tmp_path / "s.toml"
    study.write_text(AXPY.replace("NAME", "n" * 300))
    monkeypatch.chdir(tmp_path)
    result = tuner_here(capsys, monkeypatch, "grid", study, "--storage", f"sqlite:///{tmp_path / 't.db'}")
    assert_one_line_exit_2(result, "--csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]  # nothing measured, nothing stored


def test_a_kernel_path_that_is_a_symlink_loop_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    study = tmp_path / "s.toml"
    study.write_text(GOOD.replace(str(ROOT / "kernel" / "example_sgemm.py"), str(tmp_path / "a.py")))
    result = tuner_here(capsys, monkeypatch, "check", study)
    assert_one_line_exit_2(result, "[study.kernel]")


# -- control characters from a storage ---------------------------------------------------------------------------

RAW = "bad\x1b[2J\x1b]0;title\x07\nname\r\x9b"


def test_control_characters_of_a_stored_name_never_reach_the_terminal(tmp_path, capsys, monkeypatch):
    """A study another program created with escape sequences and newlines in its name."""
    url = f"sqlite:///{tmp_path / 'cc.db'}"
    assert tuner("run", "--replay", PNPOLY, "--storage", url, "--study-name", "plain", "--trials", 2).returncode == 0
    from tuner.store.storage import open_storage

    source = optuna.load_study(study_name="plain", storage=open_storage(url))
    copy = optuna.create_study(study_name=RAW, storage=open_storage(url))
    copy.set_user_attr("device_name", "gpu\x1b[31m")
    copy.add_trials(source.trials)
    outputs = [tuner_here(capsys, monkeypatch, *args, "--storage", url) for args in (
        ("status",), ("status", "--json"), ("best", "--study", RAW), ("export", "--study", RAW, "-o", tmp_path / "t.csv"),
        ("best", "--study", "missing"))]
    assert [r.returncode for r in outputs] == [0, 0, 2, 2, 2]
    text = "".join(r.stdout + r.stderr for r in outputs)
    assert not any(c in text for c in "\x1b\x07\r\x9b"), repr(text)
    assert "bad\\x1b[2J" in outputs[0].stdout and "bad\\x1b[2J" in outputs[-1].stderr  # shown, escaped
    assert len(outputs[0].stdout.splitlines()) == 3  # the header and one line per study


# -- a second report into one folder -----------------------------------------------------------------------------


def test_a_report_folder_is_updated_from_its_storage_and_kept_from_another(tmp_path, capsys, monkeypatch):
    first, second = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    for url, name in ((first, "study_of_a_db"), (second, "study_of_b_db")):
        assert tuner("run", "--replay", PNPOLY, "--storage", url, "--study-name", name, "--trials", 2).returncode == 0
    out = tmp_path / "report"
    made = tuner_here(capsys, monkeypatch, "report", "--storage", first, "-o", out)
    assert made.returncode == 0 and made.stdout.startswith("wrote"), made.stderr
    index = (out / "index.html").read_text()
    again = tuner_here(capsys, monkeypatch, "report", "--storage", first, "-o", out)  # the same storage: an update
    assert again.returncode == 0 and again.stdout.startswith("updated"), again.stderr
    other = tuner_here(capsys, monkeypatch, "report", "--storage", second, "-o", out)
    assert_one_line_exit_2(other, "--force")
    kept = (out / "index.html").read_text()
    assert "study_of_a_db" in kept and "study_of_b_db" not in kept
    forced = tuner_here(capsys, monkeypatch, "report", "--storage", second, "-o", out, "--force")
    assert forced.returncode == 0 and "study_of_b_db" in (out / "index.html").read_text()
    assert "study_of_a_db" in index
    # the replaced report's pages are gone: none is left for the new index to link as this storage's
    pages = sorted(p.name for p in out.glob("study-*.html"))
    assert len(pages) == 1 and "study_of_b_db" in pages[0]
    # a study the storage lacks is refused before a folder is made
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "report", "--storage", first, "--study", "nosuch", "-o",
                                      tmp_path / "fresh" / "deep"), "no study named nosuch")
    assert not (tmp_path / "fresh").exists()
    foreign = tmp_path / "site"
    foreign.mkdir()
    (foreign / "index.html").write_text("<html>mine</html>")
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "report", "--storage", first, "-o", foreign), "did not write")
    assert (foreign / "index.html").read_text() == "<html>mine</html>"
    assert os.listdir(foreign) == ["index.html"]
    # `sqlite:///tuner.db` is another file in each folder it is run from: a report of one is not the other's
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        assert tuner("run", "--replay", PNPOLY, "--trials", 2, "--study-name", f"in_{folder}", cwd=tmp_path / folder).returncode == 0
    assert tuner("report", "-o", tmp_path / "shared", cwd=tmp_path / "x").returncode == 0
    refused = tuner("report", "-o", tmp_path / "shared", cwd=tmp_path / "y")
    assert refused.returncode == 2 and "holds the report of" in refused.stderr and "--force" in refused.stderr, refused
    (tmp_path / "afile").write_text("")
    assert_one_line_exit_2(tuner_here(capsys, monkeypatch, "report", "--storage", first, "-o", tmp_path / "afile"),
                           "is a file: give a folder for the report's pages")


# -- the grid of one study in two storages -----------------------------------------------------------------------


def _storage_column(path) -> set[str]:
    import csv

    with path.open(newline="") as file:
        return {row["storage"] for row in csv.DictReader(file)}


def test_a_grid_in_another_storage_keeps_the_default_csv_and_says_csv(tmp_path, capsys, monkeypatch):
    """The study's grid in a.db writes NAME.grid.csv, naming a.db in its storage column; its grid in
    b.log refuses to replace that table before measuring anything, and says --csv FILE; a.db's grid again
    (its path spelt otherwise) replaces it; a table that names no storage is kept as well."""
    from tuner.testing import write_study

    study = write_study(tmp_path, "twice", problem={"M_DIM": 256, "N_DIM": 256, "K_DIM": 256},
                        tier1={"BLOCK": [32, 64], "THREAD_TILE": [1, 2, 4]}, measure={"timeout_s": 20})
    monkeypatch.chdir(tmp_path)
    cache = ("--cache-dir", tmp_path / "cache")
    default_csv, a_db = tmp_path / "twice.grid.csv", str((tmp_path / "a.db").resolve())
    first = tuner_here(capsys, monkeypatch, "grid", study, "--storage", "sqlite:///a.db", *cache)
    assert first.returncode == 0, first.stderr
    table = default_csv.read_text()
    assert _storage_column(default_csv) == {a_db}

    other = tuner_here(capsys, monkeypatch, "grid", study, "--storage", "b.log", *cache)
    line = assert_one_line_exit_2(other, "give --csv FILE for the table of this grid in")
    assert f"twice.grid.csv holds the grid of another storage, {a_db}" in line and "(--csv twice.grid.csv replaces" in line
    assert default_csv.read_text() == table and not (tmp_path / "b.log").exists()  # nothing measured, nothing lost
    named = tuner_here(capsys, monkeypatch, "grid", study, "--storage", "b.log", "--csv", "b.csv", *cache)
    assert named.returncode == 0, named.stderr
    assert _storage_column(tmp_path / "b.csv") == {str((tmp_path / "b.log").resolve())}

    again = tuner_here(capsys, monkeypatch, "grid", study, "--storage", f"sqlite:///{tmp_path / 'a.db'}", *cache)
    assert again.returncode == 0 and "CSV written to twice.grid.csv" in again.stdout, again.stderr

    default_csv.write_text("BLOCK,THREAD_TILE,ms\n32,1,1.0\n")  # an older tuner's table, or the user's
    unknown = tuner_here(capsys, monkeypatch, "grid", study, "--storage", "sqlite:///a.db", *cache)
    assert_one_line_exit_2(unknown, "holds a table that names no storage")
    assert default_csv.read_text() == "BLOCK,THREAD_TILE,ms\n32,1,1.0\n"


# -- SQLite URL query parameters ---------------------------------------------------------------------------------


def test_a_sqlite_query_parameter_is_not_part_of_the_file_name(tmp_path, capsys, monkeypatch):
    """``?mode=ro`` opens the file read-only (a SQLite URI), never a file named ``t.db?mode=ro``."""
    from tuner.store.url import sqlite_file, sqlite_url

    db = tmp_path / "t.db"
    assert tuner("run", "--replay", PNPOLY, "--storage", f"sqlite:///{db}", "--study-name", "s", "--trials", 2).returncode == 0
    url = f"sqlite:///{db}?mode=ro"
    assert sqlite_file(url) == db and sqlite_file(sqlite_url(url)) == db
    assert sqlite_file(f"sqlite:///file:{db}?mode=ro&uri=true") == db
    for args in (("status",), ("report", "-o", tmp_path / "r")):
        result = tuner_here(capsys, monkeypatch, *args, "--storage", url)
        assert result.returncode == 0, result.stderr
        assert "s" in result.stdout and "SAWarning" not in result.stderr
    assert not [p for p in tmp_path.iterdir() if "?" in p.name or "mode" in p.name]
