// `loom data prepare --input TEXT --out TOKENS.bin`: byte-level tokenisation (vocabulary 256, one
// token per byte) into llm.c's .bin token format, which `loom run --data` reads.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/json_io.h"
#include "exec/data_loader.h"

namespace loom::cli {

namespace {

struct DataPrepareOptions {
  std::string input;
  std::string out;
};

int run_data_prepare(const DataPrepareOptions& o) {
  // A directory is refused by name, not read as a stream that fails; the token file's reader takes
  // fewer than 2^31 tokens, so a larger input (or a stream that never ends) stops there.
  auto read = read_text_file(o.input, 0x7fffffffULL);
  if (!read) throw InputError(fmt::format("--input: {}", read.error().message));
  const std::string& text = *read;
  if (text.size() < 2) throw InputError(fmt::format("--input: '{}' has fewer than 2 bytes", o.input));
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  if (const Status s = exec::write_token_file(o.out, tokens); !s) fail(prefix_error("--out: ", s.error()));
  fmt::print("wrote {} tokens (byte-level, vocabulary 256) to {}\n", tokens.size(), o.out);
  return kExitOk;
}

std::function<int()> add_data_command(CLI::App& root) {
  auto* data = root.add_subcommand("data", "prepare training data");
  data->require_subcommand(1);
  auto* prepare = data->add_subcommand("prepare", "tokenise a text file into an llm.c .bin token file");
  auto options = std::make_shared<DataPrepareOptions>();
  prepare->add_option("--input", options->input, "text file")->required();
  prepare->add_option("--out", options->out, "token file to write (.bin)")->required();
  return [options] { return run_data_prepare(*options); };
}

}  // namespace

LOOM_REGISTER_COMMAND("data", add_data_command);

}  // namespace loom::cli
