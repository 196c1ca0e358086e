"""On a GPU host (``pytest -m gpu``): the real worker — CUDA driver, TMA maps, cluster launch,
output check against the spec's reference — on the shipped kernels."""

import pytest

from tuner.gpu import GpuEvaluator
from tuner.spec import load_spec
from tuner.study_file import MeasureSettings
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


def evaluate(spec_file, problem, configs, arch="sm_90a", timeout_s=20.0, tmp_path=None):
    spec = load_spec(ROOT / "kernel" / spec_file)
    evaluator = GpuEvaluator(spec, problem, arch, MeasureSettings(warmup=2, repeats=10, block=5, timeout_s=timeout_s),
                             cache_dir=tmp_path)
    device = evaluator.start()
    try:
        return device, [evaluator.evaluate(c, {**spec.params, **c}, lambda step, ms: False) for c in configs]
    finally:
        evaluator.close()


@pytest.mark.parametrize("epilogue, n, k", [("BIAS_POS", 768, 768), ("BIAS_GELU", 3072, 768), ("BIAS_RESIDUAL", 768, 3072)])
@pytest.mark.parametrize("inputs", ["random", "small_int"])
def test_sm90a_epilogues_check_through_the_worker(epilogue, n, k, inputs, tmp_path):
    problem = {"M": 196 * 64, "N": n, "K": k, "EPILOGUE": epilogue, "SEQ_LEN": 196, "INPUT_KIND": inputs}
    configs = [{}, {"PINGPONG": 1, "BLOCK_N": 128, "N_STAGES": 5}, {"STORE_TMA": 1, "EXTRA_TMA": 1},
               {"CLUSTER_M": 2}]  # a cluster launch through cuLaunchKernelEx
    device, results = evaluate("gemm_sm90a.py", problem, configs, tmp_path=tmp_path)
    for config, m in zip(configs, results):
        assert m.status == "ok", (config, m.status, m.reason)
        assert m.ms > 0 and m.max_err is not None and m.max_err <= 1.0
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


def test_sm100a_refuses_to_launch_on_hopper(tmp_path):
    from tuner.errors import UserError

    spec = load_spec(ROOT / "kernel" / "gemm_sm100a.py")
    evaluator = GpuEvaluator(spec, {"M": 928256, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196}, "sm_100a",
                             MeasureSettings(), cache_dir=tmp_path)
    with pytest.raises(UserError, match="tuner check --compile"):
        evaluator.start()
