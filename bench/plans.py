"""Writes device plans (JSON) for bench/harness.py and precompiles their cubins here.

  python bench/plans.py <plan-name>      -> bench/plan_<plan-name>.json + bench/_cubins/*
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "bench"))

PATCH = {"M": 928256, "N": 768, "K": 768, "EPILOGUE": "BIAS_POS", "SEQ_LEN": 196}
FC1 = {"M": 928256, "N": 3072, "K": 768, "EPILOGUE": "BIAS_GELU", "SEQ_LEN": 196}
FC2 = {"M": 928256, "N": 768, "K": 3072, "EPILOGUE": "BIAS_RESIDUAL", "SEQ_LEN": 196}


def J(cfg, time=True, expect_fail=False):
    return {"config": cfg, "time": time, "expect_fail": expect_fail}


PLANS = {
    "first": {
        "timing": {"warmup": 3, "repeats": 20},
        "problems": {
            "patch_embed": {"problem": PATCH, "jobs": [
                J({}),
                J({"STORE_TMA": 0, "N_STAGES": 4}),
                J({"EXTRA_TMA": 1}),
                J({"PINGPONG": 1, "BLOCK_M": 128, "BLOCK_N": 128, "N_STAGES": 4}),
                J({"MMA_INFLIGHT": 1}),
                J({"NUM_CONSUMERS": 1, "BLOCK_M": 64, "BLOCK_N": 256, "N_STAGES": 4}),
                J({"BLOCK_N": 192, "N_STAGES": 4}),
                J({"BLOCK_N": 96, "STORE_TMA": 0, "N_STAGES": 5}),
                J({"BLOCK_M": 256, "BLOCK_N": 128, "STORE_TMA": 0, "N_STAGES": 4}),
                J({"PINGPONG": 1, "BLOCK_M": 64, "BLOCK_N": 256, "N_STAGES": 4}),
                J({"PINGPONG": 1, "BLOCK_M": 64, "BLOCK_N": 256, "N_STAGES": 4, "EXTRA_TMA": 1}),
                J({"PINGPONG": 1, "BLOCK_M": 128, "BLOCK_N": 192, "N_STAGES": 3}),
                J({"MMA_INFLIGHT": 1, "EXTRA_TMA": 1}),
                J({"BUG_POS_OFF_BY_ONE": 1, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4, "EXTRA_TMA": 1}, time=False, expect_fail=True),
                J({"BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
                J({"BUG_POS_OFF_BY_ONE": 1, "EXTRA_TMA": 1}, time=False, expect_fail=True),
                J({"BUG_POS_OFF_BY_ONE": 1, "STORE_TMA": 0}, time=False, expect_fail=True),
            ]},
            "fc1": {"problem": FC1, "jobs": [
                J({}),
                J({"PINGPONG": 1, "BLOCK_M": 128, "BLOCK_N": 128, "N_STAGES": 4}),
                J({"PINGPONG": 1, "BLOCK_M": 64, "BLOCK_N": 256, "N_STAGES": 4}),
                J({"STORE_TMA": 0, "N_STAGES": 4}),
            ]},
            "fc2": {"problem": FC2, "jobs": [
                J({}),
                J({"EXTRA_TMA": 1}),
                J({"PINGPONG": 1, "BLOCK_M": 128, "BLOCK_N": 128, "N_STAGES": 4, "EXTRA_TMA": 1}),
                J({"STORE_TMA": 0, "N_STAGES": 4}),
                J({"PINGPONG": 1, "BLOCK_M": 64, "BLOCK_N": 256, "N_STAGES": 4, "EXTRA_TMA": 1}),
            ]},
        },
    },
}


E = {"EXTRA_TMA": 1}
C2 = {"CLUSTER_M": 2}
PLANS["cluster"] = {
    "timing": {"warmup": 3, "repeats": 20},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            J(E),
            J({**E, **C2}),
            J(C2),
            J({**E, **C2, "MMA_INFLIGHT": 1}),
            J({**E, **C2, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4}),
            J({**E, **C2, "BLOCK_N": 192, "N_STAGES": 4}),
            J({**E, **C2, "GROUP_M": 1}),
            J({**E, **C2, "GROUP_M": 32}),
            J({**E, **C2, "L2_PROMO": 256}),
            J({**C2, "BLOCK_M": 256, "BLOCK_N": 192, "STORE_TMA": 0, "N_STAGES": 4}),
            J({**E, **C2, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            J(C2),
            J({**C2, "BLOCK_N": 192, "N_STAGES": 4}),
            J({**C2, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4}),
            J({**C2, "MMA_INFLIGHT": 1}),
        ]},
        "fc2": {"problem": FC2, "jobs": [
            J(C2),
            J({**C2, **E}),
            J({**C2, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4}),
            J({**C2, "BLOCK_N": 192, "N_STAGES": 4}),
        ]},
    },
}


PLANS["sweep"] = {
    "timing": {"warmup": 3, "repeats": 20},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            J(E),
            J({**E, "BLOCK_N": 128, "N_STAGES": 6}),
            J({**E, "BLOCK_N": 128, "N_STAGES": 5}),
            J({**E, "BLOCK_M": 256, "BLOCK_N": 128, "N_STAGES": 3}),
            J({**E, "GROUP_M": 1}),
            J({**E, "GROUP_M": 32}),
            J({**E, "L2_PROMO": 256}),
            J({**E, "SNAKE_ORDER": 1}),
            J({**E, "CONSUMER_REGS": 240, "PRODUCER_REGS": 24}),
            J({**E, "BLOCK_N": 128, "N_STAGES": 6, "L2_PROMO": 256}),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            J({}),
            J({"BLOCK_N": 128, "N_STAGES": 6}),
            J({"L2_PROMO": 256}),
            J({"GROUP_M": 1}),
            J({"BLOCK_M": 256, "BLOCK_N": 128, "N_STAGES": 3}),
        ]},
        "fc2": {"problem": FC2, "jobs": [
            J({}),
            J({"BLOCK_N": 128, "N_STAGES": 6}),
            J({**E, "BLOCK_N": 128, "N_STAGES": 6}),
            J({"L2_PROMO": 256}),
            J({"GROUP_M": 1}),
            J({"BLOCK_M": 256, "BLOCK_N": 128, "N_STAGES": 3}),
        ]},
    },
}


PLANS["best_v1"] = {   # the first benchmark (2026-11-21, before EPI_BATCH / GELU_F16X2)
    "timing": {"warmup": 5, "repeats": 50},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [J(E), J({**E, "GROUP_M": 32}), J({**E, "L2_PROMO": 256}),
                                                   J({"BUG_POS_OFF_BY_ONE": 1, **E}, time=False, expect_fail=True)]},
        "fc1": {"problem": FC1, "jobs": [J({}), J({"L2_PROMO": 256}), J({"BLOCK_N": 128, "N_STAGES": 6})]},
        "fc2": {"problem": FC2, "jobs": [J({}), J({"GROUP_M": 1}), J({**E})]},
    },
}
_B32 = {"EXTRA_TMA": 1, "EPI_BATCH": 32}
_G = {"GELU_F16X2": 1}
PLANS["best"] = {
    "timing": {"warmup": 5, "repeats": 50},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            J({"EXTRA_TMA": 1}), J(_B32), J({**_B32, "GROUP_M": 32}), J({"EXTRA_TMA": 1, "EPI_BATCH": 8}),
            J({**_B32, "L2_PROMO": 256}),
            J({"BUG_POS_OFF_BY_ONE": 1, **_B32}, time=False, expect_fail=True)]},
        "fc1": {"problem": FC1, "jobs": [
            J({}), J(_G), J({**_G, "L2_PROMO": 256}), J({**_G, "GROUP_M": 32}),
            J({**_G, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4}), J({**_G, "N_STAGES": 4, "EPI_SLOTS": 2})]},
        "fc2": {"problem": FC2, "jobs": [
            J({"EXTRA_TMA": 1}), J(_B32), J({**_B32, "GROUP_M": 1}), J({"EXTRA_TMA": 1, "EPI_BATCH": 8, "GROUP_M": 1}),
            J({**_B32, "L2_PROMO": 256})]},
    },
}
PLANS["ncu"] = {
    "timing": {"cublas": False},
    "problems": {"patch_embed": {"problem": PATCH, "jobs": [J(_B32, time=False)]}},
}


# staging ring (EPI_SLOTS): a 4th stage for 128x256, 256x192 tiles, ping-pong 128x192, multicast with 4 stages
R2 = {"N_STAGES": 4, "EPI_SLOTS": 2}
T256 = {"BLOCK_M": 256, "BLOCK_N": 192, "N_STAGES": 3, "EPI_SLOTS": 1}
PP192 = {"PINGPONG": 1, "BLOCK_M": 128, "BLOCK_N": 192, "N_STAGES": 4, "EPI_SLOTS": 2}
PLANS["ring"] = {
    "timing": {"warmup": 5, "repeats": 30},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            J(E), J({**E, "GROUP_M": 32}), J(R2), J({**R2, "GROUP_M": 32}), J({"N_STAGES": 4, "EPI_SLOTS": 1}),
            J(T256), J(PP192), J({**R2, **C2}), J({**T256, **C2}),
            J({**R2, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
            J({**PP192, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [J({}), J(R2), J({**R2, "GROUP_M": 32}), J({**R2, **C2}), J(T256)]},
        "fc2": {"problem": FC2, "jobs": [J({}), J(E), J(R2), J(T256), J(PP192), J({**R2, **C2}), J({**R2, "GROUP_M": 1})]},
    },
}


# EPI_BATCH: the staged EXTRA_TMA operand read back to back (was one dependent LDS -> STS chain per word)
B32, B8 = {**E, "EPI_BATCH": 32}, {**E, "EPI_BATCH": 8}
PLANS["batch"] = {
    "timing": {"warmup": 5, "repeats": 30},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            J(E), J(B32), J(B8), J({**B32, "GROUP_M": 32}), J(R2), J({**R2, "GROUP_M": 32}),
            J({"N_STAGES": 4, "EPI_SLOTS": 1}), J({**B32, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 4}),
            J({**B32, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
            J({**R2, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [J({}), J(R2), J({**R2, "GROUP_M": 32}), J({**R2, "L2_PROMO": 256})]},
        "fc2": {"problem": FC2, "jobs": [J(E), J(B8), J(B32), J({**B32, "GROUP_M": 1}), J(R2), J({**R2, "GROUP_M": 1})]},
    },
}


PLANS["confirm"] = {   # the best configs again, each twice in one process (run-to-run spread)
    "timing": {"warmup": 10, "repeats": 100},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [J({"EXTRA_TMA": 1}), J(_B32), J({"EXTRA_TMA": 1}), J(_B32)]},
        "fc1": {"problem": FC1, "jobs": [J({}), J(_G), J({**_G, "GROUP_M": 32}), J({}), J(_G)]},
        "fc2": {"problem": FC2, "jobs": [J({"EXTRA_TMA": 1}), J({**_B32, "GROUP_M": 1}), J(_B32),
                                         J({"EXTRA_TMA": 1}), J({**_B32, "GROUP_M": 1})]},
    },
}


# v3: cluster release without the GPU-scope fence (CLUSTER_RELEASE), bias in the accumulator start (BIAS_ACC),
# GELU in f16x2 (GELU_H2); the 25-trial tuner study's best configs for comparison in the same process
CR = {"CLUSTER_M": 2, "CLUSTER_RELEASE": 1}
PP192 = {"PINGPONG": 1, "BLOCK_M": 128, "BLOCK_N": 192, "N_STAGES": 3, "EXTRA_TMA": 1, "EPI_BATCH": 8}
FC1_TUNED = {"BLOCK_M": 256, "BLOCK_N": 128, "N_STAGES": 3, "L2_PROMO": 256, "EPI_SLOTS": 2}
FC2_TUNED = {"BLOCK_N": 128, "N_STAGES": 5, "PINGPONG": 1, "EXTRA_TMA": 1, "MMA_INFLIGHT": 1}
BH = {"BIAS_ACC": 1, "GELU_H2": 1}
FC1_PP = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3, "BIAS_ACC": 1}          # spill-free only with BIAS_ACC
FC2_PP = {**PP192, "BIAS_ACC": 1}
FC2_B = {**B32, "GROUP_M": 1}
PLANS["v3"] = {
    "timing": {"warmup": 5, "repeats": 40},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            J(B32), J(PP192), J({**B32, **C2}), J({**B32, **CR}), J({**B32, **CR, "MMA_INFLIGHT": 1}),
            J({**B32, **CR, "L2_PROMO": 256}), J({**B32, **CR, "GROUP_M": 32}), J({**PP192, **CR}),
            J({**B32, **CR}), J(B32),
            J({**B32, **CR, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
            J({**PP192, **CR, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True)]},
        "fc1": {"problem": FC1, "jobs": [
            J({}), J({"GELU_F16X2": 1}), J({"BIAS_ACC": 1}), J({"GELU_H2": 1}), J(BH), J(FC1_TUNED),
            J({**FC1_TUNED, **BH}), J({**BH, **CR}), J({**BH, "MMA_INFLIGHT": 1}), J(FC1_PP), J({**FC1_PP, **BH}),
            J({**FC1_PP, **BH, **CR}), J({}), J(BH), J({**FC1_PP, **BH})]},
        "fc2": {"problem": FC2, "jobs": [
            J(FC2_B), J({**FC2_B, "BIAS_ACC": 1}), J(FC2_TUNED), J({**FC2_TUNED, "BIAS_ACC": 1}),
            J({**FC2_B, **CR}), J({**FC2_B, **CR, "BIAS_ACC": 1}), J({**FC2_TUNED, **CR}),
            J(FC2_PP), J({**FC2_PP, **CR}), J(FC2_B), J(FC2_TUNED), J(FC2_PP)]},
    },
}


PLANS["v3_confirm"] = {   # the v3 winners next to the v2 best, each twice in one process
    "timing": {"warmup": 10, "repeats": 100},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            J(B32), J(PP192), J({**B32, **CR}), J({**PP192, **CR}), J(B32), J(PP192), J({**B32, **CR}),
            J({**PP192, **CR})]},
        "fc1": {"problem": FC1, "jobs": [
            J({}), J(BH), J({**FC1_PP, **BH}), J({**FC1_PP, **BH, **CR}), J({**FC1_PP, **BH, "GROUP_M": 1}),
            J({}), J(BH), J({**FC1_PP, **BH}), J({**FC1_PP, **BH, **CR})]},
        "fc2": {"problem": FC2, "jobs": [
            J(FC2_B), J({**FC2_B, "BIAS_ACC": 1}), J({**FC2_B, **CR, "BIAS_ACC": 1}), J({**FC2_TUNED, **CR, "BIAS_ACC": 1}),
            J(FC2_B), J({**FC2_B, "BIAS_ACC": 1}), J({**FC2_B, **CR, "BIAS_ACC": 1})]},
    },
}


# v4: EPI_DIRECT (no staging: operand in the accumulator start, prefetched a tile ahead; 16-byte stores from
# registers) -> 4 stages of 128x256. Interleaved timing: cuBLAS and every config alternate, R rounds, one process.
def JP(cfg, time=True, expect_fail=False, profile=False):
    return {"config": cfg, "time": time, "expect_fail": expect_fail, "profile": profile}


DIR = {"STORE_TMA": 0, "EPI_DIRECT": 1}
CR = {"CLUSTER_M": 2, "CLUSTER_RELEASE": 1}
PE_BEST = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 3, "EXTRA_TMA": 1, "EPI_BATCH": 8}
FC2_BEST = {"EXTRA_TMA": 1, "EPI_BATCH": 32, "GROUP_M": 1, **CR, "BIAS_ACC": 1}
FC1_TUNED = {"BLOCK_M": 64, "BLOCK_N": 256, "N_STAGES": 4, **CR, "GROUP_M": 1, "MMA_INFLIGHT": 1, "PINGPONG": 1,
             "L2_PROMO": 256, "EPI_SLOTS": 2, "BIAS_ACC": 1, "GELU_H2": 1}
PLANS["v4"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_BEST, profile=True),
            JP({"EXTRA_TMA": 1, "EPI_BATCH": 32}),
            JP({**DIR, "N_STAGES": 4}, profile=True),
            JP({**DIR, "N_STAGES": 3}),
            JP({**DIR, "N_STAGES": 4, **CR}),
            JP({**DIR, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 5}),
            JP({**DIR, "BLOCK_M": 256, "BLOCK_N": 128, "N_STAGES": 4}),
            JP({**DIR, "N_STAGES": 4, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
            JP({**DIR, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 5, **CR, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            JP(FC1_TUNED),
            JP({**FC1_TUNED, **DIR, "EPI_SLOTS": 0, "N_STAGES": 5}),
            JP({**DIR, "N_STAGES": 4, "GELU_H2": 1}),
        ]},
        "fc2": {"problem": FC2, "jobs": [
            JP(FC2_BEST, profile=True),
            JP({**DIR, "N_STAGES": 4, "GROUP_M": 1}),
            JP({**DIR, "N_STAGES": 4, "GROUP_M": 1, **CR}, profile=True),
            JP({**DIR, "PINGPONG": 1, "BLOCK_M": 64, "N_STAGES": 5, "GROUP_M": 1, **CR}),
        ]},
    },
}


# v5: the cuBLAS-like tile (nvjet 128x160, 5 stages, 2x1 multicast, cooperative): BLOCK_N=160 with a partial last
# column block (768 = 4 x 160 + 128; FC1 3072 = 19 x 160 + 32), two 64-column staged slabs + a 32-column register tail
T160 = {"BLOCK_N": 160, "N_STAGES": 5, **CR}
PLANS["v5"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 5},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_BEST),
            JP(T160),
            JP({**T160, "EXTRA_TMA": 1, "EPI_BATCH": 8}),
            JP({"BLOCK_N": 160, "N_STAGES": 5, "EXTRA_TMA": 1, "EPI_BATCH": 8}),
            JP({"BLOCK_N": 160, "N_STAGES": 4, "PINGPONG": 1, "EXTRA_TMA": 1, "EPI_BATCH": 8, **CR}),
            JP({**T160, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
            JP({**T160, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            JP(FC1_TUNED),
            JP({**T160, "BIAS_ACC": 1, "GELU_H2": 1}),
            JP({"BLOCK_N": 160, "N_STAGES": 4, "PINGPONG": 1, "BIAS_ACC": 1, "GELU_H2": 1, **CR}),
        ]},
        "fc2": {"problem": FC2, "jobs": [
            JP(FC2_BEST),
            JP({**T160, "BIAS_ACC": 1, "EXTRA_TMA": 1, "EPI_BATCH": 8, "GROUP_M": 1}),
            JP({**T160, "BIAS_ACC": 1, "GROUP_M": 1}),
        ]},
    },
}


# v5b: where the cooperative 128x160 loses (patch_embed only): the same 5-stage cooperative ring at 128x128 (no
# partial block, no register tail) and 128x256 (3 stages), ping-pong 128x160 at 3 and 4 stages
E8 = {"EXTRA_TMA": 1, "EPI_BATCH": 8}
PLANS["v5b"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_BEST),
            JP({**T160, **E8}),
            JP({"BLOCK_N": 128, "N_STAGES": 5, **CR, **E8}),
            JP({"EXTRA_TMA": 1, "EPI_BATCH": 32, **CR}),
            JP({"BLOCK_N": 160, "N_STAGES": 4, "PINGPONG": 1, **E8, **CR}),
            JP({"BLOCK_N": 160, "N_STAGES": 3, "PINGPONG": 1, **E8, **CR}),
            JP({"BLOCK_N": 160, "N_STAGES": 4, "PINGPONG": 1, **E8}),
        ]},
    },
}


# v6: MMA_INFLIGHT=2 (split release: the next k-block's first k32 step is queued before the previous stage is
# released, so the tensor pipe does not drain once per k-block and no stage is held a whole k-block late)
PE_CR = {**PE_BEST, **CR}
PE128 = {"PINGPONG": 1, "BLOCK_N": 128, "N_STAGES": 5, "EXTRA_TMA": 1, "EPI_BATCH": 8, "GROUP_M": 1}
FC1_PP192 = {**FC1_PP, **BH, **CR}
FC2_RT = {"BLOCK_N": 192, "N_STAGES": 4, "GROUP_M": 1, "MMA_INFLIGHT": 1, "EXTRA_TMA": 1, "EPI_BATCH": 8,
          "CLUSTER_RELEASE": 1, "BIAS_ACC": 1}
PLANS["v6"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_CR), JP({**PE_CR, "MMA_INFLIGHT": 1}), JP({**PE_CR, "MMA_INFLIGHT": 2}),
            JP({**PE_BEST, "MMA_INFLIGHT": 2}),
            JP({**PE128, "MMA_INFLIGHT": 1}), JP({**PE128, "MMA_INFLIGHT": 2}),
            JP({**PE_CR, "MMA_INFLIGHT": 2, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            JP(FC1_TUNED), JP({**FC1_TUNED, "MMA_INFLIGHT": 2}),
            JP(FC1_PP192), JP({**FC1_PP192, "MMA_INFLIGHT": 2}),
        ]},
        "fc2": {"problem": FC2, "jobs": [
            JP(FC2_BEST), JP({**FC2_BEST, "MMA_INFLIGHT": 2}),
            JP(FC2_RT), JP({**FC2_RT, "MMA_INFLIGHT": 2}),
        ]},
    },
}


# v7: SHARED_STAGING (ping-pong: one staging tile for both consumers, stored and refilled by a producer thread)
# -> a 4th stage for 128x192 ping-pong (6th for 128x128), with MMA_INFLIGHT=2 from v6
M2 = {"MMA_INFLIGHT": 2}
SS = {"SHARED_STAGING": 1, **M2}
PE_M2 = {**PE_BEST, **M2}
FC2_PP4 = {"PINGPONG": 1, "BLOCK_N": 192, "N_STAGES": 4, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BIAS_ACC": 1, "GROUP_M": 1, **SS}
PLANS["v7"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_M2), JP({**PE_M2, **SS}), JP({**PE_M2, **SS, "N_STAGES": 4}), JP({**PE_M2, **SS, "N_STAGES": 4, **CR}),
            JP({**PE128, **SS, "N_STAGES": 6}),
            JP({"PINGPONG": 1, "BLOCK_N": 160, "N_STAGES": 5, **E8, **SS}),
            JP({**PE_M2, **SS, "N_STAGES": 4, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            JP(FC1_TUNED), JP({**FC1_PP192, **M2}), JP({**FC1_PP192, **SS, "N_STAGES": 4}),
            JP({**FC1_PP192, **SS, "N_STAGES": 4, "CLUSTER_M": 1}),
        ]},
        "fc2": {"problem": FC2, "jobs": [
            JP(FC2_RT), JP({**FC2_BEST, **M2}), JP(FC2_PP4), JP({**FC2_PP4, **CR}), JP({**FC2_PP4, "N_STAGES": 3}),
        ]},
    },
}


# v8: PREFETCH_A (the producer prefetches its next tile's A rows into L2 a tile ahead: the FULL-barrier waits of
# the v4 profile are first touches of A row blocks in HBM); one discarded warm-up round before the timed rounds
PA = {"PREFETCH_A": 1}
FC1_SS4 = {**FC1_PP192, **SS, "N_STAGES": 4, "CLUSTER_M": 1}
PLANS["v8"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7, "warm_rounds": 1},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_M2), JP({**PE_M2, **PA}), JP({**PE_M2, **PA, **CR}), JP({**PE_M2, **SS, "N_STAGES": 4, **PA}),
            JP({**PE_M2, **PA, "GROUP_M": 1}),
            JP({**PE_M2, **PA, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            JP(FC1_SS4), JP({**FC1_SS4, **PA}), JP({**FC1_SS4, **PA, "GROUP_M": 1}), JP({**FC1_TUNED, **PA}),
        ]},
        "fc2": {"problem": FC2, "jobs": [
            JP(FC2_PP4), JP({**FC2_PP4, **PA}), JP({**FC2_PP4, **PA, "GROUP_M": 8}),
        ]},
    },
}


# v9: PREFETCH_A only by the CTA whose next tile first visits the A row block (one prefetch per row block)
PLANS["v9"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7, "warm_rounds": 1},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_M2), JP({**PE_M2, **PA}), JP({**PE_M2, **SS, "N_STAGES": 4, **PA}),
            JP({**PE_M2, **PA, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True),
        ]},
        "fc1": {"problem": FC1, "jobs": [
            JP(FC1_SS4), JP({**FC1_SS4, **PA}), JP({**FC1_SS4, "GROUP_M": 1}), JP({**FC1_SS4, "MMA_INFLIGHT": 1}),
        ]},
        "fc2": {"problem": FC2, "jobs": [JP(FC2_PP4), JP({**FC2_PP4, **PA})]},
    },
}


# v10: the tuner's winners (40-trial studies over the v9 space, started from the hand-found configs; H200,
# .carry/shapes_v10.db) next to the hand-found bests, 9 interleaved rounds after a warm-up round
PE_TUNED = {**PE_M2, "SHARED_STAGING": 1, **CR, "L2_PROMO": 256}
FC1_TUNED10 = {**FC1_PP192, "CLUSTER_M": 1, "GROUP_M": 1, "MMA_INFLIGHT": 1, "SHARED_STAGING": 1}
PLANS["v10"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 9, "warm_rounds": 1},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [JP(PE_M2), JP(PE_TUNED), JP({**PE_M2, "L2_PROMO": 256})]},
        "fc1": {"problem": FC1, "jobs": [JP(FC1_SS4), JP(FC1_TUNED10), JP({**FC1_TUNED10, "MMA_INFLIGHT": 2})]},
        "fc2": {"problem": FC2, "jobs": [JP(FC2_PP4), JP({**FC2_PP4, "L2_PROMO": 256})]},
    },
}


# final: the best config of each shape (v10), checked (exact small-integer + random inputs, the off-by-one
# variant must be caught) and timed against cuBLAS in 11 interleaved rounds after a warm-up round
FC1_BEST = {**FC1_TUNED10, "MMA_INFLIGHT": 2}
PLANS["final"] = {
    "timing": {"warmup": 3, "repeats": 30, "interleave": 11, "warm_rounds": 1},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_M2), JP({**PE_M2, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True)]},
        "fc1": {"problem": FC1, "jobs": [JP(FC1_BEST)]},
        "fc2": {"problem": FC2, "jobs": [JP(FC2_PP4)]},
    },
}


# v11: FC2 only (the shape at the edge of its target): the ping-pong 4-stage best against raster, staging-read
# batch, the cooperative 128x256 tile (less shared-memory traffic per FLOP) with a 4-stage ring, ping-pong 128x160
PLANS["v11"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7, "warm_rounds": 1},
    "problems": {
        "fc2": {"problem": FC2, "jobs": [
            JP(FC2_PP4), JP({**FC2_PP4, "GROUP_M": 8}), JP({**FC2_PP4, "EPI_BATCH": 0}),
            JP({"BLOCK_N": 256, "N_STAGES": 4, "EPI_SLOTS": 2, "BIAS_ACC": 1, "GROUP_M": 1, **M2}),
            JP({"BLOCK_N": 256, "N_STAGES": 3, "EXTRA_TMA": 1, "EPI_BATCH": 32, "BIAS_ACC": 1, "GROUP_M": 1, **M2}),
            JP({"PINGPONG": 1, "BLOCK_N": 160, "N_STAGES": 5, "EXTRA_TMA": 1, "EPI_BATCH": 8, "BIAS_ACC": 1, "GROUP_M": 1,
                **SS}),
        ]},
    },
}


# v12: SPLIT_K32 (MMA_INFLIGHT=2: two k32 steps queued before the split release, not one); the three best configs are
# also the ncu targets (bench/profile.py) for where the time goes now
PLANS["v12"] = {
    "timing": {"warmup": 3, "repeats": 20, "interleave": 7, "warm_rounds": 1},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [JP(PE_M2, profile=True), JP({**PE_M2, "SPLIT_K32": 2})]},
        "fc1": {"problem": FC1, "jobs": [JP(FC1_BEST, profile=True), JP({**FC1_BEST, "SPLIT_K32": 2})]},
        "fc2": {"problem": FC2, "jobs": [JP(FC2_PP4, profile=True), JP({**FC2_PP4, "SPLIT_K32": 2}),
                                         JP({**FC2_PP4, "SPLIT_K32": 3})]},
    },
}


# final_long: the final configs with 60 launches per timing (60 ms of patch_embed, ~250 ms of FC1 / FC2 per reading) so
# each kernel runs into its own power-limited clock; nvidia-smi logs SM clock and power meanwhile (run_device.sh)
PLANS["final_long"] = {**PLANS["final"], "timing": {"warmup": 5, "repeats": 60, "interleave": 7, "warm_rounds": 1}}


# final_alt: the final configs, cuBLAS and ours launched alternately (200 pairs, each launch timed by its own events):
# both launches of a pair run under the same power-capped clock (see harness.alternated)
PLANS["final_alt"] = {**PLANS["final"], "timing": {"warmup": 10, "alternate": 200}}


# v13: patch_embed variants, paired (alternate) timing: multicast / L2 promotion / the shared staging's 4th stage cut
# L2 traffic, which may matter more under the 700 W cap than in whole-window rounds
PLANS["v13"] = {
    "timing": {"warmup": 10, "alternate": 200},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_M2), JP({**PE_M2, **CR}), JP(PE_TUNED), JP({**PE_M2, **SS, "N_STAGES": 4}),
            JP({**PE_M2, **SS, "N_STAGES": 4, **CR}), JP({**PE_M2, "GROUP_M": 1}), JP({**PE_M2, "L2_PROMO": 256}),
            JP({**PE128, "MMA_INFLIGHT": 2}), JP({**PE_M2, "EPI_BATCH": 4}),
        ]},
    },
}


# final_alt2: patch_embed with the shared staging's 4th stage (+ L2 promotion), the v13 paired-timing winners, next to
# the final configs of every shape; paired timing, run twice in one device call
PE_SS4 = {**PE_M2, **SS, "N_STAGES": 4}
PLANS["final_alt2"] = {
    "timing": {"warmup": 10, "alternate": 200},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_M2), JP(PE_SS4), JP({**PE_SS4, "L2_PROMO": 256}), JP({**PE_SS4, **CR, "L2_PROMO": 256}),
            JP({**PE_SS4, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True)]},
        "fc1": {"problem": FC1, "jobs": [JP(FC1_BEST), JP({**FC1_BEST, "L2_PROMO": 256})]},
        "fc2": {"problem": FC2, "jobs": [JP(FC2_PP4), JP({**FC2_PP4, "L2_PROMO": 256})]},
    },
}


# final_burst: the same configs in the burst regime: 10 s idle before each config, then 3 warm-up and 10 timed pairs
# (~20-100 ms of load: the GPU is still at its boost clock, below the 700 W cap)
PLANS["final_burst"] = {"timing": {"warmup": 3, "alternate": 10, "idle_s": 10},
                        "problems": {k: {**v, "jobs": [j for j in v["jobs"] if j["time"]][:2] if k == "patch_embed" else v["jobs"][:1]}
                                     for k, v in PLANS["final_alt2"]["problems"].items()}}


# diag_*: where patch_embed's time goes at boost clock. DIAG=1 records the SM clock each launch really ran at
# (CTA 0's clock64 over the global timer), DIAG=2 leaves the wgmmas out (the memory pipeline alone); multicast of W
# across 2 / 4 row blocks (CLUSTER_M) halves / quarters W's L2 -> SM traffic, which is most of it at N = K = 768
D1, D2 = {"DIAG": 1}, {"DIAG": 2}
DIAG_JOBS = [JP({**PE_SS4, **D1}), JP({**PE_SS4, **D2}), JP({**PE_SS4, **CR, **D1}),
             JP({**PE_SS4, "CLUSTER_M": 4, "CLUSTER_RELEASE": 1, **D1}), JP({**PE_M2, **D1})]
PLANS["diag_burst"] = {"timing": {"warmup": 3, "alternate": 10, "idle_s": 10},
                       "problems": {"patch_embed": {"problem": PATCH, "jobs": DIAG_JOBS}}}
PLANS["diag_sustained"] = {"timing": {"warmup": 10, "alternate": 60},
                           "problems": {"patch_embed": {"problem": PATCH, "jobs": DIAG_JOBS}}}


# cm2_*: W multicast (CLUSTER_M=2) on the final configs and its neighbours. The DIAG runs showed every config
# power-limited (patch_embed at 1.40-1.47 GHz even after 10 s idle) with time ~ 1 / (SMs x clock): multicast
# halves W's L2 -> SM traffic, lowers the power and raises the clock
PE_CM2 = {**PE_SS4, **CR}
CM2_JOBS = {
    "patch_embed": [JP({**PE_CM2, **D1}), JP({**PE_SS4, **D1}), JP({**PE_CM2, "GROUP_M": 4, **D1}),
                    JP({**PE_CM2, "GROUP_M": 16, **D1}), JP({**PE_CM2, "EXTRA_TMA": 0, "EPI_BATCH": 0, **D1}),
                    JP({**PE_CM2, "SNAKE_ORDER": 1, **D1}), JP({**PE_CM2, "L2_PROMO": 256, **D1}),
                    JP({**PE_CM2, "N_STAGES": 3, **D1})],
    "fc1": [JP({**FC1_BEST, **D1}), JP({**FC1_BEST, **CR, **D1})],
    "fc2": [JP({**FC2_PP4, **D1}), JP({**FC2_PP4, **CR, **D1})],
}
_PROBS = {"patch_embed": PATCH, "fc1": FC1, "fc2": FC2}
PLANS["cm2_burst"] = {"timing": {"warmup": 3, "alternate": 10, "idle_s": 10},
                      "problems": {k: {"problem": _PROBS[k], "jobs": v} for k, v in CM2_JOBS.items()}}
PLANS["cm2_sustained"] = {"timing": {"warmup": 10, "alternate": 100},
                          "problems": {k: {"problem": _PROBS[k], "jobs": v} for k, v in CM2_JOBS.items()}}


# final3: patch_embed with W multicast (CLUSTER_M=2, the cm2 winner) next to the final configs of every shape; paired
# timing, sustained (run twice in one device call) and burst (with the SM clock each launch ran at)
PLANS["final3"] = {
    "timing": {"warmup": 10, "alternate": 200},
    "problems": {
        "patch_embed": {"problem": PATCH, "jobs": [
            JP(PE_CM2), JP(PE_SS4), JP({**PE_CM2, "BUG_POS_OFF_BY_ONE": 1}, time=False, expect_fail=True)]},
        "fc1": {"problem": FC1, "jobs": [JP(FC1_BEST)]},
        "fc2": {"problem": FC2, "jobs": [JP(FC2_PP4)]},
    },
}
PLANS["final3_burst"] = {"timing": {"warmup": 3, "alternate": 10, "idle_s": 10},
                         "problems": {"patch_embed": {"problem": PATCH, "jobs": [JP({**PE_CM2, **D1}), JP({**PE_SS4, **D1})]}}}


def main(name):
    from harness import build, SPEC
    plan = PLANS[name]
    for p in plan["problems"].values():
        for job in p["jobs"]:
            reason = SPEC.check(job["config"], p["problem"])
            if reason:
                print("INVALID", job["config"], reason)
                continue
            _, stats = build(job["config"], p["problem"])
            print(job["config"], stats)
    out = ROOT / "bench" / f"plan_{name}.json"
    out.write_text(json.dumps(plan, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1])
