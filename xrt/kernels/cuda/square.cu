// square: y = x * x, elementwise. Versions side by side (llm.c style); the version name is
// the key the benchmark database and the tuning space ("square.cuda": version) use.
//
// v1: one element per thread. The baseline: simple, coalesced, one 4-byte (or 2-byte) access
//     per thread, so many threads in flight are needed to saturate HBM.
// v2: 16-byte vector loads/stores (float4 = 4 fp32 or 8 fp16/bf16) in a grid-stride loop, plus
//     a scalar tail. Fewer instructions per byte moved; the version to beat copy bandwidth with.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ T sq(T v) { return v * v; }

template <typename T>
__device__ void square_v1(const T* __restrict__ x,  // [n] contiguous input
                          T* __restrict__ y,        // [n] contiguous output
                          int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = sq(x[i]);
}

template <typename T>
__device__ void square_v2(const T* __restrict__ x,  // [n] contiguous input, 16-byte aligned
                          T* __restrict__ y,        // [n] contiguous output, 16-byte aligned
                          int64_t n) {
    map_vec([](T v) { return sq(v); }, y, n, x);
}

#define XRT_SQUARE(VERSION, SUFFIX, T)                                                   \
    extern "C" __global__ void square_##VERSION##_##SUFFIX(const T* x, T* y, int64_t n) { \
        square_##VERSION<T>(x, y, n);                                                    \
    }

XRT_DTYPES(XRT_SQUARE, v1)
XRT_DTYPES(XRT_SQUARE, v2)
