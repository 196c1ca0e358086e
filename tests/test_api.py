"""The Python API on the session the CLI uses: tune, load, Result, and tune_kernel for a kernel
given as data (compiled here with NVRTC; run on a GPU by the gpu-marked test)."""

import gzip
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tuner
from tests.conftest import ROOT
from tuner.compile.nvrtc import compile_many
from tuner.contract.kernel_spec import load_spec
from tuner.errors import UserError
from tuner.search.space import Space
from tuner.study.file import load_study

HOPPER = ROOT / "studies" / "patch_embed_sm90a_hopper_grid.toml"
HOPPER_REPLAY = ROOT / "studies" / "recorded" / "patch_embed_sm90a_hopper_grid_h200.json"
AXPY_SOURCE = (ROOT / "kernel" / "axpy.cu").read_text()
TUNE_PARAMS = {"BLOCK_SIZE": [32, 48, 64, 128, 256], "ITEMS": [1, 2, 4]}


def axpy(folder, **kwargs):
    """The README's axpy kernel, given as data in the manner of Kernel Tuner's tune_kernel."""
    args = [tuner.In("x", ("ROWS", "COLS")), tuner.In("y", ("ROWS", "COLS")), tuner.Out("out", ("ROWS", "COLS")),
            tuner.Scalar("float32", 2.0)]
    return dict(kernel_name="axpy", kernel_source=AXPY_SOURCE, problem={"ROWS": 1024, "COLS": 1024}, arguments=args,
                tune_params=TUNE_PARAMS, grid=("ceil_div(ROWS * COLS, BLOCK_SIZE * ITEMS)", 1, 1),
                block=("BLOCK_SIZE", 1, 1), reference="2.0 * x[rows] + y[rows]",
                restrictions=[("BLOCK_SIZE % 32 == 0", "BLOCK_SIZE={BLOCK_SIZE} is not whole warps")],
                flops="2 * ROWS * COLS", folder=folder, **kwargs)


def axpy_recording(path):
    """A recorded table of axpy over TUNE_PARAMS, fastest at BLOCK_SIZE=128, ITEMS=2."""
    rows = [{"BLOCK_SIZE": b, "ITEMS": i, "ms": 1.0 + abs(b - 128) / 1000 + abs(i - 2) / 100, "status": "ok"}
            for b, i in itertools.product(*TUNE_PARAMS.values())]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_tune_then_load_give_the_same_winner(tmp_path):
    db = f"sqlite:///{tmp_path / 'api.db'}"
    result = tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=db, trials=25, seed=2)
    assert result.summary["trials"] == 25 and result.study.study_name == "patch_embed_sm90a_hopper_grid.replay"
    loaded = tuner.load(HOPPER, storage=db)  # the study file finds its replay, as `tuner best` does
    assert loaded.best_params == result.best_params and loaded.best_flags == result.best_flags
    frame = result.trials
    assert isinstance(frame, pd.DataFrame) and len(frame) == 25
    ok = frame[frame["status"] == "ok"]
    assert result.best_value == ok["value"].min() and result.metric == "ms" and result.tied == [] and result.front.empty
    assert set(result.best_params) <= set(frame.columns)
    header = result.to_header(tmp_path / "out" / "best.h").read_text()
    for name, value in result.best_params.items():
        assert f"#define {name} {value}\n" in header
    with pytest.raises(tuner.UserError, match=r"to_header\(path\): .* is a folder: give a file name"):
        result.to_header(tmp_path / "out")
    assert tuner.load("patch_embed_sm90a_hopper_grid.replay", storage=db).best_params == result.best_params
    as_path = str(tmp_path / "api.db")  # the README's "or a path", as a string too
    assert tuner.load(HOPPER, storage=as_path).best_params == result.best_params


def test_a_notebook_warm_starts_from_a_kernel_tuner_cache_given_as_a_path(tmp_path):
    """``warm_start`` takes what ``--warm-start`` does, a recording's path included (a Path, as a
    notebook holds one): the run starts with that recording's fastest config."""
    caches = ROOT / "tests" / "data" / "kernel_tuner"
    other = caches / "pnpoly_RTX_2080_Ti.json.gz"
    result = tuner.tune(None, replay=caches / "pnpoly_RTX_3090.json.gz", storage=f"sqlite:///{tmp_path / 'w.db'}",
                        trials=3, warm_start=[other], warm_start_top=1)
    first = result.study.trials[0]
    assert first.user_attrs["warm_started_from"].startswith("pnpoly_RTX_2080_Ti.json.gz#")
    recorded = json.loads(gzip.decompress(other.read_bytes()))
    recorded_trials = sum(1 for e in recorded["cache"].values() if e.get("time") != "InvalidConfig")
    # what `tuner run` prints of the warm start, the notebook reads
    assert result.notes == [f"warm start: 1 config queued, prior from {recorded_trials} trials of pnpoly_RTX_2080_Ti.json.gz"]
    fastest = min((e for e in recorded["cache"].values() if isinstance(e.get("time"), (int, float))), key=lambda e: e["time"])
    assert first.params == {k: fastest[k] for k in first.params}


def test_bad_settings_are_one_line_user_errors(tmp_path):
    with pytest.raises(UserError, match="unknown setting 'trails'"):
        tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=f"sqlite:///{tmp_path / 'a.db'}", trails=3)
    with pytest.raises(UserError, match="sampler 'nope' unknown"):
        tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=f"sqlite:///{tmp_path / 'a.db'}", sampler="nope")
    with pytest.raises(UserError, match="no SQLite database"):
        tuner.load(HOPPER, storage=f"sqlite:///{tmp_path / 'a.db'}")


def test_a_notebooks_slips_are_user_errors_in_its_own_terms(tmp_path):
    """What a notebook user gets wrong raises the one-line UserError, naming keywords, not flags."""
    with pytest.raises(UserError, match=r"start: a list, e.g. start=\[\{'BLOCK': 64\}, ...\]"):
        tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage="memory", start={"BLOCK_N": 192})
    with pytest.raises(UserError, match="storage: a URL .* or a path, not a dict"):
        tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage={"url": "x"})
    with pytest.raises(UserError, match=r"In\('x', 'ROWS'\): the shape is a tuple of sizes: \('ROWS',\)"):
        tuner.In("x", "ROWS")
    with pytest.raises(UserError, match="Scalar\\('float33', 2.0\\): the type is one of int32"):
        tuner.Scalar("float33", 2.0)
    with pytest.raises(UserError, match="grid 'ROWS /' is not a valid expression"):
        tuner.kernel_study(**axpy(tmp_path / "k", **{}) | {"grid": ("ROWS /", 1, 1)})
    with pytest.raises(UserError, match=r'records times, no energy: replay the study with objectives = \["time"\]'):
        tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage="memory", objectives=["time", "energy"])
    db = tmp_path / "a.db"  # a path is a SQLite file
    tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=db, trials=2)
    changed = tmp_path / "changed.toml"
    changed.write_text(HOPPER.read_text().replace('"../kernel/', f'"{ROOT}/kernel/').replace(
        "N_STAGES = [", "N_STAGES = [2, "))
    with pytest.raises(UserError, match=r"searched N_STAGES over \[3, 4, 5, 6\], this run over \[2, 3, 4, 5, 6\]: keep "
                                        r"the values, or start a new study with study_name=NEW$") as raised:
        tuner.tune(changed, replay=HOPPER_REPLAY, storage=db, trials=3, study_name="patch_embed_sm90a_hopper_grid.replay")
    assert "--" not in str(raised.value)
    assert raised.value._render_traceback_() == [f"UserError: {raised.value}"]  # IPython shows the one line
    assert {"tune", "load", "UserError", "errors"} <= set(dir(tuner))


def test_a_cell_run_again_and_a_timeout_count_from_the_call(tmp_path, monkeypatch):
    """A notebook's kernel is older than its calls: ``timeout_min`` counts from the call. A cell run again
    resumes the study, and says that nothing ran when the study holds its trials."""
    import time

    import tuner.procfs as procfs

    monkeypatch.setattr(procfs, "started_monotonic", lambda: time.monotonic() - 3600)  # an hour-old kernel
    db = tmp_path / "t.db"
    first = tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=db, trials=4, timeout_min=2)
    assert first.summary["trials_run"] == 4 and first.summary["run_s"] < 120, first.summary
    again = tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=db, trials=4)
    assert again.summary["trials_run"] == 0
    assert "the study holds its trials=4 already: nothing ran (raise trials to go on)" in again.notes, again.notes
    assert repr(again).startswith("<Result 'patch_embed_sm90a_hopper_grid.replay': 4 trials, best {")


def test_a_recording_alone_is_tuned_without_a_study_argument():
    """``study`` may be left out where ``replay=`` names a Kernel Tuner cache, as the docstring says;
    neither given is the command's one line."""
    recording = ROOT / "tests" / "data" / "kernel_tuner" / "pnpoly_RTX_3090.json.gz"
    result = tuner.tune(replay=recording, storage="memory", trials=2)
    assert result.study.study_name == "pnpoly_RTX_3090.replay" and len(result.trials) == 2
    with pytest.raises(UserError, match=r"give a study file \(studies/NAME.toml\), or replay=FILE"):
        tuner.tune(storage="memory", trials=2)


def test_a_study_whose_every_config_failed_still_gives_its_trials(tmp_path):
    cache = {"device_name": "GPU", "kernel_name": "k", "tune_params_keys": ["x"], "tune_params": {"x": [1, 2, 3]},
             "objective": "time", "cache": {str(x): {"x": x, "time": "CompilationFailedConfig"} for x in (1, 2, 3)}}
    path = tmp_path / "failed.json"
    path.write_text(json.dumps(cache))
    result = tuner.tune(None, replay=path, storage="memory", trials=3, sampler="grid")
    assert result.best_trial is None and len(result.trials) == 3 and set(result.trials["status"]) == {"compile_error"}
    assert result.notes[-1].endswith("every one of its 3 trials failed (compile_error=3) (the first compile_error: "
                                     "CompilationFailedConfig): `tuner export` lists each one's reason; fix what they "
                                     "name, then run it again")
    with pytest.raises(UserError, match="every one of its 3 trials failed"):
        _ = result.best_params


def test_overlapping_calls_give_optuna_its_log_level_back(monkeypatch):
    """Two calls that overlap (threads of one notebook): Optuna is quiet while either runs, and its own
    level is back once both have returned, whichever returns first."""
    import optuna

    from tuner.api import _api_call

    optuna.logging.set_verbosity(optuna.logging.INFO)
    first, second = _api_call(), _api_call()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert optuna.logging.get_verbosity() == optuna.logging.ERROR
    second.__exit__(None, None, None)
    assert optuna.logging.get_verbosity() == optuna.logging.INFO
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_progress_bar_is_text_where_no_widget_can_draw(monkeypatch):
    import sys

    from tqdm.std import tqdm as text_bar

    from tuner.progress import progress_bar

    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    bar = progress_bar(total=3, desc="x", disable=True)
    assert type(bar) is text_bar
    bar.close()


def test_kernel_given_as_data_compiles_here(tmp_path):
    """tune_kernel's study: the spec built from the call's data passes the restrictions and
    compiles every valid config with NVRTC (no GPU)."""
    study = tuner.kernel_study(**axpy(tmp_path / "axpy"))
    cfg = load_study(study)
    spec = load_spec(cfg.kernel)
    space = Space.from_study(cfg, spec)
    assert len(space.valid) == 12 and set(space.invalid_examples) and space.total == 15  # BLOCK_SIZE=48: not whole warps
    config = space.full_config({"BLOCK_SIZE": 128, "ITEMS": 4})
    launch = spec.launch(config, space.problem, {})
    assert launch.grid == (2048, 1, 1) and launch.block == (128, 1, 1) and spec.flops(space.problem) == 2 * 1024**2
    assert cfg.arch == "native"  # the GPU found at run time; here, Hopper's target
    results = compile_many(spec, [space.full_config(p) for p in space.valid], space.problem, "sm_90a",
                           tmp_path / "cache", None, 1, None)
    assert [r.status for r in results] == ["ok"] * 12 and all(r.regs for r in results)
    assert results[0].flags.startswith("-DROWS=1024 -DCOLS=1024 -DBLOCK_SIZE=")
    x, y = np.ones(8), np.arange(8.0)
    assert spec.reference({"x": x, "y": y}, space.problem, np.array([0, 5])).tolist() == [2.0, 7.0]


def test_a_kernels_output_check_is_as_tight_as_its_output_type(tmp_path):
    """float32 outputs are checked to 1e-3 unless the call says otherwise (an FP16 shortcut in an FP32
    kernel is then a mismatch), and the precise class is no looser."""
    from tuner.contract.precision import tolerance

    spec = load_spec(load_study(tuner.kernel_study(**axpy(tmp_path / "a"))).kernel)
    assert (spec.atol, spec.rtol) == (1e-3, 1e-3) and tolerance("precise", spec).atol == 1e-3
    loose = load_spec(load_study(tuner.kernel_study(**axpy(tmp_path / "b", atol=1e-2, rtol=5e-3))).kernel)
    assert (loose.atol, loose.rtol) == (1e-2, 5e-3)
    bf16 = axpy(tmp_path / "c")
    bf16["arguments"] = [*bf16["arguments"][:2], tuner.Out("out", ("ROWS", "COLS"), "uint16"), bf16["arguments"][3]]
    assert load_spec(load_study(tuner.kernel_study(**bf16)).kernel).atol == 2e-2


def test_what_a_study_keeps_for_good_is_no_setting_and_says_where_it_is_set():
    with pytest.raises(tuner.UserError, match=r"precision: a study keeps it for good.*\[study\] precision in the study file"):
        tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage="memory", precision="precise")


@pytest.mark.parametrize("change,says", [
    ({"restrictions": "BLOCK_SIZE <= 1024"}, "restrictions: a list of expression strings"),
    ({"restrictions": [lambda p: p["BLOCK_SIZE"] <= 1024]}, "a function cannot be written into the study"),
    ({"problem": (1024, 1024)}, "problem: a dict of sizes by name"),
    ({"atol": -1}, "atol: a positive number"),
    ({"tune_params": {"BLOCK_SIZE": 64, "ITEMS": [1, 2]}}, "tune_params['BLOCK_SIZE']: give a list of values, e.g. "
                                                           "{'BLOCK_SIZE': [64, 128]}; got 64"),
    ({"tune_params": [("BLOCK_SIZE", [64])]}, "tune_params: a dict of value lists by define"),
    ({"arguments": tuner.In("x", ("ROWS", "COLS"))}, "arguments: a list of tuner.In, tuner.Out and tuner.Scalar"),
    ({"grid": 4096}, "grid: three numbers or expressions, e.g. ('ceil_div(N, BLOCK)', 1, 1); got int 4096"),
    ({"block": "BLOCK_SIZE"}, "block: three numbers or expressions, e.g. ('BLOCK', 1, 1); got str 'BLOCK_SIZE'"),
    ({"restrictions": None}, "restrictions: a list of expression strings"),
    ({"restrictions": [1024]}, "restrictions: a list of expression strings"),
    ({"derived": ["THREADS"]}, "derived: a dict of expression strings by name"),
    ({"reference": lambda x, y: 2 * x + y}, "reference: an expression string for the first output's rows"),
    ({"kernel_source": ROOT / "kernel" / "axpy.cu"}, "kernel_source: the CUDA source as a string (a file's: "
                                                     "Path('k.cu').read_text())"),
    ({"kernel_name": 3}, "kernel_name: the name of the source's __global__ function"),
    ({"kernel_name": "ops/axpy"}, "kernel_name 'ops/axpy': the name of the source's __global__ function, e.g. 'axpy' "
                                  "(a C identifier)"),
    ({"folder": 3}, "folder: a folder's path; got int 3"),
    ({"grid": (1.5, 1, 1)}, "grid: three numbers or expressions, e.g. ('ceil_div(N, BLOCK)', 1, 1); got 1.5, not a whole "
                            "number or an expression string"),
    ({"block": ("BLOCK_SIZE", True, 1)}, "block: three numbers or expressions, e.g. ('BLOCK', 1, 1); got True, not a "
                                         "whole number"),
    ({"progress": "yes"}, "progress: True or False (a progress bar), not 'yes'"),
], ids=["one string", "a function", "a tuple problem", "a negative atol", "a value for a list", "a list for a dict",
        "one argument", "a number for a grid", "a name for a block", "no restrictions", "a number for a restriction",
        "a list for derived", "a function for a reference", "a path for a source", "a number for a name",
        "a path for a name", "a number for a folder", "a fraction in a grid", "a bool in a block", "a word for progress"])
def test_kernel_tuner_habits_in_tune_kernel_are_one_line(tmp_path, change, says):
    """A wrong type among tune_kernel's arguments is the one line naming the argument and what it takes,
    not a TypeError from inside the writing of the study."""
    with pytest.raises(tuner.UserError) as err:
        tuner.tune_kernel(**{**axpy(tmp_path / "k"), **change}, storage="memory")
    assert says in str(err.value) and "\n" not in str(err.value)
    assert "study.toml" not in str(err.value)


@pytest.mark.parametrize("call,says", [
    (lambda: tuner.tune(3, storage="memory"), "study: a study file's path (left out with replay=FILE alone), not a int"),
    (lambda: tuner.load(["a.toml"], storage="memory"), "study: a study file's path or a study's name in the storage, "
                                                       "not a list"),
    (lambda: tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage="memory", objectives=["speed"]),
     'objectives: objectives must be ["time"] or ["time", "energy"], got [\'speed\']'),
], ids=["tune: a number", "load: a list", "objectives: an unknown name"])
def test_a_study_or_setting_of_the_wrong_kind_is_one_line(call, says):
    with pytest.raises(tuner.UserError) as err:
        call()
    assert str(err.value) == says


def test_a_notebooks_numpy_integers_are_the_ints_they_hold(tmp_path):
    """np.arange values, np.int64 sizes and settings are plain ints, written and tuned as such; numpy's
    floats and bools stay refused as no integers."""
    study = tuner.kernel_study(**{**axpy(tmp_path / "k"), "problem": {"ROWS": np.int64(1024), "COLS": np.int32(1024)},
                                  "tune_params": {"BLOCK_SIZE": np.arange(32, 257, 32), "ITEMS": [np.int64(1), 2]}})
    assert load_study(study).tier1 == {"BLOCK_SIZE": [32, 64, 96, 128, 160, 192, 224, 256], "ITEMS": [1, 2]}
    result = tuner.tune(study, replay=axpy_recording(tmp_path / "axpy.csv"), storage="memory", trials=np.int64(3),
                        seed=np.int64(3), start=[{"BLOCK_SIZE": np.int64(128), "ITEMS": np.int64(2)}])
    assert len(result.trials) == 3 and result.study.trials[0].params == {"BLOCK_SIZE": 128, "ITEMS": 2}
    launch = tuner.kernel_study(**{**axpy(tmp_path / "g"), "grid": (np.int64(1024), 1, 1), "block": (np.int32(256), 1, 1)})
    assert json.loads((launch.parent / "kernel.json").read_text())["grid"] == [1024, 1, 1]
    for value in (np.float64(64), np.bool_(True)):
        with pytest.raises(UserError, match=rf"tune_params: value {re.escape(repr(value))} of BLOCK_SIZE must be an integer"):
            tuner.kernel_study(**{**axpy(tmp_path / "k"), "tune_params": {"BLOCK_SIZE": [value]}})
    with pytest.raises(UserError, match=r"trials must be an integer, got np.float64\(3.0\)"):
        tuner.tune(study, storage="memory", trials=np.float64(3))


@pytest.mark.parametrize("change,says", [
    ({"restrictions": ["BLOCK_SIZES <= 1024"]}, "restrictions: 'BLOCK_SIZES <= 1024' reads BLOCK_SIZES, which is no "
                                                "define, problem key or derived value; known: BLOCK_SIZE, COLS, ITEMS, "
                                                "ROWS; functions: min, max"),
    ({"restrictions": ["BLOCK_SIZE >= 64 or BLOK_X * 2 <= 64"]}, "restrictions: 'BLOCK_SIZE >= 64 or BLOK_X * 2 <= 64' "
                                                                 "reads BLOK_X, which is no define"),
    ({"derived": {"WARPS": "BLOCK_SIZE // 32 if BLOCK_SIZE >= 32 else BLOK_SIZE"}},
     "derived: 'BLOCK_SIZE // 32 if BLOCK_SIZE >= 32 else BLOK_SIZE' reads BLOK_SIZE, which is no define, problem key or "
     "derived value; known: BLOCK_SIZE, COLS, ITEMS, ROWS, WARPS"),
    ({"reference": "2.0 * z[rows] + y[rows]"}, "reference '2.0 * z[rows] + y[rows]': name 'z' is not defined; "
                                               "known: x, y (inputs)"),
    ({"reference": "x[rows].T"}, "reference() returned shape"),
    ({"grid": ("ceil_div(ROW * COLS, BLOCK_SIZE * ITEMS)", 1, 1)}, "'ceil_div(ROW * COLS, BLOCK_SIZE * ITEMS)': "
                                                                   "name 'ROW' is not defined"),
    ({"block": ("BLOCK_SIZE * 16", 1, 1)}, "threads"),
    ({"kernel_name": "axpi"}, "kernel_name 'axpi' is not a __global__ function of the source (it has axpy)"),
    ({"arguments": [tuner.In("in", ("ROWS", "COLS")), tuner.In("y", ("ROWS", "COLS")), tuner.Out("out", ("ROWS", "COLS")),
                    tuner.Scalar("float32", 2.0)]}, "argument 'in': not a name the reference and shapes can use"),
], ids=["restriction", "restriction: a branch the first config skips", "derived: a branch the first config skips",
        "reference name", "reference shape", "grid", "block", "kernel name", "keyword"])
def test_a_kernel_given_as_data_is_checked_before_any_build(tmp_path, change, says):
    """What the first config's launch and reference show without a compiler is said by kernel_study,
    naming the kernel's own expressions, not the spec file written for it; a name the restrictions or
    derived values read that no config has (a misspelt define), wherever it sits in them."""
    with pytest.raises(tuner.UserError) as err:
        tuner.kernel_study(**{**axpy(tmp_path / "k"), **change})
    assert says in str(err.value) and "\n" not in str(err.value) and "spec.py" not in str(err.value)


def test_a_kernel_written_again_to_its_folder_is_loaded_again(tmp_path):
    """A notebook's cell run again after a fix, with the same folder=, reads the fix (the restriction,
    the source's defaults), not the spec its first run loaded; files left as they are give the same spec."""
    misspelt = {**axpy(tmp_path / "k"), "restrictions": ["BLOCK_SIZES % 32 == 0"]}
    with pytest.raises(UserError, match="reads BLOCK_SIZES"):
        tuner.kernel_study(**misspelt)
    spec_file = load_study(tuner.kernel_study(**{**misspelt, "restrictions": ["BLOCK_SIZE % 64 == 0"]})).kernel
    spec = load_spec(spec_file)
    assert spec.restrictions == ["BLOCK_SIZE % 64 == 0"] and spec.params == {"BLOCK_SIZE": 256, "ITEMS": 4}
    assert load_spec(spec_file) is spec
    tuner.kernel_study(**{**misspelt, "restrictions": ["BLOCK_SIZE % 64 == 0"],
                          "kernel_source": AXPY_SOURCE.replace("ITEMS 4", "ITEMS 2")})  # the source alone
    assert load_spec(spec_file).params == {"BLOCK_SIZE": 256, "ITEMS": 2}


def test_tune_kernel_adds_guards_and_tunes_on_a_replay(tmp_path):
    """A Kernel Tuner style source (no #ifndef guards): the guards are added with the first
    values as defaults; the kernel is tuned against a recorded table."""
    recording = axpy_recording(tmp_path / "axpy.csv")
    kwargs = axpy(tmp_path / "kt")
    kwargs["kernel_source"] = "extern \"C\" __global__ void axpy(const float* x, const float* y, float* out, float a)\n" \
                              "{ long i = (long)blockIdx.x * BLOCK_SIZE * ITEMS + threadIdx.x;\n" \
                              "  for (int k = 0; k < ITEMS; ++k) if (i + k * BLOCK_SIZE < (long)ROWS * COLS)\n" \
                              "    out[i + k * BLOCK_SIZE] = a * x[i + k * BLOCK_SIZE] + y[i + k * BLOCK_SIZE]; }\n"
    result = tuner.tune_kernel(**kwargs, replay=recording, storage=f"sqlite:///{tmp_path / 'k.db'}", trials=12,
                               sampler="grid")
    assert result.best_params == {"BLOCK_SIZE": 128, "ITEMS": 2}
    cu = (tmp_path / "kt" / "axpy.cu").read_text()
    assert cu.startswith("#ifndef BLOCK_SIZE\n#define BLOCK_SIZE 32\n#endif\n#ifndef ITEMS\n#define ITEMS 1\n#endif\n")
    assert json.loads((tmp_path / "kt" / "kernel.json").read_text())["reference"] == "2.0 * x[rows] + y[rows]"


@pytest.mark.parametrize("change,settings,says", [
    ({"tune_params": {"BLOCK_SIZE": [64, 64], "ITEMS": [1]}}, {},
     "tune_params['BLOCK_SIZE'] lists a value twice: 64; give each value once"),
    ({"tune_params": {"BLOCK_SIZE": [64, "wide"], "ITEMS": [1]}}, {},
     "tune_params['BLOCK_SIZE'] 'wide' is not an integer: BLOCK_SIZE is a number in axpy.cu (default 256)"),
    ({"arch": "sm_9O"}, {}, "arch 'sm_9O' unknown; expected 'native' or one of "),
    ({"problem": {"ROWS": 1024, "COLS": 1024, "ITEMS": 2}}, {},
     "tune_params['ITEMS']: ITEMS is in problem too; a define is fixed (problem) or tuned (tune_params), not both"),
    ({}, {"start": [{"BLOCK": 64}]}, "start #1.BLOCK: is not a search axis of tune_params"),
    ({"restrictions": [("BLOCK_SIZE % 32 == 0", "BLOCK_SIZE={BLOCK} is not whole warps")]}, {},
     "a restriction's message reads 'BLOCK', which is no define, problem key or derived value; known: BLOCK_SIZE, "
     "COLS, ITEMS, ROWS"),
], ids=["a value twice", "a word for a number", "an unknown arch", "a problem key tuned", "start: an unknown define",
        "a restriction's message"])
def test_what_the_files_written_for_a_kernel_say_names_the_calls_arguments(tmp_path, change, settings, says):
    """tune_kernel writes a study file and a spec for the kernel: what is said of them names the call's
    arguments (tune_params['BLOCK_SIZE'], arch), not the keys and files the caller never saw; also
    what a run finds (a restriction's message is read when a config fails it)."""
    with pytest.raises(tuner.UserError) as err:
        tuner.tune_kernel(**{**axpy(tmp_path / "k"), **change}, replay=axpy_recording(tmp_path / "axpy.csv"),
                          storage="memory", trials=4, sampler="grid", **settings)
    assert str(err.value).startswith(says) and not re.search(r"study\.toml|spec\.py|\[space|\[study", str(err.value))


@pytest.mark.gpu
def test_tune_kernel_on_the_gpu(tmp_path):
    """tune_kernel end to end on this host's GPU: every trial's output checked, a winner confirmed."""
    result = tuner.tune_kernel(**axpy(tmp_path / "axpy"), storage=f"sqlite:///{tmp_path / 'gpu.db'}", trials=8,
                               cache_dir=tmp_path / "cache")
    statuses = set(result.trials["status"])
    assert statuses <= {"ok", "pruned_slow", "duplicate", "invalid"} and "ok" in statuses, statuses
    assert result.metric == "ratio" and result.best_flags.startswith("-DROWS=1024 -DCOLS=1024")
    assert result.confirmation is not None and result.best_params not in result.tied  # tied: the others
    assert tuner.load(result.study.study_name, storage=f"sqlite:///{tmp_path / 'gpu.db'}").best_params == result.best_params


def test_a_kernel_tuner_cache_replays_a_study_that_holds_some_of_its_columns_fixed(tmp_path):
    """Kernel Tuner's convolution cache records filter_height / filter_width at 15: a study of the same
    kernel holds them in its problem and replays that slice, and hears how much of its space the cache
    records (the rest reads as invalid)."""
    cache = ROOT / "tests" / "data" / "kernel_tuner" / "convolution_RTX_Titan.json.gz"
    params = json.loads(gzip.open(cache).read())["tune_params"]
    source = 'extern "C" __global__ void convolution_kernel(float* out) { out[0] = 1.0f; }\n'
    study = tuner.kernel_study(
        "convolution_kernel", source, problem={"filter_height": 15, "filter_width": 15},
        arguments=[tuner.Out("out", (1,))], grid=(1, 1, 1), block=("block_size_x", "block_size_y", 1),
        reference="np.ones((len(rows),))", restrictions=["block_size_x * block_size_y <= 1024"],
        tune_params={k: v for k, v in params.items() if not k.startswith("filter_")}, folder=tmp_path / "conv")
    result = tuner.tune(study, replay=cache, storage="memory", trials=10, seed=0)
    assert len(result.trials) == 10 and result.best_trial is not None
    note = next(n for n in result.notes if "valid configs" in n)
    assert note.endswith("configs: the others read as invalid (not in the recording); without the study file the "
                         "search keeps to the recorded ones")
    counts = re.search(r"records (\d+) of the study's (\d+) valid configs", note)
    assert counts and 0 < int(counts[1]) < int(counts[2])


def test_a_study_searched_on_otherwise_says_so(tmp_path):
    """Comparing searches on one recording: a second call with another sampler adds to the first's study."""
    db = tmp_path / "s.db"
    first = tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=db, trials=5, seed=1)
    assert not any("was searched with" in n for n in first.notes)
    same = tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=db, trials=8, seed=1)
    assert not any("was searched with" in n for n in same.notes)
    other = tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=db, trials=10, sampler="random")
    assert ("study patch_embed_sm90a_hopper_grid.replay was searched with sampler tpe, seed 1; this run adds trials "
            "with sampler random, no fixed seed to it (study_name=NEW keeps a comparison apart)") in other.notes


def test_a_notebook_running_many_studies_leaves_no_lock_file_open(tmp_path):
    """Each run closes the file that makes its proposals one step across processes (a notebook's
    process runs study after study and keeps their results: an open file each would pile up)."""
    def open_locks() -> list[str]:
        fds = Path("/proc/self/fd")
        return [link for fd in fds.iterdir() if (link := os.path.realpath(fd)).endswith(".propose.lock")]

    results = [tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage=tmp_path / f"t{i}.db", trials=2) for i in range(2)]
    assert all(r.best_trial is not None for r in results) and open_locks() == []


def test_a_script_calling_tune_at_its_top_level_runs_once_on_the_gpu_path(tmp_path):
    """No ``if __name__ == "__main__":``: the GPU worker and the compile helpers start without running
    the script again (each would call tune again, and fail while it starts)."""
    import subprocess
    import sys

    from tests.conftest import FAKE_BACKEND
    from tuner.testing import write_study

    study = write_study(tmp_path, "script", tier1={"BLOCK": [32, 64], "THREAD_TILE": [2, 4]}, search={"trials": 4})
    runs = tmp_path / "runs.txt"
    script = tmp_path / "tune_it.py"
    script.write_text(f"import tuner\nopen({str(runs)!r}, 'a').write('ran\\n')\n"
                      f"result = tuner.tune({str(study)!r}, storage={str(tmp_path / 's.db')!r}, compile_ahead=2)\n"
                      "import sys\nprint('best', result.best_params, 'spec', sys.modules['__main__'].__spec__)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TUNER_WORKER_BACKEND": FAKE_BACKEND,
                               "TUNER_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "best {" in done.stdout and "Traceback" not in done.stderr
    assert runs.read_text() == "ran\n"  # the script ran once: in no child
    assert done.stdout.rstrip().endswith("spec None")  # its main module as it was, after the call


def test_a_kernel_given_as_data_is_written_inside_a_cache_folder_of_ones_own(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "mine"))
    study = tuner.kernel_study(**axpy(None))
    assert study.is_file() and study.parent.parent == tmp_path / "mine" / "kernels"
    assert study.parent.name.startswith("axpy-") and (study.parent / "axpy.cu").is_file()


@pytest.mark.parametrize("given,says", [
    ({"start": [{"BLOKC_N": 128}]}, "start #1.BLOKC_N: is not a search axis"),
    ({"start": [{"BLOCK_N": 7}]}, "start #1.BLOCK_N: 7 is not one of the axis values [128, 192, 256]"),
    ({"reference": {"BLOKC_N": 128}}, "reference.BLOKC_N: is not a search axis"),
], ids=["start: an unknown axis", "start: a value off the axis", "reference: an unknown axis"])
def test_start_and_reference_keywords_are_checked_as_the_study_files_are(given, says):
    with pytest.raises(tuner.UserError) as err:
        tuner.tune(HOPPER, replay=HOPPER_REPLAY, storage="memory", trials=3, **given)
    assert says in str(err.value) and "\n" not in str(err.value)
