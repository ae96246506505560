// Cost of every op of a training step on one GPU (one TP rank), from the cost file only:
// GEMMs from the measured table (interpolated in m, n, k) or peak × an efficiency curve over
// size; flash or unfused attention; memory-bound ops by bytes / bandwidth; TP collectives inside
// the layer (exposed in the forward, overlapped with weight-gradient GEMMs in the backward as
// Megatron-LM does); recompute adds its forward work to the backward.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/partition.h"
#include "core/training_spec.h"
#include "sim/collectives.h"
#include "sim/zero3_prefetch.h"

namespace loom::sim {

// Where a segment runs, for traces: the compute stream, or the TP or CP communication beside it.
enum class Lane { kCompute, kTpComm, kCpComm, kEpComm };

// One named piece of a pass, for traces: compute kernels or communication. Segments follow each
// other in the pass's time, except `beside` ones: a transfer that starts with the next segment and
// runs beside it, taking none of the pass's time itself (the context-parallel ring's KV sends; their
// excess over the tile beside them is a segment of its own, on the compute lane's time).
struct Segment {
  std::string name;
  double seconds = 0;
  bool communication = false;
  Lane lane = Lane::kCompute;
  bool beside = false;
};

// One pass (forward, input-gradient backward, or weight-gradient backward) of one model chunk
// for one micro-batch.
struct PassCost {
  double seconds = 0;  // compute + exposed TP communication
  double tp_comm_exposed_s = 0;
  double cp_comm_exposed_s = 0;  // context-parallel KV exchange not hidden behind attention tiles
  double ep_comm_exposed_s = 0;  // expert-parallel token dispatch and combine (all-to-all)
  double dp_comm_exposed_s = 0;  // ZeRO-3 gathers a limited prefetch leaves the compute stream waiting for
  double sm_shared_s = 0;        // of `seconds`: GEMM time added by the SMs collectives beside it held
  double flops = 0;              // hardware FLOPs executed (recompute included)
  double compute_sq_s2 = 0;      // Σ t² over its compute segments (kernel jitter's variance, sim/jitter.h)
  int kernels = 0;               // launches the host issues for it: one per segment, collectives included
  double host_bound_s = 0;       // of `seconds`: the GPU idle while the host issues the launches (host_op_s)
  bool record = true;            // keep the per-kernel segments (traces); off when only totals matter
  std::vector<Segment> segments;
  void add(const char* name, double s, double f = 0) {
    ++kernels;
    seconds += s;
    flops += f;
    compute_sq_s2 += s * s;
    if (record) segments.push_back({name, s, false, Lane::kCompute, false});
  }
  void add(const std::string& name, double s, double f = 0) {
    ++kernels;
    seconds += s;
    flops += f;
    compute_sq_s2 += s * s;
    if (record) segments.push_back({name, s, false, Lane::kCompute, false});
  }
  void add_comm(const char* name, double s) {
    ++kernels;
    seconds += s;
    tp_comm_exposed_s += s;
    if (record) segments.push_back({name, s, true, Lane::kTpComm, false});
  }
  // Context-parallel communication the compute stream waits for (exposed).
  void add_cp_comm(const std::string& name, double s) {
    ++kernels;
    seconds += s;
    cp_comm_exposed_s += s;
    if (record) segments.push_back({name, s, true, Lane::kCpComm, false});
  }
  // Expert-parallel all-to-all the compute stream waits for (exposed).
  void add_ep_comm(const std::string& name, double s) {
    ++kernels;
    seconds += s;
    ep_comm_exposed_s += s;
    if (record) segments.push_back({name, s, true, Lane::kEpComm, false});
  }
  // ZeRO-3 parameter gathers the compute stream waits for (exposed).
  void add_dp_wait(const char* name, double s) {
    if (s <= 0) return;
    seconds += s;
    dp_comm_exposed_s += s;
    if (record) segments.push_back({name, s, true, Lane::kCompute, false});
  }
  // A context-parallel transfer running beside the next segment: shown, not charged.
  void add_cp_beside(const std::string& name, double s) {
    if (record) segments.push_back({name, s, true, Lane::kCpComm, true});
  }
  void append(const PassCost& other, int times = 1);
  // The host issues one launch every `host_op_s` and runs ahead of the GPU otherwise: a pass takes at
  // least kernels·host_op_s. What that adds shows as a "host dispatch" segment.
  void floor_at_host_dispatch(double host_op_s);
};

struct ChunkCost {
  PassCost forward;
  PassCost backward;  // input gradients (+ weight gradients unless split)
  PassCost weight;    // weight gradients when the schedule splits the backward (zero-bubble)
};

// What a pass runs of a layer's forward: every part (the forward itself, or full recompute), or under
// op-level SAC a share of each GEMM, no attention core and no TP reduce-scatter (core/op_recompute.h).
struct LayerForwardParts {
  double qkv = 1, attn_out = 1, mlp_up = 1, mlp_down = 1;
  bool attention_core = true;
  bool reduce_scatter = true;  // the row-parallel outputs' reduce-scatter under SP
  // What follows the MLP's down projection: its output's reduction and the residual add. Op-level SAC's
  // recompute stops at the down projection: torch.utils.checkpoint (non-reentrant, early stop on by
  // default) stops once every tensor the backward saved is rebuilt, the last being w2's input, saved
  // when w2's autograd node is made.
  bool output = true;
};

// ZeRO-3 gathers the parameters in every pass: ZeRO-3 over more than one rank, not kept gathered
// through a pipeline.
inline bool zero3_gathers_every_pass(const ParallelConfig& c, const TrainingSpec& t) {
  return c.zero >= 3 && c.grad_ranks() > 1 && !c.zero3_gathered_through_pipeline(t.zero3_pp_keep_gathered);
}

// Which of the cost file's kernel timings a plan of `world_size` ranks reads: those taken with
// this many ranks of a node running at once (0: the file's timings carry no such tag).
int table_concurrency(const ClusterSpec& cluster, int world_size);

class CostModel {
 public:
  // `collectives` must be built from the same cluster and outlive the cost model.
  CostModel(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
            const ClusterSpec& cluster, const CollectiveModel& collectives);

  // Local chunk `chunk` of `stage`: its layers plus the embedding (first virtual stage) or the
  // final norm, LM head and loss (last virtual stage).
  ChunkCost chunk(int stage, int chunk, bool split_weight_grad) const;

  // Traces want every kernel; the planner only totals (much faster).
  void set_record_segments(bool record) { record_segments_ = record; }

  // An m × k by k × n product: the measured table where the file has one, else the efficiency
  // curve over its FLOPs, never faster than moving its bytes (the operands read and the result
  // written once; `bytes` = 0 counts them from the shape, a batched product passes its own).
  double gemm_s(double m, double n, double k, double bytes = 0) const;
  // A linear layer's GEMM (fprop, dgrad or wgrad of QKV, the attention projection, the MLP): FP8
  // under --precision fp8 (TransformerEngine: FP8 operands, higher-precision output), else gemm_s.
  double linear_gemm_s(double m, double n, double k) const;
  // The GEMM curve of either precision: `flops` at ceiling · flops / (flops + half) of `peak`,
  // never faster than moving `bytes`, plus a kernel launch.
  double curve_gemm_s(double flops, double bytes, double peak, double ceiling, double half) const;
  // A memory-bound op moving `bytes`: from the cost file's measurements of `op` where it has
  // them, else bytes / (bandwidth · memory_bound_efficiency).
  double memory_s(const char* op, double bytes) const;
  // A linear layer's forward bias add over rows × cols outputs (when `present`: the model has that bias), where the
  // software that measured the cost file adds it in a pass of its own: `loom profile` times Loom's executor's add as
  // "bias". A cost file without "bias" points describes software that fuses the add into the GEMM epilogue or the next
  // element-wise kernel (Megatron-LM's bias-GeLU and bias-dropout-add fusions): 0 s.
  double bias_s(bool present, double rows, double cols) const;
  // Weight gradient of an (out × in) weight over `tokens`: the GEMM plus adding it into the
  // gradient buffer, which every micro-batch reads and writes at grad_bytes per element.
  // `linear`: a linear layer's weight (FP8 under --precision fp8); the LM head and router are not.
  double wgrad_s(double out, double in, double tokens, bool linear = true) const;
  // FP8: the cast of `elements` bf16 values to FP8 before a GEMM (with the transposed copy Hopper
  // needs, and under tensorwise scaling the amax read first); 0 in bf16.
  double fp8_cast_s(const char* op, double elements) const;
  // FP8: the step's cast of this stage's linear weights to FP8 (TransformerEngine casts them on the
  // first micro-batch and keeps them for the rest of the step); 0 in bf16.
  double fp8_weight_cast_s(int stage) const;
  const CollectiveModel& collectives() const { return collectives_; }

  // Activation (or its gradient) sent between neighbouring stages for one micro-batch.
  double pipe_send_s(int from_stage, int to_stage) const;
  bool stages_share_node(int a, int b) const;

  // Data-parallel collectives over this stage's gradient group: the dp·cp ranks holding the same
  // parameters (Megatron-core's dp_cp group).
  GroupPlacement dp_group() const;
  GroupPlacement tp_group() const;
  // The cp ranks of one context-parallel group, tp apart (rank order tp, cp, dp, pp).
  GroupPlacement cp_group() const;
  // Expert parallelism: an EP group (tp apart in the expert grid etp-ep-edp, Megatron-core's MoE
  // parallel folding) and the expert-data-parallel group (tp·ep apart).
  GroupPlacement ep_group() const;
  GroupPlacement expert_dp_group() const;
  // A gradient or parameter collective over the data-parallel ranks: `bytes` of non-expert tensors
  // over the dp·cp group, `expert_bytes` of routed experts over the expert-data-parallel group.
  double grad_collective_s(Collective c, double bytes, double expert_bytes) const;
  // One hop of the CP ring: inside a node when the tp·cp ranks of a CP group fit in one.
  LinkLevel cp_ring_level() const;
  // Bytes of the keys and values of this rank's s/cp tokens, as one TP rank holds them: what one
  // step of the ring sends forward (the backward sends them with their gradients, twice this).
  double cp_kv_bytes() const;
  // Exposed time of a ring transfer of `transfer_s` overlapped with an attention tile of `tile_s`.
  static double ring_exposed_s(double transfer_s, double tile_s) { return std::max(0.0, transfer_s - tile_s); }
  double dp_collective_s(Collective c, double bytes) const { return collectives_.time_s(c, bytes, dp_group()); }
  // ZeRO-3 under HSDP: the group one parameter is sharded over (all dp ranks without a shard group),
  // and the replicas of one shard, across which its reduced gradient is all-reduced.
  GroupPlacement shard_group() const;
  GroupPlacement replica_group() const;
  double shard_collective_s(Collective c, double bytes) const { return collectives_.time_s(c, bytes, shard_group()); }
  // ZeRO-3: the parameter all-gathers (or gradient reduce-scatters) one pass over local chunk
  // `chunk` of `stage` runs: one collective per unit (a layer, or each linear module of it under
  // Zero3Unit::kModule; the embedding and the LM head their own), each paying its latency.
  double zero3_collective_s(Collective c, int stage, int chunk) const;
  // ZeRO-3: one unit's collective over `params` parameter elements, with the copy into its buffer on the
  // collective's stream where the stack makes one (TrainingSpec::zero3_collective_copies).
  double zero3_unit_s(Collective c, double params) const;
  // ZeRO-3: the gathered parameters of local chunk `chunk` copied out of the gather's buffer on the
  // compute stream, once in every pass that gathers them (TrainingSpec::zero3_collective_copies); 0 where
  // the stack makes no copy or the chunk stays gathered through a pipeline (one copy a step, at its first
  // forward: not charged).
  double zero3_copy_out_s(int stage, int chunk) const;
  // ZeRO-3: the parameter elements one rank gathers for local chunk `chunk` of `stage` (its layers, with
  // the embedding and the head where it holds them).
  double zero3_chunk_params(int stage, int chunk) const;
  // ZeRO-3: what one pass over local chunk `chunk` of `stage` waits for its gathers under a limited
  // prefetch (sim/zero3_prefetch.h; TrainingSpec::zero3_prefetch_elements): DeepSpeed's module units,
  // whose gathers and compute differ, where the compute would hide the gathers; layer units only where
  // the gathers outlast the compute (the last layer computes after its gather). 0 without ZeRO-3 gathers
  // in every pass. The embedding and the head are left out.
  double zero3_prefetch_wait_s(int stage, int chunk, bool backward) const;
  double replica_collective_s(Collective c, double bytes) const {
    return collectives_.time_s(c, bytes, replica_group());
  }
  // Adam step over `params` parameters (memory-bound: master weights, moments, grads, params).
  double optimizer_s(double params) const;
  // Gradient clipping's global norm: one fp32 sum of squares all-reduced before every optimizer step,
  // over the ranks whose gradients differ (../shared/reference/collectives-at-scale.md §6): the whole
  // world once a distributed optimizer shards them (ZeRO ≥ 1; Megatron's grad-stats group), else the
  // model-parallel group, tp·cp·pp (the data-parallel ranks already hold the same reduced gradients;
  // Megatron-LM's clip_grads.py reduces over get_model_parallel_group()). Latency-bound.
  double grad_norm_reduce_s() const { return grad_norm_reduce_s_; }
  // The bytes optimizer_s charges per parameter (so that `loom profile` records its measured
  // optimizer step in the same units).
  static double optimizer_bytes_per_param(const TrainingSpec& training);
  // Parameters one TP rank holds on `stage` (all chunks), and in one chunk.
  double stage_params(int stage) const;
  double chunk_params(int stage, int chunk) const;
  // Of those: the routed experts (1/ep of the stage's), whose gradients reduce over the
  // expert-data-parallel group.
  double stage_expert_params(int stage) const;
  double chunk_expert_params(int stage, int chunk) const;
  double layer_params() const { return layer_params_; }

 private:
  // The widths and byte sizes of one layer for one micro-batch, as one TP rank sees them.
  struct LayerDims {
    double tp = 1;  // tensor-parallel degree (the widths below are whole, not per rank)
    double hidden = 0;
    double q_width = 0;           // of Q and the attention output: heads · head_dim
    double kv_width = 0;          // of K (and of V): kv_heads · head_dim
    double ffn = 0;               // MLP inner width
    double mlp_up_width = 0;      // the up projection's output: 2·ffn for SwiGLU (gate and up), else ffn
    double element_bytes = 0;     // bytes of one activation element
    bool sp = false;              // sequence parallelism in effect (SP on and tp > 1)
    double rank_tokens = 0;       // tokens this rank's norms, dropouts and residuals see: b·s, or b·s/tp under SP
    double activation_bytes = 0;  // one b·s·h activation: the payload of the TP collectives
    double moe_fraction = 0;      // of the layers this one stands for, the share that are MoE layers
  };
  double routed_rows() const;
  double mlp_tp_comm_share(const LayerDims& d) const;
  void moe_routing_forward(PassCost& p, const LayerDims& d) const;
  void moe_unpermute(PassCost& p, const LayerDims& d, const char* name) const;
  void add_ep_all_to_all(PassCost& p, const LayerDims& d, const char* what) const;
  double shared_expert_beside_s(std::string_view what) const;
  void moe_routing_backward(PassCost& in, PassCost& w, const LayerDims& d) const;
  // A layer standing for layers of which `moe_fraction` are MoE layers (negative: the model's share,
  // the mean layer); a chunk costs its dense and MoE layers apart (core/partition.h LayerMix).
  LayerDims dims(double moe_fraction = -1) const;
  PassCost new_pass() const {
    PassCost p;
    p.record = record_segments_;
    return p;
  }
  void add_memory(PassCost& pass, const char* op, double bytes) const { pass.add(op, memory_s(op, bytes)); }
  // The embedding's dense gradient, zeroed and accumulated (TrainingSpec::embedding_grad_dense).
  void add_dense_embedding_grad(PassCost& backward) const;
  // The element-wise ops whose kernels depend on TrainingSpec::elementwise: one fused kernel each, or
  // the ATen kernels eager PyTorch runs them as (core/names.h Elementwise; sources in cost_model.cc).
  bool eager() const { return training_.elementwise == Elementwise::kEager; }
  // A norm over `elements` values (forward, or its backward).
  void add_norm(PassCost& pass, const char* op, double elements, bool backward) const;
  // QK-norm (ModelSpec::qk_norm) over the rank's Q and K heads, after the QKV projection (its backward before).
  void add_qk_norm(PassCost& pass, const LayerDims& d, bool backward) const;
  // RoPE on this rank's queries and keys, and under eager GQA the copies that widen K and V to every
  // query head (torchtitan's repeat_kv).
  void add_rope(PassCost& pass, const LayerDims& d, bool backward) const;
  // The MLP's activation over the inner width.
  void add_activation(PassCost& pass, const LayerDims& d, bool backward) const;
  // The cross-entropy after the LM head over `logits` values of the rank's vocabulary share, with its TP
  // all-reduces of per-token statistics, as TrainingSpec::loss_kernel runs it.
  void add_loss(PassCost& forward, PassCost& backward, double logits) const;
  void add_fp8_cast(PassCost& pass, const char* op, double elements) const {
    if (fp8_) pass.add(op, fp8_cast_s(op, elements));
  }
  LayerForwardParts op_recompute_parts() const;
  PassCost layer_forward(bool with_tp_comm, const LayerForwardParts& parts = {}, double moe_fraction = -1) const;
  void layer_backward(PassCost& input_grad, PassCost& weight_grad, double moe_fraction = -1) const;
  double flash_bytes() const;
  double unfused_matmul_bytes() const;
  double flash_efficiency(double forward_flops) const;
  // ZeRO-3: one layer's units in the order a pass's hooks reach them, each with the compute from its
  // hook to the next and its gather (zero3_prefetch_wait_s): the layer itself (`layer`, its pass), or
  // under Zero3Unit::kModule its four linear modules. Empty where the pass's segments do not name every
  // module.
  std::vector<Zero3Step> zero3_layer_steps(bool backward, const PassCost& layer) const;
  // The same, from the layer's pass (its forward, or its backward's input-gradient pass) as chunk() has it.
  double zero3_prefetch_wait_s(int stage, int chunk, bool backward, const PassCost& layer) const;
  // The parameters of one layer's four linear modules on one TP rank (Megatron's fused QKV and fc1),
  // in forward order, and those of the rest that DeepSpeed partitions (0 where every one of them is
  // below its persistence threshold), gathered with the QKV.
  struct Zero3Modules {
    double linear[4];
    double rest;
  };
  Zero3Modules zero3_modules() const;
  PassCost attention_core_forward() const;
  PassCost attention_core_backward() const;
  // Context parallelism's attention (cp > 1) on this rank's s/cp query tokens, by kind.
  PassCost cp_attention(bool backward) const;
  void cp_ring_attention(PassCost& p, bool backward) const;
  // One ring step's attention tile (the causal cases TransformerEngine and PyTorch share): its time and
  // the FLOPs it runs, in the forward or (2.5×) the backward.
  struct RingTile {
    double seconds, flops;
  };
  RingTile ring_tile(bool backward) const;
  void cp_a2a_attention(PassCost& p, bool backward) const;
  void cp_all_gather_attention(PassCost& p, bool backward) const;
  // PyTorch's ring attention (TrainingSpec::cp_attention pytorch), either exchange (p2p or all_gather).
  void cp_pytorch_attention(PassCost& p, bool backward) const;
  // One flash-attention kernel of `forward_flops` (its backward: `times` = 2.5) over `rows` query
  // tokens and `cols` key tokens it computes (after causal masking).
  double flash_kernel_s(double forward_flops, double rows, double cols, double times) const;
  double tp_comm_s(Collective c, double bytes) const { return collectives_.time_s(c, bytes, tp_group()); }
  // The copy of a whole [b, s, h] tensor that a sequence-parallel all-gather or reduce-scatter on the
  // second dimension needs (TrainingSpec::sp_collective_copies), `share` of one; nothing otherwise.
  void add_sp_copy(PassCost& pass, const LayerDims& d, double share) const;
  // A GEMM of `gemm_s` with a collective of `comm_s` started beside it (Megatron-LM's async TP
  // communication): while the collective runs it holds collective_sm_fraction of the SMs and the
  // GEMM runs on the rest. The GEMM's time, and what of the collective outlasts it.
  struct Overlap {
    double compute_s, exposed_s;
  };
  Overlap overlapped(double gemm_s, double comm_s) const;
  double norm_reduce_s() const;  // grad_norm_reduce_s, computed once

  ModelSpec model_;
  TrainingSpec training_;
  ParallelConfig config_;
  const ClusterSpec* cluster_;
  const CollectiveModel& collectives_;
  double tokens_ = 0;  // b·s/cp per micro-batch: the tokens this rank's layers work on
  double seq_ = 0;     // the whole sequence s
  double layer_params_ = 0;
  std::vector<StageParams> stage_params_;  // by stage, as loom::stage_params gives them
  double grad_norm_reduce_s_ = 0;
  bool separate_bias_ = false;  // the cost file has "bias" points (bias_s)
  int vocab_ = 0;               // padded for TP
  // Which measured kernel timings apply: those taken with this many ranks of a node running at
  // once (0: every entry; cost files without the tag).
  int table_ranks_ = 0;
  bool applies(int ranks) const { return ranks == 0 || table_ranks_ == 0 || ranks == table_ranks_; }
  bool record_segments_ = true;
  bool fp8_ = false;
};

}  // namespace loom::sim
