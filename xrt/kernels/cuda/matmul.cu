// fp32 SGEMM on the SIMT cores (no tensor cores, no tf32): C[M,N] = A[M,K] @ B[K,N], all three
// row-major and contiguous, any M, N, K; a batch of them ([B,M,K] x [B,K,N]) along grid axis z. Versions side by side (llm.c style), keyed as
// "matmul.cuda"; the tile sizes are #defines, so the launcher compiles one module per config
// (-DXRT_BM=128 ...; -DXRT_ONLY=<n> keeps only version n) and nvcc without defines builds all four
// versions at the default tiles.
//
// v1: naive, one thread per C element, a 16x16 block; every operand comes from global memory.
// v2: register (local) blocking: each thread computes a TM x TN patch of C, so each A value it
//     loads is used TN times and each B value TM times; still no shared memory.
// v3: shared-memory blocking: the block's BM x BK slice of A and BK x BN slice of B are fetched
//     cooperatively (every thread a share, 16-byte float4 loads where K and N allow) into shared
//     memory, then each thread's TM x TN patch is computed from there.
// v4: v3 plus warp tiling and double buffering: 4 warps each own a (BM/2) x (BN/2) warp tile,
//     walked in sub-tiles so a warp's reads of shared memory are contiguous; the next K slice is
//     loaded into registers while the current one is computed, and two shared buffers let one
//     __syncthreads a step suffice.
#include <stdint.h>

#ifndef XRT_BM
#define XRT_BM 128  // rows of C per block
#endif
#ifndef XRT_BN
#define XRT_BN 128  // columns of C per block
#endif
#ifndef XRT_BK
#define XRT_BK 16  // K step: the slice of A and B held in shared memory
#endif
#ifndef XRT_TM
#define XRT_TM 8  // rows of C per thread (per warp sub-tile in v4)
#endif
#ifndef XRT_TN
#define XRT_TN 4  // columns of C per thread (per warp sub-tile in v4)
#endif
#ifndef XRT_TX
#define XRT_TX 4  // v4: threads of a warp along N in a sub-tile (32 / XRT_TX along M)
#endif

#define XRT_V4_THREADS 128  // v4: four warps, 2 x 2 over the block tile

// -- v1 ------------------------------------------------------------------------------------------
__device__ void matmul_v1(const float* __restrict__ A,  // [M, K] row-major
                          const float* __restrict__ B,  // [K, N] row-major
                          float* __restrict__ C,        // [M, N] row-major
                          int M, int N, int K) {
    const int col = blockIdx.x * 16 + (threadIdx.x & 15);
    const int row = blockIdx.y * 16 + (threadIdx.x >> 4);
    if (row >= M || col >= N) return;
    const float* a = A + (size_t)row * K;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += a[k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}

// -- v2 ------------------------------------------------------------------------------------------
template <int BM, int BN, int TM, int TN>
__device__ void matmul_v2(const float* __restrict__ A,  // [M, K] row-major
                          const float* __restrict__ B,  // [K, N] row-major
                          float* __restrict__ C,        // [M, N] row-major
                          int M, int N, int K) {
    constexpr int TXN = BN / TN;  // threads along N
    const int tx = threadIdx.x % TXN, ty = threadIdx.x / TXN;
    const int row0 = blockIdx.y * BM + ty * TM;
    const int col0 = blockIdx.x * BN + tx;  // this thread's columns: col0 + j * TXN (coalesced B reads)
    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int i = 0; i < TM; ++i) a[i] = row0 + i < M ? A[(size_t)(row0 + i) * K + k] : 0.f;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = col0 + j * TXN;
            b[j] = col < N ? B[(size_t)k * N + col] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int row = row0 + i, col = col0 + j * TXN;
            if (row < M && col < N) C[(size_t)row * N + col] = acc[i][j];
        }
}

// -- shared by v3 and v4: one K slice of A and B, global -> registers -> shared -------------------
// Slice<BM, BK> holds A's slice (at (row0, k0) of [M, K]) and Slice<BK, BN> B's (at (k0, col0) of
// [K, N]): one thread's share of a ROWS x COLS slice of a row-major [rows, cols] matrix at (r0, c0),
// as float4s along the columns: float4 f = threadIdx.x + p * NT is row f / (COLS / 4), columns
// (f % (COLS / 4)) * 4 and the three after. Out-of-range elements are zeros. ``vec``: K % 4 == 0,
// N % 4 == 0 and 16-byte-aligned A and B, so a float4 that starts in range lies in range.
template <int ROWS, int COLS, int NT>
struct Slice {
    static constexpr int F4 = ROWS * COLS / 4;       // float4s in the slice
    static constexpr int PER = (F4 + NT - 1) / NT;   // per thread
    float4 r[PER];
    __device__ __forceinline__ void load(const float* __restrict__ src0, int rows, int cols, int r0, int c0,
                                         bool vec) {
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int f = threadIdx.x + p * NT;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (f < F4) {
                const int i = f / (COLS / 4), jq = (f % (COLS / 4)) * 4;
                const int row = r0 + i, col = c0 + jq;
                if (row < rows) {
                    const float* src = src0 + (size_t)row * cols + col;
                    if (vec) {
                        if (col < cols) v = *reinterpret_cast<const float4*>(src);
                    } else {
                        v.x = col < cols ? src[0] : 0.f;
                        v.y = col + 1 < cols ? src[1] : 0.f;
                        v.z = col + 2 < cols ? src[2] : 0.f;
                        v.w = col + 3 < cols ? src[3] : 0.f;
                    }
                }
            }
            r[p] = v;
        }
    }
    // f(p, i, jq) for each of this thread's float4s of the slice: r[p] is row i, columns jq to jq + 3.
    template <typename F>
    __device__ __forceinline__ void each(F f) const {
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int q = threadIdx.x + p * NT;
            if (q < F4) f(p, q / (COLS / 4), (q % (COLS / 4)) * 4);
        }
    }
    // B's slice: as it is, S[i][j] (S: [ROWS][COLS] shared).
    __device__ __forceinline__ void store(float* S) const {
        each([&](int p, int i, int jq) { *reinterpret_cast<float4*>(&S[i * COLS + jq]) = r[p]; });
    }
    // A's slice: transposed, S[j][i] (S: [COLS][ROWS] shared), so a thread reads its TM rows as float4s.
    __device__ __forceinline__ void store_transposed(float* S) const {
        each([&](int p, int i, int jq) {
            S[(jq + 0) * ROWS + i] = r[p].x;
            S[(jq + 1) * ROWS + i] = r[p].y;
            S[(jq + 2) * ROWS + i] = r[p].z;
            S[(jq + 3) * ROWS + i] = r[p].w;
        });
    }
};

// dst[0..4) = the four floats at src (shared memory, 16-byte aligned), as one float4 load.
__device__ __forceinline__ void load4(float* dst, const float* src) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x; dst[1] = v.y; dst[2] = v.z; dst[3] = v.w;
}

__device__ __forceinline__ bool can_vectorize(const float* A, const float* B, int N, int K) {
    return (K & 3) == 0 && (N & 3) == 0 && (reinterpret_cast<uintptr_t>(A) & 15) == 0 &&
           (reinterpret_cast<uintptr_t>(B) & 15) == 0;
}

// One thread's TM x TN patch of C at (row0, col0), columns contiguous; float4 stores where allowed.
template <int TM, int TN>
__device__ __forceinline__ void store_patch(float* __restrict__ C, int M, int N, int row0, int col0,
                                            const float (&acc)[TM][TN], bool vec) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + i;
        if (row >= M) continue;
        float* dst = C + (size_t)row * N;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int col = col0 + j;
            if (vec && col + 3 < N) {
                *reinterpret_cast<float4*>(dst + col) = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            } else {
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (col + u < N) dst[col + u] = acc[i][j + u];
            }
        }
    }
}

// -- v3 ------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int TM, int TN>
__device__ void matmul_v3(const float* __restrict__ A,  // [M, K] row-major
                          const float* __restrict__ B,  // [K, N] row-major
                          float* __restrict__ C,        // [M, N] row-major
                          int M, int N, int K) {
    constexpr int NT = (BM / TM) * (BN / TN);
    __shared__ __align__(16) float As[BK * BM];
    __shared__ __align__(16) float Bs[BK * BN];
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const int brow = blockIdx.y * BM, bcol = blockIdx.x * BN;
    const bool vec = can_vectorize(A, B, N, K);
    Slice<BM, BK, NT> ta;  // A [BM, BK]
    Slice<BK, BN, NT> tb;  // B [BK, BN]
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        ta.load(A, M, K, brow, k0, vec);
        tb.load(B, K, N, k0, bcol, vec);
        ta.store_transposed(As);
        tb.store(Bs);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                load4(&a[i], &As[kk * BM + ty * TM + i]);
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                load4(&b[j], &Bs[kk * BN + tx * TN + j]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // the next slice overwrites As and Bs
    }
    const bool cvec = (N & 3) == 0 && (reinterpret_cast<uintptr_t>(C) & 15) == 0;
    store_patch<TM, TN>(C, M, N, brow + ty * TM, bcol + tx * TN, acc, cvec);
}

// -- v4 ------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int TM, int TN, int TX>
__device__ void matmul_v4(const float* __restrict__ A,  // [M, K] row-major
                          const float* __restrict__ B,  // [K, N] row-major
                          float* __restrict__ C,        // [M, N] row-major
                          int M, int N, int K) {
    constexpr int NT = XRT_V4_THREADS;
    constexpr int WM = BM / 2, WN = BN / 2;          // warp tile (2 x 2 warps)
    constexpr int TY = 32 / TX;                      // threads of a warp along M
    constexpr int WSUBM = TY * TM, WSUBN = TX * TN;  // warp sub-tile
    constexpr int WMITER = WM / WSUBM, WNITER = WN / WSUBN;
    static_assert(WMITER >= 1 && WM % WSUBM == 0, "v4: (BM/2) must be a multiple of (32/TX)*TM");
    static_assert(WNITER >= 1 && WN % WSUBN == 0, "v4: (BN/2) must be a multiple of TX*TN");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "v4: TM, TN and BK are multiples of 4");
    __shared__ __align__(16) float As[2][BK * BM];
    __shared__ __align__(16) float Bs[2][BK * BN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wrow = (warp / 2) * WM, wcol = (warp % 2) * WN;  // the warp tile in the block tile
    const int trow = (lane / TX) * TM, tcol = (lane % TX) * TN;  // the thread's patch in a sub-tile
    const int brow = blockIdx.y * BM, bcol = blockIdx.x * BN;
    const bool vec = can_vectorize(A, B, N, K);
    Slice<BM, BK, NT> ta;  // A [BM, BK]
    Slice<BK, BN, NT> tb;  // B [BK, BN]
    float acc[WMITER * TM][WNITER * TN] = {};
    float a[WMITER * TM], b[WNITER * TN];

    ta.load(A, M, K, brow, 0, vec);
    tb.load(B, K, N, 0, bcol, vec);
    ta.store_transposed(As[0]);
    tb.store(Bs[0]);
    __syncthreads();
    const int steps = (K + BK - 1) / BK;
    for (int s = 0; s < steps; ++s) {
        const int cur = s & 1;
        const bool more = s + 1 < steps;
        if (more) {  // the next slice's global loads are in flight while this one is computed
            ta.load(A, M, K, brow, (s + 1) * BK, vec);
            tb.load(B, K, N, (s + 1) * BK, bcol, vec);
        }
        const float* as = As[cur];
        const float* bs = Bs[cur];
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    load4(&a[wm * TM + i], &as[kk * BM + wrow + wm * WSUBM + trow + i]);
                }
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    load4(&b[wn * TN + j], &bs[kk * BN + wcol + wn * WSUBN + tcol + j]);
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += a[i] * b[j];
        }
        if (more) {  // the other buffer: nobody reads it in this step
            ta.store_transposed(As[cur ^ 1]);
            tb.store(Bs[cur ^ 1]);
        }
        __syncthreads();
    }
    const bool cvec = (N & 3) == 0 && (reinterpret_cast<uintptr_t>(C) & 15) == 0;
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn) {
            float patch[TM][TN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) patch[i][j] = acc[wm * TM + i][wn * TN + j];
            store_patch<TM, TN>(C, M, N, brow + wrow + wm * WSUBM + trow, bcol + wcol + wn * WSUBN + tcol, patch,
                                cvec);
        }
}

// -- entries: matmul_v<n>_f32(A, B, C, M, N, K), grid (cdiv(N, BN), cdiv(M, BM), batch) --------------
// A [batch, M, K], B [batch, K, N], C [batch, M, N], each contiguous: blockIdx.z picks the matrices.
#define XRT_BATCH_OFFSETS                          \
    A += (size_t)blockIdx.z * (size_t)M * (size_t)K; \
    B += (size_t)blockIdx.z * (size_t)K * (size_t)N; \
    C += (size_t)blockIdx.z * (size_t)M * (size_t)N;

#if !defined(XRT_ONLY) || XRT_ONLY == 1
extern "C" __global__ void __launch_bounds__(256) matmul_v1_f32(const float* A, const float* B, float* C, int M,
                                                                int N, int K) {
    XRT_BATCH_OFFSETS
    matmul_v1(A, B, C, M, N, K);
}
#endif
#if !defined(XRT_ONLY) || XRT_ONLY == 2
extern "C" __global__ void __launch_bounds__((XRT_BM / XRT_TM) * (XRT_BN / XRT_TN))
    matmul_v2_f32(const float* A, const float* B, float* C, int M, int N, int K) {
    XRT_BATCH_OFFSETS
    matmul_v2<XRT_BM, XRT_BN, XRT_TM, XRT_TN>(A, B, C, M, N, K);
}
#endif
#if !defined(XRT_ONLY) || XRT_ONLY == 3
extern "C" __global__ void __launch_bounds__((XRT_BM / XRT_TM) * (XRT_BN / XRT_TN))
    matmul_v3_f32(const float* A, const float* B, float* C, int M, int N, int K) {
    XRT_BATCH_OFFSETS
    matmul_v3<XRT_BM, XRT_BN, XRT_BK, XRT_TM, XRT_TN>(A, B, C, M, N, K);
}
#endif
#if !defined(XRT_ONLY) || XRT_ONLY == 4
extern "C" __global__ void __launch_bounds__(XRT_V4_THREADS)
    matmul_v4_f32(const float* A, const float* B, float* C, int M, int N, int K) {
    XRT_BATCH_OFFSETS
    matmul_v4<XRT_BM, XRT_BN, XRT_BK, XRT_TM, XRT_TN, XRT_TX>(A, B, C, M, N, K);
}
#endif
