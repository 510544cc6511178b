// The real default model, SmolLM2-135M-Instruct (Q4_1 GGUF): metadata, config, tensor types,
// dequantized values against gguf-py, the full load, and its tokenizer against HF tokenizers.
// Exits 77 (ctest: skipped) when scripts/fetch_model.sh has not downloaded the model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "engine/tokenizer/utf8.h"
#include "kvattn/engine/tokenizer.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

const std::string kModel = std::string(KVATTN_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Token ids from HF tokenizers 0.23.3 on SmolLM2's tokenizer (vocab and merges from the GGUF;
// pre-tokenizer Digits(individual) + ByteLevel, as in SmolLM2's tokenizer.json).
const std::vector<std::pair<std::string, std::vector<int32_t>>> kSmolEncodings = {
    {"What is the capital of France?",
     {1780, 314, 260, 3575, 282, 4649, 47}},
    {"Hello, world! I'm SmolLM2 and it's 2024-11-29 at 13:45.",
     {19556, 28, 905, 17, 339, 5248, 3511, 308, 34519, 34, 284, 357, 506, 216, 34, 32, 34, 36, 29, 33, 33, 29, 34, 41, 418, 216, 33, 35, 42, 36, 37, 30}},
    {"The quick brown fox jumps over the lazy dog.\n\nNew paragraph\twith tab.",
     {504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30, 198, 198, 5529, 8510, 197, 3659, 10147, 30}},
    {"  def fibonacci(n):\n      return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
     {216, 753, 3987, 46477, 24, 94, 727, 3914, 1003, 304, 585, 304, 2067, 216, 34, 1745, 3987, 46477, 24, 94, 731, 216, 33, 25, 1232, 3987, 46477, 24, 94, 731, 216, 34, 25, 198}},
    {"Unicode: caf\xc3""\xa9"", na\xc3""\xaf""ve, Stra\xc3""\x9f""e, \xce""\x95""\xce""\xbb""\xce""\xbb""\xce""\xb7""\xce""\xbd""\xce""\xb9""\xce""\xba""\xce""\xac"", \xd1""\x80""\xd1""\x83""\xd1""\x81""\xd1""\x81""\xd0""\xba""\xd0""\xb8""\xd0""\xb9"", \xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e"", \xe4""\xb8""\xad""\xe6""\x96""\x87"", \xed""\x95""\x9c""\xea""\xb5""\xad""\xec""\x96""\xb4"", emoji \xf0""\x9f""\x8e""\x89""\xf0""\x9f""\x9a""\x80""\xf0""\x9f""\x91""\x8d""\xf0""\x9f""\x8f""\xbd"".",
     {3706, 15817, 42, 37366, 28, 15486, 46494, 28, 19144, 34878, 85, 28, 5664, 239, 17162, 17162, 25723, 11517, 12001, 21118, 26112, 28, 216, 9175, 14714, 9382, 39511, 7872, 24958, 28, 17097, 241, 115, 40993, 179, 120, 248, 28, 216, 28589, 29184, 28, 216, 33085, 246, 181, 130, 251, 183, 240, 129, 28, 649, 33777, 15107, 232, 227, 10813, 244, 218, 10813, 235, 231, 10813, 233, 138, 30}},
    {"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
     {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198}},
    {"Numbers 1234567890 and 3.14159 and 1,000,000 and -42.",
     {39006, 216, 33, 34, 35, 36, 37, 38, 39, 40, 41, 32, 284, 216, 35, 30, 33, 36, 33, 37, 41, 284, 216, 33, 28, 32, 32, 32, 28, 32, 32, 32, 284, 731, 36, 34, 30}},
    {"   leading and trailing spaces   ",
     {256, 2899, 284, 35079, 5600, 333}},
    {"CAPS and MiXeD cAsE WE'LL YOU'VE",
     {33467, 67, 284, 11633, 72, 85, 52, 265, 1653, 53, 26587, 23, 16421, 12246, 23, 18525}},
    {"",
     {}},
};
const std::vector<int32_t> kSmolChatNoSpecial = {44, 108, 306, 79, 3738, 108, 46, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 44, 108, 306, 79, 486, 108, 46, 198, 44, 108, 306, 79, 3738, 108, 46, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 15137, 108, 306, 79, 486, 108, 46, 198, 44, 108, 306, 79, 3738, 108, 46, 520, 9531, 198};

struct DequantRef {
  const char* name;
  const char* type;
  int64_t numel;
  double sum, weighted_sum;  // weights (i % 17) + 1
  std::vector<double> spots;  // at [0, 1, 31, 32, last]
};
// gguf-py 0.19 (gguf.quants.dequantize) on the same file.
const std::vector<DequantRef> kDequant = {
    {"token_embd.weight", "Q8_0", 28311552, -15353.04449415207, -135714.74162721634, {-0.10654449462890625, 0.032978057861328125, -0.20040512084960938, -0.09348678588867188, -0.0417022705078125}},
    {"blk.0.attn_q.weight", "Q4_1", 331776, 59.22322082519531, -212.61618041992188, {-0.0963134765625, 0.1573486328125, -0.0963134765625, -0.34619140625, -0.255859375}},
    {"blk.29.ffn_down.weight", "Q4_1", 884736, 49.83570861816406, 1923.2553100585938, {-0.2733154296875, 0.186279296875, -0.2733154296875, 0.026611328125, 0.056640625}},
    {"output_norm.weight", "F32", 576, 1038.33203125, 9372.55859375, {1.7578125, 1.8203125, 1.828125, 1.875, 1.984375}},
};

const GgufFile& model() {
  static const GgufFile f = GgufFile::open(kModel);
  return f;
}

TEST(SmolLm2Gguf, MetadataAndTensorTypes) {
  const GgufFile& f = model();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f.tensors().size(), 272u);
  std::map<std::string, int> types;
  for (const auto& t : f.tensors()) ++types[ggml_type_name(t.type)];
  EXPECT_EQ(types, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
}

TEST(SmolLm2Gguf, Config) {
  const ModelConfig c = config_from_gguf(model());
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_NEAR(c.rms_norm_eps, 1e-5, 1e-12);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_style, ModelConfig::RopeStyle::kInterleaved);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
}

void expect_matches(const float* x, const DequantRef& r) {
  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < r.numel; ++i) {
    sum += x[i];
    wsum += x[i] * static_cast<double>(i % 17 + 1);
  }
  EXPECT_NEAR(sum, r.sum, 1e-6 * (1 + std::fabs(r.sum))) << r.name;
  EXPECT_NEAR(wsum, r.weighted_sum, 1e-6 * (1 + std::fabs(r.weighted_sum))) << r.name;
  const int64_t idx[] = {0, 1, 31, 32, r.numel - 1};
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(x[idx[k]], r.spots[k], 1e-7) << r.name << " at " << idx[k];
}

TEST(SmolLm2Gguf, DequantizedValuesMatchGgufPy) {
  for (const DequantRef& r : kDequant) {
    const GgufTensorInfo* t = model().find_tensor(r.name);
    ASSERT_NE(t, nullptr) << r.name;
    EXPECT_EQ(ggml_type_name(t->type), r.type);
    const Tensor x = model().dequantize(*t);
    ASSERT_EQ(x.numel(), r.numel);
    expect_matches(x.ptr<float>(), r);
  }
}

TEST(SmolLm2Gguf, LoadsAsHfWeights) {
  int calls = 0;
  double last = -1;
  const ModelWeights w = load_gguf_model(kModel, [&](double p) {
    EXPECT_GE(p, last);
    last = p;
    ++calls;
  });
  EXPECT_EQ(last, 1.0);
  EXPECT_GT(calls, 10);
  EXPECT_EQ(w.tensors.size(), 272u);
  EXPECT_EQ(w.tensors.at("model.embed_tokens.weight").view().shape_str(), "[49152, 576]");
  EXPECT_EQ(w.tensors.at("model.layers.0.self_attn.k_proj.weight").view().shape_str(), "[192, 576]");
  EXPECT_EQ(w.tensors.at("model.layers.29.mlp.down_proj.weight").view().shape_str(), "[576, 1536]");
  expect_matches(w.tensors.at("model.layers.0.self_attn.q_proj.weight").ptr<float>(), kDequant[1]);
  expect_matches(w.tensors.at("model.norm.weight").ptr<float>(), kDequant[3]);
}

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_gguf(model());
  return t;
}

TEST(SmolLm2Tokenizer, EncodingsMatchHfTokenizers) {
  const Tokenizer& tok = tokenizer();
  EXPECT_EQ(tok.vocab_size(), 49152);
  for (const auto& [text, ids] : kSmolEncodings) {
    EXPECT_EQ(tok.encode(text), ids) << text;
    EXPECT_EQ(tok.decode(ids), text);
  }
  EXPECT_EQ(tok.encode(kSmolEncodings[5].first, /*parse_special=*/false), kSmolChatNoSpecial);
}

TEST(SmolLm2Tokenizer, SpecialTokensAndChatTemplate) {
  const Tokenizer& tok = tokenizer();
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.token_text(1), "<|im_start|>");
  EXPECT_EQ(tok.stop_ids(), (std::vector<int32_t>{0, 2}));
  for (int32_t id = 0; id < 17; ++id) EXPECT_TRUE(tok.is_special(id)) << id;
  EXPECT_FALSE(tok.is_special(17));
  ASSERT_TRUE(tok.chat_template().has_value());
  EXPECT_EQ(tok.apply_chat_template({{"user", "What is the capital of France?"}}, true),
            kSmolEncodings[5].first);
}

TEST(SmolLm2Tokenizer, StreamingNeverSplitsCharacters) {
  const Tokenizer& tok = tokenizer();
  const std::string& text = kSmolEncodings[4].first;  // multi-byte characters across tokens
  StreamDecoder d(tok);
  std::string out;
  for (int32_t id : kSmolEncodings[4].second) {
    const std::string part = d.push(id);
    EXPECT_TRUE(tokenizer_detail::is_valid_utf8(part));
    out += part;
  }
  out += d.flush();
  EXPECT_EQ(out, text);
}

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
  if (!std::filesystem::exists(kvattn::kModel)) {
    std::puts("model not downloaded (run scripts/fetch_model.sh)");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
