"""arch = "native": the target is the GPU the worker reports, chosen among the kernel's own targets
(tuner.contract.arch.native_target), before anything is compiled for it. Light specs default to it."""

import json

import optuna
import pytest

from tests.conftest import FAKE_BACKEND, ROOT, tuner
from tuner.compile.targets import check_targets, nvrtc_builds
from tuner.contract.arch import NATIVE, native_target
from tuner.contract.kernel_spec import load_spec
from tuner.device.supervisor import Supervisor
from tuner.errors import UserError
from tuner.evaluate.gpu import GpuEvaluator
from tuner.study.file import MeasureSettings, load_study, parse_study

EXAMPLE = ROOT / "kernel" / "example_sgemm.py"
PROBLEM = {"M_DIM": 64, "N_DIM": 64, "K_DIM": 64}


@pytest.mark.parametrize(("cc", "expected"), [("8.0", "sm_80"), ("8.6", "sm_86"), ("8.9", "sm_89"), ("9.0", "sm_90a"),
                                              ("10.0", "sm_100a"), ("10.3", "sm_100"),
                                              ("11.0", "sm_110"), ("12.0", "sm_120a"), ("12.1", "sm_120")])
def test_native_is_the_reported_gpu(cc, expected, monkeypatch):
    monkeypatch.setenv("FAKE_CC", cc)  # the fake worker reports this compute capability
    evaluator = GpuEvaluator(load_spec(EXAMPLE), PROBLEM, NATIVE, MeasureSettings(), supervisor=Supervisor(FAKE_BACKEND))
    try:
        device = evaluator.start()
        assert device["cc"] == [int(x) for x in cc.split(".")]
        assert evaluator.arch == evaluator.compiler.arch == expected  # what every compile of the run builds for
    finally:
        evaluator.close()


def test_a_gpu_newer_than_its_targets_runs_a_plain_target_of_its_family():
    """B300, GB10: a spec that lists no archs takes the device's own target; a GPU newer than every
    target the table knows is named as such, not as an unknown `arch` the user never wrote."""
    from tuner.contract.arch import native_target

    assert native_target((10, 3)) == "sm_103" and native_target((12, 1)) == "sm_121" and native_target((8, 8)) == "sm_88"
    assert native_target((12, 1), ("sm_80", "sm_120", "sm_120a")) == "sm_120"  # a CUBIN for 12.0 runs on 12.1
    with pytest.raises(UserError, match=r"compute capability 13.0\) is newer than every target this tuner knows"):
        native_target((13, 0))
    with pytest.raises(UserError, match=r"runs none of the kernel's targets \(sm_90a\); this tuner knows no target"):
        native_target((13, 0), ("sm_90a",))


def test_native_on_volta_names_the_compiler_that_cannot_build_it(monkeypatch):
    """CUDA 13's NVRTC dropped sm_70: a V100 gets one line saying so, not a compile error per trial."""
    monkeypatch.setenv("FAKE_CC", "7.0")
    evaluator = GpuEvaluator(load_spec(EXAMPLE), PROBLEM, NATIVE, MeasureSettings(), supervisor=Supervisor(FAKE_BACKEND))
    try:
        if nvrtc_builds("sm_70"):
            evaluator.start()
            assert evaluator.arch == "sm_70"
        else:
            with pytest.raises(UserError, match=r"NVRTC [\d.]+ cannot compile for sm_70"):
                evaluator.start()
            assert not evaluator.supervisor.alive
    finally:
        evaluator.close()


def test_a_gpu_the_kernel_does_not_build_for(monkeypatch):
    monkeypatch.setenv("FAKE_CC", "9.0")
    spec = load_spec(ROOT / "kernel" / "gemm_sm100a.py")
    evaluator = GpuEvaluator(spec, {}, NATIVE, MeasureSettings(), supervisor=Supervisor(FAKE_BACKEND))
    try:
        with pytest.raises(UserError, match=r"compute capability 9.0\) runs none of the kernel's targets \(sm_100a\)"):
            evaluator.start()
    finally:
        evaluator.close()


def test_a_kernel_for_another_gpu_pinned_is_not_told_to_go_native(monkeypatch):
    """The Hopper GEMM (sm_90a only) pinned to sm_90a on a B200: "native" would not help, so the line
    does not offer it."""
    monkeypatch.setenv("FAKE_CC", "10.0")
    study = load_study(ROOT / "studies" / "fc2_sm90a.toml")
    evaluator = GpuEvaluator(load_spec(study.kernel), study.problem, "sm_90a", MeasureSettings(),
                             supervisor=Supervisor(FAKE_BACKEND))
    try:
        with pytest.raises(UserError, match=r"cannot run sm_90a code, and gemm_sm90a.py builds for no target it runs "
                                            r"\(sm_90a\): run the study on a matching GPU") as raised:
            evaluator.start()
        assert "native" not in str(raised.value)
    finally:
        evaluator.close()


def test_native_is_the_default_and_the_example_uses_it(tmp_path):
    cfg = parse_study({"study": {"name": "s", "kernel": str(EXAMPLE)}, "space": {"tier1": {"BLOCK": [32, 64]}}})
    assert cfg.arch == NATIVE
    example = load_study(ROOT / "studies" / "example_sgemm.toml")
    assert example.arch == NATIVE
    spec = load_spec(EXAMPLE)
    assert {"sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100a"} <= set(spec.archs)
    # without a GPU, `tuner check` builds a native study for every target this NVRTC can, or the one --arch names
    assert check_targets(NATIVE, spec, "s.toml") == [a for a in spec.archs if nvrtc_builds(a)]
    assert check_targets(NATIVE, spec, "s.toml", "sm_86") == ["sm_86"]
    with pytest.raises(UserError, match="--arch sm_86: s.toml builds for sm_90a"):
        check_targets("sm_90a", spec, "s.toml", "sm_86")


@pytest.mark.gpu
def test_the_example_runs_native_on_this_gpu(tmp_path):
    """The README's example, arch = "native", on whatever GPU this is: it builds for the target
    the worker's device report chose, and its trials pass the output check."""
    db = f"sqlite:///{tmp_path / 'native.db'}"
    result = tuner("run", ROOT / "studies" / "example_sgemm.toml", "--storage", db, "--trials", 6, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["statuses"].get("ok", 0) + summary["statuses"].get("pruned_slow", 0) >= 1, summary
    attrs = optuna.load_study(study_name="example_sgemm", storage=db).user_attrs
    assert attrs["arch"] == native_target(attrs["device"]["cc"], load_spec(EXAMPLE).archs)
