"""Spec of ``gemm_sm100a.cu``: the Blackwell (B200, sm_100a) FP8 GEMM megakernel.

COMPILE-VERIFIED HERE, NOT YET RUN ON HARDWARE: nobody has launched this kernel on a B200.
``launch()`` describes the launch the first B200 run needs (persistent grid of 2-CTA
clusters, TMA maps, dynamic SMEM) so that run needs no new host code.

C[M,N] (BF16) = A[M,K] (FP8 E4M3, K-major) x W[N,K]^T (FP8 E4M3, K-major) + epilogue:

* ``BIAS_POS``      C = acc + combined[row % SEQ_LEN]   (combined = bias + pos_embed,
  uploaded in the blocked layout [ceil(S/32), N/32, 32, 32]: each 32-column step of the
  epilogue reads one contiguous 2 KB block instead of rows N*2 bytes apart)
* ``BIAS_GELU``     C = gelu_tanh(acc + bias)             (tanh-form GELU)
* ``BIAS_RESIDUAL`` C = acc + bias + residual             (residual BF16 [M, N])

Constraint model
----------------
``check()`` is the grid-search plan's ``is_valid()`` (:func:`grid_plan_is_valid`, the plan's
tier-1 grid :data:`GRID_PLAN_TIER1`; docs/SM100A.md) written for this kernel's real SMEM
layout, which is the plan's offset chain exactly::

    stages    N_STAGES * (128*128 + (TN/2)*128)      A box 128x128 B + this CTA's half of W
    tmem addr 8
    tma mbar  N_STAGES * 8
    mma mbar  N_STAGES * 8
    mainloop  2 * 8
    epilogue  2 * 8
    staging   align128, NUM_EPI_WARPS * 32 * (TN*2 + STAGING_ROW_PAD), total align128

The kernel derives the same chain with ``#define``s and ``#error``s out if the spec's figure
(passed as ``SPEC_SMEM_BYTES``) differs, so the model, the kernel and ``launch()`` agree for
every config by construction.

Differences from :func:`grid_plan_is_valid`:

* SMEM limit 232448 bytes (the B200 opt-in maximum per block, 227 KB), not 233472 (228 KB,
  the per-SM capacity, which includes 1 KB the driver reserves per block). On the plan's
  tier-1 grid this rejects nothing more: the largest accepted config uses 231552 bytes and
  the smallest one rejected for SMEM 233600, above both limits (see
  ``tests/test_gemm_sm100a.py``), so both models accept the same 69 of 108 configs (27
  rejected for the split COLS_PER_THREAD of TN=128 with 5 warps, 12 for SMEM).
* Row-group coverage is stated as the hardware rule: warp ``w`` may only read TMEM lanes
  ``32*(w % 4)..+31``, epilogue warps are warps 2..; 4 or 5 of them cover the 4 lane groups
  (the 5th shares group 2 with warp 2 and takes the upper half of the columns).
* Rules the plan leaves out because patch_embed never breaks them: M a multiple of 256
  (2-CTA tile), K a multiple of 128 (one swizzle atom per stage), N a multiple of 32 (blocked
  combined layout), the identifiers of ``EPILOGUE`` / ``ADD_SOURCE`` and the value sets of
  tier-2 switches.

:data:`INPUT_RULES` (names, types, TN) and then :data:`RULES` (over :meth:`Spec.derive`'s
sizes too) list what a config must meet, in the order ``check()`` reports the first it breaks.

Post-compile rules (registers <= 255, no spills) are the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tuner.contract.arch import limits
from tuner.contract.numerics import bf16_to_f32, f32_to_bf16, fp8_to_f32, random_fp8
from tuner.contract.rules import Names, Rule, first_violation, one_of
from tuner.errors import UserError
from tuner.spec import EXPECTED, Buffer, DeviceInfo, KernelSpec, Launch, OutputSpec, ReferenceKernel, Scalar, TensorMap

# fixed by the design
TM = 128  # rows per CTA = TMEM lanes
TK = 128  # K bytes per stage = one 128-byte swizzle atom
CTA_GROUP = 2
MMA_M = TM * CTA_GROUP
MMA_K = 32
COMB_BLOCK = 32
MAX_DYN_SMEM_B200 = limits("sm_100a").max_smem_per_block  # 232448: 227 KB
GRID_PLAN_SMEM_LIMIT = 233472  # grid_plan_is_valid()'s limit (228 KB)

EPILOGUES = ("BIAS_POS", "BIAS_GELU", "BIAS_RESIDUAL")
ADD_SOURCES = ("BF16", "FP32")

#: the grid-search plan's tier-1 axes and values
GRID_PLAN_TIER1 = {
    "TN": (128, 256),
    "N_STAGES": (3, 4, 5),
    "NUM_EPI_WARPS": (4, 5),
    "PHASE2_UNROLL": (4, 8, 16),
    "STAGING_ROW_PAD": (0, 16, 32),
}
#: the grid-search plan's tier-2 switches with this kernel's spelling
GRID_PLAN_TIER2 = {
    "SNAKE_ORDER": (0, 1),
    "TMA_L2_PROMOTION": (0, 1),
    "ADD_SOURCE": ADD_SOURCES,
    "TMEM_LOAD_WIDTH": (16, 32),
    "COMBINED_LOAD_VEC": (2, 4),
}


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _integer(key: str) -> Rule:
    """The rule that ``key`` is an int (a bool is not: ``True`` would pass as 1)."""
    return Rule(lambda v: isinstance(getattr(v, key), int) and not isinstance(getattr(v, key), bool),
                key + "={" + key + "!r} must be an integer")


_RULE_CONSTANTS = {"MMA_M": MMA_M, "TK": TK, "MAX_DYN_SMEM_B200": MAX_DYN_SMEM_B200}

#: what the config and problem must be before sizes can be derived from them
INPUT_RULES = (
    Rule(lambda v: not v.unknown, "unknown parameter(s) {unknown} (this kernel has {known})"),
    Rule(lambda v: v.problem_error is None, "problem needs integer M, N, K: {problem_error}"),
    one_of("EPILOGUE", EPILOGUES, "EPILOGUE={EPILOGUE} not one of " + ", ".join(EPILOGUES)),
    *(_integer(key) for key in ("TN", "N_STAGES", "NUM_EPI_WARPS", "PHASE2_UNROLL", "STAGING_ROW_PAD",
                                "SNAKE_ORDER", "TMA_L2_PROMOTION", "TMEM_LOAD_WIDTH", "COMBINED_LOAD_VEC")),
    one_of("TN", (128, 256),
           "TN={TN}: the MMA is M=256 x N=TN with TN in {{128, 256}} (TMEM 2*TN <= 512, TN/32 in {{4, 8}})"),
)

#: what a config must meet, over the config, the problem and :meth:`Spec.derive`'s sizes, in report order
RULES = (
    Rule(lambda v: v.N_STAGES >= 2, "N_STAGES={N_STAGES} < 2: no overlap of TMA and MMA"),
    Rule(lambda v: v.threads <= 1024, "threads {threads} > 1024"),
    Rule(lambda v: v.NUM_EPI_WARPS >= 4,
         "NUM_EPI_WARPS={NUM_EPI_WARPS} < 4: warp w reads only TMEM lanes 32*(w%4).., lane group(s) never written"),
    Rule(lambda v: v.NUM_EPI_WARPS <= 5,
         "NUM_EPI_WARPS={NUM_EPI_WARPS} > 5: the kernel splits columns for a 5th warp only"),
    one_of("ADD_SOURCE", ADD_SOURCES, "ADD_SOURCE={ADD_SOURCE} not one of " + ", ".join(ADD_SOURCES)),
    one_of("TMEM_LOAD_WIDTH", (16, 32), "TMEM_LOAD_WIDTH={TMEM_LOAD_WIDTH} not 16 or 32"),
    one_of("COMBINED_LOAD_VEC", (2, 4), "COMBINED_LOAD_VEC={COMBINED_LOAD_VEC} not 2 (uint2) or 4 (uint4)"),
    Rule(lambda v: v.SNAKE_ORDER in (0, 1) and v.TMA_L2_PROMOTION in (0, 1),
         "SNAKE_ORDER and TMA_L2_PROMOTION are 0 or 1"),
    Rule(lambda v: 1 <= v.PHASE2_UNROLL <= 32, "PHASE2_UNROLL={PHASE2_UNROLL} not in 1..32"),
    Rule(lambda v: v.STAGING_ROW_PAD >= 0 and v.STAGING_ROW_PAD % 16 == 0,
         "STAGING_ROW_PAD={STAGING_ROW_PAD} must be a multiple of 16 bytes (v4 staging access)"),
    Rule(lambda v: v.smem_bytes <= MAX_DYN_SMEM_B200, "SMEM {smem_bytes} > {MAX_DYN_SMEM_B200} (227 KB)"),
    Rule(lambda v: 32 <= v.tmem_cols <= 512 and v.tmem_cols & (v.tmem_cols - 1) == 0,
         "TMEM {tmem_cols} columns: must be a power of two in 32..512"),
    Rule(lambda v: v.M > 0 and v.M % MMA_M == 0, "M={M} not a multiple of {MMA_M} (the 2-CTA tile height)"),
    Rule(lambda v: v.N % v.TN == 0, "N={N} % TN={TN} != 0"),
    Rule(lambda v: v.N % COMB_BLOCK == 0, "N={N} not a multiple of 32"),
    Rule(lambda v: v.K > 0 and v.K % TK == 0, "K={K} not a multiple of {TK}"),
    one_of("cols_per_thread_full", (4, 8), "COLS_PER_THREAD={cols_per_thread_full} invalid (needs 4 or 8)"),
    Rule(lambda v: v.NUM_EPI_WARPS != 5 or v.cols_per_thread_split in (4, 8),
         "split COLS_PER_THREAD={cols_per_thread_split} invalid (needs 4 or 8): "
         "TN={TN} cannot use the 5th epilogue warp"),
    Rule(lambda v: v.EPILOGUE != "BIAS_POS" or v.SEQ_LEN > 0, "SEQ_LEN={SEQ_LEN} must be positive"),
)


def grid_plan_is_valid(tn: int, n_stages: int, num_epi_warps: int, staging_pad: int) -> tuple[bool, str]:
    """The grid-search plan's ``is_valid()`` verbatim in logic (patch_embed N=768), to compare the model with."""
    tk, tm = 128, 128
    threads = 32 * (2 + num_epi_warps)
    if threads > 1024:
        return False, "threads > 1024"
    if num_epi_warps < 4:
        return False, f"NUM_EPI_WARPS={num_epi_warps} < 4: row_group 3 never written"
    stage_bytes = tk * tm + tk * (tn // 2)
    off_tmem = n_stages * stage_bytes
    off_tma_mbar = off_tmem + 8
    off_mma_mbar = off_tma_mbar + n_stages * 8
    off_mainloop_mbar = off_mma_mbar + n_stages * 8
    off_epilogue_mbar = off_mainloop_mbar + 16
    off_staging = (off_epilogue_mbar + 16 + 127) & ~127
    staging_row_bytes = tn * 2 + staging_pad
    staging_warp_bytes = 32 * staging_row_bytes
    smem_total = (off_staging + num_epi_warps * staging_warp_bytes + 127) & ~127
    if smem_total > GRID_PLAN_SMEM_LIMIT:
        return False, f"SMEM {smem_total} > 228KB"
    if tn * 2 > 512:
        return False, f"TMEM {tn * 2} > 512"
    if 768 % tn != 0:
        return False, "N_DIM % TN != 0"
    cpt_full = tn // 32
    if cpt_full not in (4, 8):
        return False, f"COLS_PER_THREAD={cpt_full} invalid"
    if num_epi_warps > 4:
        cpt_split = (tn // 2) // 32
        if cpt_split not in (4, 8):
            return False, f"split COLS_PER_THREAD={cpt_split} invalid"
    return True, "ok"


def block_combined(comb: np.ndarray) -> np.ndarray:
    """[S, N] -> the blocked layout [ceil(S/32), N/32, 32, 32] the kernel reads.

    Padding rows S..ceil(S/32)*32-1 repeat rows ``r % S`` (the kernel never reads them:
    it indexes ``row % S``).
    """
    s, n = comb.shape
    rows = _align(s, COMB_BLOCK)
    padded = comb[np.arange(rows) % s]
    return np.ascontiguousarray(
        padded.reshape(rows // COMB_BLOCK, COMB_BLOCK, n // COMB_BLOCK, COMB_BLOCK).transpose(0, 2, 1, 3)
    )


def blocked_index(r: int, c: int, n: int) -> int:
    """Flat element index of (r, c) in the blocked layout: the kernel's address formula."""
    return ((r // 32) * (n // 32) + c // 32) * 1024 + (r % 32) * 32 + (c % 32)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _random_bf16_fast(rng: np.random.Generator, shape, scale: float = 1.0) -> np.ndarray:
    """BF16 bits drawn from 256 nonzero normal-quantile values (for [M, N] residuals)."""
    q = (np.arange(256) + 0.5) / 256.0
    # normal quantiles via a rational approximation is overkill: a logistic spread suffices
    values = (np.log(q / (1.0 - q)) * (scale * 0.55)).astype(np.float32)
    values[values == 0] = scale
    table = f32_to_bf16(values)
    return table[rng.integers(0, 256, size=shape, dtype=np.uint8)]


class Spec(KernelSpec):
    name = "gemm_sm100a"
    source = "gemm_sm100a.cu"
    kernel_name = "gemm_sm100a"
    archs = ("sm_100a",)
    params = {
        # tier 1
        "TN": 256,
        "N_STAGES": 4,
        "NUM_EPI_WARPS": 5,
        "PHASE2_UNROLL": 8,
        "STAGING_ROW_PAD": 16,
        # tier 2
        "SNAKE_ORDER": 1,
        "TMA_L2_PROMOTION": 0,
        "ADD_SOURCE": "BF16",
        "TMEM_LOAD_WIDTH": 32,
        "COMBINED_LOAD_VEC": 4,
    }
    problem_keys = ("M", "N", "K", "EPILOGUE", "SEQ_LEN")
    compile_options = ("-std=c++17",)
    rtol = 2e-2
    atol = 2e-2

    # -- helpers -------------------------------------------------------------------------
    def _cfg(self, config: Mapping) -> dict:
        merged = dict(self.params)
        merged.update(config)
        return merged

    @staticmethod
    def _prob(problem: Mapping) -> tuple[int, int, int, str, int]:
        return (
            int(problem["M"]),
            int(problem["N"]),
            int(problem["K"]),
            str(problem.get("EPILOGUE", "BIAS_POS")),
            int(problem.get("SEQ_LEN", 196)),
        )

    # -- constraint model ------------------------------------------------------------------
    def derive(self, config, problem) -> dict[str, int]:
        c = self._cfg(config)
        m, n, k, _, seq = self._prob(problem)
        tn = int(c["TN"])
        stages = int(c["N_STAGES"])
        epi = int(c["NUM_EPI_WARPS"])
        pad = int(c["STAGING_ROW_PAD"])
        b_rows = tn // CTA_GROUP
        a_stage = TM * TK
        b_stage = b_rows * TK
        stage_bytes = a_stage + b_stage
        off_tmem_addr = stages * stage_bytes
        off_tma_mbar = off_tmem_addr + 8
        off_mma_mbar = off_tma_mbar + stages * 8
        off_mainloop_mbar = off_mma_mbar + stages * 8
        off_epi_mbar = off_mainloop_mbar + 2 * 8
        off_staging = _align(off_epi_mbar + 2 * 8, 128)
        staging_row_bytes = tn * 2 + pad
        staging_warp_bytes = 32 * staging_row_bytes
        smem_bytes = _align(off_staging + epi * staging_warp_bytes, 128)
        tiles_m = m // MMA_M
        tiles_n = n // tn if tn else 0
        return {
            "threads": 32 * (2 + epi),
            "tiles_m": tiles_m,
            "tiles_n": tiles_n,
            "total_tiles": tiles_m * tiles_n,
            "k_iters": k // TK,
            "mmas_per_tile": (k // TK) * (TK // MMA_K),
            "a_stage_bytes": a_stage,
            "b_stage_bytes": b_stage,
            "stage_bytes": stage_bytes,
            "tma_bytes": stage_bytes,
            "tmem_cols": 2 * tn,
            "idesc": (1 << 4) | ((tn >> 3) << 17) | ((MMA_M >> 4) << 24),
            "box_a_rows": TM,
            "box_w_rows": b_rows,
            "off_tmem_addr": off_tmem_addr,
            "off_tma_mbar": off_tma_mbar,
            "off_mma_mbar": off_mma_mbar,
            "off_mainloop_mbar": off_mainloop_mbar,
            "off_epi_mbar": off_epi_mbar,
            "off_staging": off_staging,
            "staging_row_bytes": staging_row_bytes,
            "staging_warp_bytes": staging_warp_bytes,
            "smem_bytes": smem_bytes,
            "cols_per_thread_full": tn // 32,
            "cols_per_thread_split": (tn // 2) // 32 if epi == 5 else 0,
            "comb_rows_padded": _align(seq, COMB_BLOCK),
        }

    def names(self, config, problem) -> Names:
        """What the rule tables see: constants, problem and config (as given) by name; a problem
        without integer M, N, K is recorded in ``problem_error`` for the rule that reports it."""
        c = self._cfg(config)
        try:
            m, n, k, epilogue, seq = self._prob(problem)
            problem_error = None
        except (KeyError, ValueError) as exc:
            m = n = k = seq = 0
            epilogue, problem_error = "", exc
        return Names(**_RULE_CONSTANTS, M=m, N=n, K=k, EPILOGUE=epilogue, SEQ_LEN=seq, problem_error=problem_error,
                     **{key: c[key] for key in self.params},
                     unknown=", ".join(sorted(config.keys() - self.params.keys())), known=", ".join(self.params))

    def check(self, config, problem) -> str | None:
        names = self.names(config, problem)
        reason = first_violation(INPUT_RULES, names)
        if reason is None:  # the sizes are derived from well-formed values only
            names.__dict__.update(self.derive(config, problem))
            reason = first_violation(RULES, names)
        return reason

    def defines(self, config, problem):
        merged = super().defines(config, problem)
        # the kernel #errors out if its own SMEM_BYTES differs from the model's
        merged["SPEC_SMEM_BYTES"] = self.derive(config, problem)["smem_bytes"]
        return merged

    # -- run -------------------------------------------------------------------------------
    def _add_buffer(self, config, problem) -> str:
        c = self._cfg(config)
        epilogue = self._prob(problem)[3]
        kind = "comb" if epilogue == "BIAS_POS" else "bias"
        return f"{kind}_{'bf16' if c['ADD_SOURCE'] == 'BF16' else 'f32'}"

    def launch(self, config, problem, device: DeviceInfo) -> Launch:
        if tuple(device.cc) != (10, 0):
            raise UserError(
                f"gemm_sm100a is an sm_100a kernel (B200/GB200, compute capability 10.0); "
                f"{device.name or 'this device'} is {device.cc[0]}.{device.cc[1]}: it cannot run here. "
                "Use `tuner check --compile` for the compile-only check."
            )
        reason = self.check(config, problem)
        if reason:
            raise UserError(f"gemm_sm100a: invalid config: {reason}")
        c = self._cfg(config)
        m, n, k, epilogue, _ = self._prob(problem)
        d = self.derive(config, problem)
        if d["smem_bytes"] > device.max_smem_per_block:
            raise UserError(
                f"gemm_sm100a needs {d['smem_bytes']} bytes of dynamic SMEM; "
                f"{device.name} allows {device.max_smem_per_block}"
            )
        clusters = max(1, min(device.sm_count // CTA_GROUP, d["total_tiles"]))
        l2 = 256 if c["TMA_L2_PROMOTION"] else 0
        args = [
            TensorMap("A", "uint8", (m, k), (TM, TK), swizzle=128, l2_promotion=l2),
            TensorMap("W", "uint8", (n, k), (d["box_w_rows"], TK), swizzle=128, l2_promotion=l2),
            Buffer("C"),
            Buffer(self._add_buffer(config, problem)),
            Buffer("residual") if epilogue == "BIAS_RESIDUAL" else Scalar("uint64", 0),
        ]
        return Launch(
            grid=(CTA_GROUP * clusters, 1, 1),
            block=(d["threads"], 1, 1),
            args=args,
            cluster=(CTA_GROUP, 1, 1),
            smem_bytes=d["smem_bytes"],
        )

    def inputs(self, problem, rng: np.random.Generator) -> dict[str, np.ndarray]:
        m, n, k, epilogue, seq = self._prob(problem)
        arrays: dict[str, np.ndarray] = {
            "A": random_fp8(rng, (m, k)),
            "W": random_fp8(rng, (n, k)),
            "bias": f32_to_bf16(rng.standard_normal(n).astype(np.float32) * 0.5 + 0.25),
        }
        bias = bf16_to_f32(arrays["bias"])
        if epilogue == "BIAS_POS":
            arrays["pos_embed"] = f32_to_bf16(rng.standard_normal((seq, n)).astype(np.float32))
            comb = bias[None, :] + bf16_to_f32(arrays["pos_embed"])
            arrays["comb_f32"] = block_combined(comb.astype(np.float32)).reshape(-1)
            arrays["comb_bf16"] = block_combined(f32_to_bf16(comb)).reshape(-1)
        else:
            arrays["bias_f32"] = bias.astype(np.float32)
            arrays["bias_bf16"] = arrays["bias"]
        if epilogue == "BIAS_RESIDUAL":
            arrays["residual"] = _random_bf16_fast(rng, (m, n))
        return arrays

    def outputs(self, problem) -> dict[str, OutputSpec]:
        m, n, _, _, _ = self._prob(problem)
        return {"C": OutputSpec((m, n), "uint16", "bfloat16")}

    def reference(self, inputs, problem, rows) -> np.ndarray:
        m, n, k, epilogue, seq = self._prob(problem)
        rows = np.asarray(rows, dtype=np.int64)
        a = fp8_to_f32(inputs["A"][rows]).astype(np.float64)
        w = fp8_to_f32(inputs["W"]).astype(np.float64)
        acc = a @ w.T
        bias = bf16_to_f32(inputs["bias"]).astype(np.float64)
        if epilogue == "BIAS_POS":
            pos = bf16_to_f32(inputs["pos_embed"]).astype(np.float64)
            out = acc + bias[None, :] + pos[rows % seq]
        elif epilogue == "BIAS_GELU":
            out = gelu_tanh(acc + bias[None, :])
        else:
            res = bf16_to_f32(inputs["residual"][rows]).astype(np.float64)
            out = acc + bias[None, :] + res
        return out.astype(np.float32)

    def reference_kernel(self, problem) -> ReferenceKernel:
        """kernel/gemm_reference.cu (shared with gemm_sm90a): :meth:`reference`'s math for
        every row in FP32; BIAS_POS adds bias and pos_embed (not the BF16 combined table)."""
        m, n, k, epilogue, seq = self._prob(problem)
        addend = {"BIAS_POS": Buffer("pos_embed"), "BIAS_RESIDUAL": Buffer("residual")}.get(epilogue, Scalar("uint64", 0))
        tile = 128   # REF_TILE of the .cu
        return ReferenceKernel(
            source="gemm_reference.cu",
            kernel_name="gemm_reference_fp8",
            launch=Launch(
                grid=(-(-n // tile), -(-m // tile), 1),
                block=(256, 1, 1),
                args=[Buffer("A"), Buffer("W"), Buffer("bias"), addend, Scalar("int32", seq if epilogue == "BIAS_POS" else m),
                      Scalar("int32", int(epilogue == "BIAS_GELU")), Buffer(EXPECTED),
                      Scalar("int32", m), Scalar("int32", n), Scalar("int32", k)],
            ),
        )

    def check_rows(self, problem) -> int:
        return 64

    def flops(self, problem) -> float:
        m, n, k, _, _ = self._prob(problem)
        return 2.0 * m * n * k
