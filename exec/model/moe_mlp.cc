#include "exec/model/moe_mlp.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/trace_names.h"

namespace loom::exec {

namespace {
constexpr MemoryCategory kAct = MemoryCategory::kActivations;
constexpr MemoryCategory kWork = MemoryCategory::kWorkspace;

template <class P>
MoeSlots<P> moe_slots(const Unit& layer, P layer_base, const Unit& experts, P experts_base) {
  MoeSlots<P> s;
  auto at = [](const Unit& u, P base, const char* suffix) {
    const ParamSlot* slot = u.find(suffix);
    return slot == nullptr ? P{} : base + slot->offset;
  };
  s.router_w = at(layer, layer_base, "mlp.router.weight");
  s.shared_fc_w = at(layer, layer_base, "mlp.shared.fc.weight");
  s.shared_proj_w = at(layer, layer_base, "mlp.shared.proj.weight");
  s.shared_gate_w = at(layer, layer_base, "mlp.shared.gate.weight");
  // The experts unit holds each local expert's fc then proj matrix (gpt_layout.cc).
  for (std::size_t i = 0; i + 1 < experts.params.size(); i += 2) {
    s.expert_fc_w.push_back(experts_base + experts.params[i].offset);
    s.expert_proj_w.push_back(experts_base + experts.params[i + 1].offset);
  }
  return s;
}
}  // namespace

MoeWeights moe_weights(const Unit& layer, ConstTensorRef layer_base, const Unit& experts, ConstTensorRef experts_base) {
  return moe_slots(layer, layer_base, experts, experts_base);
}
MoeGrads moe_grads(const Unit& layer, float* layer_base, const Unit& experts, float* experts_base) {
  return moe_slots(layer, layer_base, experts, experts_base);
}

MoeMlp::MoeMlp(const ModelSpec& model, const LocalDims& dims, Backend& backend, TensorParallel& tp, Communicator* ep,
               Tracer* tracer)
    : dims_(dims),
      backend_(backend),
      tp_(tp),
      ep_(ep != nullptr ? *ep : self_),
      tracer_(tracer),
      experts_(backend, model.activation, dims.hidden, dims.expert_ffn),
      shared_(backend, model.activation, dims.hidden, dims.shared_ffn) {}

void MoeMlp::route(const std::vector<float>& logits, std::int64_t tokens, MoeCache& c) {
  const int E = dims_.experts, k = dims_.experts_per_token, L = dims_.local_experts, ep = ep_.size();
  const std::int64_t copies = tokens * k;
  c.expert.assign(static_cast<std::size_t>(copies), 0);
  c.prob.assign(static_cast<std::size_t>(copies), 0.0f);
  std::vector<int> index(static_cast<std::size_t>(E));
  std::vector<std::int64_t> count(static_cast<std::size_t>(E), 0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data() + t * E;
    std::iota(index.begin(), index.end(), 0);
    // The k largest logits, ties to the lower expert index: the same choice on every rank and layout.
    std::partial_sort(index.begin(), index.begin() + k, index.end(),
                      [row](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    const float top = row[index[0]];
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += std::exp(row[index[j]] - top);
    for (int j = 0; j < k; ++j) {
      const std::size_t copy = static_cast<std::size_t>(t * k + j);
      c.expert[copy] = index[j];
      c.prob[copy] = std::exp(row[index[j]] - top) / sum;
      ++count[static_cast<std::size_t>(index[j])];
    }
  }
  // Dispatch order: expert-major (so rank-major, each rank's experts being consecutive), copies in order.
  std::vector<std::int64_t> next(static_cast<std::size_t>(E), 0);
  for (int e = 1; e < E; ++e) next[e] = next[e - 1] + count[e - 1];
  c.position.assign(static_cast<std::size_t>(copies), 0);
  c.send_token.assign(static_cast<std::size_t>(copies), 0);
  for (std::int64_t copy = 0; copy < copies; ++copy) {
    const std::int64_t row = next[static_cast<std::size_t>(c.expert[copy])]++;
    c.position[copy] = static_cast<int>(row);
    c.send_token[static_cast<std::size_t>(row)] = static_cast<int>(copy / k);
  }
  // Each rank learns how many rows every rank sends to each of its experts.
  std::vector<std::int64_t> received(count.size(), 0);
  {
    static const std::string name = trace_names::collective("all_to_all", "ep") + " counts";
    TraceScope scope(ep > 1 ? tracer_ : nullptr, name, "comm", kCommLane);
    ep_.all_to_all(count.data(), received.data(), L);
  }
  c.send_rows.assign(static_cast<std::size_t>(ep), 0);
  c.recv_rows.assign(static_cast<std::size_t>(ep), 0);
  c.expert_offset.assign(static_cast<std::size_t>(L) + 1, 0);
  for (int q = 0; q < ep; ++q)
    for (int e = 0; e < L; ++e) {
      c.send_rows[q] += count[static_cast<std::size_t>(q * L + e)];
      c.recv_rows[q] += received[static_cast<std::size_t>(q * L + e)];
      c.expert_offset[e + 1] += received[static_cast<std::size_t>(q * L + e)];
    }
  for (int e = 0; e < L; ++e) c.expert_offset[e + 1] += c.expert_offset[e];
  if (copies > 0) {
    const double share = static_cast<double>(c.expert_offset[L]) / static_cast<double>(copies);
    max_imbalance_ = std::max(max_imbalance_, share);
    min_imbalance_ = min_imbalance_ > 0 ? std::min(min_imbalance_, share) : share;
  }
  c.to_expert_major.clear();
  c.to_source_major.clear();
  if (ep == 1) return;  // what arrives is already in expert order
  // Arrived: rank-major, each rank's rows expert-major. Expert order: expert-major, ranks in order.
  const std::int64_t rows = c.expert_offset[L];
  c.to_expert_major.resize(static_cast<std::size_t>(rows));
  c.to_source_major.resize(static_cast<std::size_t>(rows));
  std::vector<std::int64_t> fill(c.expert_offset.begin(), c.expert_offset.end() - 1);
  std::int64_t arrived = 0;
  for (int q = 0; q < ep; ++q)
    for (int e = 0; e < L; ++e)
      for (std::int64_t i = 0; i < received[static_cast<std::size_t>(q * L + e)]; ++i, ++arrived) {
        const std::int64_t at = fill[e]++;
        c.to_expert_major[static_cast<std::size_t>(at)] = static_cast<int>(arrived);
        c.to_source_major[static_cast<std::size_t>(arrived)] = static_cast<int>(at);
      }
}

Tensor MoeMlp::exchange(Tensor send, const std::vector<std::int64_t>& send_rows,
                        const std::vector<std::int64_t>& recv_rows, const char* what) {
  if (ep_.size() == 1) return send;
  const std::int64_t cols = send.cols();
  std::vector<std::int64_t> sc(send_rows.size()), rc(recv_rows.size());
  std::int64_t rows = 0;
  for (std::size_t p = 0; p < sc.size(); ++p) {
    sc[p] = send_rows[p] * cols;
    rc[p] = recv_rows[p] * cols;
    rows += recv_rows[p];
  }
  Tensor recv = backend_.empty(rows, cols, kWork, send.dtype());
  TraceScope scope(tracer_, trace_names::collective("all_to_all", "ep") + " " + what, "comm", kCommLane);
  ep_.all_to_all(send.ref(), sc, recv.ref(), rc);
  return recv;
}

Tensor MoeMlp::reorder(Tensor in, const std::vector<int>& index, MemoryCategory category) {
  if (index.empty()) return backend_.recharge(std::move(in), category);
  Tensor out = backend_.empty(in.rows(), in.cols(), category, in.dtype());
  backend_.index_rows(out.ref(), in.ref(), index.data(), in.rows(), in.cols());
  return out;
}

MoeOutput MoeMlp::forward(OpSlices& op, const MoeWeights& w, ConstTensorRef m_in, const Tensor& ln2_local,
                          std::int64_t T, MoeCache& c) {
  const int h = dims_.hidden, E = dims_.experts, k = dims_.experts_per_token, L = dims_.local_experts;
  // The rows this rank routes: every token (expert TP = TP), or its own (whole experts, under SP).
  const ConstTensorRef x = dims_.experts_whole ? ConstTensorRef(ln2_local.ref()) : m_in;
  const std::int64_t R = dims_.experts_whole ? ln2_local.rows() : T, copies = R * k;
  op.next("router");
  std::vector<float> host(static_cast<std::size_t>(R * E));
  {
    Tensor logits = act(R, E, kWork);
    backend_.gemm(false, true, static_cast<int>(R), E, h, 1.0f, x, h, w.router_w, h, 0.0f, logits.ref(), E);
    backend_.to_host(host.data(), logits.ref(), R * E);
  }
  op.end();
  route(host, R, c);

  op.next("moe_permute");
  Tensor send = act(copies, h, kWork);
  backend_.index_rows(send.ref(), x, c.send_token.data(), copies, h);
  Tensor send_probs = backend_.empty(copies, 1, kWork);
  {
    std::vector<float> probs(static_cast<std::size_t>(copies));
    for (std::int64_t copy = 0; copy < copies; ++copy) probs[c.position[copy]] = c.prob[copy];
    backend_.from_host(send_probs.ref(), probs.data(), copies);
  }
  op.end();
  c.x = reorder(exchange(std::move(send), c.send_rows, c.recv_rows, "dispatch"), c.to_expert_major, kAct);
  c.probs = reorder(exchange(std::move(send_probs), c.send_rows, c.recv_rows, "dispatch"), c.to_expert_major, kAct);

  // The experts run one after the other on their slices of buffers sized for all the rows (the memory a
  // grouped GEMM holds).
  const std::int64_t rows = c.x.rows();
  const int f = experts_.ffn(), f_in = experts_.ffn_in();
  c.fc = act(rows, f_in, kAct);
  c.act = act(rows, f, kAct);
  Tensor y = act(rows, h, kWork);
  {
    Tensor scaled = act(rows, f, kWork);
    for (int e = 0; e < L; ++e) {
      const std::int64_t first = c.expert_offset[e], n = c.expert_offset[e + 1] - first;
      if (n == 0) continue;
      experts_.forward(op, {w.expert_fc_w[e], nullptr, w.expert_proj_w[e]}, c.x.ref() + first * h, n,
                       {c.fc.ref() + first * f_in, c.act.ref() + first * f}, c.probs.data() + first,
                       scaled.ref() + first * f, y.ref() + first * h);
    }
  }
  op.end();
  Tensor back = exchange(reorder(std::move(y), c.to_source_major, kWork), c.recv_rows, c.send_rows, "combine");

  Tensor shared;
  if (dims_.shared_ffn > 0) {
    c.shared_fc = act(T, shared_.ffn_in(), kAct);
    c.shared_act = act(T, shared_.ffn(), kAct);
    shared = act(T, h, kWork);
    Tensor scaled;
    if (!w.shared_gate_w.null()) {  // Qwen2-MoE: sigmoid(x·w) scales the shared expert, as a row scale
      op.next("shared_gate");
      c.shared_gate = backend_.empty(T, 1, kAct);
      std::vector<float> gate(static_cast<std::size_t>(T));
      {
        Tensor logit = act(T, 1, kWork);
        backend_.gemm(false, true, static_cast<int>(T), 1, h, 1.0f, m_in, h, w.shared_gate_w, h, 0.0f, logit.ref(), 1);
        backend_.to_host(gate.data(), logit.ref(), T);
      }
      for (float& v : gate) v = 1.0f / (1.0f + std::exp(-v));
      backend_.from_host(c.shared_gate.ref(), gate.data(), T);
      scaled = act(T, shared_.ffn(), kWork);
    }
    shared_.forward(op, {w.shared_fc_w, nullptr, w.shared_proj_w}, m_in, T, {c.shared_fc.ref(), c.shared_act.ref()},
                    c.shared_gate.empty() ? nullptr : c.shared_gate.data(), scaled.ref(), shared.ref());
  }
  op.next("moe_unpermute");
  Tensor routed = act(R, h, kWork);
  backend_.sum_indexed_rows(routed.ref(), back.ref(), c.position.data(), R, k, h);
  back.reset();
  MoeOutput out;
  if (dims_.experts_whole) {  // the routed output is this rank's rows, whole; the shared expert's a TP sum
    out.local = std::move(routed);
    out.partial = std::move(shared);
  } else {
    if (!shared.empty()) backend_.add(routed.ref(), routed.ref(), shared.ref(), routed.numel());
    out.partial = std::move(routed);
  }
  op.end();
  return out;
}

MoeOutput MoeMlp::backward(OpSlices& op, WeightGradStore& wg, const MoeWeights& w, const MoeGrads& g,
                           const Tensor& dy_local, const Tensor& ln2_local, std::int64_t T, MoeCache& c) {
  const int h = dims_.hidden, E = dims_.experts, k = dims_.experts_per_token, L = dims_.local_experts;
  const std::int64_t R = dims_.experts_whole ? ln2_local.rows() : T, copies = R * k;
  // The combine's backward: each copy takes its token's output gradient, dispatched as the forward was.
  // The shared expert's backward runs first, so that at most one gathered [tokens, h] tensor is alive.
  Tensor send = act(copies, h, kWork);
  Tensor shared_dx, gate_grad;  // gate_grad: d gate per token, partial over TP (gated shared expert)
  {
    Tensor gathered;
    const bool gather = !dims_.experts_whole || dims_.shared_ffn > 0;
    ConstTensorRef dy = gather ? tp_.gather_rows(dy_local, gathered) : ConstTensorRef(dy_local.ref());
    op.next("moe_unpermute_bwd");
    backend_.index_rows(send.ref(), dims_.experts_whole ? ConstTensorRef(dy_local.ref()) : dy, c.send_token.data(),
                        copies, h);
    if (dims_.shared_ffn > 0) {
      const MlpWeights sw{w.shared_fc_w, nullptr, w.shared_proj_w};
      const MlpGrads sg{g.shared_fc_w, nullptr, g.shared_proj_w};
      op.next("mlp_down_bwd");
      Tensor dfc = act(T, shared_.ffn_in(), kWork);
      {
        const bool gated = !c.shared_gate.empty();
        if (gated) gate_grad = backend_.empty(T, 1, kWork);
        Tensor dact = act(T, shared_.ffn(), kWork), scaled = gated ? act(T, shared_.ffn(), kWork) : Tensor();
        shared_.backward_down(op, wg, sw, sg, dy, T, {c.shared_fc.ref(), c.shared_act.ref()},
                              gated ? c.shared_gate.data() : nullptr, gated ? gate_grad.data() : nullptr, scaled.ref(),
                              dact.ref(), dfc.ref());
        wg.keep(std::move(gated ? scaled : c.shared_act));  // what the down projection's weight gradient read
      }
      c.shared_act.reset();
      c.shared_fc.reset();
      wg.keep(std::move(gathered));
      ConstTensorRef m_in = tp_.gather_rows(ln2_local, gathered);
      shared_dx = act(T, h, kWork);
      shared_.backward_up(op, wg, sw, sg, dfc.ref(), m_in, T, shared_dx.ref());
      wg.keep(std::move(dfc));
      wg.keep(std::move(gathered));
    }
  }
  op.end();
  Tensor dy_e = reorder(exchange(std::move(send), c.send_rows, c.recv_rows, "combine_bwd"), c.to_expert_major, kWork);

  // Two passes over the experts, each on its slices of buffers for all the rows: the down projections and
  // activations, then (their scratch freed) the up projections.
  const std::int64_t rows = c.x.rows();
  const int f = experts_.ffn(), f_in = experts_.ffn_in();
  auto each_expert = [&](auto&& body) {
    for (int e = 0; e < L; ++e) {
      const std::int64_t first = c.expert_offset[e], n = c.expert_offset[e + 1] - first;
      if (n > 0)
        body(first, n, MlpWeights{w.expert_fc_w[e], nullptr, w.expert_proj_w[e]},
             MlpGrads{g.expert_fc_w[e], nullptr, g.expert_proj_w[e]});
    }
  };
  Tensor dfc = act(rows, f_in, kWork);
  Tensor dprob = backend_.empty(rows, 1, kWork);
  {
    Tensor dact = act(rows, f, kWork), scaled = act(rows, f, kWork);
    each_expert([&](std::int64_t first, std::int64_t n, const MlpWeights& ew, const MlpGrads& eg) {
      op.next("mlp_down_bwd");
      experts_.backward_down(op, wg, ew, eg, dy_e.ref() + first * h, n,
                             {c.fc.ref() + first * f_in, c.act.ref() + first * f}, c.probs.data() + first,
                             dprob.data() + first, scaled.ref() + first * f, dact.ref() + first * f,
                             dfc.ref() + first * f_in);
    });
    wg.keep(std::move(scaled));  // the down projections' weight gradients read the scaled activations
  }
  wg.keep(std::move(dy_e));
  c.act.reset();
  c.fc.reset();
  c.probs.reset();
  Tensor dx_e = act(rows, h, kWork);
  each_expert([&](std::int64_t first, std::int64_t n, const MlpWeights& ew, const MlpGrads& eg) {
    experts_.backward_up(op, wg, ew, eg, dfc.ref() + first * f_in, c.x.ref() + first * h, n, dx_e.ref() + first * h);
  });
  op.end();
  wg.keep(std::move(dfc));
  wg.keep(std::move(c.x));
  if (tp_.size() > 1 && !dims_.experts_whole) {  // each TP rank's slice of the width gave part of every dot
    TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "tp"), "comm", kCommLane);
    tp_.comm().all_reduce(dprob.ref(), rows, ReduceOp::kSum);
  }
  Tensor back = exchange(reorder(std::move(dx_e), c.to_source_major, kWork), c.recv_rows, c.send_rows, "dispatch_bwd");
  Tensor back_prob =
      exchange(reorder(std::move(dprob), c.to_source_major, kWork), c.recv_rows, c.send_rows, "dispatch_bwd");
  op.next("moe_permute_bwd");
  Tensor dm = act(R, h, kWork);
  backend_.sum_indexed_rows(dm.ref(), back.ref(), c.position.data(), R, k, h);
  back.reset();
  MoeOutput out;
  if (dims_.experts_whole) {
    out.local = std::move(dm);
    out.partial = std::move(shared_dx);
  } else {
    if (!shared_dx.empty()) backend_.axpy(dm.ref(), 1.0f, shared_dx.ref(), dm.numel());
    shared_dx.reset();
    out.partial = std::move(dm);
  }

  // The router: softmax over each token's k chosen logits, so d logit_j = p_j (g_j − Σ_i p_i g_i) for the
  // chosen experts and 0 for the rest.
  op.next("router_bwd");
  std::vector<float> dp(static_cast<std::size_t>(copies));
  backend_.to_host(dp.data(), back_prob.ref(), copies);
  back_prob.reset();
  std::vector<float> dlogits(static_cast<std::size_t>(R * E), 0.0f);
  for (std::int64_t t = 0; t < R; ++t) {
    float mean = 0.0f;
    for (int j = 0; j < k; ++j) mean += c.prob[t * k + j] * dp[c.position[t * k + j]];
    for (int j = 0; j < k; ++j) {
      const std::size_t copy = static_cast<std::size_t>(t * k + j);
      dlogits[static_cast<std::size_t>(t * E + c.expert[copy])] = c.prob[copy] * (dp[c.position[copy]] - mean);
    }
  }
  Tensor dl = act(R, E, kWork);
  backend_.from_host(dl.ref(), dlogits.data(), R * E);
  // The router's input gradient is whole on every TP rank: this rank's rows join the local output.
  const std::int64_t first = dims_.experts_whole ? 0 : tp_.first_local_token(T), local = ln2_local.rows();
  const bool fresh = out.local.empty();  // with expert TP = TP the routed gradient is all partial
  if (fresh) out.local = act(local, h, kWork);
  backend_.gemm(false, false, static_cast<int>(local), h, E, 1.0f, dl.ref() + first * E, E, w.router_w, h,
                fresh ? 0.0f : 1.0f, out.local.ref(), h);
  // The weight's gradient from this rank's rows (under SP a partial sum the store adds over TP).
  wg.put("router_bwd", g.router_w,
         [b = &backend_, E, h, rows = static_cast<int>(local), dl = ConstTensorRef(dl.ref() + first * E),
          x = ln2_local.ref()](float* dst) { b->gemm(true, false, E, h, rows, 1.0f, dl, E, x, h, 1.0f, dst, h); });
  if (!gate_grad.empty()) shared_gate_backward(op, wg, w, g, gate_grad, ln2_local, T, c, out.local);
  wg.keep(std::move(dl));
  op.end();
  return out;
}

// The shared expert's gate: d logit = d gate · g(1 − g), with d gate summed over TP (each rank's slice
// of the shared expert's width gave part of it); its weight's gradient and its input's, this rank's rows
// (as the router's).
void MoeMlp::shared_gate_backward(OpSlices& op, WeightGradStore& wg, const MoeWeights& w, const MoeGrads& g,
                                  Tensor& gate_grad, const Tensor& ln2_local, std::int64_t T, MoeCache& c,
                                  Tensor& local_dx) {
  const int h = dims_.hidden;
  op.next("shared_gate_bwd");
  if (tp_.size() > 1) {
    TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "tp"), "comm", kCommLane);
    tp_.comm().all_reduce(gate_grad.ref(), T, ReduceOp::kSum);
  }
  std::vector<float> dgate(static_cast<std::size_t>(T)), gate(static_cast<std::size_t>(T));
  backend_.to_host(dgate.data(), gate_grad.ref(), T);
  backend_.to_host(gate.data(), c.shared_gate.ref(), T);
  for (std::int64_t t = 0; t < T; ++t) dgate[t] *= gate[t] * (1.0f - gate[t]);
  Tensor dlogit = act(T, 1, kWork);
  backend_.from_host(dlogit.ref(), dgate.data(), T);
  c.shared_gate.reset();
  const std::int64_t first = tp_.first_local_token(T), local = ln2_local.rows();
  backend_.gemm(false, false, static_cast<int>(local), h, 1, 1.0f, dlogit.ref() + first, 1, w.shared_gate_w, h, 1.0f,
                local_dx.ref(), h);
  wg.put("shared_gate_bwd", g.shared_gate_w,
         [b = &backend_, h, rows = static_cast<int>(local), dl = ConstTensorRef(dlogit.ref() + first),
          x = ln2_local.ref()](float* dst) { b->gemm(true, false, 1, h, rows, 1.0f, dl, 1, x, h, 1.0f, dst, h); });
  wg.keep(std::move(dlogit));
}

}  // namespace loom::exec
