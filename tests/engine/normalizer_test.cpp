// The Unicode normalizers of tokenizer.json (NFC/NFD/NFKC/NFKD via utf8proc) against HF
// tokenizers' (normalizer_test_data.inc, from scripts/make_family_tokenizer_test_data.py), and
// their place in encode() for byte-level and byte-fallback BPE.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/spm.h"
#include "engine/tokenizer/utf8.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {
namespace {

#include "engine/normalizer_test_data.inc"

using nlohmann::json;
using tokenizer_detail::normalize_unicode;
using tokenizer_detail::UnicodeForm;

constexpr UnicodeForm kForms[] = {UnicodeForm::kNFC, UnicodeForm::kNFD, UnicodeForm::kNFKC,
                                  UnicodeForm::kNFKD};

TEST(Normalizer, MatchesHfTokenizers) {
  for (const NormalizerCase& c : kNormalizerCases) {
    for (int f = 0; f < 4; ++f) {
      EXPECT_EQ(normalize_unicode(c.text, kForms[f]), c.form[f]) << c.text << " form " << f;
    }
  }
}

TEST(Normalizer, KeepsIllFormedBytes) {
  // Each valid run is normalized; stray bytes, surrogates and a cut character stay as they are.
  EXPECT_EQ(normalize_unicode("e\xcc\x81\xff" "e\xcc\x81", UnicodeForm::kNFC),
            "\xc3\xa9\xff\xc3\xa9");
  EXPECT_EQ(normalize_unicode("\xed\xa0\x80\xef\xac\x81", UnicodeForm::kNFKC), "\xed\xa0\x80" "fi");
  EXPECT_EQ(normalize_unicode("\xef\xac\x81\xe2\x82", UnicodeForm::kNFKC), "fi\xe2\x82");
  EXPECT_EQ(normalize_unicode(std::string("a\0b\xc3\xa9", 5), UnicodeForm::kNFD),
            std::string("a\0be\xcc\x81", 6));
  EXPECT_EQ(normalize_unicode("", UnicodeForm::kNFC), "");
}

std::string byte_level_json(const json& normalizer) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer_detail::byte_to_unicode()[b]] = b;
  return json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
              {"normalizer", normalizer},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}
      .dump();
}

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> out;
  for (char c : s) out.push_back(static_cast<uint8_t>(c));
  return out;
}

TEST(Normalizer, ByteLevelEncodeNormalizesBetweenAddedTokens) {
  // Qwen2/2.5/3 declare {"type": "NFC"}.
  const Tokenizer nfc = Tokenizer::from_hf_json_text(byte_level_json({{"type", "NFC"}}));
  EXPECT_EQ(nfc.encode("cafe\xcc\x81"), bytes_of("caf\xc3\xa9"));
  const json seq = {{"type", "Sequence"},
                    {"normalizers", {{{"type", "NFKD"}}, {{"type", "NFC"}}}}};
  const Tokenizer nfkc = Tokenizer::from_hf_json_text(byte_level_json(seq));
  EXPECT_EQ(nfkc.encode("\xef\xac\x81" "e\xcc\x81"), bytes_of("fi\xc3\xa9"));
  EXPECT_EQ(nfkc.decode(nfkc.encode("\xff\xfe")), "\xff\xfe");
}

// A byte_fallback BPE (Mistral/Gemma-shaped) with `normalizer` before the Metaspace spelling.
std::string byte_fallback_json(const json& normalizer) {
  json vocab = {{"<unk>", 0}};
  for (int b = 0; b < 256; ++b) vocab[tokenizer_detail::byte_token_text(static_cast<uint8_t>(b))] = 1 + b;
  int id = 257;
  for (const char* t : {"\xe2\x96\x81", "f", "i", "n", "e", "fi", "\xe2\x96\x81" "fi"}) vocab[t] = id++;
  return json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"byte_fallback", true},
                         {"unk_token", "<unk>"},
                         {"merges", {"f i", "\xe2\x96\x81 fi"}}}},
              {"normalizer", normalizer},
              {"pre_tokenizer", nullptr},
              {"decoder", {{"type", "Sequence"},
                           {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}},
                                          {"content", " "}},
                                         {{"type", "ByteFallback"}},
                                         {{"type", "Fuse"}}}}}}}
      .dump();
}

TEST(Normalizer, ByteFallbackRunsTheSequenceInOrder) {
  const json seq = {{"type", "Sequence"},
                    {"normalizers", {{{"type", "NFKC"}},
                                     {{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}},
                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                                      {"content", "\xe2\x96\x81"}}}}};
  const Tokenizer tok = Tokenizer::from_hf_json_text(byte_fallback_json(seq));
  // "ﬁne" -> NFKC "fine" -> "▁fine": the ligature never reaches the byte fallback.
  EXPECT_EQ(tok.encode("\xef\xac\x81ne"), tok.encode("fine"));
  EXPECT_EQ(tok.encode("fine"), (std::vector<int32_t>{263, 260, 261}));
  const Tokenizer plain = Tokenizer::from_hf_json_text(byte_fallback_json(nullptr));
  EXPECT_EQ(plain.encode("\xef\xac\x81").size(), 3u);  // three byte tokens
}

TEST(Normalizer, UnsupportedStepsAreNamed) {
  for (const char* type : {"Lowercase", "Strip", "StripAccents", "BertNormalizer", "Precompiled",
                           "Nmt", "Prepend", "Replace"}) {
    const json node = {{"type", type}};
    try {
      Tokenizer::from_hf_json_text(byte_level_json(node), {}, "bl.json");
      ADD_FAILURE() << type << " accepted with byte-level BPE";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("normalizer '") + type + "' is not supported"),
                std::string::npos) << e.what();
    }
  }
  for (const char* type : {"Lowercase", "Strip", "Precompiled", "BertNormalizer"}) {
    const json node = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", type}}}}};
    try {
      Tokenizer::from_hf_json_text(byte_fallback_json(node), {}, "bf.json");
      ADD_FAILURE() << type << " accepted with byte_fallback BPE";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("normalizer '") + type +
                                           "' is not supported with byte_fallback BPE"),
                std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvattn
