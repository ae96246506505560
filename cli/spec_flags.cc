#include "cli/spec_flags.h"

#include <type_traits>

#include <fmt/format.h>

#include "cli/command.h"

namespace loom::cli {

namespace {

// A bool is a flag; any other value an option (a string shows its default in the help).
template <typename T>
CLI::Option* bind_flag(CLI::App& app, const std::string& flag, T& value, const std::string& help) {
  if constexpr (std::is_same_v<T, bool>) {
    return app.add_flag(flag, value, help);
  } else {
    CLI::Option* option = app.add_option(flag, value, help);
    if constexpr (std::is_same_v<T, std::string>) option->capture_default_str();
    return option;
  }
}

}  // namespace

std::vector<CLI::Option*> SpecFlags::add_to(CLI::App& app, const std::string& default_model,
                                            const std::string& default_cluster, bool required) {
  std::vector<CLI::Option*> options;
  inputs.model = default_model;
  inputs.cluster = default_cluster;
  for_each_spec_flag(inputs, [&](const char* flag, auto& value, const char* help, bool needed) {
    CLI::Option* option = bind_flag(app, flag, value, help);
    options.push_back(option);
    if (required && needed) option->required();
    // An integer input left at 0 means "the default" (--seq: the model's; --grad-bytes: the training's):
    // given as 0 on the command line it would silently mean that too.
    using T = std::remove_reference_t<decltype(value)>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      if (!needed && value == 0)
        option->check(CLI::Validator(
            [](std::string& text) {
              return text.find_first_not_of("0+- ") == std::string::npos
                         ? fmt::format("{} must be at least 1 (leave it out for the default)", text)
                         : std::string();
            },
            "", "not zero"));
  });
  return options;
}

Specs SpecFlags::resolve() const { return value_or_exit(resolve_specs(inputs)); }

std::vector<CLI::Option*> ConfigFlags::add_to(CLI::App& app, bool lists) {
  std::vector<CLI::Option*> options;
  for_each_config_flag(text, lists, [&](const char* flag, std::string& value, const std::string& help) {
    options.push_back(app.add_option(flag, value, help));
  });
  for_each_split_switch(text, [&](const char* flag, std::string& value, const std::string& help) {
    options.push_back(app.add_flag_callback(
        flag, [&value] { value = "on"; }, help));
  });
  return options;
}

SearchSpace ConfigFlags::search_space() const { return value_or_exit(parse_search_space(text)); }

ParallelConfig ConfigFlags::single(int gpus) const { return value_or_exit(parse_parallel_config(text, gpus)); }

}  // namespace loom::cli
