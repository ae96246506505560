// libFuzzer target: an executor trace (`loom calibrate --trace FILE`) as read_trace_runs reads it:
// the pass times and the run the trace describes (or the fallback, gpt-tiny on one rank).
#include <cstddef>
#include <cstdint>

#include "planner/calibrate.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = loom::fuzz::write_scratch_file("trace.json", data, size);
  auto runs = loom::read_trace_runs({path}, loom::TraceFallback{});
  if (runs) (void)loom::keep_fastest_repeats(*runs);
  return 0;
}
