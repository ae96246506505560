// CPU backend: causal attention (per sequence and head, on GEMMs), rotary embedding, the pieces of
// vocabulary-parallel cross-entropy, and the token embedding lookup.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "exec/cpu/cpu_backend.h"
#include "exec/cpu/cpu_loops.h"
#include "exec/cpu/vector_math.h"
#include "kernels/numerics.h"

namespace loom::exec {

namespace {

// Causal attention runs over blocks of this many query rows: block [i0, i1) attends to keys [0, i1)
// only, so the GEMMs skip the blocks above the diagonal (about half of QKᵀ, PV and their backward at
// long sequences) instead of computing them and masking the result.
constexpr int kQueryBlock = CpuBackend::kAttentionQueryBlock;

struct HeadView {
  std::int64_t ld;  // row stride of qkv
  std::int64_t q, k, v;
};

HeadView head_view(const AttentionShape& s, int b, int h) {
  const std::int64_t ld = s.qkv_cols();
  const std::int64_t row0 = static_cast<std::int64_t>(b) * s.seq * ld;
  const int g = h / (s.heads / s.kv_heads);
  return {ld, row0 + static_cast<std::int64_t>(h) * s.head_dim,
          row0 + static_cast<std::int64_t>(s.heads + g) * s.head_dim,
          row0 + static_cast<std::int64_t>(s.heads + s.kv_heads + g) * s.head_dim};
}

float* probs_at(float* probs, const AttentionShape& s, int b, int h) {
  return probs + (static_cast<std::int64_t>(b) * s.heads + h) * s.seq * s.seq;
}

// Rows [i0, i0 + rows) of a head's probabilities, scores [0, i] in each row on entry: the causal softmax
// over them, and zeros after, so the whole [seq, seq] matrix is the probabilities (and so is what the
// dropout mask is applied to).
LOOM_CPU_CLONES void causal_softmax(float* p, int i0, int rows, int seq) {
  for (int i = i0; i < i0 + rows; ++i) {
    float* row = p + static_cast<std::int64_t>(i) * seq;
    float mx = -std::numeric_limits<float>::infinity();
    for (int j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
    for (int j = 0; j <= i; ++j) row[j] = vector_exp(row[j] - mx);
    float sum = 0;
    for (int j = 0; j <= i; ++j) sum += row[j];
    const float inv = 1.0f / sum;
    for (int j = 0; j <= i; ++j) row[j] *= inv;
    std::fill(row + i + 1, row + seq, 0.0f);
  }
}

// Runs f(b, g) for every sequence b and key/value group g, on the OpenMP team. A task owns its query
// heads' probabilities and context and, in the backward, its group's dK and dV columns, so no two tasks
// write the same memory and every value is computed in the same order whatever the thread count (the
// BLAS runs single-threaded inside the team).
template <class F>
void for_each_group(const AttentionShape& s, F&& f) {
  const int tasks = s.batch * s.kv_heads;
  [[maybe_unused]] const bool parallel = tasks > 1 && s.probs_numel() > kParallelWork;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int t = 0; t < tasks; ++t) f(t / s.kv_heads, t % s.kv_heads);
}

}  // namespace

void CpuBackend::attention_probs(TensorRef probs_r, ConstTensorRef qkv_r, const AttentionShape& s) {
  float* probs = f32(probs_r, "attention_probs");
  const float* qkv = f32(qkv_r, "attention_probs");
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int group = s.heads / s.kv_heads;
  for_each_group(s, [&](int b, int g) {
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const HeadView hv = head_view(s, b, h);
      float* p = probs_at(probs, s, b, h);
      const int ld = static_cast<int>(hv.ld);
      for (int i0 = 0; i0 < s.seq; i0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, s.seq - i0), keys = i0 + rows;
        gemm(false, true, rows, keys, s.head_dim, scale, qkv + hv.q + static_cast<std::int64_t>(i0) * ld, ld,
             qkv + hv.k, ld, 0.0f, p + static_cast<std::int64_t>(i0) * s.seq, s.seq);
        round_stored(p + static_cast<std::int64_t>(i0) * s.seq, rows, keys, s.seq);
        causal_softmax(p, i0, rows, s.seq);
      }
    }
  });
}

void CpuBackend::attention_context(TensorRef ctx_r, ConstTensorRef probs_r, ConstTensorRef qkv_r,
                                   const AttentionShape& s) {
  float* ctx = f32(ctx_r, "attention_context");
  const float* probs = f32(probs_r, "attention_context");
  const float* qkv = f32(qkv_r, "attention_context");
  const int ctx_ld = s.heads * s.head_dim;
  const int group = s.heads / s.kv_heads;
  for_each_group(s, [&](int b, int g) {
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const HeadView hv = head_view(s, b, h);
      const float* p = probs_at(const_cast<float*>(probs), s, b, h);
      float* out = ctx + static_cast<std::int64_t>(b) * s.seq * ctx_ld + static_cast<std::int64_t>(h) * s.head_dim;
      for (int i0 = 0; i0 < s.seq; i0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, s.seq - i0), keys = i0 + rows;
        gemm(false, false, rows, s.head_dim, keys, 1.0f, p + static_cast<std::int64_t>(i0) * s.seq, s.seq, qkv + hv.v,
             static_cast<int>(hv.ld), 0.0f, out + static_cast<std::int64_t>(i0) * ctx_ld, ctx_ld);
      }
    }
  });
}

void CpuBackend::attention_backward(TensorRef dqkv_r, ConstTensorRef dctx_r, ConstTensorRef probs_r,
                                    ConstTensorRef dropped_r, const std::uint8_t* mask, float keep_scale,
                                    ConstTensorRef qkv_r, const AttentionShape& s) {
  float* dqkv = f32(dqkv_r, "attention_backward");
  const float* dctx = f32(dctx_r, "attention_backward");
  const float* probs = f32(probs_r, "attention_backward");
  const float* dropped = f32(dropped_r, "attention_backward");
  const float* qkv = f32(qkv_r, "attention_backward");
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int ctx_ld = s.heads * s.head_dim;
  const int ld = static_cast<int>(s.qkv_cols());
  const int group = s.heads / s.kv_heads;
  zero(dqkv, static_cast<std::int64_t>(s.batch) * s.seq * ld);
  for_each_group(s, [&](int b, int g) {
    // dP, then dS, of one query block: rows × keys with the row stride of the probabilities.
    std::vector<float> dp(static_cast<std::size_t>(std::min(kQueryBlock, s.seq)) * s.seq);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const HeadView hv = head_view(s, b, h);
      const float* p = probs_at(const_cast<float*>(probs), s, b, h);
      const float* pv = dropped != nullptr ? probs_at(const_cast<float*>(dropped), s, b, h) : p;
      const std::int64_t block = (static_cast<std::int64_t>(b) * s.heads + h) * s.seq * s.seq;
      const float* dc =
          dctx + static_cast<std::int64_t>(b) * s.seq * ctx_ld + static_cast<std::int64_t>(h) * s.head_dim;
      for (int i0 = 0; i0 < s.seq; i0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, s.seq - i0), keys = i0 + rows;
        const std::int64_t r0 = static_cast<std::int64_t>(i0) * s.seq;  // block's first row in p, pv, mask
        const float* dc_blk = dc + static_cast<std::int64_t>(i0) * ctx_ld;
        gemm(false, true, rows, keys, s.head_dim, 1.0f, dc_blk, ctx_ld, qkv + hv.v, ld, 0.0f, dp.data(), s.seq);
        round_stored(dp.data(), rows, keys, s.seq);
        gemm(true, false, keys, s.head_dim, rows, 1.0f, pv + r0, s.seq, dc_blk, ctx_ld, 1.0f, dqkv + hv.v, ld);
        for (int r = 0; r < rows; ++r) {
          const int i = i0 + r;
          const float* pr = p + r0 + static_cast<std::int64_t>(r) * s.seq;
          float* dr = dp.data() + static_cast<std::int64_t>(r) * s.seq;
          if (mask != nullptr) {
            const std::uint8_t* mr = mask + block + r0 + static_cast<std::int64_t>(r) * s.seq;
            // The GPU applies the mask as its softmax backward reads dP (kernels/softmax.cu): no rounding
            // between the two.
            for (int j = 0; j <= i; ++j) dr[j] = mr[j] != 0 ? dr[j] * keep_scale : 0.0f;
          }
          float dot = 0;
          for (int j = 0; j <= i; ++j) dot += pr[j] * dr[j];
          for (int j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
          round_stored(dr, 1, i + 1, s.seq);
          std::fill(dr + i + 1, dr + keys, 0.0f);
        }
        gemm(false, false, rows, s.head_dim, keys, scale, dp.data(), s.seq, qkv + hv.k, ld, 1.0f,
             dqkv + hv.q + static_cast<std::int64_t>(i0) * ld, ld);
        gemm(true, false, keys, s.head_dim, rows, scale, dp.data(), s.seq,
             qkv + hv.q + static_cast<std::int64_t>(i0) * ld, ld, 1.0f, dqkv + hv.k, ld);
      }
      // Each head of the group adds its K and V gradients to the stored ones (one GEMM each on the GPU).
      round_stored(dqkv + hv.k, s.seq, s.head_dim, ld);
      round_stored(dqkv + hv.v, s.seq, s.head_dim, ld);
    }
  });
}

namespace {

// One (query chunk, key chunk) tile of ring attention for sequence b, query head h of key/value group g:
// where its queries, keys and values start, which keys each row sees and its dropout mask.
struct Tile {
  int c;                // tokens per chunk: the tile is c × c
  bool diagonal;        // causal within the tile (query row r sees keys 0..r); else fully visible
  std::int64_t q_row;   // first query row (local token) in qkv, ctx and acc
  std::int64_t kv_row;  // first key row in kv
  std::int64_t q_col;   // head h's columns in ctx, acc and dq
  std::int64_t k_col;   // group g's key columns in kv (values: v_col)
  std::int64_t v_col;
  std::int64_t stat;       // the first row's statistics: (b·heads + h)·seq + local row
  std::uint64_t mask0;     // mask index of the tile's (0, 0)
  std::uint64_t mask_row;  // mask index stride between rows (S)
  int keys(int r) const { return diagonal ? r + 1 : c; }
};

// What every block op shares: the softmax scale, the row strides and the dropout draw.
struct BlockDims {
  BlockDims(const AttentionShape& s, const AttentionDropout& drop)
      : scale(1.0f / std::sqrt(static_cast<float>(s.head_dim))),
        ld(static_cast<int>(s.qkv_cols())),
        ctx_ld(s.heads * s.head_dim),
        d(s.head_dim),
        keep_scale(drop.p > 0 ? 1.0f / (1.0f - drop.p) : 1.0f),
        drop_(drop),
        threshold_(kernels::dropout_threshold(drop.p)) {}
  // Whether dropout keeps the probability of row r, key j.
  bool keeps(const Tile& t, int r, int j) const {
    return drop_.p <= 0 ||
           kernels::dropout_keep(drop_.key, t.mask0 + static_cast<std::uint64_t>(r) * t.mask_row + j, threshold_);
  }
  // The factor it meets: keep_scale if kept (1 without dropout), else 0. The probabilities V meets are kept
  // unscaled and their products take keep_scale (FlashAttention-2's order, which the GPU's bf16 tiles need).
  float kept(const Tile& t, int r, int j) const { return keeps(t, r, j) ? keep_scale : 0.0f; }
  float scale;
  int ld, ctx_ld, d;
  float keep_scale;

 private:
  AttentionDropout drop_;
  std::uint64_t threshold_;
};

// Calls f(tile, p, dp) for every visible tile of the local queries against CP rank kv_rank's keys: per
// sequence and key/value group on the OpenMP team (as for_each_group), then per query head, query chunk
// and key chunk. p and dp are the task's c × c scratch.
template <class F>
void for_each_tile(const AttentionShape& s, const AttentionDropout& drop, int kv_rank, F&& f) {
  const int c = s.chunk(), group = s.heads / s.kv_heads;
  const std::int64_t S = static_cast<std::int64_t>(s.seq) * s.cp, d = s.head_dim;
  for_each_group(s, [&](int b, int g) {
    std::vector<float> p(static_cast<std::size_t>(c) * c), dp(p.size());
    for (int h = g * group; h < (g + 1) * group; ++h)
      for (int qi = 0; qi < 2; ++qi) {
        const int qc = s.chunk_of(s.cp_rank, qi);
        for (int ki = 0; ki < 2; ++ki) {
          const int kc = s.chunk_of(kv_rank, ki);
          if (kc > qc) continue;  // every key after every query: invisible
          const std::int64_t local_q = static_cast<std::int64_t>(qi) * c, seq0 = static_cast<std::int64_t>(b) * s.seq;
          const std::uint64_t head = static_cast<std::uint64_t>(b) * drop.heads_total + h;
          f(Tile{c, kc == qc, seq0 + local_q, seq0 + static_cast<std::int64_t>(ki) * c, h * d, g * d,
                 (s.kv_heads + g) * d, (static_cast<std::int64_t>(b) * s.heads + h) * s.seq + local_q,
                 drop.first + (head * S + static_cast<std::uint64_t>(qc) * c) * S + static_cast<std::uint64_t>(kc) * c,
                 static_cast<std::uint64_t>(S)},
            p.data(), dp.data());
        }
      }
  });
}

}  // namespace

void CpuBackend::attention_block_forward(float* acc, float* row_max, float* row_sum, ConstTensorRef qkv_r,
                                         ConstTensorRef kv_r, int kv_ld, int kv_rank, const AttentionShape& s,
                                         const AttentionDropout& drop) {
  const float* qkv = f32(qkv_r, "attention_block_forward");
  const float* kv = f32(kv_r, "attention_block_forward");
  const BlockDims m(s, drop);
  for_each_tile(s, drop, kv_rank, [&](const Tile& t, float* p, float*) {
    float* out = acc + t.q_row * m.ctx_ld + t.q_col;
    gemm(false, true, t.c, t.c, m.d, m.scale, qkv + t.q_row * m.ld + t.q_col, m.ld, kv + t.kv_row * kv_ld + t.k_col,
         kv_ld, 0.0f, p, t.c);
    for (int r = 0; r < t.c; ++r) {
      float* row = p + static_cast<std::int64_t>(r) * t.c;
      const int n = t.keys(r);
      float mx = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < n; ++j) mx = std::max(mx, row[j]);
      // Online softmax: rescale what earlier blocks gave this row to the new running maximum.
      float& run_max = row_max[t.stat + r];
      float& run_sum = row_sum[t.stat + r];
      const float m_new = run_sum > 0 ? std::max(run_max, mx) : mx;
      const float rescale = run_sum > 0 ? vector_exp(run_max - m_new) : 0.0f;
      float* o = out + static_cast<std::int64_t>(r) * m.ctx_ld;
      for (int k = 0; k < m.d; ++k) o[k] *= rescale;
      float sum = 0;
      for (int j = 0; j < n; ++j) sum += row[j] = vector_exp(row[j] - m_new);
      std::fill(row + n, row + t.c, 0.0f);
      run_sum = run_sum * rescale + sum;
      run_max = m_new;
      for (int j = 0; j < n; ++j)  // what V meets: the dropped probabilities, unscaled
        if (!m.keeps(t, r, j)) row[j] = 0;
    }
    round_stored(p, t.c, t.c, t.c);  // the GPU's bf16 tile
    gemm(false, false, t.c, m.d, t.c, m.keep_scale, p, t.c, kv + t.kv_row * kv_ld + t.v_col, kv_ld, 1.0f, out,
         m.ctx_ld);
  });
}

void CpuBackend::attention_block_finish(TensorRef ctx_r, float* lse, const float* acc, const float* row_max,
                                        const float* row_sum, const AttentionShape& s) {
  float* ctx = f32(ctx_r, "attention_block_finish");
  const int ctx_ld = s.heads * s.head_dim, d = s.head_dim;
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads * s.seq;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t b = i / (static_cast<std::int64_t>(s.heads) * s.seq), h = i / s.seq % s.heads, t = i % s.seq;
    const std::int64_t at = (b * s.seq + t) * ctx_ld + h * d;
    const float inv = 1.0f / row_sum[i];
    for (int k = 0; k < d; ++k) ctx[at + k] = acc[at + k] * inv;
    lse[i] = row_max[i] + std::log(row_sum[i]);
  }
}

void CpuBackend::attention_block_backward(float* dq, TensorRef dkv_r, ConstTensorRef dctx_r, ConstTensorRef ctx_r,
                                          const float* lse, ConstTensorRef qkv_r, ConstTensorRef kv_r, int kv_ld,
                                          int kv_rank, const AttentionShape& s, const AttentionDropout& drop) {
  float* dkv = f32(dkv_r, "attention_block_backward");
  const float* dctx = f32(dctx_r, "attention_block_backward");
  const float* ctx = f32(ctx_r, "attention_block_backward");
  const float* qkv = f32(qkv_r, "attention_block_backward");
  const float* kv = f32(kv_r, "attention_block_backward");
  const BlockDims m(s, drop);
  for_each_tile(s, drop, kv_rank, [&](const Tile& t, float* p, float* dp) {
    const float* q = qkv + t.q_row * m.ld + t.q_col;
    const float* o = ctx + t.q_row * m.ctx_ld + t.q_col;
    const float* dout = dctx + t.q_row * m.ctx_ld + t.q_col;
    gemm(false, true, t.c, t.c, m.d, m.scale, q, m.ld, kv + t.kv_row * kv_ld + t.k_col, kv_ld, 0.0f, p, t.c);
    gemm(false, true, t.c, t.c, m.d, 1.0f, dout, m.ctx_ld, kv + t.kv_row * kv_ld + t.v_col, kv_ld, 0.0f, dp, t.c);
    for (int r = 0; r < t.c; ++r) {
      float* pr = p + static_cast<std::int64_t>(r) * t.c;
      float* dr = dp + static_cast<std::int64_t>(r) * t.c;
      const int n = t.keys(r);
      // D = Σ_j P_ij dP_ij over the whole row (every block) = dO · O, from the output.
      float dot = 0;
      for (int k = 0; k < m.d; ++k)
        dot += dout[static_cast<std::int64_t>(r) * m.ctx_ld + k] * o[static_cast<std::int64_t>(r) * m.ctx_ld + k];
      const float row_lse = lse[t.stat + r];
      for (int j = 0; j < n; ++j) {
        const float pj = vector_exp(pr[j] - row_lse), kept = m.kept(t, r, j);
        dr[j] = pj * (dr[j] * kept - dot);  // dS
        pr[j] = kept != 0 ? pj : 0.0f;      // the dropped probabilities V met, unscaled
      }
      std::fill(pr + n, pr + t.c, 0.0f);
      std::fill(dr + n, dr + t.c, 0.0f);
    }
    round_stored(p, t.c, t.c, t.c);  // the GPU's bf16 tiles
    round_stored(dp, t.c, t.c, t.c);
    gemm(true, false, t.c, m.d, t.c, m.keep_scale, p, t.c, dout, m.ctx_ld, 1.0f, dkv + t.kv_row * kv_ld + t.v_col,
         kv_ld);
    gemm(false, false, t.c, m.d, t.c, m.scale, dp, t.c, kv + t.kv_row * kv_ld + t.k_col, kv_ld, 1.0f,
         dq + t.q_row * m.ctx_ld + t.q_col, m.ctx_ld);
    gemm(true, false, t.c, m.d, t.c, m.scale, dp, t.c, q, m.ld, 1.0f, dkv + t.kv_row * kv_ld + t.k_col, kv_ld);
  });
}

void CpuBackend::dropout_mask(std::uint8_t* mask, std::int64_t n, std::uint64_t key, std::uint64_t first, float p) {
  const std::uint64_t threshold = kernels::dropout_threshold(p);
#pragma omp parallel for if (n > kParallelWork)
  for (std::int64_t i = 0; i < n; ++i)
    mask[i] = kernels::dropout_keep(key, first + static_cast<std::uint64_t>(i), threshold) ? 1 : 0;
}

void CpuBackend::apply_mask(TensorRef out_r, ConstTensorRef in_r, const std::uint8_t* mask, std::int64_t n,
                            float scale) {
  float* out = f32(out_r, "apply_mask");
  const float* in = f32(in_r, "apply_mask");
  for (std::int64_t i = 0; i < n; ++i) out[i] = mask[i] != 0 ? in[i] * scale : 0.0f;
}

void CpuBackend::rope(TensorRef qkv_r, const AttentionShape& s, bool inverse) {
  float* qkv = f32(qkv_r, "rope");
  const int half = s.head_dim / 2;
  const std::int64_t ld = s.qkv_cols();
  const int rotated_heads = s.heads + s.kv_heads;  // q and k, not v
#pragma omp parallel for if (static_cast <std::int64_t>(s.batch) * s.seq * s.qkv_cols() > kParallelWork)
  for (std::int64_t row = 0; row < static_cast<std::int64_t>(s.batch) * s.seq; ++row) {
    const int pos = s.position(static_cast<int>(row % s.seq));
    for (int h = 0; h < rotated_heads; ++h) {
      float* x = qkv + row * ld + static_cast<std::int64_t>(h) * s.head_dim;
      for (int i = 0; i < half; ++i) {
        const double theta = pos * std::pow(10000.0, -2.0 * i / s.head_dim);
        const float c = static_cast<float>(std::cos(theta));
        const float sn = inverse ? -static_cast<float>(std::sin(theta)) : static_cast<float>(std::sin(theta));
        const float a = x[i], b = x[i + half];
        x[i] = a * c - b * sn;
        x[i + half] = b * c + a * sn;
      }
    }
  }
}

void CpuBackend::row_max(float* out, ConstTensorRef logits_r, std::int64_t rows, std::int64_t cols,
                         std::int64_t valid_cols) {
  const float* logits = f32(logits_r, "row_max");
  for (std::int64_t r = 0; r < rows; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t c = 0; c < valid_cols; ++c) mx = std::max(mx, logits[r * cols + c]);
    out[r] = mx;
  }
}

void CpuBackend::row_sum_exp(float* out, ConstTensorRef logits_r, const float* max, std::int64_t rows,
                             std::int64_t cols, std::int64_t valid_cols) {
  const float* logits = f32(logits_r, "row_sum_exp");
#pragma omp parallel for if (rows * cols > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r) {
    float sum = 0;
    for (std::int64_t c = 0; c < valid_cols; ++c) sum += std::exp(logits[r * cols + c] - max[r]);
    out[r] = sum;
  }
}

void CpuBackend::row_max_sum_exp(float* max, float* sum_exp, ConstTensorRef logits_r, std::int64_t rows,
                                 std::int64_t cols, std::int64_t valid_cols) {
  const float* logits = f32(logits_r, "row_max_sum_exp");
#pragma omp parallel for if (rows * cols > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t c = 0; c < valid_cols; ++c) mx = std::max(mx, row[c]);
    float sum = 0;
    for (std::int64_t c = 0; c < valid_cols; ++c) sum += std::exp(row[c] - mx);
    max[r] = mx;
    sum_exp[r] = sum;
  }
}

void CpuBackend::target_logit(float* out, ConstTensorRef logits_r, const int* targets, std::int64_t rows,
                              std::int64_t cols, std::int64_t vocab_start) {
  const float* logits = f32(logits_r, "target_logit");
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t c = targets[r] - vocab_start;
    out[r] = (c >= 0 && c < cols) ? logits[r * cols + c] : 0.0f;
  }
}

void CpuBackend::cross_entropy_grad(TensorRef logits_r, const float* max, const float* sum_exp, const int* targets,
                                    std::int64_t rows, std::int64_t cols, std::int64_t valid_cols,
                                    std::int64_t vocab_start, float scale) {
  float* logits = f32(logits_r, "cross_entropy_grad");
#pragma omp parallel for if (rows * cols > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = logits + r * cols;
    const float inv = 1.0f / sum_exp[r];
    for (std::int64_t c = 0; c < cols; ++c) {
      const float p = c < valid_cols ? std::exp(row[c] - max[r]) * inv : 0.0f;
      row[c] = scale * (p - (c + vocab_start == targets[r] ? 1.0f : 0.0f));
    }
  }
}

void CpuBackend::embedding_forward(TensorRef out_r, ConstTensorRef table_r, const int* tokens, std::int64_t n,
                                   std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) {
  float* out = f32(out_r, "embedding_forward");
  const float* table = f32(table_r, "embedding_forward");
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = tokens[i] - vocab_start;
    if (row >= 0 && row < rows_held) copy(out + i * cols, table + row * cols, cols);
  }
}

void CpuBackend::embedding_backward(float* dtable, ConstTensorRef dout_r, const int* tokens, std::int64_t n,
                                    std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) {
  const float* dout = f32(dout_r, "embedding_backward");
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = tokens[i] - vocab_start;
    if (row >= 0 && row < rows_held) axpy(dtable + row * cols, 1.0f, dout + i * cols, cols);
  }
}

}  // namespace loom::exec
