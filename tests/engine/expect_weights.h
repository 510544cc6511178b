// A loaded model's tensors against the values its test file was written with (the GGUF and
// safetensors loader tests): the same names, sizes and float32 bytes.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kvattn/engine/weights.h"

namespace kvattn::testing {

inline void expect_weights_equal(const ModelWeights& w,
                                 const std::map<std::string, std::vector<float>>& values) {
  EXPECT_EQ(w.tensors.size(), values.size());
  for (const auto& [name, v] : values) {
    auto it = w.tensors.find(name);
    ASSERT_NE(it, w.tensors.end()) << name;
    ASSERT_EQ(it->second.numel(), static_cast<int64_t>(v.size())) << name;
    EXPECT_EQ(std::memcmp(it->second.data(), v.data(), v.size() * 4), 0) << name;
  }
}

}  // namespace kvattn::testing
