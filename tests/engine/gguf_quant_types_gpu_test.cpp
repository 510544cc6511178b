// Every GGUF quantization type on the GPU (issue 19): a tiny llama GGUF whose 2-D weights are
// random blocks of one type (random quants, random small scales at the type's scale fields),
// loaded three ways from the same file:
//   - CPU, float32 (the file dequantized on the host: the reference; dequantize_row is checked
//     against a float64 dequantization of random blocks in gguf_test.cpp),
//   - CPU on the file's blocks (keep_quantized: qdot's integer dots, as `kvattn generate` runs),
//   - CUDA (bf16 weights uploaded from the same dequantization: how every GGUF type runs on
//     the GPU; there are no quantized GPU GEMMs).
// Teacher-forced logits (a split prefill, then 12 decode steps): the GPU within bf16 noise of
// the float32 CPU model, argmax agreement except at near-ties. The device fault word stays 0.
// Exits 77 without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/core/dtype.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "kvattn/kernels/device_faults.h"
#include "model_file_writer.h"
#include "teacher_forced.h"
#include "temp_dir.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;
using testing::TinyShape;

// bf16 weights and activations against float32: hf_parity_gpu_test's and
// model_families_gpu_test's bound for the largest logit difference over the largest logit.
constexpr double kMaxRel = 1e-1;

// Byte offsets of the fp16 scale fields in one block (llama.cpp's block layouts): d (and m /
// dmin) of the 32-element types and of Q4_K/Q5_K; Q2_K's d and dmin after 16 scale bytes and
// 64 quant bytes; Q3_K's d after 32 + 64 + 12 bytes; Q6_K's d after 128 + 64 + 16 bytes.
std::vector<int> scale_fields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
      return {0};
    case GgmlType::kQ2_K:
      return {80, 82};
    case GgmlType::kQ3_K:
      return {108};
    case GgmlType::kQ6_K:
      return {208};
    default:  // Q4_1, Q5_1 (d, m); Q4_K, Q5_K (d, dmin)
      return {0, 2};
  }
}

// Scales small enough that a layer's outputs stay O(1) with the type's largest multipliers
// (K types: 6-bit sub-block scales times up to 63 quant levels).
float scale_bound(GgmlType t) {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(t));
  return traits && traits->block_elems == 256 ? 2e-4f : 1e-2f;
}

// n elements (a multiple of the block size) of `t` as random blocks.
std::vector<uint8_t> random_blocks(GgmlType t, size_t n, std::mt19937& rng) {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(t));
  const size_t be = static_cast<size_t>(traits->block_elems);
  const size_t bb = static_cast<size_t>(traits->block_bytes);
  std::vector<uint8_t> buf(n / be * bb);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : buf) v = static_cast<uint8_t>(byte(rng));
  const float bound = scale_bound(t);
  std::uniform_real_distribution<float> scale(-bound, bound);
  for (size_t b = 0; b < buf.size() / bb; ++b) {
    for (int off : scale_fields(t)) {
      const uint16_t h = float_to_f16(scale(rng)).bits;
      std::memcpy(buf.data() + b * bb + off, &h, 2);
    }
  }
  return buf;
}

// A tiny llama GGUF (rows of 256 and 512: whole K-type super-blocks) whose 2-D weights other
// than the (tied) embedding are random blocks of `t`; norms and the embedding float32.
void write_model(const fs::path& path, GgmlType t, uint32_t seed) {
  TinyShape s;
  s.arch = "llama";
  s.vocab = 320;
  s.hidden = 256;
  s.inter = 512;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.tied = true;
  GgufBuilder g = testing::tiny_gguf(s, nullptr);  // metadata and float32 / Q8_0 tensors
  std::mt19937 rng(seed);
  for (auto& tensor : g.tensors) {
    if (tensor.ne.size() != 2) continue;  // norms: float32
    const size_t n = tensor.ne[0] * tensor.ne[1];
    if (tensor.name == "token_embd.weight") {  // tiny_gguf's Q8_0 embedding -> float32
      tensor.type = 0;
      tensor.data = testing::f32_bytes(testing::pattern(n, 1));
      continue;
    }
    tensor.type = static_cast<uint32_t>(t);
    tensor.data = random_blocks(t, n, rng);
  }
  testing::write_file(path, g.build());
}

class GgufQuantTypeGpu : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GgufQuantTypeGpu, GpuMatchesTheFloat32CpuModel) {
  const GgmlType t = GetParam();
  const std::string name = ggml_type_name(t);
  test::TempDir dir;
  const fs::path file = dir.path() / ("tiny_" + name + ".gguf");
  write_model(file, t, 1000u + static_cast<uint32_t>(t));

  // The file's tensors are of the type under test (not silently converted by the writer).
  const GgufFile gguf = GgufFile::open(file.string());
  int typed = 0;
  for (const auto& info : gguf.tensors()) typed += info.type == t ? 1 : 0;
  ASSERT_EQ(typed, 2 * 7) << name;  // q, k, v, o, gate, up, down in each of the 2 layers

  auto cpu = Model::create(load_gguf_model(file.string()), Device::cpu());
  GgufLoadOptions keep;
  keep.keep_quantized = true;
  ModelOptions blocks;
  blocks.weight_format = WeightFormat::kGguf;
  auto cpu_blocks =
      Model::create(load_gguf_model(file.string(), {}, keep), Device::cpu(), blocks);
  auto gpu = Model::create(load_gguf_model(file.string()), Device::cuda(0));
  const int64_t vocab = cpu->config().vocab_size;
  std::mt19937 rng(7 + static_cast<uint32_t>(t));
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {2, 17, 70}) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& x : p) x = static_cast<int32_t>(3 + rng() % static_cast<uint32_t>(vocab - 3));
    prompts.push_back(p);
  }
  const auto logits = test::teacher_forced({cpu.get(), gpu.get(), cpu_blocks.get()}, prompts, 12,
                                           /*split_prefill=*/true);
  double scale = 0;
  for (const auto& step : logits[0]) {
    for (float v : step) scale = std::max(scale, std::abs(static_cast<double>(v)));
  }
  ASSERT_GT(scale, 0.0) << name << ": all-zero logits say nothing";
  for (const auto& step : logits[1]) {
    for (float v : step) ASSERT_TRUE(std::isfinite(v)) << name << ": GPU logit not finite";
  }
  const std::string gpu_what = name + " gpu vs cpu";
  const test::Agreement a = test::compare(logits[0], logits[1], vocab, gpu_what.c_str());
  std::printf("[%s] gpu vs cpu float32: max |diff| / max |logit| %.3e\n", name.c_str(),
              a.max_logit_diff / scale);
  EXPECT_LT(a.max_logit_diff / scale, kMaxRel) << name;
  // Argmax may differ only where the float32 model's top two are within bf16 noise.
  EXPECT_LT(a.worst_margin, kMaxRel * scale) << name;
  // The CPU model on the file's blocks (int8 activations): a second, independent path.
  const std::string blocks_what = name + " cpu blocks vs cpu float32";
  const test::Agreement b = test::compare(logits[0], logits[2], vocab, blocks_what.c_str());
  std::printf("[%s] cpu blocks vs cpu float32: max |diff| / max |logit| %.3e\n", name.c_str(),
              b.max_logit_diff / scale);
  EXPECT_LT(b.max_logit_diff / scale, kMaxRel) << name;
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u) << name;
}

INSTANTIATE_TEST_SUITE_P(
    Types, GgufQuantTypeGpu,
    ::testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                      GgmlType::kQ8_0, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                      GgmlType::kQ5_K, GgmlType::kQ6_K),
    [](const ::testing::TestParamInfo<GgmlType>& info) {
      return ggml_type_name(info.param);
    });

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) { return kvattn::test::gpu_test_main(argc, argv); }
