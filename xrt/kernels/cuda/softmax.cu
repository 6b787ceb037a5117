// softmax over the last dim of x [rows, n], one block per row. Versions side by side (llm.c
// style), keyed as "softmax.cuda"; max and sum in fp32, reductions by warp shuffles.
//
// v1: any n, any alignment: scalar loads, an online max/sum pass then the normalising pass
//     (x read twice; the second read mostly hits L2).
// v2: the row cached in registers: ITEMS 16-byte vectors per thread (n % VEC == 0, 16-byte
//     aligned rows), so x is read once and y written once, with 16-byte accesses.
#include "common.cuh"

template <typename T>
__device__ void softmax_v1(const T* __restrict__ x,  // [rows, n] row-major input
                           T* __restrict__ y,        // [rows, n] row-major output
                           int64_t n) {
    __shared__ float red[32];
    const T* xr = x + (int64_t)blockIdx.x * n;
    T* yr = y + (int64_t)blockIdx.x * n;
    float m = -INFINITY, s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = float(xr[i]);
        const float mn = fmaxf(m, v);
        s = s * __expf(m - mn) + __expf(v - mn);
        m = mn;
    }
    const float row_max = block_max(m, red);
    const float row_sum = block_sum(m == -INFINITY ? 0.f : s * __expf(m - row_max), red);
    const float inv = 1.f / row_sum;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = T(__expf(float(xr[i]) - row_max) * inv);
}

template <typename T, int ITEMS>
__device__ void softmax_v2(const T* __restrict__ x,  // [rows, n] row-major input, 16-byte aligned rows
                           T* __restrict__ y,        // [rows, n] row-major output, 16-byte aligned rows
                           int64_t n) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float red[32];
    const int64_t nvec = n / VEC;
    float v[ITEMS][VEC];
    float m = -INFINITY;
    load_row(x + (int64_t)blockIdx.x * n, nvec, v, [&](float e) { m = fmaxf(m, e); });
    const float row_max = block_max(m, red);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        if (threadIdx.x + (int64_t)k * blockDim.x < nvec) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) { v[k][j] = __expf(v[k][j] - row_max); s += v[k][j]; }
        }
    }
    const float inv = 1.f / block_sum(s, red);
    store_row<T, ITEMS>(y + (int64_t)blockIdx.x * n, nvec, [&](int k, int j) { return v[k][j] * inv; });
}

#define XRT_SOFTMAX_V2(SUFFIX, T, ITEMS)                                                          \
    extern "C" __global__ void __launch_bounds__(1024) softmax_v2_##SUFFIX##_##ITEMS(const T* x, T* y, \
                                                                                 int64_t n) {     \
        softmax_v2<T, ITEMS>(x, y, n);                                                            \
    }
#define XRT_SOFTMAX(SUFFIX, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(1024) softmax_v1_##SUFFIX(const T* x, T* y, int64_t n) { \
        softmax_v1<T>(x, y, n);                                                                   \
    }                                                                                             \
    XRT_SOFTMAX_V2(SUFFIX, T, 1) XRT_SOFTMAX_V2(SUFFIX, T, 2) XRT_SOFTMAX_V2(SUFFIX, T, 4)         \
    XRT_SOFTMAX_V2(SUFFIX, T, 8)

XRT_SOFTMAX(f32, float)
XRT_SOFTMAX(f16, __half)
XRT_SOFTMAX(bf16, __nv_bfloat16)
