#include "exec/parallel/context_parallel.h"

#include <utility>

#include "core/trace_names.h"

namespace loom::exec {

namespace {
constexpr MemoryCategory kBuf = MemoryCategory::kBuffers;
constexpr MemoryCategory kWork = MemoryCategory::kWorkspace;
constexpr int kRingTag = 0x43500;

// One rank's sizes for an attention shape: its tokens, the query and key/value columns of them, and
// the rows of per-(sequence, head, token) statistics.
struct Sizes {
  explicit Sizes(const AttentionShape& s)
      : T(static_cast<std::int64_t>(s.batch) * s.seq),
        q_cols(static_cast<std::int64_t>(s.heads) * s.head_dim),
        kv_cols(2LL * s.kv_heads * s.head_dim),
        rows(static_cast<std::int64_t>(s.batch) * s.heads * s.seq) {}
  std::int64_t T, q_cols, kv_cols, rows;
};
}  // namespace

ContextParallel::ContextParallel(Communicator* comm, Backend& backend, int seq, CpComm kind, Tracer* tracer)
    : comm_(comm != nullptr && comm->size() > 1 ? comm : nullptr),
      backend_(backend),
      seq_(seq),
      kind_(kind),
      tracer_(tracer) {}

// Transfers and waits at the host's time; the attention tiles on the compute lane at the backend's clock
// (Tracer::mark: on a GPU where the stream ran them, Tracer::use_clock_of).
bool ContextParallel::tracing() const { return tracer_ != nullptr && tracer_->enabled(); }
double ContextParallel::now_us() const { return tracing() ? tracer_->now_us() : 0.0; }

void ContextParallel::trace(const std::function<std::string()>& name, const char* category, double begin_us,
                            int lane) const {
  if (tracing()) tracer_->add(name(), category, begin_us, tracer_->now_us(), lane);
}

Tracer::Mark ContextParallel::mark() const { return tracing() ? tracer_->mark(kComputeLane) : Tracer::Mark{}; }

void ContextParallel::trace_op(const std::function<std::string()>& name, Tracer::Mark begin) const {
  if (tracing()) tracer_->add(name(), "op", std::move(begin), tracer_->mark(kComputeLane), kComputeLane);
}

void ContextParallel::await_kv(Request& request, int step, double posted_us) const {
  const double waiting = now_us();
  request.wait();
  trace([&] { return trace_names::cp_ring_wait(step, size()); }, "comm", waiting, kComputeLane);
  trace([&] { return trace_names::cp_ring_send(step, size(), "kv"); }, "comm", posted_us, kCommLane);
}

void ContextParallel::attention_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                                        const AttentionDropout& drop) {
  if (size() == 1) return local_forward(ctx, lse, qkv, s, drop);
  if (kind_ == CpComm::kAllGather) return gathered_forward(ctx, lse, qkv, s, drop);
  if (kind_ == CpComm::kA2A) return ulysses_forward(ctx, lse, qkv, s, drop);
  const int cp = size(), me = rank();
  const auto [T, q_cols, kv_cols, rows] = Sizes(s);
  // The block in hand (this rank's K and V first) and the one arriving: TransformerEngine's two buffers.
  Tensor kv = backend_.empty(T, kv_cols, kBuf, qkv.dtype());
  backend_.copy_rows(kv.ref(), kv_cols, qkv + q_cols, s.qkv_cols(), T, kv_cols);
  Tensor acc = backend_.alloc(T, q_cols, kWork);
  Tensor stats = backend_.alloc(2, rows, kWork);  // running row max, running sum of exponentials
  for (int step = 0; step < cp; ++step) {
    Tensor next;
    std::unique_ptr<Request> exchange;
    if (step + 1 < cp) {  // the next block travels while this one is computed
      next = backend_.empty(T, kv_cols, kBuf, qkv.dtype());
      backend_.record_event()->synchronize();
      exchange = comm_->exchange(kv.ref(), next.ref(), T * kv_cols, (me + 1) % cp, (me + cp - 1) % cp, kRingTag);
    }
    const double posted = now_us();
    Tracer::Mark tile = mark();
    backend_.attention_block_forward(acc.data(), stats.data(), stats.data() + rows, qkv, kv.ref(),
                                     static_cast<int>(kv_cols), (me + cp - step) % cp, s, drop);
    trace_op([&] { return trace_names::cp_ring_tile(false, step, cp); }, std::move(tile));
    if (exchange != nullptr) {
      await_kv(*exchange, step, posted);
      kv = std::move(next);
    }
  }
  backend_.attention_block_finish(ctx, lse, acc.data(), stats.data(), stats.data() + rows, s);
}

void ContextParallel::attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse,
                                         ConstTensorRef qkv, const AttentionShape& s, const AttentionDropout& drop) {
  if (size() == 1) return local_backward(dqkv, dctx, ctx, lse, qkv, s, drop);
  if (kind_ == CpComm::kAllGather) return gathered_backward(dqkv, dctx, ctx, lse, qkv, s, drop);
  if (kind_ == CpComm::kA2A) return ulysses_backward(dqkv, dctx, ctx, lse, qkv, s, drop);
  const int cp = size(), me = rank();
  const auto [T, q_cols, kv_cols, rows] = Sizes(s);
  const std::int64_t n = T * kv_cols;
  const int next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  // TransformerEngine's two buffers, each [K V | dK dV] of one block (the memory model's peak): at step i
  // buffer i%2 holds the K, V in hand and the dK, dV this rank finished at step i−1, which go on to the
  // next rank while the next K, V and the partial dK, dV of this step's block (summed by the ranks it
  // has visited) arrive in the other buffer; this rank's share is added to that partial. After the
  // last step a block's dK, dV go once more around, back to their owner.
  Tensor buffers[2] = {backend_.empty(2, n, kBuf, qkv.dtype()), backend_.alloc(2, n, kBuf, qkv.dtype())};
  auto kv_of = [&](int b) { return buffers[b % 2].ref(); };
  auto dkv_of = [&](int b) { return buffers[b % 2].ref() + n; };
  backend_.copy_rows(kv_of(0), kv_cols, qkv + q_cols, s.qkv_cols(), T, kv_cols);
  Tensor dq = backend_.alloc(T, q_cols, kWork);
  // The dK, dV finished at step `step` go to the next rank, the partial of the next block arrives.
  auto pass_gradients = [&](int step) {
    backend_.record_event()->synchronize();
    const double posted = now_us();
    comm_->exchange(dkv_of(step + 1), dkv_of(step), n, next, prev, kRingTag + 1)->wait();
    trace([&] { return trace_names::cp_ring_send(step, cp, "dkv"); }, "comm", posted, kCommLane);
    trace([&] { return trace_names::cp_ring_wait(step, cp); }, "comm", posted, kComputeLane);
  };
  for (int step = 0; step < cp; ++step) {
    std::unique_ptr<Request> kv_request;
    const double posted = now_us();
    if (step + 1 < cp) {
      backend_.record_event()->synchronize();
      kv_request = comm_->exchange(kv_of(step), kv_of(step + 1), n, next, prev, kRingTag);
    }
    // This step's block starts from the partial of the ranks before (from zero at this rank's own).
    if (step > 0) pass_gradients(step - 1);
    Tracer::Mark tile = mark();
    backend_.attention_block_backward(dq.data(), dkv_of(step + 1), dctx, ctx, lse, qkv, kv_of(step),
                                      static_cast<int>(kv_cols), (me + cp - step) % cp, s, drop);
    trace_op([&] { return trace_names::cp_ring_tile(true, step, cp); }, std::move(tile));
    if (kv_request != nullptr) await_kv(*kv_request, step, posted);
  }
  pass_gradients(cp - 1);  // this rank's own block arrives, whole
  backend_.copy_rows(dqkv, s.qkv_cols(), dq.ref(), q_cols, T, q_cols);
  backend_.copy_rows(dqkv + q_cols, s.qkv_cols(), dkv_of(cp + 1), kv_cols, T, kv_cols);
}

// One rank: one block, its keys and values read in place from qkv (row stride qkv_cols).
void ContextParallel::local_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                                    const AttentionDropout& drop) {
  const auto [T, q_cols, kv_cols, rows] = Sizes(s);
  Tensor acc = backend_.alloc(T, q_cols, kWork);
  Tensor stats = backend_.alloc(2, rows, kWork);  // running row max, running sum of exponentials
  backend_.attention_block_forward(acc.data(), stats.data(), stats.data() + rows, qkv, qkv + q_cols,
                                   static_cast<int>(s.qkv_cols()), 0, s, drop);
  backend_.attention_block_finish(ctx, lse, acc.data(), stats.data(), stats.data() + rows, s);
}

// dK and dV accumulate in place into dqkv's key and value columns (zeroed first); dQ in fp32, then cast.
void ContextParallel::local_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse,
                                     ConstTensorRef qkv, const AttentionShape& s, const AttentionDropout& drop) {
  const auto [T, q_cols, kv_cols, rows] = Sizes(s);
  Tensor dq = backend_.alloc(T, q_cols, kWork);
  backend_.zero(dqkv, T * s.qkv_cols());
  backend_.attention_block_backward(dq.data(), dqkv + q_cols, dctx, ctx, lse, qkv, qkv + q_cols,
                                    static_cast<int>(s.qkv_cols()), 0, s, drop);
  backend_.copy_rows(dqkv, s.qkv_cols(), dq.ref(), q_cols, T, q_cols);
}

Tensor ContextParallel::gather_kv(ConstTensorRef qkv, const AttentionShape& s) {
  const auto [T, q_cols, kv_cols, rows] = Sizes(s);
  // Block r (rows [r·T, (r+1)·T)) from CP rank r; this rank's packed in place, then gathered around it.
  Tensor all = backend_.empty(size() * T, kv_cols, kBuf, qkv.dtype());
  TensorRef mine = all.ref() + rank() * T * kv_cols;
  backend_.copy_rows(mine, kv_cols, qkv + static_cast<std::int64_t>(s.heads) * s.head_dim, s.qkv_cols(), T, kv_cols);
  backend_.record_event()->synchronize();
  const double start = now_us();
  comm_->all_gather(mine, all.ref(), T * kv_cols);
  trace([] { return trace_names::collective(Collective::kAllGather, "cp"); }, "comm", start, kCommLane);
  return all;
}

void ContextParallel::gathered_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                                       const AttentionDropout& drop) {
  const int cp = size(), me = rank();
  const auto [T, q_cols, kv_cols, rows] = Sizes(s);
  Tensor all = gather_kv(qkv, s);
  Tensor acc = backend_.alloc(T, q_cols, kWork);
  Tensor stats = backend_.alloc(2, rows, kWork);
  Tracer::Mark start = mark();
  for (int step = 0; step < cp; ++step) {  // the ring's order, so the same sums in the same order
    const int src = (me + cp - step) % cp;
    backend_.attention_block_forward(acc.data(), stats.data(), stats.data() + rows, qkv, all.ref() + src * T * kv_cols,
                                     static_cast<int>(kv_cols), src, s, drop);
  }
  trace_op([] { return std::string("flash_attention"); }, std::move(start));
  backend_.attention_block_finish(ctx, lse, acc.data(), stats.data(), stats.data() + rows, s);
}

void ContextParallel::gathered_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse,
                                        ConstTensorRef qkv, const AttentionShape& s, const AttentionDropout& drop) {
  const int cp = size(), me = rank();
  const auto [T, q_cols, kv_cols, rows] = Sizes(s);
  Tensor all = gather_kv(qkv, s);
  Tensor grads = backend_.alloc(cp * T, kv_cols, kBuf, qkv.dtype());  // dK, dV of every block
  Tensor dq = backend_.alloc(T, q_cols, kWork);
  Tracer::Mark tiles = mark();
  for (int step = 0; step < cp; ++step) {
    const int src = (me + cp - step) % cp;
    backend_.attention_block_backward(dq.data(), grads.ref() + src * T * kv_cols, dctx, ctx, lse, qkv,
                                      all.ref() + src * T * kv_cols, static_cast<int>(kv_cols), src, s, drop);
  }
  trace_op([] { return std::string("flash_attention_bwd"); }, std::move(tiles));
  all.reset();
  TensorRef mine = grads.ref() + me * T * kv_cols;
  backend_.record_event()->synchronize();
  const double start = now_us();
  comm_->reduce_scatter(grads.ref(), mine, T * kv_cols);
  trace([] { return trace_names::collective(Collective::kReduceScatter, "cp"); }, "comm", start, kCommLane);
  backend_.copy_rows(dqkv, s.qkv_cols(), dq.ref(), q_cols, T, q_cols);
  backend_.copy_rows(dqkv + q_cols, s.qkv_cols(), mine, kv_cols, T, kv_cols);
}

Tensor ContextParallel::to_heads(ConstTensorRef x, std::int64_t ld, const std::vector<ColumnSlice>& slices,
                                 std::int64_t T) {
  const int cp = size();
  std::int64_t w = 0;
  for (const ColumnSlice& c : slices) w += c.width;
  Tensor send = backend_.empty(cp * T, w, kBuf, x.dtype());
  for (int p = 0; p < cp; ++p) {
    std::int64_t at = 0;
    for (const ColumnSlice& c : slices) {
      backend_.copy_rows(send.ref() + p * T * w + at, w, x + c.first + p * c.width, ld, T, c.width);
      at += c.width;
    }
  }
  Tensor recv = backend_.empty(cp * T, w, kBuf, x.dtype());
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(cp), T * w);
  backend_.record_event()->synchronize();
  const double start = now_us();
  comm_->all_to_all(send.ref(), counts, recv.ref(), counts);
  trace([] { return trace_names::collective("all_to_all", "cp"); }, "comm", start, kCommLane);
  return recv;
}

void ContextParallel::from_heads(TensorRef y, std::int64_t ld, ConstTensorRef h, const std::vector<ColumnSlice>& slices,
                                 std::int64_t T) {
  const int cp = size();
  std::int64_t w = 0;
  for (const ColumnSlice& c : slices) w += c.width;
  Tensor recv = backend_.empty(cp * T, w, kBuf, h.dtype());
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(cp), T * w);
  backend_.record_event()->synchronize();
  const double start = now_us();
  comm_->all_to_all(h, counts, recv.ref(), counts);
  trace([] { return trace_names::collective("all_to_all", "cp"); }, "comm", start, kCommLane);
  for (int p = 0; p < cp; ++p) {
    std::int64_t at = 0;
    for (const ColumnSlice& c : slices) {
      backend_.copy_rows(y + c.first + p * c.width, ld, recv.ref() + p * T * w + at, w, T, c.width);
      at += c.width;
    }
  }
}

namespace {

// Ulysses' shapes: this rank's heads/cp query and key/value heads, the rows of one rank's chunks.
struct HeadShard {
  HeadShard(const AttentionShape& s, const AttentionDropout& drop, int cp, int me) : shape(s), drop(drop) {
    shape.heads = s.heads / cp;
    shape.kv_heads = s.kv_heads / cp;
    const std::uint64_t S = static_cast<std::uint64_t>(s.seq) * cp;
    this->drop.first += static_cast<std::uint64_t>(me) * shape.heads * S * S;  // the mask of this rank's heads
    T = static_cast<std::int64_t>(s.batch) * s.seq;
    width = shape.qkv_cols();
    q_cols = static_cast<std::int64_t>(shape.heads) * s.head_dim;
    rows = static_cast<std::int64_t>(s.batch) * shape.heads * s.seq;
    const std::int64_t kv = static_cast<std::int64_t>(shape.kv_heads) * s.head_dim;
    const std::int64_t all_q = static_cast<std::int64_t>(s.heads) * s.head_dim,
                       all_kv = static_cast<std::int64_t>(s.kv_heads) * s.head_dim;
    qkv_slices = {{0, q_cols}, {all_q, kv}, {all_q + all_kv, kv}};  // Q, K, V of this rank's heads
  }
  // Rank q's chunks (queries, or keys and values of kv_rank q).
  AttentionShape of(int q) const {
    AttentionShape a = shape;
    a.cp_rank = q;
    return a;
  }
  AttentionShape shape;
  AttentionDropout drop;
  std::int64_t T, width, q_cols, rows;
  std::vector<ColumnSlice> qkv_slices;
};

}  // namespace

void ContextParallel::ulysses_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                                      const AttentionDropout& drop) {
  const int cp = size();
  const HeadShard hs(s, drop, cp, rank());
  const std::int64_t T = hs.T, w = hs.width, qw = hs.q_cols, rows = hs.rows;
  Tensor h = to_heads(qkv, s.qkv_cols(), hs.qkv_slices, T);  // block q: rank q's chunks of this rank's heads
  Tensor out = backend_.empty(cp * T, qw, kBuf, qkv.dtype());
  {
    Tensor acc = backend_.alloc(cp * T, qw, kWork);
    Tensor stats = backend_.alloc(2, cp * rows, kWork);
    Tracer::Mark start = mark();
    for (int q = 0; q < cp; ++q) {
      float *m = stats.data() + q * rows, *l = stats.data() + (cp + q) * rows;
      for (int step = 0; step < cp; ++step) {  // the ring's order from q
        const int k = (q + cp - step) % cp;
        backend_.attention_block_forward(acc.data() + q * T * qw, m, l, h.ref() + q * T * w, h.ref() + k * T * w + qw,
                                         static_cast<int>(w), k, hs.of(q), hs.drop);
      }
      backend_.attention_block_finish(out.ref() + q * T * qw, lse + q * rows, acc.data() + q * T * qw, m, l, hs.of(q));
    }
    trace_op([] { return std::string("flash_attention"); }, std::move(start));
  }
  h.reset();
  from_heads(ctx, static_cast<std::int64_t>(s.heads) * s.head_dim, out.ref(), {{0, qw}}, T);
}

void ContextParallel::ulysses_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse,
                                       ConstTensorRef qkv, const AttentionShape& s, const AttentionDropout& drop) {
  const int cp = size();
  const HeadShard hs(s, drop, cp, rank());
  const std::int64_t T = hs.T, w = hs.width, qw = hs.q_cols, rows = hs.rows;
  const std::int64_t ctx_ld = static_cast<std::int64_t>(s.heads) * s.head_dim;
  Tensor h = to_heads(qkv, s.qkv_cols(), hs.qkv_slices, T);
  Tensor o = to_heads(ctx, ctx_ld, {{0, qw}}, T), dout = to_heads(dctx, ctx_ld, {{0, qw}}, T);
  // [dQ | dK dV] of every rank's chunks of this rank's heads: dK, dV laid out as the keys they go with.
  Tensor dh = backend_.alloc(cp * T, w, kBuf, qkv.dtype());
  {
    Tensor dq = backend_.alloc(cp * T, qw, kWork);
    Tracer::Mark start = mark();
    for (int q = 0; q < cp; ++q)
      for (int step = 0; step < cp; ++step) {
        const int k = (q + cp - step) % cp;
        backend_.attention_block_backward(dq.data() + q * T * qw, dh.ref() + k * T * w + qw, dout.ref() + q * T * qw,
                                          o.ref() + q * T * qw, lse + q * rows, h.ref() + q * T * w,
                                          h.ref() + k * T * w + qw, static_cast<int>(w), k, hs.of(q), hs.drop);
      }
    trace_op([] { return std::string("flash_attention_bwd"); }, std::move(start));
    backend_.copy_rows(dh.ref(), w, dq.ref(), qw, cp * T, qw);
  }
  h.reset();
  o.reset();
  dout.reset();
  from_heads(dqkv, s.qkv_cols(), dh.ref(), hs.qkv_slices, T);
}

}  // namespace loom::exec
