// Pre-tokenizer: splits text into the pieces BPE merges within. A pipeline of regex splits, each
// applied to every piece the previous step produced; a match and the text between matches both
// become pieces ("Isolated" in HF terms). Regexes run on PCRE2 with UTF and UCP, so \p{L}, \p{N}
// and \s are Unicode-aware as in HF tokenizers (Oniguruma) and llama.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvattn::tokenizer_detail {

class Regex {
 public:
  // `literal`: match `pattern` as a plain string (HF Split with a String pattern).
  Regex(const std::string& pattern, bool literal = false);
  // Appends the pieces of `text` (matches and the gaps between them, in order) to `out`. With
  // `drop_matches`, matches are removed instead (HF "Removed"). Invalid UTF-8 bytes are never
  // handed to the regex: each becomes a piece of its own.
  void split(std::string_view text, std::vector<std::string_view>& out,
             bool drop_matches = false) const;

 private:
  void split_valid(std::string_view text, std::vector<std::string_view>& out,
                   bool drop_matches) const;
  std::shared_ptr<void> code_;  // pcre2_code_8
  std::string pattern_;
};

struct PreTokenizer {
  struct Step {
    std::shared_ptr<const Regex> regex;
    bool drop_matches = false;
    bool add_prefix_space = false;  // prepend ' ' to each piece not starting with one (ByteLevel)
  };
  std::vector<Step> steps;

  std::vector<std::string> run(std::string_view text) const;
};

// GPT-2's pattern, as published (HF ByteLevel; the GGUF pipelines are in gguf_pretokenizer.cpp).
// llama.cpp writes it without its last "\s+" alternative: the same pieces, since whitespace no
// alternative matches becomes a piece of its own between two matches.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// What llama.cpp (llama-vocab.cpp, mid 2026) makes of a GGUF tokenizer.ggml.pre value: its
// regex pipeline, whether BPE merges are skipped for whole-word tokens (ignore_merges) and
// whether BOS is added when tokenizer.ggml.add_bos_token is absent. Throws for values whose
// pipeline kvattn lacks, naming the supported ones. (gguf_pretokenizer.cpp)
struct GgufPreTokenizer {
  PreTokenizer pre;
  bool ignore_merges = false;
  bool add_bos = false;
};
GgufPreTokenizer pretokenizer_for_gguf(const std::string& pre, const std::string& file);

}  // namespace kvattn::tokenizer_detail
