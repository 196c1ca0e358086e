"""Precision classes (tuner/contract/precision.py): the study file's key, the tolerance each class
gives the full-output check, and that the study's class reaches the worker's check."""

import json

import numpy as np
import pytest

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tuner.contract.kernel_spec import load_spec
from tuner.contract.precision import Tolerance, tolerance
from tuner.device.verify import host_check, verdict
from tuner.errors import UserError
from tuner.study.file import load_study, parse_study

SM90A = load_spec(ROOT / "kernel" / "gemm_sm90a.py")


def study_data(**study):
    return {"study": {"name": "s", "kernel": str(ROOT / "kernel" / "example_sgemm.py"), "arch": "sm_90a", **study},
            "space": {"tier1": {"BLOCK": [32, 64]}}}


def test_precision_key_parses_and_defaults_to_fast():
    assert parse_study(study_data()).precision == "fast"
    assert parse_study(study_data(precision="precise")).precision == "precise"
    assert parse_study(study_data(precision=1e-4)).precision == pytest.approx(1e-4)


@pytest.mark.parametrize("value,says", [("exact", "unknown"), (0.5, "error budget in (0, 0.01]"), (0, "error budget"),
                                        (True, "error budget"), ([1], "error budget")])
def test_bad_precision_is_one_line_naming_the_key(value, says):
    with pytest.raises(UserError) as err:
        parse_study(study_data(precision=value))
    message = str(err.value)
    assert "[study.precision]" in message and says in message and "\n" not in message


def test_bad_precision_from_the_cli_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text((ROOT / "studies" / "example_sgemm.toml").read_text()
                   .replace('shape = "example"', 'shape = "example"\nprecision = "exactish"')
                   .replace('kernel = "../kernel/example_sgemm.py"', f'kernel = "{ROOT}/kernel/example_sgemm.py"'))
    result = tuner("check", bad)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "[study.precision]" in result.stderr


def test_hopper_studies_come_in_both_classes():
    for shape in ("patch_embed", "fc1", "fc2"):
        fast = load_study(ROOT / "studies" / f"{shape}_sm90a.toml")
        precise = load_study(ROOT / "studies" / f"{shape}_sm90a_precise.toml")
        assert fast.precision == "fast" and precise.precision == "precise"
        assert fast.problem == precise.problem
        assert 0 not in precise.axes["PROMOTE_EVERY"]   # no trial spent on configs that cannot pass


# -- the tolerance each class applies, on planted errors ----------------------------------------
def planted():
    """One row: large outputs (the row RMS ~ 10) and three near zero, two of them off by 0.05."""
    expected = np.array([[10.0, -12.0, 9.0, 11.0, 0.001, -0.002, 0.003, 8.0]], np.float32)
    got = expected.copy()
    got[0, 4] += 0.05      # near zero, off by 0.05: inside 2 % of the row RMS, outside 0.02 + 2 % of |ref|
    got[0, 5] -= 0.05
    got[0, 0] *= 1.01      # 1 % on a large output: inside either tolerance
    return got, expected


def check(tol):
    got, expected = planted()
    return host_check(got, expected, np.array([0]), got.size, tol)


def test_fast_class_forgives_near_zero_outputs_by_the_row_rms():
    result = check(tolerance("fast", SM90A))
    assert result.n_over == 0 and verdict(result)[0]


def test_precise_class_counts_each_near_zero_output_off_by_more_than_0_02_plus_2_percent():
    result = check(tolerance("precise", SM90A))
    assert result.n_over == 2
    ok, reason = verdict(result)
    assert not ok and "2 values over tolerance" in reason and ("col 4" in reason or "col 5" in reason)


def test_error_budget_allows_that_share_of_outputs_and_no_more():
    assert verdict(check(tolerance(0.01, SM90A)))[0] is False        # 8 outputs x 1 % -> 0 allowed
    loose = Tolerance(0.02, 0.02, rms_floor=False, max_bad_fraction=0.25, precision="budget 0.25")
    result = check(loose)
    assert result.allowed_bad == 2 and verdict(result)[0]
    tighter = Tolerance(0.02, 0.02, rms_floor=False, max_bad_fraction=0.125, precision="budget 0.125")
    ok, reason = verdict(check(tighter))
    assert not ok and "(budget 1)" in reason


def test_precise_tolerance_is_the_issues_bound():
    t = tolerance("precise", SM90A)
    assert (t.atol, t.rtol, t.rms_floor, t.max_bad_fraction) == (0.02, 0.02, False, 0.0)
    assert Tolerance.of_job(None, SM90A) == tolerance("fast", SM90A)
    assert Tolerance.of_job(t.as_job(), SM90A) == t


def test_the_precise_class_is_never_looser_than_the_specs_own():
    """An FP32 kernel's spec asks for 1e-3: an output 1 % off everywhere fails each class."""
    sgemm = load_spec(ROOT / "kernel" / "example_sgemm.py")
    assert (sgemm.atol, sgemm.rtol) == (1e-3, 1e-3)
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((8, 256)).astype(np.float32)
    for precision in ("fast", "precise", 1e-3):
        t = tolerance(precision, sgemm)
        assert (t.atol, t.rtol) == (1e-3, 1e-3)
        passed, _ = verdict(host_check(ref * 1.01, ref, np.arange(8), ref.size, t))
        assert not passed, precision


def test_the_studys_precision_reaches_the_workers_check(tmp_path, cache_dir):
    """The whole CLI path (real NVRTC, the worker double): each trial's check gets the precise tolerance."""
    study = tmp_path / "precise.toml"
    study.write_text((ROOT / "studies" / "example_sgemm.toml").read_text()
                     .replace('shape = "example"', 'shape = "example"\nprecision = "precise"')
                     .replace("trials = 20", "trials = 2")
                     .replace('kernel = "../kernel/example_sgemm.py"', f'kernel = "{ROOT}/kernel/example_sgemm.py"'))
    log = tmp_path / "tolerance.jsonl"
    result = tuner("run", study, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--json", "--cache-dir", cache_dir,
                   env={"TUNER_WORKER_BACKEND": FAKE_BACKEND, "FAKE_TOLERANCE_LOG": str(log)})
    assert result.returncode == 0, result.stderr
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(seen) >= 2 and all(s["precision"] == "precise" and s["rms_floor"] is False for s in seen)

    # resumed in the fast class: its values would be judged by two tolerances
    fast = tmp_path / "fast.toml"
    fast.write_text(study.read_text().replace('precision = "precise"\n', "").replace("trials = 2", "trials = 4"))
    again = tuner("run", fast, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--cache-dir", cache_dir,
                  env={"TUNER_WORKER_BACKEND": FAKE_BACKEND})
    assert again.returncode == 2 and "'precision': 'precise'" in again.stderr and "'precision': 'fast'" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, again.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fast", "precise"])
def test_device_comparison_applies_the_class_tolerance_as_the_host_check_does(precision):
    """The comparison kernel's row-RMS floor follows the class: near-zero outputs off by 0.05 pass fast, fail precise."""
    from tuner.contract.arch import plain_target
    from tuner.contract.kernel_spec import OutputSpec
    from tuner.contract.numerics import bf16_to_f32, f32_to_bf16
    from tuner.device.verify import DeviceVerifier
    from tuner.device.worker import CudaBackend

    backend = CudaBackend()
    device = backend.hello()
    cu = backend.cu
    verifier = DeviceVerifier(cu, backend.stream, plain_target(device["cc"]), device["sm_count"])
    rows, cols = 64, 256
    out = OutputSpec((rows, cols), "uint16", "bfloat16")
    verifier.prepare_hashes(out)
    expected = (np.random.default_rng(2).standard_normal((rows, cols)) * 3).astype(np.float32)
    expected[::7, 5] = 0.001                         # near-zero outputs ...
    got = f32_to_bf16(expected)
    got[::7, 5] = f32_to_bf16(np.full(len(expected[::7, 5]), 0.051, np.float32))   # ... off by 0.05
    verifier.load_expected(expected)
    buf = cu.cuMemAlloc(got.nbytes)[1]
    cu.cuMemcpyHtoD(buf, got.ctypes.data, got.nbytes)
    tol = tolerance(precision, SM90A)
    on_device = verifier.compare(buf, out, tol)
    on_host = host_check(bf16_to_f32(got), expected, np.arange(rows), rows * cols, tol)
    assert on_device.n_over == on_host.n_over
    assert on_device.n_over == (0 if precision == "fast" else len(expected[::7, 5]))


def test_every_config_the_precision_check_measures_builds_unserialized(cache_dir, monkeypatch):
    """bench/precision_check.py counts the errors of each shape's fast start config and of its precise start
    config at PROMOTE_EVERY 0 / 1 / 2 / 4. Each must build with its wgmmas pipelined, or it gets no count: FC1's
    precise start, unrolled whole, is serialized by ptxas once unpromoted, so its P = 0 form is not unrolled."""
    from tuner.compile.nvrtc import compile_kernel

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from precision_check import SHAPES, configs_of

    def problem(shape):
        return load_study(ROOT / "studies" / f"{shape}_sm90a_precise.toml").problem

    for shape in SHAPES:
        for label, config in configs_of(shape):
            built = compile_kernel(SM90A, config, problem(shape), "sm_90a", cache_dir)
            assert built.status == "ok", (shape, label, built.status, built.reason)
    unpromoted = dict(configs_of("fc1"))["precise start, PROMOTE_EVERY=0"]
    assert unpromoted["PROMOTE_EVERY"] == 0 and unpromoted["UNROLL_K"] == 0
    unrolled = compile_kernel(SM90A, {**unpromoted, "UNROLL_K": 6}, problem("fc1"), "sm_90a", cache_dir)
    assert unrolled.status == "wgmma_serialized"   # what the P = 0 form would be, unrolled
