// window_sum: y[r, i] = x[r, i] + x[r, i+1] + x[r, i+2], i in [0, n-2), for each row r of x
// [rows, n]. Sums in fp32. Versions side by side (llm.c style), keyed as "window_sum.cuda".
//
// v1: one output per thread, three global loads each (the neighbours' loads hit L1/L2).
// v2: the seed's cache_read: a block owns a segment of TILE = blockDim.x * items outputs of one
//     row and first stages the TILE + 2 inputs it needs in shared memory with a cooperative,
//     vectorized fetch (16-byte loads from the 16-byte-aligned boundary below the segment), then
//     every thread reads its three inputs from shared memory. HBM sees each input once.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

template <typename T>
__device__ void window_sum_v1(const T* __restrict__ x,  // [rows, n] row-major input
                              T* __restrict__ y,        // [rows, n - 2] row-major output
                              int64_t rows, int64_t n) {
    const int64_t m = n - 2;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * m) return;
    const int64_t r = i / m, c = i - r * m;
    const T* xr = x + r * n + c;
    y[i] = T(float(xr[0]) + float(xr[1]) + float(xr[2]));
}

template <typename T>
__device__ void window_sum_v2(const T* __restrict__ x,  // [rows, n] row-major input, 16-byte aligned base
                              T* __restrict__ y,        // [rows, n - 2] row-major output
                              int64_t rows, int64_t n, int items) {
    constexpr int VEC = 16 / sizeof(T);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* seg = reinterpret_cast<T*>(smem_raw);  // [tile + 2 + 2 * VEC] the staged inputs
    const int64_t m = n - 2;
    const int64_t tile = (int64_t)blockDim.x * items;
    // One axis for rows x column blocks: x's limit is 2^31 - 1 where y's is 65535 (one row of 2^28
    // elements is 65536 and more column blocks).
    const int64_t blocks = (m + tile - 1) / tile;
    const int64_t r = blockIdx.x / blocks;
    const int64_t c0 = (blockIdx.x % blocks) * tile;  // first output column of this block
    if (r >= rows || c0 >= m) return;
    const int64_t total = rows * n;
    const int64_t first = r * n + c0;                              // first input needed
    const int64_t last = r * n + min(c0 + tile, m) + 2;            // one past the last input needed
    const int64_t base = first / VEC * VEC;                        // aligned start of the fetch
    const int64_t chunks = (last - base + VEC - 1) / VEC;
    // Cooperative fetch: thread t loads chunks t, t + blockDim.x, ... as 16-byte vectors; the
    // chunk that runs past the end of the tensor is fetched element by element.
    for (int64_t k = threadIdx.x; k < chunks; k += blockDim.x) {
        const int64_t g = base + k * VEC;
        if (g + VEC <= total) {
            reinterpret_cast<float4*>(seg)[k] = reinterpret_cast<const float4*>(x)[g / VEC];
        } else {
            for (int e = 0; e < VEC && g + e < total; ++e) seg[k * VEC + e] = x[g + e];
        }
    }
    __syncthreads();
    const int64_t off = first - base;
    T* yr = y + r * m;
    for (int64_t j = threadIdx.x; j < tile && c0 + j < m; j += blockDim.x) {
        const T* s = seg + off + j;
        yr[c0 + j] = T(float(s[0]) + float(s[1]) + float(s[2]));
    }
}

#define XRT_WINDOW_SUM(SUFFIX, T)                                                                  \
    extern "C" __global__ void window_sum_v1_##SUFFIX(const T* x, T* y, int64_t rows, int64_t n) { \
        window_sum_v1<T>(x, y, rows, n);                                                           \
    }                                                                                              \
    extern "C" __global__ void window_sum_v2_##SUFFIX(const T* x, T* y, int64_t rows, int64_t n,   \
                                                      int items) {                                 \
        window_sum_v2<T>(x, y, rows, n, items);                                                    \
    }

XRT_WINDOW_SUM(f32, float)
XRT_WINDOW_SUM(f16, __half)
XRT_WINDOW_SUM(bf16, __nv_bfloat16)
