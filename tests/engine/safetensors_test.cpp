// safetensors reader and the HF directory loader: valid files of every float dtype, sharded
// checkpoints, every truncation, corrupt headers, and broken directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/expect_weights.h"
#include "engine/model_file_writer.h"
#include "kvattn/engine/safetensors.h"
#include "kvattn/engine/weights.h"
#include "temp_dir.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;
using testing::StTensor;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

SafetensorsFile parse(const std::vector<uint8_t>& b, const std::string& name = "t.safetensors") {
  return SafetensorsFile::from_bytes(b, name);
}

std::vector<uint8_t> sample() {
  std::vector<uint8_t> i64(16);
  const int64_t ints[2] = {7, -9};
  std::memcpy(i64.data(), ints, 16);
  return testing::build_safetensors(
      {StTensor{"a.f32", "F32", {2, 3}, testing::f32_bytes({1, 2, 3, 4, 5, -6})},
       StTensor{"b.f16", "F16", {2}, testing::f16_bytes({0.5f, -1024.0f})},
       StTensor{"c.bf16", "BF16", {1, 1, 2}, testing::bf16_bytes({3.0f, -0.25f})},
       StTensor{"d.i64", "I64", {2}, i64},
       StTensor{"e.empty", "F32", {0, 4}, {}}},
      {{"format", "pt"}});
}

TEST(Safetensors, ParsesAndConverts) {
  const SafetensorsFile f = parse(sample());
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const SafetensorsTensorInfo* a = f.find("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->numel, 6);
  EXPECT_EQ(a->end - a->begin, 24u);
  Tensor x = f.to_f32(*a);
  EXPECT_EQ(x.view().shape_str(), "[2, 3]");
  EXPECT_EQ(x.ptr<float>()[5], -6.0f);
  Tensor h = f.to_f32(*f.find("b.f16"));
  EXPECT_EQ(h.ptr<float>()[0], 0.5f);
  EXPECT_EQ(h.ptr<float>()[1], -1024.0f);
  Tensor bf = f.to_f32(*f.find("c.bf16"));
  EXPECT_EQ(bf.view().shape_str(), "[1, 1, 2]");
  EXPECT_EQ(bf.ptr<float>()[0], 3.0f);
  EXPECT_EQ(bf.ptr<float>()[1], -0.25f);
  EXPECT_EQ(f.to_f32(*f.find("e.empty")).numel(), 0);
  const auto raw = f.tensor_data(*f.find("d.i64"));
  int64_t v[2];
  std::memcpy(v, raw.data(), 16);
  EXPECT_EQ(v[1], -9);
  const std::string e = error_of([&] { f.to_f32(*f.find("d.i64")); });
  EXPECT_NE(e.find("t.safetensors: tensor 'd.i64' has dtype I64"), std::string::npos) << e;
  EXPECT_EQ(f.find("zz"), nullptr);
}

TEST(Safetensors, EveryTruncationThrows) {
  const std::vector<uint8_t> full = sample();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    EXPECT_THROW(parse(cut), Error) << "prefix of " << n;
  }
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  const std::string e = error_of([&] { parse(bytes, "bad.safetensors"); });
  EXPECT_EQ(e.rfind("bad.safetensors", 0), 0u) << e;
  EXPECT_NE(e.find(needle), std::string::npos) << "expected '" << needle << "' in: " << e;
}

std::vector<uint8_t> with_header(const std::string& h, size_t data_bytes = 8) {
  return testing::safetensors_raw(h, std::vector<uint8_t>(data_bytes, 0));
}

TEST(Safetensors, CorruptHeadersNameTheField) {
  testing::Bytes huge;
  huge.u64(1ull << 40).u8('{');
  expect_error(huge.v, "header length 1099511627776");
  expect_error(with_header("{\"a\": "), "invalid JSON");
  expect_error(with_header("[1, 2]"), "header must be a JSON object");
  expect_error(with_header(std::string(100, '[') + std::string(100, ']')), "nesting deeper");
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_NO_THROW(parse(with_header(ok)));
  expect_error(with_header(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})"),
               "tensor 'w' has unknown dtype 'Q4'");
  expect_error(with_header(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})"),
               "tensor 'w' dtype' must be a string");
  expect_error(with_header(R"({"w":{"shape":[2],"data_offsets":[0,8]}})"),
               "field 'dtype' is missing");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"),
               "tensor 'w' has negative dim -2");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})"),
               "must be an integer");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})"),
               "shape must be an array of at most 6 dims");
  expect_error(
      with_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})"),
      "element count overflows");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})"),
               "data_offsets [0, 16] do not lie inside the data section of 8 bytes");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"),
               "do not lie inside");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})"),
               "holds 4 bytes but its shape and dtype F32 need 2 x 4");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})"),
               "data_offsets must be [begin, end]");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})"),
               "out of range");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                              "b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}})"),
               "tensors 'a' and 'b' overlap");
  expect_error(with_header(R"({"__metadata__":{"k":1}})"), "__metadata__.k' must be a string");
  expect_error(with_header(R"({"w":[1]})"), "tensor 'w' entry must be an object");
  expect_error(with_header("{\"w\":\"\xff\"}"), "invalid JSON");
}

TEST(Safetensors, ByteFlipsNeverCrash) {
  const std::vector<uint8_t> full = sample();
  uint64_t header_len;
  std::memcpy(&header_len, full.data(), 8);
  size_t parsed = 0, rejected = 0;
  for (size_t i = 0; i < 8 + header_len; ++i) {
    for (uint8_t v : {uint8_t{'9'}, uint8_t{'-'}, uint8_t{'"'}, uint8_t{0xFF}}) {
      std::vector<uint8_t> b = full;
      b[i] = v;
      try {
        const SafetensorsFile f = parse(b);
        for (const auto& t : f.tensors()) {
          if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") f.to_f32(t);
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

using testing::expect_weights_equal;

TEST(HfModel, SingleFileLlama) {
  TempDir dir;
  testing::TinyShape s;
  std::map<std::string, std::vector<float>> values;
  testing::write_tiny_hf(dir.path(), s, 1, &values);
  std::vector<double> progress;
  const ModelWeights w = load_hf_model(dir.path().string(), [&](double p) { progress.push_back(p); });
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_style, ModelConfig::RopeStyle::kRotateHalf);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.eos_token_id, 2);
  expect_weights_equal(w, values);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), 1.0);
}

TEST(HfModel, ShardedQwen3WithGenerationConfig) {
  TempDir dir;
  testing::TinyShape s;
  s.arch = "qwen3";
  s.tied = false;
  s.head_dim = 32;
  std::map<std::string, std::vector<float>> values;
  testing::write_tiny_hf(dir.path(), s, 3, &values);
  testing::write_text(dir.path() / "generation_config.json", R"({"eos_token_id": [2, 5]})");
  const ModelWeights w = load_hf_model(dir.path().string());
  EXPECT_EQ(w.config.architecture, "qwen3");
  EXPECT_TRUE(w.config.qk_norm);
  EXPECT_EQ(w.config.head_dim, 32);
  EXPECT_FALSE(w.config.tie_word_embeddings);
  EXPECT_EQ(w.config.eos_token_id, 2);
  EXPECT_EQ(w.config.extra_eos_ids, (std::vector<int64_t>{5}));
  expect_weights_equal(w, values);
}

TEST(HfModel, Transformers5RopeParameters) {
  TempDir dir;
  testing::TinyShape s;
  s.arch = "qwen3";
  testing::write_tiny_hf(dir.path(), s, 1, nullptr);
  nlohmann::json cfg = testing::tiny_hf_config(s);
  cfg.erase("rope_theta");
  cfg["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  testing::write_text(dir.path() / "config.json", cfg.dump());
  EXPECT_EQ(load_hf_model(dir.path().string()).config.rope_theta, 1e6);
  EXPECT_EQ(config_from_hf_json((dir.path() / "config.json").string()).rope_theta, 1e6);
  cfg["rope_parameters"]["rope_type"] = "mrope";  // yarn, llama3, ...: model_families_test
  testing::write_text(dir.path() / "config.json", cfg.dump());
  const std::string e = error_of([&] { load_hf_model(dir.path().string()); });
  EXPECT_NE(e.find("config.json: rope scaling type 'mrope' is not supported"),
            std::string::npos) << e;
}

TEST(HfModel, TiedCheckpointDropsStoredLmHead) {
  TempDir dir;
  testing::TinyShape s;
  s.tied = false;
  testing::write_tiny_hf(dir.path(), s, 1, nullptr);
  nlohmann::json cfg = testing::tiny_hf_config(s);
  cfg["tie_word_embeddings"] = true;
  testing::write_text(dir.path() / "config.json", cfg.dump());
  const ModelWeights w = load_hf_model(dir.path().string());
  EXPECT_EQ(w.tensors.count("lm_head.weight"), 0u);
}

TEST(HfModel, BrokenDirectoriesNameTheProblem) {
  testing::TinyShape s;
  auto error_in = [&](int shards, const std::function<void(const fs::path&)>& damage) {
    TempDir dir;
    testing::write_tiny_hf(dir.path(), s, shards, nullptr);
    damage(dir.path());
    return error_of([&] { load_hf_model(dir.path().string()); });
  };
  auto has = [](const std::string& e, const std::string& needle) {
    return e.find(needle) != std::string::npos;
  };
  std::string e = error_in(1, [](const fs::path& d) { fs::remove(d / "config.json"); });
  EXPECT_TRUE(has(e, "config.json: cannot open")) << e;
  e = error_in(1, [](const fs::path& d) { fs::remove(d / "model.safetensors"); });
  EXPECT_TRUE(has(e, "neither model.safetensors nor model.safetensors.index.json")) << e;
  e = error_in(1, [](const fs::path& d) { testing::write_text(d / "config.json", "{\"architectures\": [\"GPT2LMHeadModel\"]}"); });
  EXPECT_TRUE(has(e, "architecture 'GPT2LMHeadModel' is not supported")) << e;
  e = error_in(1, [&](const fs::path& d) {
    auto c = testing::tiny_hf_config(s);
    c.erase("hidden_size");
    testing::write_text(d / "config.json", c.dump());
  });
  EXPECT_TRUE(has(e, "field 'hidden_size' is missing")) << e;
  e = error_in(1, [&](const fs::path& d) {
    auto c = testing::tiny_hf_config(s);
    c["num_hidden_layers"] = "two";
    testing::write_text(d / "config.json", c.dump());
  });
  EXPECT_TRUE(has(e, "field 'num_hidden_layers' must be an integer")) << e;
  e = error_in(1, [&](const fs::path& d) {
    auto c = testing::tiny_hf_config(s);
    c["rope_scaling"] = {{"rope_type", "mrope"}, {"factor", 4.0}};
    testing::write_text(d / "config.json", c.dump());
  });
  EXPECT_TRUE(has(e, "rope scaling type 'mrope' is not supported")) << e;
  e = error_in(1, [&](const fs::path& d) {
    auto c = testing::tiny_hf_config(s);
    c["hidden_size"] = 32;  // tensors stay 64 wide
    testing::write_text(d / "config.json", c.dump());
  });
  EXPECT_TRUE(has(e, "tensor 'model.embed_tokens.weight' has shape [64, 64] but the config needs [64, 32]")) << e;
  e = error_in(1, [](const fs::path& d) { fs::resize_file(d / "model.safetensors", 100); });
  EXPECT_TRUE(has(e, "model.safetensors")) << e;
  e = error_in(3, [](const fs::path& d) { fs::remove(d / "model-00002-of-00003.safetensors"); });
  EXPECT_TRUE(has(e, "model-00002-of-00003.safetensors: cannot open")) << e;
  e = error_in(3, [](const fs::path& d) {
    testing::write_text(d / "model.safetensors.index.json",
                        R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})");
  });
  EXPECT_TRUE(has(e, "is not a plain file name")) << e;
  e = error_in(3, [](const fs::path& d) {
    auto text = nlohmann::json::parse(std::ifstream(d / "model.safetensors.index.json"));
    text["weight_map"]["model.extra.weight"] = "model-00001-of-00003.safetensors";
    testing::write_text(d / "model.safetensors.index.json", text.dump());
  });
  EXPECT_TRUE(has(e, "tensor 'model.extra.weight' named by model.safetensors.index.json is missing")) << e;
  // A weight stored as an integer is named with its dtype, not reported missing.
  e = error_in(1, [&](const fs::path& d) {
    std::vector<testing::StTensor> ts;
    for (const auto& [name, shape] : testing::tiny_tensor_list(s)) {
      size_t n = 1;
      for (int64_t x : shape) n *= static_cast<size_t>(x);
      const bool as_int = name == "model.norm.weight";
      ts.push_back({name, as_int ? "I32" : "F32", shape,
                    as_int ? std::vector<uint8_t>(n * 4, 0)
                           : testing::f32_bytes(std::vector<float>(n, 0.5f))});
    }
    testing::write_file(d / "model.safetensors", testing::build_safetensors(ts));
  });
  EXPECT_TRUE(has(e, "tensor 'model.norm.weight' is I32, but weights must be F32, F16 or BF16")) << e;
  // The MLP is SwiGLU: another hidden_act would silently run as silu, so it is refused.
  for (const char* act : {"gelu", "gelu_pytorch_tanh", "relu"}) {
    e = error_in(1, [&](const fs::path& d) {
      auto c = testing::tiny_hf_config(s);
      c["hidden_act"] = act;
      testing::write_text(d / "config.json", c.dump());
    });
    EXPECT_TRUE(has(e, std::string("hidden_act is '") + act + "' but kvattn's llama MLP computes silu")) << e;
  }
  for (const char* act : {"silu", "swish"}) {
    TempDir dir;
    testing::write_tiny_hf(dir.path(), s, 1, nullptr);
    auto c = testing::tiny_hf_config(s);
    c["hidden_act"] = act;
    testing::write_text(dir.path() / "config.json", c.dump());
    EXPECT_NO_THROW(load_hf_model(dir.path().string())) << act;
  }
}

}  // namespace
}  // namespace kvattn
