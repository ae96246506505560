// The whole single-rank model against PyTorch: logits, loss and gradients of a GPT, of a
// LLaMA-shaped variant (RMSNorm, SwiGLU, GQA, RoPE, untied head) and of a mixture-of-experts one
// (router, top-2 of 4 routed experts, a shared expert, a dense first layer; and Qwen2-MoE's sigmoid-gated
// shared expert on every other layer; and QK-norm per head, as Qwen3, and over the full width, as OLMo 2)
// with identical initial values.
// The reference values come from tests/exec/reference/gpt_reference.py (committed JSON).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/json_io.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/model/gpt_stage.h"
#include "exec/parallel/zero.h"
#include "exec/process_groups.h"

namespace loom::exec {
namespace {

std::vector<int> token_stream(int n, int vocab) {
  std::vector<int> s(n);
  for (int i = 0; i < n; ++i) s[i] = (i * 7 + (i * i) % 11 + 3) % vocab;
  return s;
}

class ExecReferenceModel : public ::testing::TestWithParam<int> {};

TEST_P(ExecReferenceModel, MatchesPyTorch) {
  auto file = read_json_file(std::string(LOOM_SOURCE_DIR) + "/tests/exec/reference/gpt_reference.json");
  ASSERT_TRUE(file.ok()) << file.error().message;
  const Json& ref = (*file)["cases"][GetParam()];
  auto model = model_from_json(ref["model"]);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const int batch = ref["batch"].get<int>(), seq = model->seq_len;

  ParallelConfig config{.micro_batch = batch};
  ProcessGroups groups = single_rank_groups(config);
  CpuBackend backend;
  StageLayout layout = make_stage_layout(*model, config, 0, 0);
  TensorParallel tp(*groups.tp, backend, false, nullptr);
  ParameterStore params(layout, groups, backend, nullptr);
  params.initialize(ref["seed"].get<std::uint64_t>());
  GptStage stage(*model, config, layout, seq, backend, tp, params);
  stage.keep_logits = true;

  const std::vector<int> stream = token_stream(batch * seq + 1, model->vocab);
  std::vector<int> tokens(stream.begin(), stream.end() - 1), targets(stream.begin() + 1, stream.end());
  // The reference's sequences are consecutive windows of one stream, as here.
  params.begin_step(1);
  params.begin_micro_batch(0);
  const MicroBatch mb{tokens.data(), targets.data()};
  const float scale = 1.0f / static_cast<float>(batch * seq);
  backend.loss_reset();
  stage.forward(0, mb, Tensor(), scale);
  const double loss_sum = backend.loss_result();
  EXPECT_NEAR(loss_sum / (batch * seq), ref["loss"].get<double>(), 1e-5);

  const int vocab_cols = layout.dims.vocab_local;
  for (const auto& l : ref["logits"]) {
    const int r = l[0].get<int>(), c = l[1].get<int>();
    EXPECT_NEAR(stage.logits[static_cast<std::size_t>(r) * vocab_cols + c], l[2].get<double>(), 2e-5)
        << "logit " << r << "," << c;
  }
  stage.backward(0, mb, Tensor());

  int checked = 0;
  for (std::size_t u = 0; u < layout.units.size(); ++u) {
    const std::vector<float> grads = params.unit_gradients(static_cast<int>(u));
    for (const ParamSlot& slot : layout.units[u].params) {
      ASSERT_TRUE(ref["grads"].contains(slot.name)) << slot.name;
      for (const auto& pick : ref["grads"][slot.name]) {
        const std::int64_t i = pick[0].get<std::int64_t>();
        const double expected = pick[1].get<double>();
        EXPECT_NEAR(grads[slot.offset + i], expected, 1e-6 + 2e-4 * std::fabs(expected))
            << slot.name << "[" << i << "]";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

INSTANTIATE_TEST_SUITE_P(GptLlamaAndMoe, ExecReferenceModel, ::testing::Values(0, 1, 2, 3, 4, 5));

}  // namespace
}  // namespace loom::exec
