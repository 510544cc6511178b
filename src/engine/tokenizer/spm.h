// SentencePiece-style BPE (Llama 2, Mistral, Gemma): spaces are spelled "▁" (U+2581), text is
// split into UTF-8 characters and merged, and what the vocabulary cannot spell falls back to
// <0xXX> byte tokens. Two merge orders exist and both are kept, because the files disagree:
//  - by score (GGUF tokenizer.ggml.model "llama", llama.cpp's llm_tokenizer_spm): repeatedly merge
//    the adjacent pair whose concatenation is a token with the highest score (ties: leftmost),
//    then spell every symbol that is not a token with byte tokens;
//  - by rank (HF tokenizer.json BPE with byte_fallback): characters that are not tokens become
//    byte tokens (or unk) first, then merges apply by rank as in byte-level BPE.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/normalizer.h"

namespace kvattn::tokenizer_detail {

inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // "▁" U+2581

// How the text between added tokens is spelled before the model sees it. HF normalizers
// (Prepend, Replace, NFC/NFKC/...) run first, in order, then the Metaspace pre-tokenizer when there is one.
struct SpmTextRule {
  enum class Kind { kPrepend, kReplace, kUnicode } kind;
  std::string from;  // kReplace: the literal to find (non-empty); kPrepend: the text prepended
  std::string to;    // kReplace: its replacement
  UnicodeForm form = UnicodeForm::kNFC;  // kUnicode
};

struct SpmMetaspace {
  enum class Prepend { kNever, kFirst, kAlways };
  std::string replacement{kSpmSpace};
  Prepend prepend = Prepend::kAlways;  // kFirst: only the span at the start of the text
  bool split = true;                   // split before each replacement (MergedWithNext)
};

// How one token decodes (HF decoder steps applied to each token, in order, before Fuse).
struct SpmDecodeStep {
  enum class Kind { kReplace, kByteFallback, kMetaspace } kind;
  std::string from, to;        // kReplace; kMetaspace: from = replacement, to = " "
  bool strip_first = false;    // kMetaspace: the first token loses its replacements instead
};

struct SpmConfig {
  std::vector<SpmTextRule> rules;
  bool metaspace = false;
  SpmMetaspace meta;
  bool fuse_unk = false;  // HF: consecutive unknown characters become one unk token

  // Decoding. GGUF files decode by token type (llama.cpp), tokenizer.json files by `steps`.
  std::vector<SpmDecodeStep> steps;
  int strip_leading = 0, strip_trailing = 0;  // spaces cut from decode()'s result (HF Strip)
  bool first_token_differs = false;  // a kMetaspace step with strip_first (set by spm_finalize)
};

// One symbol per UTF-8 character, as llama.cpp and HF split; each byte of malformed UTF-8 is a
// symbol of its own (llama.cpp reads the length from the lead byte alone, so a stray lead byte
// swallows the next character, a "▁" included, and the text no longer round-trips).
std::vector<std::string_view> spm_symbols(std::string_view text);
// "<0xAB>" -> 0xAB (hex digits of either case); -1 for any other text.
int parse_byte_token(std::string_view text);
std::string byte_token_text(uint8_t b);  // 0xAB -> "<0xAB>"

}  // namespace kvattn::tokenizer_detail
