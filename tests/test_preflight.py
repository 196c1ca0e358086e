"""The preflight (`tuner check STUDY --compile`) on a user's first kernel: a tiled transpose written
from the README (tests/fixtures/transpose). The correct kernel passes; each planted mistake exits
non-zero with a line naming the file, line or name, and never a traceback."""

import json
import shutil

import numpy as np
import pytest

from tests.conftest import ROOT, tuner
from tuner.check.preflight import stratified
from tuner.compile.cubin import read_cubin

FIXTURE = ROOT / "tests" / "fixtures" / "transpose"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cubins")  # an unchanged .cu compiles once for every case


def planted(tmp_path, file: str = "", old: str = "", new: str = ""):
    """The fixture in ``tmp_path`` with ``old`` replaced by ``new`` in ``file`` (which must contain it)."""
    for f in FIXTURE.iterdir():
        shutil.copy(f, tmp_path / f.name)
    if file:
        text = (tmp_path / file).read_text()
        assert old in text, f"{old!r} not in {file}"
        (tmp_path / file).write_text(text.replace(old, new, 1))
    return tmp_path / "transpose.toml"


def check(study, cache, *extra):
    result = tuner("check", study, "--compile", "--cache-dir", cache, "--jobs", 2, *extra)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def test_the_correct_kernel_passes(tmp_path, shared_cache):
    result = check(planted(tmp_path), shared_cache)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "preflight: passed: passed=14, rejected=0, failed=0" in result.stdout
    # numbers stay numbers where reasons are printed (the grouping may normalise them)
    assert "TILE=16 is not a multiple of BLOCK_ROWS=32" in result.stdout
    data = json.loads(check(planted(tmp_path), shared_cache, "--json").stdout)
    assert data["preflight"]["passed"] and data["preflight"]["counts"] == {"passed": 14}
    assert all(c["preflight"] == "passed" and c["arch"] == "sm_90a" for c in data["configs"])


# (file, old, new, text the failure line must hold): each found only on a GPU before the preflight
FAILS_PREFLIGHT = {
    "kernel misnamed": ("transpose.py", 'source = "transpose.cu"', 'source = "transpose.cu"\n    kernel_name = "transpose_v2"',
                        "entry 'transpose_v2' is not in the CUBIN of transpose.cu (kernels there: transpose)"),
    "not extern C": ("transpose.cu", 'extern "C" __global__', "__global__",
                     "entry 'transpose' is in the CUBIN of transpose.cu only under its C++ name (_Z9transpose"),
    "syntax error in the .cu": ("transpose.cu", "__syncthreads();", "__syncthreads()",
                                "compile_error: transpose.cu(27): error: expected a \";\""),
    "misspelt define in grid()": ("transpose.py", '-(-p["COLS"] // p["TILE"])', '-(-p["COLS"] // p["TILES"])',
                                  "kernel spec transpose.py:23: grid() reads 'TILES', which is no define"),
    "misspelt define in block()": ("transpose.py", 'p["BLOCK_ROWS"], 1)', 'p["BLOCK_ROW"], 1)',
                                   "kernel spec transpose.py:26: block() reads 'BLOCK_ROW'"),
    "unknown input in reference()": ("transpose.py", 'inputs["in"].T', 'inputs["input"].T',
                                     "kernel spec transpose.py:29: reference() reads 'input', which is no input"),
    "reference of the wrong shape": ("transpose.py", 'inputs["in"].T[rows]', 'inputs["in"][rows]',
                                     "reference() returned shape (3, 512) for 3 rows; the first output's rows are (3, 1024)"),
    "an argument missing": ("transpose.py", ', Scalar("int32", COLS)]', "]", "3 arguments for transpose's 4 parameters"),
    "an argument of the wrong size": ("transpose.py", 'Scalar("int32", COLS)', 'Scalar("int64", COLS)',
                                      "argument 4 (int64 scalar, 8 B) where transpose's parameter 4 takes 4 B"),
    "a fraction for an int argument": ("transpose.py", 'Scalar("int32", ROWS)', 'Scalar("int32", ROWS / 1)',
                                       "argument 3: 1024.0 is not a int32"),
    "block over the launch bounds": ("transpose.py", '(p["TILE"], p["BLOCK_ROWS"], 1)', '(p["TILE"], 2 * p["BLOCK_ROWS"], 1)',
                                     "threads > __launch_bounds__"),
    "grid of floats": ("transpose.py", '-(-p["COLS"] // p["TILE"])', 'p["COLS"] / p["TILE"]',
                       "must be three whole numbers"),
    "flops() that raises": ("transpose.py", "return 0.0", 'return 2.0 * problem["SIZE"]',
                            "kernel spec transpose.py:32: flops() raised KeyError: 'SIZE'"),
    "block() missing": ("transpose.py", "def block(self, p):", "def blocks(self, p):",
                        "kernel spec transpose.py: block() is missing: define it in class Spec"),
    "unknown name in a shape": ("transpose.py", 'In("in", ("ROWS", "COLS"))', 'In("in", ("ROWS", "COL"))',
                                "the shape of in reads 'COL'"),
}


@pytest.mark.parametrize("case", FAILS_PREFLIGHT)
def test_planted_mistakes_fail_the_preflight(case, tmp_path, shared_cache):
    file, old, new, expected = FAILS_PREFLIGHT[case]
    result = check(planted(tmp_path, file, old, new), shared_cache)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "preflight: FAILED" in result.stdout
    assert any(expected in line for line in result.stdout.splitlines()), result.stdout


# mistakes in what the user wrote that are bad input: exit 2, one line on stderr
BAD_INPUT = {
    "study arch the spec does not list": ("transpose.toml", 'arch = "sm_90a"', 'arch = "sm_86"',
                                          "transpose.toml: [study.arch] sm_86 is not a target of transpose.py (sm_80, sm_90a)"),
    "syntax error in a restriction": ("transpose.py", '"smem <= 48 * 1024"', '"smem <= 48 * 1024 and"',
                                      "kernel spec transpose.py: restriction 'smem <= 48 * 1024 and' is not a valid expression"),
    "C in a restriction": ("transpose.py", '"smem <= 48 * 1024"', '"smem <= 48 * 1024 && TILE > 0"',
                           "is not a valid expression (invalid syntax at column 20); expressions are Python: and, or, not"),
    "syntax error in a derived value": ("transpose.py", '"TILE * BLOCK_ROWS"', '"TILE * * BLOCK_ROWS"',
                                        "kernel spec transpose.py: derived 'TILE * * BLOCK_ROWS' is not a valid expression"),
    "a word where the kernel takes a number": ("transpose.toml", "PAD = [0, 1]", 'PAD = [0, 1, "yes"]',
                                               "transpose.toml: [space.tier1.PAD] 'yes' is not an integer"),
    "a word for a problem size": ("transpose.toml", "ROWS = 1024", 'ROWS = "big"',
                                  "transpose.toml: [problem.ROWS] 'big' is not an integer"),
    "misspelt define in a restriction": ("transpose.py", '"TILE % BLOCK_ROWS == 0"', '"TILE % BLOCK_ROW == 0"',
                                         "kernel spec transpose.py: 'TILE % BLOCK_ROW == 0': name 'BLOCK_ROW' is not defined"),
    "unknown name in a restriction's message": ("transpose.py", "is not a multiple of BLOCK_ROWS={BLOCK_ROWS}",
                                                "is not a multiple of BLOCK_ROWS={BLOCKROWS}",
                                                "kernel spec transpose.py: a restriction's message reads 'BLOCKROWS'"),
    "a restriction that is not a string": ("transpose.py", '"smem <= 48 * 1024",', "lambda p: True,",
                                           "kernel spec transpose.py: restriction"),
    "a missing problem key": ("transpose.toml", "COLS = 512\n", "",
                              "[problem] misses COLS needed by kernel spec transpose.py"),
    "a misspelt problem key": ("transpose.toml", "COLS = 512\n", "COL = 512\n",
                               "[problem] misses COLS needed by kernel spec transpose.py (COL: not a problem key of the spec)"),
    "a half-precision output": ("transpose.py", 'Out("out", ("COLS", "ROWS"))', 'Out("out", ("COLS", "ROWS"), "float16")',
                                "kernel spec transpose.py: Out('out') is float16: the output check reads float32, or BF16"),
    "an integer input": ("transpose.py", 'In("in", ("ROWS", "COLS"))', 'In("in", ("ROWS", "COLS"), "int32")',
                         "kernel spec transpose.py: In('in') is int32: a light spec fills inputs with uniform values"),
    "a restriction no config meets": ("transpose.py", '"smem <= 48 * 1024"', '"smem <= 0"',
                                      "no valid configuration in the space (18 total; invalid: fails smem <= 0 x14;"),
    "unknown define in the study": ("transpose.toml", "PAD = [0, 1]", "PADDING = [0, 1]",
                                    "define PADDING is not a parameter of kernel spec transpose.py"),
    "an unknown target in the spec's archs": ("transpose.py", 'archs = ("sm_80", "sm_90a")', 'archs = ("sm_80", "sm_90a", "sm91")',
                                              "kernel spec transpose.py: archs lists 'sm91', an unknown target"),
    "a division by zero in a derived value": ("transpose.py", '"4 * TILE * (TILE + PAD)"', '"4 * TILE // (PAD - PAD)"',
                                              "kernel spec transpose.py: '4 * TILE // (PAD - PAD)' raised ZeroDivisionError"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_planted_bad_input_is_one_line(case, tmp_path, shared_cache):
    file, old, new, expected = BAD_INPUT[case]
    result = check(planted(tmp_path, file, old, new), shared_cache)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_a_failed_check_of_the_spec_is_counted_apart_from_the_configs(tmp_path, shared_cache):
    result = check(planted(tmp_path, "transpose.py", 'inputs["in"].T[rows]', 'inputs["in"][rows]'), shared_cache)
    assert result.returncode == 1
    assert "preflight: FAILED: passed=14, rejected=0, failed=0, spec checks failed=1" in result.stdout, result.stdout


def test_the_table_orders_numbers_as_numbers(tmp_path, shared_cache):
    result = check(planted(tmp_path), shared_cache)
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().endswith(" ok")]
    tile_32 = [int(r[1]) for r in rows if r[0] == "32"]  # TILE, BLOCK_ROWS, PAD, ...
    assert tile_32 and tile_32 == sorted(tile_32) and 4 in tile_32 and 32 in tile_32, result.stdout


def test_a_ptxas_error_reads_as_text(tmp_path, shared_cache):
    """ptxas's part of NVRTC's log follows a NUL: it is shown as a line of its own, not a NUL byte."""
    study = planted(tmp_path, "transpose.py", '"smem <= 48 * 1024"', '"TILE == 256"')
    study.write_text(study.read_text().replace("TILE = [16, 32, 64]", "TILE = [16, 256]").replace(
        "BLOCK_ROWS = [4, 8, 32]", "BLOCK_ROWS = [4]"))
    result = check(study, shared_cache)
    assert result.returncode == 1 and "\0" not in result.stdout  # a config that does not compile fails it
    assert "compile_error: ptxas error   : Entry function 'transpose' uses too much shared data" in result.stdout, result.stdout


def test_a_define_nothing_reads_is_named(tmp_path, shared_cache):
    """A define the .cu guards but never reads (and no launch reads) doubles the space for nothing: the same
    CUBIN and launch at each of its values. The check names it; the correct kernel has none."""
    assert "changes neither" not in check(planted(tmp_path / "good" if (tmp_path / "good").mkdir() is None else None),
                                          shared_cache).stdout
    study = planted(tmp_path, "transpose.cu", "#ifndef PAD", "#ifndef VEC\n#define VEC 1\n#endif\n#ifndef PAD")
    study.write_text(study.read_text().replace("PAD = [0, 1]", "PAD = [0, 1]\nVEC = [1, 2, 4]"))
    result = check(study, shared_cache)
    assert result.returncode == 0, result.stdout
    notes = [line for line in result.stdout.splitlines() if "changes neither" in line]
    assert len(notes) == 1 and notes[0].startswith("note: VEC changes neither the compiled kernel nor its launch"), result.stdout


def test_a_run_names_a_define_nothing_reads_among_the_configs_it_built(tmp_path, shared_cache):
    """`tuner run` says it too, from the builds its trials made (the worker double measures them)."""
    from tests.conftest import FAKE_BACKEND

    url = f"sqlite:///{tmp_path / 's.db'}"
    good = tuner("run", planted(tmp_path / "good" if (tmp_path / "good").mkdir() is None else None), "--storage",
                 url, "--trials", 24, "--cache-dir", shared_cache, env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})
    assert good.returncode == 0 and "changes neither" not in good.stderr, good.stderr
    study = planted(tmp_path, "transpose.cu", "#ifndef PAD", "#ifndef VEC\n#define VEC 1\n#endif\n#ifndef PAD")
    study.write_text(study.read_text().replace("PAD = [0, 1]", "PAD = [0, 1]\nVEC = [1, 2, 4]")
                     .replace('name = "transpose"', 'name = "transpose_vec"'))
    result = tuner("run", study, "--storage", url, "--trials", 24, "--cache-dir", shared_cache,
                   env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "changes neither" in line]
    assert len(notes) == 1 and notes[0].startswith("note: VEC changes neither the compiled kernel nor its launch"), result.stderr


def test_several_studies_in_one_check(tmp_path, shared_cache):
    good = planted(tmp_path / "good" if (tmp_path / "good").mkdir() is None else None)
    bad = planted(tmp_path / "bad" if (tmp_path / "bad").mkdir() is None else None,
                  "transpose.py", 'source = "transpose.cu"', 'source = "transpose.cu"\n    kernel_name = "transpose_v2"')
    result = check(good, shared_cache)
    assert result.returncode == 0
    both = tuner("check", good, bad, "--compile", "--cache-dir", shared_cache, "--jobs", 2)
    assert both.returncode == 1 and both.stdout.count("preflight: ") == 2


def test_the_cubin_parameter_table(tmp_path, shared_cache):
    """The reader's view of a CUBIN is what the kernel declares: four parameters, their sizes and offsets."""
    data = json.loads(check(planted(tmp_path), shared_cache, "--json").stdout)
    assert data["configs"]
    from tuner.compile.nvrtc import compile_kernel
    from tuner.contract.kernel_spec import load_spec

    spec = load_spec(tmp_path / "transpose.py")
    built = compile_kernel(spec, {**spec.params, "TILE": 32, "BLOCK_ROWS": 8}, {"ROWS": 1024, "COLS": 512}, "sm_90a",
                           shared_cache)
    kernel = read_cubin(open(built.cubin_path, "rb").read())["transpose"]
    assert [(p.offset, p.size) for p in kernel.params] == [(0, 8), (8, 8), (16, 4), (20, 4)]
    assert kernel.max_threads == 256 and kernel.regs == built.regs


def test_the_scalar_types_are_one_list():
    """A Scalar's type is checked against SCALAR_CTYPES when it is made; the driver builds each and the
    preflight knows each one's size: the three name the same types."""
    from tuner.check.preflight import _SCALAR_LAYOUT
    from tuner.contract.kernel_spec import SCALAR_CTYPES
    from tuner.device.driver import CTYPES

    assert set(SCALAR_CTYPES) == set(CTYPES) == set(_SCALAR_LAYOUT)


def test_stratified_sample_covers_every_value():
    valid = [{"A": a, "B": b} for a in range(40) for b in range(5)]
    chosen = stratified(valid, 16)
    assert len(chosen) < 60 and {c["A"] for c in chosen} == set(range(40)) and {c["B"] for c in chosen} == set(range(5))
    assert stratified(valid[:10], 16) == valid[:10]
    assert np.all(np.diff([valid.index(c) for c in chosen]) > 0)  # in the space's order


def test_the_sm100a_launch_against_its_cubin(tmp_path, monkeypatch):
    """The B200 megakernel's launch (two tensor maps, pointers, a scalar, a 2-CTA cluster, dynamic
    SMEM) matches its CUBIN's parameter table; a launch that drifts from it does not."""
    from dataclasses import replace

    from tests.test_gemm_sm100a import SMALL
    from tuner.check.preflight import check_config, check_spec
    from tuner.compile.nvrtc import compile_kernel
    from tuner.contract.arch import limits
    from tuner.contract.kernel_spec import Scalar, load_spec

    spec = load_spec(ROOT / "kernel" / "gemm_sm100a.py")
    problem = {**SMALL, "EPILOGUE": "BIAS_POS"}
    config = dict(spec.params)
    buffers, failures = check_spec(spec, problem, "sm_100a")
    assert failures == [] and {"A", "W", "C"} <= set(buffers)
    built = compile_kernel(spec, config, problem, "sm_100a", tmp_path)
    b200 = limits("sm_100a")
    assert built.ok and check_config(spec, config, problem, b200, built, buffers) == []
    real = spec.launch
    drifts = {
        "args": (lambda launch: replace(launch, args=[*launch.args[:4], Scalar("uint32", 0)]),
                 "argument 5 (uint32 scalar, 4 B) where gemm_sm100a's parameter 5 takes 8 B"),
        "count": (lambda launch: replace(launch, args=launch.args[:4]), "4 arguments for gemm_sm100a's 5 parameters"),
        "smem": (lambda launch: replace(launch, smem_bytes=b200.max_smem_per_block + 16),
                 f"dynamic > {b200.max_smem_per_block} B per block on sm_100a"),
        "cluster": (lambda launch: replace(launch, cluster=(32, 1, 1)), "cluster (32, 1, 1): 32 CTAs > 16 on sm_100a"),
        "block": (lambda launch: replace(launch, block=(384, 1, 1)), "384 threads > __launch_bounds__"),
    }
    for name, (drift, expected) in drifts.items():
        monkeypatch.setattr(spec, "launch", lambda *a, drift=drift: drift(real(*a)))
        reasons = check_config(spec, config, problem, b200, built, buffers)
        assert any(expected in r for r in reasons), (name, reasons)
