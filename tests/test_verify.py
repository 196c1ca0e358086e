"""The output check without a GPU: the reference and comparison kernels compile with NVRTC for the
targets they run on, the reference kernels' launches mean the spec's reference math, and the
decision (counts -> pass or a reason) is the one both checks use."""

import numpy as np
import pytest

from tests.conftest import ROOT
from tuner.contract.arch import plain_target
from tuner.contract.kernel_spec import EXPECTED, Buffer, Scalar, host_inputs, load_spec
from tuner.contract.numerics import bf16_to_f32, f32_to_bf16
from tuner.contract.precision import Tolerance
from tuner.device.verify import (
    VERIFY_SOURCE,
    CheckResult,
    compile_soon,
    compile_source,
    host_check,
    reference_source,
    rows_to_sample,
    verdict,
)

EPILOGUES = ("BIAS_POS", "BIAS_GELU", "BIAS_RESIDUAL")
TOL = Tolerance(2e-2, 2e-2)   # the fast class: the row-RMS floor
SPECS = {"gemm_sm90a.py": ("sm_90a", (9, 0)), "gemm_sm100a.py": ("sm_100a", (10, 0))}


def small_problem(epilogue):
    return {"M": 40, "N": 64, "K": 128, "EPILOGUE": epilogue, "SEQ_LEN": 7}


@pytest.mark.parametrize("spec_file", sorted(SPECS))
def test_reference_kernel_compiles_for_the_spec_arch_and_the_plain_device_target(spec_file):
    spec = load_spec(ROOT / "kernel" / spec_file)
    ref = spec.reference_kernel(small_problem("BIAS_RESIDUAL"))
    name, text = reference_source(spec, ref)
    arch, cc = SPECS[spec_file]
    for target in (arch, plain_target(cc)):   # the worker builds for the GPU's plain target
        assert compile_source(name, text, target)  # a CUBIN, or RuntimeError with the log


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_100a"])
def test_comparison_kernels_compile(arch):
    assert compile_source("verify.cu", VERIFY_SOURCE, arch)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_100a"])
def test_input_generator_compiles(arch):
    from tuner.device.inputs import GENERATOR_SOURCE

    assert compile_source("generate.cu", GENERATOR_SOURCE, arch)


def test_helper_kernels_come_from_the_compile_cache(tmp_path, monkeypatch):
    from tuner.compile import nvrtc as compile_module

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    first = compile_source("verify.cu", VERIFY_SOURCE, "sm_90")
    monkeypatch.setattr(compile_module, "_nvrtc_compile", lambda *a: pytest.fail("compiled again"))
    assert compile_source("verify.cu", VERIFY_SOURCE, "sm_90") == first
    assert len(list(tmp_path.glob("helper-*.cubin"))) == 1


def test_a_helper_started_ahead_is_built_once_on_another_thread(tmp_path, monkeypatch):
    import threading

    from tuner.compile import nvrtc as compile_module

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    real, threads = compile_module._nvrtc_compile, []

    def counted(*args):
        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(compile_module, "_nvrtc_compile", counted)
    ahead = compile_soon("verify.cu", VERIFY_SOURCE, "sm_90")
    assert compile_soon("verify.cu", VERIFY_SOURCE, "sm_90") is ahead  # asked again before it is collected
    cubin = compile_source("verify.cu", VERIFY_SOURCE, "sm_90")
    assert cubin == ahead.result() and cubin[:4] == b"\x7fELF"
    assert len(threads) == 1 and threads[0] is not threading.main_thread()
    assert compile_source("verify.cu", VERIFY_SOURCE, "sm_90") == cubin  # collected: now from the cache
    assert len(threads) == 1


def test_a_broken_source_reports_the_compiler_log():
    with pytest.raises(RuntimeError, match="does not compile for sm_90.*error"):
        compile_source("bad.cu", 'extern "C" __global__ void k() { undefined_name(); }', "sm_90")


def emulate(ref, inputs, problem):
    """What kernel/gemm_reference.cu computes from the launch's arguments (numpy, float64)."""
    args = ref.launch.args
    a_buf, w_buf, bias, addend, addend_rows, gelu, out, m, n, k = args
    assert (a_buf, w_buf, out) == (Buffer("A"), Buffer("W"), Buffer(EXPECTED))
    assert (m.value, n.value, k.value) == (problem["M"], problem["N"], problem["K"])
    gx, gy, _ = ref.launch.grid
    assert gx * 128 >= problem["N"] and gy * 128 >= problem["M"] and ref.launch.block == (256, 1, 1)
    from tuner.contract.numerics import fp8_to_f32

    v = fp8_to_f32(inputs["A"]).astype(np.float64) @ fp8_to_f32(inputs["W"]).astype(np.float64).T
    if isinstance(bias, Buffer):
        v = v + bf16_to_f32(inputs[bias.name]).astype(np.float64)[None, :]
    else:
        assert bias == Scalar("uint64", 0)
    if isinstance(addend, Buffer):
        table = bf16_to_f32(inputs[addend.name]).astype(np.float64).reshape(-1, problem["N"])
        assert len(table) == addend_rows.value
        v = v + table[np.arange(problem["M"]) % addend_rows.value]
    if gelu.value:
        v = 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))
    return v


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("spec_file", sorted(SPECS))
def test_reference_kernel_launch_computes_the_spec_reference(spec_file, epilogue):
    spec = load_spec(ROOT / "kernel" / spec_file)
    problem = small_problem(epilogue)
    rng = np.random.default_rng(3)
    inputs = host_inputs(spec.inputs(problem, rng), rng)
    expected = spec.reference(inputs, problem, np.arange(problem["M"]))
    got = emulate(spec.reference_kernel(problem), inputs, problem)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)


def test_example_spec_has_no_reference_kernel_and_keeps_the_host_check():
    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    assert spec.reference_kernel({"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}) is None


def test_sampled_rows_the_study_overrides_the_spec():
    spec = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
    problem = small_problem("BIAS_POS")
    assert rows_to_sample(spec, problem, 0) == 256   # not given: the spec's
    assert rows_to_sample(spec, problem, 16) == 16
    assert rows_to_sample(spec, problem, 1000) == 1000


# -- the decision ----------------------------------------------------------------------------------------------------


def test_host_check_counts_every_kind_of_bad_value():
    rng = np.random.default_rng(0)
    expected = (rng.standard_normal((6, 50)) * 2).astype(np.float32)
    got = bf16_to_f32(f32_to_bf16(expected))     # BF16 rounding only: within tolerance
    clean = host_check(got, expected, np.arange(10, 16), 1000, TOL)
    assert (clean.n_nan, clean.n_over, clean.checked, clean.fraction) == (0, 0, 300, 0.3)
    assert 0.0 < clean.max_err < 0.5 and verdict(clean) == (True, "")

    rms = np.sqrt(np.mean(expected.astype(np.float64) ** 2, axis=1))
    got = got.copy()
    tol = 2e-2 + 2e-2 * max(abs(float(expected[2, 4])), float(rms[2]))
    got[2, 4] = expected[2, 4] + 3 * tol        # error 3: the worst
    got[5, 0] = expected[5, 0] - 1.5 * (2e-2 + 2e-2 * max(abs(float(expected[5, 0])), float(rms[5])))
    over = host_check(got, expected, np.arange(10, 16), 1000, TOL)
    assert over.n_over == 2 and over.worst == (12, 4) and over.max_err == pytest.approx(3.0, rel=1e-3)
    ok, reason = verdict(over)
    assert not ok and reason.startswith("2 values over tolerance of 300 checked") and "row 12 col 4" in reason

    got[3, 7] = np.nan                           # an unwritten (poisoned) value outranks errors
    nan = host_check(got, expected, np.arange(10, 16), 1000, TOL)
    assert (nan.n_nan, nan.n_over, nan.n_bad, nan.worst, nan.max_err) == (1, 2, 3, (13, 7), None)
    ok, reason = verdict(nan)
    assert not ok and reason.startswith("NaN/unwritten output: 1 values") and "row 13 col 7" in reason


def test_verdict_reports_a_race_only_when_values_are_right():
    race = CheckResult(checked=100, total=100, max_err=0.1, race_rows=3, first_race_row=17)
    ok, reason = verdict(race)
    assert not ok and "3 rows" in reason and "first row 17" in reason
    assert verdict(CheckResult(checked=100, total=100, max_err=0.1, race_rows=0)) == (True, "")
    assert verdict(CheckResult(checked=100, total=100, max_err=0.1, race_rows=None)) == (True, "")  # not compared


def test_full_check_reason_gives_the_share_of_bad_values():
    every = CheckResult(checked=1000, total=1000, n_over=1000, max_err=40.0, worst=(0, 0), got=5.0, expected=-2.0)
    ok, reason = verdict(every)
    assert not ok and "(100 % bad)" in reason and "got 5, expected -2 (error 40)" in reason
    assert every.attrs() == {"checked_fraction": 1.0, "n_bad": 1000}
    timed = CheckResult(checked=10, total=40, race_rows=0, check_ms=1.23456)
    assert timed.attrs() == {"checked_fraction": 0.25, "n_bad": 0, "race": 0, "check_ms": 1.235}
