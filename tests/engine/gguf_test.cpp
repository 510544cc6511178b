// GGUF reader: metadata of every value type, tensor infos, dequantization of every supported
// type (checked against gguf-py's reference dequantizer), tiny model loading, and malformed
// files (every truncation, targeted corruptions, byte flips) that must throw kvattn::Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/expect_weights.h"
#include "engine/model_file_writer.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/weights.h"
#include "temp_dir.h"

namespace kvattn {
namespace {

using testing::Bytes;
using testing::GgufBuilder;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

GgufFile parse(const std::vector<uint8_t>& b, const std::string& name = "t.gguf") {
  return GgufFile::from_bytes(b, name);
}

GgufBuilder sample_file() {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv("u8", testing::kU8, Bytes().u8(200));
  g.kv("i8", testing::kI8, Bytes().put<int8_t>(-5));
  g.kv("u16", testing::kU16, Bytes().put<uint16_t>(60000));
  g.kv("i16", testing::kI16, Bytes().put<int16_t>(-300));
  g.kv_u32("u32", 4000000000u);
  g.kv_i32("i32", -7);
  g.kv_f32("f32", 0.5f);
  g.kv_bool("flag", true);
  g.kv("u64", testing::kU64, Bytes().u64(1ull << 40));
  g.kv("i64", testing::kI64, Bytes().put<int64_t>(-(1ll << 40)));
  g.kv("f64", testing::kF64, Bytes().put<double>(-2.25));
  g.kv_strs("names", {"a", "", "ccc"});
  g.kv_i32s("ints", {3, -1, 4});
  g.kv("floats", testing::kArray, Bytes().u32(testing::kF32).u64(2).f32(1.5f).f32(-1.0f));
  g.kv("bools", testing::kArray, Bytes().u32(testing::kBool).u64(2).u8(0).u8(1));
  g.tensor("w.f32", {4, 2}, 0, testing::f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  g.tensor("w.f16", {3}, 1, testing::f16_bytes({0.5f, -2.0f, 65504.0f}));
  g.tensor("w.bf16", {2}, 30, testing::bf16_bytes({1.5f, -3.0f}));
  return g;
}

TEST(Gguf, ParsesEveryMetadataType) {
  for (uint32_t version : {2u, 3u}) {
    GgufBuilder b = sample_file();
    b.version = version;
    const GgufFile f = parse(b.build());
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.metadata().size(), 16u);
    EXPECT_EQ(f.metadata()[0].first, "general.architecture");  // file order
    EXPECT_EQ(f.get_string("general.architecture", ""), "llama");
    EXPECT_EQ(f.get_int("u8", 0), 200);
    EXPECT_EQ(f.get_int("i8", 0), -5);
    EXPECT_EQ(f.get_int("u16", 0), 60000);
    EXPECT_EQ(f.get_int("i16", 0), -300);
    EXPECT_EQ(f.get_int("u32", 0), 4000000000ll);
    EXPECT_EQ(f.get_int("i32", 0), -7);
    EXPECT_EQ(f.get_float("f32", 0), 0.5);
    EXPECT_TRUE(f.get_bool("flag", false));
    EXPECT_EQ(f.get_int("u64", 0), 1ll << 40);
    EXPECT_EQ(f.get_int("i64", 0), -(1ll << 40));
    EXPECT_EQ(f.get_float("f64", 0), -2.25);
    EXPECT_EQ(f.get("names").as_strings(), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(f.get("ints").as_ints(), (std::vector<int64_t>{3, -1, 4}));
    EXPECT_EQ(f.get("floats").as_floats(), (std::vector<double>{1.5, -1.0}));
    EXPECT_EQ(f.get("bools").as_ints(), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(f.get("names").array_size(), 3u);
    EXPECT_EQ(f.get("names").to_string(2), "[\"a\", \"\", ... (3 items)]");
    EXPECT_EQ(f.get_int("missing", 42), 42);
    EXPECT_EQ(f.find("missing"), nullptr);
    EXPECT_NE(error_of([&] { f.get("missing"); }).find("t.gguf: metadata key 'missing' is missing"),
              std::string::npos);
    // Typed access of the wrong type names the key.
    EXPECT_NE(error_of([&] { f.get_int("names", 0); }).find("metadata 'names'"), std::string::npos);
    EXPECT_THROW(f.get("f32").as_string(), Error);
  }
}

TEST(Gguf, TensorInfosAndPlainTypes) {
  const GgufFile f = parse(sample_file().build());
  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensorInfo* t = f.find_tensor("w.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t->nbytes, 32u);
  EXPECT_EQ(t->offset, 0u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  Tensor x = f.dequantize(*t);
  ASSERT_EQ(x.view().shape_str(), "[2, 4]");
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x.ptr<float>()[i], i + 1.0f);
  Tensor h = f.dequantize(*f.find_tensor("w.f16"));
  EXPECT_EQ(h.ptr<float>()[0], 0.5f);
  EXPECT_EQ(h.ptr<float>()[1], -2.0f);
  EXPECT_EQ(h.ptr<float>()[2], 65504.0f);
  EXPECT_EQ(f.find_tensor("w.f16")->offset, 32u);
  Tensor bf = f.dequantize(*f.find_tensor("w.bf16"));
  EXPECT_EQ(bf.ptr<float>()[0], 1.5f);
  EXPECT_EQ(bf.ptr<float>()[1], -3.0f);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

// Reference values from gguf-py 0.19 (gguf.quants.dequantize) on the same 3-block pattern.
struct QuantCase {
  const char* name;
  uint32_t type;
  int64_t block_elems, block_bytes;
  std::vector<std::pair<int, float>> scale_fields;  // offset -> value for block b = v0 + step*b
  std::vector<float> steps;
  double sum, weighted_sum;
  std::vector<double> spots;  // at [0, 1, ne/2-1, ne/2, ne-1, ne+5, last]
};

std::vector<uint8_t> quant_pattern(const QuantCase& c, int blocks) {
  std::vector<uint8_t> raw(static_cast<size_t>(c.block_bytes * blocks));
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>((i * 37 + 11) & 255);
  for (int b = 0; b < blocks; ++b) {
    for (size_t k = 0; k < c.scale_fields.size(); ++k) {
      const uint16_t h = float_to_f16(c.scale_fields[k].second + c.steps[k] * b).bits;
      std::memcpy(&raw[b * c.block_bytes + c.scale_fields[k].first], &h, 2);
    }
  }
  return raw;
}

TEST(Gguf, DequantizeMatchesGgufPyReference) {
  const std::vector<QuantCase> cases = {
      {"Q4_0", 2, 32, 18, {{0, 0.125f}}, {0.0625f}, -4.9375, -59.5625,
       {-0.375, 0.25, -1.0, -0.375, 0.0, 0.0, 0.75}},
      {"Q4_1", 3, 32, 20, {{0, 0.0625f}, {2, -0.5f}}, {0.0625f, 0.25f}, 69.875, 637.5,
       {0.4375, -0.25, 0.125, 0.0625, 0.25, 1.25, 1.6875}},
      {"Q5_0", 6, 32, 22, {{0, 0.125f}}, {0.0625f}, -2.9375, 38.8125,
       {1.125, -0.25, -1.5, 1.75, 0.125, -3.0, -2.25}},
      {"Q5_1", 7, 32, 24, {{0, 0.0625f}, {2, -0.5f}}, {0.0625f, 0.25f}, 171.375, 1598.9375,
       {0.6875, 1.0, 1.375, 0.6875, -0.1875, 0.25, 3.75}},
      {"Q8_0", 8, 32, 34, {{0, 0.125f}}, {0.0625f}, 73.0, 490.1875,
       {10.625, 15.25, -16.0, -11.375, -6.0, -1.5, -23.0}},
      {"Q4_K", 12, 256, 144, {{0, 0.03125f}, {2, 0.015625f}}, {0.03125f, 0.015625f}, 11491.5,
       102983.59375, {9.859375, -0.796875, 2.53125, 13.21875, 1.515625, 11.65625, 16.453125}},
      {"Q6_K", 14, 256, 210, {{208, 0.00390625f}}, {0.00390625f}, 65.03125, -442.8359375,
       {-5.58984375, 6.625, 5.859375, -1.37109375, -0.234375, 4.046875, 15.1171875}},
      {"Q2_K", 10, 256, 84, {{80, 0.0625f}, {82, 0.03125f}}, {0.0625f, 0.03125f}, 748.125,
       6681.4375, {2.0625, 0.0, 2.625, 0.46875, 0.28125, -0.125, 4.59375}},
      {"Q3_K", 11, 256, 110, {{108, 0.015625f}}, {0.015625f}, 40.296875, 493.265625,
       {1.265625, -1.6875, 1.125, 0.03125, 0.65625, 0.9375, 0.46875}},
      {"Q5_K", 13, 256, 176, {{0, 0.03125f}, {2, 0.015625f}}, {0.03125f, 0.015625f}, 24859.0,
       224683.34375, {25.359375, -0.796875, -0.09375, 32.71875, 3.390625, 2.65625, 94.640625}},
  };
  for (const QuantCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto traits = ggml_type_traits(c.type);
    ASSERT_TRUE(traits && traits->dequantizable);
    EXPECT_EQ(traits->name, c.name);
    EXPECT_EQ(traits->block_elems, c.block_elems);
    EXPECT_EQ(traits->block_bytes, c.block_bytes);
    // As a GGUF tensor of 3 blocks (one row), through the file path.
    GgufBuilder g;
    g.tensor("q", {static_cast<uint64_t>(3 * c.block_elems)}, c.type, quant_pattern(c, 3));
    const GgufFile f = parse(g.build());
    Tensor x = f.dequantize(f.tensors()[0]);
    ASSERT_EQ(x.numel(), 3 * c.block_elems);
    double sum = 0, wsum = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      sum += x.ptr<float>()[i];
      wsum += x.ptr<float>()[i] * static_cast<double>(i % 17 + 1);
    }
    EXPECT_NEAR(sum, c.sum, 1e-6 * (1 + std::fabs(c.sum)));
    EXPECT_NEAR(wsum, c.weighted_sum, 1e-6 * (1 + std::fabs(c.weighted_sum)));
    const int64_t ne = c.block_elems;
    const int64_t idx[] = {0, 1, ne / 2 - 1, ne / 2, ne - 1, ne + 5, 3 * ne - 1};
    for (int k = 0; k < 7; ++k) EXPECT_EQ(x.ptr<float>()[idx[k]], c.spots[k]) << "at " << idx[k];
  }
}

TEST(Gguf, Q4_1LayoutLowNibblesFirst) {
  // d = 0.5, m = -1; byte j holds element j (low nibble) and element j + 16 (high nibble).
  Bytes b;
  b.put(float_to_f16(0.5f).bits).put(float_to_f16(-1.0f).bits);
  for (int j = 0; j < 16; ++j) b.u8(static_cast<uint8_t>(j | ((15 - j) << 4)));
  float y[32];
  dequantize_row(GgmlType::kQ4_1, b.v.data(), y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * j - 1.0f);
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 1.0f);
  }
  EXPECT_THROW(dequantize_row(GgmlType::kQ4_1, b.v.data(), y, 31), Error);
  EXPECT_THROW(dequantize_row(GgmlType::kQ8_K, b.v.data(), y, 256), Error);
}

TEST(Gguf, TypeTraitsAndNames) {
  EXPECT_EQ(ggml_type_name(GgmlType::kQ4_1), "Q4_1");
  EXPECT_EQ(ggml_type_name(static_cast<GgmlType>(77)), "type#77");
  EXPECT_FALSE(ggml_type_traits(77).has_value());
  EXPECT_FALSE(ggml_type_traits(3)->name.empty());
  EXPECT_FALSE(ggml_type_traits(15)->dequantizable);  // Q8_K: sized, not dequantized
}

TEST(Gguf, UnsupportedTypeParsesButDoesNotDequantize) {
  GgufBuilder g;
  g.tensor("k8", {256}, 15, std::vector<uint8_t>(292, 1));
  const GgufFile f = parse(g.build());
  EXPECT_EQ(f.tensors()[0].nbytes, 292u);
  const std::string e = error_of([&] { f.dequantize(f.tensors()[0]); });
  EXPECT_NE(e.find("tensor 'k8' has type Q8_K"), std::string::npos) << e;
}

TEST(Gguf, EveryTruncationThrows) {
  const std::vector<uint8_t> full = sample_file().build();
  ASSERT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    EXPECT_THROW(parse(cut), Error) << "prefix of " << n << " bytes";
  }
  // The message names the file and what ran out.
  const size_t inside_infos = parse(full).data_offset() - 40;
  const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(inside_infos));
  const std::string e = error_of([&] { parse(cut, "cut.gguf"); });
  EXPECT_EQ(e.rfind("cut.gguf: ", 0), 0u) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  const std::string e = error_of([&] { parse(bytes, "bad.gguf"); });
  EXPECT_EQ(e.rfind("bad.gguf: ", 0), 0u) << e;
  EXPECT_NE(e.find(needle), std::string::npos) << "expected '" << needle << "' in: " << e;
}

std::vector<uint8_t> header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  Bytes b;
  b.v = {'G', 'G', 'U', 'F'};
  b.u32(version).u64(n_tensors).u64(n_kv);
  return b.v;
}

TEST(Gguf, CorruptHeadersNameTheField) {
  std::vector<uint8_t> b = sample_file().build();
  b[0] = 'X';
  expect_error(b, "not a GGUF file");
  expect_error(header(1, 0, 0), "version 1 is not supported");
  expect_error(header(4, 0, 0), "version 4 is not supported");
  expect_error(header(0x03000000, 0, 0), "big-endian");
  expect_error(header(3, 1ull << 60, 0), "tensor count");
  expect_error(header(3, 0, ~0ull), "metadata count");

  Bytes huge_key;
  huge_key.raw(header(3, 0, 1)).u64(1ull << 62).u64(0);
  expect_error(huge_key.v, "metadata key #0 length");

  auto one_kv = [](uint32_t type, const Bytes& value) {
    Bytes b;
    b.raw(header(3, 0, 1)).str("k").u32(type).raw(value.v);
    return b.v;
  };
  expect_error(one_kv(13, Bytes()), "unknown value type 13");
  expect_error(one_kv(testing::kBool, Bytes().u8(2)), "bool has value 2");
  expect_error(one_kv(testing::kU64, Bytes().u64(~0ull)), "out of range");
  expect_error(one_kv(testing::kString, Bytes().u64(1000).u8('x')), "metadata 'k' length 1000");
  expect_error(one_kv(testing::kArray, Bytes().u32(testing::kArray).u64(1)), "nested array");
  expect_error(one_kv(testing::kArray, Bytes().u32(testing::kU32).u64(1ull << 61)),
               "metadata 'k' count");
  expect_error(one_kv(testing::kArray, Bytes().u32(testing::kString).u64(2).str("a").u64(99)),
               "metadata 'k' item length 99");

  GgufBuilder dup;
  dup.kv_u32("a", 1).kv_u32("a", 2);
  expect_error(dup.build(), "metadata key 'a' appears twice");

  GgufBuilder align;
  align.kv_u32("general.alignment", 24);
  expect_error(align.build(), "general.alignment' is 24");
  GgufBuilder align_str;
  align_str.kv_str("general.alignment", "32");
  expect_error(align_str.build(), "general.alignment' must be an integer");
}

TEST(Gguf, CorruptTensorInfosNameTheTensor) {
  auto one_tensor = [](uint32_t n_dims, std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    Bytes b;
    b.raw(header(3, 1, 0)).str("blk.0.w").u32(n_dims);
    for (uint64_t d : ne) b.u64(d);
    b.u32(type).u64(offset);
    while (b.v.size() % 32) b.u8(0);
    b.v.resize(b.v.size() + data_bytes, 0);
    return b.v;
  };
  ASSERT_NO_THROW(parse(one_tensor(2, {32, 2}, 3, 0, 40)));
  expect_error(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0, 4), "tensor 'blk.0.w' has 5 dimensions");
  expect_error(one_tensor(2, {32, 2}, 99, 0, 40), "unknown GGML type id 99");
  expect_error(one_tensor(2, {33, 2}, 3, 0, 44), "ne[0] = 33 is not a multiple of the Q4_1 block");
  expect_error(one_tensor(2, {1ull << 62, 1ull << 3}, 0, 0, 4), "element count overflows");
  expect_error(one_tensor(1, {1ull << 63}, 0, 0, 4), "out of range");
  expect_error(one_tensor(2, {1ull << 61, 2}, 28, 0, 0), "byte size overflows");
  expect_error(one_tensor(2, {32, 2}, 3, 8, 48), "offset 8 is not a multiple of the alignment");
  expect_error(one_tensor(2, {32, 2}, 3, 0, 39), "lies past the end of the file");
  expect_error(one_tensor(2, {32, 2}, 3, ~0ull - 31, 40), "lies past the end of the file");
  // A zero dim makes numel 0, but the other dims still size shapes and rows (a fuzzer find:
  // ne = [7e18, 0] overflowed the row stride in dequantize).
  expect_error(one_tensor(3, {1ull << 62, 0, 1ull << 3}, 0, 0, 4), "element count overflows");
  const GgufFile empty = parse(one_tensor(2, {1ull << 62, 0}, 0, 0, 0));
  EXPECT_EQ(empty.dequantize(empty.tensors()[0]).numel(), 0);

  GgufBuilder dup;
  dup.tensor("x", {1}, 0, testing::f32_bytes({1})).tensor("x", {1}, 0, testing::f32_bytes({1}));
  expect_error(dup.build(), "tensor 'x' appears twice");
}

TEST(Gguf, ByteFlipsNeverCrash) {
  // Every byte of the header region set to a few hostile values: parse cleanly or throw Error.
  const std::vector<uint8_t> full = sample_file().build();
  const GgufFile ref = parse(full);
  size_t parsed = 0, rejected = 0;
  for (size_t i = 0; i < ref.data_offset(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x80}, static_cast<uint8_t>(full[i] ^ 1)}) {
      std::vector<uint8_t> b = full;
      b[i] = v;
      try {
        const GgufFile f = parse(b);
        for (const auto& t : f.tensors()) {
          if (ggml_type_traits(static_cast<uint32_t>(t.type))->dequantizable) f.dequantize(t);
        }
        ++parsed;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(parsed, 0u);
  EXPECT_GT(rejected, 0u);
}

using test::TempDir;

TEST(Gguf, OpenFromDiskAndMissingFile) {
  TempDir dir;
  testing::write_file(dir.path() / "s.gguf", sample_file().build());
  const GgufFile f = GgufFile::open((dir.path() / "s.gguf").string());
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.file_size(), std::filesystem::file_size(dir.path() / "s.gguf"));
  const std::string e = error_of([&] { GgufFile::open((dir.path() / "none.gguf").string()); });
  EXPECT_NE(e.find("none.gguf: cannot open"), std::string::npos) << e;
  testing::write_file(dir.path() / "empty.gguf", {});
  EXPECT_THROW(GgufFile::open((dir.path() / "empty.gguf").string()), Error);
  EXPECT_THROW(GgufFile::open(dir.path().string()), Error);  // a directory
}

using testing::expect_weights_equal;

TEST(GgufModel, TinyLlamaLoadsUnderHfNames) {
  TempDir dir;
  testing::TinyShape s;
  std::map<std::string, std::vector<float>> values;
  GgufBuilder g = testing::tiny_gguf(s, &values);
  g.tensor("rope_freqs.weight", {8}, 0, testing::f32_bytes(std::vector<float>(8, 1.0f)));
  const auto path = (dir.path() / "tiny.gguf").string();
  testing::write_file(path, g.build());
  std::vector<double> progress;
  const ModelWeights w = load_gguf_model(path, [&](double p) { progress.push_back(p); });
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 50000.0);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_style, ModelConfig::RopeStyle::kInterleaved);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  expect_weights_equal(w, values);  // rope_freqs is not an HF tensor and is skipped
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.front(), 0.0);
  EXPECT_EQ(progress.back(), 1.0);
  EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
  EXPECT_EQ(w.tensors.at("model.layers.1.self_attn.k_proj.weight").view().shape_str(), "[32, 64]");
}

TEST(GgufModel, TinyQwen3Untied) {
  TempDir dir;
  testing::TinyShape s;
  s.arch = "qwen3";
  s.tied = false;
  s.head_dim = 32;  // qwen3 head_dim independent of hidden / heads
  std::map<std::string, std::vector<float>> values;
  const auto path = (dir.path() / "q.gguf").string();
  testing::write_file(path, testing::tiny_gguf(s, &values).build());
  const ModelWeights w = load_gguf_model(path);
  EXPECT_EQ(w.config.architecture, "qwen3");
  EXPECT_EQ(w.config.head_dim, 32);
  EXPECT_FALSE(w.config.tie_word_embeddings);
  EXPECT_TRUE(w.config.qk_norm);
  EXPECT_EQ(w.config.rope_style, ModelConfig::RopeStyle::kRotateHalf);
  expect_weights_equal(w, values);
  EXPECT_EQ(w.tensors.count("lm_head.weight"), 1u);
  EXPECT_EQ(w.tensors.at("model.layers.0.self_attn.q_norm.weight").numel(), 32);
}

TEST(GgufModel, BadModelsNameTheProblem) {
  TempDir dir;
  auto load_error = [&](GgufBuilder g) {
    const auto path = (dir.path() / "m.gguf").string();
    testing::write_file(path, g.build());
    return error_of([&] { load_gguf_model(path); });
  };
  testing::TinyShape s;
  GgufBuilder missing = testing::tiny_gguf(s, nullptr);
  missing.tensors.erase(missing.tensors.begin() + 3);  // blk.0.attn_k.weight
  EXPECT_NE(load_error(missing).find("tensor 'model.layers.0.self_attn.k_proj.weight' is missing"),
            std::string::npos);

  GgufBuilder shape = testing::tiny_gguf(s, nullptr);
  shape.tensors[1].ne = {32};
  shape.tensors[1].data.resize(128);
  EXPECT_NE(load_error(shape).find("'model.layers.0.input_layernorm.weight' has shape [32] but "
                                   "the config needs [64]"),
            std::string::npos);

  GgufBuilder arch = testing::tiny_gguf(s, nullptr);
  arch.kvs.erase(arch.kvs.begin());
  arch.kv_str("general.architecture", "gpt2");
  EXPECT_NE(load_error(arch).find("general.architecture is 'gpt2'"), std::string::npos);

  GgufBuilder heads = testing::tiny_gguf(s, nullptr);
  heads.kv_u32("llama.attention.head_count_kv", 3);
  heads.kvs.erase(heads.kvs.begin() + 6);  // the original head_count_kv
  EXPECT_NE(load_error(heads).find("num_heads 4 is not a multiple of num_kv_heads 3"),
            std::string::npos);

  GgufBuilder no_layers = testing::tiny_gguf(s, nullptr);
  no_layers.kvs.erase(no_layers.kvs.begin() + 4);  // block_count
  EXPECT_NE(load_error(no_layers).find("metadata key 'llama.block_count' is missing"),
            std::string::npos);

  GgufBuilder typed = testing::tiny_gguf(s, nullptr);
  typed.kvs.erase(typed.kvs.begin() + 2);  // embedding_length
  typed.kv_str("llama.embedding_length", "64");
  EXPECT_NE(load_error(typed).find("m.gguf: metadata 'llama.embedding_length': GGUF value: expected "
                                   "an integer but the value is string"),
            std::string::npos);

  GgufBuilder eos = testing::tiny_gguf(s, nullptr);
  eos.kvs.erase(eos.kvs.begin() + 12);
  eos.kv_u32("tokenizer.ggml.eos_token_id", 64);
  EXPECT_NE(load_error(eos).find("eos_token_id is 64"), std::string::npos);
}

}  // namespace
}  // namespace kvattn
