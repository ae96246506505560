// The spec flags every subcommand that takes specs shares (--model, --cluster, --gpus, ...) and the
// parallel-config flags (--tp ... --schedule, one value or, in `plan`, a comma list), bound to
// core's SpecInputs and the planner's ConfigText; resolving and parsing happen below cli/.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/spec_inputs.h"
#include "planner/search_space.h"

namespace loom::cli {

struct SpecFlags {
  SpecInputs inputs;

  // `required` makes --model/--gpus/--global-batch mandatory; defaults fill the rest. Returns the options.
  std::vector<CLI::Option*> add_to(CLI::App& app, const std::string& default_model, const std::string& default_cluster,
                                   bool required);
  Specs resolve() const;  // throws InputError with one clear line
};

struct ConfigFlags {
  ConfigText text;

  std::vector<CLI::Option*> add_to(CLI::App& app, bool lists);  // returns the options
  SearchSpace search_space() const;                             // throws InputError
  ParallelConfig single(int gpus) const;                        // throws InputError
};

}  // namespace loom::cli
