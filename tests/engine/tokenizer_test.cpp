// Byte-level BPE tokenizer on a tiny vocabulary trained with HF tokenizers: encodings equal HF's
// for the GPT-2, SmolLM, Qwen2 and Llama-3 pre-tokenizers (from tokenizer.json and from GGUF
// metadata), round trips of arbitrary bytes, special tokens, streaming UTF-8, chat templates and
// malformed inputs.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/model_file_writer.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {
namespace {

#include "engine/tokenizer_test_data.inc"

using nlohmann::json;

const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json byte_level(bool prefix = false, bool regex = true) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", true},
          {"use_regex", regex}};
}
json split(const char* pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"},
          {"invert", false}};
}

// The same variants expect.py built for HF tokenizers.
std::string variant_json(const std::string& name) {
  json j = json::parse(kTinyTokenizerJson);
  j["model"]["ignore_merges"] = name == "llama3";
  if (name == "gpt2") j["pre_tokenizer"] = byte_level();
  if (name == "prefix") j["pre_tokenizer"] = byte_level(true);
  if (name == "smollm")
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
                                             byte_level()}}};
  if (name == "qwen2")
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2), byte_level(false, false)}}};
  if (name == "llama3")
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3), byte_level(false, false)}}};
  return j.dump();
}

Tokenizer variant(const std::string& name) {
  return Tokenizer::from_hf_json_text(variant_json(name), {}, name + ".json");
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tokenizer, EncodingsMatchHfTokenizers) {
  for (const auto& [name, expected] : kExpected) {
    const Tokenizer tok = variant(name);
    ASSERT_EQ(expected.size(), kTexts.size());
    for (size_t i = 0; i < kTexts.size(); ++i) {
      EXPECT_EQ(tok.encode(kTexts[i]), expected[i]) << name << " text #" << i;
      if (name != "prefix") EXPECT_EQ(tok.decode(expected[i]), kTexts[i]) << name << " #" << i;
    }
  }
}

TEST(Tokenizer, ParseSpecialFalseTreatsSpecialTokensAsText) {
  const Tokenizer tok = variant("gpt2");
  EXPECT_EQ(tok.encode(kTexts[6], false), kNoSpecial[0]);
  EXPECT_EQ(tok.encode(kTexts[7], false), kNoSpecial[1]);  // <tool> is not special: still matched
  EXPECT_EQ(tok.decode(kNoSpecial[0]), kTexts[6]);
}

TEST(Tokenizer, VocabularyAccessors) {
  const Tokenizer tok = variant("gpt2");
  EXPECT_EQ(tok.vocab_size(), 421);
  EXPECT_EQ(tok.token_id("<tool>"), 420);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok.token_id("Ġzebra"), std::nullopt);  // not in this vocab
  EXPECT_EQ(tok.token_text(*tok.token_id("Ġthe")), "Ġthe");
  EXPECT_EQ(tok.token_id("no such token"), std::nullopt);
  EXPECT_EQ(tok.token_text(223), "Ġ");
  EXPECT_EQ(tok.token_bytes(223), " ");
  EXPECT_EQ(tok.token_text(201), "Ċ");
  EXPECT_EQ(tok.token_bytes(201), "\n");
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_FALSE(tok.is_special(420));
  EXPECT_FALSE(tok.is_special(100));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.eos_id(), -1);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.stop_ids(), (std::vector<int32_t>{0, 2}));  // <|endoftext|>, <|im_end|>
  EXPECT_THROW(tok.token_text(421), Error);
  EXPECT_THROW(tok.decode({5, -1}), Error);
  const int32_t x = *tok.token_id("x");
  EXPECT_EQ(tok.decode({1, x, 2}, /*skip_special=*/true), "x");
  EXPECT_EQ(tok.decode({1, x, 2}), "<|im_start|>x<|im_end|>");
}

TEST(Tokenizer, ByteLevelAlphabet) {
  using namespace tokenizer_detail;
  EXPECT_EQ(byte_to_unicode()[' '], "Ġ");
  EXPECT_EQ(byte_to_unicode()['\n'], "Ċ");
  EXPECT_EQ(byte_to_unicode()['a'], "a");
  EXPECT_EQ(byte_to_unicode()[0xAD], "Ń");
  EXPECT_EQ(byte_to_unicode()[0xFF], "ÿ");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_level_decode(byte_to_unicode()[b]), std::string(1, static_cast<char>(b)));
  }
  EXPECT_EQ(byte_level_decode("<|im_start|>"), "<|im_start|>");
  EXPECT_EQ(byte_level_decode("has space"), "has space");  // outside the alphabet: as is
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  // Mostly text-like, with raw and invalid UTF-8 mixed in.
  static const std::vector<std::string> atoms = {"a", "the", " ", "  ", "\n", "\t", "1", "23",
                                                 "'s", "é", "日本", "🎉", "<|im_end|>", "<tool>",
                                                 "\xff", "\xe6\x97", "\xc3", "!?", "\r\n", "Ü"};
  std::string s;
  while (s.size() < n) {
    if (rng() % 4 == 0) s += static_cast<char>(rng() % 256);
    else s += atoms[rng() % atoms.size()];
  }
  return s;
}

TEST(Tokenizer, RoundTripsArbitraryBytes) {
  std::mt19937 rng(1234);
  for (const char* name : {"gpt2", "smollm", "qwen2", "llama3"}) {
    const Tokenizer tok = variant(name);
    for (int i = 0; i < 300; ++i) {
      const std::string s = random_bytes(rng, rng() % 64);
      const std::vector<int32_t> ids = tok.encode(s);
      EXPECT_EQ(tok.decode(ids), s) << name;
      EXPECT_EQ(tok.decode(tok.encode(s, false)), s) << name;
    }
  }
}

TEST(Tokenizer, LongPiecesStayCorrect) {
  const Tokenizer tok = variant("gpt2");
  std::string words;
  for (int i = 0; i < 4000; ++i) words += "thethen";  // one 28000-byte piece with many merges
  EXPECT_LT(tok.encode(words).size(), words.size() / 2);
  EXPECT_EQ(tok.decode(tok.encode(words)), words);
  for (const std::string& s : {std::string(20000, 'a'), std::string(20000, ' '),
                               std::string(5000, 'x') + std::string(5000, '9')}) {
    const std::vector<int32_t> ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s);
    EXPECT_LE(ids.size(), s.size());
  }
}

// A GGUF carrying the tiny vocabulary, as llama.cpp's converter would write it.
testing::GgufBuilder tiny_gguf_tokenizer(const std::string& pre) {
  const json j = json::parse(kTinyTokenizerJson);
  std::vector<std::string> tokens(421);
  for (const auto& [t, id] : j["model"]["vocab"].items()) tokens[id.get<size_t>()] = t;
  tokens[420] = "<tool>";
  std::vector<int32_t> types(421, 1);
  types[0] = types[1] = types[2] = 3;  // control
  types[420] = 4;                      // user-defined
  std::vector<std::string> merges = j["model"]["merges"].get<std::vector<std::string>>();
  testing::GgufBuilder g;
  g.kv_str("tokenizer.ggml.model", "gpt2");
  g.kv_str("tokenizer.ggml.pre", pre);
  g.kv_strs("tokenizer.ggml.tokens", tokens);
  g.kv_i32s("tokenizer.ggml.token_type", types);
  g.kv_strs("tokenizer.ggml.merges", merges);
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
  g.kv_bool("tokenizer.ggml.add_bos_token", false);
  return g;
}

TEST(Tokenizer, GgufVocabularyEncodesLikeHf) {
  const std::pair<const char*, const char*> pres[] = {
      {"gpt2", "gpt2"}, {"smollm", "smollm"}, {"qwen2", "qwen2"}, {"llama-bpe", "llama3"}};
  for (const auto& [pre, expected_name] : pres) {
    const GgufFile g = GgufFile::from_bytes(tiny_gguf_tokenizer(pre).build(), "tok.gguf");
    const Tokenizer tok = Tokenizer::from_gguf(g);
    EXPECT_EQ(tok.vocab_size(), 421);
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    const auto& expected = kExpected.at(expected_name);
    for (size_t i = 0; i < kTexts.size(); ++i) {
      EXPECT_EQ(tok.encode(kTexts[i]), expected[i]) << pre << " text #" << i;
    }
    EXPECT_EQ(tok.encode(kTexts[6], false), kNoSpecial[0]) << pre;
    // No template in the file, but a ChatML vocabulary: plain ChatML.
    ASSERT_TRUE(tok.chat_template().has_value());
    EXPECT_EQ(tok.apply_chat_template({{"user", "hi"}}, true),
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  }
}

// llama.cpp's names for the pipelines (llama-vocab.cpp): its converter writes "gpt-2", MPT and
// OLMo files share GPT-2's regex, Command-R StarCoder's / SmolLM's, Falcon 3 Llama 3's; the
// Llama 3 names add BOS where the file does not say (llama.cpp's default; session 50's probe
// against llama.cpp's own test vectors).
TEST(Tokenizer, GgufPreNamesFollowLlamaCpp) {
  const std::pair<const char*, const char*> aliases[] = {
      {"gpt-2", "gpt2"},       {"mpt", "gpt2"},          {"olmo", "gpt2"},
      {"phi-2", "gpt2"},       {"command-r", "smollm"},  {"starcoder", "smollm"},
      {"exaone", "smollm"},    {"llama3", "llama3"},     {"falcon3", "llama3"},
      {"pixtral", "llama3"},   {"stablelm2", "qwen2"},   {"deepseek-r1-qwen", "qwen2"}};
  for (const auto& [pre, expected_name] : aliases) {
    const Tokenizer tok =
        Tokenizer::from_gguf(GgufFile::from_bytes(tiny_gguf_tokenizer(pre).build(), "t.gguf"));
    const auto& expected = kExpected.at(expected_name);
    for (size_t i = 0; i < kTexts.size(); ++i) {
      EXPECT_EQ(tok.encode(kTexts[i]), expected[i]) << pre << " text #" << i;
    }
  }
  auto add_bos_without_key = [](const char* pre) {
    testing::GgufBuilder g = tiny_gguf_tokenizer(pre);
    g.kvs.pop_back();  // tokenizer.ggml.add_bos_token, the last key
    return Tokenizer::from_gguf(GgufFile::from_bytes(g.build(), "t.gguf")).add_bos();
  };
  EXPECT_TRUE(add_bos_without_key("llama-bpe"));
  EXPECT_TRUE(add_bos_without_key("falcon3"));
  EXPECT_FALSE(add_bos_without_key("gpt-2"));
  EXPECT_FALSE(add_bos_without_key("qwen2"));
  EXPECT_FALSE(Tokenizer::from_gguf(GgufFile::from_bytes(tiny_gguf_tokenizer("llama-bpe").build(),
                                                         "t.gguf"))
                   .add_bos());  // the file's add_bos_token false wins
}

// HF's lstrip / rstrip on added tokens (Phi-3's <|end|>, <|user|>... carry rstrip): a match
// eats the whitespace before / after it, which is not tokenized. A GGUF has no such flags;
// llama.cpp sets rstrip on a Phi-3's special tokens by its general.name, and so does kvattn.
TEST(Tokenizer, AddedTokensStripWhitespaceAsFlagged) {
  const std::string text = "hi  \n<|im_end|>\n\t the<|im_start|> x";
  const Tokenizer plain = variant("gpt2");
  json j = json::parse(variant_json("gpt2"));
  for (json& a : j["added_tokens"]) {
    if (a["content"] == "<|im_end|>") a["rstrip"] = true;
    if (a["content"] == "<|im_start|>") a["lstrip"] = true;
  }
  const Tokenizer strip = Tokenizer::from_hf_json_text(j.dump(), {}, "strip.json");
  const int32_t end = *plain.token_id("<|im_end|>"), start = *plain.token_id("<|im_start|>");
  std::vector<int32_t> want = plain.encode("hi  \n", false);
  want.push_back(end);
  for (int32_t t : plain.encode("the", false)) want.push_back(t);
  want.push_back(start);
  for (int32_t t : plain.encode(" x", false)) want.push_back(t);
  EXPECT_EQ(strip.encode(text), want);
  EXPECT_NE(plain.encode(text), want);  // without the flags the whitespace is tokenized
  EXPECT_EQ(strip.encode(text, false), plain.encode(text, false));  // specials as text: no strip

  auto gguf_named = [](const char* name) {
    testing::GgufBuilder g = tiny_gguf_tokenizer("gpt-2");
    g.kv_str("general.name", name);
    return Tokenizer::from_gguf(GgufFile::from_bytes(g.build(), "t.gguf"));
  };
  const std::string chat = "<|im_start|>\nhi<|im_end|>\n";
  std::vector<int32_t> stripped = {start};
  for (int32_t t : plain.encode("hi", false)) stripped.push_back(t);
  stripped.push_back(end);
  EXPECT_EQ(gguf_named("Phi-3 Mini 4k Instruct").encode(chat), stripped);
  EXPECT_EQ(gguf_named("phi3-tiny").encode(chat), stripped);
  EXPECT_EQ(gguf_named("Qwen2").encode(chat), plain.encode(chat));
}

// No tokenizer.ggml.pre (old GPT-NeoX-era files) is llama.cpp's DEFAULT pipeline: punctuation
// runs, then GPT-2, then digit runs cut in threes (HF's ByteLevel would keep "'s" and 1234567).
TEST(Tokenizer, GgufDefaultPreIsLlamaCppsDefault) {
  const auto p = tokenizer_detail::pretokenizer_for_gguf("default", "t.gguf");
  EXPECT_FALSE(p.ignore_merges);
  EXPECT_FALSE(p.add_bos);
  EXPECT_EQ(p.pre.run("it's 1234567 ok!!"),
            (std::vector<std::string>{"it", "'", "s", " ", "123", "456", "7", " ok", "!!"}));
  EXPECT_EQ(tokenizer_detail::pretokenizer_for_gguf("", "t.gguf").pre.run("a$b 12"),
            (std::vector<std::string>{"a", "$", "b", " ", "12"}));
}

TEST(Tokenizer, GgufTokenizerErrorsNameTheKey) {
  auto error_with = [](const std::function<void(testing::GgufBuilder&)>& edit) {
    testing::GgufBuilder g = tiny_gguf_tokenizer("smollm");
    edit(g);
    return error_of([&] { Tokenizer::from_gguf(GgufFile::from_bytes(g.build(), "tok.gguf")); });
  };
  auto replace = [](testing::GgufBuilder& g, size_t index, const std::function<void(testing::GgufBuilder&)>& add) {
    g.kvs.erase(g.kvs.begin() + static_cast<long>(index));
    add(g);
  };
  std::string e = error_with([&](auto& g) { replace(g, 0, [](auto& h) { h.kv_str("tokenizer.ggml.model", "bert"); }); });
  EXPECT_NE(e.find("tok.gguf: tokenizer.ggml.model is 'bert'"), std::string::npos) << e;
  e = error_with([&](auto& g) { replace(g, 1, [](auto& h) { h.kv_str("tokenizer.ggml.pre", "mystery"); }); });
  EXPECT_NE(e.find("tokenizer.ggml.pre 'mystery' is not supported"), std::string::npos) << e;
  e = error_with([&](auto& g) { g.kvs.erase(g.kvs.begin() + 2); });
  EXPECT_NE(e.find("metadata key 'tokenizer.ggml.tokens' is missing"), std::string::npos) << e;
  e = error_with([&](auto& g) { replace(g, 3, [](auto& h) { h.kv_i32s("tokenizer.ggml.token_type", {1, 1}); }); });
  EXPECT_NE(e.find("token_type has 2 entries but tokenizer.ggml.tokens has 421"), std::string::npos) << e;
  e = error_with([&](auto& g) { replace(g, 4, [](auto& h) { h.kv_strs("tokenizer.ggml.merges", {"ab"}); }); });
  EXPECT_NE(e.find("tokenizer.ggml.merges[0] = 'ab' has no space"), std::string::npos) << e;
  e = error_with([&](auto& g) { replace(g, 6, [](auto& h) { h.kv_u32("tokenizer.ggml.eos_token_id", 421); }); });
  EXPECT_NE(e.find("tokenizer.ggml.eos_token_id = 421 is outside the vocabulary"), std::string::npos) << e;
  e = error_with([&](auto& g) { replace(g, 2, [](auto& h) { h.kv_i32s("tokenizer.ggml.tokens", {1}); }); });
  EXPECT_NE(e.find("metadata 'tokenizer.ggml.tokens'"), std::string::npos) << e;
}

TEST(Tokenizer, MalformedTokenizerJsonNamesTheField) {
  auto error_for = [](const std::function<void(json&)>& edit) {
    json j = json::parse(variant_json("smollm"));
    edit(j);
    return error_of([&] { Tokenizer::from_hf_json_text(j.dump(), {}, "bad.json"); });
  };
  auto has = [](const std::string& e, const std::string& needle) {
    return e.rfind("bad.json", 0) == 0 && e.find(needle) != std::string::npos;
  };
  std::string e = error_of([] { Tokenizer::from_hf_json_text("{\"model\": ", {}, "bad.json"); });
  EXPECT_TRUE(has(e, "invalid JSON")) << e;
  e = error_for([](json& j) { j.erase("model"); });
  EXPECT_TRUE(has(e, "field 'model' is missing")) << e;
  e = error_for([](json& j) { j["model"]["type"] = "WordPiece"; });
  EXPECT_TRUE(has(e, "model.type 'WordPiece' is not supported")) << e;
  e = error_for([](json& j) { j["model"]["byte_fallback"] = true; });
  EXPECT_TRUE(has(e, "byte_fallback")) << e;
  e = error_for([](json& j) { j["model"]["vocab"] = json::array(); });
  EXPECT_TRUE(has(e, "model.vocab must be an object")) << e;
  e = error_for([](json& j) { j["model"]["vocab"]["zzz"] = 1 << 30; });
  EXPECT_TRUE(has(e, "token 'zzz' has id 1073741824")) << e;
  e = error_for([](json& j) { j["model"]["vocab"]["zzz"] = 100000; });
  EXPECT_TRUE(has(e, "token ids reach 100000 but only 422 tokens are defined")) << e;
  e = error_for([](json& j) { j["model"]["vocab"]["zzz"] = "7"; });
  EXPECT_TRUE(has(e, "model.vocab['zzz']' must be an integer")) << e;
  e = error_for([](json& j) { j["model"]["merges"][3] = 17; });
  EXPECT_TRUE(has(e, "model.merges[3]' must be a string")) << e;
  e = error_for([](json& j) { j["model"]["merges"][3] = json::array({"a"}); });
  EXPECT_TRUE(has(e, "model.merges[3] must hold two strings")) << e;
  e = error_for([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; });
  EXPECT_TRUE(has(e, "pre_tokenizer type 'Metaspace' is not supported")) << e;
  e = error_for([](json& j) { j["pre_tokenizer"] = split(kQwen2); });
  EXPECT_TRUE(has(e, "no ByteLevel step")) << e;
  e = error_for([](json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split("(unclosed"), byte_level()}}};
  });
  EXPECT_NE(e.find("regex '(unclosed' does not compile"), std::string::npos) << e;
  e = error_for([](json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {byte_level(), split(kQwen2)}}};
  });
  EXPECT_TRUE(has(e, "pre_tokenizer step 'Split' after ByteLevel is not supported")) << e;
  e = error_for([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; });
  EXPECT_TRUE(has(e, "normalizer 'Lowercase' is not supported")) << e;
  e = error_for([](json& j) { j["added_tokens"][0]["id"] = -3; });
  EXPECT_TRUE(has(e, "token '<|endoftext|>' has id -3")) << e;
  e = error_of([] { Tokenizer::from_hf_json("/nonexistent/tokenizer.json"); });
  EXPECT_NE(e.find("/nonexistent/tokenizer.json: cannot open"), std::string::npos) << e;
  // Accepted variants: NFC normalizer, merges as pairs, Split with a literal string.
  json ok = json::parse(variant_json("smollm"));
  ok["normalizer"] = {{"type", "NFC"}};
  for (auto& m : ok["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ', 1)), s.substr(s.find(' ', 1) + 1)});
  }
  const Tokenizer tok = Tokenizer::from_hf_json_text(ok.dump(), {}, "ok.json");
  EXPECT_EQ(tok.encode(kTexts[3]), kExpected.at("smollm")[3]);
  ok["pre_tokenizer"] = {{"type", "Sequence"},
                         {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"String", "|"}}},
                                             {"behavior", "Removed"}, {"invert", false}},
                                            byte_level()}}};
  const Tokenizer removed = Tokenizer::from_hf_json_text(ok.dump(), {}, "ok.json");
  EXPECT_EQ(removed.decode(removed.encode("a|b||c")), "abc");
}

TEST(Tokenizer, TokenizerConfigSuppliesSpecialsAndTemplate) {
  const json cfg = {{"bos_token", "<|im_start|>"},
                    {"eos_token", {{"content", "<|im_end|>"}, {"lstrip", false}}},
                    {"add_bos_token", true},
                    {"chat_template", json::array({{{"name", "tool_use"}, {"template", "x"}},
                                                   {{"name", "default"},
                                                    {"template", "{{'<|im_start|>' + m}}"}}})}};
  const Tokenizer tok = Tokenizer::from_hf_json_text(variant_json("gpt2"), cfg.dump(), "t.json");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.stop_ids(), (std::vector<int32_t>{0, 2}));
  ASSERT_TRUE(tok.chat_template().has_value());
  EXPECT_EQ(tok.chat_template()->style, ChatTemplate::Style::kChatML);

  const json llama2 = {{"chat_template", "{{ '[INST] ' + content + ' [/INST]' }}"}};
  const Tokenizer no_tmpl = Tokenizer::from_hf_json_text(variant_json("gpt2"), llama2.dump(), "t.json");
  EXPECT_FALSE(no_tmpl.chat_template().has_value());
  const std::string e = error_of([&] { no_tmpl.apply_chat_template({{"user", "x"}}, true); });
  EXPECT_NE(e.find("t.json: the model has no chat template kvattn recognises"), std::string::npos) << e;
  EXPECT_THROW(Tokenizer::from_hf_json_text(variant_json("gpt2"), "{\"bos_token\": 5}", "t.json"), Error);
}

// SmolLM2-135M-Instruct's tokenizer.chat_template, verbatim from its GGUF.
const char* kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

// The parts of Qwen3's template that decide the detection.
const char* kQwen3Template =
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + "
    "'<|im_end|>\\n' }}{%- endif %}{%- set content = message.content.split('</think>')[-1]"
    ".lstrip('\\n') %}{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + "
    "'\\n' }}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
    "enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' "
    "}}{%- endif %}{%- endif %}";

TEST(ChatTemplates, SmolLm2InsertsItsDefaultSystemPrompt) {
  const auto t = ChatTemplate::detect(kSmolLm2Template);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->style, ChatTemplate::Style::kChatML);
  EXPECT_EQ(t->default_system_prompt,
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_FALSE(t->strip_history_reasoning);
  EXPECT_EQ(t->render({{"user", "What is the capital of France?"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t->render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n");
  EXPECT_EQ(t->render({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplates, Qwen3HasNoDefaultAndDropsOldReasoning) {
  const auto t = ChatTemplate::detect(kQwen3Template);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->default_system_prompt, "");
  EXPECT_TRUE(t->strip_history_reasoning);
  EXPECT_EQ(t->render({{"user", "2+2?"},
                       {"assistant", "<think>\nadd\n</think>\n\n4"},
                       {"user", "and 3+3?"}},
                      true),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
            "<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n");
}

// Qwen3's enable_thinking (HF's chat_template_kwargs): false closes an empty think block after
// the generation prompt; true and undefined render as without it; templates that do not read
// the variable ignore it.
TEST(ChatTemplates, Qwen3EnableThinking) {
  const auto t = ChatTemplate::detect(kQwen3Template);
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(t->thinking_switch);
  const std::vector<ChatMessage> chat = {{"user", "2+2?"}};
  const std::string plain = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(t->render(chat, true), plain);
  EXPECT_EQ(t->render(chat, true, true), plain);
  EXPECT_EQ(t->render(chat, true, false), plain + "<think>\n\n</think>\n\n");
  EXPECT_EQ(t->render(chat, false, false), "<|im_start|>user\n2+2?<|im_end|>\n");
  const auto smol = ChatTemplate::detect(kSmolLm2Template);
  ASSERT_TRUE(smol.has_value());
  EXPECT_FALSE(smol->thinking_switch);
  EXPECT_EQ(smol->render(chat, true, false), smol->render(chat, true));
}

TEST(ChatTemplates, Llama3AndUnknown) {
  const auto t = ChatTemplate::detect(
      "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
      "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->style, ChatTemplate::Style::kLlama3);
  EXPECT_EQ(t->render({{"user", " hi \n"}}, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_FALSE(ChatTemplate::detect("{{ '[INST]' }}").has_value());
  EXPECT_FALSE(ChatTemplate::detect("").has_value());
}

std::vector<int32_t> byte_tokens(const Tokenizer& tok, std::string_view s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(*tok.token_id(tokenizer_detail::byte_to_unicode()[c]));
  return ids;
}

TEST(StreamDecoder, HoldsBackIncompleteCharacters) {
  const Tokenizer tok = variant("gpt2");
  StreamDecoder d(tok);
  const std::vector<int32_t> ids = byte_tokens(tok, "a日🎉");
  EXPECT_EQ(d.push(ids[0]), "a");
  EXPECT_EQ(d.push(ids[1]), "");
  EXPECT_EQ(d.push(ids[2]), "");
  EXPECT_EQ(d.push(ids[3]), "日");
  EXPECT_EQ(d.push(ids[4]), "");
  EXPECT_EQ(d.push(ids[5]), "");
  EXPECT_EQ(d.push(ids[6]), "");
  EXPECT_EQ(d.push(ids[7]), "🎉");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer tok = variant("gpt2");
  const std::string fffd = "\xEF\xBF\xBD";
  StreamDecoder d(tok);
  const std::vector<int32_t> ids = byte_tokens(tok, "\xff" "x\xe6\x97" "y\xe6");
  EXPECT_EQ(d.push(ids[0]), fffd);        // never valid
  EXPECT_EQ(d.push(ids[1]), "x");
  EXPECT_EQ(d.push(ids[2]), "");          // could still become a character
  EXPECT_EQ(d.push(ids[3]), "");
  EXPECT_EQ(d.push(ids[4]), fffd + "y");  // 'y' breaks it: one U+FFFD for "\xe6\x97"
  EXPECT_EQ(d.push(ids[5]), "");
  EXPECT_EQ(d.flush(), fffd);             // cut off at the end
  EXPECT_EQ(d.flush(), "");

  StreamDecoder skip(tok, /*skip_special=*/true);
  EXPECT_EQ(skip.push(1), "");
  EXPECT_EQ(skip.push(ids[1]), "x");
}

TEST(StreamDecoder, StreamEqualsDecodeAndIsAlwaysValidUtf8) {
  const Tokenizer tok = variant("smollm");
  std::mt19937 rng(99);
  static const std::vector<std::string> atoms = {"café ", "日本語", "🎉", " the", "\n", "Ü", "1"};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = static_cast<int>(rng() % 12); k < n; ++k) s += atoms[rng() % atoms.size()];
    StreamDecoder d(tok);
    std::string streamed;
    // Byte tokens cut characters in every possible place.
    for (int32_t id : rng() % 2 ? tok.encode(s) : byte_tokens(tok, s)) {
      const std::string part = d.push(id);
      EXPECT_TRUE(tokenizer_detail::is_valid_utf8(part));
      streamed += part;
    }
    streamed += d.flush();
    EXPECT_EQ(streamed, s);
  }
}

}  // namespace
}  // namespace kvattn
