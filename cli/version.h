// `loom --version`: the version and the backends compiled into this binary.
#pragma once

#include <string>

namespace loom::cli {
std::string version_string();
}
