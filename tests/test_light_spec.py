"""The light spec (tuner/contract/light.py): defines from the .cu's guards, data instead of methods.

The README's example kernel (kernel/axpy.*) compiles with NVRTC and tunes by replay of a
table that `tuner grid` records (the worker is the test double: no GPU here)."""

import csv
import json
import statistics

import numpy as np
import pytest

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tuner.compile.nvrtc import SourceBundle
from tuner.compile.targets import nvrtc_builds
from tuner.contract.kernel_spec import Buffer, DeviceInfo, Scalar, load_spec
from tuner.contract.light import guarded_defines
from tuner.errors import UserError

AXPY = ROOT / "studies" / "axpy.toml"


def test_params_are_the_cu_guards_less_the_problem():
    assert guarded_defines(ROOT / "kernel" / "axpy.cu") == {"ROWS": 4096, "COLS": 4096, "BLOCK_SIZE": 256, "ITEMS": 4}
    spec = load_spec(ROOT / "kernel" / "axpy.py")
    assert spec.params == {"BLOCK_SIZE": 256, "ITEMS": 4}
    assert (spec.name, spec.kernel_name) == ("axpy", "axpy")
    sgemm = load_spec(ROOT / "kernel" / "example_sgemm.py")
    assert list(sgemm.params) == ["BLOCK", "BLOCK_K", "THREAD_TILE", "UNROLL_K", "PLANT_HANG", "PLANT_BUG"]
    assert sgemm.params["BLOCK"] == 64 and sgemm.params["UNROLL_K"] == 1


def test_restrictions_launch_inputs_and_reference():
    spec = load_spec(ROOT / "kernel" / "axpy.py")
    problem = {"ROWS": 4, "COLS": 100}
    assert spec.check({"BLOCK_SIZE": 48, "ITEMS": 1}, problem) == "BLOCK_SIZE=48 is not whole warps"
    assert spec.check({"BLOCK_SIZE": 512, "ITEMS": 1}, problem) == "fails per_block <= ROWS * COLS"
    assert spec.check({"BLOCK_SIZE": 64, "ITEMS": 2}, problem) is None
    launch = spec.launch({"BLOCK_SIZE": 64, "ITEMS": 2}, problem, DeviceInfo())
    assert launch.grid == (4, 1, 1) and launch.block == (64, 1, 1)  # ceil(400 / 128)
    assert launch.args == [Buffer("x"), Buffer("y"), Buffer("out"), Scalar("float32", 2.0)]
    inputs = spec.inputs(problem, np.random.default_rng(0))
    assert {k: v.shape for k, v in inputs.items()} == {"x": (4, 100), "y": (4, 100)}
    assert all(v.dtype == np.float32 and np.all(v != 0) for v in inputs.values())
    assert spec.outputs(problem)["out"].shape == (4, 100)
    rows = np.array([1, 3])
    np.testing.assert_allclose(spec.reference(inputs, problem, rows), 2.0 * inputs["x"][rows] + inputs["y"][rows])
    sgemm = load_spec(ROOT / "kernel" / "example_sgemm.py")
    config = {**sgemm.params, "THREAD_TILE": 16, "BLOCK": 128}
    assert sgemm.check(config, {"M_DIM": 256, "N_DIM": 256, "K_DIM": 64}) == \
        "THREAD_TILE=16: 256 accumulators per thread, over 64"


def test_an_unknown_name_in_a_restriction_is_one_clear_error(tmp_path):
    (tmp_path / "k.cu").write_text("#ifndef T\n#define T 1\n#endif\nextern \"C\" __global__ void k() {}\n")
    (tmp_path / "k.py").write_text("from tuner.contract.light import LightSpec\n\nclass Spec(LightSpec):\n"
                                   "    source = 'k.cu'\n    restrictions = ['T < NOPE']\n")
    spec = load_spec(tmp_path / "k.py")
    with pytest.raises(UserError, match="'T < NOPE'.*NOPE"):
        spec.check({"T": 1}, {})


@pytest.mark.parametrize("source,entry", [
    ('extern "C" __global__ void transpose_tiled(float* o) {}\n', "transpose_tiled"),  # the one __global__
    ('extern "C" __global__ void k(float* o) {}\nextern "C" __global__ void other() {}\n', "k"),  # named as the file
    ('extern "C" __global__ void a() {}\nextern "C" __global__ void b() {}\n', "k"),  # neither: the preflight says
])
def test_the_entry_is_the_function_named_as_the_file_else_the_one_global_function(tmp_path, source, entry):
    (tmp_path / "k.cu").write_text("#ifndef T\n#define T 1\n#endif\n" + source)
    (tmp_path / "k.py").write_text("from tuner.contract.light import LightSpec\n\nclass Spec(LightSpec):\n"
                                   "    source = 'k.cu'\n")
    assert load_spec(tmp_path / "k.py").kernel_name == entry


def test_restrictions_written_as_kernel_tuner_writes_them(tmp_path):
    """Kernel Tuner's restrictions call int(), pow() and the like, and divide by a tunable that may be
    0: such a config fails the restriction (Kernel Tuner skips it), the study goes on."""
    (tmp_path / "k.cu").write_text("#ifndef T\n#define T 1\n#endif\n#ifndef U\n#define U 1\n#endif\n"
                                   "extern \"C\" __global__ void k() {}\n")
    (tmp_path / "k.py").write_text("from tuner.contract.light import LightSpec\n\nclass Spec(LightSpec):\n"
                                   "    source = 'k.cu'\n    problem_keys = ('N',)\n"
                                   "    restrictions = ['int(T / 32) >= 1', 'pow(2, int(log2(T))) == T', 'N % U == 0']\n")
    spec = load_spec(tmp_path / "k.py")
    assert spec.check({"T": 64, "U": 4}, {"N": 64}) is None
    assert "int(T / 32)" in spec.check({"T": 16, "U": 4}, {"N": 64})
    assert "pow(2" in spec.check({"T": 96, "U": 4}, {"N": 64})
    assert "N % U == 0" in spec.check({"T": 64, "U": 0}, {"N": 64})  # a division by zero: the config fails it
    (tmp_path / "k2.py").write_text((tmp_path / "k.py").read_text().replace("'N % U == 0'", "'len(T) > 0'"))
    with pytest.raises(UserError, match=r"name 'len' is not defined; known: .*; functions: min, max, abs, ceil_div, int"):
        load_spec(tmp_path / "k2.py").check({"T": 64, "U": 1}, {"N": 64})


def test_source_hash_covers_included_headers_like_the_compile_cache(tmp_path):
    (tmp_path / "k.cuh").write_text("#define SCALE 2\n")
    (tmp_path / "k.cu").write_text('#include "k.cuh"\n#ifndef T\n#define T 1\n#endif\n'
                                   'extern "C" __global__ void k(float* o) { o[0] = SCALE * T; }\n')
    (tmp_path / "k.py").write_text("from tuner.contract.light import LightSpec\n\nclass Spec(LightSpec):\n    source = 'k.cu'\n")
    spec = load_spec(tmp_path / "k.py")
    before = spec.source_hash()
    assert before == SourceBundle.load(tmp_path / "k.cu").digest()[:16]
    (tmp_path / "k.cuh").write_text("#define SCALE 3\n")
    assert spec.source_hash() != before


def test_readme_kernel_compiles_with_nvrtc_and_tunes_by_replay(tmp_path):
    """`tuner grid` compiles every valid config (real NVRTC) and records the table; replay tunes on it."""
    checked = json.loads(tuner("check", AXPY, "--compile", "--json", "--cache-dir", tmp_path / "c").stdout)
    targets = [a for a in load_spec(ROOT / "kernel" / "axpy.py").archs if nvrtc_builds(a)]  # native: each one
    assert checked["valid"] == 20 and len(targets) == 4 and checked["compiled"] == {"ok": 20 * len(targets)}
    table = tmp_path / "axpy.csv"
    grid = tuner("grid", AXPY, "--storage", f"sqlite:///{tmp_path / 'g.db'}", "--csv", table,
                 "--cache-dir", tmp_path / "c", env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})
    assert grid.returncode == 0, grid.stderr
    listed = list(csv.DictReader(table.open()))
    rows = [r for r in listed if r["status"] != "invalid"]  # (the configs the restrictions reject follow, with why)
    assert len(rows) == 20 and all(int(float(r["regs"])) > 0 for r in rows)
    assert len(listed) - len(rows) == checked["total"] - checked["valid"]
    run = tuner("run", AXPY, "--replay", table, "--storage", "memory", "--trials", 12, "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    # the grid paired each config with the reference: its table's ratios ('value') rank the configs, on the scale
    # of the median time per unit ratio (a config's own 'ms' moved with the clock)
    ratios = {(int(r["BLOCK_SIZE"]), int(r["ITEMS"])): float(r["value"]) for r in rows}
    scale = statistics.median(float(r["ms"]) / float(r["value"]) for r in rows)
    best = summary["best"]
    ratio = ratios[(best["params"]["BLOCK_SIZE"], best["params"]["ITEMS"])]
    assert summary["trials"] == 12 and best["ms"] == pytest.approx(ratio * scale, rel=1e-12)


def test_readme_shows_the_spec_as_it_is():
    readme = (ROOT / "README.md").read_text()
    spec = (ROOT / "kernel" / "axpy.py").read_text()
    shown = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert shown.strip() and shown in spec
