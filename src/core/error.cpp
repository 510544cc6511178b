#include "kvattn/core/error.h"

#include <cstring>

namespace kvattn::detail {

void throw_error(const std::string& message, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  throw Error(concat(message, " (", base, ":", line, ")"));
}

}  // namespace kvattn::detail
