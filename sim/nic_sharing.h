// Pipeline sends and data-parallel collectives that leave the node share the GPU's network interface.
// On a DGX each GPU has its own NIC (8 per node), and NCCL sends a GPU's inter-node traffic through the
// NIC nearest to it: a stage's activation send to the next node and its gradient buckets' ring through
// the other nodes both go through that NIC. The step graph gives each its own channel (the pipe and the
// data-parallel streams of a stage), which is right only while they do not run at the same time.
//
// When they do, the NIC's bandwidth is shared equally between them (processor sharing, which two
// saturating flows on one link converge to): while both are in flight each progresses at half its rate,
// so each loses half the time they run together. Both kinds are taken as wholly bandwidth-bound on that
// NIC. share_nics() lengthens each transfer by the time the other kind ran beside it in the unshared
// schedule, and updates the schedule once. That is the exact processor-sharing result whenever the
// shared time grows one for one with the lengthening, which covers the cases a stage meets:
// - two transfers that overlap at one end: 10 µs from 0 and 10 µs from 5 µs overlap 5 µs alone; shared,
//   both run at half rate over [5, 15], so they end at 15 and 20 µs, each 5 µs later;
// - a short transfer inside a long one: a 1 µs send inside a 10 µs ring takes 2 µs, the ring 11 µs;
// - several sends, one after another, inside one ring: the ring is later by their sum.
// Where the lengthening moves other transfers into or out of each other's way (a delayed send delays
// the receiver's pass, and the collectives after it), the one correction is first-order. It is not
// iterated: one more pass of the engine per configuration keeps the planner's search at about 1.3× its
// time without sharing (bench/planner, BM_PlanGpt3_1024_EveryDimension).
//
// A send from stage s to stage r uses s's NIC to transmit and r's to receive; a ring collective uses
// both directions of every member's NIC at the same rate. So a send shares with the data-parallel
// collectives of its sender and of its receiver stage, and a collective with the stage's sends and the
// sends into it. When an outgoing and an incoming send both run beside a ring, each takes half of one
// direction, and the ring runs at half rate, not a quarter: what counts is the time covered by the
// union of the other kind's transfers, not their sum.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/engine.h"
#include "sim/step_graph.h"

namespace loom::sim {

struct NicCrossings {
  // Per stage: whether its send to the next stage and to the previous one leave the node.
  std::vector<char> forward_send, backward_send;
  // Whether the data-parallel stream's collectives of a kind leave the node (indexed by Collective).
  bool all_reduce = false, reduce_scatter = false, all_gather = false;
  bool any() const;
};

// Lengthens the crossing sends and collectives of `graph` that overlap in `timeline`, as above, and
// updates the timeline. Returns whether any did.
bool share_nics(StepGraph& graph, Timeline& timeline, const NicCrossings& crossings);

}  // namespace loom::sim
