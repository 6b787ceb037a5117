// vector_add: y = a + b, elementwise. Versions side by side (llm.c style); the version name is
// the key of the tuning space "vector_add.cuda" and of the benchmark database.
//
// v1: one element per thread; coalesced, but one 2- or 4-byte access per load instruction.
// v2: 16-byte vector loads/stores (float4) in a grid-stride loop, plus a scalar tail; the
//     arithmetic runs in fp32 on the unpacked lanes. The version to reach copy bandwidth with.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ T add(T u, T v) { return T(float(u) + float(v)); }

template <typename T>
__device__ void vector_add_v1(const T* __restrict__ a,  // [n] contiguous input
                              const T* __restrict__ b,  // [n] contiguous input
                              T* __restrict__ y,        // [n] contiguous output
                              int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = add(a[i], b[i]);
}

template <typename T>
__device__ void vector_add_v2(const T* __restrict__ a,  // [n] contiguous input, 16-byte aligned
                              const T* __restrict__ b,  // [n] contiguous input, 16-byte aligned
                              T* __restrict__ y,        // [n] contiguous output, 16-byte aligned
                              int64_t n) {
    map_vec([](T u, T v) { return add(u, v); }, y, n, a, b);
}

#define XRT_VECTOR_ADD(VERSION, SUFFIX, T)                                                              \
    extern "C" __global__ void vector_add_##VERSION##_##SUFFIX(const T* a, const T* b, T* y, int64_t n) { \
        vector_add_##VERSION<T>(a, b, y, n);                                                           \
    }

XRT_DTYPES(XRT_VECTOR_ADD, v1)
XRT_DTYPES(XRT_VECTOR_ADD, v2)
