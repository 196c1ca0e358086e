"""Spec of kernel/gemm_sm90a.cu: Hopper FP8 GEMM with fused epilogues (tuner contract).

C[M,N] (BF16) = A[M,K] (E4M3) x W[N,K]^T (E4M3), FP32 accumulate, then EPILOGUE:
  BIAS_POS       + combined[row % SEQ_LEN, col]         (combined = bias + pos_embed, BF16)
  BIAS_GELU      gelu_tanh(acc + bias[col])
  BIAS_RESIDUAL  acc + bias[col] + residual[row, col]

The constraint model below mirrors the kernel's derived constants one for one
(``SMEM_BYTES`` etc.); tests compile with ``-DEXPECT_SMEM_BYTES=<model>`` so any
disagreement is a compile error, not a silent wrong launch.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from tuner.numerics import bf16_to_f32, f32_to_bf16, fp8_to_f32, E4M3_TO_F32
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


def _i(config, key, default):
    v = config.get(key, default)
    return int(v)


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
        # test hook and benchmark diagnostics (never in a study's space)
        "BUG_POS_OFF_BY_ONE": 0,
        "DIAG": 0,
    }
    problem_keys = ("M", "N", "K", "EPILOGUE", "SEQ_LEN")
    compile_options = ("-std=c++17",)
    rtol = 2e-2
    atol = 2e-2

    # -- helpers ------------------------------------------------------------------------
    def _cfg(self, config):
        c = dict(self.params)
        c.update(config)
        return c

    @staticmethod
    def _prob(problem):
        M, N, K = int(problem["M"]), int(problem["N"]), int(problem["K"])
        epi = str(problem.get("EPILOGUE", "BIAS_POS"))
        seq = int(problem.get("SEQ_LEN", 196))
        return M, N, K, epi, seq

    # -- constraint model ---------------------------------------------------------------
    def derive(self, config, problem):
        c = self._cfg(config)
        M, N, K, epi, seq = self._prob(problem)
        bm, bn, st, nc = (_i(c, k, 0) for k in ("BLOCK_M", "BLOCK_N", "N_STAGES", "NUM_CONSUMERS"))
        pp, store_tma, extra_tma = _i(c, "PINGPONG", 0), _i(c, "STORE_TMA", 1), _i(c, "EXTRA_TMA", 0)
        wg_m = bm if pp else (bm // nc if nc else 0)
        stage_bytes = (bm + bn) * BLOCK_K
        slots = _i(c, "EPI_SLOTS", 0)
        # EPI_SLOTS=R > 0: a ring of R 64-column slabs per consumer instead of the whole tile
        # whole tile: the whole 64-column slabs only (BLOCK_N % 64 == 32: the 32-column tail is stored from registers)
        staging_per_wg = wg_m * EPI_SLAB_COLS * 2 * slots if slots else wg_m * (bn // EPI_SLAB_COLS) * EPI_SLAB_COLS * 2
        shared = _i(c, "SHARED_STAGING", 0)   # ping-pong: one staging tile for both consumers + a STG_FULL barrier
        staging = (1 if shared else nc) * staging_per_wg if (store_tma or extra_tma) else 0
        barrier_bytes = 8 * (2 * st + 2 * nc + shared)
        smem = SMEM_ALIGN + st * stage_bytes + staging + barrier_bytes
        tiles_m = M // bm if bm else 0
        tiles_n = -(-N // bn) if bn else 0   # ceil: a partial last column block (kernel PARTIAL_N)
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
            "regfile": _i(c, "PRODUCER_REGS", 40) * 128 + _i(c, "CONSUMER_REGS", 232) * 128 * nc,
        }

    def check(self, config, problem, device: DeviceInfo | None = None):
        c = self._cfg(config)
        M, N, K, epi, seq = self._prob(problem)
        dev = device or DeviceInfo()
        unknown = sorted(set(config) - set(self.params))
        if unknown:
            return f"unknown parameter(s) {unknown}"
        if epi not in EPILOGUES:
            return f"EPILOGUE {epi} not one of {EPILOGUES}"
        bm, bn, st, nc = (_i(c, k, 0) for k in ("BLOCK_M", "BLOCK_N", "N_STAGES", "NUM_CONSUMERS"))
        pp, store_tma, extra_tma = _i(c, "PINGPONG", 0), _i(c, "STORE_TMA", 1), _i(c, "EXTRA_TMA", 0)
        creg, preg = _i(c, "CONSUMER_REGS", 232), _i(c, "PRODUCER_REGS", 40)
        for flag in ("PINGPONG", "STORE_TMA", "EXTRA_TMA", "SNAKE_ORDER", "BUG_POS_OFF_BY_ONE",
                     "GELU_F16X2", "CLUSTER_RELEASE", "BIAS_ACC", "GELU_H2", "EPI_DIRECT", "SHARED_STAGING", "PREFETCH_A"):
            if _i(c, flag, 0) not in (0, 1):
                return f"{flag} must be 0 or 1"
        if _i(c, "DIAG", 0) not in (0, 1, 2):
            return "DIAG must be 0, 1 (record the SM clock) or 2 (also leave the wgmmas out)"
        if _i(c, "MMA_INFLIGHT", 0) not in (0, 1, 2):
            return "MMA_INFLIGHT must be 0 (drain each k-block), 1 (release one k-block late) or 2 (split release)"
        if _i(c, "SPLIT_K32", 1) not in (1, 2, 3):
            return f"SPLIT_K32 must be 1..{BLOCK_K // 32 - 1} (k32 steps queued before the split release)"
        if K % BLOCK_K:
            return f"K={K} not a multiple of BLOCK_K={BLOCK_K}"
        if bn not in WGMMA_N:
            return f"BLOCK_N={bn} not a wgmma N the kernel carries {WGMMA_N}"
        if N % bn and not (_i(c, "STORE_TMA", 1) and not _i(c, "EPI_SLOTS", 0) and not _i(c, "EPI_DIRECT", 0)):
            return (f"N={N} not a multiple of BLOCK_N={bn}: a partial last column block needs STORE_TMA=1, "
                    "EPI_SLOTS=0, EPI_DIRECT=0 (TMA clips the store; fragment stores are not masked)")
        if N % bn and N % 8:
            return f"partial column block: N={N} must be a multiple of 8 (masks per 8-column group)"
        if nc not in (1, 2):
            return "NUM_CONSUMERS must be 1 or 2"
        if pp and nc == 1:
            return "PINGPONG=1 with one consumer is the same kernel as PINGPONG=0"
        if bm <= 0 or bm % 64 or bm > 256:
            return f"BLOCK_M={bm}: multiple of 64, at most 256 (TMA box limit)"
        if M % bm:
            return f"M={M} not a multiple of BLOCK_M={bm}"
        d = self.derive(c, problem)
        if d["wg_m"] % 64 or d["wg_m"] < 64:
            return f"rows per consumer {d['wg_m']} must be a multiple of 64 (wgmma M)"
        if st < 2:
            return "N_STAGES must be >= 2"
        if pp and st > K // BLOCK_K:
            return f"PINGPONG needs N_STAGES <= K/BLOCK_K = {K // BLOCK_K} (mbarrier parity)"
        cm = _i(c, "CLUSTER_M", 1)
        if cm == 4:   # the kernel builds it; kept out of the model: 30 clusters of 4 fit on an H200 (120 of 132
            # SMs) and it measured no faster than CLUSTER_M=1 (docs/experiments/logs/diag_*_h200.log)
            return "CLUSTER_M=4 leaves SMs idle (30 clusters of 4 fit on an H200): use 1 or 2"
        if cm not in (1, 2):
            return "CLUSTER_M must be 1 or 2"
        if d["tiles_m"] % cm:
            return f"{d['tiles_m']} row blocks do not pair up in clusters of {cm}"
        if (bn // cm) % 8:
            return f"W slice of {bn // cm} rows per cluster CTA is not whole 8-row groups"
        if _i(c, "GROUP_M", 1) < 1:
            return "GROUP_M must be >= 1"
        if not (24 <= preg <= 256 and preg % 8 == 0 and 24 <= creg <= 256 and creg % 8 == 0):
            return "setmaxnreg values must be multiples of 8 in [24, 256]"
        if d["regfile"] > REGFILE:
            return f"registers after setmaxnreg {d['regfile']} > {REGFILE}"
        if d["acc_regs"] > creg - ACC_REG_HEADROOM:
            return (f"{d['acc_regs']} accumulator registers per thread leave less than "
                    f"{ACC_REG_HEADROOM} of CONSUMER_REGS={creg} (ptxas spills)")
        # ptxas (sweep of every accepted 192-accumulator config, 2026-11-21): with 192 accumulators the
        # epilogue's bias words and temporaries do not fit for BIAS_GELU / BIAS_RESIDUAL (spills of 8-512 B,
        # e.g. ping-pong 128x192 GELU 428 B) unless the bias is folded into the accumulator start (BIAS_ACC=1);
        # one patch_embed path (1 consumer, 128x192, multicast, MMA_INFLIGHT=1, fragment stores) spills 56 B.
        direct = _i(c, "EPI_DIRECT", 0)
        if d["acc_regs"] >= 192 and epi != "BIAS_POS" and not (_i(c, "BIAS_ACC", 0) or direct):
            return (f"{d['acc_regs']} accumulators + the {epi} epilogue's bias words spill (ptxas): "
                    "needs BIAS_ACC=1 (bias folded into the accumulator start)")
        if (d["acc_regs"] >= 192 and epi == "BIAS_POS" and nc == 1 and cm == 2 and _i(c, "MMA_INFLIGHT", 0)
                and store_tma and not extra_tma):
            return "192 accumulators, 1 consumer, CLUSTER_M=2, MMA_INFLIGHT>0, TMA-store staging: ptxas spills 56 B"
        # ptxas sweep of the split-release / shared-staging configs (2026-11-21): with the operand read from
        # global per word in the epilogue (STORE_TMA=1, EXTRA_TMA=0), 160 accumulators + the 32-column
        # register tail spill 16-48 B, and 192 accumulators of a 128-row consumer tile with MMA_INFLIGHT=2 36 B
        operand_from_global = store_tma and not extra_tma and epi != "BIAS_GELU"
        if operand_from_global and d["acc_regs"] >= 160 and bn % EPI_SLAB_COLS:
            return (f"{d['acc_regs']} accumulators + the 32-column register tail with the {epi} operand read from "
                    "global spill (ptxas): needs EXTRA_TMA=1")
        if operand_from_global and d["acc_regs"] >= 192 and not pp and _i(c, "MMA_INFLIGHT", 0) == 2:
            return "192 accumulators, MMA_INFLIGHT=2, operand read from global in the epilogue: ptxas spills 36 B"
        if store_tma and bn % EPI_SLAB_COLS not in (0, 32):
            return f"STORE_TMA=1 needs BLOCK_N % {EPI_SLAB_COLS} in (0, 32) (store boxes + a 32-column register tail)"
        if store_tma and bn % EPI_SLAB_COLS and bn < 2 * EPI_SLAB_COLS:
            return (f"STORE_TMA=1 with BLOCK_N={bn}: a third of the columns would take the 32-column register tail "
                    "(kept out of the space; the tail is meant for BLOCK_N=160)")
        if extra_tma and not store_tma:
            return "EXTRA_TMA=1 needs STORE_TMA=1 (the operand lands in the staging tile)"
        if extra_tma and epi == "BIAS_GELU":
            return "EXTRA_TMA has no operand to load for BIAS_GELU"
        if epi == "BIAS_POS" and d["wg_m"] > COMBINED_EXT_PAD:
            return "combined_ext too short for WG_M"
        slots = _i(c, "EPI_SLOTS", 0)
        if _i(c, "SHARED_STAGING", 0) and not (pp and store_tma and not slots and not direct):
            return ("SHARED_STAGING=1 (one staging tile for the two ping-pong consumers, stored by a producer thread) "
                    "needs PINGPONG=1, STORE_TMA=1, EPI_SLOTS=0, EPI_DIRECT=0")
        if direct and (store_tma or extra_tma or slots):
            return "EPI_DIRECT=1 (no staging: operand in the accumulator start, 16-byte stores) needs STORE_TMA=0, EXTRA_TMA=0, EPI_SLOTS=0"
        if direct and epi != "BIAS_GELU":
            # the next tile's operand words are held in registers next to the accumulators
            held = (d["wg_m"] // 64) * 2 * (bn // 8)
            if d["acc_regs"] + held > creg - ACC_REG_HEADROOM:
                return (f"EPI_DIRECT: {d['acc_regs']} accumulators + {held} prefetched operand registers leave "
                        f"less than {ACC_REG_HEADROOM} of CONSUMER_REGS={creg} (ptxas spills)")
        if slots not in (0, 1, 2, 3, 4):
            return "EPI_SLOTS must be 0..4"
        if slots and not (store_tma and not extra_tma):
            return "EPI_SLOTS > 0 (staging ring) needs STORE_TMA=1 and EXTRA_TMA=0"
        if slots:
            # the ring epilogue holds the next slab's operand words (2 slabs x rows x 8) and bias words
            held = 2 * (d["wg_m"] // 64) * 2 * 8 * (epi != "BIAS_GELU") + 16 * (epi != "BIAS_POS")
            if d["acc_regs"] + held > creg - ACC_REG_HEADROOM:
                return (f"EPI_SLOTS: {d['acc_regs']} accumulators + {held} prefetched operand registers leave "
                        f"less than {ACC_REG_HEADROOM} of CONSUMER_REGS={creg} (ptxas spills)")
        if slots and bn % EPI_SLAB_COLS:
            return f"EPI_SLOTS > 0 needs BLOCK_N % {EPI_SLAB_COLS} == 0"
        if slots and slots > bn // EPI_SLAB_COLS:
            return f"EPI_SLOTS={slots} > BLOCK_N/{EPI_SLAB_COLS} slabs of a tile"
        if _i(c, "GELU_F16X2", 0) and epi != "BIAS_GELU":
            return "GELU_F16X2 applies to EPILOGUE=BIAS_GELU only"
        if _i(c, "BIAS_ACC", 0) and epi == "BIAS_POS":
            return "BIAS_ACC folds bias[col] into the accumulator: BIAS_GELU / BIAS_RESIDUAL only"
        if _i(c, "GELU_H2", 0) and epi != "BIAS_GELU":
            return "GELU_H2 applies to EPILOGUE=BIAS_GELU only"
        if _i(c, "GELU_H2", 0) and _i(c, "GELU_F16X2", 0):
            return "GELU_H2 and GELU_F16X2 are two forms of the same GELU: pick one"
        batch = _i(c, "EPI_BATCH", 0)
        if batch not in (0, 4, 8, 16, 32):
            return "EPI_BATCH must be 0, 4, 8, 16 or 32"
        if batch and not extra_tma:
            return "EPI_BATCH reads the staged EXTRA_TMA operand ahead: needs EXTRA_TMA=1"
        staged_j = (bn // EPI_SLAB_COLS) * 8   # fragment groups that go through the staging tile
        if batch and staged_j % batch:
            return f"EPI_BATCH={batch} does not divide the {staged_j} staged column groups of a fragment row"
        if _i(c, "L2_PROMO", 0) not in (0, 64, 128, 256):
            return "L2_PROMO must be 0, 64, 128 or 256"
        if d["smem_bytes"] > dev.max_smem_per_block:
            return f"shared memory {d['smem_bytes']} B > {dev.max_smem_per_block} B"
        if d["total_tiles"] < 1:
            return "no tiles"
        return None

    # -- launch -------------------------------------------------------------------------
    def launch(self, config, problem, device: DeviceInfo):
        c = self._cfg(config)
        M, N, K, epi, seq = self._prob(problem)
        d = self.derive(c, problem)
        bm, bn, wg_m = _i(c, "BLOCK_M", 0), _i(c, "BLOCK_N", 0), d["wg_m"]
        l2 = _i(c, "L2_PROMO", 0)
        tm_a = TensorMap("A", "uint8", (M, K), (bm, BLOCK_K), 128, l2)
        cm = _i(c, "CLUSTER_M", 1)
        tm_b = TensorMap("W", "uint8", (N, K), (bn // cm, BLOCK_K), 128, l2)
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
        plus more. Needs PyTorch with CUDA in the GPU worker; None without it.
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

        def gemm():
            with torch.cuda.stream(on_stream):
                torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

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
    (a position table) or M (a residual). Shared by the sm_90a and sm_100a specs."""
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
