// example_sgemm_program.cu: the example GEMM (example_sgemm.cu) in a harness of its own, as many
// kernel engineers already have one: main() makes the inputs, launches, times and checks the
// kernel, and prints one line for the tuner:
//
//   @@RESULT ms=<one launch> tflops=<...> checksum=<sum of C, each element weighed by its place>
//
// Built per config by example_sgemm_program.py's command (nvcc with the config's -D flags);
// by hand: nvcc -O3 -arch=sm_90 example_sgemm_program.cu -o sgemm && ./sgemm

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "example_sgemm.cu"

#ifndef TIMED_LAUNCHES
#define TIMED_LAUNCHES 20
#endif

#define CHECK(call)                                                                         \
    do {                                                                                    \
        cudaError_t err_ = (call);                                                          \
        if (err_ != cudaSuccess) {                                                          \
            fprintf(stderr, "CUDA error: %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, \
                    __LINE__);                                                              \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

// Values in [-1, 1], never all zeros, the same in every build.
static void fill(std::vector<float>& v, unsigned int salt) {
    for (size_t i = 0; i < v.size(); ++i) {
        unsigned int h = (unsigned int)(i * 2654435761u) ^ salt;
        h ^= h >> 15;
        v[i] = (float)(h % 2001u) / 1000.0f - 1.0f;
    }
}

int main() {
    const size_t a_n = (size_t)M_DIM * K_DIM, b_n = (size_t)K_DIM * N_DIM, c_n = (size_t)M_DIM * N_DIM;
    std::vector<float> a(a_n), b(b_n), c(c_n);
    fill(a, 0x9e3779b9u);
    fill(b, 0x85ebca6bu);
    float *d_a, *d_b, *d_c;
    CHECK(cudaMalloc(&d_a, a_n * sizeof(float)));
    CHECK(cudaMalloc(&d_b, b_n * sizeof(float)));
    CHECK(cudaMalloc(&d_c, c_n * sizeof(float)));
    CHECK(cudaMemcpy(d_a, a.data(), a_n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_b, b.data(), b_n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d_c, 0xff, c_n * sizeof(float)));  // NaN: an output never written shows

    const dim3 grid(N_DIM / BLOCK, M_DIM / BLOCK), block(THREADS);
    for (int i = 0; i < 3; ++i) example_sgemm<<<grid, block>>>(d_a, d_b, d_c);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());

    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start));
    for (int i = 0; i < TIMED_LAUNCHES; ++i) example_sgemm<<<grid, block>>>(d_a, d_b, d_c);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaGetLastError());
    float total_ms = 0.0f;
    CHECK(cudaEventElapsedTime(&total_ms, start, stop));
    const double ms = total_ms / TIMED_LAUNCHES;

    CHECK(cudaMemcpy(c.data(), d_c, c_n * sizeof(float), cudaMemcpyDeviceToHost));
    // Each element weighed by its place: an output written to the wrong place changes the sum too.
    double checksum = 0.0;
    for (size_t i = 0; i < c_n; ++i) checksum += c[i] * (double)(1 + i % 1021);
    printf("example_sgemm %dx%dx%d: %.4f ms\n", M_DIM, N_DIM, K_DIM, ms);
    printf("@@RESULT ms=%.5f tflops=%.3f checksum=%.10e\n", ms, 2.0 * M_DIM * N_DIM * K_DIM / ms / 1e9, checksum);
    return 0;
}
