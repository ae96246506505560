// ZeRO-3's parameter gathers as the frameworks issue them (issue: "ZeRO-3 / FSDP as frameworks run it",
// limited prefetch). Each unit (a layer, or a linear module for DeepSpeed) is gathered before it computes.
// As a unit's compute starts, its hook issues the gathers of the units after it, up to a prefetch limit:
// FSDP1 and FSDP2 one unit ahead, DeepSpeed until stage3_prefetch_bucket_size elements (5e7) are newly
// in flight, at least one unit (../shared/reference/collectives-at-scale.md §4). The gathers run one after
// another on the data-parallel channel; a unit computes once its own gather has arrived and the unit before
// it has computed.
//
// With one unit ahead, unit i+1's gather starts as unit i computes, so the pair takes max(c_i, g_{i+1}):
// units alike (layers) lose nothing beyond max(Σc, Σg), but DeepSpeed's modules do. A GPT-3 175B layer
// without TP over 1,536 A100s (dgx-a100-80gb, DeepSpeed's unfused attention, full recompute): the QKV GEMM
// and the attention core compute for 11 ms while the projection's 151 M parameters gather (5.2 ms), but the
// projection computes for 2.5 ms while fc1's 604 M gather (10.3 ms). The layer's forward takes 41 ms where
// its sums, 32 ms of compute and 34 ms of gathers, would take 34.
#pragma once

#include <span>

namespace loom::sim {

// One unit of a pass, in the order its hooks fire.
struct Zero3Step {
  double compute_s = 0;  // from the unit's hook to the next unit's
  double gather_s = 0;   // its parameter all-gather
  double elements = 0;   // parameters it gathers (DeepSpeed's prefetch counts elements)
};

// A pass over `layers` repetitions of `layer`'s units: the time the compute waits for gathers beyond the
// larger of the pass's compute and its gathers after the first, which the step graph's one gather per
// pass already charges. The first unit's gather was prefetched behind the pass before. Prefetch
// `prefetch_elements` per hook, at least one unit (0: one unit ahead).
double zero3_prefetch_wait_s(std::span<const Zero3Step> layer, int layers, double prefetch_elements);

}  // namespace loom::sim
