// Helpers the CUDA C kernels share: warp and block reductions, the v2 row kernels' registers-cached
// row load, and the elementwise kernels' 16-byte grid-stride loop. A source takes them with
// `#include "common.cuh"`; xrt.kernels.cuda_source inlines this text there before compiling, so the
// compile (and pycuda's cache key, the text) is the same from a checkout, an editable install and a
// wheel. An include guard rather than `#pragma once`: inlined, this is part of the main file.
#ifndef XRT_CUDA_COMMON_CUH
#define XRT_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Every thread gets the block's sum (or max); blockDim.x is a multiple of 32.
template <bool MAX>
__device__ float block_reduce(float v, float* red /* [32] shared */) {
    v = MAX ? warp_max(v) : warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();  // red is reused by consecutive reductions
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : (MAX ? -INFINITY : 0.f);
    return MAX ? warp_max(v) : warp_sum(v);
}
__device__ __forceinline__ float block_sum(float v, float* red) { return block_reduce<false>(v, red); }
__device__ __forceinline__ float block_max(float v, float* red) { return block_reduce<true>(v, red); }

// The v2 row kernels' row in registers: thread t holds the 16-byte vectors t + k * blockDim.x
// (k < ITEMS) of a row of nvec vectors, unpacked to fp32 in v[k][0..VEC); each value loaded is
// also passed, in order, to each(value) (a running sum or max). v[k] of a vector past the row is
// left unset: guard later uses by threadIdx.x + k * blockDim.x < nvec.
template <typename T, int ITEMS, typename F>
__device__ __forceinline__ void load_row(const T* __restrict__ row, int64_t nvec,
                                         float (&v)[ITEMS][16 / sizeof(T)], F each) {
    constexpr int VEC = 16 / sizeof(T);
    const float4* r = reinterpret_cast<const float4*>(row);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int64_t c = threadIdx.x + (int64_t)k * blockDim.x;
        if (c < nvec) {
            float4 raw = r[c];
            const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
            for (int j = 0; j < VEC; ++j) { v[k][j] = float(e[j]); each(v[k][j]); }
        }
    }
}

// The v2 row kernels' write-back: thread t stores the 16-byte vectors t + k * blockDim.x (k <
// ITEMS, those within the row's nvec) of row, element j of vector k being T(f(k, j)), computed in
// order k, then j (f may also accumulate: it is called once per element, in that order).
template <typename T, int ITEMS, typename F>
__device__ __forceinline__ void store_row(T* __restrict__ row, int64_t nvec, F f) {
    constexpr int VEC = 16 / sizeof(T);
    float4* r = reinterpret_cast<float4*>(row);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int64_t c = threadIdx.x + (int64_t)k * blockDim.x;
        if (c < nvec) {
            float4 raw;
            T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
            for (int j = 0; j < VEC; ++j) e[j] = T(f(k, j));
            r[c] = raw;
        }
    }
}

// One 16-byte vector of outputs: lane k is f(lane k of each input vector).
template <typename T, typename F, typename... V>
__device__ __forceinline__ float4 map_lanes(F f, V... in) {
    float4 out;
    T* oe = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int k = 0; k < (int)(16 / sizeof(T)); ++k) oe[k] = f(reinterpret_cast<const T*>(&in)[k]...);
    return out;
}

// Elementwise y[i] = f(in[i]...) over n contiguous elements, 16-byte aligned: 16-byte vectors
// (float4 = 4 fp32 or 8 fp16/bf16) in a grid-stride loop, then the last n % VEC elements as
// scalars, one per thread of the first block.
template <typename T, typename F, typename... In>
__device__ __forceinline__ void map_vec(F f, T* __restrict__ y, int64_t n, const In* __restrict__... in) {
    constexpr int VEC = 16 / sizeof(T);
    const int64_t nvec = n / VEC;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    float4* yv = reinterpret_cast<float4*>(y);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += stride)
        yv[i] = map_lanes<T>(f, reinterpret_cast<const float4*>(in)[i]...);
    for (int64_t i = nvec * VEC + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = f(in[i]...);
}

// M(V, SUFFIX, T) for each dtype the entries come in: the SUFFIX of an entry's name and its type T.
#define XRT_DTYPES(M, V) M(V, f32, float) M(V, f16, __half) M(V, bf16, __nv_bfloat16)

#endif  // XRT_CUDA_COMMON_CUH
