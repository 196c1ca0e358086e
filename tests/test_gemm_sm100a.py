"""The Blackwell (sm_100a) megakernel: constraint model, launch description, numerics, and
a compile check of every valid tier-1 corner for sm_100a (no GPU needed: NVRTC + ptxas).

The kernel is compile-verified here and has not run on hardware; these tests keep it
compiling, keep the SMEM model equal to the kernel's own layout, and check that the
fast path (tcgen05 2-CTA MMA, TMEM loads, TMA) is really in the SASS.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tuner.compile.nvrtc import compile_kernel, compile_many
from tuner.contract.kernel_spec import Buffer, DeviceInfo, Scalar, TensorMap, load_spec
from tuner.contract.numerics import bf16_to_f32, f32_to_bf16, f32_to_fp8, fp8_to_f32
from tuner.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SPEC_PATH = ROOT / "kernel" / "gemm_sm100a.py"
STUDIES = {name: ROOT / "studies" / f"{name}_sm100a.toml" for name in ("patch_embed", "fc1", "fc2")}
B200 = DeviceInfo("NVIDIA B200", 148, (10, 0), 232448)
ARCH = "sm_100a"


@pytest.fixture(scope="module")
def spec():
    return load_spec(SPEC_PATH)


@pytest.fixture(scope="module")
def mod(spec):
    import sys

    return sys.modules[type(spec).__module__]


def _study(name: str) -> dict:
    import tomllib

    return tomllib.loads(STUDIES[name].read_text())


def _space(study: dict, tiers=("tier1", "tier2")) -> list[dict]:
    axes: dict = {}
    for tier in tiers:
        axes.update(study["space"][tier])
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


@pytest.fixture(scope="module")
def cache_dir(request):
    # persistent across local runs (pytest's cache); a fresh CI clone compiles once
    return request.config.cache.mkdir("sm100a-cubin")


# -- constraint model -----------------------------------------------------------------------
def test_grid_plan_accepts_69_and_model_agrees(spec, mod):
    problem = _study("patch_embed")["problem"]
    grid = [dict(zip(mod.GRID_PLAN_TIER1, v, strict=True)) for v in itertools.product(*mod.GRID_PLAN_TIER1.values())]
    assert len(grid) == 108
    plan_ok = {i for i, c in enumerate(grid) if mod.grid_plan_is_valid(
        c["TN"], c["N_STAGES"], c["NUM_EPI_WARPS"], c["STAGING_ROW_PAD"])[0]}
    ours_ok = {i for i, c in enumerate(grid) if spec.check(c, problem) is None}
    assert len(plan_ok) == 69
    assert ours_ok == plan_ok  # the docstring explains why the 227 KB limit changes nothing
    accepted = [spec.derive(grid[i], problem)["smem_bytes"] for i in ours_ok]
    smem_rejected = [spec.derive(c, problem)["smem_bytes"] for c in grid
                     if (r := spec.check(c, problem)) and r.startswith("SMEM")]
    assert max(accepted) == 231552 and min(smem_rejected) == 233600


def test_default_config_matches_the_grid_plan_figures(spec):
    problem = _study("patch_embed")["problem"]
    d = spec.derive({}, problem)
    assert spec.check({}, problem) is None
    # the plan's offset chain for TN=256, 4 stages, 5 epilogue warps, pad 16 (~211 KB)
    assert d["smem_bytes"] == 215680
    assert d["stage_bytes"] == d["tma_bytes"] == 32768
    assert d["tmem_cols"] == 512 and d["tiles_n"] == 3 and d["tiles_m"] == 3626
    assert d["total_tiles"] == 10878 and d["k_iters"] == 6 and d["threads"] == 224
    assert d["idesc"] == 0x10400010
    tn128 = spec.derive({"TN": 128, "NUM_EPI_WARPS": 4}, problem)
    assert tn128["idesc"] == 0x10200010
    assert tn128["stage_bytes"] == tn128["tma_bytes"] == 24576  # expect-tx bytes = the stage (a mismatch hangs the wait)
    assert tn128["tmem_cols"] == 256 and tn128["tiles_n"] == 6 and tn128["total_tiles"] == 21756


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_launch_smem_equals_model_for_every_config(spec, name):
    study = _study(name)
    problem = study["problem"]
    valid = 0
    for config in _space(study):
        if spec.check(config, problem) is not None:
            continue
        valid += 1
        d = spec.derive(config, problem)
        launch = spec.launch(config, problem, B200)
        assert launch.smem_bytes == d["smem_bytes"] <= B200.max_smem_per_block
        assert spec.defines(config, problem)["SPEC_SMEM_BYTES"] == d["smem_bytes"]
        assert launch.block == (d["threads"], 1, 1)
        assert launch.cluster == (2, 1, 1)
        assert launch.grid[0] % 2 == 0 and launch.grid[0] <= B200.sm_count
    assert valid == 69 * 32


def test_launch_description(spec):
    problem = _study("patch_embed")["problem"]
    launch = spec.launch({"TMA_L2_PROMOTION": 1}, problem, B200)
    assert launch.grid == (148, 1, 1)
    a, w, c, add, res = launch.args
    assert a == TensorMap("A", "uint8", (928256, 768), (128, 128), 128, 256)
    assert w == TensorMap("W", "uint8", (768, 768), (128, 128), 128, 256)
    assert c == Buffer("C") and add == Buffer("comb_bf16") and res == Scalar("uint64", 0)
    launch = spec.launch({"TN": 128, "NUM_EPI_WARPS": 4, "ADD_SOURCE": "FP32"}, problem, B200)
    assert launch.args[1].box == (64, 128) and launch.args[3] == Buffer("comb_f32")
    fc2 = _study("fc2")["problem"]
    launch = spec.launch({}, fc2, B200)
    assert launch.args[3] == Buffer("bias_bf16") and launch.args[4] == Buffer("residual")


def test_launch_refuses_non_sm100_devices(spec):
    problem = _study("patch_embed")["problem"]
    with pytest.raises(UserError, match="sm_100a"):
        spec.launch({}, problem, DeviceInfo("NVIDIA H200", 132, (9, 0), 232448))


def test_invalid_configs_have_reasons(spec):
    problem = _study("patch_embed")["problem"]
    assert "5th epilogue warp" in spec.check({"TN": 128, "NUM_EPI_WARPS": 5}, problem)
    assert "lane group" in spec.check({"NUM_EPI_WARPS": 3}, problem)
    assert "SMEM" in spec.check({"N_STAGES": 5, "NUM_EPI_WARPS": 5}, problem)
    assert "TN=192" in spec.check({"TN": 192}, problem)
    assert "ADD_SOURCE" in spec.check({"ADD_SOURCE": "FP16"}, problem)
    assert "multiple of 256" in spec.check({}, {**problem, "M": 1000})


# -- host-side numerics ------------------------------------------------------------------------
SMALL = {"M": 512, "N": 256, "K": 256, "SEQ_LEN": 196}


def test_blocked_combined_layout_matches_kernel_formula(mod):
    rng = np.random.default_rng(0)
    comb = rng.standard_normal((196, 256)).astype(np.float32)
    flat = mod.block_combined(comb).reshape(-1)
    assert flat.size == 224 * 256
    for r, c in [(0, 0), (31, 31), (32, 0), (195, 255), (100, 77), (63, 129)]:
        assert flat[mod.blocked_index(r, c, 256)] == comb[r, c]


@pytest.mark.parametrize("epilogue", ["BIAS_POS", "BIAS_GELU", "BIAS_RESIDUAL"])
def test_inputs_and_reference(spec, mod, epilogue):
    problem = {**SMALL, "EPILOGUE": epilogue}
    data = spec.inputs(problem, np.random.default_rng(1))
    assert data["A"].dtype == np.uint8 and data["A"].shape == (512, 256)
    assert np.all(fp8_to_f32(data["A"]) != 0) and np.all(np.isfinite(fp8_to_f32(data["A"])))
    for arg in spec.launch({}, problem, B200).args:  # every array the launch names exists
        if isinstance(arg, TensorMap):
            assert arg.buffer in data
        elif isinstance(arg, Buffer) and arg.name != "C":
            assert arg.name in data
    rows = np.array([0, 1, 195, 196, 300, 511])
    ref = spec.reference(data, problem, rows)
    assert ref.shape == (len(rows), 256) and ref.dtype == np.float32
    acc = fp8_to_f32(data["A"][rows]).astype(np.float64) @ fp8_to_f32(data["W"]).astype(np.float64).T
    bias = bf16_to_f32(data["bias"])
    if epilogue == "BIAS_POS":
        # the blocked combined the kernel reads gives the same addend as the raw tensors
        comb = data["comb_f32"]
        added = np.array([[comb[mod.blocked_index(r % 196, c, 256)] for c in range(256)] for r in rows])
        np.testing.assert_allclose(ref, acc + added, rtol=1e-5, atol=1e-5)
        assert np.isfinite(ref).all()
        np.testing.assert_allclose(ref[3] - acc[3], ref[0] - acc[0], rtol=1e-5, atol=1e-5)  # 196 wraps
    elif epilogue == "BIAS_GELU":
        np.testing.assert_allclose(ref, mod.gelu_tanh(acc + bias), rtol=1e-5, atol=1e-5)
    else:
        res = bf16_to_f32(data["residual"][rows])
        np.testing.assert_allclose(ref, acc + bias + res, rtol=1e-5, atol=1e-5)
        assert np.all(res != 0)


def test_exact_small_integer_reference(spec):
    """Integer-valued FP8 inputs make the product exact: a check that catches indexing bugs."""
    problem = {**SMALL, "EPILOGUE": "BIAS_POS"}
    data = spec.inputs(problem, np.random.default_rng(2))
    rng = np.random.default_rng(3)
    data["A"] = f32_to_fp8(rng.integers(-2, 3, size=(512, 256)).astype(np.float32))
    data["W"] = f32_to_fp8(rng.integers(-2, 3, size=(256, 256)).astype(np.float32))
    data["bias"] = f32_to_bf16(np.zeros(256, np.float32))
    data["pos_embed"] = f32_to_bf16(np.arange(196, dtype=np.float32)[:, None].repeat(256, 1))
    rows = np.array([0, 195, 196, 391, 392, 511])
    ref = spec.reference(data, problem, rows)
    a = fp8_to_f32(data["A"][rows]).astype(np.int64)
    w = fp8_to_f32(data["W"]).astype(np.int64)
    np.testing.assert_array_equal(ref, (a @ w.T + (rows % 196)[:, None]).astype(np.float32))


def test_flops_and_bytes(spec):
    problem = _study("patch_embed")["problem"]
    assert spec.flops(problem) == 2.0 * 928256 * 768 * 768


# -- compile for sm_100a -------------------------------------------------------------------------
def _tier1_corners(spec, problem) -> list[dict]:
    study = _study("patch_embed")
    axes = study["space"]["tier1"]
    corners = []
    for values in itertools.product(*[(min(v), max(v)) for v in axes.values()]):
        config = dict(zip(axes, values, strict=True))
        if spec.check(config, problem) is None:
            corners.append(config)
    return corners


def _assert_clean(results, configs):
    failures = [(c, r.status, r.reason) for c, r in zip(configs, results, strict=True) if not r.ok]
    assert not failures, failures
    for r in results:
        assert r.regs is not None and r.regs <= 255 and r.spills == 0


def test_compile_tier1_corners_and_epilogues(spec, cache_dir):
    problem = _study("patch_embed")["problem"]
    corners = _tier1_corners(spec, problem)
    assert len(corners) == 18  # of 32: 8 TN=128 + 5 warps, 6 over the SMEM limit
    jobs = [(c, problem) for c in corners]
    # tier 2: each switch flipped away from the default, on the default tier-1 config
    for name, values in _study("patch_embed")["space"]["tier2"].items():
        for value in values:
            if value != spec.params[name]:
                jobs.append(({name: value}, problem))
    # FC1 / FC2: the default and the TN=128 corner, with the non-default add source
    for shape in ("fc1", "fc2"):
        p = _study(shape)["problem"]
        jobs += [({}, p), ({"TN": 128, "NUM_EPI_WARPS": 4, "N_STAGES": 5, "ADD_SOURCE": "FP32",
                            "TMEM_LOAD_WIDTH": 16, "COMBINED_LOAD_VEC": 2}, p)]
    results = []
    for p in {id(p): p for _, p in jobs}.values():
        configs = [c for c, q in jobs if q is p]
        results += list(zip(configs, compile_many(spec, configs, p, ARCH, cache_dir, jobs=2), strict=True))
    _assert_clean([r for _, r in results], [c for c, _ in results])


def test_kernel_refuses_a_wrong_smem_model(spec, cache_dir):
    """The .cu #errors out when the spec's SMEM figure differs from its own layout."""

    class WrongModel(type(spec)):
        def defines(self, config, problem):
            merged = super().defines(config, problem)
            merged["SPEC_SMEM_BYTES"] += 128
            return merged

    wrong = WrongModel(SPEC_PATH)
    result = compile_kernel(wrong, {}, _study("patch_embed")["problem"], ARCH, cache_dir)
    assert result.status == "compile_error"
    assert "SMEM model" in result.log


def _nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    pkg = importlib.util.find_spec("nvidia")
    for root in (pkg.submodule_search_locations or []) if pkg else []:
        for candidate in Path(root).glob("cu*/bin/nvdisasm"):
            return str(candidate)
    return None


def test_default_sass_has_the_tcgen05_fast_path(spec, cache_dir):
    result = compile_kernel(spec, {}, _study("patch_embed")["problem"], ARCH, cache_dir)
    assert result.ok, result.reason
    assert result.regs <= 255 and result.spills == 0
    tool = _nvdisasm()
    if tool is None:
        pytest.skip("nvdisasm not found: pip install nvidia-cuda-nvdisasm (in the dev extra)")
    sass = subprocess.run([tool, "-c", result.cubin_path], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][\w.]*)", sass, re.M)
    names = set(ops)
    # tcgen05.mma.cta_group::2.kind::f8f6f4 -> UTCQMMA.2CTA; 4 per K step of 128 bytes
    mma = [o for o in ops if o.startswith("UTCQMMA")]
    assert mma and all(".2CTA" in o for o in mma), sorted(names)
    assert any(o.startswith("LDTM.x32") for o in ops), sorted(names)   # tcgen05.ld 32x32b.x32
    assert any(o.startswith("UTMALDG") for o in ops), sorted(names)    # TMA tile loads
    assert any(o.startswith("UTCBAR") for o in ops), sorted(names)     # tcgen05.commit
    assert any(o.startswith("STG.E.128") for o in ops), sorted(names)  # coalesced 16-byte stores


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_study_files_load_through_the_engine(spec, name):
    from tuner.search.space import Space
    from tuner.study.file import load_study

    cfg = load_study(STUDIES[name])
    assert cfg.arch == ARCH and load_spec(cfg.kernel) is spec
    space = Space.from_study(cfg, spec)
    assert space.summary()["valid"] == 69 * 32


@pytest.mark.parametrize("shape", ["patch_embed", "fc1", "fc2"])
def test_a_b200_studys_reference_is_the_seeds_hand_tuned_config(shape):
    """Values are relative to the reference: on a first B200 session it is the config the user knows
    (0.579 ms in the seed's log), not whichever config the probe found fastest among its first ones."""
    from tuner.run.reference import reference_config
    from tuner.search.space import Space
    from tuner.study.file import load_study

    cfg = load_study(ROOT / "studies" / f"{shape}_sm100a.toml")
    space = Space.from_study(cfg, load_spec(cfg.kernel))
    assert reference_config(cfg, space) == {a: space.spec.params[a] for a in space.axis_names}


@pytest.mark.parametrize("shape", ["patch_embed", "fc1", "fc2"])
def test_the_b200_studies_search_the_grid_plans_tiers(shape, mod):
    """The user's grid-search plan, tier by tier, in this kernel's spelling."""
    from tuner.study.file import load_study

    cfg = load_study(ROOT / "studies" / f"{shape}_sm100a.toml")
    assert {k: tuple(v) for k, v in cfg.tier1.items()} == mod.GRID_PLAN_TIER1
    assert {k: tuple(v) for k, v in cfg.tier2.items()} == mod.GRID_PLAN_TIER2
