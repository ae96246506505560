// Published H100/H200/B200 training runs (../shared/validation/h100_public.json: NeMo, Megatron-Bridge,
// torchtitan and NeMo-AutoModel performance tables), each read into the model, training and parallel
// configuration it names and simulated on the matching cluster preset. A row Loom cannot express yet is
// kept with the reason, so the report says how much of the file the simulator covers.
#pragma once

#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/training_spec.h"

namespace loom {

struct PublicRun {
  std::string id;
  std::string source;   // the source's name (NeMo 24.07 performance summary, ...)
  std::string cluster;  // the preset it is simulated on: dgx-h100, dgx-h200 or dgx-b200
  ModelSpec model;
  TrainingSpec training;
  ParallelConfig config;
  double published_s = 0;  // step time the row publishes or derives; 0: none (TFLOP/s only)
  std::string refused;     // why the row is not simulated; empty: it is
  double predicted_s = 0;
  double predicted_peak_gib = 0;
  // Peak memory per GPU where the row publishes one (torchtitan's logs: the caching allocator's max
  // reserved, GiB); 0: none.
  double published_peak_gib = 0;
  // Rows that publish model TFLOP/s per GPU (the long-sequence table, whose FLOP formula is not
  // stated, so they are shown beside Loom's, not scored): the published figure and Loom's.
  double published_tflops = 0;
  double predicted_tflops = 0;
  std::string micro_batch_note;  // empty: the row's own micro-batch; else how Loom chose one
  // The row names no recompute ("recompute": null): none is simulated where it fits in memory, else the
  // fastest recompute that fits, which `recompute_note` then names.
  bool recompute_published = true;
  std::string recompute_note;
  std::string config_note;  // empty: the row's configuration as printed; else how Loom read it
  bool simulated() const { return refused.empty(); }
  bool scored() const { return simulated() && published_s > 0; }
  double error() const { return (predicted_s - published_s) / published_s; }
  bool memory_scored() const { return simulated() && published_peak_gib > 0; }
  double memory_error() const { return (predicted_peak_gib - published_peak_gib) / published_peak_gib; }
};

// Reads the file and simulates every row it can express. Bad input: the file is not that file.
Result<std::vector<PublicRun>> reproduce_public_runs(const std::string& json_path);

// Step-time error over the scored rows (simulated, with a published step time) of one source, or of
// all of them (source ""); counts of the rows in it, simulated and refused.
struct PublicRunsSummary {
  std::string source;
  int rows = 0, simulated = 0, scored = 0;
  double mean_abs_error = 0, max_abs_error = 0, mean_error = 0;
};
// One summary per source in the file's order, then the overall one.
std::vector<PublicRunsSummary> summarize(const std::vector<PublicRun>& runs);

}  // namespace loom
