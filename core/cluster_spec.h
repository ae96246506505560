// ClusterSpec: the hardware a plan runs on, as read from a cost file (profiles/*.json).
// The same schema holds datasheet-derived profiles and ones measured by `loom profile`;
// measured tables (GEMM times, collective points) are optional and win over the analytic model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom {

struct DeviceSpec {
  std::string name;
  double memory_bytes = 0;  // usable device memory
  double peak_flops = 0;    // dense bf16/fp16 tensor-core FLOP/s (fp32 on CPUs)
  double memory_bandwidth_bytes_per_s = 0;
  // Dense FP8 (E4M3/E5M2) and FP4 tensor-core FLOP/s; 0: the device has none (A100, CPUs: no FP8;
  // Hopper: no FP4). Datasheets list them "with sparsity", twice the dense figure.
  double peak_fp8_flops = 0;
  double peak_fp4_flops = 0;
  // Hopper's FP8 tensor cores take only "TN" operands, so each FP8 operand is also stored transposed
  // (TransformerEngine docs, performance_considerations.rst); Blackwell reads either layout.
  bool fp8_gemm_tn_only = false;
};

// Achieved GEMM throughput as a function of problem size:
//   flops_per_s = peak · max_efficiency · w / (w + half_saturation_flops)     (w = 2·m·n·k)
// plus a fixed launch overhead. Measured tables (below) replace the curve where present.
struct ComputeEfficiency {
  double gemm_max_efficiency = 1.0;
  double gemm_half_saturation_flops = 0.0;
  // FP8 GEMM ceiling as a fraction of peak_fp8_flops (0: none known; FP8 GEMMs then reach the bf16
  // fraction). Its half-saturation size is the bf16 one scaled by peak_fp8_flops / peak_flops: the
  // curve stands for a fixed per-GEMM time, in which the faster unit does proportionally more work.
  double gemm_fp8_max_efficiency = 0.0;
  // The same ceiling for rowwise-scaled FP8 GEMMs (Fp8Recipe::kRowwise), measured: 0 when this GPU's
  // was not, and the recipe is refused on it (bench/gpu/fp8_gemm.py measures it).
  double gemm_fp8_rowwise_max_efficiency = 0.0;
  double memory_bound_efficiency = 1.0;     // fraction of peak memory bandwidth element-wise kernels reach
  double kernel_launch_s = 0.0;             // per kernel
  double flash_attention_efficiency = 0.0;  // fraction of peak for fused attention; 0 → use GEMM curve
  // Fused attention's efficiency falls on small shards (few heads per GPU): with this > 0 it is
  // flash_attention_efficiency · w / (w + this), w = the layer's attention FLOPs, forward + backward.
  double flash_attention_half_saturation_flops = 0.0;
  // The same curve for FlashAttention-2's kernels (TrainingSpec::flash_kernel fa2: PyTorch's
  // FLASH_ATTENTION backend), where they differ from the fused attention above; 0: the GPU has no
  // figure of its own for them and fa2 runs at flash_attention_* (the A100's is FlashAttention-2's).
  double fa2_attention_efficiency = 0.0;
  double fa2_attention_half_saturation_flops = 0.0;
  // Memory-bound ops whose kernels reach a different fraction of peak bandwidth than the plain
  // element-wise ones, by the cost model's op name (e.g. "softmax": a row reduction, one warp per
  // row); ops not named use memory_bound_efficiency. A measured memory_op_table entry wins over both.
  std::map<std::string, double, std::less<>> memory_op_efficiency;
  // Fraction of the GPU's SMs a collective holds while it runs beside compute (NCCL launches one
  // thread block per channel and it keeps its SM until the collective ends): a GEMM overlapped
  // with a collective runs on the rest. 0: overlapped communication costs compute nothing.
  double collective_sm_fraction = 0.0;
};

struct GemmPoint {
  std::int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
  // Ranks of the node running kernels at once when this was timed (a host's cores share caches
  // and memory bandwidth; `loom profile` times every kernel alone and with all its ranks); 0: any.
  int ranks = 0;
};

struct LinkSpec {
  double bandwidth_bytes_per_s = 0;  // per GPU, one direction
  double latency_s = 0;              // per hop (α)
};

// A fitted α–β line for one collective at one link level and group size:
//   t = alpha_s · steps(n) + bus_factor(n) · bytes / bus_bandwidth_bytes_per_s
struct CollectiveFit {
  // Names from core/names.h (kCollectiveNames, kLinkLevelNames); the cost-file reader rejects others.
  std::string collective;
  std::string level;
  int group_size = 0;
  double alpha_s = 0;
  double bus_bandwidth_bytes_per_s = 0;
  double r2 = 0;
  // The message sizes this line was fitted on (one line per size regime); 0, 0: every size.
  double min_bytes = 0, max_bytes = 0;
};

struct CollectivePoint {
  std::string collective;
  std::string level;
  int group_size = 0;
  double bytes = 0;
  double seconds = 0;
};

// A measured memory-bound kernel: `seconds` to run op `op` on `bytes` (counted as the cost model
// charges that op). Where a cost file has these, the op's time is interpolated from them instead
// of bytes / (bandwidth · memory_bound_efficiency): on CPUs a tanh-GELU is compute-bound while a
// residual add streams, and no single efficiency fits both.
struct MemoryOpTime {
  std::string op;
  double bytes = 0;
  double seconds = 0;
  int ranks = 0;  // as GemmPoint::ranks
};

struct ClusterSpec {
  std::string name;
  std::string description;
  int gpus_per_node = 1;
  int max_nodes = 0;  // 0: as many nodes as the plan asks for
  DeviceSpec device;
  ComputeEfficiency compute;
  LinkSpec intra_node;
  LinkSpec inter_node;
  double framework_reserve_bytes = 0;  // CUDA context, library handles, allocator fragmentation
  std::vector<GemmPoint> gemm_table;
  std::vector<MemoryOpTime> memory_op_table;
  std::vector<CollectiveFit> collective_fits;
  std::vector<CollectivePoint> collective_points;
  // The library the collectives run on: "nccl" costs a group spanning nodes with NCCL's own
  // algorithm and protocol choice (sim/nccl_tuning.h) where no inter-node measurement exists;
  // empty (hosts, MPI): the α–β lines only. NCCL's network post overhead and LL bandwidth cap
  // depend on the host CPU's vendor ("amd" or "intel").
  std::string collective_library;
  std::string host_cpu_vendor;
  std::map<std::string, std::string> provenance;  // host, date, versions, sources

  double gpu_memory_gib() const;
};

}  // namespace loom
