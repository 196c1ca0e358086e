// Hopper (sm_90a) FP8 E4M3 GEMM with fused epilogues, compiled by NVRTC.
//
//   C[M,N] (BF16, row-major) = A[M,K] (E4M3, K-major) x W[N,K]^T (E4M3, K-major), FP32 accumulate,
//   then the epilogue selected by EPILOGUE:
//     BIAS_POS      C = acc + combined[row % SEQ_LEN, col]          (combined = bias + pos_embed, BF16)
//     BIAS_GELU     C = gelu_tanh(acc + bias[col])                   (tanh approximation of GELU)
//     BIAS_RESIDUAL C = acc + bias[col] + residual[row, col]        (residual BF16 [M,N])
//
// Structure: persistent grid (one CTA per SM), warp-specialised. Warpgroup 0 is the producer
// (setmaxnreg down; one thread issues TMA loads of A and W tiles into an N_STAGES ring completing
// on mbarriers). Warpgroups 1..NUM_CONSUMERS are consumers (setmaxnreg up) issuing
// wgmma.m64nBLOCK_Nk32.f32.e4m3.e4m3 from shared memory. PINGPONG=0: the consumers split each
// BLOCK_M x BLOCK_N tile by rows; PINGPONG=1: consumers take alternate tiles, so one consumer's
// epilogue overlaps the other's main loop. The epilogue adds in FP32 registers, then either
// writes BF16 into a 128B-swizzled staging tile and TMA-stores it (STORE_TMA=1, asynchronous:
// the store drains while the next tile's main loop runs) or stores bf16x2 straight from the
// accumulator fragments (STORE_TMA=0). EXTRA_TMA=1 TMA-loads the combined rows (from a
// host-side extended table, rows SEQ_LEN + WG_M) or the residual tile into the staging buffer
// at the start of the tile's main loop, so that operand is on chip by the epilogue.
//
// No headers: NVRTC compiles this file alone; every PTX instruction is inline asm.

typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned short uint16_t;

// ---------------------------------------------------------------- epilogue identifiers
#ifndef BIAS_POS
#define BIAS_POS 0
#endif
#ifndef BIAS_GELU
#define BIAS_GELU 1
#endif
#ifndef BIAS_RESIDUAL
#define BIAS_RESIDUAL 2
#endif

// ---------------------------------------------------------------- problem (from the study)
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

// ---------------------------------------------------------------- tier 1 (numbers)
#ifndef BLOCK_M
#define BLOCK_M 128        // rows of a CTA tile (PINGPONG=1: rows of one consumer's tile)
#endif
#ifndef BLOCK_N
#define BLOCK_N 256        // columns of a tile = wgmma N (64, 96, 128, 160, 192, 256); need not divide N:
                           // the last column block is then partial (STORE_TMA=1 only; see PARTIAL_N)
#endif
#ifndef N_STAGES
#define N_STAGES 3         // depth of the TMA -> wgmma shared-memory ring
#endif
#ifndef NUM_CONSUMERS
#define NUM_CONSUMERS 2    // consumer warpgroups (1 or 2)
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1        // CTAs of a cluster (along M) that share each W tile by TMA multicast
#endif
#ifndef GROUP_M
#define GROUP_M 8          // raster: tiles walk GROUP_M row blocks before the next column block
#endif
#ifndef MMA_INFLIGHT
#define MMA_INFLIGHT 0     // when a consumed stage is released: 0 = after wgmma.wait_group 0 each k-block (the
                           // tensor pipe drains once per k-block); 1 = one k-block late (the whole previous
                           // group stays in flight); 2 = split: the next k-block's first k32 step is committed
                           // alone and the previous stage is released once everything before it completed
                           // (no drain, released at most one k32 step late; SPLIT_K32 steps with MMA_INFLIGHT=2)
#endif
#ifndef SPLIT_K32
#define SPLIT_K32 1        // MMA_INFLIGHT=2: k32 steps of the next block queued before the previous stage is released
                           // (1: released earliest; 2: more queued work covers the release and the issue of the rest)
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232  // setmaxnreg.inc for consumers
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40   // setmaxnreg.dec for the producer warpgroup
#endif

// ---------------------------------------------------------------- tier 2 (code paths)
#ifndef PINGPONG
#define PINGPONG 0         // 0: consumers split a tile by rows; 1: consumers alternate tiles
#endif
#ifndef STORE_TMA
#define STORE_TMA 1        // 1: swizzled smem staging + TMA store; 0: bf16x2 stores from registers
#endif
#ifndef EXTRA_TMA
#define EXTRA_TMA 0        // 1: combined rows / residual tile TMA-loaded into staging (needs STORE_TMA)
#endif
#ifndef SNAKE_ORDER
#define SNAKE_ORDER 0      // 1: reverse the column-block order in every other raster group
#endif
#ifndef L2_PROMO
#define L2_PROMO 0         // TMA L2 promotion of the A/W maps (bytes; used by the host launch only)
#endif
#ifndef EPI_BATCH
#define EPI_BATCH 0        // EXTRA_TMA: staged operand words read ahead per fragment row before use
                           // (0: read, add, store one word at a time; the volatile shared-memory
                           // accesses then run strictly in order, one load latency per word)
#endif
#ifndef GELU_F16X2
#define GELU_F16X2 0       // BIAS_GELU: 1 = tanh of a column pair in one tanh.approx.f16x2 (half the MUFU
                           // work of two tanh.approx.f32; tanh rounded to FP16, ~1e-3 absolute) and
                           // the polynomial factored to 5 FP32 ops per element (0: today's FP32 path)
#endif
#ifndef EPI_SLOTS
#define EPI_SLOTS 0        // 0: staging holds the whole WG_M x BLOCK_N tile (one TMA-store group per tile);
                           // R > 0: a ring of R 64-column slabs per consumer, one TMA-store group per slab
                           // (smaller staging -> deeper ring of stages; needs STORE_TMA=1, EXTRA_TMA=0)
#endif

#ifndef CLUSTER_RELEASE
#define CLUSTER_RELEASE 0  // CLUSTER_M > 1: how a consumed stage is released to the cluster's producers.
                           // 0: thread 0 arrives on every CTA's empty barrier with .release.cluster
                           // (ptxas emits MEMBAR.ALL.GPU + ERRBAR per arrive, on the wgmma critical path);
                           // 1: lane r signals CTA r with a CTA-scope arrive (no GPU-scope fence: the
                           // stage's wgmma reads are complete after wgmma.wait_group)
#endif
#ifndef BIAS_ACC
#define BIAS_ACC 0         // BIAS_GELU / BIAS_RESIDUAL: 1 = the accumulator starts at bias[col] (first wgmma
                           // accumulates onto it) instead of a bias add in the epilogue
#endif
#ifndef GELU_H2
#define GELU_H2 0          // BIAS_GELU: 1 = GELU of a column pair in f16x2 arithmetic after the FP32 bias add
                           // (satfinite f16 input; 5 half2 ops + 1 tanh.approx.f16x2 per pair)
#endif

#ifndef SHARED_STAGING
#define SHARED_STAGING 0   // PINGPONG: 1 = one staging tile for both consumers (their epilogues never overlap);
                           // a producer-warpgroup thread (the storer) TMA-stores each staged tile and then
                           // refills the staging for the next tile (EXTRA_TMA operand, or just 'free'), so
                           // the second staging tile's shared memory can hold another stage
#endif

#ifndef PREFETCH_A
#define PREFETCH_A 0       // 1: at the start of each tile the producer whose next tile is the first visit of that
                           // tile's A row block prefetches those rows into L2 (cp.async.bulk.prefetch.tensor), so
                           // the CTAs that read the row block next do not all wait for HBM in their main loops
#endif

#ifndef PROMOTE_EVERY
#define PROMOTE_EVERY 0    // precision: 0 = the wgmma accumulator holds the whole K sum (FP8 wgmma adds with reduced
                           // precision: cuBLAS's "fast accumulation" numerics); P > 0 = every P k-blocks (P x 128 of K)
                           // the wgmma partial sum is added into a second, FP32 accumulator and the wgmma one restarts
                           // (DeepGEMM / CUTLASS promotion: cuBLAS's precise mode). Costs ACC registers twice.
#endif
#ifndef UNROLL_K
#define UNROLL_K 0         // k-blocks of the K loop unrolled together (at most 8, a divisor of K / BLOCK_K: all of them
                           // unrolls the loop whole; PROMOTE_SPLIT always does); 0 = the compiler's choice. ptxas then
                           // schedules those k-blocks at once: it pays or costs depending on the config (measured)
#endif
#ifndef PROMOTE_SPLIT
#define PROMOTE_SPLIT 0    // PROMOTE_EVERY > 0: 1 = the accumulator's two column halves are two wgmma chains (N/2 each,
                           // own commit groups), so a window ends by promoting one half while the other's wgmmas
                           // still run, instead of draining the tensor pipe (wgmma.wait_group 0) to promote all of
                           // it; one k-block stays in flight, as with MMA_INFLIGHT=1 (which it needs)
#endif

#ifndef EPI_DIRECT
#define EPI_DIRECT 0       // 1 = no staging at all (needs STORE_TMA=0, EXTRA_TMA=0, EPI_SLOTS=0): the epilogue operand
                           // (combined rows / bias + residual / bias) is the accumulator start, its words loaded
                           // into registers during the previous tile's last k-blocks (PF_K); the epilogue packs
                           // BF16, transposes 4x4 words inside each lane quad (4 shfl.bfly) and stores 16 bytes
                           // per lane (st.global.v4) straight from registers. Frees the staging smem for stages.
#endif

// ---------------------------------------------------------------- test hooks
#ifndef BUG_POS_OFF_BY_ONE
#define BUG_POS_OFF_BY_ONE 0   // 1: deliberately wrong row % SEQ_LEN (must be caught as mismatch)
#endif
#ifndef DIAG
#define DIAG 0   // benchmark only, never in a study: 1 = CTA 0 records its SM's clock64 and the global timer at
#endif           // start and end of every launch (gemm_diag): the SM clock the kernel really ran at;
                 // 2 = the same with the wgmmas left out: what the memory pipeline alone takes

// ---------------------------------------------------------------- derived constants
#define BLOCK_K 128                                   // one 128-byte swizzle atom of FP8
#define K_ITERS (K / BLOCK_K)
#define MMA_K 32                                      // K of one wgmma (bytes of FP8)
#define TILES_M (M / BLOCK_M)
#define TILES_N ((N + BLOCK_N - 1) / BLOCK_N)        // ceil: the last column block may be partial
#define PARTIAL_N (N % BLOCK_N != 0)                  // W rows >= N: TMA zero fill; columns >= N: never stored
#define TOTAL_TILES (TILES_M * TILES_N)
#define UNITS_M (TILES_M / CLUSTER_M)                 // scheduling unit = CLUSTER_M row blocks
#define TOTAL_UNITS (UNITS_M * TILES_N)
#define B_SLICE_ROWS (BLOCK_N / CLUSTER_M)            // W rows each cluster CTA loads and multicasts
#define THREADS (128 * (NUM_CONSUMERS + 1))
#if PINGPONG
#define WG_M BLOCK_M                                  // rows one consumer owns per tile
#define STAGE_CONSUMERS 1                             // consumers that read each stage
#else
#define WG_M (BLOCK_M / NUM_CONSUMERS)
#define STAGE_CONSUMERS NUM_CONSUMERS
#endif
#define WG_M_TILES (WG_M / 64)
#define ACC_N (BLOCK_N / 2)                           // FP32 accumulators per thread per m64 block
#define A_STAGE_BYTES (BLOCK_M * BLOCK_K)
#define B_STAGE_BYTES (BLOCK_N * BLOCK_K)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define STAGE_TX_BYTES (BLOCK_M * BLOCK_K + BLOCK_N * BLOCK_K)   // = the two TMA boxes
#define EPI_SLAB_COLS 64                              // BF16 columns per 128-byte swizzled slab
#define EPI_SLABS (BLOCK_N / EPI_SLAB_COLS)           // whole 64-column slabs (staged, TMA-stored)
#define TAIL_COLS (BLOCK_N % EPI_SLAB_COLS)           // 0 or 32: columns past the slabs, stored from registers
#define STAGED_J (EPI_SLABS * 8)                      // 8-column fragment groups that go through staging
#define B_SLICE_BYTES (B_SLICE_ROWS * BLOCK_K)
#if EPI_SLOTS
#define EPI_RING EPI_SLOTS                            // staging slabs per consumer (ring)
#define STAGING_BYTES_PER_WG (WG_M * EPI_SLAB_COLS * 2 * EPI_RING)
#else
#define EPI_RING EPI_SLABS
#define STAGING_BYTES_PER_WG (WG_M * EPI_SLABS * EPI_SLAB_COLS * 2)
#endif
#define EPI_SLAB_BYTES (WG_M * EPI_SLAB_COLS * 2)     // one 64-column slab of a consumer's tile
#if SHARED_STAGING
#define STAGING_BYTES STAGING_BYTES_PER_WG
#elif STORE_TMA || EXTRA_TMA
#define STAGING_BYTES (NUM_CONSUMERS * STAGING_BYTES_PER_WG)
#else
#define STAGING_BYTES 0
#endif
#define EXTRA_TX_BYTES (WG_M * EPI_SLAB_COLS * 2 * EPI_SLABS)
#define EMPTY_ARRIVALS (STAGE_CONSUMERS * CLUSTER_M)
#define OPND_WORDS ((EPI_DIRECT && EPILOGUE != BIAS_GELU) ? WG_M_TILES * 2 * (BLOCK_N / 8) : 1)   // prefetched words
#define PF_K (K_ITERS >= 2 ? K_ITERS - 2 : 0)         // EPI_DIRECT: k-block that issues the next tile's operand loads
#define EPI_ADD_BIAS ((EPILOGUE == BIAS_GELU || EPILOGUE == BIAS_RESIDUAL) && !BIAS_ACC)   // bias added in the epilogue
#define BARRIER_BYTES (8 * (2 * N_STAGES + 2 * NUM_CONSUMERS + SHARED_STAGING))
#define SMEM_ALIGN 1024
#define SMEM_BYTES (SMEM_ALIGN + N_STAGES * STAGE_BYTES + STAGING_BYTES + BARRIER_BYTES)

// ---------------------------------------------------------------- compile-time checks
static_assert(K % BLOCK_K == 0, "K must be a multiple of BLOCK_K");
static_assert(M % BLOCK_M == 0, "M must be a multiple of BLOCK_M");
static_assert(!PARTIAL_N || (STORE_TMA && !EPI_SLOTS && !EPI_DIRECT), "a partial last column block needs STORE_TMA=1, EPI_SLOTS=0, EPI_DIRECT=0");
static_assert(!PARTIAL_N || N % 8 == 0, "partial column block: N a multiple of 8 (masks per 8-column group)");
static_assert(TAIL_COLS == 0 || TAIL_COLS == 32, "BLOCK_N % 64 is 0 or 32");
static_assert(BLOCK_N % 32 == 0 && BLOCK_N >= 64 && BLOCK_N <= 256, "BLOCK_N: 64..256, multiple of 32");
static_assert(NUM_CONSUMERS == 1 || NUM_CONSUMERS == 2, "NUM_CONSUMERS is 1 or 2");
static_assert(WG_M % 64 == 0 && WG_M_TILES >= 1, "rows per consumer must be a multiple of 64");
static_assert(BLOCK_M <= 256 && BLOCK_N <= 256, "TMA box dims are at most 256");
static_assert(N_STAGES >= 2, "at least two stages");
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2 || CLUSTER_M == 4, "CLUSTER_M is 1, 2 or 4");
static_assert(TILES_M % CLUSTER_M == 0, "row blocks must pair up in a cluster");
static_assert(B_SLICE_ROWS % 8 == 0, "multicast slice of W: whole 8-row swizzle groups");
static_assert(!PINGPONG || N_STAGES <= K_ITERS, "PINGPONG needs N_STAGES <= K_ITERS (mbarrier parity)");
static_assert(MMA_INFLIGHT >= 0 && MMA_INFLIGHT <= 2, "MMA_INFLIGHT is 0, 1 or 2");
static_assert(!EPI_SLOTS || TAIL_COLS == 0, "EPI_SLOTS needs BLOCK_N % 64 == 0");
static_assert(!EXTRA_TMA || STORE_TMA, "EXTRA_TMA needs STORE_TMA");
static_assert(EPI_BATCH >= 0 && (EPI_BATCH == 0 || STAGED_J % EPI_BATCH == 0), "EPI_BATCH divides the staged groups (BLOCK_N / 64) * 8");
static_assert(GELU_F16X2 == 0 || GELU_F16X2 == 1, "GELU_F16X2 is 0 or 1");
static_assert(EPI_SLOTS >= 0 && EPI_SLOTS <= 4, "EPI_SLOTS is 0..4");
static_assert(!EPI_SLOTS || (STORE_TMA && !EXTRA_TMA), "EPI_SLOTS > 0 needs STORE_TMA=1 and EXTRA_TMA=0");
static_assert(!EPI_SLOTS || EPI_SLOTS <= EPI_SLABS, "EPI_SLOTS at most BLOCK_N / 64");
static_assert(CLUSTER_RELEASE == 0 || CLUSTER_RELEASE == 1, "CLUSTER_RELEASE is 0 or 1");
static_assert(PREFETCH_A == 0 || PREFETCH_A == 1, "PREFETCH_A is 0 or 1");
static_assert(SPLIT_K32 >= 1 && SPLIT_K32 < BLOCK_K / MMA_K, "SPLIT_K32: 1 .. k32 steps per block - 1");
static_assert(SHARED_STAGING == 0 || (SHARED_STAGING == 1 && PINGPONG && STORE_TMA && !EPI_SLOTS && !EPI_DIRECT),
              "SHARED_STAGING needs PINGPONG=1, STORE_TMA=1, EPI_SLOTS=0, EPI_DIRECT=0");
static_assert(BIAS_ACC == 0 || (BIAS_ACC == 1 && EPILOGUE != BIAS_POS), "BIAS_ACC is 0 or 1, not for BIAS_POS");
static_assert(GELU_H2 == 0 || (GELU_H2 == 1 && EPILOGUE == BIAS_GELU && !GELU_F16X2), "GELU_H2: BIAS_GELU, not with GELU_F16X2");
static_assert(EPI_DIRECT == 0 || (EPI_DIRECT == 1 && !STORE_TMA && !EXTRA_TMA && !EPI_SLOTS), "EPI_DIRECT needs STORE_TMA=0, EXTRA_TMA=0, EPI_SLOTS=0");
static_assert(PROMOTE_EVERY >= 0 && PROMOTE_EVERY <= K_ITERS, "PROMOTE_EVERY: 0 (off) .. K / BLOCK_K k-blocks");
static_assert(UNROLL_K == 0 || (UNROLL_K >= 1 && UNROLL_K <= 8 && K_ITERS % UNROLL_K == 0 && !PROMOTE_SPLIT),
              "UNROLL_K: 0, or 1..8 dividing K / BLOCK_K, not with PROMOTE_SPLIT (which unrolls the loop whole)");
static_assert(PROMOTE_SPLIT == 0 || (PROMOTE_SPLIT == 1 && PROMOTE_EVERY && MMA_INFLIGHT == 1 && DIAG != 2 &&
              (BLOCK_N == 128 || BLOCK_N == 192 || BLOCK_N == 256) && K_ITERS <= 8),
              "PROMOTE_SPLIT: PROMOTE_EVERY > 0, MMA_INFLIGHT=1, BLOCK_N 128, 192 or 256 (halves of a carried wgmma N), "
              "K / BLOCK_K <= 8 (its k-blocks are unrolled)");
static_assert(CONSUMER_REGS % 8 == 0 && PRODUCER_REGS % 8 == 0, "setmaxnreg takes multiples of 8");
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * NUM_CONSUMERS <= 65536, "register file");
static_assert(SMEM_BYTES <= 232448, "dynamic shared memory limit of sm_90");
#ifdef EXPECT_SMEM_BYTES   // the spec's model, passed in by tests: must equal what the kernel lays out
static_assert(SMEM_BYTES == EXPECT_SMEM_BYTES, "spec smem model disagrees with the kernel");
#endif
static_assert(EPILOGUE == BIAS_POS || EPILOGUE == BIAS_GELU || EPILOGUE == BIAS_RESIDUAL, "EPILOGUE");

// ---------------------------------------------------------------- tiny types
struct __align__(64) TmaDesc { uint64_t opaque[16]; };   // CUtensorMap, 128 bytes

// ---------------------------------------------------------------- PTX helpers
static __device__ __forceinline__ uint32_t smem_u32(const void* p) {
  uint32_t r;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaDesc* map, uint32_t bar, int c_inner, int c_outer) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c_inner), "r"(c_outer) : "memory");
}
static __device__ __forceinline__ void tma_prefetch_l2_2d(const TmaDesc* map, int c_inner, int c_outer) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"(map), "r"(c_inner), "r"(c_outer) : "memory");
}
static __device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const TmaDesc* map, uint32_t bar, int c_inner, int c_outer, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c_inner), "r"(c_outer), "h"(mask) : "memory");
}
static __device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra]; }"
               :: "r"(bar), "r"(cta) : "memory");
}
static __device__ __forceinline__ __attribute__((unused)) void mbar_arrive_cluster_cta(uint32_t bar, uint32_t cta) {
  asm volatile("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [ra]; }"
               :: "r"(bar), "r"(cta) : "memory");
}
static __device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
static __device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
static __device__ __forceinline__ void tma_store_2d(const TmaDesc* map, uint32_t src, int c_inner, int c_outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"(map), "r"(src), "r"(c_inner), "r"(c_outer) : "memory");
}
static __device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
static __device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
template <int Pending> static __device__ __forceinline__ void tma_store_wait_read_n() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(Pending) : "memory");
}
static __device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
static __device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
static __device__ __forceinline__ void named_bar(uint32_t id, uint32_t n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }
static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int Pending> static __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(Pending) : "memory");
}
// SM90 shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row core groups 1024 B apart.
// Pins a register between asm statements: reads of the wgmma accumulator stay after wgmma.wait_group
// (the wait names no registers, so plain FADDs could otherwise be scheduled above it; CUTLASS'
// warpgroup_fence_operand)
template <int NR> static __device__ __forceinline__ __attribute__((unused)) void fence_regs(float (&r)[NR]) {
#pragma unroll
  for (int i = 0; i < NR; ++i) asm volatile("" : "+f"(r[i]) :: "memory");
}
static __device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
static __device__ __forceinline__ float bf16_lo(uint32_t v) { float f; asm("mov.b32 %0, %1;" : "=f"(f) : "r"(v << 16)); return f; }
static __device__ __forceinline__ float bf16_hi(uint32_t v) { float f; asm("mov.b32 %0, %1;" : "=f"(f) : "r"(v & 0xFFFF0000u)); return f; }
static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
static __device__ __forceinline__ uint32_t ld_global_u32(const void* p) {
  uint32_t v;
  asm("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
static __device__ __forceinline__ __attribute__((unused)) uint32_t ld_global_u32_ordered(const void* p) {
  uint32_t v;   // volatile: issued where written (e.g. ahead of a barrier), not sunk past it
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
static __device__ __forceinline__ __attribute__((unused)) void st_global_u32(void* p, uint32_t v) {
  asm volatile("st.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ __attribute__((unused)) uint32_t shfl_bfly(uint32_t v, int m) {
  uint32_t r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(m));
  return r;
}
static __device__ __forceinline__ __attribute__((unused)) void st_global_v4(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// Lane q of a quad holds w[i] = its column pair q of 8-column group i (i = 0..3); afterwards w[i] is
// column pair i of group q, i.e. 8 consecutive BF16 columns (16 bytes) of group q. Two butterfly steps.
static __device__ __forceinline__ __attribute__((unused)) void quad_transpose(uint32_t (&w)[4], int lane) {
  const bool b1 = (lane & 2) != 0, b0 = (lane & 1) != 0;
  uint32_t s0 = b1 ? w[0] : w[2], s1 = b1 ? w[1] : w[3];
  uint32_t r0 = shfl_bfly(s0, 2), r1 = shfl_bfly(s1, 2);
  if (b1) { w[0] = r0; w[1] = r1; } else { w[2] = r0; w[3] = r1; }
  s0 = b0 ? w[0] : w[1]; s1 = b0 ? w[2] : w[3];
  r0 = shfl_bfly(s0, 1); r1 = shfl_bfly(s1, 1);
  if (b0) { w[0] = r0; w[2] = r1; } else { w[1] = r0; w[3] = r1; }
}
static __device__ __forceinline__ uint32_t ld_shared_u32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
  return v;
}
static __device__ __forceinline__ void st_shared_u32(uint32_t a, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" :: "r"(a), "r"(v) : "memory");
}
static __device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
static __device__ __forceinline__ float gelu_tanh(float x) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh_approx(u));
}
// GELU (tanh form) of a column pair: (v0, v1) in place, FP32 math around one tanh per pair
// (GELU_F16X2=1: both tanh arguments in one f16x2 register, one MUFU op) or two FP32 tanh.
static __device__ __forceinline__ void gelu_pair(float& v0, float& v1) {
#if GELU_F16X2
  // u = x (c0 + c1 x^2) with c1 = 0.044715 c0; gelu = h + h t with h = x / 2: 5 FP32 ops + 1/2 MUFU
  const float c0 = 0.7978845608028654f, c1 = 0.044715f * 0.7978845608028654f;
  const float u0 = v0 * __fmaf_rn(c1, v0 * v0, c0);
  const float u1 = v1 * __fmaf_rn(c1, v1 * v1, c0);
  uint32_t u2, t2;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u2) : "f"(u1), "f"(u0));   // lo half = u0
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(t2) : "r"(u2));
  float t0, t1;
  asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"
      : "=f"(t0), "=f"(t1) : "r"(t2));
  const float h0 = 0.5f * v0, h1 = 0.5f * v1;
  v0 = __fmaf_rn(h0, t0, h0);
  v1 = __fmaf_rn(h1, t1, h1);
#elif GELU_H2
  // x = (v0, v1) in f16x2 (satfinite: |x| > 65504 saturates); u = x (c0 + c1 x^2), y = h + h tanh(u), h = x / 2
  uint32_t x, y;
  asm("{ .reg .b32 c0, c1, hf, x2, p, u, t, h;\n"
      "mov.b32 c0, 0x3A623A62; mov.b32 c1, 0x28912891; mov.b32 hf, 0x38003800;\n"
      "cvt.rn.satfinite.f16x2.f32 %1, %3, %2;\n"
      "mul.rn.f16x2 x2, %1, %1;\n"
      "fma.rn.f16x2 p, x2, c1, c0;\n"
      "mul.rn.f16x2 u, %1, p;\n"
      "tanh.approx.f16x2 t, u;\n"
      "mul.rn.f16x2 h, %1, hf;\n"
      "fma.rn.f16x2 %0, h, t, h; }"
      : "=r"(y), "=&r"(x) : "f"(v0), "f"(v1));
  asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"
      : "=f"(v0), "=f"(v1) : "r"(y));
#else
  v0 = gelu_tanh(v0);
  v1 = gelu_tanh(v1);
#endif
}

// ---------------------------------------------------------------- wgmma m64nNk32 e4m3 x e4m3 -> f32
// (specialisations generated once by a script and pasted; one per supported BLOCK_N)
template <int BN> struct Wgmma;
template <> struct Wgmma<64> {
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t da, uint64_t db, uint32_t acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
  }
};
template <> struct Wgmma<96> {
  static __device__ __forceinline__ void mma(float (&d)[48], uint64_t da, uint64_t db, uint32_t acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
        "}, %48, %49, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(da), "l"(db), "r"(acc));
  }
};
template <> struct Wgmma<128> {
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t da, uint64_t db, uint32_t acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(acc));
  }
};
template <> struct Wgmma<160> {
  static __device__ __forceinline__ void mma(float (&d)[80], uint64_t da, uint64_t db, uint32_t acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n160k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
        "}, %80, %81, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
        : "l"(da), "l"(db), "r"(acc));
  }
};
template <> struct Wgmma<192> {
  static __device__ __forceinline__ void mma(float (&d)[96], uint64_t da, uint64_t db, uint32_t acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, %96, %97, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(acc));
  }
};
template <> struct Wgmma<256> {
  static __device__ __forceinline__ void mma(float (&d)[128], uint64_t da, uint64_t db, uint32_t acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(acc));
  }
};

#if PROMOTE_SPLIT
// Column half H of an m64 block's accumulator: wgmma m64n(BLOCK_N/2) writes registers [H * ACC_N/2, (H+1) * ACC_N/2)
// in the same fragment order as the whole block's m64nBLOCK_N
template <int H> static __device__ __forceinline__ float (&acc_half(float (&r)[ACC_N]))[ACC_N / 2] {
  return *reinterpret_cast<float (*)[ACC_N / 2]>(&r[H * (ACC_N / 2)]);
}
// A k-block's wgmmas of column half H (W rows H * BLOCK_N/2 ...); a window's first k-block starts it from zero
template <int H>
static __device__ __forceinline__ void mma_half(float (&acc)[WG_M_TILES][ACC_N], uint32_t a, uint32_t b, bool first) {
#pragma unroll
  for (int kk = 0; kk < BLOCK_K / MMA_K; ++kk)
#pragma unroll
    for (int mi = 0; mi < WG_M_TILES; ++mi)
      Wgmma<BLOCK_N / 2>::mma(acc_half<H>(acc[mi]), smem_desc(a + mi * 64 * BLOCK_K + kk * MMA_K),
                              smem_desc(b + H * (BLOCK_N / 2) * BLOCK_K + kk * MMA_K), (first && kk == 0) ? 0u : 1u);
}
// Column half H promoted: added into the FP32 sums
template <int H>
static __device__ __forceinline__ void promote_half(float (&acc)[WG_M_TILES][ACC_N], float (&sum)[WG_M_TILES][ACC_N]) {
#pragma unroll
  for (int mi = 0; mi < WG_M_TILES; ++mi) {
    float (&half)[ACC_N / 2] = acc_half<H>(acc[mi]);
    fence_regs(half);
#pragma unroll
    for (int i = 0; i < ACC_N / 2; ++i) sum[mi][H * (ACC_N / 2) + i] += half[i];
    fence_regs(half);
  }
}
#endif

// A consumed stage is released to the producer of every CTA of the cluster (each one wrote a
// slice of W into it by multicast).
static __device__ __forceinline__ void release_stage(uint32_t bar) {
#if CLUSTER_M > 1
#pragma unroll
  for (uint32_t r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(bar, r);
#else
  mbar_arrive(bar);
#endif
}
// Called by every thread of a consumer warpgroup after the stage's wgmmas completed.
static __device__ __forceinline__ void release_stage_wg(uint32_t bar, int tid) {
#if CLUSTER_M > 1 && CLUSTER_RELEASE
  if (tid < CLUSTER_M) mbar_arrive_cluster_cta(bar, (uint32_t)tid);   // one lane per CTA, in parallel
#else
  if (tid == 0) release_stage(bar);
#endif
}

// ---------------------------------------------------------------- tile scheduler
// Persistent CTAs walk tiles blockIdx.x, blockIdx.x + gridDim.x, ... Tile t maps to a
// (row block, column block) in raster groups of GROUP_M row blocks.
// With CLUSTER_M > 1 the unit is CLUSTER_M adjacent row blocks sharing one column block; every
// CTA of a cluster walks the same units (same count, same column block) and takes its own row.
// visit: how many column blocks of this row block the walk has visited before this one (0 = first visit).
static __device__ __forceinline__ void tile_coords(int u, uint32_t rank, int& m_blk, int& n_blk, int* visit = nullptr) {
  const int group_units = GROUP_M * TILES_N;
  const int g = u / group_units;
  const int first_m = g * GROUP_M;
  const int gm = (UNITS_M - first_m) < GROUP_M ? (UNITS_M - first_m) : GROUP_M;
  const int local = u - g * group_units;
  m_blk = (first_m + local % gm) * CLUSTER_M + (int)rank;
  n_blk = local / gm;
  if (visit) *visit = n_blk;
#if SNAKE_ORDER
  if (g & 1) n_blk = TILES_N - 1 - n_blk;
#endif
}

// ---------------------------------------------------------------- staging tile <-> global (TMA)
// The staging tile holds EPI_SLABS 64-column slabs of WG_M rows (128-byte swizzle), slab sl at sl * WG_M * 128.
// Slabs that start at column >= N are neither loaded nor stored (their columns are never written); a slab
// partly past N is clipped by the TMA unit.
static __device__ __forceinline__ bool slab_in_n(int n0, int sl) { return !PARTIAL_N || n0 + sl * EPI_SLAB_COLS < N; }

static __device__ __forceinline__ void store_staged_slab(const TmaDesc* tm_c, uint32_t staging, int sl, int m0, int n0) {
  if (slab_in_n(n0, sl)) tma_store_2d(tm_c, staging + sl * WG_M * 128, n0 + sl * EPI_SLAB_COLS, m0);
}

// EXTRA_TMA: the tile's extra operand rows (combined_ext rows m0 % SEQ_LEN.. for BIAS_POS, which has
// SEQ_LEN + 256 rows so a box never wraps; the residual tile for BIAS_RESIDUAL) and the bytes they bring.
static __device__ __forceinline__ int extra_row(int m0) {
#if EPILOGUE == BIAS_POS
  return (m0 + BUG_POS_OFF_BY_ONE) % SEQ_LEN;
#else
  return m0;
#endif
}
static __device__ __forceinline__ uint32_t extra_tx_bytes(int n0) {
  uint32_t slabs = 0;
#pragma unroll
  for (int sl = 0; sl < EPI_SLABS; ++sl) slabs += slab_in_n(n0, sl) ? 1u : 0u;
  return slabs * (WG_M * EPI_SLAB_COLS * 2);
}
static __device__ __forceinline__ void load_extra_slab(const TmaDesc* tm_x, uint32_t staging, uint32_t bar, int sl, int m0, int n0) {
  if (slab_in_n(n0, sl)) tma_load_2d(staging + sl * WG_M * 128, tm_x, bar, n0 + sl * EPI_SLAB_COLS, extra_row(m0));
}
// cp.async.bulk.wait_group.read takes an immediate
static __device__ __forceinline__ void tma_store_wait_read_upto(int pending) {
  switch (pending) {
    case 0: tma_store_wait_read_n<0>(); break;
    case 1: tma_store_wait_read_n<1>(); break;
    case 2: tma_store_wait_read_n<2>(); break;
    default: tma_store_wait_read_n<3>(); break;
  }
}

#if DIAG
#define DIAG_SLOTS 64
__device__ unsigned int gemm_diag_count;                       // launches so far
__device__ unsigned long long gemm_diag[DIAG_SLOTS][4];        // launch % DIAG_SLOTS: clock0, ns0, clock1, ns1
static __device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_sm90a(const __grid_constant__ TmaDesc tm_a,   // A [M, K] E4M3, box (BLOCK_M, BLOCK_K)
           const __grid_constant__ TmaDesc tm_b,   // W [N, K] E4M3, box (BLOCK_N, BLOCK_K)
           const __grid_constant__ TmaDesc tm_c,   // C [M, N] BF16, box (WG_M, 64), 128B swizzle
           const __grid_constant__ TmaDesc tm_x,   // combined_ext / residual BF16, box (WG_M, 64)
           const uint16_t* __restrict__ extra,     // combined [SEQ_LEN, N] / residual [M, N] / bias
           const uint16_t* __restrict__ bias,      // bias [N] (BIAS_GELU, BIAS_RESIDUAL)
           uint16_t* __restrict__ out)             // C [M, N] BF16 (STORE_TMA=0)
{
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + SMEM_ALIGN - 1) & ~(uint32_t)(SMEM_ALIGN - 1);
  const uint32_t stages = base;
  const uint32_t staging_all = base + N_STAGES * STAGE_BYTES;
  const uint32_t bars = staging_all + STAGING_BYTES;
#define FULL_BAR(s) (bars + 8 * (s))
#define EMPTY_BAR(s) (bars + 8 * (N_STAGES + (s)))
#define EXTRA_BAR(c) (bars + 8 * (2 * N_STAGES + (c)))
#define ORDER_BAR(c) (bars + 8 * (2 * N_STAGES + NUM_CONSUMERS + (c)))
#define STG_FULL_BAR (bars + 8 * (2 * N_STAGES + 2 * NUM_CONSUMERS))   // SHARED_STAGING: a tile is staged

  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;

#if DIAG
  __shared__ unsigned int diag_slot;
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    diag_slot = atomicAdd(&gemm_diag_count, 1u) % DIAG_SLOTS;
    gemm_diag[diag_slot][0] = clock64();
    gemm_diag[diag_slot][1] = global_ns();
    gemm_diag[diag_slot][2] = gemm_diag[diag_slot][3] = 0;
  }
#endif
  if (threadIdx.x == 0) {
    for (int s = 0; s < N_STAGES; ++s) {
      mbar_init(FULL_BAR(s), 1);
      mbar_init(EMPTY_BAR(s), EMPTY_ARRIVALS);
    }
    for (int c = 0; c < NUM_CONSUMERS; ++c) {
      mbar_init(EXTRA_BAR(c), 1);
      mbar_init(ORDER_BAR(c), 1);
    }
#if SHARED_STAGING
    mbar_init(STG_FULL_BAR, 1);
#endif
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    fence_async_smem();
  }
#if CLUSTER_M > 1
  cluster_sync();   // peers' barriers are initialised before any multicast or remote arrive
  const uint32_t rank = cluster_rank();
#else
  __syncthreads();
  const uint32_t rank = 0;
#endif
  const int unit0 = blockIdx.x / CLUSTER_M, unit_step = gridDim.x / CLUSTER_M;

  if (wg == 0) {
    // ------------------------------------------------------------ producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(PRODUCER_REGS));
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" :: "l"(&tm_a) : "memory");
      asm volatile("prefetch.tensormap [%0];" :: "l"(&tm_b) : "memory");
      uint32_t s = 0, ph = 0;
      for (int u = unit0; u < TOTAL_UNITS; u += unit_step) {
        int mb, nb;
        tile_coords(u, rank, mb, nb);
#if PREFETCH_A
        if (u + unit_step < TOTAL_UNITS) {   // a whole tile of lead time; one prefetch per row block, not one per
          int mb_next, nb_next, visit;       // reader (all readers prefetching loaded L2 and measured 9-10 % slower)
          tile_coords(u + unit_step, rank, mb_next, nb_next, &visit);
          if (visit == 0)
            for (int k = 0; k < K_ITERS; ++k) tma_prefetch_l2_2d(&tm_a, k * BLOCK_K, mb_next * BLOCK_M);
        }
#endif
        for (int k = 0; k < K_ITERS; ++k) {
          mbar_wait(EMPTY_BAR(s), ph ^ 1);
#if PARTIAL_N && CLUSTER_M > 1
          // a W slice that starts at row >= N is not loaded at all (a box wholly out of bounds); every CTA
          // of the cluster counts the same slices, so each expects exactly the bytes that arrive
          int n_slices = 0;
#pragma unroll
          for (int r = 0; r < CLUSTER_M; ++r) n_slices += (nb * BLOCK_N + r * B_SLICE_ROWS < N) ? 1 : 0;
          mbar_expect_tx(FULL_BAR(s), A_STAGE_BYTES + n_slices * B_SLICE_BYTES);
#else
          mbar_expect_tx(FULL_BAR(s), STAGE_TX_BYTES);   // a partial box is zero-filled and counts whole
#endif
          const uint32_t a = stages + s * STAGE_BYTES;
          tma_load_2d(a, &tm_a, FULL_BAR(s), k * BLOCK_K, mb * BLOCK_M);
#if CLUSTER_M > 1
          if (!PARTIAL_N || nb * BLOCK_N + (int)rank * B_SLICE_ROWS < N)
          tma_load_2d_mc(a + A_STAGE_BYTES + rank * (B_SLICE_ROWS * BLOCK_K), &tm_b, FULL_BAR(s), k * BLOCK_K,
                         nb * BLOCK_N + (int)rank * B_SLICE_ROWS, (uint16_t)((1u << CLUSTER_M) - 1));
#else
          tma_load_2d(a + A_STAGE_BYTES, &tm_b, FULL_BAR(s), k * BLOCK_K, nb * BLOCK_N);
#endif
          if (++s == N_STAGES) { s = 0; ph ^= 1; }
        }
      }
    }
#if SHARED_STAGING
    // The storer (warp 1): tiles alternate between the consumers, and so do their epilogues, one at a time in
    // tile order through one staging tile. For tile i: hand the staging to its consumer (EXTRA_BAR: with
    // EXTRA_TMA once its operand has landed), wait until the consumer staged the output (STG_FULL), store it,
    // and as each slab has been read out, refill it for tile i + 1.
    if (tid == 32) {
      (void)extra_tx_bytes; (void)load_extra_slab;
      int prev_m0 = 0, prev_n0 = 0;
      for (int u = unit0, i = 0;; u += unit_step, ++i) {
        const bool more = u < TOTAL_UNITS;   // tile i exists (otherwise only tile i - 1 is left to store)
        int mb = 0, nb = 0;
        if (more) tile_coords(u, rank, mb, nb);
        const int m0 = mb * BLOCK_M, n0 = nb * BLOCK_N;
        const uint32_t bar = EXTRA_BAR(i % NUM_CONSUMERS);
#if EXTRA_TMA
        if (more) mbar_expect_tx(bar, extra_tx_bytes(n0));
#endif
        if (i > 0) {
          mbar_wait(STG_FULL_BAR, (uint32_t)(i - 1) & 1);
#pragma unroll
          for (int sl = 0; sl < EPI_SLABS; ++sl) {   // one bulk group per slab: slabs free up one by one
            store_staged_slab(&tm_c, staging_all, sl, prev_m0, prev_n0);
            tma_store_commit();
          }
        }
        if (!more) break;
#if EXTRA_TMA
#pragma unroll
        for (int sl = 0; sl < EPI_SLABS; ++sl) {
          if (i > 0) tma_store_wait_read_upto(EPI_SLABS - 1 - sl);
          load_extra_slab(&tm_x, staging_all, bar, sl, m0, n0);
        }
#else
        if (i > 0) tma_store_wait_read();
        mbar_arrive(bar);
#endif
        prev_m0 = m0; prev_n0 = n0;
      }
      tma_store_wait_all();
    }
#endif
  } else {
    // ------------------------------------------------------------ consumer warpgroups
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(CONSUMER_REGS));
    const int c = wg - 1;
    const int warp = tid / 32, lane = tid % 32;
    const int r_lo = warp * 16 + lane / 4;     // fragment row within a 64-row block (+8: 2nd row)
    const int cq = 2 * (lane % 4);             // fragment column within an 8-column group
    const uint32_t swz = (uint32_t)(lane / 4); // row % 8 of both fragment rows
    const uint32_t staging = staging_all + (SHARED_STAGING ? 0 : c * STAGING_BYTES_PER_WG);
    (void)staging; (void)extra; (void)bias; (void)out; (void)swz;
    (void)tma_store_2d; (void)ld_shared_u32; (void)st_shared_u32; (void)st_global_u32; (void)gelu_tanh; (void)gelu_pair;
#if EXTRA_TMA || SHARED_STAGING
    uint32_t xphase = 0;   // EXTRA_BAR phase: this consumer's staging tile is ready (operand landed / free)
#endif
#if EPI_SLOTS
    uint32_t epi_slot = 0;   // ring slot of the next slab this consumer stages
#endif
#if PINGPONG
    // A consumer waits on a stage's full barrier with parity (fill index & 1); that is only
    // unambiguous once the previous fill of that stage has completed. The other consumer
    // signals ORDER_BAR after it has received every stage of its tile, and this consumer
    // waits for that before its own main loop (this also orders the two main loops).
    uint32_t order_phase = 0;
#endif
    float acc[WG_M_TILES][ACC_N];
#if PROMOTE_EVERY
    float acc_fp32[WG_M_TILES][ACC_N];   // the promoted sums: full FP32 adds, once per PROMOTE_EVERY k-blocks
#endif
#if EPI_DIRECT
    // operand words of this consumer's next tile, fragment layout: opnd[(mi * 2 + h) * (BLOCK_N / 8) + j]
    uint32_t opnd[OPND_WORDS];
    (void)opnd;
    const int my_step = unit_step * (PINGPONG ? NUM_CONSUMERS : 1);
    auto load_opnd = [&](int uu) {
#if EPILOGUE != BIAS_GELU
      int mb2, nb2;
      tile_coords(uu, rank, mb2, nb2);
      const int m2 = mb2 * BLOCK_M + (PINGPONG ? 0 : c * WG_M), n2 = nb2 * BLOCK_N;
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mi * 64 + r_lo + 8 * h;
#if EPILOGUE == BIAS_POS
          const uint16_t* xr = extra + (uint64_t)((m2 + r + BUG_POS_OFF_BY_ONE) % SEQ_LEN) * N + n2 + cq;
#else
          const uint16_t* xr = extra + (uint64_t)(m2 + r) * N + n2 + cq;
#endif
#pragma unroll
          for (int j = 0; j < BLOCK_N / 8; ++j) opnd[(mi * 2 + h) * (BLOCK_N / 8) + j] = ld_global_u32_ordered(xr + 8 * j);
        }
#else
      (void)uu;
#endif
    };
    {
      const int u_first = unit0 + (PINGPONG ? c * unit_step : 0);
      if (u_first < TOTAL_UNITS) load_opnd(u_first);
    }
#endif
    int it = 0;
    for (int u = unit0; u < TOTAL_UNITS; u += unit_step, ++it) {
#if PINGPONG
      if (it % NUM_CONSUMERS != c) continue;
      const int row_off = 0;
#else
      const int row_off = c * WG_M;
#endif
      int mb, nb;
      tile_coords(u, rank, mb, nb);
      const int m0 = mb * BLOCK_M + row_off;
      const int n0 = nb * BLOCK_N;

#if EXTRA_TMA && !SHARED_STAGING
      if (tid == 0) {
        tma_store_wait_read();   // this consumer's previous stores have left the staging tile
        mbar_expect_tx(EXTRA_BAR(c), extra_tx_bytes(n0));
#pragma unroll
        for (int sl = 0; sl < EPI_SLABS; ++sl) load_extra_slab(&tm_x, staging, EXTRA_BAR(c), sl, m0, n0);
      }
#endif

      // ---------------------------------------------------------- main loop
#if PINGPONG
      if (it > 0) {
        mbar_wait(ORDER_BAR(1 - c), order_phase);
        order_phase ^= 1;
      }
#endif
#if EPI_DIRECT
      // the accumulator starts at the epilogue operand: acc[mi][4j + 2h + e] = column n0 + 8j + cq + e of row 16w + lane/4 + 8h
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) {
#if EPILOGUE != BIAS_POS
        const uint32_t bb = ld_global_u32(bias + n0 + cq + 8 * j);
        const float b0 = bf16_lo(bb), b1 = bf16_hi(bb);
#else
        const float b0 = 0.f, b1 = 0.f;
#endif
#pragma unroll
        for (int mi = 0; mi < WG_M_TILES; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#if EPILOGUE == BIAS_GELU
            acc[mi][4 * j + 2 * h] = b0; acc[mi][4 * j + 2 * h + 1] = b1;
#elif EPILOGUE == BIAS_POS
            const uint32_t xx = opnd[(mi * 2 + h) * (BLOCK_N / 8) + j];
            acc[mi][4 * j + 2 * h] = bf16_lo(xx); acc[mi][4 * j + 2 * h + 1] = bf16_hi(xx);
            (void)b0; (void)b1;
#else
            const uint32_t xx = opnd[(mi * 2 + h) * (BLOCK_N / 8) + j];
            acc[mi][4 * j + 2 * h] = b0 + bf16_lo(xx); acc[mi][4 * j + 2 * h + 1] = b1 + bf16_hi(xx);
#endif
          }
      }
#elif BIAS_ACC
      // the accumulator starts at the bias: acc[.][4j + 2h + e] is column n0 + 8j + cq + e of either row
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j) {
        const uint32_t bb = (!PARTIAL_N || n0 + 8 * j < N) ? ld_global_u32(bias + n0 + cq + 8 * j) : 0u;
        const float b0 = bf16_lo(bb), b1 = bf16_hi(bb);
#pragma unroll
        for (int mi = 0; mi < WG_M_TILES; ++mi) {
          acc[mi][4 * j] = b0; acc[mi][4 * j + 1] = b1; acc[mi][4 * j + 2] = b0; acc[mi][4 * j + 3] = b1;
        }
      }
#endif
#if PROMOTE_EVERY
      // the start value (bias / operand, or 0) goes to the FP32 sum; each window's first wgmma overwrites acc
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi)
#pragma unroll
        for (int i = 0; i < ACC_N; ++i) acc_fp32[mi][i] = (BIAS_ACC || EPI_DIRECT) ? acc[mi][i] : 0.f;
#endif
      const uint32_t pos = (uint32_t)it * K_ITERS;
      uint32_t s = pos % N_STAGES, ph = (pos / N_STAGES) & 1, prev_s = 0;
      (void)prev_s;
#if PROMOTE_SPLIT
      // Two wgmma chains, columns [0, BLOCK_N/2) (lo) and [BLOCK_N/2, BLOCK_N) (hi), committed as two groups per
      // k-block. A window's last k-block waits for its lo group only (hi still runs) and promotes lo; the next
      // window's first k-block queues its lo wgmmas, then waits for the old hi group and promotes hi. The stage
      // of k-block k-1 is released once both its groups completed (MMA_INFLIGHT=1's schedule). The K loop is
      // unrolled whole, so first / last / hi are constants: an accumulator read on a runtime branch, or a group in
      // flight across a loop's back edge while the other half is read, makes ptxas serialize every wgmma.
#if !(BIAS_ACC || EPI_DIRECT)
      // a defined start: ptxas otherwise serializes the wgmmas of some builds (each half starts with scale-d 0)
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi)
#pragma unroll
        for (int i = 0; i < ACC_N; ++i) acc[mi][i] = 0.f;
#endif
      int k = 0;
      // first / last: the k-block's place in its window; hi: the window's first k-block promotes the previous
      // window's hi half (not in the tile's first window). Called with constants only (see above).
      auto k_block = [&](bool first, bool last, bool hi) {
        mbar_wait(FULL_BAR(s), ph);
#if PINGPONG
        if (k == K_ITERS - 1 && tid == 0) mbar_arrive(ORDER_BAR(c));   // all my fills landed
#endif
        const uint32_t a = stages + s * STAGE_BYTES + row_off * BLOCK_K;
        const uint32_t b = stages + s * STAGE_BYTES + A_STAGE_BYTES;
        wgmma_fence();
        mma_half<0>(acc, a, b, first);
        wgmma_commit();
        if (first && hi) {
          wgmma_wait<1>();   // k-block k-1, the previous window's end, completed: its hi half is final
          promote_half<1>(acc, acc_fp32);
        }
        wgmma_fence();
        mma_half<1>(acc, a, b, first);
        wgmma_commit();
        if (last) {
          wgmma_wait<1>();   // this k-block's lo group and everything before it completed
          promote_half<0>(acc, acc_fp32);
        } else if (!(first && hi)) {
          wgmma_wait<2>();   // k-block k-1 completed
        }
        if (k > 0) release_stage_wg(EMPTY_BAR(prev_s), tid);
        prev_s = s;
        if (++s == N_STAGES) { s = 0; ph ^= 1; }
        ++k;
      };
#pragma unroll
      for (int kb = 0; kb < K_ITERS; ++kb)
        k_block(kb % PROMOTE_EVERY == 0, (kb + 1) % PROMOTE_EVERY == 0 || kb == K_ITERS - 1, kb > 0);
      wgmma_wait<0>();
      release_stage_wg(EMPTY_BAR(prev_s), tid);
      promote_half<1>(acc, acc_fp32);
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi)
#pragma unroll
        for (int i = 0; i < ACC_N; ++i) acc[mi][i] = acc_fp32[mi][i];   // where the epilogue reads the sum
#else
#if UNROLL_K
#pragma unroll (UNROLL_K)
#endif
      for (int k = 0; k < K_ITERS; ++k) {
        mbar_wait(FULL_BAR(s), ph);
#if PINGPONG
        if (k == K_ITERS - 1 && tid == 0) mbar_arrive(ORDER_BAR(c));   // all my fills landed
#endif
        wgmma_fence();
        const uint32_t a = stages + s * STAGE_BYTES + row_off * BLOCK_K;
        const uint32_t b = stages + s * STAGE_BYTES + A_STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < BLOCK_K / MMA_K; ++kk) {
#pragma unroll
          for (int mi = 0; mi < WG_M_TILES; ++mi)
            if (DIAG != 2)
              Wgmma<BLOCK_N>::mma(acc[mi], smem_desc(a + mi * 64 * BLOCK_K + kk * MMA_K),
                                  smem_desc(b + kk * MMA_K),
                                  PROMOTE_EVERY ? ((k % (PROMOTE_EVERY ? PROMOTE_EVERY : 1) > 0 || kk > 0) ? 1u : 0u)
                                                : ((BIAS_ACC || EPI_DIRECT || k > 0 || kk > 0) ? 1u : 0u));
#if MMA_INFLIGHT == 2
          if (kk == SPLIT_K32 - 1) {
            // this block's first k32 step(s) are queued on the tensor pipe: wait for everything before them
            // (the previous block) and release that stage now, without draining the pipe
            wgmma_commit();
            wgmma_wait<1>();
            if (k > 0) release_stage_wg(EMPTY_BAR(prev_s), tid);
          }
#endif
        }
        wgmma_commit();
#if EPI_DIRECT && EPILOGUE != BIAS_GELU
        // the next tile's operand words, while this tile's last wgmmas run (registers free since the tile start)
        if (k == PF_K && u + my_step < TOTAL_UNITS) load_opnd(u + my_step);
#endif
#if MMA_INFLIGHT == 1
        wgmma_wait<1>();
        if (k > 0) release_stage_wg(EMPTY_BAR(prev_s), tid);
#elif MMA_INFLIGHT == 2
        // released at the next block's first k32 step (or after the loop)
#else
        wgmma_wait<0>();
        release_stage_wg(EMPTY_BAR(s), tid);
#endif
#if PROMOTE_EVERY
        if ((k + 1) % PROMOTE_EVERY == 0 || k == K_ITERS - 1) {
          // every wgmma of the window has completed before its registers are read; the next window's
          // first wgmma (scale-d 0) is issued after the next k-block's wgmma.fence
          wgmma_wait<0>();
#pragma unroll
          for (int mi = 0; mi < WG_M_TILES; ++mi) {
            fence_regs(acc[mi]);
            if (k == K_ITERS - 1) {   // the last window: the sum lands in acc, where the epilogue reads it
#pragma unroll
              for (int i = 0; i < ACC_N; ++i) acc[mi][i] += acc_fp32[mi][i];
            } else {
#pragma unroll
              for (int i = 0; i < ACC_N; ++i) acc_fp32[mi][i] += acc[mi][i];
            }
            fence_regs(acc[mi]);
          }
        }
#endif
        prev_s = s;
        if (++s == N_STAGES) { s = 0; ph ^= 1; }
      }
#if MMA_INFLIGHT
      wgmma_wait<0>();
      release_stage_wg(EMPTY_BAR(prev_s), tid);
#endif
#endif  // PROMOTE_SPLIT

      // ---------------------------------------------------------- epilogue
#if EPI_DIRECT
      // operand already in the accumulator: (GELU), pack, quad-transpose, 16-byte stores from registers
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mi * 64 + r_lo + 8 * h;
          uint16_t* orow = out + (uint64_t)(m0 + r) * N + n0 + 8 * (lane % 4);
#pragma unroll
          for (int jb = 0; jb < BLOCK_N / 32; ++jb) {
            uint32_t w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              float v0 = acc[mi][4 * (4 * jb + i) + 2 * h];
              float v1 = acc[mi][4 * (4 * jb + i) + 2 * h + 1];
#if EPILOGUE == BIAS_GELU
              gelu_pair(v0, v1);
#endif
              w[i] = pack_bf16x2(v0, v1);
            }
            quad_transpose(w, lane);
            st_global_v4(orow + 32 * jb, w[0], w[1], w[2], w[3]);
          }
        }
      }
#elif EPI_SLOTS
      // Ring of EPI_RING 64-column slabs per consumer: slab sl of the tile goes to slot
      // (epi_slot + sl) % EPI_RING, one TMA-store bulk group per slab. Group g reuses the slot of
      // group g - EPI_RING, so 'at most EPI_RING - 1 groups still reading' frees the slot.
      // The slab's global operands (bias / combined / residual words) are loaded one slab ahead,
      // before the barriers, so their L2 latency overlaps the previous slab's work.
#if EPILOGUE == BIAS_POS || EPILOGUE == BIAS_RESIDUAL
      uint32_t xv[2][WG_M_TILES][2][8];
      const uint16_t* xrow[WG_M_TILES][2];
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mi * 64 + r_lo + 8 * h;
#if EPILOGUE == BIAS_POS
          xrow[mi][h] = extra + (uint64_t)((m0 + r + BUG_POS_OFF_BY_ONE) % SEQ_LEN) * N + n0 + cq;
#else
          xrow[mi][h] = extra + (uint64_t)(m0 + r) * N + n0 + cq;
#endif
        }
#endif
#if EPI_ADD_BIAS
      uint32_t bv[2][8];
#endif
      auto load_slab = [&](int sl) {
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
#if EPI_ADD_BIAS
          bv[sl & 1][jj] = ld_global_u32(bias + n0 + cq + 8 * (sl * 8 + jj));
#endif
#if EPILOGUE == BIAS_POS || EPILOGUE == BIAS_RESIDUAL
#pragma unroll
          for (int mi = 0; mi < WG_M_TILES; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) xv[sl & 1][mi][h][jj] = ld_global_u32_ordered(xrow[mi][h] + 8 * (sl * 8 + jj));
#endif
        }
      };
      load_slab(0);
      if (tid == 0) tma_store_wait_read_n<EPI_RING - 1>();
      named_bar(1 + c, 128);
#pragma unroll
      for (int sl = 0; sl < EPI_SLABS; ++sl) {
        const uint32_t slot = staging + epi_slot * EPI_SLAB_BYTES;
        if (sl + 1 < EPI_SLABS) load_slab(sl + 1);
#pragma unroll
        for (int mi = 0; mi < WG_M_TILES; ++mi) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = mi * 64 + r_lo + 8 * h;
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
              const int j = sl * 8 + jj;
              float v0 = acc[mi][4 * j + 2 * h];
              float v1 = acc[mi][4 * j + 2 * h + 1];
#if EPI_ADD_BIAS
              const uint32_t bb = bv[sl & 1][jj];
              v0 += bf16_lo(bb);
              v1 += bf16_hi(bb);
#endif
#if EPILOGUE == BIAS_POS || EPILOGUE == BIAS_RESIDUAL
              const uint32_t xx = xv[sl & 1][mi][h][jj];
              v0 += bf16_lo(xx);
              v1 += bf16_hi(xx);
#endif
#if EPILOGUE == BIAS_GELU
              gelu_pair(v0, v1);
#endif
              st_shared_u32(slot + r * 128 + (((uint32_t)jj ^ swz) << 4) + 4 * (lane % 4), pack_bf16x2(v0, v1));
            }
          }
        }
        fence_async_smem();
#if EPI_RING >= 2
        // the next slab's slot was last stored EPI_RING groups before it: EPI_RING - 2 groups
        // (not counting this slab's, committed below) may still be reading
        if (sl + 1 < EPI_SLABS && tid == 0) tma_store_wait_read_n<EPI_RING - 2>();
#endif
        named_bar(1 + c, 128);
        if (tid == 0) {
          tma_store_2d(&tm_c, slot, n0 + sl * EPI_SLAB_COLS, m0);
          tma_store_commit();
        }
        if (++epi_slot == EPI_RING) epi_slot = 0;
#if EPI_RING == 1
        if (sl + 1 < EPI_SLABS) {
          if (tid == 0) tma_store_wait_read_n<0>();
          named_bar(1 + c, 128);
        }
#endif
      }
#else  // !EPI_SLOTS: the whole tile is staged, one store group per tile
#if STORE_TMA && !EXTRA_TMA && !SHARED_STAGING
      if (tid == 0) tma_store_wait_read();
      named_bar(1 + c, 128);
#endif
#if EXTRA_TMA || SHARED_STAGING
      mbar_wait(EXTRA_BAR(c), xphase);
      xphase ^= 1;
#endif
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mi * 64 + r_lo + 8 * h;
          const uint64_t grow = (uint64_t)(m0 + r);
#if !EXTRA_TMA && EPILOGUE == BIAS_POS
          const uint16_t* xrow = extra + (uint64_t)((m0 + r + BUG_POS_OFF_BY_ONE) % SEQ_LEN) * N + n0 + cq;
#elif !EXTRA_TMA && EPILOGUE == BIAS_RESIDUAL
          const uint16_t* xrow = extra + grow * N + n0 + cq;
#endif
          (void)grow;
#if EXTRA_TMA && EPI_BATCH
          uint32_t xs[EPI_BATCH];
#endif
#pragma unroll
          for (int j = 0; j < (STORE_TMA ? STAGED_J : BLOCK_N / 8); ++j) {   // STORE_TMA: the tail columns follow below
            float v0 = acc[mi][4 * j + 2 * h];
            float v1 = acc[mi][4 * j + 2 * h + 1];
#if STORE_TMA
            const uint32_t sa = staging + (j / 8) * (WG_M * 128) + r * 128 + ((((uint32_t)j % 8) ^ swz) << 4) + 4 * (lane % 4);
#endif
#if EPI_ADD_BIAS
            const uint32_t bb = (!PARTIAL_N || n0 + 8 * j < N) ? ld_global_u32(bias + n0 + cq + 8 * j) : 0u;
            v0 += bf16_lo(bb);
            v1 += bf16_hi(bb);
#endif
#if EPILOGUE == BIAS_POS || EPILOGUE == BIAS_RESIDUAL
#if EXTRA_TMA && EPI_BATCH
            if (j % EPI_BATCH == 0) {   // read the next EPI_BATCH staged words back to back
#pragma unroll
              for (int q = 0; q < EPI_BATCH; ++q)
                xs[q] = ld_shared_u32(staging + ((j + q) / 8) * (WG_M * 128) + r * 128 +
                                      ((((uint32_t)(j + q)) % 8 ^ swz) << 4) + 4 * (lane % 4));
            }
            const uint32_t xx = xs[j % EPI_BATCH];
#elif EXTRA_TMA
            const uint32_t xx = ld_shared_u32(sa);
#else
            const uint32_t xx = (!PARTIAL_N || n0 + 8 * j < N) ? ld_global_u32(xrow + 8 * j) : 0u;
#endif
            v0 += bf16_lo(xx);
            v1 += bf16_hi(xx);
#endif
#if EPILOGUE == BIAS_GELU
            gelu_pair(v0, v1);
#endif
#if STORE_TMA
            st_shared_u32(sa, pack_bf16x2(v0, v1));
#else
            st_global_u32(out + grow * N + n0 + cq + 8 * j, pack_bf16x2(v0, v1));
#endif
          }
        }
      }
#if STORE_TMA
      fence_async_smem();
      named_bar(1 + c, 128);
      if (tid == 0) {
#if SHARED_STAGING
        mbar_arrive(STG_FULL_BAR);   // the storer takes it from here
#else
#pragma unroll
        for (int sl = 0; sl < EPI_SLABS; ++sl) store_staged_slab(&tm_c, staging, sl, m0, n0);
        tma_store_commit();
#endif
      }
#endif
#if STORE_TMA && TAIL_COLS
      // the last 32 columns of the tile (BLOCK_N % 64 == 32) do not fill a 128-byte store box: each lane
      // quad packs its 4 column pairs of the 4 tail groups, transposes them inside the quad and stores
      // 16 bytes (8 consecutive columns) per lane; masked per 8-column group at N
#pragma unroll
      for (int mi = 0; mi < WG_M_TILES; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mi * 64 + r_lo + 8 * h;
          const uint64_t grow = (uint64_t)(m0 + r);
#if EPILOGUE == BIAS_POS
          const uint16_t* trow = extra + (uint64_t)((m0 + r + BUG_POS_OFF_BY_ONE) % SEQ_LEN) * N + n0 + cq;
#elif EPILOGUE == BIAS_RESIDUAL
          const uint16_t* trow = extra + grow * N + n0 + cq;
#endif
          uint32_t w[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int j = STAGED_J + i;
            const bool ok = !PARTIAL_N || n0 + 8 * j < N;
            (void)ok;
            float v0 = acc[mi][4 * j + 2 * h];
            float v1 = acc[mi][4 * j + 2 * h + 1];
#if EPI_ADD_BIAS
            const uint32_t bb = ok ? ld_global_u32(bias + n0 + cq + 8 * j) : 0u;
            v0 += bf16_lo(bb);
            v1 += bf16_hi(bb);
#endif
#if EPILOGUE == BIAS_POS || EPILOGUE == BIAS_RESIDUAL
            const uint32_t xx = ok ? ld_global_u32(trow + 8 * j) : 0u;
            v0 += bf16_lo(xx);
            v1 += bf16_hi(xx);
#endif
#if EPILOGUE == BIAS_GELU
            gelu_pair(v0, v1);
#endif
            w[i] = pack_bf16x2(v0, v1);
          }
          quad_transpose(w, lane);
          const int tcol = n0 + 8 * (STAGED_J + lane % 4);
          if (!PARTIAL_N || tcol < N) st_global_v4(out + grow * N + tcol, w[0], w[1], w[2], w[3]);
        }
      }
#endif
#endif  // EPI_SLOTS
    }
#if STORE_TMA && !SHARED_STAGING
    if (tid == 0) tma_store_wait_all();
#endif
#if DIAG
    if (tid == 0 && blockIdx.x == 0) {   // the later of the consumers' ends
      atomicMax(&gemm_diag[diag_slot][2], (unsigned long long)clock64());
      atomicMax(&gemm_diag[diag_slot][3], global_ns());
    }
#endif
  }
#if CLUSTER_M > 1
  cluster_sync();   // no CTA leaves while a peer may still arrive on its barriers
#endif
}
