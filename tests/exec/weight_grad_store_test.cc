// Zero-bubble's weight-gradient store (exec/model/weight_grad_store.h): deferring, the work and the
// units' gradients-ready hooks wait for the W pass and run there in the order they were put, into the
// unit's gradients as the parameter source gives them then (a ZeRO-2/3 bucket its hook freed is a new
// one); not deferring, each runs where it is put. What the work reads is kept, charged to activations
// once its layer settles, and freed after the W pass.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/cpu/cpu_backend.h"
#include "exec/model/gpt_stage.h"
#include "exec/model/weight_grad_store.h"

namespace loom::exec {
namespace {

// Gradients in buckets that each unit's hook takes away (as ZeRO 2/3 reduce-scatters and frees them).
class BucketParams final : public ParameterSource {
 public:
  TensorRef acquire(int) override { return {}; }
  void release(int) override {}
  float* gradients(int unit) override {
    auto& bucket = buckets_[unit];
    if (bucket.empty()) bucket.assign(4, 0.0f);
    return bucket.data();
  }
  void gradients_ready(int unit) override {
    log.push_back("ready " + std::to_string(unit) + ": " + std::to_string(buckets_[unit][1]));
    buckets_[unit].clear();
  }
  std::vector<std::string> log;

 private:
  std::map<int, std::vector<float>> buckets_;
};

WeightGradStore::Work add(float value, std::vector<std::string>& log, const char* what) {
  return [value, &log, what](float* grads) {
    *grads += value;
    log.push_back(what);
  };
}

// A store over BucketParams on the CPU backend, with unit `unit` registered and one piece of work put
// into its second value.
struct StoreWithWork {
  CpuBackend backend;
  BucketParams params;
  WeightGradStore store;
  StoreWithWork(bool deferred, int unit, float value, const char* what) : store(params, backend, deferred, nullptr) {
    float* g = params.gradients(unit);
    store.set_unit(unit, g, 4);
    store.put("qkv_bwd", g + 1, add(value, params.log, what));
  }
};

TEST(WeightGradStore, DeferredWorkAndHooksRunInTheWPassIntoTheGradientsOfThen) {
  StoreWithWork s(/*deferred=*/true, 0, 2.0f, "work mb0");
  BucketParams& params = s.params;
  WeightGradStore& store = s.store;
  store.ready(0);
  store.close(0);
  EXPECT_TRUE(params.log.empty());  // nothing ran in the B pass
  EXPECT_EQ(store.pending(), 1u);
  // An earlier W pass took the bucket away (its hook ran): the work adds into the new one, at its offset.
  params.gradients_ready(0);
  store.run(0);
  EXPECT_EQ(params.log, (std::vector<std::string>{"ready 0: 0.000000", "work mb0", "ready 0: 2.000000"}));
  EXPECT_EQ(store.pending(), 0u);
  EXPECT_THROW(store.run(0), std::logic_error);  // a W pass before (or without) its B pass
  store.set_unit(0, params.gradients(0), 4);
  EXPECT_THROW(store.put("outside", params.gradients(1), add(1.0f, params.log, "never")), std::logic_error);
}

TEST(WeightGradStore, NotDeferringEachRunsWhereItIsPut) {
  StoreWithWork s(/*deferred=*/false, 3, 5.0f, "work");
  BucketParams& params = s.params;
  WeightGradStore& store = s.store;
  CpuBackend& backend = s.backend;
  EXPECT_EQ(params.log, std::vector<std::string>{"work"});
  store.ready(3);
  EXPECT_EQ(params.log.back(), "ready 3: 5.000000");
  Tensor t = backend.alloc(16, 16, MemoryCategory::kWorkspace);
  store.keep(std::move(t));  // freed at once
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kWorkspace), 0);
  store.close(0);
  EXPECT_EQ(store.pending(), 0u);
}

TEST(WeightGradStore, KeptTensorsCountAsActivationsOnceTheirLayerSettlesAndGoAfterTheWPass) {
  CpuBackend backend;
  BucketParams params;
  WeightGradStore store(params, backend, /*deferred=*/true, nullptr);
  const std::int64_t bytes = 64 * 32 * 4;
  store.keep(backend.alloc(64, 32, MemoryCategory::kWorkspace));
  store.keep(Tensor());  // an empty tensor (an all-gather SP did not need) is nothing to keep
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kWorkspace), bytes);
  store.settle();
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kWorkspace), 0);
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kActivations), bytes);
  store.close(2);
  store.run(2);
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kActivations), 0);
}

}  // namespace
}  // namespace loom::exec
