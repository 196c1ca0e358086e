// example_sgemm.cu: a small, real kernel to show how a kernel plugs into the tuner.
//
// C[M,N] (FP32, row-major) = A[M,K] (FP32, row-major) x B[K,N] (FP32, row-major).
// Each block computes a BLOCK x BLOCK tile of C through shared memory, each thread a
// THREAD_TILE x THREAD_TILE sub-tile in registers. Every tunable is an #ifndef-guarded
// define; the tuner passes -DNAME=VALUE. Defaults give a reasonable kernel on any GPU.
//
// Two planted faults exist for testing the tuner (never enable them for real work):
//   PLANT_HANG=1 spins forever in block 0 (like a wrong mbarrier byte count would);
//   PLANT_BUG=1  writes every output row shifted by one (an indexing mistake).

#ifndef M_DIM
#define M_DIM 2048
#endif
#ifndef N_DIM
#define N_DIM 2048
#endif
#ifndef K_DIM
#define K_DIM 2048
#endif

#ifndef BLOCK            // tier 1: output tile edge per block
#define BLOCK 64
#endif
#ifndef BLOCK_K          // tier 1: K slice staged in shared memory per step
#define BLOCK_K 16
#endif
#ifndef THREAD_TILE      // tier 1: output tile edge per thread
#define THREAD_TILE 4
#endif
#ifndef UNROLL_K         // tier 2: fully unroll the inner K loop
#define UNROLL_K 1
#endif
#ifndef PLANT_HANG
#define PLANT_HANG 0
#endif
#ifndef PLANT_BUG
#define PLANT_BUG 0
#endif

// Derived constants: never written by hand.
#define THREADS_PER_EDGE (BLOCK / THREAD_TILE)
#define THREADS (THREADS_PER_EDGE * THREADS_PER_EDGE)

extern "C" __global__ void __launch_bounds__(THREADS)
example_sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C)
{
    __shared__ float a_tile[BLOCK_K][BLOCK + 1];  // +1: no bank conflicts on the transpose
    __shared__ float b_tile[BLOCK_K][BLOCK];

    const int tx = threadIdx.x % THREADS_PER_EDGE;
    const int ty = threadIdx.x / THREADS_PER_EDGE;
    const int row0 = blockIdx.y * BLOCK;
    const int col0 = blockIdx.x * BLOCK;

#if PLANT_HANG
    if (blockIdx.x == 0 && blockIdx.y == 0) {
        unsigned int spins = 0;
        // A flag that nothing ever sets, read through volatile asm so it is never folded.
        while (true) {
            asm volatile("add.u32 %0, %0, 1;" : "+r"(spins));
            if (spins == 0xFFFFFFFFu && A[0] == 12345.678f) break;
        }
    }
#endif

    float acc[THREAD_TILE][THREAD_TILE];
#pragma unroll
    for (int i = 0; i < THREAD_TILE; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_TILE; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K_DIM; k0 += BLOCK_K) {
        // Cooperative loads: BLOCK x BLOCK_K of A (stored transposed) and BLOCK_K x BLOCK of B.
        for (int idx = threadIdx.x; idx < BLOCK * BLOCK_K; idx += THREADS) {
            const int r = idx / BLOCK_K, k = idx % BLOCK_K;
            a_tile[k][r] = A[(size_t)(row0 + r) * K_DIM + k0 + k];
            const int kb = idx / BLOCK, c = idx % BLOCK;
            b_tile[kb][c] = B[(size_t)(k0 + kb) * N_DIM + col0 + c];
        }
        __syncthreads();
#if UNROLL_K
#pragma unroll
#else
#pragma unroll 1
#endif
        for (int k = 0; k < BLOCK_K; ++k) {
            float a_frag[THREAD_TILE], b_frag[THREAD_TILE];
#pragma unroll
            for (int i = 0; i < THREAD_TILE; ++i) a_frag[i] = a_tile[k][ty * THREAD_TILE + i];
#pragma unroll
            for (int j = 0; j < THREAD_TILE; ++j) b_frag[j] = b_tile[k][tx * THREAD_TILE + j];
#pragma unroll
            for (int i = 0; i < THREAD_TILE; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_TILE; ++j) acc[i][j] += a_frag[i] * b_frag[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < THREAD_TILE; ++i) {
        int row = row0 + ty * THREAD_TILE + i;
#if PLANT_BUG
        row = (row + 1) % M_DIM;
#endif
#pragma unroll
        for (int j = 0; j < THREAD_TILE; ++j)
            C[(size_t)row * N_DIM + col0 + tx * THREAD_TILE + j] = acc[i][j];
    }
}
