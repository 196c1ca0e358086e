// Reference FP8 GEMM + epilogue in FP32, for the full-output check of gemm_sm90a / gemm_sm100a.
//
//   expected[m, n] = epilogue(sum_k A[m, k] * W[n, k])        A [M, K], W [N, K]: E4M3 bytes
//   epilogue:  v = acc (+ bias[n]) (+ addend[m % addend_rows, n]);  gelu != 0: v = gelu_tanh(v)
//
// bias and addend are BF16 (either may be null). Deliberately plain: E4M3 decoded by a
// 256-entry table built from the format's definition, a shared-memory tiled loop with one
// FP32 FMA per product, no tensor cores. It runs once per problem, so clarity beats speed.

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef long long int64_t;

#define REF_TILE 128       // output tile edge (rows and columns)
#define REF_K 16           // k-slice held in shared memory
#define REF_THREADS 256    // 16 x 16 threads, 8 x 8 outputs each

// E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; exponent 0 is subnormal; S.1111.111 is NaN.
static __device__ float e4m3_to_float(uint32_t code) {
  const uint32_t exp = (code >> 3) & 0xF, man = code & 0x7;
  float mag = exp == 0 ? ldexpf((float)man / 8.0f, -6) : ldexpf(1.0f + (float)man / 8.0f, (int)exp - 7);
  if ((code & 0x7F) == 0x7F) mag = __int_as_float(0x7FC00000);
  return (code & 0x80) ? -mag : mag;
}

static __device__ float bf16_to_float(uint16_t bits) { return __uint_as_float((uint32_t)bits << 16); }

static __device__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// One output's epilogue, out of line: inlined into the 64 unrolled stores below it makes NVRTC's
// front end take seconds (the reference is compiled on a worker's first start).
static __device__ __noinline__ void store_output(float v, int64_t m, int64_t n, const uint16_t* __restrict__ bias,
                                                 const uint16_t* __restrict__ addend, int addend_rows, int gelu,
                                                 float* __restrict__ expected, int N) {
  if (bias) v += bf16_to_float(bias[n]);
  if (addend) v += bf16_to_float(addend[(m % addend_rows) * N + n]);
  if (gelu) v = gelu_tanh(v);
  expected[m * N + n] = v;
}

extern "C" __global__ void __launch_bounds__(REF_THREADS)
gemm_reference_fp8(const uint8_t* __restrict__ A, const uint8_t* __restrict__ W,
                   const uint16_t* __restrict__ bias, const uint16_t* __restrict__ addend, int addend_rows,
                   int gelu, float* __restrict__ expected, int M, int N, int K) {
  __shared__ float lut[256];
  __shared__ float a_s[REF_K][REF_TILE];   // k-major: a_s[k][row]
  __shared__ float w_s[REF_K][REF_TILE];   // k-major: w_s[k][col]
  lut[threadIdx.x] = e4m3_to_float(threadIdx.x);
  const int64_t m0 = (int64_t)blockIdx.y * REF_TILE, n0 = (int64_t)blockIdx.x * REF_TILE;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;   // this thread: rows ty + 16 i, cols tx + 16 j
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  __syncthreads();

  for (int k0 = 0; k0 < K; k0 += REF_K) {
    for (int e = threadIdx.x; e < REF_TILE * REF_K; e += REF_THREADS) {
      const int r = e / REF_K, k = e % REF_K;
      const int64_t m = m0 + r, n = n0 + r, kk = k0 + k;
      a_s[k][r] = (m < M && kk < K) ? lut[A[m * K + kk]] : 0.0f;
      w_s[k][r] = (n < N && kk < K) ? lut[W[n * K + kk]] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < REF_K; ++k) {
      float a[8], w[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = a_s[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 8; ++j) w[j] = w_s[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t m = m0 + ty + 16 * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t n = n0 + tx + 16 * j;
      if (n >= N) continue;
      store_output(acc[i][j], m, n, bias, addend, addend_rows, gelu, expected, N);
    }
  }
}
