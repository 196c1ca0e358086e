"""On a GPU host (``pytest -m gpu``): the real worker — CUDA driver, TMA maps, cluster launch,
output check against the spec's reference — on the shipped kernels."""

import pytest

from tests.conftest import ROOT
from tuner.contract.kernel_spec import load_spec
from tuner.contract.precision import Tolerance
from tuner.evaluate.gpu import GpuEvaluator
from tuner.study.file import MeasureSettings

pytestmark = pytest.mark.gpu
TOL = Tolerance(2e-2, 2e-2)   # the fast class: the row-RMS floor


def evaluate(spec_file, problem, configs, arch="sm_90a", timeout_s=20.0, tmp_path=None):
    spec = load_spec(ROOT / "kernel" / spec_file)
    evaluator = GpuEvaluator(spec, problem, arch, MeasureSettings(warmup=2, repeats=10, min_pairs=10, block=5, timeout_s=timeout_s),
                             cache_dir=tmp_path)
    device = evaluator.start()
    try:
        return device, [evaluator.evaluate(c, {**spec.params, **c}, lambda step, value, samples: False) for c in configs]
    finally:
        evaluator.close()


@pytest.mark.parametrize("epilogue, n, k", [("BIAS_POS", 768, 768), ("BIAS_GELU", 3072, 768), ("BIAS_RESIDUAL", 768, 3072)])
@pytest.mark.parametrize("inputs", ["random", "small_int"])
def test_sm90a_epilogues_check_through_the_worker(epilogue, n, k, inputs, tmp_path):
    problem = {"M": 196 * 64, "N": n, "K": k, "EPILOGUE": epilogue, "SEQ_LEN": 196, "INPUT_KIND": inputs}
    configs = [{}, {"PINGPONG": 1, "BLOCK_N": 128, "N_STAGES": 5}, {"STORE_TMA": 1, "EXTRA_TMA": 1},
               {"CLUSTER_M": 2}]  # a cluster launch through cuLaunchKernelEx
    device, results = evaluate("gemm_sm90a.py", problem, configs, tmp_path=tmp_path)
    for config, m in zip(configs, results, strict=True):
        assert m.status == "ok", (config, m.status, m.reason)
        assert m.ratio > 0 and m.max_err is not None and m.max_err <= 1.0
        # the reference's own config ({}: the spec's defaults) is measured while the GPU warms, without raw times
        assert m.ms > 0 if not m.extra.get("before_steady") else config == {} and m.ms is None
        if inputs == "small_int" and epilogue != "BIAS_GELU":
            assert m.max_err == 0.0  # exact: any indexing mistake is a hard mismatch


def test_sm90a_off_by_one_is_a_mismatch(tmp_path):
    problem = {"M": 196 * 64, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196, "INPUT_KIND": "small_int"}
    _, (bad,) = evaluate("gemm_sm90a.py", problem, [{"BUG_POS_OFF_BY_ONE": 1}], tmp_path=tmp_path)
    assert bad.status == "mismatch" and "expected" in bad.reason


def test_example_hang_is_killed_and_worker_recovers(tmp_path):
    problem = {"M_DIM": 512, "N_DIM": 512, "K_DIM": 512}
    _, results = evaluate("example_sgemm.py", problem, [{"PLANT_HANG": 1}, {}, {"PLANT_BUG": 1}], timeout_s=5, tmp_path=tmp_path)
    assert [m.status for m in results] == ["hang", "ok", "mismatch"]


def test_a_hanging_reference_stops_the_evaluation_at_the_timeout_named(tmp_path):
    """The session warm-up launches the reference before any trial: a reference that spins is caught
    at ``timeout_s`` and named, and no trial is blamed for it."""
    import time

    from tuner.errors import UserError

    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    settings = MeasureSettings(warmup=2, repeats=10, min_pairs=10, block=5, timeout_s=5)
    evaluator = GpuEvaluator(spec, {"M_DIM": 512, "N_DIM": 512, "K_DIM": 512}, "sm_90a", settings, cache_dir=tmp_path,
                             reference={**spec.params, "PLANT_HANG": 1})
    evaluator.start()
    started = time.monotonic()
    try:
        with pytest.raises(UserError, match=r"the reference hung in the session warm-up \(no progress for 5 s\)"):
            evaluator.evaluate({}, dict(spec.params), lambda step, value, samples: False)
    finally:
        evaluator.close()
    assert time.monotonic() - started < 120  # not the 600 s the inputs' setup may take


def test_sm100a_refuses_to_launch_on_hopper(tmp_path):
    from tuner.errors import UserError

    spec = load_spec(ROOT / "kernel" / "gemm_sm100a.py")
    evaluator = GpuEvaluator(spec, {"M": 928256, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196}, "sm_100a",
                             MeasureSettings(), cache_dir=tmp_path)
    with pytest.raises(UserError, match="tuner check --compile"):
        evaluator.start()


# -- the full-output check (tuner/device/verify.py): every value on the device, a bitwise relaunch ---------------------------


def test_sm90a_full_check_flags_every_value_of_the_off_by_one(tmp_path):
    problem = {"M": 196 * 64, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196, "INPUT_KIND": "small_int"}
    _, (good, bad) = evaluate("gemm_sm90a.py", problem, [{}, {"BUG_POS_OFF_BY_ONE": 1}], tmp_path=tmp_path)
    assert good.status == "ok", good.reason
    assert good.extra["checked_fraction"] == 1.0 and good.extra["n_bad"] == 0 and good.extra["race"] == 0
    assert good.max_err == 0.0  # small integers: exact
    assert bad.status == "mismatch" and bad.extra["checked_fraction"] == 1.0
    # combined[(r + 1) % 196] - combined[r % 196] is 5..12 in every column: every value is wrong
    assert bad.extra["n_bad"] == problem["M"] * problem["N"], bad.reason
    assert "(100 % bad)" in bad.reason and "expected" in bad.reason


@pytest.mark.parametrize("study", ["patch_embed_sm90a", "fc1_sm90a", "fc2_sm90a"])
def test_sm90a_winners_pass_the_full_check(study, tmp_path):
    """The studies' best known configs at full size: every value within tolerance, the relaunch bit-identical.
    Prints the check's cost against the trial's GPU time (checked launch, warm-up, timed pairs)."""
    from tuner.study.file import load_study

    cfg = load_study(ROOT / "studies" / f"{study}.toml")
    spec = load_spec(cfg.kernel)
    config = {**cfg.fixed, **cfg.search.start[0]}
    settings = cfg.measure
    evaluator = GpuEvaluator(spec, cfg.problem, cfg.arch, settings, cache_dir=tmp_path)
    evaluator.start()
    try:
        m = evaluator.evaluate(config, {**spec.params, **config}, lambda step, value, samples: False)
    finally:
        evaluator.close()
    assert m.status == "ok", m.reason
    assert m.extra["checked_fraction"] == 1.0 and m.extra["n_bad"] == 0 and m.extra["race"] == 0
    assert 0.0 < m.max_err <= 1.0
    pair_ms = m.ms + m.reference_ms   # paired timing: the candidate and the reference alternate
    trial_ms = m.ms + max(settings.warmup_ms, settings.warmup * pair_ms) + m.extra["pairs"] * pair_ms
    print(f"{study}: {m.ms:.4f} ms per launch, max_err {m.max_err:.4f}, check {m.extra['check_ms']:.2f} ms "
          f"= {100 * m.extra['check_ms'] / trial_ms:.2f} % of the trial's {trial_ms:.1f} ms of launches "
          f"(checked launch, warm-up, {m.extra['pairs']} pairs)")


def test_host_check_fallback_records_the_sampled_fraction(tmp_path):
    problem = {"M_DIM": 512, "N_DIM": 512, "K_DIM": 512}
    _, (m,) = evaluate("example_sgemm.py", problem, [{}], tmp_path=tmp_path)
    assert m.status == "ok", m.reason
    # 64 sampled rows, fewer where the random draws repeat a row
    assert 0.1 < m.extra["checked_fraction"] <= 64 / 512 and m.extra["race"] == 0


@pytest.mark.parametrize("dtype, decode, cols", [("uint16", "bfloat16", 264), ("uint16", "bfloat16", 100), ("float32", "float32", 36)])
def test_device_comparison_agrees_with_the_host_check(dtype, decode, cols):
    """The comparison kernel against tuner.device.verify.host_check on the same planted errors (16-byte rows go the
    vector path, 200-byte rows the value-by-value one), and the relaunch hash on one changed value."""
    import numpy as np

    from tuner.contract.arch import plain_target
    from tuner.contract.kernel_spec import OutputSpec
    from tuner.contract.numerics import POISON_BF16, bf16_to_f32, f32_to_bf16
    from tuner.device.verify import DeviceVerifier, host_check
    from tuner.device.worker import CudaBackend

    backend = CudaBackend()
    device = backend.hello()
    cu = backend.cu
    verifier = DeviceVerifier(cu, backend.stream, plain_target(device["cc"]), device["sm_count"])
    rows = 300
    out = OutputSpec((rows, cols), dtype, decode)
    verifier.prepare_hashes(out)
    rng = np.random.default_rng(1)
    expected = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    got = f32_to_bf16(expected) if dtype == "uint16" else expected.copy()
    bad = [(5, 7, 1.0), (17, cols - 1, -0.3), (299, 0, 0.5)]
    for r, c, delta in bad:
        value = np.float32(expected[r, c] + delta)
        got[r, c] = f32_to_bf16(np.array([value]))[0] if dtype == "uint16" else value
    if dtype == "uint16":
        got[120, 3] = POISON_BF16
    verifier.load_expected(expected)
    buf = cu.cuMemAlloc(got.nbytes)[1]
    cu.cuMemcpyHtoD(buf, got.ctypes.data, got.nbytes)
    device_result = verifier.compare(buf, out, TOL)
    values = bf16_to_f32(got) if dtype == "uint16" else got
    host_result = host_check(values, expected, np.arange(rows), rows * cols, TOL)
    assert device_result.n_nan == host_result.n_nan == (1 if dtype == "uint16" else 0)
    assert device_result.n_over == host_result.n_over == 3
    assert device_result.worst == host_result.worst
    if not device_result.n_nan:
        assert device_result.max_err == pytest.approx(host_result.max_err, rel=1e-5)
        assert device_result.checksum == pytest.approx(host_result.checksum, rel=1e-9)
    # relaunch comparison: same bits, then one value changed
    assert verifier.relaunch_differs(buf)[0] == (0 if (cols * got.itemsize) % 16 == 0 else None)
    if (cols * got.itemsize) % 16 == 0:
        one = got.view(np.uint16 if got.itemsize == 2 else np.uint32)[42, 9:10] ^ 1   # the lowest bit of one value
        cu.cuMemcpyHtoD(int(buf) + (42 * cols + 9) * got.itemsize, one.ctypes.data, got.itemsize)
        assert verifier.relaunch_differs(buf) == (1, 42)
    cu.cuMemFree(buf)


def test_generated_inputs_are_the_table_s_values_uniform_and_reproducible():
    """The worker generates RandomTable inputs on the GPU: only table values, each byte position
    about equally often, the same bytes for the same seed, other bytes for another seed."""
    import numpy as np

    from tuner.contract.kernel_spec import RandomTable
    from tuner.device.worker import CudaBackend

    spec = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
    problem = {"M": 196 * 64, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196}
    backend = CudaBackend()
    backend.hello()
    inputs = spec.inputs(problem, np.random.default_rng(0))
    backend.prepare(spec, problem, seed=5)
    assert set(backend.generated) == {"A", "W"}
    a = backend.inputs_on_host()["A"]
    table = inputs["A"].table
    assert a.shape == (196 * 64, 768) and np.isin(a, table).all()
    values = np.unique(table)
    per_byte = np.bincount(np.searchsorted(values, a.ravel())) / np.bincount(np.searchsorted(values, table))
    assert per_byte.min() > 0.9 * per_byte.mean() and per_byte.max() < 1.1 * per_byte.mean()
    backend.prepare(spec, problem, seed=5)
    assert np.array_equal(backend.inputs_on_host()["A"], a)
    backend.prepare(spec, problem, seed=6)
    assert (backend.inputs_on_host()["A"] != a).mean() > 0.9
    assert isinstance(inputs["A"], RandomTable)


def test_backend_public_steps_load_launch_read_and_check(tmp_path):
    """What bench scripts use instead of the driver: load a CUBIN, launch it on poisoned outputs,
    read the output and the reference kernel's expected values back, and check."""
    import numpy as np

    from tuner.compile.nvrtc import compile_kernel
    from tuner.contract.numerics import bf16_to_f32
    from tuner.device.worker import CudaBackend

    spec = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
    problem = {"M": 196 * 64, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196, "INPUT_KIND": "small_int"}
    backend = CudaBackend()
    backend.hello()
    backend.prepare(spec, problem, seed=0)
    expected = backend.read_expected()
    assert expected is not None and expected.shape == backend.outputs["C"].shape
    backend.poison()
    assert np.isnan(bf16_to_f32(backend.read_output("C"))).all()  # poison alone: every value unwritten
    outputs = []
    for config, status in (({}, "ok"), ({"BUG_POS_OFF_BY_ONE": 1}, "mismatch")):
        built = compile_kernel(spec, {**spec.params, **config}, problem, "sm_90a", cache_dir=tmp_path)
        assert built.ok, built.reason
        handle = backend.load(spec, {**spec.params, **config}, problem, built.cubin_path)
        backend.launch(handle)
        outputs.append(bf16_to_f32(backend.read_output("C")))
        assert backend.check(handle, spec, problem, 0, 0).status == status
        backend.unload(handle)
    good, off_by_one = outputs
    assert np.isfinite(good).all() and np.abs(good - expected).max() <= 0.01 * np.abs(expected).max()
    assert not np.array_equal(good, off_by_one)


def test_a_kernels_own_program_is_built_with_nvcc_and_timed_like_its_nvrtc_build(tmp_path):
    """The example GEMM in its own harness (kernel/example_sgemm_program.*): built with nvcc, run as a
    program; a hang and a wrong output become statuses, and a config's ratio to the defaults agrees with
    the one the same kernel gets through NVRTC and the worker's own launches."""
    problem = {"M_DIM": 2048, "N_DIM": 2048, "K_DIM": 2048}  # (at 1024 the program's 20 launches back to back
    faster = {"BLOCK": 128, "BLOCK_K": 32, "THREAD_TILE": 8}  # and the worker's one by one: 1.31 against 1.70)
    _, programs = evaluate("example_sgemm_program.py", problem, [{"PLANT_HANG": 1}, {}, {"PLANT_BUG": 1}, faster],
                           arch="sm_90", timeout_s=10, tmp_path=tmp_path)
    assert [m.status for m in programs] == ["hang", "ok", "mismatch", "ok"], [m.reason for m in programs]
    assert programs[1].checksum is not None and programs[1].ratio == pytest.approx(1.0, abs=0.02)
    _, (launched,) = evaluate("example_sgemm.py", problem, [faster], arch="sm_90", tmp_path=tmp_path)
    # the program times its own launches back to back, with the GPU idle between runs: close, not equal
    # (H200, 2026-12-01: 0.708 against 0.751)
    assert programs[3].ratio < 0.9 and launched.ratio < 0.9
    assert programs[3].ratio == pytest.approx(launched.ratio, rel=0.10)


def run_and_profile(study, tmp_path) -> dict:
    """`tuner run` then `tuner profile --json` of ``study`` in ``tmp_path``: the profile's answer."""
    import json

    from tests.conftest import tuner

    url = f"sqlite:///{tmp_path / 's.db'}"
    ran = tuner("run", study, "--storage", url, "--cache-dir", tmp_path / "c", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    done = tuner("profile", study, "--storage", url, "--cache-dir", tmp_path / "c", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (profiled,) = json.loads(done.stdout)["profiles"]
    profiled["best"] = json.loads(tuner("best", study, "--storage", url, "--json").stdout)
    return profiled


def test_the_best_config_is_profiled_by_nsight_compute_alone(tmp_path):
    """`tuner profile`: ncu profiles the one launch of the study's best config inside the profiler's
    range (not the reference, the warm-up or the input generator) and its figures are printed."""
    from tuner.testing import write_study

    study = write_study(tmp_path, "prof", problem={"M_DIM": 1024, "N_DIM": 1024, "K_DIM": 1024},
                        tier1={"BLOCK": [64, 128], "THREAD_TILE": [4, 8]}, search={"sampler": "grid", "trials": 4})
    profiled = run_and_profile(study, tmp_path)
    assert profiled["trial"] == profiled["best"]["trial"] and profiled["status"] == "ok"
    (kernel,) = profiled["kernels"]  # one launch: the reference and the warm-up stayed out of the range
    assert kernel["name"] == "example_sgemm" and kernel["metrics"]["Duration"][0] > 0
    assert (tmp_path / profiled["report"]).is_file()


def test_a_program_kernel_is_profiled_by_nsight_compute_in_its_own_program(tmp_path):
    """`tuner profile` on the example GEMM in its own harness: ncu profiles the program's first launch of
    the kernel, and the program's checksum matches the one its trial stored."""
    from tuner.testing import write_study

    study = write_study(tmp_path, "prog", kernel=ROOT / "kernel" / "example_sgemm_program.py", arch="sm_90",
                        tier1={"BLOCK": [64, 128]}, search={"sampler": "grid", "trials": 2, "confirm_top": 0})
    profiled = run_and_profile(study, tmp_path)
    assert profiled["trial"] == profiled["best"]["trial"] and profiled["status"] == "ok", profiled["reason"]
    (kernel,) = profiled["kernels"]
    assert kernel["name"] == "example_sgemm" and kernel["metrics"]["Duration"][0] > 0


def test_energy_per_launch_is_measured_and_relative_to_the_reference(tmp_path):
    """NVML's counter on the real GPU: each config's energy per launch, and its ratio to the
    reference's in the same trial; the reference's own config reads about 1."""
    problem = {"M_DIM": 2048, "N_DIM": 2048, "K_DIM": 2048}
    spec = load_spec(ROOT / "kernel" / "example_sgemm.py")
    settings = MeasureSettings(warmup=2, repeats=10, min_pairs=10, block=5, timeout_s=20.0, energy_s=0.6)
    evaluator = GpuEvaluator(spec, problem, "sm_90a", settings, cache_dir=tmp_path)
    evaluator.start()
    configs = [{}, {"BLOCK": 128}, {"THREAD_TILE": 2}]
    try:
        results = [evaluator.evaluate(c, {**spec.params, **c}, lambda step, value, samples: False) for c in configs]
    finally:
        evaluator.close()
    for config, m in zip(configs, results, strict=True):
        e = m.extra
        assert m.status == "ok" and e["energy_steps"] >= 3 and e["reference_energy_steps"] >= 3, (config, e)
        assert e["energy_ratio"] == pytest.approx(e["energy_mj_per_launch"] / e["reference_energy_mj_per_launch"], rel=1e-3)
        assert 0 < e["power_w"] <= 1000 and 0 < e["energy_ratio_err"] < 0.2 * e["energy_ratio"]
    assert results[0].extra["energy_ratio"] == pytest.approx(1.0, abs=0.1)
