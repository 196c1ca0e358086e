"""Validity rules as tables (tuner/contract/rules.py) and the GEMM specs' rule tables.

The full product of every study's axes must give the recorded valid counts exactly, and
patch_embed_sm90a's invalid configs the recorded reasons (docs/experiments/rules_equivalence.py
compares the tables with another revision's check() config by config)."""

import pytest

from tests.conftest import ROOT
from tuner.contract.kernel_spec import DeviceInfo, load_spec
from tuner.contract.rules import Names, Rule, first_violation, one_of
from tuner.search.space import Space
from tuner.study.file import load_study

RULES = (
    Rule(lambda v: v.N % v.TILE == 0, "N={N} not a multiple of TILE={TILE}"),
    one_of("TILE", (32, 64), "TILE={TILE} not 32 or 64"),
    Rule(lambda v: v.N // v.TILE <= 4, "{N} / {TILE} tiles > 4"),
)


def test_first_violation_reports_the_first_broken_rule_in_table_order():
    assert first_violation(RULES, Names(N=128, TILE=32)) is None
    assert first_violation(RULES, Names(N=100, TILE=48)) == "N=100 not a multiple of TILE=48"  # breaks rules 1 and 2
    assert first_violation(RULES, Names(N=96, TILE=48)) == "TILE=48 not 32 or 64"
    assert first_violation(RULES, Names(N=320, TILE=64)) == "320 / 64 tiles > 4"


def test_a_rule_after_a_broken_one_is_not_evaluated():
    guarded = (one_of("TILE", (32,), "TILE={TILE}"), Rule(lambda v: 64 // v.TILE == 2, "never reached for TILE=0"))
    assert first_violation(guarded, Names(TILE=0)) == "TILE=0"


#: (study file, valid configs) of every study of the GEMM megakernels
VALID = {
    "patch_embed_sm90a": 15_340,
    "patch_embed_sm90a_hopper_grid": 1_184,
    "patch_embed_sm90a_grid": 264,
    "fc1_sm90a": 16_272,
    "fc2_sm90a": 15_088,
    "patch_embed_sm100a": 2_208,
    "fc1_sm100a": 2_208,
    "fc2_sm100a": 2_208,
}

#: why the other 399,380 configs of patch_embed_sm90a's 414,720 fail, by kind of reason
PATCH_EMBED_SM90A_INVALID = {
    "PINGPONG=N with one consumer is the same kernel as PINGPONG=N": 90720,
    "N accumulator registers per thread leave less than N of CONSUMER_REGS=N (ptxas spills)": 54720,
    "N=N not a multiple of BLOCK_N=N: a partial last column block needs STORE_TMA=N, EPI_SLOTS=N, EPI_DIRECT=N "
    "(TMA clips the store; fragment stores are not masked)": 51840,
    "SHARED_STAGING=N (one staging tile for the two ping-pong consumers, stored by a producer thread) "
    "needs PINGPONG=N, STORE_TMA=N, EPI_SLOTS=N, EPI_DIRECT=N": 51240,
    "EXTRA_TMA=N needs STORE_TMA=N (the operand lands in the staging tile)": 44640,
    "rows per consumer N must be a multiple of N (wgmma M)": 30240,
    "STORE_TMA=N with BLOCK_N=N: a third of the columns would take the N-column register tail "
    "(kept out of the space; the tail is meant for BLOCK_N=N)": 20160,
    "EPI_SLOTS > N (staging ring) needs STORE_TMA=N and EXTRA_TMA=N": 19440,
    "EPI_BATCH reads the staged EXTRA_TMA operand ahead: needs EXTRA_TMA=N": 18520,
    "N accumulators + the N-column register tail with the BIAS_POS operand read from global spill (ptxas): "
    "needs EXTRA_TMA=N": 4560,
    "EPI_BATCH=N does not divide the N staged column groups of a fragment row": 4200,
    "shared memory N B > N B": 3760,
    "EPI_SLOTS=N > BLOCK_N/N slabs of a tile": 2160,
    "EPI_SLOTS: N accumulators + N prefetched operand registers leave less than N of CONSUMER_REGS=N "
    "(ptxas spills)": 1500,
    "N accumulators, N consumer, CLUSTER_M=N, MMA_INFLIGHT>N, TMA-store staging: ptxas spills N B": 960,
    "N accumulators, MMA_INFLIGHT=N, operand read from global in the epilogue: ptxas spills N B": 720,
}


def space(study: str) -> Space:
    cfg = load_study(ROOT / "studies" / f"{study}.toml")
    return Space.from_study(cfg, load_spec(cfg.kernel))


@pytest.mark.slow
@pytest.mark.parametrize("study", list(VALID))
def test_every_config_of_a_study_is_judged_as_before(study):
    summary = space(study).summary()
    assert summary["valid"] == VALID[study]
    assert summary["valid"] + sum(summary["invalid"].values()) == summary["total"]
    if study == "patch_embed_sm90a":
        assert summary["total"] == 414_720 and summary["invalid"] == PATCH_EMBED_SM90A_INVALID


def test_reasons_name_the_values_that_broke_the_rule():
    sm90a = load_spec(ROOT / "kernel" / "gemm_sm90a.py")
    problem = {"M": 928256, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196}
    assert sm90a.check({"NOPE": 1, "ALSO": 2}, problem) == "unknown parameter(s) ['ALSO', 'NOPE']"
    assert sm90a.check({"K_TYPO": 1}, {**problem, "EPILOGUE": "RELU"}) == "unknown parameter(s) ['K_TYPO']"
    assert sm90a.check({}, {**problem, "EPILOGUE": "RELU"}) == \
        "EPILOGUE RELU not one of ('BIAS_POS', 'BIAS_GELU', 'BIAS_RESIDUAL')"
    assert sm90a.check({}, {**problem, "K": 700}) == "K=700 not a multiple of BLOCK_K=128"
    assert sm90a.check({"PINGPONG": 1, "N_STAGES": 7}, problem) == \
        "PINGPONG needs N_STAGES <= K/BLOCK_K = 6 (mbarrier parity)"
    small = DeviceInfo(max_smem_per_block=101376)
    smem = sm90a.derive({}, problem)["smem_bytes"]
    assert smem > 101376 and sm90a.check({}, problem, small) == f"shared memory {smem} B > 101376 B"

    sm100a = load_spec(ROOT / "kernel" / "gemm_sm100a.py")
    assert sm100a.check({}, {"N": 768, "K": 768}) == "problem needs integer M, N, K: 'M'"
    assert sm100a.check({"TN": "256"}, problem) == "TN='256' must be an integer"
    assert sm100a.check({"NUM_EPI_WARPS": 5, "TN": 128}, problem) == \
        "split COLS_PER_THREAD=2 invalid (needs 4 or 8): TN=128 cannot use the 5th epilogue warp"
    assert sm100a.check({"N_STAGES": 6}, problem).startswith("SMEM ")
