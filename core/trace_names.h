// Names of trace slices shared by the simulator's and the executor's Chrome/Perfetto traces, so a
// simulated and a measured step can be laid side by side.
//   F<chunk> mb<i>  forward of model chunk <chunk> (= pipeline stage, or vpp·stage index) on micro-batch i
//   B<chunk> mb<i>  backward (input and weight gradients together)
//   W<chunk> mb<i>  weight-gradient half of the backward (zero-bubble schedules only)
//   <collective> <group>  e.g. "all_reduce dp", "reduce_scatter tp", "all_gather dp", "send F3 mb7", "recv B2 mb1"
//   optimizer       the optimizer step
//   Context parallelism, ring kind (cp ranks, ring step i of cp, 1-based):
//   flash_attention ring <i>/<cp>, flash_attention_bwd ring <i>/<cp>  the attention tile of step i
//   send_recv cp ring <i>/<cp> <kv|kv+dkv|dkv>  the transfer posted at step i, beside its tile
//   wait cp ring <i>/<cp>  the part of that transfer the tile does not hide (the next step waits)
//   all_to_all cp, all_gather cp, reduce_scatter cp  the exchanges of the a2a and all_gather kinds
#pragma once

#include <string>

#include <fmt/format.h>

#include "core/names.h"

namespace loom::trace_names {

inline std::string forward(int chunk, long long micro_batch) { return fmt::format("F{} mb{}", chunk, micro_batch); }
inline std::string backward(int chunk, long long micro_batch) { return fmt::format("B{} mb{}", chunk, micro_batch); }
inline std::string weight_grad(int chunk, long long micro_batch) { return fmt::format("W{} mb{}", chunk, micro_batch); }
inline std::string collective(const char* kind, const char* group) { return fmt::format("{} {}", kind, group); }
inline std::string collective(Collective kind, const char* group) { return collective(to_string(kind), group); }
inline constexpr const char* kOptimizer = "optimizer";
inline std::string cp_ring_tile(bool backward, int step, int cp) {
  return fmt::format("{} ring {}/{}", backward ? "flash_attention_bwd" : "flash_attention", step + 1, cp);
}
inline std::string cp_ring_send(int step, int cp, const char* payload) {
  return fmt::format("send_recv cp ring {}/{} {}", step + 1, cp, payload);
}
inline std::string cp_ring_wait(int step, int cp) { return fmt::format("wait cp ring {}/{}", step + 1, cp); }

}  // namespace loom::trace_names
