// The ParameterStore under mixed precision, on the CPU backend made to report bf16 as its compute
// dtype (its casts and AdamW's copy are real; its GEMMs would refuse bf16, so no model runs here):
// Megatron's 2 + 4 + 12 bytes per parameter, and a step equal to the fp32 step rounded to bf16.
#include <gtest/gtest.h>

#include "core/json_io.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/parallel/zero.h"
#include "exec/process_groups.h"
#include "kernels/numerics.h"

namespace loom::exec {
namespace {

class Bf16ComputeCpu final : public CpuBackend {
 public:
  DType compute_dtype() const override { return DType::kBF16; }
};

ModelSpec micro_model() {
  auto file = read_json_file(std::string(LOOM_SOURCE_DIR) + "/tests/exec/data/micro.json");
  EXPECT_TRUE(file.ok());
  auto model = model_from_json(*file);
  EXPECT_TRUE(model.ok());
  return *model;
}

// One optimizer step with the same made-up gradients; returns every unit's parameters.
std::vector<std::vector<float>> step_once(Backend& backend, const ModelSpec& model, int zero) {
  ParallelConfig config{.micro_batch = 1};
  config.zero = zero;
  ProcessGroups groups = single_rank_groups(config);
  StageLayout layout = make_stage_layout(model, groups.config, 0, 0);
  ParameterStore store(layout, groups, backend, nullptr);
  store.initialize(7);
  store.begin_step(1);
  for (std::size_t u = 0; u < layout.units.size(); ++u) {
    float* g = store.gradients(static_cast<int>(u));
    for (std::int64_t i = 0; i < layout.units[u].size; ++i) g[i] = 0.01f * static_cast<float>((i * 37) % 19 - 9);
  }
  store.optimizer_step(OptimizerSettings{}, 1e-2f, 1.0f, 1);
  std::vector<std::vector<float>> values;
  for (std::size_t u = 0; u < layout.units.size(); ++u) values.push_back(store.unit_values(static_cast<int>(u)));
  return values;
}

TEST(MixedPrecision, ParametersTakeTwoBytesGradientsFourAndTheOptimizerTwelve) {
  const ModelSpec model = micro_model();
  ProcessGroups groups = single_rank_groups(ParallelConfig{.micro_batch = 1});
  StageLayout layout = make_stage_layout(model, groups.config, 0, 0);
  Bf16ComputeCpu backend;
  ParameterStore store(layout, groups, backend, nullptr);
  std::int64_t n = 0;
  for (const Unit& u : layout.units) n += u.padded;
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kParams), 2 * n);
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kGrads), 4 * n);
  EXPECT_EQ(backend.memory().current_bytes(MemoryCategory::kOptimizer), 12 * n);
}

class MixedPrecisionZero : public ::testing::TestWithParam<int> {};

TEST_P(MixedPrecisionZero, AStepEqualsTheFp32StepRoundedToBf16) {
  const ModelSpec model = micro_model();
  CpuBackend fp32;
  Bf16ComputeCpu bf16;
  const auto reference = step_once(fp32, model, GetParam());
  const auto mixed = step_once(bf16, model, GetParam());
  ASSERT_EQ(reference.size(), mixed.size());
  std::int64_t rounded = 0;
  for (std::size_t u = 0; u < reference.size(); ++u)
    for (std::size_t i = 0; i < reference[u].size(); ++i) {
      const float expected = kernels::float_from_bf16_bits(kernels::bf16_bits_from_float(reference[u][i]));
      ASSERT_EQ(mixed[u][i], expected) << "unit " << u << " value " << i;
      rounded += expected != reference[u][i];
    }
  EXPECT_GT(rounded, 0);  // the parameters really are bf16
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, MixedPrecisionZero, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace loom::exec
