#include "sim/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "core/op_recompute.h"
#include "core/partition.h"
#include "core/pipeline_split.h"
#include "core/trace_names.h"

namespace loom::sim {

namespace {

// Segment name of a tensor-parallel collective ("all_gather tp"), built once per collective.
const char* tp_name(Collective c) {
  static const auto names = [] {
    std::array<std::string, std::size(kCollectiveNames)> n;
    for (const auto& [value, name] : kCollectiveNames)
      n[static_cast<std::size_t>(value)] = trace_names::collective(value, "tp");
    return n;
  }();
  return names[static_cast<std::size_t>(c)].c_str();
}

}  // namespace

void PassCost::append(const PassCost& other, int times) {
  seconds += other.seconds * times;
  tp_comm_exposed_s += other.tp_comm_exposed_s * times;
  cp_comm_exposed_s += other.cp_comm_exposed_s * times;
  ep_comm_exposed_s += other.ep_comm_exposed_s * times;
  dp_comm_exposed_s += other.dp_comm_exposed_s * times;
  sm_shared_s += other.sm_shared_s * times;
  flops += other.flops * times;
  compute_sq_s2 += other.compute_sq_s2 * times;
  kernels += other.kernels * times;
  host_bound_s += other.host_bound_s * times;
  if (record)
    for (int i = 0; i < times; ++i) segments.insert(segments.end(), other.segments.begin(), other.segments.end());
}

void PassCost::floor_at_host_dispatch(double host_op_s) {
  const double wait = kernels * host_op_s - seconds;
  if (wait <= 0) return;
  seconds += wait;
  host_bound_s += wait;
  if (record) segments.push_back({"host dispatch", wait, false, Lane::kCompute, false});
}

CostModel::CostModel(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                     const ClusterSpec& cluster, const CollectiveModel& collectives)
    : model_(model), training_(training), config_(config), cluster_(&cluster), collectives_(collectives) {
  seq_ = training.seq_len > 0 ? training.seq_len : model.seq_len;
  // Context parallelism splits every sequence over cp ranks: each works on b·s/cp tokens, and only
  // attention sees the rest (Megatron-LM docs/user-guide/features/context_parallel.md).
  tokens_ = seq_ * config.micro_batch / config.cp;
  layer_params_ = layer_params_per_rank(model, config.tp, config.ep, config.etp);
  // Every stage's parameters and the norm's all-reduce, once: the step and its bound ask for them per
  // stage and per pass.
  stage_params_.reserve(std::max(config.pp, 0));
  for (int stage = 0; stage < config.pp; ++stage) stage_params_.push_back(loom::stage_params(model, config, stage));
  separate_bias_ = std::any_of(cluster.memory_op_table.begin(), cluster.memory_op_table.end(),
                               [](const MemoryOpTime& p) { return p.op == "bias"; });
  vocab_ = padded_vocab(model.vocab, config.tp);
  table_ranks_ = table_concurrency(cluster, config.world_size());
  fp8_ = training.precision == Precision::kFp8 && cluster.device.peak_fp8_flops > 0;
  grad_norm_reduce_s_ = norm_reduce_s();
}

int table_concurrency(const ClusterSpec& cluster, int world_size) {
  // Ranks of one node running kernels at once in this plan; of the timings the cost file has,
  // the largest concurrency not above it (else the smallest there is).
  const int sharing = std::min(world_size, std::max(1, cluster.gpus_per_node));
  int below = 0, smallest = 0;
  auto consider = [&](int ranks) {
    if (ranks <= 0) return;
    if (ranks <= sharing) below = std::max(below, ranks);
    smallest = smallest == 0 ? ranks : std::min(smallest, ranks);
  };
  for (const auto& p : cluster.gemm_table) consider(p.ranks);
  for (const auto& p : cluster.memory_op_table) consider(p.ranks);
  return below > 0 ? below : smallest;
}

double CostModel::gemm_s(double m, double n, double k, double bytes) const {
  const ComputeEfficiency& e = cluster_->compute;
  const double flops = 2.0 * m * n * k;
  if (!cluster_->gemm_table.empty()) {
    // Measured table: achieved FLOP/s of the nearest shapes in log(m, n, k), inverse-distance
    // weighted; an exact shape returns its measured time.
    double weight_sum = 0, rate_sum = 0;
    for (const auto& p : cluster_->gemm_table) {
      if (!applies(p.ranks)) continue;
      const double d = std::hypot(std::log(m / p.m), std::log(n / p.n), std::log(k / p.k));
      const double rate = 2.0 * p.m * p.n * p.k / p.seconds;
      if (d < 1e-9) return p.seconds * flops / (2.0 * p.m * p.n * p.k);
      const double w = 1.0 / (d * d * d * d);
      weight_sum += w;
      rate_sum += w * rate;
    }
    if (weight_sum > 0) return flops / (rate_sum / weight_sum);
  }
  // Roofline: a GEMM also reads both operands and writes its result once. With a short inner
  // dimension (attention's QK^T over a head of 64-160) that traffic, not the arithmetic, sets the
  // time: a batched 2048 × 2048 × 96 product writes 21 times the bytes of its inputs.
  if (bytes <= 0) bytes = training_.activation_bytes * (m * k + k * n + m * n);
  return curve_gemm_s(flops, bytes, cluster_->device.peak_flops, e.gemm_max_efficiency, e.gemm_half_saturation_flops);
}

double CostModel::curve_gemm_s(double flops, double bytes, double peak, double ceiling, double half) const {
  const ComputeEfficiency& e = cluster_->compute;
  const double efficiency = ceiling * flops / (flops + half);
  const double memory = bytes / (cluster_->device.memory_bandwidth_bytes_per_s * e.memory_bound_efficiency);
  return e.kernel_launch_s + std::max(flops / (peak * efficiency), memory);
}

double CostModel::linear_gemm_s(double m, double n, double k) const {
  if (!fp8_) return gemm_s(m, n, k);
  const ComputeEfficiency& e = cluster_->compute;
  const DeviceSpec& d = cluster_->device;
  const double tensorwise = e.gemm_fp8_max_efficiency > 0 ? e.gemm_fp8_max_efficiency : e.gemm_max_efficiency;
  // Rowwise scaling runs PyTorch's rowwise-scaled kernel, measured on its own (the spec refuses the
  // recipe on a cost file without the figure).
  const double fp8_ceiling = training_.fp8_recipe == Fp8Recipe::kRowwise && e.gemm_fp8_rowwise_max_efficiency > 0
                                 ? e.gemm_fp8_rowwise_max_efficiency
                                 : tensorwise;
  if (!cluster_->gemm_table.empty()) {
    // A measured (bf16) table: the same shape at the FP8 unit's rate over the bf16 one.
    const double speedup = d.peak_fp8_flops * fp8_ceiling / (d.peak_flops * e.gemm_max_efficiency);
    return gemm_s(m, n, k) / speedup;
  }
  // One-byte operands, the output in the activations' precision.
  const double bytes = m * k + k * n + training_.activation_bytes * m * n;
  return curve_gemm_s(2.0 * m * n * k, bytes, d.peak_fp8_flops, fp8_ceiling,
                      e.gemm_half_saturation_flops * d.peak_fp8_flops / d.peak_flops);
}

double CostModel::fp8_cast_s(const char* op, double elements) const {
  if (!fp8_) return 0.0;
  const double ab = training_.activation_bytes;
  // Rowwise: the tensor feeds two GEMMs that reduce over different dimensions (the forward's and, for
  // the transposed product, the input gradient's or weight gradient's), and a scale per row of one is a
  // scale per column of the other: two casts, each reading the tensor for its row amaxes, again to
  // cast, and writing one FP8 copy (the second laid out for its GEMM).
  if (training_.fp8_recipe == Fp8Recipe::kRowwise) return memory_s(op, elements * 2.0 * (2.0 * ab + 1.0));
  // Read the bf16 tensor, write its FP8 copy (and the transposed one on Hopper); current scaling
  // reads it once more for its amax before the cast (TransformerEngine's Float8CurrentScaling).
  // Delayed scaling takes the scale from the amax history and records the new amax in the same pass.
  double bytes = ab + 1.0 + (cluster_->device.fp8_gemm_tn_only ? 1.0 : 0.0);
  if (training_.fp8_recipe == Fp8Recipe::kTensorwise) bytes += ab;
  return memory_s(op, elements * bytes);
}

double CostModel::fp8_weight_cast_s(int stage) const {
  if (!fp8_) return 0.0;
  // The layers' weights (norm and bias parameters are a negligible share), cast from the bf16 model
  // copy; under ZeRO-3 each rank casts its shard before the gather (FSDP2's float8 all-gather).
  double weights = layer_params_ * stage_layer_count(model_.layers, config_, stage);
  if (config_.zero >= 3) weights /= config_.zero_shards();
  return fp8_cast_s("fp8_weight_cast", weights);
}

double CostModel::memory_s(const char* op, double bytes) const {
  // Measured points of this op (a final norm is a norm): linear between the two that bracket
  // `bytes`, the nearest one's rate outside them.
  const std::string_view name = std::string_view(op).starts_with("final_") ? std::string_view(op).substr(6) : op;
  const MemoryOpTime* below = nullptr;
  const MemoryOpTime* above = nullptr;
  for (const MemoryOpTime& p : cluster_->memory_op_table) {
    if (p.op != name || !applies(p.ranks)) continue;
    if (p.bytes <= bytes && (!below || p.bytes > below->bytes)) below = &p;
    if (p.bytes >= bytes && (!above || p.bytes < above->bytes)) above = &p;
  }
  if (below && above && above->bytes > below->bytes)
    return below->seconds + (above->seconds - below->seconds) * (bytes - below->bytes) / (above->bytes - below->bytes);
  if (below || above) {
    const MemoryOpTime* p = below ? below : above;
    return p->seconds * bytes / p->bytes;
  }
  const ComputeEfficiency& e = cluster_->compute;
  const auto own = e.memory_op_efficiency.find(name);
  const double efficiency = own != e.memory_op_efficiency.end() ? own->second : e.memory_bound_efficiency;
  return e.kernel_launch_s + bytes / (cluster_->device.memory_bandwidth_bytes_per_s * efficiency);
}

void CostModel::add_loss(PassCost& forward, PassCost& backward, double logits) const {
  const double ab = training_.activation_bytes;
  const bool tp = config_.tp > 1;
  // Vocabulary-parallel cross-entropy: each rank's max, sum of exponentials and target logit of each token
  // (b·s floats each) are all-reduced over TP, `floats` per token in each of these collectives.
  auto all_reduces = [&](std::initializer_list<double> floats) {
    if (tp)
      for (double f : floats)
        forward.add_comm(tp_name(Collective::kAllReduce),
                         tp_comm_s(Collective::kAllReduce, static_cast<double>(tokens_) * 4.0 * f));
  };
  switch (training_.loss_kernel) {
    case LossKernel::kExecutor:
      // exec/model/gpt_stage.cc head_forward: the fp32 logits read once for the max and the sum of
      // exponentials (Backend::row_max_sum_exp) where this rank holds whole rows, twice under TP (row_max,
      // the max's all-reduce, row_sum_exp); the sum and the target logit reduced together; then, still in
      // the forward, the gradient: the fp32 logits read, the gradient written in the activation dtype
      // (Backend::cross_entropy_grad_into, or in place in fp32).
      add_memory(forward, "cross_entropy", logits * (tp ? 8.0 : 4.0));
      all_reduces({1.0, 2.0});
      add_memory(forward, "cross_entropy_bwd", logits * (4.0 + ab));
      return;
    case LossKernel::kMegatron:
      // The logits' upcast (ab read, 4 written), the max (4), the max subtracted in place (8), exp in place
      // (8), the sum (4) and the division into the softmax kept for the backward, in place (8), each its own
      // kernel; the max, the target logit and the sum all-reduced one by one. Backward: the softmax times
      // the loss's gradient in place (8), cast back to the activation dtype (4 + ab). The code is the
      // preset's source (core/framework.cc).
      add_memory(forward, "cross_entropy", logits * (ab + 36.0));
      all_reduces({1.0, 1.0, 1.0});
      add_memory(backward, "cross_entropy_bwd", logits * (12.0 + ab));
      return;
    case LossKernel::kNominal:
      // Not derived from a stack's kernels (core/names.h LossKernel).
      add_memory(forward, "cross_entropy", logits * (ab + 8.0));
      all_reduces({1.0, 1.0, 1.0});
      add_memory(backward, "cross_entropy_bwd", logits * (4.0 + ab));
      return;
  }
}

void CostModel::add_dense_embedding_grad(PassCost& backward) const {
  // TrainingSpec::embedding_grad_dense: PyTorch's embedding backward zeroes the gradient of the rank's whole
  // vocabulary share (and of a learned position table, which TP does not split) before adding each token's
  // row into it; then the step's gradient kept across micro-batches (Megatron's main_grad, autograd's .grad)
  // adds it in: both read, the kept one written. Where ZeRO-3 reduce-scatters every backward the gradient
  // goes to the reduce-scatter instead (its copy in, where the stack has one, is zero3_collective_copies').
  double rows = static_cast<double>(vocab_) / config_.tp;
  if (model_.position == PositionEmbedding::kLearned) rows += std::max<double>(model_.seq_len, seq_);
  const double elements = rows * model_.hidden;
  const double ab = training_.activation_bytes;
  add_memory(backward, "embedding_grad_zero", elements * ab);
  if (!zero3_gathers_every_pass(config_, training_))
    add_memory(backward, "embedding_grad_accumulate", elements * (ab + 2.0 * training_.grad_bytes));
}

double CostModel::bias_s(bool present, double rows, double cols) const {
  return present && separate_bias_ ? memory_s("bias", 2.0 * training_.activation_bytes * rows * cols) : 0.0;
}

double CostModel::wgrad_s(double out, double in, double tokens, bool linear) const {
  // Megatron-LM accumulates weight gradients across micro-batches in a main-grad buffer (fp32
  // when grad_bytes = 4): either the GEMM epilogue reads and writes it (gradient-accumulation
  // fusion, beta = 1) or a separate add does. The epilogue runs after each tile's main loop, not
  // under it, so its traffic adds to the GEMM's time. It matters when tokens per micro-batch are
  // few against the weight's size (e.g. 2048 tokens against a 12288 × 6144 slice: +26 %).
  // A measured GEMM table already holds it: `loom profile` times weight-gradient shapes with
  // beta = 1, as the executor runs them.
  const double gemm = linear ? linear_gemm_s(out, in, tokens) : gemm_s(out, in, tokens);
  if (!cluster_->gemm_table.empty()) return gemm;
  const ComputeEfficiency& e = cluster_->compute;
  const double accumulate_bytes = 2.0 * training_.grad_bytes * out * in;
  return gemm + accumulate_bytes / (cluster_->device.memory_bandwidth_bytes_per_s * e.memory_bound_efficiency);
}

GroupPlacement CostModel::tp_group() const { return {config_.tp, std::min(config_.tp, cluster_->gpus_per_node)}; }

GroupPlacement CostModel::dp_group() const {
  // The dp·cp ranks of a gradient group are tp apart (CP ranks, then DP ranks, in rank order): a
  // node of g GPUs holds max(1, g / tp) of them.
  const int per_node = std::max(1, cluster_->gpus_per_node / config_.tp);
  return {config_.grad_ranks(), std::min(config_.grad_ranks(), per_node)};
}

GroupPlacement CostModel::cp_group() const {
  const int per_node = std::max(1, cluster_->gpus_per_node / config_.tp);
  return {config_.cp, std::min(config_.cp, per_node)};
}

// The expert grid's groups (core/parallel_config.h expert_coords): EP ranks are etp apart, the ranks
// holding the same experts etp·ep apart.
GroupPlacement CostModel::ep_group() const {
  const int per_node = std::max(1, cluster_->gpus_per_node / config_.expert_tp());
  return {config_.ep, std::min(config_.ep, per_node)};
}

GroupPlacement CostModel::expert_dp_group() const {
  const int per_node = std::max(1, cluster_->gpus_per_node / (config_.expert_tp() * config_.ep));
  return {config_.expert_grad_ranks(), std::min(config_.expert_grad_ranks(), per_node)};
}

double CostModel::grad_collective_s(Collective c, double bytes, double expert_bytes) const {
  double s = dp_collective_s(c, bytes);
  if (expert_bytes > 0 && config_.expert_grad_ranks() > 1) s += collectives_.time_s(c, expert_bytes, expert_dp_group());
  return s;
}

LinkLevel CostModel::cp_ring_level() const {
  // A ring over nodes runs each step at the pace of its slowest hop, an inter-node one.
  return static_cast<long long>(config_.tp) * config_.cp <= cluster_->gpus_per_node ? LinkLevel::kIntraNode
                                                                                    : LinkLevel::kInterNode;
}

double CostModel::cp_kv_bytes() const {
  // K and V of the local tokens packed in one buffer (TransformerEngine's p2p_comm_buffers):
  // 2·b·(s/cp)·kv_heads·head_dim / tp elements.
  return 2.0 * tokens_ * static_cast<double>(model_.kv_dim()) / config_.tp * training_.activation_bytes;
}

GroupPlacement CostModel::shard_group() const {
  // A shard group is zero_shards consecutive ranks of the gradient group (each shard group of g
  // dp ranks holds their g·cp CP ranks), tp apart, as the gradient group itself.
  const int per_node = std::max(1, cluster_->gpus_per_node / config_.tp);
  return {config_.zero_shards(), std::min(config_.zero_shards(), per_node)};
}

GroupPlacement CostModel::replica_group() const {
  // The replicas of one shard are tp·zero_shards ranks apart (zero_shards counts the CP ranks).
  const int per_node = std::max(1, cluster_->gpus_per_node / (config_.tp * config_.zero_shards()));
  return {config_.shard_replicas(), std::min(config_.shard_replicas(), per_node)};
}

bool CostModel::stages_share_node(int a, int b) const {
  const long long stride = static_cast<long long>(config_.tp) * config_.cp * config_.dp;
  return (a * stride) / cluster_->gpus_per_node == (b * stride) / cluster_->gpus_per_node;
}

double CostModel::pipe_send_s(int from_stage, int to_stage) const {
  // Megatron sends the b·s·h activation (b·s/cp·h under CP); with sequence parallelism (or its
  // scatter-gather optimisation) each TP rank sends only its 1/t slice.
  const double bytes = tokens_ * model_.hidden * training_.activation_bytes / config_.tp;
  return collectives_.send_recv_s(
      bytes, stages_share_node(from_stage, to_stage) ? LinkLevel::kIntraNode : LinkLevel::kInterNode);
}

double CostModel::optimizer_bytes_per_param(const TrainingSpec& t) {
  // The step, pass by pass over memory (Megatron-LM's mixed-precision optimizer; an fp32 one is
  // the same without the copy): Megatron's DDP scales the gradient buffer by 1/dp before reducing
  // it (read and write, whatever dp); the gradient norm for clipping reads the gradients; fused
  // Adam reads the gradients and reads and writes its states (fp32 master weights and both
  // moments, or the moments and the fp32 parameters themselves); mixed precision copies the
  // master weights (read fp32) into the model's parameters; the gradient buffer is zeroed for the
  // next step.
  constexpr double kMasterBytes = 4.0;
  const bool mixed = t.param_bytes < kMasterBytes;
  const double states = 2.0 * t.optimizer_bytes + (mixed ? kMasterBytes + t.param_bytes : 2.0 * t.param_bytes);
  return states + 5.0 * t.grad_bytes;
}

double CostModel::optimizer_s(double params) const {
  return memory_s("optimizer", params * optimizer_bytes_per_param(training_));
}

double CostModel::norm_reduce_s() const {
  const int world = config_.world_size();
  const int model_parallel = config_.tp * config_.cp * config_.pp;
  const int gpn = cluster_->gpus_per_node;
  GroupPlacement group{world, std::min(world, gpn)};
  if (config_.zero == 0) {
    // tp·cp consecutive ranks, then stages tp·cp·dp apart: a node holds its tp·cp and the stages that fit.
    const int stride = config_.tp * config_.cp * config_.dp;
    const int stages_per_node = std::max(1, std::min(config_.pp, gpn / stride));
    group = {model_parallel, std::min({model_parallel, gpn, config_.tp * config_.cp * stages_per_node})};
  }
  return group.size > 1 ? collectives_.time_s(Collective::kAllReduce, 4.0, group) : 0.0;
}

CostModel::Zero3Modules CostModel::zero3_modules() const {
  const LayerDims d = dims();
  Zero3Modules m{{d.hidden * (d.q_width + 2.0 * d.kv_width) / d.tp, d.q_width * d.hidden / d.tp,
                  d.hidden * d.mlp_up_width / d.tp, d.ffn * d.hidden / d.tp},
                 0.0};
  // The rest (norms, biases) is partitioned parameter by parameter: one below DeepSpeed's
  // stage3_param_persistence_threshold (1e5 elements, runtime/zero/config.py) is never partitioned.
  // Where the largest is above it, the rest is gathered with the QKV (an approximation: a bias goes
  // with its own module, coalesced, and a norm that large would be a module of its own).
  constexpr double kPersistenceThreshold = 1e5;
  double largest = d.hidden;  // a norm's weight
  if (model_.linear_bias || model_.qkv_bias) largest = std::max(largest, (d.q_width + 2.0 * d.kv_width) / d.tp);
  if (model_.linear_bias) largest = std::max(largest, d.mlp_up_width / d.tp);
  const double rest =
      layer_params_per_tp_rank(model_, config_.tp) - m.linear[0] - m.linear[1] - m.linear[2] - m.linear[3];
  if (largest > kPersistenceThreshold && rest > 0) m.rest = rest;
  return m;
}

double CostModel::zero3_unit_s(Collective c, double params) const {
  if (params <= 0) return 0.0;
  const bool gather = c == Collective::kAllGather;
  const double element_bytes = gather ? training_.param_bytes : training_.grad_bytes;
  double seconds = shard_collective_s(c, params * element_bytes);
  if (training_.zero3_collective_copies) {
    // The copy on the collective's own stream before it (TrainingSpec::zero3_collective_copies): a gather's
    // input is this rank's shard, read in the shard's dtype and written in the gathered one; a
    // reduce-scatter's the unit's whole gradient, read in the compute dtype and written in the reduce dtype.
    const double shard_bytes = training_.zero3_fp32_shards ? 4.0 : training_.param_bytes;
    seconds += gather ? memory_s("zero3_copy_in", params / config_.zero_shards() * (shard_bytes + element_bytes))
                      : memory_s("zero3_copy_in", params * (training_.param_bytes + element_bytes));
  }
  return seconds;
}

double CostModel::zero3_copy_out_s(int stage, int chunk) const {
  if (!training_.zero3_collective_copies || !zero3_gathers_every_pass(config_, training_)) return 0.0;
  // The gathered buffer read and the unit's parameters written, on the compute stream.
  return memory_s("zero3_copy_out", 2.0 * training_.param_bytes * zero3_chunk_params(stage, chunk));
}

double CostModel::zero3_chunk_params(int stage, int chunk) const {
  const StageParams& p = stage_params_[stage];
  double params = layer_params_per_tp_rank(model_, config_.tp) * chunk_layers(model_.layers, config_, stage, chunk);
  if (chunk == 0) params += p.embedding;
  if (chunk == config_.vpp - 1) params += p.head + p.mtp;
  return params;
}

double CostModel::zero3_collective_s(Collective c, int stage, int chunk) const {
  auto one = [&](double params) { return zero3_unit_s(c, params); };
  // A layer's linear modules as DeepSpeed hooks them; MoE and latent-attention layers: per layer.
  double layer_s = one(layer_params_per_tp_rank(model_, config_.tp));
  if (training_.zero3_unit == Zero3Unit::kModule && !model_.moe.active() && !model_.mla.active()) {
    const Zero3Modules m = zero3_modules();
    layer_s = one(m.linear[0] + m.rest) + one(m.linear[1]) + one(m.linear[2]) + one(m.linear[3]);
  }
  const StageParams& p = stage_params_[stage];
  double seconds = layer_s * chunk_layers(model_.layers, config_, stage, chunk);
  if (chunk == 0) seconds += one(p.embedding);
  if (chunk == config_.vpp - 1) seconds += one(p.head) + (p.mtp > 0 ? one(p.mtp) : 0.0);
  return seconds;
}

std::vector<Zero3Step> CostModel::zero3_layer_steps(bool backward, const PassCost& layer) const {
  if (training_.zero3_unit != Zero3Unit::kModule || model_.moe.active() || model_.mla.active()) {
    // One unit a layer: its pass and its gather.
    const double params = layer_params_per_tp_rank(model_, config_.tp);
    return {{layer.seconds, zero3_unit_s(Collective::kAllGather, params), params}};
  }
  // The modules' hooks split the layer's pass: its kernels are needed, recorded where the planner
  // keeps only totals.
  PassCost recorded;
  if (!layer.record) {
    CostModel recording = *this;
    recording.record_segments_ = true;
    recorded = recording.new_pass();
    if (backward)
      recording.layer_backward(recorded, recorded);
    else
      recorded = recording.layer_forward(true);
  }
  const PassCost& pass = layer.record ? layer : recorded;
  // Where each module's hook fires: its forward GEMM (in the backward, its recomputed forward where
  // full recompute runs one, else its input-gradient GEMM, last module first).
  const bool recomputed = backward && config_.recompute == Recompute::kFull;
  static constexpr const char* kForward[4] = {"qkv", "attn_out", "mlp_up", "mlp_down"};
  static constexpr const char* kRecompute[4] = {"recompute qkv", "recompute attn_out", "recompute mlp_up",
                                                "recompute mlp_down"};
  static constexpr const char* kBackward[4] = {"mlp_down_bwd", "mlp_up_bwd", "attn_out_bwd", "qkv_bwd"};
  const char* const* names = !backward ? kForward : recomputed ? kRecompute : kBackward;
  const int module_of[4] = {0, 1, 2, 3};
  const int reversed[4] = {3, 2, 1, 0};
  const int* order = backward && !recomputed ? reversed : module_of;

  const Zero3Modules m = zero3_modules();
  std::vector<Zero3Step> steps(4, Zero3Step{0, 0, 0});
  for (int u = 0; u < 4; ++u) {
    const double elements = m.linear[order[u]] + (order[u] == 0 ? m.rest : 0.0);
    steps[u].elements = elements;
    steps[u].gather_s = zero3_unit_s(Collective::kAllGather, elements);
  }
  // Each segment's time goes to the unit whose hook last fired; what runs before the first hook is the
  // tail of the layer before (the layers repeat), so it goes to the last unit.
  int unit = 3;
  int next = 0;
  for (const Segment& seg : pass.segments) {
    if (seg.beside) continue;
    if (next < 4 && seg.name == names[next]) unit = next++;
    steps[unit].compute_s += seg.seconds;
  }
  if (next < 4) return {};
  return steps;
}

double CostModel::zero3_prefetch_wait_s(int stage, int chunk, bool backward) const {
  if (!zero3_gathers_every_pass(config_, training_)) return 0.0;
  PassCost layer = new_pass();
  if (backward)
    layer_backward(layer, layer);
  else
    layer = layer_forward(true);
  return zero3_prefetch_wait_s(stage, chunk, backward, layer);
}

double CostModel::zero3_prefetch_wait_s(int stage, int chunk, bool backward, const PassCost& layer) const {
  if (!zero3_gathers_every_pass(config_, training_)) return 0.0;
  return sim::zero3_prefetch_wait_s(zero3_layer_steps(backward, layer),
                                    chunk_layers(model_.layers, config_, stage, chunk),
                                    training_.zero3_prefetch_elements);
}

double CostModel::stage_params(int stage) const { return stage_params_[stage].total(); }

double CostModel::chunk_expert_params(int stage, int chunk) const {
  const bool last = stage == config_.pp - 1 && chunk == config_.vpp - 1;
  return routed_expert_params_per_rank(model_, config_, chunk_layer_mix(model_, config_, stage, chunk)) +
         (last ? mtp_expert_params_per_rank(model_, config_) : 0.0);
}

double CostModel::stage_expert_params(int stage) const { return stage_params_[stage].experts; }

double CostModel::chunk_params(int stage, int chunk) const {
  const StageParams& p = stage_params_[stage];
  double params = layers_params_per_rank(model_, config_, chunk_layer_mix(model_, config_, stage, chunk));
  if (chunk == 0) params += p.embedding;
  if (chunk == config_.vpp - 1) params += p.head + p.mtp;
  return params;
}

double CostModel::flash_efficiency(double forward_flops) const {
  // One efficiency for the forward and the backward (2.5 times its FLOPs), set by their sum.
  // The kernel's own curve: FlashAttention-2's where the cost file has one, else its fused attention's.
  const ComputeEfficiency& e = cluster_->compute;
  const bool fa2 = training_.flash_kernel == FlashKernel::kFa2 && e.fa2_attention_efficiency > 0;
  const double ceiling = fa2 ? e.fa2_attention_efficiency : e.flash_attention_efficiency;
  const double half = fa2 ? e.fa2_attention_half_saturation_flops : e.flash_attention_half_saturation_flops;
  if (half <= 0) return ceiling;
  const double w = 3.5 * forward_flops;
  return ceiling * w / (w + half);
}

double CostModel::flash_bytes() const {
  // A fused attention reads Q, K and V and writes the context; the scores never reach memory.
  return 4.0 * training_.activation_bytes * tokens_ * static_cast<double>(model_.q_dim()) / config_.tp;
}

double CostModel::unfused_matmul_bytes() const {
  // QK^T or AV over every local head: Q, K, V and the context are tokens × heads·d/t in all; each
  // product reads or writes the b·(heads/t)·s² scores once.
  const double ab = training_.activation_bytes;
  const double scores = model_.heads / config_.tp * config_.micro_batch * seq_ * seq_;
  return 2.0 * ab * tokens_ * static_cast<double>(model_.q_dim()) / config_.tp + ab * scores;
}

PassCost CostModel::attention_core_forward() const {
  if (config_.cp > 1) return cp_attention(false);
  PassCost p = new_pass();
  const double t = config_.tp;
  const double q = static_cast<double>(model_.q_dim());
  const double matmul_flops = 2.0 * tokens_ * seq_ * q / t;  // one of QK^T, AV
  if (training_.attention == AttentionKernel::kFlash) {
    // FlashAttention skips the masked half of a causal square, and under a sliding window the tiles
    // before it (ModelSpec::causal_square_fraction, the mean over the layers).
    const double share = model_.causal_square_fraction(static_cast<int>(seq_));
    const double flops = 2.0 * matmul_flops * share;
    const double eff = flash_efficiency(flops);
    const double s = eff > 0 ? flops / (cluster_->device.peak_flops * eff) + cluster_->compute.kernel_launch_s
                             : gemm_s(tokens_, seq_ * share, 2.0 * q / t, flash_bytes());
    p.add("flash_attention", s, flops);
    return p;
  }
  const double scores = model_.heads / t * config_.micro_batch * seq_ * seq_;
  const double ab = training_.activation_bytes;
  p.add("qk", gemm_s(tokens_, seq_, q / t, unfused_matmul_bytes()), matmul_flops);
  add_memory(p, "softmax", 2.0 * ab * scores);
  if (model_.dropout) add_memory(p, "attn_dropout", (2.0 * ab + 1.0) * scores);
  p.add("av", gemm_s(tokens_, q / t, seq_, unfused_matmul_bytes()), matmul_flops);
  return p;
}

PassCost CostModel::attention_core_backward() const {
  if (config_.cp > 1) return cp_attention(true);
  PassCost p = new_pass();
  const double t = config_.tp;
  const double q = static_cast<double>(model_.q_dim());
  const double matmul_flops = 2.0 * tokens_ * seq_ * q / t;
  if (training_.attention == AttentionKernel::kFlash) {
    // Backward: five s×s×d matmuls against the forward's two (recomputing the scores).
    const double share = model_.causal_square_fraction(static_cast<int>(seq_));
    const double flops = 2.5 * 2.0 * matmul_flops * share;
    const double eff = flash_efficiency(flops / 2.5);
    const double s = eff > 0 ? flops / (cluster_->device.peak_flops * eff) + cluster_->compute.kernel_launch_s
                             : 2.5 * gemm_s(tokens_, seq_ * share, 2.0 * q / t, flash_bytes());
    p.add("flash_attention_bwd", s, flops);
    return p;
  }
  const double scores = model_.heads / t * config_.micro_batch * seq_ * seq_;
  const double ab = training_.activation_bytes;
  // Each backward is two products of the forward's size.
  const double bytes = unfused_matmul_bytes();
  p.add("av_bwd", 2.0 * gemm_s(tokens_, q / t, seq_, bytes), 2.0 * matmul_flops);
  if (model_.dropout && training_.softmax_bwd_applies_dropout) {
    add_memory(p, "softmax_bwd", (3.0 * ab + 1.0) * scores);  // the mask read as dP is
  } else {
    if (model_.dropout) add_memory(p, "attn_dropout_bwd", (2.0 * ab + 1.0) * scores);
    add_memory(p, "softmax_bwd", 3.0 * ab * scores);
  }
  p.add("qk_bwd", 2.0 * gemm_s(tokens_, seq_, q / t, bytes), 2.0 * matmul_flops);
  return p;
}

double CostModel::flash_kernel_s(double forward_flops, double rows, double cols, double times) const {
  const double eff = flash_efficiency(forward_flops);
  if (eff > 0) return times * forward_flops / (cluster_->device.peak_flops * eff) + cluster_->compute.kernel_launch_s;
  // No flash curve in the cost file: the GEMM of the kernel's shape, rows × cols over the inner
  // width that gives its FLOPs (2·q/t for the whole heads of a TP rank, less under Ulysses).
  return times * gemm_s(rows, cols, forward_flops / (2.0 * rows * cols), flash_bytes());
}

PassCost CostModel::cp_attention(bool backward) const {
  PassCost p = new_pass();
  if (training_.cp_attention == CpAttention::kPyTorch) {
    cp_pytorch_attention(p, backward);
    return p;
  }
  switch (config_.cp_comm) {
    case CpComm::kP2P: cp_ring_attention(p, backward); break;
    case CpComm::kA2A: cp_a2a_attention(p, backward); break;
    case CpComm::kAllGather: cp_all_gather_attention(p, backward); break;
  }
  return p;
}

// TransformerEngine's AttnFuncWithCPAndKVP2P (transformer_engine/pytorch/attention/
// dot_product_attention/context_parallel.py, as summarised in shared/reference/modern-parallelism.md
// §1): cp steps per layer. Step 0 is the causal "diagonal" tile of the rank's two chunks against
// themselves; every later step is half of a full (s/cp)² tile (all of Q against the first half of
// the received KV, or the second half of Q against all of it), so every step does the same work on
// every rank: 2·b·(s/cp)²·q/t FLOPs forward, cp of them making the 1/cp share of causal attention.
// Forward: at step i (i < cp−1) a rank posts isend/irecv of the KV for step i + 1, then runs tile
// i; step i + 1 first waits for that KV. So cp − 1 transfers of K and V of the rank's s/cp tokens,
// each hidden behind one tile, and only its excess over the tile shows. Backward: at every step
// the KV for the next step travels with the dKV accumulated so far in one [2, …] buffer, except
// that step 0 sends only KV and the last step only dKV (which the function waits for before it
// returns): cp transfers beside cp backward tiles (2.5× the forward's FLOPs, as without CP). The
// softmax-statistics correction merging each step's partial output is memory-bound work on
// b·s/cp rows, small against a tile, and not charged.
CostModel::RingTile CostModel::ring_tile(bool backward) const {
  const double tile_tokens = seq_ / config_.cp;  // keys of one step: the rank's s/cp
  // Half of a full tile's QK^T and AV: 0.5 · 2 · 2·(b·s/cp)·(s/cp)·q/t.
  const double flops = 2.0 * tokens_ * tile_tokens * static_cast<double>(model_.q_dim()) / config_.tp;
  const double times = backward ? 2.5 : 1.0;
  return {flash_kernel_s(flops, tokens_, 0.5 * tile_tokens, times), times * flops};
}

void CostModel::cp_ring_attention(PassCost& p, bool backward) const {
  const int cp = config_.cp;
  const RingTile tile = ring_tile(backward);
  const double kv_s = collectives_.send_recv_s(cp_kv_bytes(), cp_ring_level());
  const double kv_dkv_s = collectives_.send_recv_s(2.0 * cp_kv_bytes(), cp_ring_level());
  for (int step = 0; step < cp; ++step) {
    // What the transfer posted at this step carries, and its time.
    const char* payload = nullptr;
    double transfer_s = 0;
    if (!backward) {
      if (step + 1 < cp) {
        payload = "kv";
        transfer_s = kv_s;
      }
    } else if (step == 0 || step + 1 == cp) {
      payload = step == 0 ? "kv" : "dkv";
      transfer_s = kv_s;
    } else {
      payload = "kv+dkv";
      transfer_s = kv_dkv_s;
    }
    const double exposed = ring_exposed_s(transfer_s, tile.seconds);
    if (!p.record) {  // totals only: no names to build
      p.add("", tile.seconds, tile.flops);
      if (exposed > 0) p.add_cp_comm(std::string(), exposed);
      continue;
    }
    if (payload != nullptr) p.add_cp_beside(trace_names::cp_ring_send(step, cp, payload), transfer_s);
    p.add(trace_names::cp_ring_tile(backward, step, cp), tile.seconds, tile.flops);
    if (exposed > 0) p.add_cp_comm(trace_names::cp_ring_wait(step, cp), exposed);
  }
}

// DeepSpeed-Ulysses (TransformerEngine AttnFuncWithCPAndQKVOA2A): all-to-alls turn Q, K and V from
// sequence-sharded to head-sharded before attention and the output back after it; the backward
// does the same for dO and dQ, dK, dV. None overlaps compute. Each all-to-all moves (cp−1)/cp of a
// rank's local tensor, the all-gather's (n−1)/n bus factor on the same per-rank bytes
// (nccl-tests PERFORMANCE.md), so it is costed as one. Attention then runs on all s tokens of
// heads/(tp·cp) heads: one causal kernel of 1/cp of the FLOPs.
void CostModel::cp_a2a_attention(PassCost& p, bool backward) const {
  const double q = static_cast<double>(model_.q_dim());
  const double kv = static_cast<double>(model_.kv_dim());
  const double ab = training_.activation_bytes;
  const GroupPlacement group = cp_group();
  auto a2a = [&](double width) {
    return collectives_.time_s(Collective::kAllGather, ab * tokens_ * width / config_.tp, group);
  };
  static const std::string name = trace_names::collective("all_to_all", "cp");
  const double before = a2a(q) + 2.0 * a2a(kv), after = a2a(q);
  const double flops = 2.0 * (2.0 * tokens_ * seq_ * q / config_.tp) * 0.5;  // heads/cp over all s: 1/cp
  const double times = backward ? 2.5 : 1.0;
  const double kernel = flash_kernel_s(flops, seq_ * config_.micro_batch, 0.5 * seq_, times);
  // Forward: Q, K, V in, attention, O out. Backward: dO in, attention backward, dQ, dK, dV out.
  p.add_cp_comm(name.c_str(), backward ? after : before);
  p.add(backward ? "flash_attention_bwd" : "flash_attention", kernel, times * flops);
  p.add_cp_comm(name.c_str(), backward ? before : after);
}

// Megatron-core cp_comm_type "all_gather": K and V of all s tokens gathered before attention, not
// overlapped; the backward reduce-scatters dK, dV. The rank's s/cp queries then attend causally to
// the gathered keys: 1/cp of the FLOPs, in one kernel.
void CostModel::cp_all_gather_attention(PassCost& p, bool backward) const {
  const double q = static_cast<double>(model_.q_dim());
  const double gathered = cp_kv_bytes() * config_.cp;  // the whole buffer, as nccl-tests counts size
  static const std::string gather = trace_names::collective(Collective::kAllGather, "cp");
  static const std::string scatter = trace_names::collective(Collective::kReduceScatter, "cp");
  const double flops = 2.0 * (2.0 * tokens_ * seq_ * q / config_.tp) * 0.5;
  const double times = backward ? 2.5 : 1.0;
  // The backward gathers KV again (only the rank's own chunk is kept after the forward).
  p.add_cp_comm(gather.c_str(), collectives_.time_s(Collective::kAllGather, gathered, cp_group()));
  p.add(backward ? "flash_attention_bwd" : "flash_attention", flash_kernel_s(flops, tokens_, 0.5 * seq_, times),
        times * flops);
  if (backward) p.add_cp_comm(scatter.c_str(), collectives_.time_s(Collective::kReduceScatter, gathered, cp_group()));
}

// PyTorch's ring attention (torch/distributed/tensor/experimental/_attention.py, as summarised in
// shared/reference/modern-parallelism.md §1 [PT-CP]), as torchtitan runs it. The tiles are
// TransformerEngine's (the same three causal cases, cp_ring_attention above), but each is its own
// scaled_dot_product_attention call and what joins them is eager PyTorch:
// - K and V: the all_gather exchange (_AllGatherRotater, torchtitan's default rotate method) gathers
//   every rank's K and V once, posted before step 0's tile and waited for before step 1; p2p
//   (_AllToAllRotater) passes them around the ring a step ahead, as TransformerEngine does. The
//   backward exchanges them again the same way (only the rank's own chunk is kept).
// - Forward: _SDPAMerger with convert_to_f32 turns each step's output into fp32 and merges it into the
//   running output, out − sigmoid(lse_step − lse)·(out − out_step): the difference (two fp32 tensors
//   read, one written), the scaled difference (one read, one written) and the subtraction (two read, one
//   written), 36 bytes per value besides the upcast; the result goes back to bf16 at the end. The
//   log-sum-exp updates touch one value per query row and head: launches, no traffic.
// - Backward: the gradients accumulate in fp32 tensors zeroed first. At every step dQ += the step's dQ
//   (an fp32 tensor read and written, the bf16 one read); the rank adds its dK, dV to the fp32 gradient
//   received from its neighbour (half of it after step 0: the tile saw half of the keys), concatenates
//   them (read and written once more) and sends them on, 4 bytes a value. The dK/dV sent after step i
//   travels beside tile i + 1; the last is waited for after the loop, and the three gradients go back to
//   bf16.
// The merges are charged as the last CP rank runs them: its query chunk is the sequence's latest, so
// every later step uses all of its queries (i ≤ rank) and each merge covers its whole output.
void CostModel::cp_pytorch_attention(PassCost& p, bool backward) const {
  const int cp = config_.cp;
  const double ab = training_.activation_bytes;
  const double q = static_cast<double>(model_.q_dim());
  const double out = tokens_ * q / config_.tp;  // output, dQ values
  const double kv = cp_kv_bytes() / ab;         // values of K and V, and of dK and dV
  const RingTile tile = ring_tile(backward);
  const bool gather = config_.cp_comm == CpComm::kAllGather;
  const double gather_s = gather ? collectives_.time_s(Collective::kAllGather, cp_kv_bytes() * cp, cp_group()) : 0.0;
  const double kv_s = gather ? 0.0 : collectives_.send_recv_s(cp_kv_bytes(), cp_ring_level());
  const double dkv_s = backward ? collectives_.send_recv_s(4.0 * kv, cp_ring_level()) : 0.0;
  static const std::string gather_name = trace_names::collective(Collective::kAllGather, "cp");
  if (backward) add_memory(p, "cp_grad_zero", 4.0 * (out + kv));
  for (int step = 0; step < cp; ++step) {
    // What travels beside this step's tile: the gathered K and V (step 0), the next step's K and V
    // (p2p), the gradients the previous step sent (backward).
    double beside = 0;
    if (gather && step == 0) beside += gather_s;
    if (!gather && step + 1 < cp) beside += kv_s;
    if (backward && step > 0) beside += dkv_s;
    const double exposed = ring_exposed_s(beside, tile.seconds);
    if (p.record) {
      if (gather && step == 0) p.add_cp_beside(gather_name, gather_s);
      if (!gather && step + 1 < cp) p.add_cp_beside(trace_names::cp_ring_send(step, cp, "kv"), kv_s);
      if (backward && step > 0) p.add_cp_beside(trace_names::cp_ring_send(step - 1, cp, "dkv"), dkv_s);
      p.add(trace_names::cp_ring_tile(backward, step, cp), tile.seconds, tile.flops);
      if (exposed > 0) p.add_cp_comm(trace_names::cp_ring_wait(step, cp), exposed);
    } else {
      p.add("", tile.seconds, tile.flops);
      if (exposed > 0) p.add_cp_comm(std::string(), exposed);
    }
    if (!backward) {
      add_memory(p, "cp_merge_to_fp32", (ab + 4.0) * out);
      if (step > 0) add_memory(p, "cp_merge", 36.0 * out);
      continue;
    }
    add_memory(p, "cp_dq_accumulate", (8.0 + ab) * out);
    add_memory(p, "cp_dkv_accumulate", (step == 0 ? 1.0 : 0.5) * (8.0 + ab) * kv + 8.0 * kv);
  }
  if (!backward) return add_memory(p, "cp_merge_to_bf16", (4.0 + ab) * out);
  if (p.record) p.add_cp_beside(trace_names::cp_ring_send(cp - 1, cp, "dkv"), dkv_s);
  p.add_cp_comm(p.record ? trace_names::cp_ring_wait(cp - 1, cp) + " dkv" : std::string(), dkv_s);
  add_memory(p, "cp_grad_to_bf16", (4.0 + ab) * (out + kv));
}

// The share of the micro-batch's tokens a rank routes: all of them with expert TP = TP (every TP rank
// routes the same rows), its own s/tp under SP with etp 1.
double CostModel::routed_rows() const { return static_cast<double>(config_.expert_tp()) / config_.tp; }

// The share of layers whose MLP runs TP collectives: with etp 1 an MoE layer's routed experts are
// whole on each rank and need none; a shared expert still splits over TP.
double CostModel::mlp_tp_comm_share(const LayerDims& d) const {
  if (config_.expert_tp() == config_.tp || model_.moe.shared_ffn > 0) return 1.0;
  return 1.0 - d.moe_fraction;
}

// An MoE layer's router (a replicated hidden × experts GEMM on every token, softmax and top-k) and the
// permutation that copies each token to its k experts (read once, k copies written). Scaled by the
// share of layers that are MoE, as the rest of a layer's cost is the mean over its layers.
void CostModel::moe_routing_forward(PassCost& p, const LayerDims& d) const {
  const double f = d.moe_fraction * routed_rows();
  if (f <= 0) return;
  const double e = model_.moe.experts, k = model_.moe.experts_per_token;
  p.add("router", f * gemm_s(tokens_, e, d.hidden), f * 2.0 * tokens_ * d.hidden * e);
  add_memory(p, "moe_permute", f * d.element_bytes * tokens_ * d.hidden * (1.0 + k));
  add_ep_all_to_all(p, d, "dispatch");
}

// Each token's k expert outputs weighted by the router and summed back (k read, one written).
void CostModel::moe_unpermute(PassCost& p, const LayerDims& d, const char* name) const {
  const double f = d.moe_fraction * routed_rows();
  if (f <= 0) return;
  add_ep_all_to_all(p, d, std::string_view(name).ends_with("_bwd") ? "combine_bwd" : "combine");
  add_memory(p, name, f * d.element_bytes * tokens_ * d.hidden * (model_.moe.experts_per_token + 1.0));
}

// Expert parallelism's token exchange (Megatron-core's alltoall dispatcher): each rank sends the k
// copies of its local tokens' hidden states to the ranks holding their experts and gets its experts'
// tokens back, T_local·k·h elements each way, of which (ep−1)/ep leave the rank (routing spread evenly
// over the experts); the combine returns the outputs the same way, and the backward repeats both with
// gradients. An all-to-all moves the all-gather's (n−1)/n of the per-rank bytes (nccl-tests
// PERFORMANCE.md), so it is costed as one, on the EP group's links. Not overlapped with the routed
// experts: Megatron-core overlaps it with another micro-batch's compute only with
// --overlap-moe-expert-parallel-comm (and --delay-wgrad-compute), not modelled. With
// --moe-shared-expert-overlap the shared expert's GEMMs run beside it (shared_expert_beside_s), on the
// SMs the all-to-all leaves them. The expert tensor parallelism's gathers are the layer's TP collectives
// already charged.
void CostModel::add_ep_all_to_all(PassCost& p, const LayerDims& d, const char* what) const {
  if (config_.ep <= 1) return;
  const double bytes =
      d.element_bytes * d.rank_tokens * d.hidden * model_.moe.experts_per_token * training_.moe_imbalance;
  static const std::string name = trace_names::collective("all_to_all", "ep");
  const double f = d.moe_fraction;
  const double a2a = collectives_.time_s(Collective::kAllGather, bytes, ep_group());
  const double beside = shared_expert_beside_s(what);
  if (beside <= 0) {
    p.add_ep_comm(name + " " + what, f * a2a);
    return;
  }
  // The shared expert's GEMM is already charged in full with the MLP's; what the all-to-all adds is the
  // part of it the GEMM does not hide, and the GEMM's slowdown on the SMs the collective holds.
  const Overlap o = overlapped(beside, a2a);
  p.add(name + " " + what + " beside shared expert", f * (o.compute_s - beside));
  p.sm_shared_s += f * (o.compute_s - beside);
  if (o.exposed_s > 0) p.add_ep_comm(name + " " + what, f * o.exposed_s);
}

// The shared expert's GEMM beside one all-to-all of an MoE layer under --moe-shared-expert-overlap
// (Megatron-core moe/shared_experts.py: its up projection beside the dispatch, its down projection beside
// the combine; in the backward the same projections' input- and weight-gradient GEMMs); 0 without.
double CostModel::shared_expert_beside_s(std::string_view what) const {
  if (!training_.moe_shared_expert_overlap || model_.moe.shared_ffn <= 0) return 0.0;
  const double h = model_.hidden, tp = config_.tp;
  const double sf = model_.moe.shared_ffn / tp, sf_in = model_.activation == Activation::kSwiGLU ? 2.0 * sf : sf;
  const bool up = what.starts_with("dispatch"), backward = what.ends_with("_bwd");
  if (!backward) return up ? linear_gemm_s(tokens_, sf_in, h) : linear_gemm_s(tokens_, h, sf);
  return up ? linear_gemm_s(tokens_, h, sf_in) + wgrad_s(sf_in, h, tokens_)
            : linear_gemm_s(tokens_, sf, h) + wgrad_s(h, sf, tokens_);
}

// Backward of the permutation (k gradients summed into one) and of the router: its input gradient
// and its weight gradient, each a GEMM of the forward's size.
void CostModel::moe_routing_backward(PassCost& in, PassCost& w, const LayerDims& d) const {
  const double f = d.moe_fraction * routed_rows();
  if (f <= 0) return;
  const double e = model_.moe.experts, k = model_.moe.experts_per_token;
  add_ep_all_to_all(in, d, "dispatch_bwd");
  add_memory(in, "moe_permute_bwd", f * d.element_bytes * tokens_ * d.hidden * (1.0 + k));
  in.add("router_bwd", f * gemm_s(tokens_, d.hidden, e), f * 2.0 * tokens_ * d.hidden * e);
  w.add("router_bwd", f * wgrad_s(e, d.hidden, tokens_, false), f * 2.0 * tokens_ * d.hidden * e);
}

CostModel::LayerDims CostModel::dims(double moe_fraction) const {
  LayerDims d;
  d.moe_fraction = !model_.moe.active() ? 0.0 : moe_fraction < 0 ? model_.moe_layer_fraction() : moe_fraction;
  const double f = d.moe_fraction;
  d.tp = config_.tp;
  d.hidden = model_.hidden;
  d.q_width = static_cast<double>(model_.q_dim());
  d.kv_width = static_cast<double>(model_.kv_dim());
  // MoE layers: the experts a token visits run as one grouped GEMM (Megatron-core --moe-grouped-gemm) of
  // k · expert_ffn (+ the shared expert) per token; the mean over dense and MoE layers.
  d.ffn = !model_.moe.active() ? model_.ffn_hidden
                               : (1.0 - f) * model_.ffn_hidden +
                                     f * (model_.moe.experts_per_token * model_.moe.expert_ffn + model_.moe.shared_ffn);
  // Expert parallelism: the busiest rank's routed tokens are moe_imbalance times the mean.
  if (config_.ep > 1)
    d.ffn += f * (training_.moe_imbalance - 1.0) * model_.moe.experts_per_token * model_.moe.expert_ffn;
  d.mlp_up_width = model_.activation == Activation::kSwiGLU ? 2.0 * d.ffn : d.ffn;
  d.element_bytes = training_.activation_bytes;
  d.sp = config_.sequence_parallel && config_.tp > 1;
  d.rank_tokens = d.sp ? tokens_ / d.tp : tokens_;
  d.activation_bytes = tokens_ * d.hidden * d.element_bytes;
  return d;
}

CostModel::Overlap CostModel::overlapped(double gemm, double comm) const {
  if (comm <= 0) return {gemm, 0.0};
  const double rest = 1.0 - cluster_->compute.collective_sm_fraction;
  // The GEMM ends while the collective still runs: all of it ran on the remaining SMs.
  if (gemm <= comm * rest) return {gemm / rest, comm - gemm / rest};
  // The collective ends first: the GEMM lost its share of the SMs for that long.
  return {gemm + (1.0 - rest) * comm, 0.0};
}

namespace {

// One ATen kernel of an eager composite op: what it moves per element of the op's tensor, as a count of
// activation-precision values (bf16: 2 bytes each) plus bytes of fp32 (the upcast math).
struct EagerKernel {
  const char* name;
  double activation_values;
  double fp32_bytes;
};

// ATen's composite rms_norm (aten/src/ATen/native/layer_norm.cpp, rms_norm_symint, PyTorch 2.4-2.6;
// nn.RMSNorm calls it): x.to(fp32), pow(2), mean(-1), add_(eps), rsqrt, x32 · rstd, type_as(x), · weight.
// The add and the rsqrt touch one value per token: launches, no traffic.
constexpr EagerKernel kRmsNormForward[] = {{"norm.to_fp32", 1, 4}, {"norm.pow", 0, 8},       {"norm.mean", 0, 4},
                                           {"norm.add_eps", 0, 0}, {"norm.rsqrt", 0, 0},     {"norm.mul_rstd", 0, 8},
                                           {"norm.type_as", 1, 4}, {"norm.mul_weight", 2, 0}};
// Autograd through those ops (tools/autograd/derivatives.yaml, FunctionsManual.cpp): the weight's
// multiply (grad · w; grad · y, summed over the tokens, for the weight's gradient), the downcast's (an
// upcast), the rstd multiply's (grad · rstd; grad · x32 summed over the hidden dim), rsqrt's, the mean's
// (grad / N expanded), pow's (pow_backward: grad · (2 · x.pow(1)), three kernels), the two gradients of
// x32 added, and the upcast's (a downcast).
constexpr EagerKernel kRmsNormBackward[] = {
    {"norm_bwd.mul_weight", 2, 0},    {"norm_bwd.weight_grad_mul", 3, 0}, {"norm_bwd.weight_grad_sum", 1, 0},
    {"norm_bwd.to_fp32", 1, 4},       {"norm_bwd.mul_rstd", 0, 8},        {"norm_bwd.rstd_grad_mul", 0, 12},
    {"norm_bwd.rstd_grad_sum", 0, 4}, {"norm_bwd.rsqrt", 0, 0},           {"norm_bwd.mean", 0, 4},
    {"norm_bwd.pow_copy", 0, 8},      {"norm_bwd.pow_scale", 0, 8},       {"norm_bwd.pow_mul", 0, 12},
    {"norm_bwd.add", 0, 12},          {"norm_bwd.to_bf16", 1, 4}};
// torchtitan's apply_rotary_emb on Q or K (models/llama/model.py): x.float() viewed as complex pairs,
// times freqs_cis (one value per position and pair, broadcast), view_as_real, type_as(x); the backward
// runs the same three kernels in reverse.
constexpr EagerKernel kRopeForward[] = {{"rope.to_fp32", 1, 4}, {"rope.mul_freqs", 0, 8}, {"rope.type_as", 1, 4}};
constexpr EagerKernel kRopeBackward[] = {
    {"rope_bwd.to_fp32", 1, 4}, {"rope_bwd.mul_freqs", 0, 8}, {"rope_bwd.to_bf16", 1, 4}};
// SwiGLU as silu(w1 · x) * (w3 · x), per element of the inner width: silu reads and writes, the multiply
// reads two and writes one. Backward: the multiply's two gradients (grad times the other operand) and
// silu's (grad and its input read, one written).
constexpr EagerKernel kSwigluForward[] = {{"swiglu.silu", 2, 0}, {"swiglu.mul", 3, 0}};
constexpr EagerKernel kSwigluBackward[] = {
    {"swiglu_bwd.mul_gate", 3, 0}, {"swiglu_bwd.mul_up", 3, 0}, {"swiglu_bwd.silu", 3, 0}};

template <std::size_t N>
void add_eager(const CostModel& cost, PassCost& pass, const EagerKernel (&kernels)[N], double elements,
               double activation_bytes) {
  for (const EagerKernel& k : kernels)
    pass.add(k.name, cost.memory_s(k.name, elements * (k.activation_values * activation_bytes + k.fp32_bytes)));
}

}  // namespace

void CostModel::add_norm(PassCost& pass, const char* op, double elements, bool backward) const {
  const double ab = training_.activation_bytes;
  // Eager LayerNorm is one ATen kernel (native_layer_norm and its backward), as fused; RMSNorm is not.
  if (eager() && model_.norm == Norm::kRMSNorm)
    return backward ? add_eager(*this, pass, kRmsNormBackward, elements, ab)
                    : add_eager(*this, pass, kRmsNormForward, elements, ab);
  // Fused: read the input, write the output; the backward reads the input and the gradient, writes one.
  add_memory(pass, op, (backward ? 3.0 : 2.0) * ab * elements);
}

void CostModel::add_qk_norm(PassCost& pass, const LayerDims& d, bool backward) const {
  if (model_.qk_norm == QkNorm::kNone) return;
  // Every token's Q and K values of this rank's heads (all tokens: the QKV projection's output under SP too).
  add_norm(pass, backward ? "norm_bwd" : "norm", tokens_ * (d.q_width + d.kv_width) / d.tp, backward);
  // A full-width norm's statistics span the heads of every TP rank: each rank's partial sums of squares of Q
  // and of K (in the backward, of the gradient times the input) all-reduced over TP, two floats per token.
  if (model_.qk_norm == QkNorm::kFullWidth && d.tp > 1)
    pass.add_comm(tp_name(Collective::kAllReduce), tp_comm_s(Collective::kAllReduce, tokens_ * 2.0 * 4.0));
}

void CostModel::add_rope(PassCost& pass, const LayerDims& d, bool backward) const {
  const double ab = training_.activation_bytes;
  const double tp = d.tp;
  if (model_.position == PositionEmbedding::kRotary) {
    // Rotated values per token on this rank: every query and key head's width, or under latent attention
    // (DeepSeek) the rope part of each query head and the one rope key all heads share.
    const double q = model_.mla.active() ? model_.heads / tp * model_.mla.qk_rope_head_dim : d.q_width / tp;
    const double k = model_.mla.active() ? model_.mla.qk_rope_head_dim : d.kv_width / tp;
    if (eager()) {
      for (const double width : {q, k})
        backward ? add_eager(*this, pass, kRopeBackward, tokens_ * width, ab)
                 : add_eager(*this, pass, kRopeForward, tokens_ * width, ab);
    } else {
      // One fused kernel reads and writes each rotated value (TransformerEngine's fused RoPE, Loom's
      // executor's rope over Q and K together).
      add_memory(pass, backward ? "rope_bwd" : "rope", 2.0 * ab * tokens_ * (q + k));
    }
  }
  // torchtitan's repeat_kv (n_rep = heads / kv_heads > 1): expand and reshape copy K and V to every query
  // head before SDPA; the backward sums the copies back. Fused attention kernels read K and V in place.
  if (eager() && !model_.mla.active() && model_.kv_heads < model_.heads) {
    const double bytes = ab * tokens_ * (d.kv_width + d.q_width) / tp;  // read the kv heads, write q's width
    for (int kv = 0; kv < 2; ++kv) add_memory(pass, backward ? "repeat_kv_bwd" : "repeat_kv", bytes);  // K, V
  }
}

void CostModel::add_activation(PassCost& pass, const LayerDims& d, bool backward) const {
  const double ab = training_.activation_bytes;
  const double elements = tokens_ * d.ffn / d.tp;
  if (model_.activation == Activation::kSwiGLU) {
    if (eager())
      return backward ? add_eager(*this, pass, kSwigluBackward, elements, ab)
                      : add_eager(*this, pass, kSwigluForward, elements, ab);
    // Fused: read the gate and the up projection, write the product; backward reads both and the
    // gradient, writes both gradients.
    return add_memory(pass, backward ? "swiglu_bwd" : "swiglu", (backward ? 5.0 : 3.0) * ab * elements);
  }
  // GELU (with Megatron's bias fused in): eager F.gelu is one kernel too.
  add_memory(pass, backward ? "gelu_bwd" : "gelu", (backward ? 3.0 : 2.0) * ab * elements);
}

LayerForwardParts CostModel::op_recompute_parts() const {
  const OpRecompute r = op_recompute(model_);
  return {r.qkv, r.attn_out, r.mlp_up, r.mlp_down, false, false, false};
}

void CostModel::add_sp_copy(PassCost& pass, const LayerDims& d, double share) const {
  if (!training_.sp_collective_copies || !d.sp || share <= 0) return;
  add_memory(pass, "sp_collective_copy", share * 2.0 * d.activation_bytes);  // read and written once
}

PassCost CostModel::layer_forward(bool with_tp_comm, const LayerForwardParts& parts, double moe_fraction) const {
  PassCost p = new_pass();
  const LayerDims d = dims(moe_fraction);
  const bool comm = with_tp_comm && config_.tp > 1;
  const double residual_bytes = (3.0 * d.element_bytes + (model_.dropout ? 1.0 : 0.0)) * d.rank_tokens * d.hidden;
  // A linear layer's GEMM, or the share of its columns this pass runs.
  auto linear = [&](const char* name, double share, double seconds, double flops) {
    if (share > 0) p.add(name, share * seconds, share * flops);
  };

  // A row-parallel layer's output is summed over TP (reduce-scattered under SP), then added to the
  // residual stream.
  auto reduce_output_into_residual = [&](double comm_share) {
    if (comm && (parts.reduce_scatter || !d.sp)) {
      const Collective c = d.sp ? Collective::kReduceScatter : Collective::kAllReduce;
      add_sp_copy(p, d, comm_share);
      p.add_comm(tp_name(c), comm_share * tp_comm_s(c, d.activation_bytes));
    }
    // The row-parallel layer's bias is added after the reduction, with the dropout, in the residual add
    // (Megatron-LM's fused bias-dropout-add; Loom's executor's Backend::bias_dropout_add, which
    // `loom profile` times whole as "residual").
    p.add("residual", memory_s("residual", residual_bytes));
  };

  // The norm's output is cast on the rank's share, before SP's all-gather, except under torchao's rowwise
  // recipe: torchtitan runs plain TP there, the gather in bf16, and each TP rank casts the whole gathered
  // sequence ("float8 all-gather with TP is only supported for tensorwise float8 scaling recipes. For
  // rowwise recipes, we use regular TP and all-gather happens in high precision": torchtitan's
  // models/llama3/infra/parallelize.py, enable_float8_tensorwise_tp, at the 2025-06 runs' commit 820504e).
  const double norm_cast =
      (training_.fp8_recipe == Fp8Recipe::kRowwise ? static_cast<double>(tokens_) : d.rank_tokens) * d.hidden;
  add_norm(p, "norm", d.rank_tokens * d.hidden, false);
  if (comm && d.sp) {
    p.add_comm(tp_name(Collective::kAllGather), tp_comm_s(Collective::kAllGather, d.activation_bytes));
    add_sp_copy(p, d, 1.0);
  }
  add_fp8_cast(p, "fp8_cast", norm_cast);
  linear("qkv", parts.qkv,
         linear_gemm_s(tokens_, (d.q_width + 2.0 * d.kv_width) / d.tp, d.hidden) +
             bias_s(model_.linear_bias || model_.qkv_bias, tokens_, (d.q_width + 2.0 * d.kv_width) / d.tp),
         2.0 * tokens_ * d.hidden * (d.q_width + 2.0 * d.kv_width) / d.tp);
  add_qk_norm(p, d, false);
  add_rope(p, d, false);
  if (parts.attention_core) p.append(attention_core_forward());
  add_fp8_cast(p, "fp8_cast", tokens_ * d.q_width / d.tp);
  linear("attn_out", parts.attn_out, linear_gemm_s(tokens_, d.hidden, d.q_width / d.tp),
         2.0 * tokens_ * d.hidden * d.q_width / d.tp);
  reduce_output_into_residual(1.0);
  add_norm(p, "norm", d.rank_tokens * d.hidden, false);
  const double mlp_comm = mlp_tp_comm_share(d);
  if (comm && d.sp) {
    p.add_comm(tp_name(Collective::kAllGather), mlp_comm * tp_comm_s(Collective::kAllGather, d.activation_bytes));
    add_sp_copy(p, d, mlp_comm);
  }
  moe_routing_forward(p, d);
  add_fp8_cast(p, "fp8_cast", norm_cast);
  linear("mlp_up", parts.mlp_up,
         linear_gemm_s(tokens_, d.mlp_up_width / d.tp, d.hidden) +
             bias_s(model_.linear_bias, tokens_, d.mlp_up_width / d.tp),
         2.0 * tokens_ * d.hidden * d.mlp_up_width / d.tp);
  add_activation(p, d, false);
  add_fp8_cast(p, "fp8_cast", tokens_ * d.ffn / d.tp);
  linear("mlp_down", parts.mlp_down, linear_gemm_s(tokens_, d.hidden, d.ffn / d.tp),
         2.0 * tokens_ * d.hidden * d.ffn / d.tp);
  if (!parts.output) return p;
  moe_unpermute(p, d, "moe_unpermute");
  reduce_output_into_residual(mlp_comm);
  return p;
}

void CostModel::layer_backward(PassCost& in, PassCost& w, double moe_fraction) const {
  const LayerDims d = dims(moe_fraction);
  const bool comm = config_.tp > 1;
  const bool split = &in != &w;  // zero-bubble: weight gradients run later, nothing to hide comm behind
  // Each residual connection in the backward: the branch's gradient through its dropout (read
  // the gradient and the 1-byte mask, write), and the residual stream's gradient summed from the
  // branch and the skip path (read both, write: autograd's gradient accumulation, the executor's axpy).
  auto residual_backward = [&](PassCost& pass) {
    if (model_.dropout) add_memory(pass, "dropout_bwd", (2.0 * d.element_bytes + 1.0) * d.rank_tokens * d.hidden);
    add_memory(pass, "residual_bwd", 3.0 * d.element_bytes * d.rank_tokens * d.hidden);
  };

  // Recompute first: the backward of a layer starts by rebuilding what was dropped.
  if (config_.recompute == Recompute::kFull || config_.recompute == Recompute::kOp) {
    PassCost again = config_.recompute == Recompute::kFull ? layer_forward(true, {}, moe_fraction)
                                                           : layer_forward(true, op_recompute_parts(), moe_fraction);
    for (auto& s : again.segments) s.name = "recompute " + s.name;
    in.append(again);
  } else if (config_.recompute == Recompute::kSelective && training_.attention == AttentionKernel::kUnfused) {
    PassCost again = attention_core_forward();
    for (auto& s : again.segments) s.name = "recompute " + s.name;
    in.append(again);
  }

  // A column-parallel linear's input gradient is all-reduced (reduce-scattered under SP) while
  // its weight gradient is computed (Megatron's async TP all-reduce); under SP its input is
  // all-gathered again for the weight gradient while the input gradient is computed.
  // A linear layer's bias gradient sums its output gradient over the tokens (one read of it); it
  // is charged to the layer's input-gradient op, as the executor's trace slices hold it.
  auto bias_grad_s = [&](double rows, double cols) {
    return model_.linear_bias ? memory_s("bias_grad", rows * cols * d.element_bytes) : 0.0;
  };
  auto column_parallel = [&](const char* name, double out_features, double comm_share) {
    add_fp8_cast(in, "fp8_cast_bwd", tokens_ * out_features / d.tp);
    const double dgrad =
        linear_gemm_s(tokens_, d.hidden, out_features / d.tp) + bias_grad_s(tokens_, out_features / d.tp);
    const double wgrad = wgrad_s(out_features / d.tp, d.hidden, tokens_);
    const double flops = 2.0 * tokens_ * d.hidden * out_features / d.tp;
    const double gather = comm && d.sp ? comm_share * tp_comm_s(Collective::kAllGather, d.activation_bytes) : 0.0;
    const double reduce =
        comm ? comm_share * tp_comm_s(d.sp ? Collective::kReduceScatter : Collective::kAllReduce, d.activation_bytes)
             : 0.0;
    const Overlap g = overlapped(dgrad, gather);
    in.add(name, g.compute_s, flops);
    in.sm_shared_s += g.compute_s - dgrad;
    if (g.exposed_s > 0) in.add_comm(tp_name(Collective::kAllGather), g.exposed_s);
    // Split off (zero-bubble), the weight gradient runs later: nothing hides the reduction.
    const Overlap r = split || !training_.tp_comm_overlap ? Overlap{wgrad, reduce} : overlapped(wgrad, reduce);
    if (comm) add_sp_copy(in, d, comm_share);  // the input gradient, out of its layout for the reduce-scatter
    w.add(name, r.compute_s, flops);
    w.sm_shared_s += r.compute_s - wgrad;
    if (r.exposed_s > 0) in.add_comm(tp_name(d.sp ? Collective::kReduceScatter : Collective::kAllReduce), r.exposed_s);
  };
  auto row_parallel = [&](const char* name, double in_features, double comm_share) {
    // The backward of the forward's reduce-scatter is an all-gather of the output gradient.
    if (comm && d.sp) {
      in.add_comm(tp_name(Collective::kAllGather), comm_share * tp_comm_s(Collective::kAllGather, d.activation_bytes));
      add_sp_copy(in, d, comm_share);
    }
    add_fp8_cast(in, "fp8_cast_bwd", tokens_ * d.hidden);
    in.add(name, linear_gemm_s(tokens_, in_features / d.tp, d.hidden) + bias_grad_s(d.rank_tokens, d.hidden),
           2.0 * tokens_ * d.hidden * in_features / d.tp);
    w.add(name, wgrad_s(d.hidden, in_features / d.tp, tokens_), 2.0 * tokens_ * d.hidden * in_features / d.tp);
  };

  residual_backward(in);
  moe_unpermute(in, d, "moe_unpermute_bwd");
  row_parallel("mlp_down_bwd", d.ffn, mlp_tp_comm_share(d));
  add_activation(in, d, true);
  column_parallel("mlp_up_bwd", d.mlp_up_width, mlp_tp_comm_share(d));
  moe_routing_backward(in, w, d);
  add_norm(in, "norm_bwd", d.rank_tokens * d.hidden, true);
  residual_backward(in);
  row_parallel("attn_out_bwd", d.q_width, 1.0);
  in.append(attention_core_backward());
  add_rope(in, d, true);
  add_qk_norm(in, d, true);
  column_parallel("qkv_bwd", d.q_width + 2.0 * d.kv_width, 1.0);
  add_norm(in, "norm_bwd", d.rank_tokens * d.hidden, true);
}

ChunkCost CostModel::chunk(int stage, int chunk, bool split_weight_grad) const {
  ChunkCost c{new_pass(), new_pass(), new_pass()};
  const bool first = stage == 0 && chunk == 0;
  const bool last = stage == config_.pp - 1 && chunk == config_.vpp - 1;
  const double t = config_.tp;
  const double h = model_.hidden;
  const double ab = training_.activation_bytes;
  const double v = vocab_;
  const bool sp = config_.sequence_parallel && config_.tp > 1;
  const double tokens_sp = sp ? tokens_ / t : tokens_;
  const double act_bytes = tokens_ * h * ab;
  const LayerDims d = dims();

  if (first) {
    add_memory(c.forward, "embedding", 3.0 * ab * tokens_ * h);
    // Vocab-parallel lookup: each rank holds a slice of the table; partial rows are summed.
    if (config_.tp > 1) {
      add_sp_copy(c.forward, d, 1.0);
      c.forward.add_comm(tp_name(sp ? Collective::kReduceScatter : Collective::kAllReduce),
                         tp_comm_s(sp ? Collective::kReduceScatter : Collective::kAllReduce, act_bytes));
    }
  }
  // Megatron's scatter-gather pipeline transfer: without SP each TP rank sends and receives 1/t of
  // the activation (pipe_send_s) and the receiver all-gathers it over TP before it can compute.
  const bool gather_received = config_.tp > 1 && !sp;
  if (gather_received && !first)
    c.forward.add_comm(tp_name(Collective::kAllGather), tp_comm_s(Collective::kAllGather, act_bytes));
  if (gather_received && !last)
    c.backward.add_comm(tp_name(Collective::kAllGather), tp_comm_s(Collective::kAllGather, act_bytes));
  // The chunk's layers in order, runs of dense and MoE layers each costed as its kind (core/partition.h
  // LayerRun); `fwd` and `layer_in` below stand for the chunk's mean layer where one layer's pass is
  // wanted (ZeRO-3's gathers).
  const LayerMix mix = chunk_layer_mix(model_, config_, stage, chunk);
  const bool mixed = mix.dense > 0 && mix.moe > 0;
  const std::vector<LayerRun> runs = mixed ? chunk_layer_runs(model_, config_, stage, chunk) : std::vector<LayerRun>{};
  const PassCost fwd = layer_forward(true, {}, mix.moe_fraction());
  if (!mixed) {
    c.forward.append(fwd, mix.total());
  } else {
    const PassCost kind_fwd[2] = {layer_forward(true, {}, 0.0), layer_forward(true, {}, 1.0)};
    for (const LayerRun& run : runs) c.forward.append(kind_fwd[run.moe], run.count);
  }

  PassCost* weight = split_weight_grad ? &c.weight : &c.backward;
  auto backward_of = [&](double fraction, PassCost& in, PassCost& w) {
    if (split_weight_grad)
      layer_backward(in, w, fraction);
    else
      layer_backward(in, in, fraction);
  };
  // A column-parallel GEMM's input-gradient reduction over TP (a reduce-scatter under SP), beside its weight
  // gradient where TP communication overlaps it.
  auto weight_grad_and_reduce = [&](const char* op, double wgrad, double reduce_bytes, double flops) {
    const double reduce =
        config_.tp > 1 ? tp_comm_s(sp ? Collective::kReduceScatter : Collective::kAllReduce, reduce_bytes) : 0.0;
    const Overlap r =
        split_weight_grad || !training_.tp_comm_overlap ? Overlap{wgrad, reduce} : overlapped(wgrad, reduce);
    weight->add(op, r.compute_s, flops);
    weight->sm_shared_s += r.compute_s - wgrad;
    if (r.exposed_s > 0)
      c.backward.add_comm(tp_name(sp ? Collective::kReduceScatter : Collective::kAllReduce), r.exposed_s);
  };
  // The final norm, the LM head and the loss, once for the main prediction and once for each MTP module.
  auto head_pass = [&] {
    add_norm(c.forward, "final_norm", tokens_sp * h, false);
    if (sp) {
      c.forward.add_comm(tp_name(Collective::kAllGather), tp_comm_s(Collective::kAllGather, act_bytes));
      add_sp_copy(c.forward, d, 1.0);
    }
    c.forward.add("lm_head", gemm_s(tokens_, v / t, h), 2.0 * tokens_ * h * v / t);
    add_loss(c.forward, c.backward, tokens_ * v / t);
    c.backward.add("lm_head_bwd", gemm_s(tokens_, h, v / t), 2.0 * tokens_ * h * v / t);
    weight_grad_and_reduce("lm_head_bwd", wgrad_s(h, v / t, tokens_, false), act_bytes, 2.0 * tokens_ * h * v / t);
    if (config_.tp > 1) add_sp_copy(c.backward, d, 1.0);
    add_norm(c.backward, "final_norm_bwd", tokens_sp * h, true);
  };
  if (last) {
    head_pass();
    // Multi-token prediction (ModelSpec::mtp_layers), as Megatron-core's MultiTokenPredictionLayer runs each
    // module: the shifted tokens' embedding (vocab-parallel, reduced over TP as the first stage's), enorm and
    // hnorm, their concatenation, eh_proj (ColumnParallelLinear 2h → h: under SP its input all-gathered over
    // TP; its output gathered over TP, gather_from_tensor_model_parallel_region, and split back to the
    // sequence, whose backward gathers), one transformer layer of the last layer's kind, and the head pass above.
    const double moe = model_.mtp_layer_moe() ? 1.0 : 0.0;
    const double proj_flops = 2.0 * tokens_ * 2.0 * h * h / t;
    for (int k = 0; k < model_.mtp_layers; ++k) {
      add_memory(c.forward, "embedding", 3.0 * ab * tokens_ * h);
      if (config_.tp > 1) {
        add_sp_copy(c.forward, d, 1.0);
        c.forward.add_comm(tp_name(sp ? Collective::kReduceScatter : Collective::kAllReduce),
                           tp_comm_s(sp ? Collective::kReduceScatter : Collective::kAllReduce, act_bytes));
      }
      for (int n = 0; n < 2; ++n) add_norm(c.forward, "norm", tokens_sp * h, false);
      add_memory(c.forward, "mtp_concat", 2.0 * ab * tokens_sp * 2.0 * h);
      if (sp) {
        c.forward.add_comm(tp_name(Collective::kAllGather), tp_comm_s(Collective::kAllGather, 2.0 * act_bytes));
        add_sp_copy(c.forward, d, 2.0);
      }
      c.forward.add("mtp_eh_proj", linear_gemm_s(tokens_, h / t, 2.0 * h), proj_flops);
      if (config_.tp > 1)
        c.forward.add_comm(tp_name(Collective::kAllGather), tp_comm_s(Collective::kAllGather, act_bytes));
      c.forward.append(layer_forward(true, {}, moe));
      head_pass();
      PassCost layer_in = new_pass(), layer_w = new_pass();
      backward_of(moe, layer_in, layer_w);
      c.backward.append(layer_in);
      if (split_weight_grad) c.weight.append(layer_w);
      // The scatter back to the sequence gathers its gradient (the output gather's backward is a split).
      if (sp) c.backward.add_comm(tp_name(Collective::kAllGather), tp_comm_s(Collective::kAllGather, act_bytes));
      c.backward.add("mtp_eh_proj_bwd", linear_gemm_s(tokens_, 2.0 * h, h / t), proj_flops);
      weight_grad_and_reduce("mtp_eh_proj_bwd", wgrad_s(h / t, 2.0 * h, tokens_), 2.0 * act_bytes, proj_flops);
      add_memory(c.backward, "mtp_concat", 2.0 * ab * tokens_sp * 2.0 * h);
      for (int n = 0; n < 2; ++n) add_norm(c.backward, "norm_bwd", tokens_sp * h, true);
      add_memory(c.backward, "embedding_bwd", tokens_ * h * (ab + 4.0));
    }
  }
  PassCost layer_in = new_pass(), layer_w = new_pass();
  backward_of(mix.moe_fraction(), layer_in, layer_w);
  if (!mixed) {
    c.backward.append(layer_in, mix.total());
    if (split_weight_grad) c.weight.append(layer_w, mix.total());
  } else {
    PassCost kind_in[2] = {new_pass(), new_pass()}, kind_w[2] = {new_pass(), new_pass()};
    for (int moe = 0; moe < 2; ++moe) backward_of(moe, kind_in[moe], kind_w[moe]);
    // The backward (and zero-bubble's W pass, which runs its GEMMs in the B pass's order) runs the layers
    // last first.
    for (auto run = runs.rbegin(); run != runs.rend(); ++run) {
      c.backward.append(kind_in[run->moe], run->count);
      if (split_weight_grad) c.weight.append(kind_w[run->moe], run->count);
    }
  }
  if (first) {
    add_memory(c.backward, "embedding_bwd", tokens_ * h * (ab + 4.0));
    if (training_.embedding_grad_dense) add_dense_embedding_grad(c.backward);
  }
  // ZeRO-3's gathered parameters copied out of the gather's buffer before each pass that gathers them.
  if (const double copy = zero3_copy_out_s(stage, chunk); copy > 0)
    for (PassCost* p : {&c.forward, &c.backward}) p->add("zero3_copy_out", copy);
  // ZeRO-3's gathers that a limited prefetch leaves the compute waiting for.
  c.forward.add_dp_wait("wait all_gather dp", zero3_prefetch_wait_s(stage, chunk, false, fwd));
  c.backward.add_dp_wait("wait all_gather dp", zero3_prefetch_wait_s(stage, chunk, true, layer_in));
  if (training_.host_op_s > 0)
    for (PassCost* p : {&c.forward, &c.backward, &c.weight}) p->floor_at_host_dispatch(training_.host_op_s);
  return c;
}

}  // namespace loom::sim
