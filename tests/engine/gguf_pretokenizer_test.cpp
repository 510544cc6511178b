// GGUF pre-tokenizer names split text as llama.cpp does, one name per regex list kvattn has
// (session 52's falcon, deepseek-llm / -coder / -v3, qwen35, tekken, gpt-4o, ... and the older
// ones). The expected pieces are llama.cpp's own unicode_regex_split output for the list
// llama-vocab.cpp gives each name, on its test-tokenizer-0 texts and adversarial ones
// (combining marks, digits of many scripts, CJK, emoji, whitespace runs and non-ASCII spaces,
// apostrophes, newlines), written by scripts/make_gguf_pretokenizer_test_data.py. The splits
// need no vocabulary; loading under each name is checked with a byte vocabulary and one merge.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/model_file_writer.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {
namespace {

#include "engine/gguf_pretokenizer_test_data.inc"

std::string shown(const std::vector<std::string>& pieces) {
  std::string s;
  for (const std::string& p : pieces) s += "[" + p + "]";
  return s;
}

std::vector<std::string> cut(const std::string& text, const std::vector<int>& lengths) {
  std::vector<std::string> pieces;
  size_t at = 0;
  for (int n : lengths) {
    pieces.push_back(text.substr(at, static_cast<size_t>(n)));
    at += static_cast<size_t>(n);
  }
  EXPECT_EQ(at, text.size());
  return pieces;
}

TEST(GgufPreTokenizer, SplitsAsLlamaCpp) {
  ASSERT_GE(kPreTexts.size(), 150u);
  for (const auto& [name, splits] : kPreSplits) {
    ASSERT_EQ(splits.size(), kPreTexts.size()) << name;
    const auto g = tokenizer_detail::pretokenizer_for_gguf(name, "t.gguf");
    for (size_t i = 0; i < kPreTexts.size(); ++i) {
      const std::vector<std::string> got = g.pre.run(kPreTexts[i]);
      const std::vector<std::string> want = cut(kPreTexts[i], splits[i]);
      EXPECT_EQ(got, want) << name << " text #" << i << " '" << kPreTexts[i] << "'\n got  "
                           << shown(got) << "\n want " << shown(want);
    }
  }
}

// The names new in session 52 keep llama.cpp's defaults: merges applied and no BOS unless the
// file says so, except where llama-vocab.cpp sets ignore_merges / add_bos for the name.
TEST(GgufPreTokenizer, NewNamesKeepLlamaCppsMergeAndBosDefaults) {
  for (const char* name : {"falcon", "deepseek-llm", "deepseek-coder", "qwen35", "deepseek-v3",
                           "gpt-4o", "llama4", "seed-coder", "bailingmoe", "exaone-moe", "bloom",
                           "chatglm-bpe"}) {
    const auto g = tokenizer_detail::pretokenizer_for_gguf(name, "t.gguf");
    EXPECT_FALSE(g.ignore_merges) << name;
    EXPECT_FALSE(g.add_bos) << name;
  }
  const auto tekken = tokenizer_detail::pretokenizer_for_gguf("tekken", "t.gguf");
  EXPECT_TRUE(tekken.ignore_merges);
  EXPECT_TRUE(tekken.add_bos);
  for (const char* name : {"minicpm5", "granite-embed-multi-97m", "youtu", "glm4"}) {
    EXPECT_TRUE(tokenizer_detail::pretokenizer_for_gguf(name, "t.gguf").ignore_merges) << name;
  }
}

// Names whose pipelines llama.cpp runs through code of its own (Kimi K2) or that are not
// byte-level BPE (Gemma 4) are refused by name, never guessed.
TEST(GgufPreTokenizer, UnsupportedNamesAreRefusedByName) {
  for (const char* name :
       {"kimi-k2", "gemma4", "chameleon", "superbpe", "whitespace", "sarvam-moe"}) {
    try {
      tokenizer_detail::pretokenizer_for_gguf(name, "t.gguf");
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("t.gguf: tokenizer.ggml.pre '" + std::string(name) +
                                           "' is not supported"),
                std::string::npos)
          << e.what();
    }
  }
}

// The 256 byte tokens (id = byte) and "'s" (id 256) with the merge "'" + "s": it applies inside
// a piece and never across a split.
Tokenizer byte_vocab(const char* pre) {
  const auto& alphabet = tokenizer_detail::byte_to_unicode();
  std::vector<std::string> tokens(alphabet.begin(), alphabet.end());
  tokens.push_back("'s");
  testing::GgufBuilder g;
  g.kv_str("tokenizer.ggml.model", "gpt2");
  g.kv_str("tokenizer.ggml.pre", pre);
  g.kv_strs("tokenizer.ggml.tokens", tokens);
  g.kv_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
  g.kv_strs("tokenizer.ggml.merges", {"' s"});
  return Tokenizer::from_gguf(GgufFile::from_bytes(g.build(), "t.gguf"));
}

TEST(GgufPreTokenizer, NewNamesLoadAndSplitBeforeMerging) {
  const std::string text = "it's 12 e\xCC\x81!\n\xE4\xBD\xA0 \xF0\x9F\xA6\x99";
  for (const char* name : {"qwen35", "falcon", "deepseek-llm", "deepseek-coder"}) {
    const Tokenizer tok = byte_vocab(name);
    EXPECT_EQ(tok.decode(tok.encode(text, false)), text) << name;
    // Qwen's contraction piece "'s" merges; the others cut "'" off as punctuation.
    const std::vector<int32_t> want = std::string(name) == "qwen35"
                                          ? std::vector<int32_t>{'x', 256}
                                          : std::vector<int32_t>{'x', '\'', 's'};
    EXPECT_EQ(tok.encode("x's", false), want) << name;
  }
}

}  // namespace
}  // namespace kvattn
