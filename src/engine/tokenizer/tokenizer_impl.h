// The tokenizer's state, filled by the GGUF and tokenizer.json loaders and then finalized.
#pragma once

#include <array>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/spm.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn::tokenizer_detail {

inline constexpr int64_t kMaxVocab = int64_t{1} << 24;

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;  // matched only when encode(parse_special = true)
  // HF's lstrip / rstrip (llama.cpp's LSTRIP / RSTRIP attributes): a match eats the ASCII
  // whitespace before / after it, which is then not tokenized.
  bool lstrip = false;
  bool rstrip = false;
};

enum class Model : uint8_t {
  kByteLevelBpe,  // GPT-2 family: byte-level alphabet, merges by rank
  kSpmByScore,    // GGUF "llama": SentencePiece BPE merged by token score (llama.cpp)
  kSpmByRank,     // tokenizer.json BPE with byte_fallback: merges by rank (HF)
};

// GGUF token types (llama_token_type).
enum TokenType : uint8_t {
  kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4, kTypeUnused = 5,
  kTypeByte = 6,
};

struct Impl {
  std::string name;  // the source file, for errors
  Model model = Model::kByteLevelBpe;
  // Filled by a loader:
  std::vector<std::string> tokens;          // vocabulary text, byte-level spelling; id = index
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  std::vector<AddedToken> added;
  std::vector<UnicodeForm> unicode_forms;  // byte-level BPE: HF normalizers, in order
  PreTokenizer pre;
  bool ignore_merges = false;  // a piece that is itself a token skips BPE (Llama-3)
  int32_t unk = -1, bos = -1, eos = -1;
  bool add_bos = false;
  std::optional<ChatTemplate> chat_template;
  // SentencePiece-style models only:
  std::vector<float> scores;   // kSpmByScore: one per token
  std::vector<uint8_t> types;  // GGUF token types (decoding follows them); empty for tokenizer.json
  SpmConfig spm;

  // Derived by finalize():
  std::vector<std::string> bytes;  // what each id decodes to
  std::vector<uint8_t> special;
  std::unordered_map<std::string, int32_t> ids;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_rank;  // (a,b) -> (rank, ab)
  std::array<int32_t, 256> byte_ids{};  // -1: the byte has no token
  std::array<std::vector<int32_t>, 256> added_by_byte;  // indices into `added`, longest first
  std::vector<int32_t> stop;

  void finalize();
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // Merges adjacent symbols by rank (lowest first, leftmost on ties) and appends the result.
  void merge_by_rank(std::vector<int32_t> syms, std::vector<int32_t>& out) const;

  // SentencePiece-style models (spm.cpp). `at_text_start`: the span begins the encoded text.
  void spm_encode(std::string_view span, bool at_text_start, std::vector<int32_t>& out) const;
  void spm_by_score(std::string_view piece, std::vector<int32_t>& out) const;
  void spm_by_rank(std::string_view piece, std::vector<int32_t>& out) const;
  // What token `id` (or, with id < 0, the added-token text `text`) decodes to. `first`: it is
  // the first token decode() emits (HF's Metaspace decoder drops its leading "▁" there).
  std::string spm_token_bytes(int32_t id, std::string_view text, bool first) const;
  void spm_finalize();  // byte_ids; checks the byte tokens of GGUF vocabularies
  void check_id(int64_t id, const char* what) const;
};

// SentencePiece-style loaders (load_gguf_spm.cpp, load_hf_spm.cpp). They fill `model`,
// `scores`, `types` and `spm`, and check what they read.
void read_gguf_token_types(const std::vector<int64_t>& types, Impl& t);
void read_gguf_spm(const GgufFile& g, Impl& t);
void read_hf_byte_fallback(const nlohmann::json& tokenizer_json, Impl& t);

}  // namespace kvattn::tokenizer_detail
