// Import of Hugging Face `config.json` files (LLaMA/Mistral/Qwen2/Gemma, GPT-NeoX, Phi, Falcon, GPT-2 and
// GPT-BigCode field names, multimodal text_config) into a ModelSpec, so a downloaded model can be planned for.
#pragma once

#include <string>

#include "core/json_io.h"
#include "core/model_spec.h"
#include "core/result.h"

namespace loom {

bool looks_like_hf_config(const Json& json);
// `source` names the file in error messages ("PATH: 'hidden_act' ..."); the name is the config's
// _name_or_path, else `fallback_name`.
Result<ModelSpec> model_from_hf_config(const Json& json, const std::string& fallback_name,
                                       const std::string& source = "config.json");

}  // namespace loom
