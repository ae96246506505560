// Unfused causal attention with exec::Backend's semantics, built from cuBLASLt strided-batched GEMMs
// and the causal softmax kernel: packed [tokens, q|k|v] input (GQA: query head h reads key/value head
// h / (heads / kv_heads)), probabilities [batch, heads, seq, seq] kept for the backward.
#pragma once

#include <cstdint>

#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace loom::kernels {

// probs = causal softmax(Q·Kᵀ/√d) per sequence and head.
template <class T>
void attention_probs(Gemm& gemm, T* probs, const T* qkv, const AttentionDims& s, cudaStream_t stream);
// ctx [tokens, heads·head_dim] = P·V, P being the softmax output or its dropout.
template <class T>
void attention_context(Gemm& gemm, T* ctx, const T* probs, const T* qkv, const AttentionDims& s, cudaStream_t stream);
// Writes dqkv (all of it). With attention dropout, `dropped` = probs·mask·keep_scale was multiplied
// with V and `mask` is its keep mask; both null without. `scratch` holds s.probs_numel() values.
template <class T>
void attention_backward(Gemm& gemm, T* dqkv, T* scratch, const T* dctx, const T* probs, const T* dropped,
                        const std::uint8_t* mask, float keep_scale, const T* qkv, const AttentionDims& s,
                        cudaStream_t stream);

}  // namespace loom::kernels
