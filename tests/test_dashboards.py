"""Dashboards: Plotly report figures and pages, a real headless Chromium, optuna-dashboard's API.

Studies are made through Optuna directly, following the engine's trial record contract
(see dashboards/demo.py): a few hundred trials with pruned failures, plus an empty and an
all-failed study. Nothing here skips: a missing Chromium or PostgreSQL is a failure
(CI installs Chromium with .ci/install-browser.sh).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from dashboards import demo
from dashboards import report as rep
from dashboards.report import load_study, write_report
from tuner.errors import UserError
from tuner.store.notes import attach_trial_artifacts, study_note, write_study_note

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT_DIR = Path(os.environ.get("TUNER_SCREENSHOT_DIR", ROOT / "docs" / "img"))
FAILURE_STATUSES = {"invalid", "compile_error", "too_many_regs", "spills", "wgmma_serialized", "hang", "launch_error",
                    "mismatch", "pruned_slow"}

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> str:
    """A journal storage with three shapes (300/150/150 trials), an all-failed and an empty study."""
    path = tmp_path_factory.mktemp("dash") / "studies.log"
    storage = JournalStorage(JournalFileBackend(str(path)))
    demo.make_study(storage, "patch_embed-h200", shape="patch_embed", n_trials=300, seed=0)
    demo.make_study(storage, "fc1-h200", shape="fc1", n_trials=150, seed=1)
    demo.make_study(storage, "fc2-h200", shape="fc2", n_trials=150, seed=2, with_baseline=False)
    demo.make_all_failed_study(storage, "fc2-broken")
    optuna.create_study(storage=storage, study_name="fc1-empty").set_user_attr("shape", "fc1")
    return str(path)


@pytest.fixture(scope="module")
def report_dir(journal, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    write_report(journal, out)
    return out


def _storage(journal: str):
    return JournalStorage(JournalFileBackend(journal))


def _data(journal: str, name: str) -> rep.StudyData:
    return load_study(optuna.load_study(study_name=name, storage=_storage(journal)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------ figures


def test_study_follows_the_record_contract(journal):
    data = _data(journal, "patch_embed-h200")
    states = {t.state for t in data.trials}
    assert states == {TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL}
    for t in data.trials:
        status = t.user_attrs.get("status")
        if t.state == TrialState.COMPLETE:
            assert status in ("ok", "duplicate") and t.value == t.user_attrs["ms"]
        elif t.state == TrialState.PRUNED:
            assert status in FAILURE_STATUSES and t.user_attrs["reason"] and t.value is None
    assert {"pruned_slow", "invalid", "too_many_regs", "hang"} <= set(data.df["status"])


def test_every_figure_builds_from_a_replayed_study(journal):
    data = _data(journal, "patch_embed-h200")
    mem = rep._memory_study(data)
    n_complete = int((data.df["state"] == "COMPLETE").sum())
    best_ms = data.df.loc[data.df["state"] == "COMPLETE", "value"].min()

    hist = rep.fig_history(data, mem)
    names = [t.name for t in hist.data]
    assert "Best Value" in names
    best_line = next(t for t in hist.data if t.name == "Best Value")
    assert min(best_line.y) == pytest.approx(best_ms)
    # x axes carry the stored trial numbers, not a renumbering of the COMPLETE ones
    assert max(best_line.x) > n_complete

    par = rep.fig_parallel(data, mem)
    assert len(par.data) >= n_complete  # one line per COMPLETE trial
    text = json.dumps(par.to_plotly_json(), default=str)
    for axis in demo.AXES:
        assert axis in text

    imp = rep.fig_importances(data, mem)
    bars = imp.data[0]
    assert sorted(bars.y) == sorted(demo.AXES) and sum(bars.x) == pytest.approx(1.0, abs=0.02)
    # N_STAGES drives the synthetic timing model: it must come out on top
    assert bars.y[list(bars.x).index(max(bars.x))] == "N_STAGES"

    sl = rep.fig_slice(data, mem)
    assert sum(len(t.x) for t in sl.data if t.x is not None) == n_complete * len(demo.AXES)
    assert sl.layout.width is None  # fits the page's width (Optuna's plot_slice: 300 px per define)

    boxes = rep.fig_boxes(data)
    assert sum(len(t.y) for t in boxes.data) == n_complete * len(demo.AXES)

    res = rep.fig_resources(data)
    legend = {t.name.split(" ")[0] for t in res.data if t.showlegend is not False}
    assert {"ok", "pruned_slow"} <= legend and "invalid" not in legend  # invalid has no time
    assert all(len(t.x) == len(t.y) and len(t.x) > 0 for t in res.data)

    fail = rep.fig_failures(data)
    reasons = fail.data[-1]
    assert reasons.orientation == "h" and len(reasons.y) > 3
    counted = sum(t.y.sum() if hasattr(t.y, "sum") else sum(t.y) for t in fail.data[:-1])
    assert counted == len(data.df)


def test_invalid_configs_are_never_best_or_in_the_top_table(journal):
    data = _data(journal, "patch_embed-h200")
    best = data.best()
    ok = data.df[data.df["status"].isin(["ok", "duplicate"])]
    assert best["status"] in ("ok", "duplicate") and best["value"] == ok["ms"].min()
    top = rep.top_configs(data)
    assert set(top["status"]) <= {"ok", "duplicate"}
    assert list(top["value"]) == sorted(top["value"]) and top["flags"].is_unique
    differ, same = rep.differing_axes(top, data.axes)  # the top table's columns: only the defines that differ
    assert differ and set(differ) | set(same) == set(data.axes) and not set(differ) & set(same)
    for axis in differ:
        assert top["p:" + axis].nunique() > 1
    table = rep._top_table(data)
    assert table.count("<th>") == 8 + len(differ) + len(rep.speedups(data.attrs, 1.0))
    assert f'title="{top["flags"].iloc[0]}"' in table  # the full flags stay at hand


def test_failure_table_groups_reasons_by_shape():
    assert rep.reason_key("ptxas: 262 registers > 255") == rep.reason_key("ptxas: 270 registers > 255")
    assert rep.reason_key("  ") == "(no reason recorded)"


def test_speedups_over_recorded_baselines():
    rows = rep.speedups({"baseline_ms": {"cublas": 1.04, "cublas_plus_epilogue": 2.96, "bad": "x"}}, 0.8)
    assert [(n, round(s, 2)) for n, _, s in rows] == [("cublas", 1.3), ("cublas_plus_epilogue", 3.7)]
    assert rep.speedups({}, 0.8) == [] and rep.speedups({"baseline_ms": {"cublas": 1.0}}, None) == []


def test_empty_and_all_failed_studies_give_a_message_not_a_traceback(journal):
    for name, message in (("fc1-empty", "has no trials yet"), ("fc2-broken", "No trial of this study completed")):
        page, figs = rep.render_study_page(_data(journal, name), "", "")
        assert message in page
        assert not figs.errors and "Traceback" not in page
    _, figs = rep.render_study_page(_data(journal, "fc2-broken"), "", "")
    assert figs.count == 1  # the failure breakdown still draws


def test_a_define_only_some_studies_have_does_not_make_its_row_differ():
    storage = optuna.storages.InMemoryStorage()
    gemm = demo.make_study(storage, "gemm", n_trials=30, seed=1)
    other = optuna.create_study(storage=storage, study_name="other")  # another kernel: none of the GEMM's defines
    other.add_trial(optuna.trial.create_trial(params={"X": 1}, distributions={"X": optuna.distributions.IntDistribution(0, 3)},
                                              value=1.0))
    twin = demo.make_study(storage, "twin", n_trials=30, seed=1)  # the same winner as gemm
    table = rep._shape_defines_table([rep.load_study(s) for s in (gemm, other, twin)])
    axis = next(iter(gemm.best_trial.params))
    row = next(r for r in table.split("<tr>") if f"<code>{axis}</code>" in r)
    assert "<b>" not in row and "–" in row, row


def test_figures_with_nothing_to_show_are_left_out():
    """A Kernel Tuner replay records no registers or shared memory, and with every trial complete
    there is nothing pruned or failed: neither figure is drawn as empty axes."""
    import tuner
    from tests.conftest import PNPOLY

    study = tuner.tune(None, replay=PNPOLY, storage="memory", trials=6, sampler="grid", pruner=False).study
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    page, figs = rep.render_study_page(rep.load_study(study), "", "")
    assert not figs.errors and 'id="fig-history"' in page
    assert 'id="fig-resources"' not in page and 'id="fig-failures"' not in page
    assert "No trial was pruned or failed." in page


def test_a_study_of_one_trial_draws_every_figure():
    storage = optuna.storages.InMemoryStorage()
    study = demo.make_study(storage, "one", n_trials=1, seed=5)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 1
    page, figs = rep.render_study_page(rep.load_study(study), "", "")
    assert not figs.errors and 'id="fig-boxes"' in page, figs.errors


# -------------------------------------------------------------------------------- pages


def test_report_pages(journal, report_dir):
    pages = sorted(p.name for p in report_dir.glob("*.html"))
    names = ["fc1-empty", "fc1-h200", "fc2-broken", "fc2-h200", "patch_embed-h200"]
    assert pages == sorted(["index.html"] + [rep.study_filename(n) for n in names])
    page = (report_dir / rep.study_filename("patch_embed-h200")).read_text()
    for fig in ("history", "parallel", "importances", "slice", "boxes", "resources", "failures"):
        assert f'id="fig-{fig}"' in page
    assert "could not be built" not in page
    inline_js = "<script src=" not in page and page.count("<script") >= 8  # plotly.js inline, once
    assert inline_js
    assert page.count("Plotly.newPlot") == 7
    for label in ("source hash", "NVRTC", "NVIDIA H200", "M=928256 N=768 K=768", "cublas_plus_epilogue", "-DTN="):
        assert label in page
    index = (report_dir / "index.html").read_text()
    for n in names:
        assert f'href="{rep.study_filename(n)}"' in index
    assert 'id="fig-shapes"' in index and "Winning defines per study" in index
    assert index.count("Plotly.newPlot") == 1


def test_report_subset_links_only_written_pages(journal, tmp_path):
    paths = write_report(journal, tmp_path, study_names=["fc1-h200"])
    assert [p.name for p in paths] == ["index.html", rep.study_filename("fc1-h200")]
    index = (tmp_path / "index.html").read_text()
    assert f'href="{rep.study_filename("fc1-h200")}"' in index
    assert rep.study_filename("fc2-h200") not in index and "fc2-h200" in index  # listed, unlinked
    with pytest.raises(UserError, match="no study named nope"):
        write_report(journal, tmp_path, study_names=["nope"])


def test_report_of_an_empty_storage(tmp_path):
    paths = write_report(optuna.storages.InMemoryStorage(), tmp_path)
    assert "holds no studies yet" in paths[0].read_text()


def test_tuner_report_of_a_storage_without_studies_says_so(tmp_path, capsys):
    from tuner.cli import commands as cli

    (tmp_path / "empty.log").touch()
    assert cli.main(["report", "--storage", str(tmp_path / "empty.log"), "-o", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote the index (no study there yet) in {tmp_path / 'r'}/ from "), out
    assert cli.main(["report", "--storage", str(tmp_path / "empty.log"), "-o", str(tmp_path / "r")]) == 0
    assert capsys.readouterr().out.startswith("updated the index (no study there yet)")


def test_cli_report_and_its_errors(journal, tmp_path, capsys):
    from tuner.cli import commands as cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {"report", "dashboard"} <= set(sub.choices)  # registered into the tuner CLI

    assert cli.main(["report", "--storage", journal, "--study", "fc2-h200", "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / rep.study_filename("fc2-h200")).exists()
    assert cli.main(["report", "--storage", str(tmp_path / "missing.db"), "--all", "-o", str(tmp_path)]) == 2
    assert cli.main(["report", "--storage", journal, "--study", "nope", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no SQLite database" in err and "no study named nope" in err and "Traceback" not in err


def test_python_m_dashboards_report_says_one_line_as_tuner_report(journal, tmp_path):
    out = tmp_path / "r"
    result = subprocess.run([sys.executable, "-m", "dashboards", "report", "--storage", journal, "-o", f"{out}/"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout.startswith("wrote ") and f"pages in {out}/ from" in result.stdout, result
    again = subprocess.run([sys.executable, "-m", "dashboards", "report", "--storage", journal, "-o", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.startswith("updated "), again


def test_the_dashboard_without_its_extra_says_how_to_install_it(journal, capsys, monkeypatch):
    from tuner.cli import commands as cli

    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)  # as without the dashboard extra
    assert cli.main(["dashboard", "--storage", journal]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "tuner: error: tuner dashboard needs optuna-dashboard: pip install -e '.[dashboard]'", err


def _paired_copy(reference_ms: float) -> tuple[optuna.Study, optuna.Study]:
    """A demo study (values in ms) and its copy timed against a reference of ``reference_ms``: values
    and block medians are ratios, each trial keeps its ms, its ratio and the reference's ms."""
    storage = optuna.storages.InMemoryStorage()
    source = demo.make_study(storage, "ms", shape="patch_embed", n_trials=40, seed=4)
    paired = optuna.create_study(storage=storage, study_name="paired")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        paired.set_metric_names(["ratio"])
    for key, value in source.user_attrs.items():
        paired.set_user_attr(key, value)
    for t in source.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)):
        attrs = dict(t.user_attrs)
        if t.state == TrialState.COMPLETE:
            attrs.update(ratio=t.user_attrs["ms"] / reference_ms, reference_ms=reference_ms)
        paired.add_trial(optuna.trial.create_trial(
            params=t.params, distributions=t.distributions, state=t.state, user_attrs=attrs,
            value=t.user_attrs["ms"] / reference_ms if t.state == TrialState.COMPLETE else None,
            intermediate_values={k: v / reference_ms for k, v in t.intermediate_values.items()}))
    return source, paired


def test_a_paired_studys_best_is_shown_in_ms_with_its_speedups_from_ms():
    """A study timed against a reference stores ratios: the report's best and its speed-ups over the
    baselines read the trial's ms, as `tuner status` does, and its heading names the ratio as one."""
    reference_ms = 2.0
    source, paired = _paired_copy(reference_ms)
    data = rep.load_study(paired)
    best = data.best()
    row = rep.index_rows([data])[0]
    assert row["best_ms"] == pytest.approx(best["ms"]) and best["value"] == pytest.approx(best["ms"] / reference_ms)
    cublas = source.user_attrs["baseline_ms"]["cublas"]
    assert dict((n, s) for n, _, s in row["speedups"])["cublas"] == pytest.approx(cublas / best["ms"])
    page, _ = rep.render_study_page(data, "", "")
    assert f"x the reference</b>, {rep._fmt(best['ms'])} ms" in page


def test_a_paired_studys_times_and_note_are_in_ms():
    """The figures labelled ms and the study's note read a paired study's ratios on the reference's
    scale; a pruned config's last block median too."""
    reference_ms = 2.0
    source, paired = _paired_copy(reference_ms)
    data = rep.load_study(paired)
    own = rep.load_study(source)
    timed = own.df[own.df["state"] != "FAIL"]["time_ms"].dropna()  # the copy leaves failed trials out
    assert len(timed) and sorted(data.df["time_ms"].dropna()) == pytest.approx(sorted(timed))
    pruned = data.df[data.df["state"] == "PRUNED"]["time_ms"].dropna()
    assert len(pruned) and pruned.min() > data.df["value"].max()  # ms, not the block's ratio
    figure = rep.fig_resources(data)
    assert max(max(t.y) for t in figure.data) == pytest.approx(own.df["time_ms"].max())

    note = study_note(paired)
    best = min(paired.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.value)
    ms = best.user_attrs["ms"]
    assert f"**{best.value:.4f} x the reference, {ms:.4g} ms**" in note
    cublas = source.user_attrs["baseline_ms"]["cublas"]
    assert f"{cublas / ms:.2f}x over cublas" in note


def test_passwords_never_reach_pages_or_notes(tmp_path):
    """A Postgres URL with a password (trust auth accepts any): neither HTML nor note shows it."""
    import psycopg
    import sqlalchemy

    base = os.environ.get("TUNER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    url = sqlalchemy.engine.make_url(base)
    db = f"dash_{uuid.uuid4().hex[:8]}"
    admin = f"host={url.host} port={url.port or 5432} user={url.username or 'postgres'} dbname=postgres"
    try:
        conn = psycopg.connect(admin, autocommit=True)
    except Exception as exc:
        pytest.fail(f"PostgreSQL at {url.render_as_string()} is not reachable: {exc}")
    secret = "s3cr3t-Pw"
    storage_url = url.set(password=secret, database=db).render_as_string(hide_password=False)
    conn.execute(f'CREATE DATABASE "{db}"')
    try:
        storage = optuna.storages.RDBStorage(storage_url)
        study = demo.make_study(storage, "pg-fc1", shape="fc1", n_trials=25, seed=3)
        note = write_study_note(study, storage_url)
        paths = write_report(storage_url, tmp_path)
        storage.engine.dispose()
        assert secret not in note and "***" in note and "-DTN=" in note
        for p in paths:
            text = p.read_text()
            assert secret not in text
        assert "postgres:***@" in paths[0].read_text()
    finally:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.close()


def test_study_note_and_artifacts(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    study = demo.make_study(storage, "noted", shape="fc2", n_trials=40, seed=4)
    body = study_note(study)
    best = min((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert best.user_attrs["flags"] in body and "x over cublas" in body and "M=928256" in body
    trial = study.ask()
    ids = attach_trial_artifacts(trial, {"compile.log": "nvrtc ok", "ptxas.txt": "Used 168 registers"},
                                 tmp_path / "artifacts")
    assert set(ids) == {"compile.log", "ptxas.txt"}
    frozen = study.get_trials(deepcopy=False)[trial.number]
    metas = optuna.artifacts.get_all_artifact_meta(frozen, storage=storage)
    assert sorted(m.filename for m in metas) == ["compile.log", "ptxas.txt"]
    study.tell(trial, 1.0)
    with pytest.raises(ValueError, match="attach its artifacts before telling"):
        attach_trial_artifacts(trial, {"late.log": "x"}, tmp_path / "artifacts")
    finished = study.get_trials(deepcopy=False)[trial.number]
    with pytest.raises(ValueError, match="attach its artifacts before telling"):
        attach_trial_artifacts(finished, {"late.log": "x"}, tmp_path / "artifacts", storage=storage)


def test_note_without_optuna_dashboard_is_what_optuna_dashboard_reads(monkeypatch):
    """The engine writes notes without optuna-dashboard; installed, it reads them back."""
    import builtins

    from optuna_dashboard import get_note

    storage = optuna.storages.InMemoryStorage()
    study = demo.make_study(storage, "plain", shape="fc1", n_trials=30, seed=6)
    real_import = builtins.__import__

    def no_dashboard(name, *args, **kwargs):
        if name.startswith("optuna_dashboard"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dashboard)
    first = write_study_note(study) + "\n" + "x" * 5000  # three chunks
    from tuner.store.notes import _save_note

    _save_note(study, first)
    body = write_study_note(study)  # shorter: the old chunks must not leak into it
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert get_note(study) == body and "-DTN=" in body


def test_engine_never_imports_views():
    """Nothing under tuner/ names the dashboards package; the CLI finds it as a plugin."""
    offenders = [str(p) for p in (ROOT / "tuner").rglob("*.py") if re.search(r"^\s*(from|import)\s+dashboards",
                                                                             p.read_text(), re.M)]
    assert offenders == []
    from importlib.metadata import entry_points

    from tuner.cli.commands import COMMANDS_GROUP

    assert "dashboards.cli:register" in {ep.value for ep in entry_points(group=COMMANDS_GROUP)}


# ------------------------------------------------------------------------------ browser


@pytest.fixture(scope="module")
def browser():
    from dashboards.browser import BrowserError, Chromium

    try:
        chromium = Chromium()
    except BrowserError as exc:  # never a skip: CI installs it with .ci/install-browser.sh
        pytest.fail(str(exc))
    yield chromium
    chromium.close()


def _check_rendered(plots: list[dict], expected_ids: set[str]) -> None:
    assert {p["id"] for p in plots} == expected_ids
    for p in plots:
        assert p["main_svg"] >= 1 and p["traces"] >= 1 and p["points"] >= 1 and p["marks"] >= 1, p
        assert p["height"] > 100 and not p["webgl_error"], p


def test_browser_renders_index_and_study_page(browser, report_dir):
    browser.open(report_dir / "index.html")
    _check_rendered(browser.plots(), {"fig-shapes"})
    assert browser.evaluate("document.querySelectorAll('table tr').length") >= 6
    assert browser.errors() == []
    index_png = browser.screenshot(SCREENSHOT_DIR / "report-index.png", max_height=1300)

    href = browser.evaluate("[...document.querySelectorAll('a')].find(a => a.textContent === 'patch_embed-h200').href")
    browser.open(href)
    _check_rendered(browser.plots(), {f"fig-{n}" for n in
                                      ("history", "parallel", "importances", "slice", "boxes", "resources", "failures")})
    assert browser.errors() == []
    # the page fits its width: no horizontal scrollbar (the slices of every define included)
    assert browser.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    study_png = browser.screenshot(SCREENSHOT_DIR / "report-study.png", max_height=2400)
    for png in (index_png, study_png):
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a real, non-blank picture

    browser.open(report_dir / rep.study_filename("fc2-broken"))
    assert "No trial of this study completed" in browser.evaluate("document.body.innerText")
    _check_rendered(browser.plots(), {"fig-failures"})
    assert browser.errors() == []


def test_browser_check_can_fail(browser, tmp_path):
    """The harness sees JS errors and plots without data (so the test above can fail)."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><div class='js-plotly-plot' id='empty'></div>"
                   "<script>undefinedFunction()</script></body></html>")
    browser.open(bad, settle_s=0.3)
    assert any("undefinedFunction" in e for e in browser.errors())
    with pytest.raises(AssertionError):
        _check_rendered(browser.plots(), {"empty"})


# ---------------------------------------------------------------------- optuna-dashboard


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = resp.read()
        return resp.status, (json.loads(body) if resp.headers.get_content_type() == "application/json" else body)


def test_tuner_dashboard_serves_the_study(tmp_path):
    db = tmp_path / "tuner.db"
    storage_url = f"sqlite:///{db}"
    study = demo.make_study(storage_url, "dash-fc1", shape="fc1", n_trials=40, seed=5)
    write_study_note(study, storage_url)
    running = study.ask()
    ids = attach_trial_artifacts(running, {"ptxas.txt": "ptxas info: Used 168 registers"}, tmp_path / "art")
    study.tell(running, state=TrialState.PRUNED)

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", "dashboard", "--storage", storage_url, "--port", str(port),
         "--artifacts", str(tmp_path / "art")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                status, listing = _get(base + "/api/studies", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"tuner dashboard did not answer on {base}: {proc.communicate()[0]}")
                time.sleep(0.3)
        assert status == 200
        (summary,) = [s for s in listing["study_summaries"] if s["study_name"] == "dash-fc1"]
        attrs = {a["key"]: a["value"] for a in summary["user_attrs"]}
        assert attrs["shape"] == "fc1" and json.loads(attrs["problem"])["N"] == 3072

        _, detail = _get(f"{base}/api/studies/{summary['study_id']}")
        assert len(detail["trials"]) == 41
        assert detail["note"]["body"].startswith("## dash-fc1") and "-DTN=" in detail["note"]["body"]
        # the best trial is a COMPLETE ok/duplicate trial with the smallest ms: never an invalid one
        (best,) = detail["best_trials"]
        best_attrs = {a["key"]: a["value"] for a in best["user_attrs"]}
        assert best["state"] == "Complete" and best_attrs["status"] in ("ok", "duplicate")
        completes = [t["values"][0] for t in detail["trials"] if t["state"] == "Complete"]
        assert best["values"][0] == min(completes)
        pruned = [t for t in detail["trials"] if t["state"] == "Pruned"]
        assert pruned and all("values" not in t for t in pruned)
        sortable = {a["key"]: a["sortable"] for a in detail["union_user_attrs"]}
        assert sortable["regs"] and sortable["smem_bytes"] and sortable["compile_s"]
        trial = detail["trials"][-1]
        (art,) = trial["artifacts"]
        assert art["filename"] == "ptxas.txt" and art["artifact_id"] == ids["ptxas.txt"]
        _, content = _get(f"{base}/artifacts/{summary['study_id']}/{trial['trial_id']}/{art['artifact_id']}")
        assert b"Used 168 registers" in content
        status, page = _get(base + "/dashboard")
        assert status == 200 and b"<html" in page.lower()
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
    assert "optuna-dashboard on http://localhost:" in out
    assert re.search(r"Traceback", out) is None, out


def test_the_report_names_the_confirmed_winner_as_tuner_best_does():
    """A confirmation may rank a config above the one with the best stored value: the page's best is
    the confirmed one, with the confirmation's line."""
    from tuner.evaluate.confirm import CONFIRMATIONS, confirmed_best

    _, paired = _paired_copy(2.0)
    complete = sorted(paired.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.value)
    second = complete[1]
    paired.set_user_attr(CONFIRMATIONS, [{
        "at": "2026-11-30T00:00:00+00:00", "device_name": "NVIDIA H200", "rounds": 100, "winner": second.number,
        "tied": [second.number], "standings": [{"trial": second.number, "value": second.value}, {}]}])
    data = rep.load_study(paired)
    assert int(data.best()["number"]) == second.number == confirmed_best(paired)[0].number
    page, _ = rep.render_study_page(data, "", "")
    assert f"(trial {second.number})" in page and f"confirmed winner: trial {second.number}" in page


def test_the_dashboard_on_a_port_in_use_says_so_before_it_says_where_it_serves(journal, capsys):
    """A port another server holds, or a host that is not this machine's: one line naming the address and
    the flag to change, before the line that says where the dashboard is."""
    import socket

    from tuner.cli import commands as cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["dashboard", "--storage", journal, "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"tuner: error: cannot serve on --host 127.0.0.1 --port {port}: Address already in use: "
                                 "give another --port (or --host: an address of this machine)\n"), (out, err)
    assert cli.main(["dashboard", "--storage", journal, "--host", "192.0.2.1", "--port", "0"]) == 2  # TEST-NET-1: no one's
    assert "cannot serve on --host 192.0.2.1 --port 0: Cannot assign requested address" in capsys.readouterr().err
