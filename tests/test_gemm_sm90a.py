"""kernel/gemm_sm90a: spec model, NVRTC builds for sm_90a (CPU only), and device checks (gpu)."""
from __future__ import annotations

import itertools
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.contract.kernel_spec import DeviceInfo, TensorMap, host_inputs, load_spec  # noqa: E402
from tuner.contract.numerics import f32_to_bf16  # noqa: E402

SPEC = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
STUDIES = {n: ROOT / "studies" / f"{n}_sm90a.toml" for n in ("patch_embed", "fc1", "fc2")}


def study(name):
    with open(STUDIES[name], "rb") as f:
        return tomllib.load(f)


def valid_configs(name):
    st = study(name)
    axes = {**st["space"]["tier1"], **st["space"]["tier2"]}
    for vals in itertools.product(*axes.values()):
        cfg = dict(zip(axes, vals, strict=True))
        cfg.update(st.get("fixed", {}))
        if SPEC.check(cfg, st["problem"]) is None:
            yield cfg


def nvrtc_build(config, problem, extra=None):
    """The engine's NVRTC build of a config, with ``extra`` defines (kernel-side asserts): (ok, log, cubin, stats)."""
    from tuner.compile.build import parse_ptxas
    from tuner.compile.nvrtc import SourceBundle, _nvrtc_compile, compile_options

    options = compile_options(SPEC, config, problem, "sm_90a") + [f"-D{k}={v}" for k, v in (extra or {}).items()]
    ok, log, cubin = _nvrtc_compile(SourceBundle.load(SPEC.source_path), options)
    return ok, log, cubin, parse_ptxas(log)


# ------------------------------------------------------------------ model / study files
@pytest.mark.parametrize("name", list(STUDIES))
def test_study_file_and_defaults(name):
    st = study(name)
    assert st["study"]["arch"] == "sm_90a"
    assert (STUDIES[name].parent / st["study"]["kernel"]).resolve() == SPEC.path
    for key in list(st["space"]["tier1"]) + list(st["space"]["tier2"]) + list(st.get("fixed", {})):
        assert key in SPEC.params, key
    assert SPEC.check({}, st["problem"]) is None


@pytest.mark.parametrize("name", list(STUDIES))
def test_every_valid_config_launch_matches_model(name):
    st = study(name)
    dev = DeviceInfo()
    for cfg in itertools.islice(valid_configs(name), 0, None, 37):
        d = SPEC.derive(cfg, st["problem"])
        L = SPEC.launch(cfg, st["problem"], dev)
        assert L.smem_bytes == d["smem_bytes"] <= dev.max_smem_per_block
        assert L.block == (d["threads"], 1, 1)
        assert L.grid[0] % L.cluster[0] == 0 and L.grid[0] <= dev.sm_count
        maps = [a for a in L.args if isinstance(a, TensorMap)]
        assert all(1 <= b <= 256 for m in maps for b in m.box)
        a, b = maps[0], maps[1]
        # expect_tx of a stage = what the A box and the CLUSTER_M W boxes deliver
        assert d["stage_tx_bytes"] == a.box[0] * a.box[1] + b.box[0] * b.box[1] * L.cluster[0]
        assert d["acc_regs"] <= cfg["CONSUMER_REGS"] - 40


def test_rejections_have_reasons():
    P = study("patch_embed")["problem"]
    assert "BLOCK_N" in SPEC.check({"BLOCK_N": 224}, P)
    assert "shared memory" in SPEC.check({"N_STAGES": 6}, P)
    assert "accumulator" in SPEC.check({"BLOCK_M": 256, "STORE_TMA": 0, "N_STAGES": 2}, P)
    assert "STORE_TMA" in SPEC.check({"BLOCK_N": 96}, P)
    assert "PINGPONG" in SPEC.check({"PINGPONG": 1, "NUM_CONSUMERS": 1, "BLOCK_M": 64}, P)
    assert "unknown" in SPEC.check({"NOPE": 1}, P)
    assert "EXTRA_TMA" in SPEC.check({"EPI_BATCH": 32}, P)                      # nothing staged to read
    assert "divide" in SPEC.check({"EXTRA_TMA": 1, "EPI_BATCH": 32, "BLOCK_N": 192, "N_STAGES": 2}, P)
    assert "EPI_SLOTS" in SPEC.check({"EPI_SLOTS": 2, "EXTRA_TMA": 1}, P)        # ring excludes EXTRA_TMA
    assert "EPI_SLOTS" in SPEC.check({"EPI_SLOTS": 2, "PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4}, P)  # regs
    assert "shared memory" in SPEC.check({"N_STAGES": 4}, P)                   # full staging: 3 stages max
    assert SPEC.check({"N_STAGES": 4, "EPI_SLOTS": 2}, P) is None              # ring: a 4th stage fits
    assert "BIAS_GELU" in SPEC.check({"GELU_F16X2": 1}, P)
    assert SPEC.check({"CLUSTER_RELEASE": 1}, P) is None                        # no-op without a cluster
    assert "BIAS_ACC" in SPEC.check({"BIAS_ACC": 1}, P)                          # no bias in BIAS_POS
    assert "GELU_H2" in SPEC.check({"GELU_H2": 1}, P)
    F1, F2 = study("fc1")["problem"], study("fc2")["problem"]
    assert "pick one" in SPEC.check({"GELU_H2": 1, "GELU_F16X2": 1}, F1)
    pp192 = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3}
    assert "BIAS_ACC" in SPEC.check(pp192, F1)                                   # spills 428 B without it
    assert "BIAS_ACC" in SPEC.check({**pp192, "EXTRA_TMA": 1}, F2)
    assert SPEC.check({**pp192, "BIAS_ACC": 1}, F1) is None
    assert SPEC.check({**pp192, "BIAS_ACC": 1, "EXTRA_TMA": 1, "EPI_BATCH": 8}, F2) is None
    # EPI_DIRECT: no staging (needs STORE_TMA=0), the next tile's operand words held next to the accumulators
    assert "EPI_DIRECT" in SPEC.check({"EPI_DIRECT": 1}, P)
    assert SPEC.check({"EPI_DIRECT": 1, "STORE_TMA": 0, "N_STAGES": 4}, P) is None          # 128 + 64 registers
    assert "EPI_DIRECT" in SPEC.check({**pp192, "EPI_DIRECT": 1, "STORE_TMA": 0}, P)          # 192 + 96: too many
    assert SPEC.check({**pp192, "EPI_DIRECT": 1, "STORE_TMA": 0}, F1) is None               # GELU holds no operand
    # SHARED_STAGING: one staging tile for both ping-pong consumers -> a 4th stage of 128x192 fits
    pe192 = {**pp192, "EXTRA_TMA": 1, "EPI_BATCH": 8}
    assert "shared memory" in SPEC.check({**pe192, "N_STAGES": 4}, P)
    assert SPEC.check({**pe192, "N_STAGES": 4, "SHARED_STAGING": 1}, P) is None
    assert "SHARED_STAGING" in SPEC.check({"SHARED_STAGING": 1}, P)                          # needs ping-pong
    assert "SHARED_STAGING" in SPEC.check({**pp192, "N_STAGES": 2, "EPI_SLOTS": 2, "SHARED_STAGING": 1}, P)
    assert SPEC.check({"MMA_INFLIGHT": 2}, P) is None and "MMA_INFLIGHT" in SPEC.check({"MMA_INFLIGHT": 3}, P)
    assert "SMs idle" in SPEC.check({"CLUSTER_M": 4}, P)
    assert SPEC.check({"DIAG": 1}, P) is None and "DIAG" in SPEC.check({"DIAG": 3}, P)


def test_partial_column_block_model():
    """BLOCK_N=160 does not divide N: ceil-div tile counts, a partial last column block (STORE_TMA=1 only),
    staging for the two whole 64-column slabs (the 32-column tail is stored from registers)."""
    P, F1 = study("patch_embed")["problem"], study("fc1")["problem"]
    t160 = {"BLOCK_N": 160, "N_STAGES": 5, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}
    assert SPEC.check(t160, P) is None and SPEC.check({**t160, "BIAS_ACC": 1, "GELU_H2": 1}, F1) is None
    d = SPEC.derive(t160, P)
    assert d["tiles_n"] == 5 and SPEC.derive(t160, F1)["tiles_n"] == 20
    assert d["staging_bytes"] == 2 * 64 * 128 * 2 and d["acc_regs"] == 80
    assert d["smem_bytes"] == 1024 + 5 * (128 + 160) * 128 + 32768 + 8 * (10 + 4)
    assert "partial" in SPEC.check({**t160, "STORE_TMA": 0}, P)
    assert "partial" in SPEC.check({**t160, "N_STAGES": 4, "EPI_SLOTS": 2}, P)
    assert SPEC.check({**t160, "EXTRA_TMA": 1, "EPI_BATCH": 8}, P) is None          # 16 staged groups
    assert "divide" in SPEC.check({**t160, "EXTRA_TMA": 1, "EPI_BATCH": 32}, P)


def test_new_defines_default_to_old_kernel():
    """EPI_SLOTS / EPI_BATCH / GELU_F16X2 = 0 is the kernel before they existed: same smem model."""
    for name in STUDIES:
        P = study(name)["problem"]
        for cfg in itertools.islice(valid_configs(name), 0, None, 101):
            old = {k: v for k, v in cfg.items() if k not in ("EPI_SLOTS", "EPI_BATCH", "GELU_F16X2", "CLUSTER_RELEASE",
                                                             "BIAS_ACC", "GELU_H2", "SHARED_STAGING", "PREFETCH_A")}
            if cfg.get("EPI_SLOTS", 0) == 0 and cfg.get("SHARED_STAGING", 0) == 0:
                assert SPEC.derive(cfg, P)["smem_bytes"] == SPEC.derive(old, P)["smem_bytes"]
    P = study("patch_embed")["problem"]
    d_ring = SPEC.derive({"N_STAGES": 4, "EPI_SLOTS": 2}, P)
    assert d_ring["staging_bytes"] == 2 * 64 * 64 * 2 * 2 and d_ring["smem_bytes"] <= 232448
    shared = SPEC.derive({"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "SHARED_STAGING": 1}, P)
    assert shared["staging_bytes"] == 128 * 192 * 2                       # one tile, not one per consumer
    assert shared["smem_bytes"] == 1024 + 4 * (128 + 192) * 128 + 128 * 192 * 2 + 8 * (2 * 4 + 4 + 1)


def test_small_int_inputs_catch_row_mod_bug():
    P = {"M": 1024, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196, "INPUT_KIND": "small_int"}
    rng = np.random.default_rng(0)
    inp = host_inputs(SPEC.inputs(P, rng), rng)
    rows = np.arange(0, 1024, 7)
    ref = SPEC.reference(inp, P, rows)
    assert np.array_equal(ref, np.round(ref)) and np.abs(ref).max() < 256   # exact in BF16
    # what an off-by-one row % SEQ_LEN would produce differs from the reference nearly everywhere
    wrong = ref.copy()
    from tuner.contract.numerics import bf16_to_f32
    wrong += bf16_to_f32(inp["combined"][(rows + 1) % 196]) - bf16_to_f32(inp["combined"][rows % 196])
    assert (f32_to_bf16(wrong) != f32_to_bf16(ref)).mean() > 0.9


# ------------------------------------------------------------------ NVRTC (CPU only)
BUILDS = [
    ("patch_embed", {}),
    ("patch_embed", {"EXTRA_TMA": 1, "CLUSTER_M": 2}),
    ("patch_embed", {"PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4, "EXTRA_TMA": 1}),
    ("patch_embed", {"BLOCK_N": 96, "STORE_TMA": 0, "N_STAGES": 5, "NUM_CONSUMERS": 1, "BLOCK_M": 64}),
    ("patch_embed", {"BLOCK_M": 256, "BLOCK_N": 192, "STORE_TMA": 0, "N_STAGES": 3}),   # 192 acc regs
    ("fc1", {"MMA_INFLIGHT": 1}),
    ("fc2", {"EXTRA_TMA": 1, "L2_PROMO": 256}),
    # EPI_BATCH (staged operand read ahead), EPI_SLOTS (staging ring -> 4th stage), GELU_F16X2
    ("patch_embed", {"EXTRA_TMA": 1, "EPI_BATCH": 32}),
    ("patch_embed", {"EXTRA_TMA": 1, "EPI_BATCH": 8, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4}),
    ("patch_embed", {"N_STAGES": 4, "EPI_SLOTS": 2}),
    ("patch_embed", {"N_STAGES": 4, "EPI_SLOTS": 1, "CLUSTER_M": 2}),
    ("fc1", {"GELU_F16X2": 1}),
    ("fc1", {"GELU_F16X2": 1, "N_STAGES": 4, "EPI_SLOTS": 2}),
    ("fc2", {"EXTRA_TMA": 1, "EPI_BATCH": 32, "GROUP_M": 1}),
    ("fc2", {"N_STAGES": 4, "EPI_SLOTS": 2}),
    # CLUSTER_RELEASE (CTA-scope release to the cluster), BIAS_ACC (bias in the accumulator start), GELU_H2
    ("patch_embed", {"EXTRA_TMA": 1, "EPI_BATCH": 32, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}),
    ("patch_embed", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3, "EXTRA_TMA": 1, "EPI_BATCH": 8,
                     "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}),
    ("fc1", {"BIAS_ACC": 1, "GELU_H2": 1}),
    ("fc1", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3, "BIAS_ACC": 1, "GELU_H2": 1}),   # 192 acc, spill-free
    ("fc1", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3, "BIAS_ACC": 1, "GELU_H2": 1, "CLUSTER_M": 2,
             "CLUSTER_RELEASE": 1}),
    ("fc2", {"EXTRA_TMA": 1, "EPI_BATCH": 32, "GROUP_M": 1, "BIAS_ACC": 1, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}),
    ("fc2", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BIAS_ACC": 1}),
    # EPI_DIRECT (operand in the accumulator start, prefetched a tile ahead; 16-byte stores from registers)
    ("patch_embed", {"STORE_TMA": 0, "EPI_DIRECT": 1, "N_STAGES": 4}),
    ("patch_embed", {"STORE_TMA": 0, "EPI_DIRECT": 1, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 5, "CLUSTER_M": 2,
                     "CLUSTER_RELEASE": 1}),
    ("fc1", {"STORE_TMA": 0, "EPI_DIRECT": 1, "PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 5, "GELU_H2": 1}),
    ("fc2", {"STORE_TMA": 0, "EPI_DIRECT": 1, "N_STAGES": 4, "GROUP_M": 1, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}),
    # BLOCK_N=160: partial last column block, 5 stages, multicast (the cuBLAS nvjet 128x160 shape)
    ("patch_embed", {"BLOCK_N": 160, "N_STAGES": 5, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}),
    ("patch_embed", {"BLOCK_N": 160, "N_STAGES": 5, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1, "EXTRA_TMA": 1,
                     "EPI_BATCH": 8}),
    ("patch_embed", {"BLOCK_N": 160, "N_STAGES": 4, "PINGPONG": 1, "EXTRA_TMA": 1, "EPI_BATCH": 8}),
    ("fc1", {"BLOCK_N": 160, "N_STAGES": 5, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1, "BIAS_ACC": 1, "GELU_H2": 1}),
    ("fc1", {"BLOCK_N": 160, "N_STAGES": 5}),
    ("fc2", {"BLOCK_N": 160, "N_STAGES": 5, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1, "BIAS_ACC": 1, "EXTRA_TMA": 1,
             "EPI_BATCH": 8}),
    ("fc2", {"BLOCK_N": 160, "N_STAGES": 5}),
    # v6-v8: split release (MMA_INFLIGHT=2), one staging tile for the ping-pong pair (SHARED_STAGING), PREFETCH_A
    ("patch_embed", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3, "EXTRA_TMA": 1, "EPI_BATCH": 8, "MMA_INFLIGHT": 2}),
    ("patch_embed", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "EXTRA_TMA": 1, "EPI_BATCH": 8, "MMA_INFLIGHT": 2,
                     "SHARED_STAGING": 1, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1, "PREFETCH_A": 1}),
    ("patch_embed", {"PINGPONG": 1, "BLOCK_N": 128, "N_STAGES": 6, "EXTRA_TMA": 1, "SHARED_STAGING": 1}),
    ("patch_embed", {"PINGPONG": 1, "BLOCK_N": 160, "N_STAGES": 5, "EXTRA_TMA": 1, "EPI_BATCH": 8, "SHARED_STAGING": 1}),
    ("fc1", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "BIAS_ACC": 1, "GELU_H2": 1, "MMA_INFLIGHT": 2,
             "SHARED_STAGING": 1}),
    ("fc1", {"BLOCK_N": 160, "N_STAGES": 4, "PINGPONG": 1, "SHARED_STAGING": 1}),   # 32-column last block
    ("fc2", {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BIAS_ACC": 1,
             "MMA_INFLIGHT": 2, "SHARED_STAGING": 1}),
    ("fc2", {"EXTRA_TMA": 1, "EPI_BATCH": 32, "BIAS_ACC": 1, "MMA_INFLIGHT": 2}),
]


@pytest.mark.parametrize("name,cfg", BUILDS)
def test_nvrtc_build_sm90a(name, cfg):
    P = study(name)["problem"]
    assert SPEC.check(cfg, P) is None
    smem = SPEC.derive(cfg, P)["smem_bytes"]
    ok, log, cubin, stats = nvrtc_build(cfg, P, {"EXPECT_SMEM_BYTES": smem})   # kernel asserts == model
    assert ok, log[-2000:]
    assert len(cubin) > 0
    assert stats["regs"] is not None and stats["regs"] <= 255
    assert (stats["spills"] or 0) == 0, log


def test_model_and_ptxas_agree_on_register_limit():
    """256 accumulators per consumer thread: the model rejects it, and ptxas indeed spills."""
    P = study("patch_embed")["problem"]
    cfg = {"BLOCK_M": 256, "BLOCK_N": 256, "STORE_TMA": 0, "N_STAGES": 2}
    assert "accumulator" in SPEC.check(cfg, P)
    ok, log, _, stats = nvrtc_build(cfg, P)
    assert ok and (stats["spills"] or 0) > 0


def test_model_and_ptxas_agree_on_192_accumulator_epilogues():
    """Ping-pong 128x192 GELU: the model rejects it without BIAS_ACC, and ptxas indeed spills; with it, no spill."""
    P = study("fc1")["problem"]
    cfg = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3}
    assert "BIAS_ACC" in SPEC.check(cfg, P)
    ok, log, _, stats = nvrtc_build(cfg, P)
    assert ok and (stats["spills"] or 0) > 0
    ok, log, _, stats = nvrtc_build({**cfg, "BIAS_ACC": 1}, P)
    assert ok and (stats["spills"] or 0) == 0, log


PROMOTED_BUILDS = [
    ("patch_embed", {"BLOCK_N": 192, "N_STAGES": 4, "EXTRA_TMA": 1, "EPI_BATCH": 8, "MMA_INFLIGHT": 2, "PROMOTE_EVERY": 1}),
    ("fc1", {"BLOCK_N": 192, "N_STAGES": 4, "BIAS_ACC": 1, "GELU_H2": 1, "MMA_INFLIGHT": 1, "PROMOTE_EVERY": 2}),
    ("fc2", {"PINGPONG": 1, "BLOCK_M": 64, "BLOCK_N": 192, "N_STAGES": 4, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BIAS_ACC": 1,
             "MMA_INFLIGHT": 2, "SHARED_STAGING": 1, "PROMOTE_EVERY": 4}),
    ("fc2", {"BLOCK_N": 160, "N_STAGES": 5, "EXTRA_TMA": 1, "BIAS_ACC": 1, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1,
             "PROMOTE_EVERY": 24}),
    # the staging ring's operand words are loaded in the epilogue, after the promoted sum is folded back
    ("patch_embed", {"BLOCK_N": 192, "N_STAGES": 3, "EPI_SLOTS": 2, "PROMOTE_EVERY": 1}),
    ("fc2", {"BLOCK_N": 128, "N_STAGES": 4, "EPI_DIRECT": 1, "STORE_TMA": 0, "BIAS_ACC": 1, "PROMOTE_EVERY": 1}),
]


@pytest.mark.parametrize("name,cfg", PROMOTED_BUILDS)
def test_promoted_builds_fit_the_registers(name, cfg):
    """PROMOTE_EVERY > 0 keeps a second FP32 accumulator: accepted configs build without spills."""
    P = study(name)["problem"]
    assert SPEC.check(cfg, P) is None
    ok, log, _, stats = nvrtc_build(cfg, P, {"EXPECT_SMEM_BYTES": SPEC.derive(cfg, P)["smem_bytes"]})
    assert ok and (stats["spills"] or 0) == 0, log[-2000:]


def test_promotion_register_rule_agrees_with_ptxas():
    """Two 192-accumulator arrays (ping-pong 128x192) do not fit: the model rejects it, and ptxas spills;
    the same tile without promotion is accepted and does not."""
    P = study("fc2")["problem"]
    cfg = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BIAS_ACC": 1,
           "MMA_INFLIGHT": 2, "SHARED_STAGING": 1}
    assert SPEC.check(cfg, P) is None
    reason = SPEC.check({**cfg, "PROMOTE_EVERY": 1}, P)
    assert reason and "PROMOTE_EVERY" in reason and "2 x 192 accumulators" in reason
    ok, log, _, stats = nvrtc_build({**cfg, "PROMOTE_EVERY": 1}, P)
    assert ok and (stats["spills"] or 0) > 0
    # EPI_DIRECT holds the next tile's operand words through the main loop: 2 x 96 + 48 registers do not fit
    direct = {"BLOCK_N": 192, "N_STAGES": 3, "EPI_DIRECT": 1, "STORE_TMA": 0, "BIAS_ACC": 1, "PROMOTE_EVERY": 1}
    assert "48 held operand registers" in SPEC.check(direct, P)
    ok, log, _, stats = nvrtc_build(direct, P)
    assert ok and (stats["spills"] or 0) > 0


def test_promote_every_values():
    P = study("patch_embed")["problem"]   # K = 768: 6 k-blocks
    base = {"BLOCK_N": 128, "N_STAGES": 4}
    assert SPEC.check({**base, "PROMOTE_EVERY": 6}, P) is None
    assert "at most K/BLOCK_K=6" in SPEC.check({**base, "PROMOTE_EVERY": 7}, P)
    assert "PROMOTE_EVERY=-1" in SPEC.check({**base, "PROMOTE_EVERY": -1}, P)


def test_promotion_reads_the_accumulator_only_after_the_wgmmas_completed(tmp_path):
    """SASS of a promoted build: every FADD that reads the wgmma accumulator registers comes after a
    wait for all wgmma groups (WARPGROUP.DEPBAR.LE gsb0, 0x0) with no QGMMA in between, and each
    window's first wgmma starts from zero (QGMMA ... RZ, !UPT) instead of adding to the old registers."""
    import re

    P = study("patch_embed")["problem"]
    cfg = {"BLOCK_N": 64, "N_STAGES": 4, "MMA_INFLIGHT": 2, "PROMOTE_EVERY": 1}
    ok, log, cubin, _ = nvrtc_build(cfg, P)
    assert ok, log[-2000:]
    ins = _sass(cubin, tmp_path)
    mma = [(i, args) for i, (op, args) in enumerate(ins) if op.startswith("QGMMA")]
    first = int(re.match(r"R(\d+)", mma[0][1]).group(1))
    acc = {f"R{r}" for r in range(first, first + 32)}          # m64n64: 32 FP32 registers per thread
    assert any("RZ, !UPT" in args for _, args in mma)          # a window's first wgmma: scale-d = 0
    reads = [i for i, (op, args) in enumerate(ins)
             if op.endswith("FADD") and set(re.findall(r"R\d+", args)[1:]) & acc]
    assert len(reads) >= 64                                     # the promotion adds, and the last window's
    for i in reads:
        j = i - 1
        while not (ins[j][0].startswith("QGMMA") or "DEPBAR.LE" in ins[j][0] and "gsb0" in ins[j][1]):
            j -= 1
        assert "DEPBAR" in ins[j][0] and ins[j][1].replace(" ", "").endswith("gsb0,0x0"), (ins[j], ins[i])


SPLIT_FC1 = {"PINGPONG": 1, "BLOCK_M": 64, "BLOCK_N": 192, "N_STAGES": 5, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1,
             "MMA_INFLIGHT": 1, "PROMOTE_EVERY": 4, "PROMOTE_SPLIT": 1, "BIAS_ACC": 1, "GELU_H2": 1, "L2_PROMO": 256}


def test_split_promotion_never_drains_the_tensor_pipe_inside_the_k_loop(tmp_path):
    """PROMOTE_SPLIT=1 (FC1's precise winner, windows of 4 of its 6 k-blocks): the wgmmas are m64n96 halves,
    ptxas does not serialize them (no wait per k32 step), and no wait for all groups (WARPGROUP.DEPBAR.LE gsb0,
    0x0) falls between a tile's first and last wgmma (its k-blocks are unrolled): a window ends with one half's
    group still in flight. Without the split the wgmmas are whole m64n192 ones."""
    def sass_of(cfg):
        ok, log, cubin, stats = nvrtc_build(cfg, P, {"EXPECT_SMEM_BYTES": SPEC.derive(cfg, P)["smem_bytes"]})
        assert ok and not stats["spills"] and "serialized" not in log, log[-2000:]
        ins = _sass(cubin, tmp_path)
        mma = [i for i, (op, _) in enumerate(ins) if op.startswith("QGMMA")]
        drains = [i for i, (op, args) in enumerate(ins) if op.startswith("WARPGROUP.DEPBAR")
                  and args.replace(" ", "").endswith("gsb0,0x0") and mma[0] < i < mma[-1]]
        waits = sum(op.startswith("WARPGROUP.DEPBAR") for op, _ in ins)
        return {ins[i][0] for i in mma}, len(mma), waits, drains

    P = study("fc1")["problem"]
    assert SPEC.check(SPLIT_FC1, P) is None
    shapes, wgmmas, waits, drains = sass_of(SPLIT_FC1)
    assert shapes == {"QGMMA.64x96x32.F32.E4M3.E4M3"} and wgmmas == 6 * 2 * 4 and waits <= 8 and not drains
    shapes, wgmmas, waits, drains = sass_of({**SPLIT_FC1, "PROMOTE_SPLIT": 0})
    assert shapes == {"QGMMA.64x192x32.F32.E4M3.E4M3"}


def test_split_promotion_rules():
    P = study("fc1")["problem"]
    assert "needs PROMOTE_EVERY > 0" in SPEC.check({**SPLIT_FC1, "PROMOTE_EVERY": 0}, P)
    assert "MMA_INFLIGHT=1" in SPEC.check({**SPLIT_FC1, "MMA_INFLIGHT": 2}, P)
    assert "BLOCK_N 128, 192 or 256" in SPEC.check({**SPLIT_FC1, "BLOCK_N": 160}, P)
    fc2 = {**study("fc2")["problem"]}                        # K = 3072: 24 k-blocks, not unrolled
    assert "K/BLOCK_K=24 k-blocks > 8" in SPEC.check({**SPLIT_FC1, "GELU_H2": 0}, fc2)


def test_unroll_k_unrolls_that_many_k_blocks_together(tmp_path):
    """UNROLL_K=U (FC1's precise start, 6 k-blocks): the loop's body holds U k-blocks' wgmmas (6: the loop is gone),
    and ptxas does not serialize them; the model takes divisors of K/BLOCK_K up to 8, and not with PROMOTE_SPLIT,
    which unrolls the loop whole already."""
    P = study("fc1")["problem"]
    cfg = {**SPLIT_FC1, "PROMOTE_SPLIT": 0, "PROMOTE_EVERY": 2, "UNROLL_K": 6}
    assert SPEC.check(cfg, P) is None

    def qgmmas(unroll):
        config = {**cfg, "UNROLL_K": unroll}
        ok, log, cubin, stats = nvrtc_build(config, P, {"EXPECT_SMEM_BYTES": SPEC.derive(config, P)["smem_bytes"]})
        assert ok and not stats["spills"] and "serialized" not in log, log[-2000:]
        return [op for op, _ in _sass(cubin, tmp_path)].count("QGMMA.64x192x32.F32.E4M3.E4M3")

    assert [qgmmas(u) for u in (0, 2, 6)] == [4, 2 * 4, 6 * 4]
    assert "dividing K/BLOCK_K=6" in SPEC.check({**cfg, "UNROLL_K": 4}, P)
    fc2 = study("fc2")["problem"]                                      # 24 k-blocks: 8 at most together
    assert SPEC.check({**cfg, "GELU_H2": 0, "UNROLL_K": 8}, fc2) is None
    assert "at most 8" in SPEC.check({**cfg, "GELU_H2": 0, "UNROLL_K": 12}, fc2)
    assert "unrolls the K loop whole already" in SPEC.check({**cfg, "PROMOTE_SPLIT": 1, "PROMOTE_EVERY": 4}, P)


def _sass(cubin: bytes, tmp_path) -> list[tuple[str, str]]:
    """A cubin's SASS instructions in order: (opcode with its predicate, operands)."""
    import re
    import subprocess

    from tests.test_gemm_sm100a import _nvdisasm

    tool = _nvdisasm()
    assert tool, "nvdisasm not found: pip install nvidia-cuda-nvdisasm (in the dev extra)"
    (tmp_path / "sass.cubin").write_bytes(cubin)
    sass = subprocess.run([tool, "-c", str(tmp_path / "sass.cubin")], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^\s+/\*[0-9a-f]+\*/\s+((?:@!?U?P\w+\s+)?[A-Z][\w.]*)\s*([^;]*);", sass, re.M)


def test_cluster_release_has_no_gpu_scope_fence_in_the_loop():
    """CLUSTER_RELEASE=1: the per-stage release to the cluster emits no .release.cluster arrive (the old one
    costs a MEMBAR.ALL.GPU per arrive in SASS); checked on the PTX-visible form."""
    src = (ROOT / "kernel" / "gemm_sm90a.cu").read_text()
    body = src.split("mbar_arrive_cluster_cta(uint32_t bar, uint32_t cta) {", 1)[1].split("}", 2)[0]
    assert "mbarrier.arrive.shared::cluster.b64" in body and "release.cluster" not in body


def test_diag_build_records_clocks_and_can_drop_the_wgmmas():
    """DIAG=1 adds the per-launch clock record the bench harness reads (gemm_diag); DIAG=2 leaves the QGMMAs out."""
    P = study("patch_embed")["problem"]
    cfg = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "EXTRA_TMA": 1, "EPI_BATCH": 8, "MMA_INFLIGHT": 2,
           "SHARED_STAGING": 1}
    plain, diag1, diag2 = (nvrtc_build({**cfg, **d}, P) for d in ({}, {"DIAG": 1}, {"DIAG": 2}))
    assert plain[0] and diag1[0] and diag2[0]
    assert b"gemm_diag_count" not in plain[2] and b"gemm_diag_count" in diag1[2]
    assert len(diag2[2]) < len(diag1[2])   # no wgmma code


def test_smem_model_mismatch_is_a_compile_error():
    P = study("patch_embed")["problem"]
    ok, log, _, _ = nvrtc_build({}, P, {"EXPECT_SMEM_BYTES": SPEC.derive({}, P)["smem_bytes"] + 8})
    assert not ok and "smem model" in log


# ------------------------------------------------------------------ device (gpu)
DEVICE_PROBLEMS = [("BIAS_POS", 768, 768), ("BIAS_GELU", 3072, 768), ("BIAS_RESIDUAL", 768, 3072)]


def device_jobs(epi, n, k):
    """The problem and the configs test_device_correctness runs: defaults, ping-pong, multicast, rings, partial
    column blocks, the split release + shared staging, and the off-by-one variants that must be caught."""
    P = {"M": 196 * 256, "N": n, "K": k, "EPILOGUE": epi, "SEQ_LEN": 196}
    jobs = [{"config": {}, "time": False}, {"config": {"PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4}, "time": False},
            {"config": {"CLUSTER_M": 2}, "time": False}]
    jobs.append({"config": {"N_STAGES": 4, "EPI_SLOTS": 2}, "time": False})
    t160 = {"BLOCK_N": 160, "N_STAGES": 5, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}   # partial last column block
    jobs.append({"config": t160, "time": False})
    # the 32-column register tail of a 160-column tile: with the operand read from global per word it spills
    # (BIAS_POS / BIAS_RESIDUAL take it through TMA, the tail's words still from global)
    tail_operand = {} if epi == "BIAS_GELU" else {"EXTRA_TMA": 1}
    jobs.append({"config": {"BLOCK_N": 160, "N_STAGES": 4, "PINGPONG": 1, **tail_operand}, "time": False})
    if epi == "BIAS_GELU":
        jobs.append({"config": {**t160, "BIAS_ACC": 1, "GELU_H2": 1}, "time": False})
        jobs.append({"config": {"GELU_F16X2": 1}, "time": False})
    else:
        jobs.append({"config": {"EXTRA_TMA": 1, "EPI_BATCH": 32}, "time": False})
    if epi == "BIAS_POS":
        jobs.append({"config": {"BUG_POS_OFF_BY_ONE": 1}, "time": False, "expect_fail": True})
        jobs.append({"config": {"BUG_POS_OFF_BY_ONE": 1, "EXTRA_TMA": 1, "EPI_BATCH": 32}, "time": False,
                     "expect_fail": True})
        jobs.append({"config": {"BUG_POS_OFF_BY_ONE": 1, "N_STAGES": 4, "EPI_SLOTS": 2}, "time": False,
                     "expect_fail": True})
        jobs.append({"config": {**t160, "BUG_POS_OFF_BY_ONE": 1}, "time": False, "expect_fail": True})
        jobs.append({"config": {**t160, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BUG_POS_OFF_BY_ONE": 1}, "time": False,
                     "expect_fail": True})
    if epi != "BIAS_GELU":
        jobs.append({"config": {**t160, "EXTRA_TMA": 1, "EPI_BATCH": 8}, "time": False})
    # split release, and one staging tile for the ping-pong pair (stored and refilled by the storer thread)
    pp = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "MMA_INFLIGHT": 2, "SHARED_STAGING": 1,
          **({"BIAS_ACC": 1, "GELU_H2": 1} if epi == "BIAS_GELU" else {"EXTRA_TMA": 1, "EPI_BATCH": 8})}
    if epi == "BIAS_RESIDUAL":
        pp["BIAS_ACC"] = 1
    jobs += [{"config": pp, "time": False}, {"config": {**pp, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1}, "time": False},
             {"config": {"MMA_INFLIGHT": 2, "PREFETCH_A": 1}, "time": False},
             {"config": {"BLOCK_N": 160, "N_STAGES": 5, "PINGPONG": 1, "SHARED_STAGING": 1, **tail_operand},
              "time": False}]
    if epi == "BIAS_POS":
        jobs.append({"config": {**pp, "BUG_POS_OFF_BY_ONE": 1}, "time": False, "expect_fail": True})
    # FP32 promotion (PROMOTE_EVERY): cooperative 128x192 with the split release, ping-pong 64-row tiles with the
    # shared staging, a window longer than one k-block, and one the whole K long (promoted once, at the end)
    k_iters = k // 128
    promoted = {"BLOCK_N": 192, "N_STAGES": 4, "MMA_INFLIGHT": 2, **({"BIAS_ACC": 1} if epi != "BIAS_POS" else {})}
    jobs += [{"config": {**promoted, "PROMOTE_EVERY": 1}, "time": False},
             {"config": {**pp, "BLOCK_M": 64, "PROMOTE_EVERY": 2}, "time": False},
             {"config": {**promoted, "MMA_INFLIGHT": 0, "PROMOTE_EVERY": k_iters}, "time": False},
             {"config": {**promoted, "MMA_INFLIGHT": 1, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1, "PROMOTE_EVERY": 4}, "time": False}]
    if epi == "BIAS_POS":
        jobs.append({"config": {**promoted, "PROMOTE_EVERY": 1, "BUG_POS_OFF_BY_ONE": 1}, "time": False, "expect_fail": True})
    # UNROLL_K: the fast class's ping-pong tile two k-blocks at a time, a promoted cooperative one in groups of 6
    jobs += [{"config": {**pp, "MMA_INFLIGHT": 1, "UNROLL_K": 2}, "time": False},
             {"config": {**promoted, "MMA_INFLIGHT": 0, "PROMOTE_EVERY": 2, "UNROLL_K": 6}, "time": False}]
    if epi == "BIAS_POS":
        jobs.append({"config": {**pp, "MMA_INFLIGHT": 1, "UNROLL_K": 2, "BUG_POS_OFF_BY_ONE": 1}, "time": False,
                     "expect_fail": True})
    # PROMOTE_SPLIT (K up to 8 k-blocks): ping-pong 64x192 in windows of 2, cooperative 128x192 in a window of 4
    # and a shorter last one, 128-column tiles promoted every k-block (m64n64 halves)
    if k_iters <= 8:
        split = {"MMA_INFLIGHT": 1, "PROMOTE_SPLIT": 1}
        jobs += [{"config": {**pp, **split, "BLOCK_M": 64, "PROMOTE_EVERY": 2}, "time": False},
                 {"config": {**promoted, **split, "CLUSTER_M": 2, "CLUSTER_RELEASE": 1, "PROMOTE_EVERY": 4}, "time": False},
                 {"config": {**promoted, **split, "BLOCK_N": 128, "PROMOTE_EVERY": 1}, "time": False}]
        if epi == "BIAS_POS":
            jobs.append({"config": {**pp, **split, "BLOCK_M": 64, "PROMOTE_EVERY": 2, "BUG_POS_OFF_BY_ONE": 1},
                         "time": False, "expect_fail": True})
    return P, jobs


@pytest.mark.parametrize("epi,n,k", DEVICE_PROBLEMS)
def test_device_jobs_are_valid_configs(epi, n, k):
    """Every config the device test runs is one the model accepts (an invalid one is reported, not run)."""
    P, jobs = device_jobs(epi, n, k)
    for job in jobs:
        assert SPEC.check(job["config"], P) is None, (job["config"], SPEC.check(job["config"], P))


@pytest.mark.gpu
@pytest.mark.parametrize("epi,n,k", DEVICE_PROBLEMS)
@pytest.mark.parametrize("inputs", ["small_int", "random"])
def test_device_correctness(epi, n, k, inputs, tmp_path):
    """Through the engine's evaluator and worker: exact small-int and random inputs, poisoned output;
    the off-by-one variants must be caught."""
    from tuner.evaluate.gpu import GpuEvaluator
    from tuner.study.file import MeasureSettings

    P, jobs = device_jobs(epi, n, k)
    P = {**P, "INPUT_KIND": inputs}
    evaluator = GpuEvaluator(SPEC, P, "sm_90a", MeasureSettings(warmup=1, repeats=10, min_pairs=10, timeout_s=20),
                             cache_dir=tmp_path)
    evaluator.start()
    try:
        for job in jobs:
            m = evaluator.evaluate(job["config"], {**SPEC.params, **job["config"]}, lambda step, value, samples: False)
            expected = "mismatch" if job.get("expect_fail") else "ok"
            assert m.status == expected, (job["config"], m.status, m.reason)
    finally:
        evaluator.close()


def test_full_size_inputs_are_generated_on_the_gpu_not_drawn_on_the_host():
    from tuner.contract.kernel_spec import RandomTable

    P = {"M": 928256, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196}
    inputs = SPEC.inputs(P, np.random.default_rng(0))
    assert isinstance(inputs["A"], RandomTable) and inputs["A"].nbytes == 928256 * 768  # 0.7 GB, not drawn here
    assert isinstance(inputs["W"], RandomTable)
    codes = inputs["A"].table
    assert 0 not in codes and 0x80 not in codes  # never zero (+0 / -0 in E4M3)
    a = host_inputs({"A": RandomTable((4096, 64), codes)}, np.random.default_rng(1))["A"]
    assert a.shape == (4096, 64) and set(np.unique(a)) == set(np.unique(codes))


def test_random_table_needs_256_entries_of_1_2_or_4_bytes():
    from tuner.contract.kernel_spec import RandomTable

    with pytest.raises(ValueError, match="256 entries"):
        RandomTable((4,), np.zeros(17, np.uint8))
    with pytest.raises(ValueError, match="256 entries"):
        RandomTable((4,), np.zeros(256, np.float64))
