// The tokenizer's state, filled by the GGUF and tokenizer.json loaders and then finalized.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/pretokenizer.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn::tokenizer_detail {

inline constexpr int64_t kMaxVocab = int64_t{1} << 24;

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;  // matched only when encode(parse_special = true)
};

struct Impl {
  std::string name;  // the source file, for errors
  // Filled by a loader:
  std::vector<std::string> tokens;          // vocabulary text, byte-level spelling; id = index
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  std::vector<AddedToken> added;
  PreTokenizer pre;
  bool ignore_merges = false;  // a piece that is itself a token skips BPE (Llama-3)
  int32_t unk = -1, bos = -1, eos = -1;
  bool add_bos = false;
  std::optional<ChatTemplate> chat_template;

  // Derived by finalize():
  std::vector<std::string> bytes;  // what each id decodes to
  std::vector<uint8_t> special;
  std::unordered_map<std::string, int32_t> ids;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_rank;  // (a,b) -> (rank, ab)
  std::array<int32_t, 256> byte_ids{};
  std::array<std::vector<int32_t>, 256> added_by_byte;  // indices into `added`, longest first
  std::vector<int32_t> stop;

  void finalize();
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void check_id(int64_t id, const char* what) const;
};

}  // namespace kvattn::tokenizer_detail
