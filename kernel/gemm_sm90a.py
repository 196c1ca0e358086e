"""Spec of kernel/gemm_sm90a.cu: Hopper FP8 GEMM with fused epilogues (tuner contract).

C[M,N] (BF16) = A[M,K] (E4M3) x W[N,K]^T (E4M3), FP32 accumulate, then EPILOGUE:
  BIAS_POS       + combined[row % SEQ_LEN, col]         (combined = bias + pos_embed, BF16)
  BIAS_GELU      gelu_tanh(acc + bias[col])
  BIAS_RESIDUAL  acc + bias[col] + residual[row, col]

The constraint model below mirrors the kernel's derived constants one for one
(``SMEM_BYTES`` etc.); tests compile with ``-DEXPECT_SMEM_BYTES=<model>`` so any
disagreement is a compile error, not a silent wrong launch. :data:`RULES` lists what a
config must meet, in the order ``check()`` reports the first rule it breaks.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tuner.contract.numerics import E4M3_TO_F32, bf16_to_f32, f32_to_bf16, fp8_to_f32
from tuner.contract.rules import Names, Rule, first_violation, one_of
from tuner.spec import (
    EXPECTED,
    Buffer,
    DeviceInfo,
    KernelSpec,
    Launch,
    OutputSpec,
    RandomTable,
    ReferenceKernel,
    Scalar,
    TensorMap,
)

EPILOGUES = ("BIAS_POS", "BIAS_GELU", "BIAS_RESIDUAL")
BLOCK_K = 128               # one 128-byte swizzle atom of FP8; fixed by the kernel
SMEM_ALIGN = 1024
EPI_SLAB_COLS = 64          # BF16 columns per 128-byte swizzled staging slab / TMA store box
WGMMA_N = (64, 96, 128, 160, 192, 256)   # wgmma wrappers the kernel carries
ACC_REG_HEADROOM = 40       # registers a consumer needs beyond its accumulators (ptxas-checked)
COMBINED_EXT_PAD = 256      # combined_ext rows = SEQ_LEN + this (>= any WG_M)
REGFILE = 65536
MAX_UNROLLED_K_ITERS = 8   # k-blocks UNROLL_K / PROMOTE_SPLIT unroll at most (see PROMOTE_SPLIT's rule)

#: the on/off switches among the defines
FLAGS = ("PINGPONG", "STORE_TMA", "EXTRA_TMA", "SNAKE_ORDER", "BUG_POS_OFF_BY_ONE", "GELU_F16X2", "CLUSTER_RELEASE",
         "BIAS_ACC", "GELU_H2", "EPI_DIRECT", "SHARED_STAGING", "PREFETCH_A", "PROMOTE_SPLIT")
_DEFAULT_DEVICE = DeviceInfo()
#: constants the rules' messages name
_RULE_CONSTANTS = {"BLOCK_K": BLOCK_K, "EPILOGUES": EPILOGUES, "WGMMA_N": WGMMA_N, "EPI_SLAB_COLS": EPI_SLAB_COLS,
                   "ACC_REG_HEADROOM": ACC_REG_HEADROOM, "REGFILE": REGFILE,
                   "MAX_UNROLLED_K_ITERS": MAX_UNROLLED_K_ITERS}

#: what a config must meet, in the order ``check()`` reports the first one it breaks
RULES = (
    # -- names and values
    Rule(lambda v: not v.unknown, "unknown parameter(s) {unknown}"),
    one_of("EPILOGUE", EPILOGUES, "EPILOGUE {EPILOGUE} not one of {EPILOGUES}"),
    *(one_of(flag, (0, 1), f"{flag} must be 0 or 1") for flag in FLAGS),
    one_of("DIAG", (0, 1, 2), "DIAG must be 0, 1 (record the SM clock) or 2 (also leave the wgmmas out)"),
    one_of("MMA_INFLIGHT", (0, 1, 2),
           "MMA_INFLIGHT must be 0 (drain each k-block), 1 (release one k-block late) or 2 (split release)"),
    one_of("SPLIT_K32", (1, 2, 3),
           f"SPLIT_K32 must be 1..{BLOCK_K // 32 - 1} (k32 steps queued before the split release)"),
    # -- tile shape
    Rule(lambda v: v.K % BLOCK_K == 0, "K={K} not a multiple of BLOCK_K={BLOCK_K}"),
    one_of("BLOCK_N", WGMMA_N, "BLOCK_N={BLOCK_N} not a wgmma N the kernel carries {WGMMA_N}"),
    Rule(lambda v: v.N % v.BLOCK_N == 0 or (v.STORE_TMA and not v.EPI_SLOTS and not v.EPI_DIRECT),
         "N={N} not a multiple of BLOCK_N={BLOCK_N}: a partial last column block needs STORE_TMA=1, "
         "EPI_SLOTS=0, EPI_DIRECT=0 (TMA clips the store; fragment stores are not masked)"),
    Rule(lambda v: v.N % v.BLOCK_N == 0 or v.N % 8 == 0,
         "partial column block: N={N} must be a multiple of 8 (masks per 8-column group)"),
    one_of("NUM_CONSUMERS", (1, 2), "NUM_CONSUMERS must be 1 or 2"),
    Rule(lambda v: not (v.PINGPONG and v.NUM_CONSUMERS == 1),
         "PINGPONG=1 with one consumer is the same kernel as PINGPONG=0"),
    Rule(lambda v: 0 < v.BLOCK_M <= 256 and v.BLOCK_M % 64 == 0,
         "BLOCK_M={BLOCK_M}: multiple of 64, at most 256 (TMA box limit)"),
    Rule(lambda v: v.M % v.BLOCK_M == 0, "M={M} not a multiple of BLOCK_M={BLOCK_M}"),
    Rule(lambda v: v.wg_m >= 64 and v.wg_m % 64 == 0, "rows per consumer {wg_m} must be a multiple of 64 (wgmma M)"),
    Rule(lambda v: v.N_STAGES >= 2, "N_STAGES must be >= 2"),
    Rule(lambda v: not v.PINGPONG or v.N_STAGES <= v.k_iters,
         "PINGPONG needs N_STAGES <= K/BLOCK_K = {k_iters} (mbarrier parity)"),
    # -- clusters. The kernel builds CLUSTER_M=4; the model leaves it out: 30 clusters of 4 fit on an
    # H200 (120 of 132 SMs) and it measured no faster than CLUSTER_M=1 (docs/experiments/logs/diag_*_h200.log)
    Rule(lambda v: v.CLUSTER_M != 4, "CLUSTER_M=4 leaves SMs idle (30 clusters of 4 fit on an H200): use 1 or 2"),
    one_of("CLUSTER_M", (1, 2), "CLUSTER_M must be 1 or 2"),
    Rule(lambda v: v.tiles_m % v.CLUSTER_M == 0, "{tiles_m} row blocks do not pair up in clusters of {CLUSTER_M}"),
    Rule(lambda v: v.w_box_rows % 8 == 0, "W slice of {w_box_rows} rows per cluster CTA is not whole 8-row groups"),
    Rule(lambda v: v.GROUP_M >= 1, "GROUP_M must be >= 1"),
    # -- registers
    Rule(lambda v: all(24 <= regs <= 256 and regs % 8 == 0 for regs in (v.PRODUCER_REGS, v.CONSUMER_REGS)),
         "setmaxnreg values must be multiples of 8 in [24, 256]"),
    Rule(lambda v: v.regfile <= REGFILE, "registers after setmaxnreg {regfile} > {REGFILE}"),
    Rule(lambda v: v.acc_regs <= v.CONSUMER_REGS - ACC_REG_HEADROOM,
         "{acc_regs} accumulator registers per thread leave less than "
         "{ACC_REG_HEADROOM} of CONSUMER_REGS={CONSUMER_REGS} (ptxas spills)"),
    # ptxas (sweep of every accepted 192-accumulator config, 2026-11-21): with 192 accumulators the
    # epilogue's bias words and temporaries do not fit for BIAS_GELU / BIAS_RESIDUAL (spills of 8-512 B,
    # e.g. ping-pong 128x192 GELU 428 B) unless the bias is folded into the accumulator start (BIAS_ACC=1);
    # one patch_embed path (1 consumer, 128x192, multicast, MMA_INFLIGHT=1, fragment stores) spills 56 B.
    Rule(lambda v: v.acc_regs < 192 or v.EPILOGUE == "BIAS_POS" or v.BIAS_ACC or v.EPI_DIRECT,
         "{acc_regs} accumulators + the {EPILOGUE} epilogue's bias words spill (ptxas): "
         "needs BIAS_ACC=1 (bias folded into the accumulator start)"),
    Rule(lambda v: not (v.acc_regs >= 192 and v.EPILOGUE == "BIAS_POS" and v.NUM_CONSUMERS == 1 and v.CLUSTER_M == 2
                        and v.MMA_INFLIGHT and v.STORE_TMA and not v.EXTRA_TMA),
         "192 accumulators, 1 consumer, CLUSTER_M=2, MMA_INFLIGHT>0, TMA-store staging: ptxas spills 56 B"),
    # ptxas sweep of the split-release / shared-staging configs (2026-11-21): with the operand read from
    # global per word in the epilogue (STORE_TMA=1, EXTRA_TMA=0), 160 accumulators + the 32-column
    # register tail spill 16-48 B, and 192 accumulators of a 128-row consumer tile with MMA_INFLIGHT=2 36 B
    Rule(lambda v: not (v.operand_from_global and v.acc_regs >= 160 and v.BLOCK_N % EPI_SLAB_COLS),
         "{acc_regs} accumulators + the 32-column register tail with the {EPILOGUE} operand read from "
         "global spill (ptxas): needs EXTRA_TMA=1"),
    Rule(lambda v: not (v.operand_from_global and v.acc_regs >= 192 and not v.PINGPONG and v.MMA_INFLIGHT == 2),
         "192 accumulators, MMA_INFLIGHT=2, operand read from global in the epilogue: ptxas spills 36 B"),
    # -- precision: promotion keeps a second, FP32 accumulator beside the wgmma one. ptxas (every valid config of
    # the three precise studies, 2026-11-26): 96 accumulators promoted fit CONSUMER_REGS=232, 128 spill 672-1004 B;
    # EPI_DIRECT's 48 prefetched words beside 2 x 96 spill 156 B, EPI_SLOTS' epilogue-time words do not spill
    Rule(lambda v: 0 <= v.PROMOTE_EVERY <= v.k_iters,
         "PROMOTE_EVERY={PROMOTE_EVERY}: 0 (no promotion) or k-blocks per promotion window, at most K/BLOCK_K={k_iters}"),
    Rule(lambda v: not v.PROMOTE_EVERY or 2 * v.acc_regs + v.held_regs <= v.CONSUMER_REGS - ACC_REG_HEADROOM,
         "PROMOTE_EVERY: 2 x {acc_regs} accumulators (wgmma + promoted FP32) + {held_regs} held operand registers "
         "leave less than {ACC_REG_HEADROOM} of CONSUMER_REGS={CONSUMER_REGS} (ptxas spills): "
         "a smaller consumer tile (BLOCK_N, or 64 rows per consumer)"),
    Rule(lambda v: not v.PROMOTE_SPLIT or (v.PROMOTE_EVERY and v.MMA_INFLIGHT == 1 and v.BLOCK_N // 2 in WGMMA_N),
         "PROMOTE_SPLIT=1 (promote one column half while the other's wgmmas run) needs PROMOTE_EVERY > 0, "
         "MMA_INFLIGHT=1 and BLOCK_N 128, 192 or 256 (halves of a carried wgmma N)"),
    # its k-blocks are unrolled (ptxas serializes every wgmma when one group stays in flight across a loop's back
    # edge while the other half's registers are read); 24 unrolled k-blocks spill 8-3,300 B (ptxas, FC2)
    Rule(lambda v: not v.PROMOTE_SPLIT or v.k_iters <= MAX_UNROLLED_K_ITERS,
         "PROMOTE_SPLIT=1 unrolls the K loop: K/BLOCK_K={k_iters} k-blocks > {MAX_UNROLLED_K_ITERS}"),
    Rule(lambda v: 0 <= v.UNROLL_K <= MAX_UNROLLED_K_ITERS and (not v.UNROLL_K or v.k_iters % v.UNROLL_K == 0),
         "UNROLL_K={UNROLL_K}: 0 (the compiler's choice) or k-blocks unrolled together, at most "
         "{MAX_UNROLLED_K_ITERS}, dividing K/BLOCK_K={k_iters}"),
    Rule(lambda v: not (v.UNROLL_K and v.PROMOTE_SPLIT),
         "UNROLL_K={UNROLL_K} with PROMOTE_SPLIT=1: the split promotion unrolls the K loop whole already (UNROLL_K=0)"),
    # -- epilogue staging
    Rule(lambda v: not v.STORE_TMA or v.BLOCK_N % EPI_SLAB_COLS in (0, 32),
         "STORE_TMA=1 needs BLOCK_N % {EPI_SLAB_COLS} in (0, 32) (store boxes + a 32-column register tail)"),
    Rule(lambda v: not (v.STORE_TMA and v.BLOCK_N % EPI_SLAB_COLS and v.BLOCK_N < 2 * EPI_SLAB_COLS),
         "STORE_TMA=1 with BLOCK_N={BLOCK_N}: a third of the columns would take the 32-column register tail "
         "(kept out of the space; the tail is meant for BLOCK_N=160)"),
    Rule(lambda v: not v.EXTRA_TMA or v.STORE_TMA,
         "EXTRA_TMA=1 needs STORE_TMA=1 (the operand lands in the staging tile)"),
    Rule(lambda v: not v.EXTRA_TMA or v.EPILOGUE != "BIAS_GELU", "EXTRA_TMA has no operand to load for BIAS_GELU"),
    Rule(lambda v: v.EPILOGUE != "BIAS_POS" or v.wg_m <= COMBINED_EXT_PAD, "combined_ext too short for WG_M"),
    Rule(lambda v: not v.SHARED_STAGING or (v.PINGPONG and v.STORE_TMA and not v.EPI_SLOTS and not v.EPI_DIRECT),
         "SHARED_STAGING=1 (one staging tile for the two ping-pong consumers, stored by a producer thread) "
         "needs PINGPONG=1, STORE_TMA=1, EPI_SLOTS=0, EPI_DIRECT=0"),
    Rule(lambda v: not v.EPI_DIRECT or not (v.STORE_TMA or v.EXTRA_TMA or v.EPI_SLOTS),
         "EPI_DIRECT=1 (no staging: operand in the accumulator start, 16-byte stores) "
         "needs STORE_TMA=0, EXTRA_TMA=0, EPI_SLOTS=0"),
    Rule(lambda v: (not v.EPI_DIRECT or v.EPILOGUE == "BIAS_GELU"
                    or v.acc_regs + v.direct_held_regs <= v.CONSUMER_REGS - ACC_REG_HEADROOM),
         "EPI_DIRECT: {acc_regs} accumulators + {direct_held_regs} prefetched operand registers leave "
         "less than {ACC_REG_HEADROOM} of CONSUMER_REGS={CONSUMER_REGS} (ptxas spills)"),
    one_of("EPI_SLOTS", (0, 1, 2, 3, 4), "EPI_SLOTS must be 0..4"),
    Rule(lambda v: not v.EPI_SLOTS or (v.STORE_TMA and not v.EXTRA_TMA),
         "EPI_SLOTS > 0 (staging ring) needs STORE_TMA=1 and EXTRA_TMA=0"),
    Rule(lambda v: not v.EPI_SLOTS or v.acc_regs + v.ring_held_regs <= v.CONSUMER_REGS - ACC_REG_HEADROOM,
         "EPI_SLOTS: {acc_regs} accumulators + {ring_held_regs} prefetched operand registers leave "
         "less than {ACC_REG_HEADROOM} of CONSUMER_REGS={CONSUMER_REGS} (ptxas spills)"),
    Rule(lambda v: not v.EPI_SLOTS or v.BLOCK_N % EPI_SLAB_COLS == 0,
         "EPI_SLOTS > 0 needs BLOCK_N % {EPI_SLAB_COLS} == 0"),
    Rule(lambda v: v.EPI_SLOTS <= v.BLOCK_N // EPI_SLAB_COLS,
         "EPI_SLOTS={EPI_SLOTS} > BLOCK_N/{EPI_SLAB_COLS} slabs of a tile"),
    # -- epilogue math
    Rule(lambda v: not v.GELU_F16X2 or v.EPILOGUE == "BIAS_GELU", "GELU_F16X2 applies to EPILOGUE=BIAS_GELU only"),
    Rule(lambda v: not v.BIAS_ACC or v.EPILOGUE != "BIAS_POS",
         "BIAS_ACC folds bias[col] into the accumulator: BIAS_GELU / BIAS_RESIDUAL only"),
    Rule(lambda v: not v.GELU_H2 or v.EPILOGUE == "BIAS_GELU", "GELU_H2 applies to EPILOGUE=BIAS_GELU only"),
    Rule(lambda v: not (v.GELU_H2 and v.GELU_F16X2), "GELU_H2 and GELU_F16X2 are two forms of the same GELU: pick one"),
    one_of("EPI_BATCH", (0, 4, 8, 16, 32), "EPI_BATCH must be 0, 4, 8, 16 or 32"),
    Rule(lambda v: not v.EPI_BATCH or v.EXTRA_TMA,
         "EPI_BATCH reads the staged EXTRA_TMA operand ahead: needs EXTRA_TMA=1"),
    Rule(lambda v: not v.EPI_BATCH or v.staged_groups % v.EPI_BATCH == 0,
         "EPI_BATCH={EPI_BATCH} does not divide the {staged_groups} staged column groups of a fragment row"),
    one_of("L2_PROMO", (0, 64, 128, 256), "L2_PROMO must be 0, 64, 128 or 256"),
    # -- resources
    Rule(lambda v: v.smem_bytes <= v.max_smem, "shared memory {smem_bytes} B > {max_smem} B"),
    Rule(lambda v: v.total_tiles >= 1, "no tiles"),
)


class Spec(KernelSpec):
    name = "gemm_sm90a"
    source = "gemm_sm90a.cu"
    kernel_name = "gemm_sm90a"
    archs = ("sm_90a",)
    params = {
        # tier 1
        "BLOCK_M": 128,
        "BLOCK_N": 256,
        "N_STAGES": 3,
        "NUM_CONSUMERS": 2,
        "CLUSTER_M": 1,
        "GROUP_M": 8,
        "MMA_INFLIGHT": 0,
        "SPLIT_K32": 1,
        "CONSUMER_REGS": 232,
        "PRODUCER_REGS": 40,
        # tier 2
        "PINGPONG": 0,
        "STORE_TMA": 1,
        "EXTRA_TMA": 0,
        "SNAKE_ORDER": 0,
        "L2_PROMO": 0,
        "EPI_SLOTS": 0,
        "EPI_BATCH": 0,
        "GELU_F16X2": 0,
        "CLUSTER_RELEASE": 0,
        "BIAS_ACC": 0,
        "GELU_H2": 0,
        "EPI_DIRECT": 0,
        "SHARED_STAGING": 0,
        "PREFETCH_A": 0,
        "PROMOTE_EVERY": 0,
        "PROMOTE_SPLIT": 0,
        "UNROLL_K": 0,
        # test hook and benchmark diagnostics (never in a study's space)
        "BUG_POS_OFF_BY_ONE": 0,
        "DIAG": 0,
    }
    problem_keys = ("M", "N", "K", "EPILOGUE", "SEQ_LEN")
    compile_options = ("-std=c++17",)
    rtol = 2e-2
    atol = 2e-2

    # -- helpers ------------------------------------------------------------------------
    def _ints(self, config) -> dict[str, int]:
        """Every define, ``config`` over the defaults, as the integer the kernel sees."""
        return {key: int(config.get(key, default)) for key, default in self.params.items()}

    @staticmethod
    def _prob(problem):
        M, N, K = int(problem["M"]), int(problem["N"]), int(problem["K"])
        epi = str(problem.get("EPILOGUE", "BIAS_POS"))
        seq = int(problem.get("SEQ_LEN", 196))
        return M, N, K, epi, seq

    # -- constraint model ---------------------------------------------------------------
    def derive(self, config, problem):
        M, N, K, epi, seq = self._prob(problem)
        return self._sizes(self._ints(config), M, N, K, epi)

    @staticmethod
    def _sizes(c, M: int, N: int, K: int, epi: str) -> dict[str, int]:
        bm, bn, st, nc = c["BLOCK_M"], c["BLOCK_N"], c["N_STAGES"], c["NUM_CONSUMERS"]
        pp, store_tma, extra_tma, cm = c["PINGPONG"], c["STORE_TMA"], c["EXTRA_TMA"], c["CLUSTER_M"]
        wg_m = bm if pp else (bm // nc if nc else 0)
        stage_bytes = (bm + bn) * BLOCK_K
        slots = c["EPI_SLOTS"]
        # EPI_SLOTS=R > 0: a ring of R 64-column slabs per consumer instead of the whole tile
        # whole tile: the whole 64-column slabs only (BLOCK_N % 64 == 32: the 32-column tail is stored from registers)
        staging_per_wg = wg_m * EPI_SLAB_COLS * 2 * slots if slots else wg_m * (bn // EPI_SLAB_COLS) * EPI_SLAB_COLS * 2
        shared = c["SHARED_STAGING"]   # ping-pong: one staging tile for both consumers + a STG_FULL barrier
        staging = (1 if shared else nc) * staging_per_wg if (store_tma or extra_tma) else 0
        barrier_bytes = 8 * (2 * st + 2 * nc + shared)
        smem = SMEM_ALIGN + st * stage_bytes + staging + barrier_bytes
        tiles_m = M // bm if bm else 0
        tiles_n = -(-N // bn) if bn else 0   # ceil: a partial last column block (kernel PARTIAL_N)
        carries_operand = epi != "BIAS_GELU"
        return {
            "threads": 128 * (nc + 1),
            "wg_m": wg_m,
            "wg_m_tiles": wg_m // 64,
            "acc_regs": (wg_m // 64) * (bn // 2),
            "k_iters": K // BLOCK_K,
            "stage_bytes": stage_bytes,
            "stage_tx_bytes": (bm + bn) * BLOCK_K,
            "staging_bytes": staging,
            "smem_bytes": smem,
            "tiles_m": tiles_m,
            "tiles_n": tiles_n,
            "total_tiles": tiles_m * tiles_n,
            "regfile": c["PRODUCER_REGS"] * 128 + c["CONSUMER_REGS"] * 128 * nc,
            # rows of W each CTA of a cluster loads (W is multicast across the cluster)
            "w_box_rows": bn // cm if cm else 0,
            # the epilogue reads the BIAS_POS / BIAS_RESIDUAL operand from global memory, word by word
            "operand_from_global": int(bool(store_tma and not extra_tma and carries_operand)),
            # registers EPI_DIRECT holds the next tile's operand words in, beside the accumulators
            "direct_held_regs": (wg_m // 64) * 2 * (bn // 8),
            # registers the EPI_SLOTS ring holds the next slab's operand words (2 slabs x rows x 8) and bias words in
            "ring_held_regs": 2 * (wg_m // 64) * 2 * 8 * carries_operand + 16 * (epi != "BIAS_POS"),
            # operand registers held through the main loop, beside both accumulators when promoted (EPI_DIRECT's
            # prefetch; EPI_SLOTS' words are loaded in the epilogue, after the promoted sum is folded back)
            "held_regs": (wg_m // 64) * 2 * (bn // 8) * carries_operand if c["EPI_DIRECT"] else 0,
            # fragment column groups of a row that go through the staging tile
            "staged_groups": (bn // EPI_SLAB_COLS) * 8,
        }

    def names(self, config, problem, device: DeviceInfo | None = None) -> Names:
        """What :data:`RULES` see: constants, problem, config (as ints) and derived sizes by name."""
        c = self._ints(config)
        M, N, K, epi, seq = self._prob(problem)
        return Names(
            **_RULE_CONSTANTS,
            M=M, N=N, K=K, EPILOGUE=epi, SEQ_LEN=seq,
            **c,
            **self._sizes(c, M, N, K, epi),
            unknown=sorted(config.keys() - self.params.keys()),
            max_smem=(device or _DEFAULT_DEVICE).max_smem_per_block,
        )

    def check(self, config, problem, device: DeviceInfo | None = None):
        return first_violation(RULES, self.names(config, problem, device))

    # -- launch -------------------------------------------------------------------------
    def launch(self, config, problem, device: DeviceInfo):
        c = self._ints(config)
        M, N, K, epi, seq = self._prob(problem)
        d = self._sizes(c, M, N, K, epi)
        bm, wg_m = c["BLOCK_M"], d["wg_m"]
        l2 = c["L2_PROMO"]
        tm_a = TensorMap("A", "uint8", (M, K), (bm, BLOCK_K), 128, l2)
        cm = c["CLUSTER_M"]
        tm_b = TensorMap("W", "uint8", (N, K), (d["w_box_rows"], BLOCK_K), 128, l2)
        tm_c = TensorMap("C", "bfloat16", (M, N), (wg_m, EPI_SLAB_COLS), 128, 0)
        if epi == "BIAS_POS":
            tm_x = TensorMap("combined_ext", "bfloat16", (seq + COMBINED_EXT_PAD, N), (wg_m, EPI_SLAB_COLS), 128, 0)
            extra, bias = Buffer("combined"), Buffer("combined")
        elif epi == "BIAS_RESIDUAL":
            tm_x = TensorMap("residual", "bfloat16", (M, N), (wg_m, EPI_SLAB_COLS), 128, 0)
            extra, bias = Buffer("residual"), Buffer("bias")
        else:
            tm_x = tm_c  # unused by BIAS_GELU
            extra, bias = Buffer("bias"), Buffer("bias")
        grid = (min(device.sm_count, d["total_tiles"]) // cm) * cm
        return Launch(
            grid=(grid, 1, 1),
            block=(d["threads"], 1, 1),
            args=[tm_a, tm_b, tm_c, tm_x, extra, bias, Buffer("C")],
            cluster=(cm, 1, 1),
            smem_bytes=d["smem_bytes"],
        )

    # -- data ---------------------------------------------------------------------------
    def inputs(self, problem, rng: np.random.Generator):
        """Fresh inputs. problem["INPUT_KIND"] == "small_int" gives exact small integers
        (A, W in {-1, 0, 1}, sparse; bias/combined/residual small integers) so the output is
        exact in BF16 and any indexing mistake is a hard mismatch."""
        M, N, K, epi, seq = self._prob(problem)
        small = problem.get("INPUT_KIND", "random") == "small_int"
        # A and W are generated on the GPU (A is 0.7-2 GB at full size)
        if small:
            a = RandomTable((M, K), _SMALL_INT_FP8)
            w = RandomTable((N, K), _SMALL_INT_FP8)
        else:
            a = RandomTable((M, K), _uniform_fp8_table(1.0))
            w = RandomTable((N, K), _uniform_fp8_table(0.25))
        out: dict[str, np.ndarray | RandomTable] = {"A": a, "W": w}
        if epi == "BIAS_POS":
            if small:
                r = np.arange(seq)[:, None]
                cc = np.arange(N)[None, :]
                comb = f32_to_bf16((((r * 7 + cc * 3) % 17) - 8).astype(np.float32))
            else:
                comb = _random_bf16_fast(rng, (seq, N))
            out["combined"] = comb
            reps = -(-(seq + COMBINED_EXT_PAD) // seq)
            out["combined_ext"] = np.ascontiguousarray(np.tile(comb, (reps, 1))[: seq + COMBINED_EXT_PAD])
        else:
            if small:
                out["bias"] = f32_to_bf16(((np.arange(N) % 9) - 4).astype(np.float32))
            else:
                out["bias"] = _random_bf16_fast(rng, (N,))
        if epi == "BIAS_RESIDUAL":
            if small:
                table = f32_to_bf16(np.arange(256, dtype=np.float32) % 17 - 8)  # small integers -8..8
            else:
                table = _random_bf16_fast(rng, (256,))
            out["residual"] = RandomTable((M, N), table)
        return out

    def outputs(self, problem):
        M, N, K, epi, seq = self._prob(problem)
        return {"C": OutputSpec((M, N), "uint16", "bfloat16")}

    def reference(self, inputs: Mapping[str, np.ndarray], problem, rows):
        M, N, K, epi, seq = self._prob(problem)
        rows = np.asarray(rows, dtype=np.int64)
        a = fp8_to_f32(inputs["A"][rows]).astype(np.float64)
        w = fp8_to_f32(inputs["W"]).astype(np.float64)
        acc = a @ w.T
        if epi == "BIAS_POS":
            acc = acc + bf16_to_f32(inputs["combined"][rows % seq]).astype(np.float64)
        elif epi == "BIAS_GELU":
            x = acc + bf16_to_f32(inputs["bias"]).astype(np.float64)[None, :]
            acc = 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
        else:
            acc = (acc + bf16_to_f32(inputs["bias"]).astype(np.float64)[None, :]
                   + bf16_to_f32(inputs["residual"][rows]).astype(np.float64))
        return acc.astype(np.float32)

    def baseline(self, problem, buffers, stream):
        """cuBLAS FP8 GEMM-only on the same A and W (torch._scaled_mm, unit scales, BF16 out).

        The epilogue is left out: the fused kernel is compared with the bare GEMM it replaces
        plus more. ``problem["BASELINE_FAST_ACCUM"] = 1`` (not a define) times cuBLAS's fast
        accumulation (``use_fast_accum=True``: the numerics of PROMOTE_EVERY=0), else the precise
        mode. Needs PyTorch with CUDA in the GPU worker; None without it.
        """
        try:
            import torch
        except ImportError:
            return None
        M, N, K, epi, seq = self._prob(problem)

        def device_array(name, shape):
            class _View:  # a raw device allocation, seen by torch without a copy
                __cuda_array_interface__ = {"shape": shape, "typestr": "|u1", "data": (buffers[name], False), "version": 3}
            return torch.as_tensor(_View(), device="cuda").view(torch.float8_e4m3fn)

        a, w = device_array("A", (M, K)), device_array("W", (N, K))
        one = torch.ones((), device="cuda", dtype=torch.float32)
        on_stream = torch.cuda.ExternalStream(stream)
        fast = bool(int(problem.get("BASELINE_FAST_ACCUM", 0)))

        def gemm():
            with torch.cuda.stream(on_stream):
                torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)

        return gemm

    def reference_kernel(self, problem):
        """kernel/gemm_reference.cu computes :meth:`reference`'s math for every row in FP32."""
        M, N, K, epi, seq = self._prob(problem)
        return gemm_reference_kernel(M, N, K, epi, seq, bias=None if epi == "BIAS_POS" else "bias",
                                     addend={"BIAS_POS": "combined", "BIAS_RESIDUAL": "residual"}.get(epi))

    def check_rows(self, problem):
        return 256

    def flops(self, problem):
        M, N, K, epi, seq = self._prob(problem)
        return 2.0 * M * N * K


def gemm_reference_kernel(M: int, N: int, K: int, epilogue: str, seq: int, bias: str | None,
                          addend: str | None) -> ReferenceKernel:
    """The plain FP32 reference of an FP8 GEMM + epilogue: v = A W^T (+ bias[col])
    (+ addend[row % rows, col]), then GELU for BIAS_GELU; ``addend`` rows: SEQ_LEN
    (a position table) or M (a residual)."""
    tile = 128   # REF_TILE of the .cu
    addend_rows = seq if epilogue == "BIAS_POS" else M
    pointer = lambda name: Buffer(name) if name else Scalar("uint64", 0)  # noqa: E731
    return ReferenceKernel(
        source="gemm_reference.cu",
        kernel_name="gemm_reference_fp8",
        launch=Launch(
            grid=(-(-N // tile), -(-M // tile), 1),
            block=(256, 1, 1),
            args=[Buffer("A"), Buffer("W"), pointer(bias), pointer(addend), Scalar("int32", addend_rows),
                  Scalar("int32", int(epilogue == "BIAS_GELU")), Buffer(EXPECTED),
                  Scalar("int32", M), Scalar("int32", N), Scalar("int32", K)],
        ),
    )


# ---------------------------------------------------------------- input generators
def _codes_upto(max_abs: float) -> np.ndarray:
    vals = np.nan_to_num(E4M3_TO_F32, nan=np.inf)
    ok = np.flatnonzero((np.abs(vals) <= max_abs) & (vals != 0))
    return ok.astype(np.uint8)


def _random_bytes(rng, shape, dtype=np.uint8):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(rng.bytes(n), dtype=dtype).reshape(shape)


def _uniform_fp8_table(max_abs):
    """256 nonzero E4M3 codes with |v| <= max_abs, each code about equally often: random bytes
    through it give uniform random codes."""
    codes = _codes_upto(max_abs)
    return codes[np.arange(256) % codes.size]


#: E4M3 codes of -1, 0, +1 with P(nonzero) = 1/4 (sums stay well inside BF16's exact range)
_SMALL_INT_FP8 = np.zeros(256, dtype=np.uint8)
_SMALL_INT_FP8[0::8] = 0x38  # +1
_SMALL_INT_FP8[1::8] = 0xB8  # -1


def _random_bf16_fast(rng, shape):
    """Random BF16 bit patterns, |v| in [2^-4, 2), random sign, never zero."""
    bits = _random_bytes(rng, shape, np.uint16)
    exp = np.array([123, 124, 125, 126, 127] * 52 + [127] * 4, dtype=np.uint16)[bits >> np.uint16(8)]
    return (bits & np.uint16(0x807F)) | (exp << np.uint16(7))
