// HfLoadOptions::keep_16bit: BF16/F16 safetensors tensors stay in their file dtype, read in place
// from the mapping (which they keep alive); every consumer that needs float32 widens them
// exactly. Checked: the dtypes kept, the values equal the float32 loader's after widening, the
// zero-copy view (and the copy for misaligned bytes), the mapping outliving the weights and the
// deleted files, sharding in the file dtype, and the CPU model (one rank and two) giving
// bit-identical logits from either load. The GPU side: load_16bit_gpu_test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "checkpoint_16bit.h"
#include "engine/model_file_writer.h"
#include "engine/parallel/sharding.h"
#include "engine_test_util.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/safetensors.h"
#include "kvattn/engine/weights.h"
#include "teacher_forced.h"
#include "temp_dir.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;
using testing::StTensor;

using test::TempDir;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.view().shape_str() == b.view().shape_str() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())) == 0;
}

DType file_dtype(const std::string& d) {
  return d == "BF16" ? DType::kBF16 : d == "F16" ? DType::kF16 : DType::kF32;
}

TEST(TensorInPlace, AlignedBf16IsAViewOfTheMapping) {
  const SafetensorsFile f = SafetensorsFile::from_bytes(testing::build_safetensors(
      {StTensor{"c", "F32", {1}, testing::f32_bytes({7.0f})},
       StTensor{"a", "BF16", {2, 2}, testing::bf16_bytes({1.0f, -2.0f, 0.5f, 3.0f})},
       StTensor{"b", "F16", {3}, testing::f16_bytes({0.25f, -8.0f, 1024.0f})}}));
  for (const auto& t : f.tensors()) {
    const Tensor x = f.tensor_in_place(t);
    EXPECT_EQ(x.dtype(), file_dtype(t.dtype)) << t.name;
    EXPECT_EQ(x.data(), f.tensor_data(t).data()) << t.name << ": not read in place";
    EXPECT_TRUE(same_bytes(widen_to_f32(x), f.to_f32(t))) << t.name;
  }
  const Tensor a = f.tensor_in_place(*f.find("a"));
  EXPECT_EQ(a.view().shape_str(), "[2, 2]");
  EXPECT_EQ(bf16_to_float(a.ptr<bf16_t>()[1]), -2.0f);
}

TEST(TensorInPlace, MisalignedBytesAreCopied) {
  // One U8 byte first: the BF16 tensor starts at an odd offset of the data section.
  const SafetensorsFile f = SafetensorsFile::from_bytes(testing::build_safetensors(
      {StTensor{"pad", "U8", {1}, {42}},
       StTensor{"a", "BF16", {3}, testing::bf16_bytes({1.5f, -0.125f, 96.0f})}}));
  const SafetensorsTensorInfo& t = *f.find("a");
  ASSERT_NE(reinterpret_cast<uintptr_t>(f.tensor_data(t).data()) % 2, 0u);
  const Tensor x = f.tensor_in_place(t);
  EXPECT_EQ(x.dtype(), DType::kBF16);
  EXPECT_NE(x.data(), f.tensor_data(t).data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data()) % 2, 0u);
  EXPECT_TRUE(same_bytes(widen_to_f32(x), f.to_f32(t)));
  EXPECT_THROW(f.tensor_in_place(*f.find("pad")), Error);
}

TEST(HfKeep16Bit, KeepsFileDtypesAndWidensToTheFloat32Values) {
  for (int shards : {1, 3}) {
    TempDir dir;
    testing::TinyShape s;
    s.arch = "qwen3";
    s.tied = shards == 1;
    std::map<std::string, std::vector<float>> values;
    testing::write_tiny_hf(dir.path(), s, shards, &values);  // BF16 / F16 / F32 in turn
    const ModelWeights f32 = load_hf_model(dir.path().string());
    HfLoadOptions keep;
    keep.keep_16bit = true;
    std::vector<double> progress;
    const ModelWeights kept =
        load_hf_model(dir.path().string(), [&](double p) { progress.push_back(p); }, keep);
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.back(), 1.0);
    EXPECT_EQ(kept.config.vocab_size, f32.config.vocab_size);
    ASSERT_EQ(kept.tensors.size(), f32.tensors.size());
    std::map<DType, int> dtypes;
    for (const auto& [name, t] : kept.tensors) {
      ++dtypes[t.dtype()];
      const Tensor& ref = f32.tensors.at(name);
      EXPECT_EQ(ref.dtype(), DType::kF32) << name;
      EXPECT_TRUE(same_bytes(widen_to_f32(t), ref)) << name;
      EXPECT_EQ(std::memcmp(widen_to_f32(t).data(), values.at(name).data(),
                            values.at(name).size() * 4), 0) << name;
    }
    EXPECT_GT(dtypes[DType::kBF16], 0) << shards;
    EXPECT_GT(dtypes[DType::kF16], 0) << shards;
    EXPECT_GT(dtypes[DType::kF32], 0) << shards;
    ModelWeights widened = kept;  // shares the views; widening replaces them, not their bytes
    widen_to_f32(widened);
    for (const auto& [name, t] : widened.tensors) {
      EXPECT_TRUE(same_bytes(t, f32.tensors.at(name))) << name;
      if (kept.tensors.at(name).dtype() == DType::kF32) {
        EXPECT_EQ(t.data(), kept.tensors.at(name).data()) << name << ": float32 copied";
      }
    }
  }
}

TEST(HfKeep16Bit, TensorsOutliveTheWeightsAndTheDeletedFiles) {
  Tensor q;
  std::vector<float> want;
  {
    TempDir dir;
    testing::TinyShape s;
    std::map<std::string, std::vector<float>> values;
    testing::write_tiny_hf(dir.path(), s, 2, &values);
    HfLoadOptions keep;
    keep.keep_16bit = true;
    ModelWeights w = load_hf_model(dir.path().string(), {}, keep);
    for (const auto& [name, t] : w.tensors) {
      if (t.dtype() == DType::kBF16 && t.numel() > 1000) {
        q = t;
        want = values.at(name);
        break;
      }
    }
    ASSERT_TRUE(q.defined());
    w = ModelWeights();  // the loader's SafetensorsFiles are gone too; `dir` is removed next
  }
  ASSERT_EQ(q.numel(), static_cast<int64_t>(want.size()));
  const Tensor f = widen_to_f32(q);
  EXPECT_EQ(std::memcmp(f.data(), want.data(), want.size() * 4), 0);
}

TEST(HfKeep16Bit, ShardsKeepTheFileDtype) {
  TempDir dir;
  testing::TinyShape s;
  s.arch = "qwen3";
  s.tied = false;
  testing::write_tiny_hf(dir.path(), s, 1, nullptr);
  HfLoadOptions keep;
  keep.keep_16bit = true;
  const ModelWeights kept = load_hf_model(dir.path().string(), {}, keep);
  const ModelWeights f32 = load_hf_model(dir.path().string());
  for (int r = 0; r < 2; ++r) {
    const ModelWeights a = shard_weights(kept, {r, 2});
    const ModelWeights b = shard_weights(f32, {r, 2});
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (const auto& [name, t] : a.tensors) {
      EXPECT_EQ(t.dtype(), kept.tensors.at(name).dtype()) << name;
      EXPECT_TRUE(same_bytes(widen_to_f32(t), b.tensors.at(name))) << name << " rank " << r;
    }
  }
}

std::vector<std::vector<int32_t>> prompts(int64_t vocab) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 3; ++i) {
    auto t = test::random_tokens(rng, 4 + 9 * i);
    for (auto& x : t) x %= static_cast<int32_t>(vocab);
    p.push_back(t);
  }
  return p;
}

// Every tiny family, rewritten in BF16/F16: the CPU model (and two CPU ranks where the heads
// split) from the kept tensors gives the float32 load's logits bit for bit.
TEST(HfKeep16Bit, CpuModelLogitsAreBitIdentical) {
  for (const char* name :
       {"llama", "llama3", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"}) {
    TempDir dir;
    test::write_16bit_copy(test::checkpoint(std::string("tiny_") + name), dir.path());
    HfLoadOptions keep;
    keep.keep_16bit = true;
    const ModelWeights kept = load_hf_model(dir.path().string(), {}, keep);
    int kept16 = 0;
    for (const auto& [n, t] : kept.tensors) kept16 += t.dtype() != DType::kF32;
    EXPECT_GT(kept16, 0) << name;
    std::vector<int> tps = {1};
    if (kept.config.num_kv_heads % 2 == 0 && kept.config.num_heads % 2 == 0 &&
        kept.config.intermediate_size % 2 == 0) {
      tps.push_back(2);
    }
    for (int tp : tps) {
      ModelOptions o;
      o.tensor_parallel = tp;
      auto a = Model::create(load_hf_model(dir.path().string()), Device::cpu(), o);
      auto b = Model::create(kept, Device::cpu(), o);
      const auto logits = test::teacher_forced({a.get(), b.get()}, prompts(kept.config.vocab_size),
                                               4, /*split_prefill=*/true);
      ASSERT_EQ(logits[0].size(), logits[1].size());
      for (size_t s = 0; s < logits[0].size(); ++s) {
        ASSERT_EQ(logits[0][s].size(), logits[1][s].size());
        EXPECT_EQ(std::memcmp(logits[0][s].data(), logits[1][s].data(),
                              logits[0][s].size() * sizeof(float)), 0)
            << name << " tp " << tp << " step " << s;
      }
    }
  }
}

}  // namespace
}  // namespace kvattn
