// gemm_sm100a.cu -- Blackwell (sm_100a) persistent FP8 GEMM megakernel with fused epilogue.
//
//   STATUS: COMPILE-VERIFIED HERE (NVRTC / ptxas for sm_100a), NOT YET RUN ON HARDWARE.
//   No B200 has executed this file. Register / SMEM / spill figures come from ptxas;
//   correctness and timing on a B200 are still open (see docs/SM100A.md).
//
// Computes   C[M,N] (BF16, row-major) = A[M,K] (FP8 E4M3, K-major) x W[N,K]^T (FP8 E4M3,
// K-major), FP32 accumulation in tensor memory, plus the fused epilogue chosen by EPILOGUE:
//   BIAS_POS      (patch_embed)  C = acc + combined[row % SEQ_LEN][col]
//                 combined = bias + pos_embed, precomputed on the host in the blocked
//                 layout [ceil(SEQ_LEN/32)][N/32][32][32]: each 32-column step reads one
//                 contiguous 2 KB block, not rows N*2 bytes apart (L1 locality).
//   BIAS_GELU     (FC1)          C = gelu_tanh(acc + bias[col])
//                 GELU is the tanh form 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))), computed
//                 with tanh.approx.f32 (PyTorch's gelu(approximate="tanh")).
//   BIAS_RESIDUAL (FC2)          C = acc + bias[col] + residual[row][col]   (residual BF16 [M,N])
// The addend (combined or bias) is BF16 or FP32 as ADD_SOURCE says.
//
// Design:
//  * persistent grid of 2-CTA clusters (__cluster_dims__(2,1,1)); a cluster owns a
//    256 x TN output tile at a time, CTA rank r owns rows 128r..128r+127 of it;
//  * warp 0: TMA producer (both CTAs): A box 128x128 B and its half of W (TN/2 x 128 B)
//    into an N_STAGES ring; every stage of both CTAs completes on the leader's mbarrier;
//  * warp 1: TMEM allocator (both CTAs) and, on the leader CTA only, the MMA issuer:
//    tcgen05.mma.cta_group::2.kind::f8f6f4, M=256, N=TN, K=32 per instruction;
//  * warps 2..: NUM_EPI_WARPS epilogue warps; warp w reads TMEM lanes 32*(w%4)..+31; with 5
//    warps the 5th shares lane group 2 with warp 2 and the two split the columns;
//  * one TMEM allocation of 2*TN columns, double-buffered: the epilogue of tile i runs while
//    the MMA of tile i+1 fills the other half;
//  * every epilogue warp polls the mainloop mbarrier itself (one poller broadcasting with
//    bar.sync stalls the others);
//  * TMEM -> registers with tcgen05.ld.32x32b.x32 (or x16), software-pipelined one chunk
//    ahead, + addend, -> BF16 -> per-warp SMEM staging -> coalesced 8/16-byte global stores;
//  * epilogue column bounds are template parameters so every loop unrolls (runtime bounds
//    keep the 5th warp's loops rolled).
//
// Self-contained for NVRTC: no headers, inline PTX for tcgen05 / TMA / mbarrier / cluster.
// Every tunable is an #ifndef-guarded define; every dependent constant is derived below.

// ------------------------------------------------------------------------------------------
// Identifiers used as define values (nonzero so that a misspelt identifier, which the
// preprocessor reads as 0, is caught by the #error checks below).
#ifndef BIAS_POS
#define BIAS_POS 1
#endif
#ifndef BIAS_GELU
#define BIAS_GELU 2
#endif
#ifndef BIAS_RESIDUAL
#define BIAS_RESIDUAL 3
#endif
#ifndef BF16
#define BF16 16
#endif
#ifndef FP32
#define FP32 32
#endif

// ---- problem (the spec passes these from the study's [problem] table) ---------------------
#ifndef M
#define M 928256
#endif
#ifndef N
#define N 768
#endif
#ifndef K
#define K 768
#endif
#ifndef EPILOGUE
#define EPILOGUE BIAS_POS
#endif
#ifndef SEQ_LEN
#define SEQ_LEN 196
#endif

// ---- tier 1 tunables -----------------------------------------------------------------------
#ifndef TN
#define TN 256              // MMA N = output tile width (128 or 256)
#endif
#ifndef N_STAGES
#define N_STAGES 4          // TMA ring depth
#endif
#ifndef NUM_EPI_WARPS
#define NUM_EPI_WARPS 5     // 4, or 5 with the column split
#endif
#ifndef PHASE2_UNROLL
#define PHASE2_UNROLL 8     // unroll of the 32-row coalesced store loop
#endif
#ifndef STAGING_ROW_PAD
#define STAGING_ROW_PAD 16  // bytes of padding per staging row
#endif

// ---- tier 2 tunables -----------------------------------------------------------------------
#ifndef SNAKE_ORDER
#define SNAKE_ORDER 1       // reverse the N order of tiles on odd M rows
#endif
#ifndef TMA_L2_PROMOTION
#define TMA_L2_PROMOTION 0  // host side only: l2_promotion of the A/W tensor maps
#endif
#ifndef ADD_SOURCE
#define ADD_SOURCE BF16     // BF16 or FP32 precomputed addend
#endif
#ifndef TMEM_LOAD_WIDTH
#define TMEM_LOAD_WIDTH 32  // columns per tcgen05.ld (x16 or x32)
#endif
#ifndef COMBINED_LOAD_VEC
#define COMBINED_LOAD_VEC 4 // addend / residual loads: 2 = uint2, 4 = uint4
#endif

// Set by the Python spec to its own SMEM prediction: compilation fails if they disagree.
#ifndef SPEC_SMEM_BYTES
#define SPEC_SMEM_BYTES 0
#endif

// ---- fixed by the design (not tunable) ---------------------------------------------------
#define TM 128              // rows per CTA (TMEM lanes)
#define TK 128              // K bytes per stage = one 128-byte swizzle atom (FP8)
#define CTA_GROUP 2
#define MMA_M (TM * CTA_GROUP)
#define MMA_K 32            // K per tcgen05.mma kind::f8f6f4
#define MMAS_PER_KITER (TK / MMA_K)
#define SWIZZLE_ATOM_ROWS 8
#define SMEM_DESC_SBO (SWIZZLE_ATOM_ROWS * TK)   // 1024: byte stride between 8-row groups
#define MAX_DYN_SMEM 232448 // B200 opt-in maximum per block (227 KB)

// ---- derived --------------------------------------------------------------------------------
#define THREADS (32 * (2 + NUM_EPI_WARPS))
#define B_ROWS (TN / CTA_GROUP)                  // W rows each CTA loads per stage
#define A_STAGE_BYTES (TM * TK)
#define B_STAGE_BYTES (B_ROWS * TK)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define TMA_BYTES STAGE_BYTES                    // expect_tx per CTA per stage
#define TMEM_COLS (2 * TN)                       // double-buffered FP32 accumulator
#define TILES_M (M / MMA_M)
#define TILES_N (N / TN)
#define TOTAL_TILES (TILES_M * TILES_N)
#define K_ITERS (K / TK)
// instruction descriptor: D=F32 (bits 4-5 = 1), A=B=E4M3 (0), K-major both, N>>3 at 17,
// M>>4 at 24.  TN=256 -> 0x10400010, TN=128 -> 0x10200010.
#define IDESC ((1u << 4) | ((unsigned)(TN >> 3) << 17) | ((unsigned)(MMA_M >> 4) << 24))

#define STAGING_ROW_BYTES (TN * 2 + STAGING_ROW_PAD)
#define STAGING_WARP_BYTES (32 * STAGING_ROW_BYTES)
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))
// SMEM offset chain (the spec's derive() mirrors it line by line)
#define OFF_TMEM_ADDR (N_STAGES * STAGE_BYTES)
#define OFF_TMA_MBAR (OFF_TMEM_ADDR + 8)
#define OFF_MMA_MBAR (OFF_TMA_MBAR + N_STAGES * 8)
#define OFF_MAINLOOP_MBAR (OFF_MMA_MBAR + N_STAGES * 8)
#define OFF_EPI_MBAR (OFF_MAINLOOP_MBAR + 2 * 8)
#define OFF_STAGING ALIGN_UP(OFF_EPI_MBAR + 2 * 8, 128)
#define SMEM_BYTES ALIGN_UP(OFF_STAGING + NUM_EPI_WARPS * STAGING_WARP_BYTES, 128)

#define COLS_FULL TN                             // columns of a full epilogue warp
#define COLS_SPLIT (TN / 2)                      // columns of each of the two split warps
#define CPT_FULL (COLS_FULL / 32)                // COLS_PER_THREAD in the coalesced store
#define CPT_SPLIT (COLS_SPLIT / 32)
#define COMB_BLOCK 32                            // blocked combined: 32 x 32 blocks
#define COMB_ROWS_PADDED ALIGN_UP(SEQ_LEN, COMB_BLOCK)

// ---- compile-time validity (the spec rejects these before compiling) -----------------------
#if EPILOGUE != BIAS_POS && EPILOGUE != BIAS_GELU && EPILOGUE != BIAS_RESIDUAL
#error "EPILOGUE must be BIAS_POS, BIAS_GELU or BIAS_RESIDUAL"
#endif
#if ADD_SOURCE != BF16 && ADD_SOURCE != FP32
#error "ADD_SOURCE must be BF16 or FP32"
#endif
#if TN != 128 && TN != 256
#error "TN must be 128 or 256"
#endif
#if NUM_EPI_WARPS != 4 && NUM_EPI_WARPS != 5
#error "NUM_EPI_WARPS must be 4 or 5 (4 TMEM lane groups; a 6th warp saturates TMEM reads)"
#endif
#if TMEM_LOAD_WIDTH != 16 && TMEM_LOAD_WIDTH != 32
#error "TMEM_LOAD_WIDTH must be 16 or 32"
#endif
#if COMBINED_LOAD_VEC != 2 && COMBINED_LOAD_VEC != 4
#error "COMBINED_LOAD_VEC must be 2 (uint2) or 4 (uint4)"
#endif
#if PHASE2_UNROLL < 1 || PHASE2_UNROLL > 32
#error "PHASE2_UNROLL must be in 1..32"
#endif
#if STAGING_ROW_PAD < 0 || STAGING_ROW_PAD % 16 != 0
#error "STAGING_ROW_PAD must be a non-negative multiple of 16 bytes"
#endif
#if M % MMA_M != 0
#error "M must be a multiple of 256 (the 2-CTA tile height)"
#endif
#if N % TN != 0
#error "N must be a multiple of TN"
#endif
#if K % TK != 0
#error "K must be a multiple of 128"
#endif
#if CPT_FULL != 4 && CPT_FULL != 8
#error "COLS_PER_THREAD (TN/32) must be 4 or 8"
#endif
#if NUM_EPI_WARPS == 5 && CPT_SPLIT != 4 && CPT_SPLIT != 8
#error "split COLS_PER_THREAD (TN/64) must be 4 or 8: TN=128 cannot use the 5th epilogue warp"
#endif
#if TMEM_COLS > 512 || (TMEM_COLS & (TMEM_COLS - 1)) != 0 || TMEM_COLS < 32
#error "TMEM_COLS must be a power of two in 32..512"
#endif
#if SMEM_BYTES > MAX_DYN_SMEM
#error "dynamic shared memory exceeds 232448 bytes"
#endif
#if SPEC_SMEM_BYTES != 0 && SPEC_SMEM_BYTES != SMEM_BYTES
#error "the spec's SMEM model disagrees with the kernel's SMEM_BYTES"
#endif
#if (N % COMB_BLOCK) != 0
#error "N must be a multiple of 32 (blocked combined layout)"
#endif

// ---- small types ---------------------------------------------------------------------------
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

// A CUtensorMap is 128 opaque bytes, 64-byte aligned.
struct __align__(64) TmaMap {
  u64 opaque[16];
};

#if ADD_SOURCE == BF16
typedef u16 add_t;
#else
typedef float add_t;
#endif

// ---- PTX helpers ---------------------------------------------------------------------------
static __device__ __forceinline__ u32 smem_addr(const void* p) {
  u64 a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return (u32)a;
}

static __device__ __forceinline__ u32 cluster_ctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

static __device__ __forceinline__ u32 dynamic_smem_size() {
  u32 r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

// shared::cta address -> shared::cluster address of the same offset in CTA `rank`
static __device__ __forceinline__ u32 map_to_rank(u32 a, u32 rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}

static __device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

static __device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

// Wait until the phase of parity `parity` of a local mbarrier has completed.
static __device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}

// Same, with cluster-scope acquire (arrivals come from the peer CTA).
static __device__ __forceinline__ void mbar_wait_cluster(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}

// Arrive (count 1) on an mbarrier given by its shared::cluster address (possibly remote).
static __device__ __forceinline__ void mbar_arrive_cluster(u32 cbar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];"
               :: "r"(cbar) : "memory");
}

static __device__ __forceinline__ void mbar_arrive_expect_tx_cluster(u32 cbar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%0], %1;"
               :: "r"(cbar), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void tma_prefetch_map(const TmaMap* map) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}

// 2-D tiled TMA load into this CTA's SMEM; completion (bytes) is reported to `cbar`, a
// shared::cluster mbarrier address that may live in the peer CTA (.cta_group::2).
static __device__ __forceinline__ void tma_load_2d(u32 dst, const TmaMap* map, int x, int y,
                                                   u32 cbar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".cta_group::2 [%0], [%1, {%2, %3}], [%4];"
      :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(cbar) : "memory");
}

static __device__ __forceinline__ void tc_fence_before() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
static __device__ __forceinline__ void tc_fence_after() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// SM100 shared-memory matrix descriptor, K-major, 128-byte swizzle:
// start>>4 in 0-13, LBO>>4 (unused for swizzled K-major; 1) in 16-29, SBO>>4 in 32-45,
// version 1 at bit 46, base offset 0 (1024-aligned tiles), swizzle mode 2 (128 B) in 61-63.
static __device__ __forceinline__ u64 smem_desc(u32 addr) {
  return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)1 << 16) |
         ((u64)(SMEM_DESC_SBO >> 4) << 32) | ((u64)1 << 46) | ((u64)2 << 61);
}

static __device__ __forceinline__ void mma_f8f6f4(u32 d_tmem, u64 adesc, u64 bdesc, u32 accumulate) {
  asm volatile("{\n\t.reg .pred p;\n\t"
               "setp.ne.u32 p, %4, 0;\n\t"
               "tcgen05.mma.cta_group::2.kind::f8f6f4 [%0], %1, %2, %3, p;\n\t}"
               :: "r"(d_tmem), "l"(adesc), "l"(bdesc), "r"((u32)IDESC), "r"(accumulate)
               : "memory");
}

// Arrive on the mbarrier at this SMEM offset in both CTAs (mask 0b11) once all previously
// issued tcgen05.mma of this thread have completed.
static __device__ __forceinline__ void mma_commit_both(u32 bar) {
  asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster"
               ".multicast::cluster.b64 [%0], %1;"
               :: "r"(bar), "h"((u16)0x3) : "memory");
}

// TMEM -> registers: 32 lanes x W columns of 32 bits (one column per register).
template <int W> struct TmemLd;
template <> struct TmemLd<32> {
  static __device__ __forceinline__ void load(u32 taddr, u32 (&r)[32]) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]),
          "=r"(r[13]), "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]),
          "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]),
          "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]),
          "=r"(r[31])
        : "r"(taddr));
  }
  // tcgen05.wait::ld, with the registers as in/out operands so that no use of them can be
  // scheduled before the wait.
  static __device__ __forceinline__ void wait(u32 (&r)[32]) {
    asm volatile("tcgen05.wait::ld.sync.aligned;"
                 : "+r"(r[0]), "+r"(r[1]), "+r"(r[2]), "+r"(r[3]), "+r"(r[4]), "+r"(r[5]),
                   "+r"(r[6]), "+r"(r[7]), "+r"(r[8]), "+r"(r[9]), "+r"(r[10]), "+r"(r[11]),
                   "+r"(r[12]), "+r"(r[13]), "+r"(r[14]), "+r"(r[15]), "+r"(r[16]),
                   "+r"(r[17]), "+r"(r[18]), "+r"(r[19]), "+r"(r[20]), "+r"(r[21]),
                   "+r"(r[22]), "+r"(r[23]), "+r"(r[24]), "+r"(r[25]), "+r"(r[26]),
                   "+r"(r[27]), "+r"(r[28]), "+r"(r[29]), "+r"(r[30]), "+r"(r[31])
                 :: "memory");
  }
};
template <> struct TmemLd<16> {
  static __device__ __forceinline__ void load(u32 taddr, u32 (&r)[16]) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x16.b32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, [%16];"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]),
          "=r"(r[13]), "=r"(r[14]), "=r"(r[15])
        : "r"(taddr));
  }
  static __device__ __forceinline__ void wait(u32 (&r)[16]) {
    asm volatile("tcgen05.wait::ld.sync.aligned;"
                 : "+r"(r[0]), "+r"(r[1]), "+r"(r[2]), "+r"(r[3]), "+r"(r[4]), "+r"(r[5]),
                   "+r"(r[6]), "+r"(r[7]), "+r"(r[8]), "+r"(r[9]), "+r"(r[10]), "+r"(r[11]),
                   "+r"(r[12]), "+r"(r[13]), "+r"(r[14]), "+r"(r[15])
                 :: "memory");
  }
};

// two FP32 -> one BF16x2 word (lo in bits 0-15), round to nearest even
static __device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
static __device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xFFFF0000u); }

static __device__ __forceinline__ void st_shared_v4(u32 a, u32 x, u32 y, u32 z, u32 w) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(a), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
}

#if EPILOGUE == BIAS_GELU
static __device__ __forceinline__ float gelu_tanh(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
  return 0.5f * x * (1.0f + t);
}
#endif

// ---- vector loads of W consecutive addend values into FP32 ---------------------------------
// Raw words are loaded first (before the TMEM wait) and converted after it.
template <typename T, int W> struct AddRaw;
// BF16: W values = W/2 words
template <int W> struct AddRaw<u16, W> {
  static constexpr int WORDS = W / 2;
  u32 w[WORDS];
  __device__ __forceinline__ void load(const u16* p) {
#if COMBINED_LOAD_VEC == 4
#pragma unroll
    for (int i = 0; i < WORDS / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
#else
#pragma unroll
    for (int i = 0; i < WORDS / 2; ++i) {
      const uint2 v = reinterpret_cast<const uint2*>(p)[i];
      w[2 * i] = v.x; w[2 * i + 1] = v.y;
    }
#endif
  }
  __device__ __forceinline__ float get(int j) const {
    return (j & 1) ? bf16_hi(w[j >> 1]) : bf16_lo(w[j >> 1]);
  }
};
// FP32: W values = W words
template <int W> struct AddRaw<float, W> {
  u32 w[W];
  __device__ __forceinline__ void load(const float* p) {
#if COMBINED_LOAD_VEC == 4
#pragma unroll
    for (int i = 0; i < W / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
#else
#pragma unroll
    for (int i = 0; i < W / 2; ++i) {
      const uint2 v = reinterpret_cast<const uint2*>(p)[i];
      w[2 * i] = v.x; w[2 * i + 1] = v.y;
    }
#endif
  }
  __device__ __forceinline__ float get(int j) const { return __uint_as_float(w[j]); }
};

// ---- epilogue of one tile for one warp: columns [NC_START, NC_END) of its 32 rows ---------
// Phase 1: TMEM -> regs (+addend, epilogue math) -> BF16 -> staging (row = lane).
// Release the TMEM buffer to the MMA warp.
// Phase 2: staging -> global, one 32-lane coalesced row store per iteration.
template <int NC_START, int NC_END>
static __device__ __forceinline__ void epilogue_tile(
    u32 taddr,          // TMEM address of (lane group, buffer column 0)
    u32 stg,            // this warp's staging buffer (shared::cta address)
    u32 lane, int row0, int n0,
    u16* __restrict__ out, const add_t* __restrict__ add_src, const u16* __restrict__ residual,
    u32 epi_cbar) {     // leader CTA's "accumulator buffer free" mbarrier (cluster address)
  constexpr int CW = TMEM_LOAD_WIDTH;
  constexpr int NCOLS = NC_END - NC_START;
  constexpr int NCH = NCOLS / CW;
  constexpr int CPT = NCOLS / 32;
  static_assert(NCOLS % CW == 0, "chunking");
  static_assert(CPT == 4 || CPT == 8, "COLS_PER_THREAD must be 4 or 8");

  const int row = row0 + (int)lane;
#if EPILOGUE == BIAS_POS
  const int pos = row % SEQ_LEN;
  // blocked combined [COMB_ROWS_PADDED/32][N/32][32][32]: this lane's row inside its block row
  const add_t* add_row = add_src + (u64)(pos >> 5) * (N / COMB_BLOCK) * (COMB_BLOCK * COMB_BLOCK) +
                         (pos & 31) * COMB_BLOCK;
#elif EPILOGUE == BIAS_RESIDUAL
  const u16* res_row = residual + (u64)row * N + n0;
#endif

  u32 acc[CW];
  TmemLd<CW>::load(taddr + NC_START, acc);
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
    const int c = NC_START + ch * CW;   // column inside the tile
    // global loads first: their latency hides under the TMEM load's
#if EPILOGUE == BIAS_POS
    const int gc = n0 + c;
    AddRaw<add_t, CW> add;
    add.load(add_row + (gc >> 5) * (COMB_BLOCK * COMB_BLOCK) + (gc & 31));
#else
    AddRaw<add_t, CW> add;
    add.load(add_src + n0 + c);   // bias: same address in every lane (broadcast)
#endif
#if EPILOGUE == BIAS_RESIDUAL
    AddRaw<u16, CW> res;
    res.load(res_row + c);
#endif
    TmemLd<CW>::wait(acc);
    u32 packed[CW / 2];
#pragma unroll
    for (int j = 0; j < CW; j += 2) {
      float v0 = __uint_as_float(acc[j]) + add.get(j);
      float v1 = __uint_as_float(acc[j + 1]) + add.get(j + 1);
#if EPILOGUE == BIAS_GELU
      v0 = gelu_tanh(v0);
      v1 = gelu_tanh(v1);
#elif EPILOGUE == BIAS_RESIDUAL
      v0 += res.get(j);
      v1 += res.get(j + 1);
#endif
      packed[j / 2] = pack_bf16x2(v0, v1);
    }
    if (ch + 1 < NCH) TmemLd<CW>::load(taddr + c + CW, acc);   // prefetch the next chunk
    const u32 dst = stg + lane * STAGING_ROW_BYTES + (c - NC_START) * 2;
#pragma unroll
    for (int q = 0; q < CW / 8; ++q)
      st_shared_v4(dst + 16 * q, packed[4 * q], packed[4 * q + 1], packed[4 * q + 2], packed[4 * q + 3]);
  }

  // all TMEM reads of this buffer are complete (last wait above): hand it back to the MMA
  tc_fence_before();
  __syncwarp();
  if (lane == 0) mbar_arrive_cluster(epi_cbar);

  // Phase 2: coalesced stores, row by row
  u16* out_base = out + (u64)row0 * N + n0 + NC_START + lane * CPT;
  const u32 src_base = stg + lane * (CPT * 2);
#pragma unroll PHASE2_UNROLL
  for (int r = 0; r < 32; ++r) {
    const u32 src = src_base + r * STAGING_ROW_BYTES;
    u16* dst = out_base + (u64)r * N;
    if (CPT == 8) {
      u32 x, y, z, w;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(src) : "memory");
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                   :: "l"(dst), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
    } else {
      u32 x, y;
      asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(x), "=r"(y) : "r"(src) : "memory");
      asm volatile("st.global.v2.b32 [%0], {%1, %2};" :: "l"(dst), "r"(x), "r"(y) : "memory");
    }
  }
  __syncwarp();   // staging is rewritten by the next tile
}

// ---- tile order ----------------------------------------------------------------------------
static __device__ __forceinline__ void tile_coords(int t, int& tm, int& tn) {
  tm = t / TILES_N;
  tn = t - tm * TILES_N;
#if SNAKE_ORDER
  if (tm & 1) tn = TILES_N - 1 - tn;
#endif
}

// ---- the kernel ----------------------------------------------------------------------------
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(THREADS, 1)
gemm_sm100a(const __grid_constant__ TmaMap tmap_a,   // A [M, K] uint8, box 128 x 128 B
            const __grid_constant__ TmaMap tmap_w,   // W [N, K] uint8, box TN/2 x 128 B
            u16* __restrict__ out,                   // C [M, N] BF16
            const add_t* __restrict__ add_src,       // blocked combined, or bias [N]
            const u16* __restrict__ residual) {      // [M, N] BF16 (BIAS_RESIDUAL) or null
  extern __shared__ __align__(1024) unsigned char smem[];

  const u32 warp = threadIdx.x >> 5;
  const u32 lane = threadIdx.x & 31;
  const u32 rank = cluster_ctarank();
  const int cluster_id = (int)(blockIdx.x >> 1);
  const int num_clusters = (int)(gridDim.x >> 1);

  const u32 sbase = smem_addr(smem);
  const u32 tmem_slot = sbase + OFF_TMEM_ADDR;
  const u32 tma_bar = sbase + OFF_TMA_MBAR;         // [N_STAGES], used on the leader
  const u32 mma_bar = sbase + OFF_MMA_MBAR;         // [N_STAGES], both CTAs
  const u32 mainloop_bar = sbase + OFF_MAINLOOP_MBAR; // [2], both CTAs
  const u32 epi_bar = sbase + OFF_EPI_MBAR;         // [2], used on the leader

  // ---- setup ----
  if (warp == 0 && lane == 0) {
    // the layout assumes a 1024-aligned base (128 B swizzle) and the full dynamic size
    if ((sbase & 1023u) != 0 || dynamic_smem_size() < (u32)SMEM_BYTES) __trap();
    tma_prefetch_map(&tmap_a);
    tma_prefetch_map(&tmap_w);
    for (int s = 0; s < N_STAGES; ++s) {
      mbar_init(tma_bar + 8 * s, 2);                 // one expect_tx arrival per CTA
      mbar_init(mma_bar + 8 * s, 1);                 // one multicast commit
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(mainloop_bar + 8 * b, 1);            // one multicast commit
      mbar_init(epi_bar + 8 * b, 2 * NUM_EPI_WARPS); // every epilogue warp of both CTAs
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  } else if (warp == 1) {
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;"
                 :: "r"(tmem_slot), "r"((u32)TMEM_COLS) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
  }
  tc_fence_before();
  cluster_sync_all();
  tc_fence_after();
  const u32 tmem_base = *reinterpret_cast<volatile u32*>(smem + OFF_TMEM_ADDR);

  if (warp == 0) {
    // ================= TMA producer (both CTAs) =================
    if (lane == 0) {
      int stage = 0;
      u32 phase = 0;
      for (int t = cluster_id; t < TOTAL_TILES; t += num_clusters) {
        int tm, tn;
        tile_coords(t, tm, tn);
        const int a_row = tm * MMA_M + (int)rank * TM;
        const int w_row = tn * TN + (int)rank * B_ROWS;
        for (int kb = 0; kb < K_ITERS; ++kb) {
          mbar_wait(mma_bar + 8 * stage, phase ^ 1);   // slot released by the MMA
          const u32 full = map_to_rank(tma_bar + 8 * stage, 0);
          mbar_arrive_expect_tx_cluster(full, (u32)TMA_BYTES);
          const u32 dst = sbase + stage * STAGE_BYTES;
          tma_load_2d(dst, &tmap_a, kb * TK, a_row, full);
          tma_load_2d(dst + A_STAGE_BYTES, &tmap_w, kb * TK, w_row, full);
          if (++stage == N_STAGES) { stage = 0; phase ^= 1; }
        }
      }
      // drain: every issued stage released, so no multicast arrival targets an exited CTA
      for (int s = 0; s < N_STAGES; ++s) {
        mbar_wait(mma_bar + 8 * stage, phase ^ 1);
        if (++stage == N_STAGES) { stage = 0; phase ^= 1; }
      }
    }
    __syncwarp();
  } else if (warp == 1) {
    // ================= MMA issuer (leader CTA only) =================
    if (rank == 0 && lane == 0) {
      int stage = 0;
      u32 phase = 0;
      int local = 0;
      for (int t = cluster_id; t < TOTAL_TILES; t += num_clusters, ++local) {
        const u32 buf = (u32)local & 1;
        const u32 use = (u32)local >> 1;
        mbar_wait_cluster(epi_bar + 8 * buf, (use & 1) ^ 1);   // accumulator buffer drained
        tc_fence_after();
        const u32 d_tmem = tmem_base + buf * TN;
        for (int kb = 0; kb < K_ITERS; ++kb) {
          mbar_wait(tma_bar + 8 * stage, phase);                // both CTAs' tiles landed
          tc_fence_after();
          const u32 a_addr = sbase + stage * STAGE_BYTES;
          const u32 b_addr = a_addr + A_STAGE_BYTES;
#pragma unroll
          for (int k = 0; k < MMAS_PER_KITER; ++k)
            mma_f8f6f4(d_tmem, smem_desc(a_addr + k * MMA_K), smem_desc(b_addr + k * MMA_K),
                       (kb | k) != 0);
          mma_commit_both(mma_bar + 8 * stage);                 // frees the slot in both CTAs
          if (++stage == N_STAGES) { stage = 0; phase ^= 1; }
        }
        mma_commit_both(mainloop_bar + 8 * buf);                // accumulator ready, both CTAs
      }
    }
    __syncwarp();
  } else {
    // ================= epilogue warps =================
    const u32 ew = warp - 2;              // epilogue warp index
    const u32 group = warp & 3;           // TMEM lane group this warp may access
    const u32 stg = sbase + OFF_STAGING + ew * STAGING_WARP_BYTES;
    const u32 epi_cbar0 = map_to_rank(epi_bar, 0);
    int local = 0;
    for (int t = cluster_id; t < TOTAL_TILES; t += num_clusters, ++local) {
      int tm, tn;
      tile_coords(t, tm, tn);
      const u32 buf = (u32)local & 1;
      const u32 use = (u32)local >> 1;
      mbar_wait(mainloop_bar + 8 * buf, use & 1);   // each warp polls for itself (no bar.sync broadcast)
      tc_fence_after();
      const u32 taddr = tmem_base + ((group * 32) << 16) + buf * TN;
      const int row0 = tm * MMA_M + (int)rank * TM + (int)group * 32;
      const int n0 = tn * TN;
      const u32 ecbar = epi_cbar0 + 8 * buf;
#if NUM_EPI_WARPS == 5
      if (ew == 0)
        epilogue_tile<0, TN / 2>(taddr, stg, lane, row0, n0, out, add_src, residual, ecbar);
      else if (ew == 4)
        epilogue_tile<TN / 2, TN>(taddr, stg, lane, row0, n0, out, add_src, residual, ecbar);
      else
#endif
        epilogue_tile<0, TN>(taddr, stg, lane, row0, n0, out, add_src, residual, ecbar);
    }
  }

  // ---- teardown ----
  tc_fence_before();
  cluster_sync_all();
  if (warp == 1) {
    tc_fence_after();
    asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;"
                 :: "r"(tmem_base), "r"((u32)TMEM_COLS) : "memory");
  }
}
