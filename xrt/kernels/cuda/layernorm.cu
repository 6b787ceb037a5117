// layernorm over the rows of x [rows, n]: forward (y, mean, rstd) and backward (dx and the
// [G, n] fp32 partials of dweight / dbias, summed by layernorm_sum_partials). Statistics in fp32.
// Versions side by side (llm.c style), keyed as "layernorm.cuda" / "layernorm_bwd.cuda".
//
// fwd v1: block per row, any n, scalar loads; three passes over the row (mean, variance, write).
// fwd v2: block per row, the row cached in registers as ITEMS 16-byte vectors per thread
//         (n % VEC == 0, aligned rows): x read once, y written once, 16-byte accesses.
// bwd v1: G blocks, each over a run of rows; per row, one pass for the two row sums and one to
//         write dx and add its dy * xhat and dy into the block's row of the fp32 partials.
// bwd v2: like v1 with the row of x and dy in registers (16-byte loads, read once) and the
//         dweight / dbias partials accumulated in registers, written once per block.
// bwd v3: long rows (the v2 row of x, dy, w and two accumulators spills past ~8192 elements):
//         split by columns. layernorm_bwd_rowsum: a block per row, the two row sums
//         c1 = mean(xhat * w * dy), c2 = mean(w * dy) into [rows] fp32 buffers. Then
//         layernorm_bwd_v3: a grid of G row groups x column tiles of blockDim.x * VEC columns
//         (16-byte vectors when n % VEC == 0 and rows are aligned, else scalars); each thread
//         walks its group's rows over one vector of columns, writes dx and keeps that vector's
//         dweight / dbias partials in registers. x and dy are read twice, nothing spills.
#include "common.cuh"

template <typename T>
__device__ void layernorm_fwd_v1(const T* __restrict__ x,  // [rows, n] row-major input
                                 const T* __restrict__ w,  // [n] weight
                                 const T* __restrict__ b,  // [n] bias
                                 T* __restrict__ y,        // [rows, n] row-major output
                                 float* __restrict__ mean_out,  // [rows]
                                 float* __restrict__ rstd_out,  // [rows]
                                 int64_t n, float eps) {
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const T* xr = x + r * n;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += float(xr[i]);
    const float mean = block_sum(s, red) / n;
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) { const float d = float(xr[i]) - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q, red) / n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        y[r * n + i] = T((float(xr[i]) - mean) * rstd * float(w[i]) + float(b[i]));
    if (threadIdx.x == 0) { mean_out[r] = mean; rstd_out[r] = rstd; }
}

template <typename T, int ITEMS>
__device__ void layernorm_fwd_v2(const T* __restrict__ x,  // [rows, n] row-major input, aligned rows
                                 const T* __restrict__ w,  // [n] weight, 16-byte aligned
                                 const T* __restrict__ b,  // [n] bias, 16-byte aligned
                                 T* __restrict__ y,        // [rows, n] row-major output, aligned rows
                                 float* __restrict__ mean_out,  // [rows]
                                 float* __restrict__ rstd_out,  // [rows]
                                 int64_t n, float eps) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float red[32];
    const int64_t r = blockIdx.x, nvec = n / VEC;
    float v[ITEMS][VEC];
    float s = 0.f;
    load_row(x + r * n, nvec, v, [&](float e) { s += e; });
    const float mean = block_sum(s, red) / n;
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
        if (threadIdx.x + (int64_t)k * blockDim.x < nvec)
#pragma unroll
            for (int j = 0; j < VEC; ++j) { v[k][j] -= mean; q += v[k][j] * v[k][j]; }
    const float rstd = rsqrtf(block_sum(q, red) / n + eps);
    float4* yr = reinterpret_cast<float4*>(y + r * n);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int64_t c = threadIdx.x + (int64_t)k * blockDim.x;
        if (c < nvec) {
            float4 wr = reinterpret_cast<const float4*>(w)[c], br = reinterpret_cast<const float4*>(b)[c], out;
            const T *we = reinterpret_cast<const T*>(&wr), *be = reinterpret_cast<const T*>(&br);
            T* oe = reinterpret_cast<T*>(&out);
#pragma unroll
            for (int j = 0; j < VEC; ++j) oe[j] = T(v[k][j] * rstd * float(we[j]) + float(be[j]));
            yr[c] = out;
        }
    }
    if (threadIdx.x == 0) { mean_out[r] = mean; rstd_out[r] = rstd; }
}

template <typename T>
__device__ void layernorm_bwd_v1(const T* __restrict__ dy,   // [rows, n] row-major upstream gradient
                                 const T* __restrict__ x,    // [rows, n] row-major forward input
                                 const T* __restrict__ w,    // [n] weight
                                 const float* __restrict__ mean,  // [rows] from the forward
                                 const float* __restrict__ rstd,  // [rows] from the forward
                                 T* __restrict__ dx,         // [rows, n] row-major output
                                 float* __restrict__ dw_part,  // [G, n] fp32, row blockIdx.x is this block's
                                 float* __restrict__ db_part,  // [G, n] fp32, likewise
                                 int64_t rows, int64_t n, int64_t rows_per_block) {
    __shared__ float red[32];
    float* dwp = dw_part + (int64_t)blockIdx.x * n;
    float* dbp = db_part + (int64_t)blockIdx.x * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) { dwp[i] = 0.f; dbp[i] = 0.f; }
    const int64_t r0 = (int64_t)blockIdx.x * rows_per_block;
    const int64_t r1 = min(r0 + rows_per_block, rows);
    for (int64_t r = r0; r < r1; ++r) {
        const T *xr = x + r * n, *dyr = dy + r * n;
        const float mu = mean[r], rs = rstd[r];
        float a = 0.f, c = 0.f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float wdy = float(w[i]) * float(dyr[i]);
            a += (float(xr[i]) - mu) * rs * wdy;
            c += wdy;
        }
        const float c1 = block_sum(a, red) / n, c2 = block_sum(c, red) / n;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float g = float(dyr[i]), xhat = (float(xr[i]) - mu) * rs;
            dx[r * n + i] = T((float(w[i]) * g - (xhat * c1 + c2)) * rs);
            dwp[i] += g * xhat;  // each column is owned by one thread: no race
            dbp[i] += g;
        }
    }
}

template <typename T, int ITEMS>
__device__ void layernorm_bwd_v2(const T* __restrict__ dy,   // [rows, n] row-major, aligned rows
                                 const T* __restrict__ x,    // [rows, n] row-major, aligned rows
                                 const T* __restrict__ w,    // [n] weight, 16-byte aligned
                                 const float* __restrict__ mean,  // [rows]
                                 const float* __restrict__ rstd,  // [rows]
                                 T* __restrict__ dx,         // [rows, n] row-major output, aligned rows
                                 float* __restrict__ dw_part,  // [G, n] fp32
                                 float* __restrict__ db_part,  // [G, n] fp32
                                 int64_t rows, int64_t n, int64_t rows_per_block) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float red[32];
    const int64_t nvec = n / VEC;
    float wv[ITEMS][VEC], dwa[ITEMS][VEC], dba[ITEMS][VEC], xh[ITEMS][VEC], g[ITEMS][VEC];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int64_t c = threadIdx.x + (int64_t)k * blockDim.x;
        float4 raw = c < nvec ? reinterpret_cast<const float4*>(w)[c] : make_float4(0.f, 0.f, 0.f, 0.f);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) { wv[k][j] = float(e[j]); dwa[k][j] = 0.f; dba[k][j] = 0.f; }
    }
    const int64_t r0 = (int64_t)blockIdx.x * rows_per_block;
    const int64_t r1 = min(r0 + rows_per_block, rows);
    for (int64_t r = r0; r < r1; ++r) {
        const float mu = mean[r], rs = rstd[r];
        float a = 0.f, cs = 0.f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int64_t c = threadIdx.x + (int64_t)k * blockDim.x;
            if (c < nvec) {
                float4 xr = reinterpret_cast<const float4*>(x + r * n)[c];
                float4 gr = reinterpret_cast<const float4*>(dy + r * n)[c];
                const T *xe = reinterpret_cast<const T*>(&xr), *ge = reinterpret_cast<const T*>(&gr);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    g[k][j] = float(ge[j]);
                    xh[k][j] = (float(xe[j]) - mu) * rs;
                    const float wdy = wv[k][j] * g[k][j];
                    a += xh[k][j] * wdy;
                    cs += wdy;
                }
            }
        }
        const float c1 = block_sum(a, red) / n, c2 = block_sum(cs, red) / n;
        store_row<T, ITEMS>(dx + r * n, nvec, [&](int k, int j) {
            dwa[k][j] += g[k][j] * xh[k][j];
            dba[k][j] += g[k][j];
            return (wv[k][j] * g[k][j] - (xh[k][j] * c1 + c2)) * rs;
        });
    }
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int64_t c = threadIdx.x + (int64_t)k * blockDim.x;
        if (c < nvec) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                dw_part[(int64_t)blockIdx.x * n + c * VEC + j] = dwa[k][j];
                db_part[(int64_t)blockIdx.x * n + c * VEC + j] = dba[k][j];
            }
        }
    }
}

// c1[r] = sum_i xhat * w * dy / n, c2[r] = sum_i w * dy / n; one block per row, any n.
template <typename T, bool VECTOR>
__device__ void layernorm_bwd_rowsum(const T* __restrict__ dy,   // [rows, n] row-major
                                     const T* __restrict__ x,    // [rows, n] row-major
                                     const T* __restrict__ w,    // [n] weight
                                     const float* __restrict__ mean,  // [rows]
                                     const float* __restrict__ rstd,  // [rows]
                                     float* __restrict__ c1,     // [rows] output
                                     float* __restrict__ c2,     // [rows] output
                                     int64_t n) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const float mu = mean[r], rs = rstd[r];
    const T *xr = x + r * n, *dyr = dy + r * n;
    float a = 0.f, c = 0.f;
    if (VECTOR) {  // n % VEC == 0, 16-byte aligned rows
        const int64_t nvec = n / VEC;
#pragma unroll 2
        for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
            float4 xv = reinterpret_cast<const float4*>(xr)[v], gv = reinterpret_cast<const float4*>(dyr)[v];
            float4 wv = reinterpret_cast<const float4*>(w)[v];
            const T *xe = reinterpret_cast<const T*>(&xv), *ge = reinterpret_cast<const T*>(&gv),
                    *we = reinterpret_cast<const T*>(&wv);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float wdy = float(we[j]) * float(ge[j]);
                a += (float(xe[j]) - mu) * rs * wdy;
                c += wdy;
            }
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float wdy = float(w[i]) * float(dyr[i]);
            a += (float(xr[i]) - mu) * rs * wdy;
            c += wdy;
        }
    }
    a = block_sum(a, red);
    c = block_sum(c, red);
    if (threadIdx.x == 0) { c1[r] = a / n; c2[r] = c / n; }
}

// Grid (G, column tiles); a thread owns VEC columns (VECTOR) or 1, walks rows
// [blockIdx.x * rows_per_block, ...) and writes its columns' partials into row blockIdx.x.
template <typename T, bool VECTOR>
__device__ void layernorm_bwd_v3(const T* __restrict__ dy,   // [rows, n] row-major
                                 const T* __restrict__ x,    // [rows, n] row-major
                                 const T* __restrict__ w,    // [n] weight
                                 const float* __restrict__ mean,  // [rows]
                                 const float* __restrict__ rstd,  // [rows]
                                 const float* __restrict__ c1,    // [rows] from layernorm_bwd_rowsum
                                 const float* __restrict__ c2,    // [rows] from layernorm_bwd_rowsum
                                 T* __restrict__ dx,         // [rows, n] row-major output
                                 float* __restrict__ dw_part,  // [G, n] fp32
                                 float* __restrict__ db_part,  // [G, n] fp32
                                 int64_t rows, int64_t n, int64_t rows_per_block) {
    constexpr int W = VECTOR ? 16 / sizeof(T) : 1;  // columns per thread
    const int64_t col0 = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * W;
    if (col0 >= n) return;  // (VECTOR: n % W == 0, so a thread's columns are all in or all out)
    float wv[W], dwa[W], dba[W];
    if (VECTOR) {
        float4 raw = *reinterpret_cast<const float4*>(w + col0);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int j = 0; j < W; ++j) wv[j] = float(e[j]);
    } else {
        wv[0] = float(w[col0]);
    }
#pragma unroll
    for (int j = 0; j < W; ++j) { dwa[j] = 0.f; dba[j] = 0.f; }
    const int64_t r0 = (int64_t)blockIdx.x * rows_per_block;
    const int64_t r1 = min(r0 + rows_per_block, rows);
#pragma unroll 2
    for (int64_t r = r0; r < r1; ++r) {
        const float mu = mean[r], rs = rstd[r], k1 = c1[r], k2 = c2[r];
        float xe[W], ge[W];
        if (VECTOR) {
            float4 xv = *reinterpret_cast<const float4*>(x + r * n + col0);
            float4 gv = *reinterpret_cast<const float4*>(dy + r * n + col0);
            const T *xp = reinterpret_cast<const T*>(&xv), *gp = reinterpret_cast<const T*>(&gv);
#pragma unroll
            for (int j = 0; j < W; ++j) { xe[j] = float(xp[j]); ge[j] = float(gp[j]); }
        } else {
            xe[0] = float(x[r * n + col0]);
            ge[0] = float(dy[r * n + col0]);
        }
        float4 o4;  // W <= 8 outputs, in a 16-byte aligned register tuple
        T* out = reinterpret_cast<T*>(&o4);
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float xhat = (xe[j] - mu) * rs;
            out[j] = T((wv[j] * ge[j] - (xhat * k1 + k2)) * rs);
            dwa[j] += ge[j] * xhat;
            dba[j] += ge[j];
        }
        if (VECTOR) *reinterpret_cast<float4*>(dx + r * n + col0) = o4;
        else dx[r * n + col0] = out[0];
    }
#pragma unroll
    for (int j = 0; j < W; ++j) {
        dw_part[(int64_t)blockIdx.x * n + col0 + j] = dwa[j];
        db_part[(int64_t)blockIdx.x * n + col0 + j] = dba[j];
    }
}

// dweight[i] = sum_g dw_part[g, i], likewise dbias; one thread per column (coalesced rows).
template <typename T>
__device__ void layernorm_sum_partials(const float* __restrict__ dw_part,  // [G, n] fp32
                                       const float* __restrict__ db_part,  // [G, n] fp32
                                       T* __restrict__ dw,  // [n] output, weight's dtype
                                       T* __restrict__ db,  // [n] output, weight's dtype
                                       int64_t groups, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = 0.f, c = 0.f;
    for (int64_t gi = 0; gi < groups; ++gi) { a += dw_part[gi * n + i]; c += db_part[gi * n + i]; }
    dw[i] = T(a);
    db[i] = T(c);
}

#define XRT_LN_V2(SUFFIX, T, ITEMS)                                                                 \
    extern "C" __global__ void __launch_bounds__(1024) layernorm_fwd_v2_##SUFFIX##_##ITEMS(         \
        const T* x, const T* w, const T* b, T* y, float* mean, float* rstd, int64_t n, float eps) { \
        layernorm_fwd_v2<T, ITEMS>(x, w, b, y, mean, rstd, n, eps);                                 \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(1024) layernorm_bwd_v2_##SUFFIX##_##ITEMS(         \
        const T* dy, const T* x, const T* w, const float* mean, const float* rstd, T* dx,           \
        float* dw_part, float* db_part, int64_t rows, int64_t n, int64_t rows_per_block) {          \
        layernorm_bwd_v2<T, ITEMS>(dy, x, w, mean, rstd, dx, dw_part, db_part, rows, n, rows_per_block); \
    }
// The column-split backward's two entries, scalar (VECTOR false) or 16-byte vectors (true).
#define XRT_LN_ROWSUM(NAME, T, VECTOR)                                                              \
    extern "C" __global__ void __launch_bounds__(1024) NAME(                                        \
        const T* dy, const T* x, const T* w, const float* mean, const float* rstd, float* c1,       \
        float* c2, int64_t n) {                                                                     \
        layernorm_bwd_rowsum<T, VECTOR>(dy, x, w, mean, rstd, c1, c2, n);                           \
    }
#define XRT_LN_V3(NAME, T, VECTOR)                                                                  \
    extern "C" __global__ void __launch_bounds__(1024) NAME(                                        \
        const T* dy, const T* x, const T* w, const float* mean, const float* rstd, const float* c1, \
        const float* c2, T* dx, float* dw_part, float* db_part, int64_t rows, int64_t n,            \
        int64_t rows_per_block) {                                                                   \
        layernorm_bwd_v3<T, VECTOR>(dy, x, w, mean, rstd, c1, c2, dx, dw_part, db_part, rows, n,    \
                                    rows_per_block);                                                \
    }
#define XRT_LN(SUFFIX, T)                                                                           \
    extern "C" __global__ void __launch_bounds__(1024) layernorm_fwd_v1_##SUFFIX(                   \
        const T* x, const T* w, const T* b, T* y, float* mean, float* rstd, int64_t n, float eps) { \
        layernorm_fwd_v1<T>(x, w, b, y, mean, rstd, n, eps);                                        \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(1024) layernorm_bwd_v1_##SUFFIX(                   \
        const T* dy, const T* x, const T* w, const float* mean, const float* rstd, T* dx,           \
        float* dw_part, float* db_part, int64_t rows, int64_t n, int64_t rows_per_block) {          \
        layernorm_bwd_v1<T>(dy, x, w, mean, rstd, dx, dw_part, db_part, rows, n, rows_per_block);   \
    }                                                                                               \
    XRT_LN_ROWSUM(layernorm_bwd_rowsum_v1_##SUFFIX, T, false)                                       \
    XRT_LN_ROWSUM(layernorm_bwd_rowsum_v2_##SUFFIX, T, true)                                        \
    XRT_LN_V3(layernorm_bwd_v3_##SUFFIX, T, false)                                                  \
    XRT_LN_V3(layernorm_bwd_v3_vec_##SUFFIX, T, true)                                               \
    extern "C" __global__ void layernorm_sum_partials_##SUFFIX(const float* dw_part, const float* db_part, \
                                                               T* dw, T* db, int64_t groups, int64_t n) { \
        layernorm_sum_partials<T>(dw_part, db_part, dw, db, groups, n);                             \
    }                                                                                               \
    XRT_LN_V2(SUFFIX, T, 1) XRT_LN_V2(SUFFIX, T, 2) XRT_LN_V2(SUFFIX, T, 4) XRT_LN_V2(SUFFIX, T, 8)

XRT_LN(f32, float)
XRT_LN(f16, __half)
XRT_LN(bf16, __nv_bfloat16)
