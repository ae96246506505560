// The parallel-config inputs (--tp ... --schedule) as the text a user types: one value or a comma
// list each. Parsed into the planner's search restrictions, or into one configuration, with one
// clear line naming the flag on bad input. `loom` and `loom-gui` read them identically.
#pragma once

#include <string>

#include "core/parallel_config.h"
#include "core/result.h"
#include "planner/enumerate.h"

namespace loom {

struct ConfigText {
  std::string tp, pp, dp, zero, micro_batch, vpp, recompute, sp, schedule;  // empty: not restricted
  std::string shard_group;  // ZeRO-3's shard group (HSDP); empty: all dp ranks and one node's
  std::string cp, cp_comm;  // context parallelism and how its ranks exchange keys and values
  std::string ep;           // expert parallelism (MoE models)
  std::string etp;          // expert tensor parallelism: "tp" (the default) or a size, e.g. 1
  // The pipeline split (one value each; any of them set fixes the split the search uses):
  // Megatron-LM's first/last stage layer counts, and "on" to count the embedding/loss as a layer;
  // or every stage's layers as one comma list ("7,9,9,7", which also fixes pp to its length).
  std::string first_stage_layers, last_stage_layers, account_for_embedding, account_for_loss;
  std::string stage_layers;
};

Result<SearchSpace> parse_search_space(const ConfigText& text);

// One configuration: each field one value; unset ones default (tp, cp, pp 1; dp gpus/(tp·cp·pp);
// ring (p2p) CP; zero 0; micro-batch 1; vpp 1; no recompute; no SP; 1F1B, or interleaved when
// vpp > 1; the even split). tp·cp·pp·dp must be `gpus`.
Result<ParallelConfig> parse_parallel_config(const ConfigText& text, int gpus);

// Calls visit(flag, field, help) for every field; `lists` says each takes a comma list (`loom plan`).
template <typename Visit>
void for_each_config_flag(ConfigText& c, bool lists, Visit&& visit) {
  const std::string each = lists ? " (one value or a comma list)" : "";
  visit("--tp", c.tp, "tensor-parallel size" + each);
  visit("--cp", c.cp, "context-parallel size: each sequence split over this many ranks" + each);
  visit("--cp-comm", c.cp_comm,
        "how context-parallel ranks exchange keys and values: p2p (ring), a2a (Ulysses; TransformerEngine only) or "
        "all_gather (default: p2p; `plan` under --cp-attention pytorch: all_gather, torchtitan's default)" +
            each);
  visit("--pp", c.pp, "pipeline-parallel size" + each);
  visit("--ep", c.ep,
        "expert-parallel size: an MoE layer's experts split over this many ranks of the data-parallel group" + each);
  visit("--etp", c.etp,
        "expert tensor-parallel size: tp (experts split like the MLP, the default) or 1 (experts whole, EP folded over "
        "TP ranks; needs --sp on)" +
            each);
  visit("--dp", c.dp, "data-parallel size" + each);
  visit("--zero", c.zero, "ZeRO stage 0-3" + each);
  visit("--shard-group", c.shard_group,
        "ZeRO-3 shards over groups of this many data-parallel ranks, replicated across groups (HSDP); 0 or dp: all "
        "of them" +
            each);
  visit("--micro-batch", c.micro_batch, "sequences per micro-batch" + each);
  visit("--vpp", c.vpp, "virtual pipeline chunks per stage" + each);
  visit("--recompute", c.recompute, "none, selective, full or op (torchtitan's op-level SAC)" + each);
  visit("--sp", c.sp, "sequence parallelism on or off" + each);
  visit("--schedule", c.schedule, "gpipe, 1f1b, interleaved or zb" + each);
  visit("--first-stage-layers", c.first_stage_layers,
        std::string("layers of the first pipeline stage (Megatron-LM's --decoder-first-pipeline-num-layers)"));
  visit("--last-stage-layers", c.last_stage_layers,
        std::string("layers of the last pipeline stage (Megatron-LM's --decoder-last-pipeline-num-layers)"));
  visit("--stage-layers", c.stage_layers,
        std::string("the layers of every pipeline stage, one comma list in stage order (e.g. 7,9,9,7: uneven "
                    "stages as torchtitan's split points or Megatron-core's pipeline layout set them); pp is its "
                    "length"));
}

// The split's switches, bare flags on the command line: visit(flag, field, help); a given switch
// sets its field to "on".
template <typename Visit>
void for_each_split_switch(ConfigText& c, Visit&& visit) {
  visit("--account-for-embedding", c.account_for_embedding,
        std::string("count the embedding as a layer in the pipeline split (Megatron-LM)"));
  visit("--account-for-loss", c.account_for_loss,
        std::string("count the loss as a layer in the pipeline split (Megatron-LM)"));
}

}  // namespace loom
