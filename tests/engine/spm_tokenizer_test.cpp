// SentencePiece-style BPE with byte fallback, on a tiny vocabulary trained with sentencepiece
// (scripts/make_spm_tokenizer_test_data.py): GGUF tokenizer.ggml.model "llama" encodes and decodes
// like sentencepiece (which llama.cpp reproduces), tokenizer.json files shaped like Llama 2 (legacy),
// Llama/Mistral (Metaspace) and Gemma like HF tokenizers; llama.cpp's score order and tie rule on a
// hand-made vocabulary; streaming; round trips; malformed metadata.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/model_file_writer.h"
#include "engine/tokenizer/utf8.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {
namespace {

#include "engine/spm_tokenizer_test_data.inc"
#include "engine/spm_gguf_vocab.inc"

using nlohmann::json;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The vocabulary as llama.cpp's converter writes it. Keys in this order (tests replace by index):
// 0 model, 1 tokens, 2 scores, 3 token_type, 4 unk, 5 bos, 6 eos, 7 add_bos.
testing::GgufBuilder spm_gguf() {
  testing::GgufBuilder g;
  add_spm_vocab(g);
  g.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
  g.kv_bool("tokenizer.ggml.add_bos_token", true);
  return g;
}

Tokenizer load_gguf(const testing::GgufBuilder& g) {
  return Tokenizer::from_gguf(GgufFile::from_bytes(g.build(), "spm.gguf"));
}

// The tokenizer.json variants the generator built with HF tokenizers.
std::string variant_json(const std::string& name) {
  json j = json::parse(kSpmTokenizerJson);
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
  json decoders = j["decoder"]["decoders"];  // Replace, ByteFallback, Fuse, Strip
  if (name == "metaspace") {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", "first"}, {"split", false}};
  } else if (name == "gemma") {
    j["normalizer"] = replace;
    decoders.erase(3);
    j["decoder"]["decoders"] = decoders;
  }
  return j.dump();
}

Tokenizer variant(const std::string& name) {
  return Tokenizer::from_hf_json_text(variant_json(name), {}, name + ".json");
}

TEST(SpmTokenizer, GgufMatchesSentencePiece) {
  const Tokenizer tok = load_gguf(spm_gguf());
  EXPECT_EQ(tok.vocab_size(), static_cast<int32_t>(kSpmPieces.size()));
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.stop_ids(), std::vector<int32_t>{2});
  EXPECT_FALSE(tok.chat_template().has_value());
  const auto& expected = kSpmExpected.at("sentencepiece");
  ASSERT_EQ(expected.size(), kSpmTexts.size());
  for (size_t i = 0; i < kSpmTexts.size(); ++i) {
    EXPECT_EQ(tok.encode(kSpmTexts[i]), expected[i].ids) << "text #" << i;
    EXPECT_EQ(tok.decode(expected[i].ids), expected[i].decoded) << "text #" << i;
  }
  // Byte tokens decode to their byte, "▁" to a space; control tokens verbatim unless skipped.
  EXPECT_EQ(tok.token_bytes(*tok.token_id("<0x0A>")), "\n");
  EXPECT_EQ(tok.token_text(*tok.token_id("<0x0A>")), "<0x0A>");
  EXPECT_EQ(tok.decode({1, *tok.token_id("\xE2\x96\x81")}), "<s> ");
  EXPECT_EQ(tok.decode({1, expected[0].ids[0]}, true), tok.decode({expected[0].ids[0]}));
}

// llama.cpp puts a "▁" in front of every span that follows a special token, as the legacy
// tokenizer.json's Prepend normalizer does; with parse_special = false they are plain text.
TEST(SpmTokenizer, GgufSpecialTokensMatchLegacyHf) {
  const Tokenizer tok = load_gguf(spm_gguf());
  const auto& legacy = kSpmExpected.at("legacy");
  for (size_t i = 0; i < kSpmSpecialTexts.size(); ++i) {
    const SpmCase& c = legacy[kSpmTexts.size() + i];
    EXPECT_EQ(tok.encode(kSpmSpecialTexts[i]), c.ids) << kSpmSpecialTexts[i];
    EXPECT_EQ(tok.decode(c.ids), c.decoded) << kSpmSpecialTexts[i];
    for (int32_t id : tok.encode(kSpmSpecialTexts[i], false)) {
      EXPECT_FALSE(tok.is_special(id)) << kSpmSpecialTexts[i];
    }
  }
}

TEST(SpmTokenizer, TokenizerJsonVariantsMatchHf) {
  for (const std::string name : {"legacy", "metaspace", "gemma"}) {
    const Tokenizer tok = variant(name);
    EXPECT_EQ(tok.vocab_size(), static_cast<int32_t>(kSpmPieces.size()));
    const auto& expected = kSpmExpected.at(name);
    ASSERT_EQ(expected.size(), kSpmTexts.size() + kSpmSpecialTexts.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string& text =
          i < kSpmTexts.size() ? kSpmTexts[i] : kSpmSpecialTexts[i - kSpmTexts.size()];
      EXPECT_EQ(tok.encode(text), expected[i].ids) << name << " text #" << i;
      EXPECT_EQ(tok.decode(expected[i].ids), expected[i].decoded) << name << " text #" << i;
    }
  }
  // The legacy file spells text exactly as the GGUF does (both follow sentencepiece here).
  const Tokenizer legacy = variant("legacy");
  for (size_t i = 0; i < kSpmTexts.size(); ++i) {
    EXPECT_EQ(legacy.encode(kSpmTexts[i]), kSpmExpected.at("sentencepiece")[i].ids) << i;
  }
}

// A hand-made vocabulary where merge order matters: "ab" and "ba" tie at -1 (leftmost wins),
// "bc" outscores "ab"; "z" and "é" have no token and fall back to bytes.
testing::GgufBuilder order_gguf(float ba_score, bool with_bytes = true) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      tokens.push_back(buf);
      types.push_back(6);
    }
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (auto [text, score] : std::vector<std::pair<std::string, float>>{
           {"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"ba", ba_score}, {"bc", -0.5f}}) {
    tokens.push_back(text);
    types.push_back(1);
    scores.push_back(score);
  }
  testing::GgufBuilder g;
  g.kv_str("tokenizer.ggml.model", "llama");
  g.kv_strs("tokenizer.ggml.tokens", tokens);
  g.kv_f32s("tokenizer.ggml.scores", scores);
  g.kv_i32s("tokenizer.ggml.token_type", types);
  g.kv_bool("tokenizer.ggml.add_space_prefix", false);
  return g;
}

TEST(SpmTokenizer, ScoreOrderTiesAndByteFallback) {
  const Tokenizer tie = load_gguf(order_gguf(-1));
  auto id = [&](const Tokenizer& t, const char* s) { return *t.token_id(s); };
  EXPECT_EQ(tie.encode("aba"), (std::vector<int32_t>{id(tie, "ab"), id(tie, "a")}));
  EXPECT_EQ(tie.encode("abc"), (std::vector<int32_t>{id(tie, "a"), id(tie, "bc")}));
  const Tokenizer ba = load_gguf(order_gguf(-0.9f));
  EXPECT_EQ(ba.encode("aba"), (std::vector<int32_t>{id(ba, "a"), id(ba, "ba")}));
  EXPECT_EQ(tie.encode("z\xC3\xA9"), (std::vector<int32_t>{id(tie, "<0x7A>"), id(tie, "<0xC3>"),
                                                           id(tie, "<0xA9>")}));
  EXPECT_EQ(tie.decode(tie.encode("z\xC3\xA9" "a")), "z\xC3\xA9" "a");
  // Defaults of a file without special ids: llama.cpp's <unk> 0, <s> 1, </s> 2, BOS added.
  EXPECT_EQ(tie.bos_id(), 1);
  EXPECT_EQ(tie.eos_id(), 2);
  EXPECT_TRUE(tie.add_bos());
  // Without byte tokens, unknown bytes become <unk>.
  const Tokenizer no_bytes = load_gguf(order_gguf(-1, false));
  EXPECT_EQ(no_bytes.encode("az"), (std::vector<int32_t>{id(no_bytes, "a"), 0}));
}

TEST(SpmTokenizer, RoundTripsArbitraryBytes) {
  const Tokenizer gguf = load_gguf(spm_gguf());
  const Tokenizer legacy = variant("legacy"), gemma = variant("gemma");
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(iter % 2 ? rng() % 256 : " a\xC3\xA9\xE6\x97\xA5\n"[rng() % 9]);
    for (const Tokenizer* t : {&gguf, &legacy, &gemma}) {
      const std::vector<int32_t> ids = t->encode(s, false);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t->vocab_size());
      EXPECT_EQ(t->decode(ids), s) << iter;
    }
  }
}

// Byte-fallback tokens cut characters; the stream holds them back. Like llama.cpp's
// token_to_piece, streaming keeps the prefix space (it continues a prompt).
TEST(SpmTokenizer, StreamDecoderHoldsBackPartialCharacters) {
  const Tokenizer tok = load_gguf(spm_gguf());
  const std::string text = "x\xF0\x9F\x98\x80y \xE9\xBE\x8D and \xD0\x9F";  // x😀y 龍 and П
  const std::vector<int32_t> ids = tok.encode(text);
  StreamDecoder d(tok);
  std::string streamed;
  int held = 0;
  for (int32_t id : ids) {
    const std::string part = d.push(id);
    EXPECT_TRUE(tokenizer_detail::is_valid_utf8(part)) << id;
    held += part.empty();
    streamed += part;
  }
  streamed += d.flush();
  EXPECT_EQ(streamed, " " + text);
  EXPECT_GE(held, 3 + 2 + 1);  // 😀 龍 П arrive as 4, 3 and 2 byte tokens
}

TEST(SpmTokenizer, MalformedGgufNamesTheKey) {
  auto error_with = [](size_t index, const std::function<void(testing::GgufBuilder&)>& add) {
    testing::GgufBuilder g = spm_gguf();
    g.kvs.erase(g.kvs.begin() + static_cast<long>(index));
    add(g);
    return error_of([&] { load_gguf(g); });
  };
  const auto n = kSpmPieces.size();
  std::string e = error_with(2, [](auto& g) { g.kv_f32s("tokenizer.ggml.scores", {0.0f, 1.0f}); });
  EXPECT_NE(e.find("spm.gguf: tokenizer.ggml.scores has 2 entries but tokenizer.ggml.tokens has " +
                   std::to_string(n)), std::string::npos) << e;
  e = error_with(2, [](auto& g) { g.kv_strs("tokenizer.ggml.scores", {"x"}); });
  EXPECT_NE(e.find("metadata 'tokenizer.ggml.scores'"), std::string::npos) << e;
  e = error_with(2, [&](auto& g) {
    std::vector<float> s(n, 0.0f);
    s[7] = std::nanf("");
    g.kv_f32s("tokenizer.ggml.scores", s);
  });
  EXPECT_NE(e.find("tokenizer.ggml.scores[7] = nan is not finite"), std::string::npos) << e;
  e = error_with(3, [&](auto& g) {
    std::vector<int32_t> t(n, 1);
    t[300] = 6;
    g.kv_i32s("tokenizer.ggml.token_type", t);
  });
  EXPECT_NE(e.find("token 300 '" + std::string(kSpmPieces[300].text) +
                   "' has type byte but is not spelled <0xXX>"), std::string::npos) << e;
  e = error_with(3, [&](auto& g) { g.kv_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(n, 99)); });
  EXPECT_NE(e.find("tokenizer.ggml.token_type[0] = 99 is not a token type"), std::string::npos) << e;
  e = error_with(5, [&](auto& g) { g.kv_u32("tokenizer.ggml.bos_token_id", 100000); });
  EXPECT_NE(e.find("tokenizer.ggml.bos_token_id = 100000 is outside the vocabulary"), std::string::npos) << e;
  // No byte tokens and no unknown token: some bytes cannot be spelled.
  testing::GgufBuilder g = order_gguf(-1, false);
  g.kv_i32("tokenizer.ggml.unknown_token_id", -1);
  e = error_of([&] { load_gguf(g); });
  EXPECT_NE(e.find("spm.gguf: the vocabulary has no byte token <0x00> and no unknown token"),
            std::string::npos) << e;
}

TEST(SpmTokenizer, MalformedTokenizerJsonNamesTheStep) {
  auto error_for = [](const std::function<void(json&)>& edit) {
    json j = json::parse(variant_json("legacy"));
    edit(j);
    return error_of([&] { Tokenizer::from_hf_json_text(j.dump(), {}, "bad.json"); });
  };
  auto has = [](const std::string& e, const std::string& needle) {
    return e.rfind("bad.json", 0) == 0 && e.find(needle) != std::string::npos;
  };
  std::string e = error_for([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; });
  EXPECT_TRUE(has(e, "normalizer 'Lowercase' is not supported with byte_fallback BPE")) << e;
  e = error_for([](json& j) { j["pre_tokenizer"] = {{"type", "ByteLevel"}}; });
  EXPECT_TRUE(has(e, "pre_tokenizer type 'ByteLevel' is not supported with byte_fallback BPE")) << e;
  e = error_for([](json& j) { j.erase("decoder"); });
  EXPECT_TRUE(has(e, "byte_fallback BPE needs a decoder")) << e;
  e = error_for([](json& j) { j["decoder"]["decoders"].erase(2); });
  EXPECT_TRUE(has(e, "decoder Strip before Fuse is not supported")) << e;
  e = error_for([](json& j) { j["decoder"]["decoders"][0]["pattern"] = {{"Regex", "x"}}; });
  EXPECT_TRUE(has(e, "decoder Replace with a non-string pattern is not supported")) << e;
  e = error_for([](json& j) { j["decoder"]["decoders"].push_back({{"type", "ByteFallback"}}); });
  EXPECT_TRUE(has(e, "decoder step 'ByteFallback' after Fuse is not supported")) << e;
  e = error_for([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; });
  EXPECT_TRUE(has(e, "decoder 'WordPiece' is not supported with byte_fallback BPE")) << e;
  e = error_for([](json& j) {
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
  });
  EXPECT_TRUE(has(e, "prepend_scheme 'sometimes' is not one of always, first, never")) << e;
  e = error_for([](json& j) { j["normalizer"]["normalizers"][1]["pattern"]["String"] = ""; });
  EXPECT_TRUE(has(e, "normalizer Replace.pattern.String must not be empty")) << e;
}

// Metaspace with split (the tokenizers default) cuts before every "▁"; the decoder form drops the
// first token's "▁" (HF's Metaspace decoder).
TEST(SpmTokenizer, MetaspaceSplitAndDecoder) {
  json j = json::parse(variant_json("metaspace"));
  j["pre_tokenizer"]["split"] = true;
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}};
  const Tokenizer tok = Tokenizer::from_hf_json_text(j.dump(), {}, "split.json");
  const Tokenizer whole = variant("legacy");
  // Pieces never merge across a "▁", so each word encodes as it does on its own.
  std::vector<int32_t> expected = whole.encode("the");
  for (int32_t id : whole.encode("world")) expected.push_back(id);
  EXPECT_EQ(tok.encode("the world"), expected);
  EXPECT_EQ(tok.decode(tok.encode("the world")), "the world");
  const int32_t space = *tok.token_id("\xE2\x96\x81");
  EXPECT_EQ(tok.decode({space, space}), " ");  // the first "▁" is dropped, the second is a space
}

}  // namespace
}  // namespace kvattn
