// FLOPs of a step (core/flops.h), the one definition `loom sim`, `loom plan` and `loom run` report:
// DESIGN.md's closed forms for a GPT model, with the model's own (unpadded) vocabulary.
#include <gtest/gtest.h>

#include "core/flops.h"
#include "core/presets.h"

namespace loom {
namespace {

struct Gpt {
  ModelSpec model = *model_preset("gpt3-175b");
  double B = 1536, s = model.seq_len, L = model.layers, h = model.hidden, V = model.vocab;
};

TEST(Flops, ModelFlopsAreDesignsClosedFormWithTheModelsVocabulary) {
  const Gpt g;
  ASSERT_NE(g.model.vocab, padded_vocab(g.model.vocab, 8));  // 50257: padding would show
  const double closed = 72 * g.B * g.s * g.L * g.h * g.h * (1 + g.s / (6 * g.h) + g.V / (12 * g.L * g.h));
  EXPECT_NEAR(model_flops_per_step(g.model, 1536, g.model.seq_len), closed, 1e-12 * closed);
}

TEST(Flops, FullRecomputeAddsUpToDesignsClosedForm) {
  const Gpt g;
  const double closed = 96 * g.B * g.s * g.L * g.h * g.h * (1 + g.s / (6 * g.h) + g.V / (16 * g.L * g.h));
  const double hardware = model_flops_per_step(g.model, 1536, g.model.seq_len) +
                          recompute_flops_per_step(g.model, 1536, g.model.seq_len, Recompute::kFull);
  EXPECT_NEAR(hardware, closed, 1e-12 * closed);
}

TEST(Flops, SelectiveRecomputeRepeatsOnlyTheAttentionScores) {
  const Gpt g;
  const double attention = 4 * g.B * g.s * g.s * g.h * g.L;  // QK^T and AV, forward
  EXPECT_NEAR(recompute_flops_per_step(g.model, 1536, g.model.seq_len, Recompute::kSelective), attention,
              1e-12 * attention);
  EXPECT_EQ(recompute_flops_per_step(g.model, 1536, g.model.seq_len, Recompute::kNone), 0.0);
}

TEST(Flops, TflopsPerGpuDividesByTimeAndGpus) { EXPECT_DOUBLE_EQ(tflops_per_gpu(8e15, 2.0, 4), 1000.0); }

}  // namespace
}  // namespace loom
