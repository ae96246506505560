// Built-in model presets (published architectures) and cluster presets (the cost files under
// profiles/, embedded in the binary), plus the lookups `--model` and `--cluster` use.
#pragma once

#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/result.h"

namespace loom {

std::vector<std::string> model_preset_names();
std::vector<std::string> cluster_preset_names();
Result<ModelSpec> model_preset(const std::string& name);
Result<ClusterSpec> cluster_preset(const std::string& name);
// The JSON text of an embedded cost file (for `loom profile`-style inspection and tests).
Result<std::string> cluster_preset_text(const std::string& name);

// The architecture families of the presets: GPT (GeLU, LayerNorm, learned positions, tied embeddings,
// biases, dropout, ffn 4·hidden) and LLaMA (SwiGLU, RMSNorm, rotary positions, untied, no biases or dropout).
ModelSpec gpt_shape(std::string name, int layers, int hidden, int heads, int vocab, int seq);
ModelSpec llama_shape(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn, int vocab, int seq);

// `--model`: a preset name, a Loom model JSON file, a Hugging Face config.json, or a checkpoint directory
// holding one.
Result<ModelSpec> load_model(const std::string& name_or_path);
// `--cluster`: a preset name or a cluster/cost JSON file.
Result<ClusterSpec> load_cluster(const std::string& name_or_path);

// The closest candidate by edit distance, for "did you mean" hints; empty when nothing is close.
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace loom
