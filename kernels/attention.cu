// Unfused attention: for each sequence b and each member g of a GQA group, one strided-batched GEMM
// runs over the kv_heads key/value heads (query head kv·G + g), so GQA needs no copies of K or V.
#include "kernels/attention.h"

#include <cmath>

#include "kernels/cuda_check.h"

namespace loom::kernels {

namespace {
template <class T>
constexpr DType dtype() {
  return sizeof(T) == 2 ? DType::bf16 : DType::f32;
}

// Element offsets of (sequence b, group member g)'s first head, and the strides between kv groups.
struct Heads {
  i64 ld, ctx_ld, group;
  i64 q, k, v, probs, ctx;
  i64 q_stride, kv_stride, probs_stride, ctx_stride;
};
Heads heads_of(const AttentionDims& s, int b, int g) {
  const i64 group = s.heads / s.kv_heads, ld = s.qkv_cols(), ctx_ld = static_cast<i64>(s.heads) * s.head_dim;
  const i64 row0 = static_cast<i64>(b) * s.seq * ld, sq = static_cast<i64>(s.seq) * s.seq;
  return {ld,
          ctx_ld,
          group,
          row0 + static_cast<i64>(g) * s.head_dim,
          row0 + static_cast<i64>(s.heads) * s.head_dim,
          row0 + static_cast<i64>(s.heads + s.kv_heads) * s.head_dim,
          (static_cast<i64>(b) * s.heads + g) * sq,
          static_cast<i64>(b) * s.seq * ctx_ld + static_cast<i64>(g) * s.head_dim,
          group * s.head_dim,
          s.head_dim,
          group * sq,
          group * s.head_dim};
}

template <class T>
Matrix in(const T* base, i64 offset, i64 ld, i64 stride) {
  return Matrix{base + offset, dtype<T>(), ld, stride};
}
template <class T>
OutMatrix out(T* base, i64 offset, i64 ld, i64 stride) {
  return OutMatrix{base + offset, dtype<T>(), ld, stride};
}

template <class F>
void for_each_sequence_and_group_member(const AttentionDims& s, F f) {
  for (int b = 0; b < s.batch; ++b)
    for (int g = 0; g < s.heads / s.kv_heads; ++g) f(heads_of(s, b, g));
}
}  // namespace

template <class T>
void attention_probs(Gemm& gemm, T* probs, const T* qkv, const AttentionDims& s, cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const GemmShape shape{false, true, s.seq, s.seq, s.head_dim, s.kv_heads};
  for_each_sequence_and_group_member(s, [&](const Heads& h) {
    gemm.run(shape, scale, in(qkv, h.q, h.ld, h.q_stride), in(qkv, h.k, h.ld, h.kv_stride), 0.0f,
             out(probs, h.probs, s.seq, h.probs_stride), stream);
  });
  causal_softmax_forward(probs, static_cast<i64>(s.batch) * s.heads * s.seq, s.seq, stream);
}

template <class T>
void attention_context(Gemm& gemm, T* ctx, const T* probs, const T* qkv, const AttentionDims& s, cudaStream_t stream) {
  const GemmShape shape{false, false, s.seq, s.head_dim, s.seq, s.kv_heads};
  for_each_sequence_and_group_member(s, [&](const Heads& h) {
    gemm.run(shape, 1.0f, in(probs, h.probs, s.seq, h.probs_stride), in(qkv, h.v, h.ld, h.kv_stride), 0.0f,
             out(ctx, h.ctx, h.ctx_ld, h.ctx_stride), stream);
  });
}

template <class T>
void attention_backward(Gemm& gemm, T* dqkv, T* scratch, const T* dctx, const T* probs, const T* dropped,
                        const std::uint8_t* mask, float keep_scale, const T* qkv, const AttentionDims& s,
                        cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const T* pv = dropped != nullptr ? dropped : probs;
  zero(dqkv, static_cast<i64>(s.batch) * s.seq * s.qkv_cols(), stream);
  // dP = dctx·Vᵀ and dV += (P or its dropout)ᵀ·dctx.
  for_each_sequence_and_group_member(s, [&](const Heads& h) {
    gemm.run(GemmShape{false, true, s.seq, s.seq, s.head_dim, s.kv_heads}, 1.0f,
             in(dctx, h.ctx, h.ctx_ld, h.ctx_stride), in(qkv, h.v, h.ld, h.kv_stride), 0.0f,
             out(scratch, h.probs, s.seq, h.probs_stride), stream);
    gemm.run(GemmShape{true, false, s.seq, s.head_dim, s.seq, s.kv_heads}, 1.0f, in(pv, h.probs, s.seq, h.probs_stride),
             in(dctx, h.ctx, h.ctx_ld, h.ctx_stride), 1.0f, out(dqkv, h.v, h.ld, h.kv_stride), stream);
  });
  // dS from dP through the dropout (mask and scale applied as dP is read) and the softmax, in one pass.
  causal_softmax_backward(scratch, probs, scratch, mask, keep_scale, static_cast<i64>(s.batch) * s.heads * s.seq, s.seq,
                          stream);
  // dQ = dS·K/√d and dK += dSᵀ·Q/√d.
  for_each_sequence_and_group_member(s, [&](const Heads& h) {
    gemm.run(GemmShape{false, false, s.seq, s.head_dim, s.seq, s.kv_heads}, scale,
             in(scratch, h.probs, s.seq, h.probs_stride), in(qkv, h.k, h.ld, h.kv_stride), 1.0f,
             out(dqkv, h.q, h.ld, h.q_stride), stream);
    gemm.run(GemmShape{true, false, s.seq, s.head_dim, s.seq, s.kv_heads}, scale,
             in(scratch, h.probs, s.seq, h.probs_stride), in(qkv, h.q, h.ld, h.q_stride), 1.0f,
             out(dqkv, h.k, h.ld, h.kv_stride), stream);
  });
}

#define LOOM_INSTANTIATE(T)                                                                                    \
  template void attention_probs<T>(Gemm&, T*, const T*, const AttentionDims&, cudaStream_t);                   \
  template void attention_context<T>(Gemm&, T*, const T*, const T*, const AttentionDims&, cudaStream_t);       \
  template void attention_backward<T>(Gemm&, T*, T*, const T*, const T*, const T*, const std::uint8_t*, float, \
                                      const T*, const AttentionDims&, cudaStream_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(bf16)

}  // namespace loom::kernels
