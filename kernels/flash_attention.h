// Flash-style causal attention with exec::Backend's block semantics (attention_block_forward, _finish,
// _backward): the scores never reach global memory. A block is this rank's queries against one set of
// keys and values (a context-parallel rank's, or its own); the forward folds the block into running fp32
// accumulators by the online softmax (Milakov & Gimelshein 2018; Dao et al., FlashAttention-2, 2023),
// the finish divides them out and keeps the log-sum-exp, and the backward recomputes the probabilities
// from it. Tiles of queries and keys are staged in shared memory; bf16 products run on the tensor cores
// (mma.sync m16n8k16, fp32 accumulate), fp32 ones on the CUDA cores in fp32.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace loom::kernels {

// exec::AttentionShape's context-parallel fields and exec::AttentionDropout, for the block ops: the
// local tokens of a sequence are chunks cp_rank and 2·cp−1−cp_rank of 2·cp (all of it when cp = 1); a
// probability's dropout mask index is first + ((b·heads_total + h)·S + query position)·S + key position,
// S = seq·cp.
struct BlockDims {
  AttentionDims dims;
  int cp = 1, cp_rank = 0;
  int kv_rank = 0;  // whose keys and values this block holds
  i64 kv_ld = 0;    // row stride of kv: keys of kv head g at columns g·d, values at (kv_heads + g)·d
  float dropout = 0;
  std::uint64_t dropout_key = 0, dropout_first = 0;
  int heads_total = 0;
};

// acc [tokens, heads·d], row_max and row_sum [batch·heads·seq] (fp32, running): this block folded in.
template <class T>
void attention_block_forward(float* acc, float* row_max, float* row_sum, const T* qkv, const T* kv, const BlockDims& b,
                             cudaStream_t stream);
// ctx = acc / row_sum (cast to T), lse = row_max + log(row_sum).
template <class T>
void attention_block_finish(T* ctx, float* lse, const float* acc, const float* row_max, const float* row_sum,
                            const AttentionDims& s, cudaStream_t stream);
// dq [tokens, heads·d] fp32 and dkv (laid out as kv, in T) accumulate this block's gradients.
template <class T>
void attention_block_backward(float* dq, T* dkv, const T* dctx, const T* ctx, const float* lse, const T* qkv,
                              const T* kv, const BlockDims& b, cudaStream_t stream);

}  // namespace loom::kernels
