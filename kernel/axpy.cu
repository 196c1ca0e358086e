// axpy.cu: out = a * x + y over a ROWS x COLS FP32 array; the README's light-spec example.
#ifndef ROWS
#define ROWS 4096
#endif
#ifndef COLS
#define COLS 4096
#endif
#ifndef BLOCK_SIZE  // threads per block
#define BLOCK_SIZE 256
#endif
#ifndef ITEMS       // elements per thread
#define ITEMS 4
#endif

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
axpy(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, float a)
{
    const long base = (long)blockIdx.x * BLOCK_SIZE * ITEMS + threadIdx.x;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long idx = base + (long)i * BLOCK_SIZE;
        if (idx < (long)ROWS * COLS) out[idx] = a * x[idx] + y[idx];
    }
}
