// Test-only: a copy of an HF checkpoint directory (tests/data/tiny_*) with every float tensor
// rewritten in 16 bits, as real checkpoints ship: BF16, every third float tensor F16 (the values
// are rounded, so it is a new checkpoint whose file dtypes the loaders keep or widen). Used by
// the tests of HfLoadOptions::keep_16bit (load_16bit_test, load_16bit_gpu_test).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model_file_writer.h"
#include "kvattn/engine/safetensors.h"

namespace kvattn::test {

inline void write_16bit_copy(const std::filesystem::path& src, const std::filesystem::path& dst) {
  namespace fs = std::filesystem;
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".json")) {
      fs::copy_file(e.path(), dst / name, fs::copy_options::overwrite_existing);
      continue;
    }
    if (!name.ends_with(".safetensors")) continue;
    const SafetensorsFile f = SafetensorsFile::open(e.path().string());
    std::vector<testing::StTensor> out;
    size_t k = 0;
    for (const auto& t : f.tensors()) {
      if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
        const auto bytes = f.tensor_data(t);
        out.push_back({t.name, t.dtype, t.shape, {bytes.begin(), bytes.end()}});
        continue;
      }
      const Tensor x = f.to_f32(t);
      const std::vector<float> v(x.ptr<float>(), x.ptr<float>() + x.numel());
      if (k++ % 3 == 2) {
        out.push_back({t.name, "F16", t.shape, testing::f16_bytes(v)});
      } else {
        out.push_back({t.name, "BF16", t.shape, testing::bf16_bytes(v)});
      }
    }
    testing::write_file(dst / name, testing::build_safetensors(out));
  }
}

}  // namespace kvattn::test
