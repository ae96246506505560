// Flash-style attention blocks: one CTA of 4 warps per (query tile, head, sequence) in the forward and per
// (key tile, key/value head, sequence) in the backward, which keeps its keys' dK and dV across every query
// tile of every query head of the group and adds dQ into the fp32 global buffer with atomics
// (FlashAttention-2's split). bf16 blocks of head_dim up to 128 keep each warp's work in registers
// (block_forward_registers_kernel, block_backward_registers_kernel); the others (fp32, larger heads) stage
// their tiles, scores and accumulators in shared memory (block_forward_kernel, block_backward_kernel). The
// semantics, masks and dropout draws are those of exec/cpu/cpu_attention.cc's block ops.
#include "kernels/flash_attention.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/device.cuh"

namespace loom::kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kBlockThreads = kWarps * 32;
constexpr int kRegisterKeys = 64;          // keys per tile of the register forward (block_forward_registers_kernel)
constexpr int kRegisterBackwardRows = 32;  // queries per tile of the register backward

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<std::uint32_t*>(&v);
}

// An operand of a product, a tile in shared memory: element (i, j) at p[i·ld + j], or at p[j·ld + i]
// where `trans` (A(m, k) = at(m, k), B(k, n) = at(k, n)).
template <class T>
struct Operand {
  const T* p;
  int ld;
  bool trans;
  __device__ __forceinline__ float at(int i, int j) const { return to_float(trans ? p[j * ld + i] : p[i * ld + j]); }
  __device__ __forceinline__ unsigned address(int row, int col) const {
    return static_cast<unsigned>(__cvta_generic_to_shared(p + row * ld + col));
  }
};

__device__ __forceinline__ void mma_bf16(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The A fragment of an inner step of 16 from the two C fragments (16 × 8) that hold its columns 0-7 and
// 8-15, rounded to bf16: mma.m16n8k16's C layout gives each thread the rows and columns its A layout
// wants (PTX ISA, "Matrix Fragments for mma.m16n8k16").
__device__ __forceinline__ void accumulators_as_a(std::uint32_t a[4], const float lo[4], const float hi[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// The A fragment (16 × 16 at m0, k0) and the B fragment (16 × 8 at k0, n0) of mma.m16n8k16 by ldmatrix:
// thread t of a warp gets, of each 8 × 8 matrix, row t/4 and columns 2(t%4), 2(t%4)+1 — or with .trans
// those of the transposed matrix —, the fragments' layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"
// and "ldmatrix"). Each lane names one row of one matrix: lanes 8i..8i+7 the rows of matrix i.
__device__ __forceinline__ void load_a(std::uint32_t a[4], const Operand<bf16>& A, int m0, int k0, int lane) {
  const int i = lane / 8, r = lane % 8;  // matrix i: m + (i % 2)·8, k + (i / 2)·8
  if (!A.trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(A.address(m0 + (i % 2) * 8 + r, k0 + (i / 2) * 8))
                 : "memory");
  } else {  // stored [k][m]: the transposed load
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(A.address(k0 + (i / 2) * 8 + r, m0 + (i % 2) * 8))
                 : "memory");
  }
}
__device__ __forceinline__ void load_b(std::uint32_t b[2], const Operand<bf16>& B, int k0, int n0, int lane) {
  const int i = (lane / 8) % 2, r = lane % 8;  // matrix i: k + i·8 (lanes 16-31 repeat 0-15's addresses)
  if (B.trans) {  // stored [n][k]: B's columns are rows in memory, as mma's "col" operand wants
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(B.address(n0 + r, k0 + i * 8))
                 : "memory");
  } else {  // stored [k][n]
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(B.address(k0 + i * 8 + r, n0))
                 : "memory");
  }
}

// Every output (m, n) of A·B (M × N, inner K) handed once to epi(m, n, value) by one thread. bf16: a warp
// per 16 × 8 output tile on the tensor cores (mma.sync m16n8k16, fp32 accumulate), its fragments loaded by
// ldmatrix or, with `ldmatrix` false, element by element; fp32: a thread per output, fp32 FMAs. M a
// multiple of 16, N of 8, K of 16; leading dimensions multiples of 8 and tiles 16-byte aligned (ldmatrix).
template <class T, class Epi>
__device__ __forceinline__ void block_product(int M, int N, int K, const Operand<T>& A, const Operand<T>& B,
                                              bool ldmatrix, Epi epi) {
  if constexpr (std::is_same_v<T, float>) {
    for (int o = threadIdx.x; o < M * N; o += blockDim.x) {
      const int m = o / N, n = o % N;
      float sum = 0;
      for (int k = 0; k < K; ++k) sum = fmaf(A.at(m, k), B.at(k, n), sum);
      epi(m, n, sum);
    }
  } else {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t2 = (lane % 4) * 2;
    const int tiles_n = N / 8;
    for (int tile = warp; tile < (M / 16) * tiles_n; tile += blockDim.x / 32) {
      const int m0 = tile / tiles_n * 16, n0 = tile % tiles_n * 8;
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int k0 = 0; k0 < K; k0 += 16) {
        std::uint32_t af[4], bf[2];
        if (ldmatrix) {
          load_a(af, A, m0, k0, lane);
          load_b(bf, B, k0, n0, lane);
        } else {
          af[0] = pack_bf16(A.at(m0 + g, k0 + t2), A.at(m0 + g, k0 + t2 + 1));
          af[1] = pack_bf16(A.at(m0 + g + 8, k0 + t2), A.at(m0 + g + 8, k0 + t2 + 1));
          af[2] = pack_bf16(A.at(m0 + g, k0 + t2 + 8), A.at(m0 + g, k0 + t2 + 9));
          af[3] = pack_bf16(A.at(m0 + g + 8, k0 + t2 + 8), A.at(m0 + g + 8, k0 + t2 + 9));
          bf[0] = pack_bf16(B.at(k0 + t2, n0 + g), B.at(k0 + t2 + 1, n0 + g));
          bf[1] = pack_bf16(B.at(k0 + t2 + 8, n0 + g), B.at(k0 + t2 + 9, n0 + g));
        }
        mma_bf16(c, af, bf);
      }
      epi(m0 + g, n0 + t2, c[0]);
      epi(m0 + g, n0 + t2 + 1, c[1]);
      epi(m0 + g + 8, n0 + t2, c[2]);
      epi(m0 + g + 8, n0 + t2 + 1, c[3]);
    }
  }
}

// What both directions share: the shape, the tiles, the softmax scale, the dropout draw.
struct Block {
  BlockDims b;
  int rows, keys, dp;  // query rows and keys per tile; head_dim padded to a multiple of 16
  float scale;
  std::uint64_t threshold;
  float keep_scale;
  bool ldmatrix;  // bf16 fragments by ldmatrix (else element by element)
  // Row strides of the shared tiles in elements: 8 past the row (16 bytes), so the 8 rows an ldmatrix
  // reads start in 8 different bank groups, and every row stays 16-byte aligned.
  __host__ __device__ int ld_head() const { return dp + 8; }
  __host__ __device__ int ld_keys() const { return keys + 8; }
  __device__ std::uint64_t global_seq() const { return static_cast<std::uint64_t>(b.dims.seq) * b.cp; }
  // Whether dropout keeps the probability (sequence n, head h, query position qp, key position kp).
  __device__ bool keeps(int n, int h, int qp, int kp) const {
    if (b.dropout <= 0) return true;
    const std::uint64_t S = global_seq();
    const std::uint64_t index =
        b.dropout_first +
        ((static_cast<std::uint64_t>(n) * b.heads_total + h) * S + static_cast<std::uint64_t>(qp)) * S + kp;
    return dropout_keep(b.dropout_key, index, threshold);
  }
  // The factor that probability meets when V does: keep_scale if kept, else 0 (fp32 arithmetic only; the
  // bf16 tiles hold the kept probabilities unscaled and the products are scaled, as FlashAttention-2 does,
  // so that 1/(1 − p) is never rounded to bf16: 1/0.9 would become 1.109375, 0.16 % low wherever P = 1).
  __device__ float kept(int n, int h, int qp, int kp) const { return keeps(n, h, qp, kp) ? keep_scale : 0.0f; }
};

// Rows [first, first + count) of sequence n's tokens, columns [col, col + head_dim) of `src` (row stride
// ld), into a shared tile of count × dp values (row stride lt); zero past the sequence and the head.
// 16 bytes a thread where the head's columns come in whole 16-byte pieces (head_dim, ld and col multiples
// of 16 / sizeof(T), `src` 16-byte aligned; the tiles' rows are, ld_head()): a warp then moves 512
// bytes a load instead of 64, else one value a thread.
template <class T>
__device__ __forceinline__ void load_tile(T* tile, int lt, const T* src, i64 ld, i64 col, int n, int first, int count,
                                          const AttentionDims& s, int dp) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  if (s.head_dim % kVec == 0 && ld % kVec == 0 && col % kVec == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0) {
    const int per_row = dp / kVec;  // dp: a multiple of 16 values
    for (int x = threadIdx.x; x < count * per_row; x += blockDim.x) {
      const int r = x / per_row, c = x % per_row * kVec, i = first + r;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);  // zero in fp32 and bf16 alike
      if (i < s.seq && c < s.head_dim)
        v = *reinterpret_cast<const uint4*>(src + (static_cast<i64>(n) * s.seq + i) * ld + col + c);
      *reinterpret_cast<uint4*>(tile + r * lt + c) = v;
    }
    return;
  }
  for (int x = threadIdx.x; x < count * dp; x += blockDim.x) {
    const int r = x / dp, c = x % dp, i = first + r;
    tile[r * lt + c] =
        i < s.seq && c < s.head_dim ? src[(static_cast<i64>(n) * s.seq + i) * ld + col + c] : from_float<T>(0.0f);
  }
}

// The backward's query tile of `rows` from i0 (sequence n, head h): Q and dO into shared tiles of dp
// columns (row stride lt), and for each query, a warp per row, D = Σ_j P_ij dP_ij over the whole row =
// dO · O (from the output), the row's log-sum-exp and its position in the sequence (−1 past its end).
template <class T>
__device__ __forceinline__ void stage_query_tile(T* q, T* dout, int lt, int dp, float* dd, float* lse_s, int* qpos,
                                                 const T* qkv, const T* dctx, const T* ctx, const float* lse,
                                                 const Block& blk, int n, int h, int i0, int rows) {
  const AttentionDims& s = blk.b.dims;
  const int d = s.head_dim, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 ctx_ld = static_cast<i64>(s.heads) * d;
  load_tile(q, lt, qkv, s.qkv_cols(), static_cast<i64>(h) * d, n, i0, rows, s, dp);
  load_tile(dout, lt, dctx, ctx_ld, static_cast<i64>(h) * d, n, i0, rows, s, dp);
  for (int r = warp; r < rows; r += kWarps) {
    const int i = i0 + r;
    float dot = 0;
    if (i < s.seq) {
      const i64 at = (static_cast<i64>(n) * s.seq + i) * ctx_ld + static_cast<i64>(h) * d;
      for (int c = lane; c < d; c += 32) dot += to_float(dctx[at + c]) * to_float(ctx[at + c]);
    }
    dot = warp_sum(dot);
    if (lane == 0) {
      dd[r] = dot;
      lse_s[r] = i < s.seq ? lse[(static_cast<i64>(n) * s.heads + h) * s.seq + i] : 0.0f;
      qpos[r] = i < s.seq ? context_parallel_position(i, s.seq, blk.b.cp, blk.b.cp_rank) : -1;
    }
  }
}

// The first query of a forward CTA's tile of `rows`, the tiles in reverse: under the causal mask the last
// tiles see the most keys, and the GPU starts CTAs in blockIdx order, so the longest start first and the
// short ones fill the tail.
__device__ __forceinline__ int query_tile_start(int rows) { return (gridDim.x - 1 - blockIdx.x) * rows; }

// Shared memory of one CTA: T tiles first (every count a multiple of 8 rows of a multiple of 8, so each
// tile starts 16-byte aligned), then fp32 and int.
template <class T>
std::size_t forward_smem(int rows, int keys, int dp) {
  const std::size_t lh = dp + 8, lk = keys + 8;
  return sizeof(T) * (rows * lh + 2 * keys * lh + rows * lk) + sizeof(float) * (rows * dp + rows * keys + 3 * rows) +
         sizeof(int) * rows;
}
template <class T>
std::size_t backward_smem(int rows, int keys, int dp) {
  const std::size_t lh = dp + 8, lk = keys + 8;
  return sizeof(T) * (2 * keys * lh + 2 * rows * lh + 2 * rows * lk) +
         sizeof(float) * (2 * keys * dp + 2 * rows * keys + 2 * rows) + sizeof(int) * (rows + keys);
}

// Grid (query tiles, heads, sequences).
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    block_forward_kernel(float* acc, float* row_max, float* row_sum, const T* qkv, const T* kv, Block blk) {
  extern __shared__ __align__(16) unsigned char smem[];
  const AttentionDims& s = blk.b.dims;
  const int d = s.head_dim, R = blk.rows, C = blk.keys, dp = blk.dp, lh = blk.ld_head(), lk = blk.ld_keys();
  const int n = blockIdx.z, h = blockIdx.y, i0 = query_tile_start(R);
  const int g = h / (s.heads / s.kv_heads);
  const i64 ld = s.qkv_cols(), ctx_ld = static_cast<i64>(s.heads) * d;
  T* q = reinterpret_cast<T*>(smem);                // [R][lh]
  T* k = q + R * lh;                                // [C][lh]
  T* v = k + C * lh;                                // [C][lh]
  T* p = v + C * lh;                                // [R][lk]
  float* o = reinterpret_cast<float*>(p + R * lk);  // [R][dp]
  float* sc = o + R * dp;                           // [R][C]
  float* m_run = sc + R * C;
  float* l_run = m_run + R;
  float* rescale = l_run + R;
  int* qpos = reinterpret_cast<int*>(rescale + R);

  load_tile(q, lh, qkv, ld, static_cast<i64>(h) * d, n, i0, R, s, dp);
  for (int x = threadIdx.x; x < R * dp; x += blockDim.x) {
    const int r = x / dp, c = x % dp, i = i0 + r;
    o[x] = i < s.seq && c < d ? acc[(static_cast<i64>(n) * s.seq + i) * ctx_ld + static_cast<i64>(h) * d + c] : 0.0f;
  }
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    const int i = i0 + r;
    const i64 stat = (static_cast<i64>(n) * s.heads + h) * s.seq + i;
    m_run[r] = i < s.seq ? row_max[stat] : 0.0f;
    l_run[r] = i < s.seq ? row_sum[stat] : 0.0f;
    qpos[r] = i < s.seq ? context_parallel_position(i, s.seq, blk.b.cp, blk.b.cp_rank) : -1;
  }
  __syncthreads();
  const int last_row = min(i0 + R, s.seq) - 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j0 = 0; j0 < s.seq; j0 += C) {
    if (blk.b.cp == 1 && j0 > last_row) break;  // one rank: keys in position order, all after these queries
    load_tile(k, lh, kv, blk.b.kv_ld, static_cast<i64>(g) * d, n, j0, C, s, dp);
    load_tile(v, lh, kv, blk.b.kv_ld, static_cast<i64>(s.kv_heads + g) * d, n, j0, C, s, dp);
    __syncthreads();
    // S = scale·Q·Kᵀ: K stored [key][d] is Kᵀ transposed.
    block_product<T>(R, C, dp, Operand<T>{q, lh, false}, Operand<T>{k, lh, true}, blk.ldmatrix,
                     [&](int r, int j, float x) { sc[r * C + j] = x * blk.scale; });
    __syncthreads();
    // The online softmax, a warp per row: the row's earlier sum rescaled to the new running maximum.
    for (int r = warp; r < R; r += kWarps) {
      const int qp = qpos[r];
      float mx = -FLT_MAX;
      bool any = false;
      for (int j = lane; j < C; j += 32) {
        const int jj = j0 + j;
        if (qp >= 0 && jj < s.seq && context_parallel_position(jj, s.seq, blk.b.cp, blk.b.kv_rank) <= qp) {
          mx = fmaxf(mx, sc[r * C + j]);
          any = true;
        }
      }
      mx = warp_max(mx);
      const bool visible = __any_sync(0xFFFFFFFFu, any);
      const float m_old = m_run[r], l_old = l_run[r];
      const float m_new = !visible ? m_old : l_old > 0 ? fmaxf(m_old, mx) : mx;
      const float factor = !visible ? 1.0f : l_old > 0 ? expf(m_old - m_new) : 0.0f;
      float sum = 0;
      for (int j = lane; j < C; j += 32) {
        const int jj = j0 + j;
        const int kp = jj < s.seq ? context_parallel_position(jj, s.seq, blk.b.cp, blk.b.kv_rank) : INT_MAX;
        float e = 0;
        if (qp >= 0 && kp <= qp) {
          e = expf(sc[r * C + j] - m_new);
          sum += e;
          if (!blk.keeps(n, h, qp, kp)) e = 0;  // what V meets, unscaled: the P·V product takes keep_scale
        }
        p[r * lk + j] = from_float<T>(e);
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        if (visible) {
          l_run[r] = l_old * factor + sum;
          m_run[r] = m_new;
        }
        rescale[r] = factor;
      }
    }
    __syncthreads();
    for (int x = threadIdx.x; x < R * dp; x += blockDim.x) o[x] *= rescale[x / dp];
    __syncthreads();
    // O += keep_scale·P·V: V stored [key][d] is B as it stands.
    block_product<T>(R, dp, C, Operand<T>{p, lk, false}, Operand<T>{v, lh, false}, blk.ldmatrix,
                     [&](int r, int c, float x) { o[r * dp + c] += blk.keep_scale * x; });
    __syncthreads();
  }
  for (int x = threadIdx.x; x < R * dp; x += blockDim.x) {
    const int r = x / dp, c = x % dp, i = i0 + r;
    if (i < s.seq && c < d) acc[(static_cast<i64>(n) * s.seq + i) * ctx_ld + static_cast<i64>(h) * d + c] = o[x];
  }
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    const int i = i0 + r;
    if (i >= s.seq) continue;
    const i64 stat = (static_cast<i64>(n) * s.heads + h) * s.seq + i;
    row_max[stat] = m_run[r];
    row_sum[stat] = l_run[r];
  }
}

// The forward of a bf16 block with what each warp computes kept in its registers (FlashAttention-2's
// structure): each of the CTA's 4 warps owns 16 of its 64 query rows and holds their Q fragments, their
// 16 × 64 score tile and their 16 × DP output accumulators in registers, a row's values spread over a quad
// of 4 lanes, which also keep the row's running maximum and sum; only K and V pass through shared memory.
// The scores' accumulator layout is the A-fragment layout of the P·V product (PTX ISA, "Matrix Fragments
// for mma.m16n8k16"), so the probabilities go from the exponential to the tensor cores without leaving
// the registers. The accumulators are held divided by the dropout's keep scale and multiplied back when
// written (FlashAttention-2 scales the output at the end), so 1/(1 − p) is never rounded to bf16. The
// masks, dropout draws, running statistics and roundings are block_forward_kernel's. Grid (query tiles of
// 64, heads, sequences); the tiles 16·KD columns wide, zero past head_dim.
template <int KD>
__global__ void __launch_bounds__(kBlockThreads)
    block_forward_registers_kernel(float* acc, float* row_max, float* row_sum, const bf16* qkv, const bf16* kv,
                                   Block blk) {
  constexpr int DP = 16 * KD, R = 16 * kWarps, C = kRegisterKeys, LH = DP + 8, NT = DP / 8, ST = C / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  const AttentionDims& s = blk.b.dims;
  const int d = s.head_dim;
  const int n = blockIdx.z, h = blockIdx.y, i0 = query_tile_start(R);
  const int g = h / (s.heads / s.kv_heads);
  const i64 ld = s.qkv_cols(), ctx_ld = static_cast<i64>(s.heads) * d;
  bf16* q = reinterpret_cast<bf16*>(smem);  // [R][LH]
  bf16* k = q + R * LH;                     // [C][LH]
  bf16* v = k + C * LH;                     // [C][LH]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad_row = lane / 4, t2 = (lane % 4) * 2;

  load_tile(q, LH, qkv, ld, static_cast<i64>(h) * d, n, i0, R, s, DP);
  __syncthreads();
  std::uint32_t qf[KD][4];
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) load_a(qf[kk], Operand<bf16>{q, LH, false}, warp * 16, kk * 16, lane);

  // This thread's two rows, r = warp·16 + quad_row (half 0) and r + 8 (half 1): the C-fragment rows.
  int qp[2];
  bool row_in[2];
  float m_run[2], l_run[2];
  i64 row_at[2], stat[2];
  const float unscale = 1.0f / blk.keep_scale;
  float o[NT][4];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = i0 + warp * 16 + quad_row + half * 8;
    row_in[half] = i < s.seq;
    qp[half] = row_in[half] ? context_parallel_position(i, s.seq, blk.b.cp, blk.b.cp_rank) : -1;
    stat[half] = (static_cast<i64>(n) * s.heads + h) * s.seq + i;
    m_run[half] = row_in[half] ? row_max[stat[half]] : 0.0f;
    l_run[half] = row_in[half] ? row_sum[stat[half]] : 0.0f;
    row_at[half] = (static_cast<i64>(n) * s.seq + i) * ctx_ld + static_cast<i64>(h) * d;
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int half = x / 2, col = nt * 8 + t2 + x % 2;
      o[nt][x] = row_in[half] && col < d ? acc[row_at[half] + col] * unscale : 0.0f;
    }

  const int last_row = min(i0 + R, s.seq) - 1;
  for (int j0 = 0; j0 < s.seq; j0 += C) {
    if (blk.b.cp == 1 && j0 > last_row) break;  // one rank: keys in position order, all after these queries
    __syncthreads();                            // every warp is done with the previous K and V
    load_tile(k, LH, kv, blk.b.kv_ld, static_cast<i64>(g) * d, n, j0, C, s, DP);
    load_tile(v, LH, kv, blk.b.kv_ld, static_cast<i64>(s.kv_heads + g) * d, n, j0, C, s, DP);
    __syncthreads();
    // S = scale·Q·Kᵀ for the warp's 16 rows: K stored [key][d] is Kᵀ transposed.
    float sc[ST][4];
#pragma unroll
    for (int nt = 0; nt < ST; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
#pragma unroll
      for (int nt = 0; nt < ST; ++nt) {
        std::uint32_t bfr[2];
        load_b(bfr, Operand<bf16>{k, LH, true}, kk * 16, nt * 8, lane);
        mma_bf16(sc[nt], qf[kk], bfr);
      }
    // The causal mask at the keys' positions (this thread's two columns of each score tile), and each
    // row's maximum over what it sees (over a quad's lanes).
    int kp[ST][2];
#pragma unroll
    for (int nt = 0; nt < ST; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int jj = j0 + nt * 8 + t2 + e;
        kp[nt][e] = jj < s.seq ? context_parallel_position(jj, s.seq, blk.b.cp, blk.b.kv_rank) : INT_MAX;
      }
    float mx[2] = {-FLT_MAX, -FLT_MAX};
    int seen[2] = {0, 0};
#pragma unroll
    for (int nt = 0; nt < ST; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int half = x / 2, e = x % 2;
        sc[nt][x] *= blk.scale;
        if (qp[half] >= 0 && kp[nt][e] <= qp[half]) {
          mx[half] = fmaxf(mx[half], sc[nt][x]);
          seen[half] = 1;
        }
      }
    float factor[2], m_new[2], sum[2] = {0.0f, 0.0f};
    bool visible[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xFFFFFFFFu, mx[half], 1));
      mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xFFFFFFFFu, mx[half], 2));
      seen[half] |= __shfl_xor_sync(0xFFFFFFFFu, seen[half], 1);
      seen[half] |= __shfl_xor_sync(0xFFFFFFFFu, seen[half], 2);
      visible[half] = seen[half] != 0;
      const float m_old = m_run[half], l_old = l_run[half];
      m_new[half] = !visible[half] ? m_old : l_old > 0 ? fmaxf(m_old, mx[half]) : mx[half];
      factor[half] = !visible[half] ? 1.0f : l_old > 0 ? expf(m_old - m_new[half]) : 0.0f;
    }
    // The probabilities, summed before dropout; what V meets is the kept ones, unscaled.
#pragma unroll
    for (int nt = 0; nt < ST; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int half = x / 2, kpos = kp[nt][x % 2];
        float e = 0.0f;
        if (qp[half] >= 0 && kpos <= qp[half]) {
          e = expf(sc[nt][x] - m_new[half]);
          sum[half] += e;
          if (!blk.keeps(n, h, qp[half], kpos)) e = 0.0f;
        }
        sc[nt][x] = e;
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      sum[half] += __shfl_xor_sync(0xFFFFFFFFu, sum[half], 1);
      sum[half] += __shfl_xor_sync(0xFFFFFFFFu, sum[half], 2);
      if (visible[half]) {
        l_run[half] = l_run[half] * factor[half] + sum[half];
        m_run[half] = m_new[half];
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) o[nt][x] *= factor[x / 2];
        // O += P·V: the score tiles 2κ and 2κ+1 (keys 16κ..16κ+15) are the A fragment of inner step κ.
#pragma unroll
    for (int kk = 0; kk < C / 16; ++kk) {
      std::uint32_t pa[4];
      accumulators_as_a(pa, sc[2 * kk], sc[2 * kk + 1]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        std::uint32_t bfr[2];
        load_b(bfr, Operand<bf16>{v, LH, false}, kk * 16, nt * 8, lane);
        mma_bf16(o[nt], pa, bfr);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int half = x / 2, col = nt * 8 + t2 + x % 2;
      if (row_in[half] && col < d) acc[row_at[half] + col] = o[nt][x] * blk.keep_scale;
    }
  if (lane % 4 == 0)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      if (row_in[half]) {
        row_max[stat[half]] = m_run[half];
        row_sum[stat[half]] = l_run[half];
      }
}

// Grid (key tiles, key/value heads, sequences).
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    block_backward_kernel(float* dq, T* dkv, const T* dctx, const T* ctx, const float* lse, const T* qkv, const T* kv,
                          Block blk) {
  extern __shared__ __align__(16) unsigned char smem[];
  const AttentionDims& s = blk.b.dims;
  const int d = s.head_dim, R = blk.rows, C = blk.keys, dp = blk.dp, lh = blk.ld_head(), lk = blk.ld_keys();
  const int n = blockIdx.z, g = blockIdx.y, j0 = blockIdx.x * C, group = s.heads / s.kv_heads;
  const i64 ctx_ld = static_cast<i64>(s.heads) * d;
  T* k = reinterpret_cast<T*>(smem);                  // [C][lh]
  T* v = k + C * lh;                                  // [C][lh]
  T* q = v + C * lh;                                  // [R][lh]
  T* dout = q + R * lh;                               // [R][lh]
  T* pd = dout + R * lh;                              // [R][lk]
  T* ds = pd + R * lk;                                // [R][lk]
  float* dk = reinterpret_cast<float*>(ds + R * lk);  // [C][dp]
  float* dv = dk + C * dp;                            // [C][dp]
  float* sc = dv + C * dp;                            // [R][C]
  float* dpm = sc + R * C;                            // [R][C]
  float* lse_s = dpm + R * C;
  float* dd = lse_s + R;
  int* qpos = reinterpret_cast<int*>(dd + R);
  int* kpos = qpos + R;

  load_tile(k, lh, kv, blk.b.kv_ld, static_cast<i64>(g) * d, n, j0, C, s, dp);
  load_tile(v, lh, kv, blk.b.kv_ld, static_cast<i64>(s.kv_heads + g) * d, n, j0, C, s, dp);
  for (int x = threadIdx.x; x < C * dp; x += blockDim.x) dk[x] = dv[x] = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int j = j0 + c;
    kpos[c] = j < s.seq ? context_parallel_position(j, s.seq, blk.b.cp, blk.b.kv_rank) : INT_MAX;
  }
  for (int h = g * group; h < (g + 1) * group; ++h)
    for (int i0 = 0; i0 < s.seq; i0 += R) {
      if (blk.b.cp == 1 && i0 + R - 1 < j0) continue;  // one rank: every query of the tile before every key
      __syncthreads();                                 // the previous tile's readers are done
      stage_query_tile(q, dout, lh, dp, dd, lse_s, qpos, qkv, dctx, ctx, lse, blk, n, h, i0, R);
      __syncthreads();
      // S = scale·Q·Kᵀ and dP = dO·Vᵀ (K and V stored [key][d]).
      block_product<T>(R, C, dp, Operand<T>{q, lh, false}, Operand<T>{k, lh, true}, blk.ldmatrix,
                       [&](int r, int j, float x) { sc[r * C + j] = x * blk.scale; });
      block_product<T>(R, C, dp, Operand<T>{dout, lh, false}, Operand<T>{v, lh, true}, blk.ldmatrix,
                       [&](int r, int j, float x) { dpm[r * C + j] = x; });
      __syncthreads();
      for (int x = threadIdx.x; x < R * C; x += blockDim.x) {
        const int r = x / C, c = x % C, qp = qpos[r], kp = kpos[c];
        float dsv = 0, pdv = 0;
        if (qp >= 0 && kp <= qp) {
          const float pj = expf(sc[x] - lse_s[r]), kept = blk.kept(n, h, qp, kp);
          dsv = pj * (dpm[x] * kept - dd[r]);
          pdv = kept != 0 ? pj : 0.0f;  // the dropped probability V met, unscaled as in the forward
        }
        ds[r * lk + c] = from_float<T>(dsv);
        pd[r * lk + c] = from_float<T>(pdv);
      }
      __syncthreads();
      // dV += keep_scale·Pᵀ·dO and dK += scale·dSᵀ·Q for these keys (P and dS stored [query][key]: Aᵀ);
      // dQ += scale·dS·K into the global fp32 buffer.
      block_product<T>(C, dp, R, Operand<T>{pd, lk, true}, Operand<T>{dout, lh, false}, blk.ldmatrix,
                       [&](int c, int col, float x) { dv[c * dp + col] += blk.keep_scale * x; });
      block_product<T>(C, dp, R, Operand<T>{ds, lk, true}, Operand<T>{q, lh, false}, blk.ldmatrix,
                       [&](int c, int col, float x) { dk[c * dp + col] += blk.scale * x; });
      block_product<T>(
          R, dp, C, Operand<T>{ds, lk, false}, Operand<T>{k, lh, false}, blk.ldmatrix, [&](int r, int col, float x) {
            const int i = i0 + r;
            if (i < s.seq && col < d)
              atomicAdd(dq + (static_cast<i64>(n) * s.seq + i) * ctx_ld + static_cast<i64>(h) * d + col, blk.scale * x);
          });
    }
  __syncthreads();
  for (int x = threadIdx.x; x < C * dp; x += blockDim.x) {
    const int r = x / dp, c = x % dp, j = j0 + r;
    if (j >= s.seq || c >= d) continue;
    const i64 row = (static_cast<i64>(n) * s.seq + j) * blk.b.kv_ld;
    T& dkey = dkv[row + static_cast<i64>(g) * d + c];
    T& dval = dkv[row + static_cast<i64>(s.kv_heads + g) * d + c];
    dkey = from_float<T>(to_float(dkey) + dk[x]);
    dval = from_float<T>(to_float(dval) + dv[x]);
  }
}

// The backward of a bf16 block with each warp's products in registers (FlashAttention-2's backward):
// a CTA of 4 warps takes 64 keys of one key/value head, each warp 16 of them, and runs over every query
// tile of 32 of every query head of the group. A warp computes its keys' Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ
// (16 × 32, the keys as rows), turns them into Pᵀ and dSᵀ in place, and feeds those from the registers
// they were computed in to dV += Pᵀ·dO and dK += dSᵀ·Q, whose accumulators stay in its registers across
// the query tiles. dQ += dS·K needs dS with the queries as rows, so the warps write dSᵀ to shared memory
// transposed and split dQ's tiles among them, added into the fp32 global buffer with atomics. Q, dO, K
// and V tiles pass through shared memory; dV and dK are held without the keep and softmax scales and
// scaled when added to dkv. The masks, dropout draws and roundings (P and dS to bf16) are
// block_backward_kernel's. Grid (key tiles of 64, key/value heads, sequences); the tiles 16·KD columns
// wide, zero past head_dim.
template <int KD>
__global__ void __launch_bounds__(kBlockThreads)
    block_backward_registers_kernel(float* dq, bf16* dkv, const bf16* dctx, const bf16* ctx, const float* lse,
                                    const bf16* qkv, const bf16* kv, Block blk) {
  constexpr int DP = 16 * KD, C = 16 * kWarps, R = kRegisterBackwardRows, LH = DP + 8, LS = C + 8, NT = DP / 8,
                QT = R / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  const AttentionDims& s = blk.b.dims;
  const int d = s.head_dim;
  const int n = blockIdx.z, g = blockIdx.y, j0 = blockIdx.x * C, group = s.heads / s.kv_heads;
  const i64 ctx_ld = static_cast<i64>(s.heads) * d;
  bf16* k = reinterpret_cast<bf16*>(smem);               // [C][LH]
  bf16* v = k + C * LH;                                  // [C][LH]
  bf16* q = v + C * LH;                                  // [R][LH]
  bf16* dout = q + R * LH;                               // [R][LH]
  bf16* ds = dout + R * LH;                              // [R][LS]: dS, queries as rows
  float* lse_s = reinterpret_cast<float*>(ds + R * LS);  // [R]
  float* dd = lse_s + R;                                 // [R]
  int* qpos = reinterpret_cast<int*>(dd + R);            // [R]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad_row = lane / 4, t2 = (lane % 4) * 2;

  load_tile(k, LH, kv, blk.b.kv_ld, static_cast<i64>(g) * d, n, j0, C, s, DP);
  load_tile(v, LH, kv, blk.b.kv_ld, static_cast<i64>(s.kv_heads + g) * d, n, j0, C, s, DP);
  // This thread's two keys, the C-fragment rows warp·16 + quad_row (half 0) and + 8 (half 1).
  int kp[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = j0 + warp * 16 + quad_row + half * 8;
    kp[half] = j < s.seq ? context_parallel_position(j, s.seq, blk.b.cp, blk.b.kv_rank) : INT_MAX;
  }
  float dk[NT][4], dv[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) dk[nt][x] = dv[nt][x] = 0.0f;

  for (int h = g * group; h < (g + 1) * group; ++h)
    for (int i0 = 0; i0 < s.seq; i0 += R) {
      if (blk.b.cp == 1 && i0 + R - 1 < j0) continue;  // one rank: every query of the tile before every key
      __syncthreads();                                 // the previous tile's readers are done
      stage_query_tile(q, dout, LH, DP, dd, lse_s, qpos, qkv, dctx, ctx, lse, blk, n, h, i0, R);
      __syncthreads();
      // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for the warp's 16 keys: Q and dO stored [query][d] are B transposed.
      float st[QT][4], dpt[QT][4];
#pragma unroll
      for (int qt = 0; qt < QT; ++qt)
#pragma unroll
        for (int x = 0; x < 4; ++x) st[qt][x] = dpt[qt][x] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        std::uint32_t ka[4], va[4];
        load_a(ka, Operand<bf16>{k, LH, false}, warp * 16, kk * 16, lane);
        load_a(va, Operand<bf16>{v, LH, false}, warp * 16, kk * 16, lane);
#pragma unroll
        for (int qt = 0; qt < QT; ++qt) {
          std::uint32_t bq[2], bo[2];
          load_b(bq, Operand<bf16>{q, LH, true}, kk * 16, qt * 8, lane);
          load_b(bo, Operand<bf16>{dout, LH, true}, kk * 16, qt * 8, lane);
          mma_bf16(st[qt], ka, bq);
          mma_bf16(dpt[qt], va, bo);
        }
      }
      // Pᵀ (what V met: the kept probabilities, unscaled) into st, dSᵀ into dpt; dS to shared memory.
#pragma unroll
      for (int qt = 0; qt < QT; ++qt)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int half = x / 2, col = qt * 8 + t2 + x % 2, qp = qpos[col];
          float dsv = 0, pdv = 0;
          if (qp >= 0 && kp[half] <= qp) {
            const float pj = expf(st[qt][x] * blk.scale - lse_s[col]), kept = blk.kept(n, h, qp, kp[half]);
            dsv = pj * (dpt[qt][x] * kept - dd[col]);
            pdv = kept != 0 ? pj : 0.0f;
          }
          st[qt][x] = pdv;
          dpt[qt][x] = dsv;
          ds[col * LS + warp * 16 + quad_row + half * 8] = from_float<bf16>(dsv);
        }
        // dV += Pᵀ·dO and dK += dSᵀ·Q: the inner dimension is the tile's queries, step κ the queries
        // 16κ..16κ+15, the score tiles 2κ and 2κ+1 (dO and Q stored [query][d] are B as they stand).
#pragma unroll
      for (int kk = 0; kk < R / 16; ++kk) {
        std::uint32_t pa[4], sa[4];
        accumulators_as_a(pa, st[2 * kk], st[2 * kk + 1]);
        accumulators_as_a(sa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          std::uint32_t bo[2], bq[2];
          load_b(bo, Operand<bf16>{dout, LH, false}, kk * 16, nt * 8, lane);
          load_b(bq, Operand<bf16>{q, LH, false}, kk * 16, nt * 8, lane);
          mma_bf16(dv[nt], pa, bo);
          mma_bf16(dk[nt], sa, bq);
        }
      }
      __syncthreads();  // every warp's dS is in shared memory
      // dQ += scale·dS·K (K stored [key][d] is B as it stands), the tiles of 16 × 8 split over the warps.
      for (int tile = warp; tile < (R / 16) * NT; tile += kWarps) {
        const int m0 = tile / NT * 16, n0 = tile % NT * 8;
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < C / 16; ++kk) {
          std::uint32_t a[4], b[2];
          load_a(a, Operand<bf16>{ds, LS, false}, m0, kk * 16, lane);
          load_b(b, Operand<bf16>{k, LH, false}, kk * 16, n0, lane);
          mma_bf16(c, a, b);
        }
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int i = i0 + m0 + quad_row + (x / 2) * 8, col = n0 + t2 + x % 2;
          if (i < s.seq && col < d)
            atomicAdd(dq + (static_cast<i64>(n) * s.seq + i) * ctx_ld + static_cast<i64>(h) * d + col,
                      blk.scale * c[x]);
        }
      }
    }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int j = j0 + warp * 16 + quad_row + (x / 2) * 8, col = nt * 8 + t2 + x % 2;
      if (j >= s.seq || col >= d) continue;
      const i64 row = (static_cast<i64>(n) * s.seq + j) * blk.b.kv_ld;
      bf16& dkey = dkv[row + static_cast<i64>(g) * d + col];
      bf16& dval = dkv[row + static_cast<i64>(s.kv_heads + g) * d + col];
      dkey = from_float<bf16>(to_float(dkey) + blk.scale * dk[nt][x]);
      dval = from_float<bf16>(to_float(dval) + blk.keep_scale * dv[nt][x]);
    }
}

template <class T>
__global__ void block_finish_kernel(T* ctx, float* lse, const float* acc, const float* row_max, const float* row_sum,
                                    AttentionDims s) {
  const i64 rows = static_cast<i64>(s.batch) * s.heads * s.seq, d = s.head_dim;
  const i64 ctx_ld = static_cast<i64>(s.heads) * d;
  LOOM_GRID_STRIDE(x, rows * d) {
    const i64 i = x / d, c = x % d;
    const i64 n = i / (static_cast<i64>(s.heads) * s.seq), h = i / s.seq % s.heads, t = i % s.seq;
    const i64 at = (n * s.seq + t) * ctx_ld + h * d + c;
    ctx[at] = from_float<T>(acc[at] * (1.0f / row_sum[i]));
    if (c == 0) lse[i] = row_max[i] + logf(row_sum[i]);
  }
}

// LOOM_FLASH_ELEMENT_LOADS=1 loads the bf16 fragments element by element instead of by ldmatrix: the
// two ways timed, or told apart, on one GPU (read at each launch, so one process can run both).
bool fragments_by_ldmatrix() {
  const char* v = std::getenv("LOOM_FLASH_ELEMENT_LOADS");
  return v == nullptr || std::string(v) != "1";
}

// LOOM_FLASH_SMEM_TILES=1 runs bf16 blocks through block_forward_kernel and block_backward_kernel (their
// tiles in shared memory) instead of the register kernels, as LOOM_FLASH_ELEMENT_LOADS=1 does: the two
// ways timed, or told apart, on one GPU.
bool in_registers() {
  const char* v = std::getenv("LOOM_FLASH_SMEM_TILES");
  return (v == nullptr || std::string(v) != "1") && fragments_by_ldmatrix();
}
// The register kernels come in two widths, head_dim padded to 64 or to 128 (the columns past head_dim are
// zeros): each width more compiles a forward and a backward into every program linking the kernels.
constexpr int kMaxRegisterHeadDim = 128;

// The register forward's shared memory: the Q tile (read once into fragments), one K and one V tile.
std::size_t forward_registers_smem(int dp) {
  return sizeof(bf16) * (16 * kWarps + 2 * kRegisterKeys) * static_cast<std::size_t>(dp + 8);
}
// The register backward's: K and V tiles, Q and dO tiles, dS, and each query's statistics.
std::size_t backward_registers_smem(int dp) {
  constexpr int R = kRegisterBackwardRows, C = 16 * kWarps;
  return sizeof(bf16) * ((2 * C + 2 * R) * static_cast<std::size_t>(dp + 8) + R * (C + 8)) +
         (2 * sizeof(float) + sizeof(int)) * R;
}

// The largest dynamic shared memory a block may opt into on the current device.
std::size_t shared_memory_limit() {
  int device = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(bytes);
}

// Tiles of `rows` queries and `keys` keys, halved (keys first, neither below 16) until `smem` fits.
template <class Smem>
Block plan_tiles(const BlockDims& b, int rows, int keys, Smem smem, std::size_t* bytes) {
  const int dp = (b.dims.head_dim + 15) / 16 * 16;
  const std::size_t limit = shared_memory_limit();
  while (smem(rows, keys, dp) > limit && (rows > 16 || keys > 16)) {
    if (keys > 16)
      keys /= 2;
    else
      rows /= 2;
  }
  *bytes = smem(rows, keys, dp);
  if (*bytes > limit) throw std::runtime_error("flash attention: head_dim too large for this GPU's shared memory");
  const float p = b.dropout;
  return Block{b,
               rows,
               keys,
               dp,
               1.0f / std::sqrt(static_cast<float>(b.dims.head_dim)),
               dropout_threshold(p),
               p > 0 ? 1.0f / (1.0f - p) : 1.0f,
               fragments_by_ldmatrix()};
}

// `kernel(args..., blk)` over (tiles of `tile` tokens along the sequence, `heads`, sequences), with the
// shared memory plan_tiles chose (opted into past the 48 KiB default).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), const Block& blk, std::size_t bytes, int tile, int heads, cudaStream_t stream,
            Args... args) {
  const AttentionDims& s = blk.b.dims;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((s.seq + tile - 1) / tile), static_cast<unsigned>(heads),
                  static_cast<unsigned>(s.batch));
  kernel<<<grid, kBlockThreads, bytes, stream>>>(args..., blk);
  CUDA_CHECK(cudaGetLastError());
}

// The register kernels of width 16·KD (shared memory by that width, not by the padded head_dim).
template <int KD>
void forward_registers(float* acc, float* row_max, float* row_sum, const bf16* qkv, const bf16* kv, const BlockDims& b,
                       cudaStream_t stream) {
  std::size_t bytes = 0;
  const Block blk = plan_tiles(
      b, 16 * kWarps, kRegisterKeys, [](int, int, int) { return forward_registers_smem(16 * KD); }, &bytes);
  launch(block_forward_registers_kernel<KD>, blk, bytes, 16 * kWarps, b.dims.heads, stream, acc, row_max, row_sum, qkv,
         kv);
}
template <int KD>
void backward_registers(float* dq, bf16* dkv, const bf16* dctx, const bf16* ctx, const float* lse, const bf16* qkv,
                        const bf16* kv, const BlockDims& b, cudaStream_t stream) {
  std::size_t bytes = 0;
  const Block blk = plan_tiles(
      b, kRegisterBackwardRows, 16 * kWarps, [](int, int, int) { return backward_registers_smem(16 * KD); }, &bytes);
  launch(block_backward_registers_kernel<KD>, blk, bytes, 16 * kWarps, b.dims.kv_heads, stream, dq, dkv, dctx, ctx, lse,
         qkv, kv);
}

}  // namespace

template <class T>
void attention_block_forward(float* acc, float* row_max, float* row_sum, const T* qkv, const T* kv, const BlockDims& b,
                             cudaStream_t stream) {
  if (b.dims.batch == 0 || b.dims.seq == 0 || b.dims.heads == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (b.dims.head_dim <= kMaxRegisterHeadDim && in_registers()) {
      if (b.dims.head_dim <= 64)
        forward_registers<4>(acc, row_max, row_sum, qkv, kv, b, stream);
      else
        forward_registers<8>(acc, row_max, row_sum, qkv, kv, b, stream);
      return;
    }
  }
  std::size_t bytes = 0;
  const Block blk = plan_tiles(b, 64, 64, forward_smem<T>, &bytes);
  launch(block_forward_kernel<T>, blk, bytes, blk.rows, b.dims.heads, stream, acc, row_max, row_sum, qkv, kv);
}

template <class T>
void attention_block_finish(T* ctx, float* lse, const float* acc, const float* row_max, const float* row_sum,
                            const AttentionDims& s, cudaStream_t stream) {
  const i64 n = static_cast<i64>(s.batch) * s.heads * s.seq * s.head_dim;
  if (n == 0) return;
  block_finish_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(ctx, lse, acc, row_max, row_sum, s);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void attention_block_backward(float* dq, T* dkv, const T* dctx, const T* ctx, const float* lse, const T* qkv,
                              const T* kv, const BlockDims& b, cudaStream_t stream) {
  if (b.dims.batch == 0 || b.dims.seq == 0 || b.dims.heads == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (b.dims.head_dim <= kMaxRegisterHeadDim && in_registers()) {
      if (b.dims.head_dim <= 64)
        backward_registers<4>(dq, dkv, dctx, ctx, lse, qkv, kv, b, stream);
      else
        backward_registers<8>(dq, dkv, dctx, ctx, lse, qkv, kv, b, stream);
      return;
    }
  }
  std::size_t bytes = 0;
  const Block blk = plan_tiles(b, 32, 64, backward_smem<T>, &bytes);
  launch(block_backward_kernel<T>, blk, bytes, blk.keys, b.dims.kv_heads, stream, dq, dkv, dctx, ctx, lse, qkv, kv);
}

#define LOOM_FLASH_INSTANTIATE(T)                                                                                     \
  template void attention_block_forward<T>(float*, float*, float*, const T*, const T*, const BlockDims&,              \
                                           cudaStream_t);                                                             \
  template void attention_block_finish<T>(T*, float*, const float*, const float*, const float*, const AttentionDims&, \
                                          cudaStream_t);                                                              \
  template void attention_block_backward<T>(float*, T*, const T*, const T*, const float*, const T*, const T*,         \
                                            const BlockDims&, cudaStream_t);
LOOM_FLASH_INSTANTIATE(float)
LOOM_FLASH_INSTANTIATE(bf16)

}  // namespace loom::kernels
