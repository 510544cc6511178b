// BPE tokenizers loaded from GGUF metadata or from an HF tokenizer.json, plus a UTF-8-safe
// streaming decoder. Two families:
//  - byte-level BPE (GPT-2 family: SmolLM2, Llama-3, Qwen2/3);
//  - SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma): spaces spelled "▁",
//    unknown characters spelled with <0xXX> byte tokens (see src/engine/tokenizer/spm.h).
//
// encode(): added/special tokens are cut out literally first (leftmost, longest match); each
// remaining span is split by the pre-tokenizer regexes (PCRE2, UTF + UCP), mapped through
// GPT-2's byte-to-unicode table and merged by BPE rank -- or, for SentencePiece-style models,
// normalized ("▁" for spaces, the prefix space) and merged by score (GGUF) or rank (tokenizer.json).
// encode() never adds BOS: callers add bos_id() when add_bos() is true (chat templates already
// contain their own markers).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvattn/engine/chat_template.h"
#include "kvattn/engine/gguf.h"

namespace kvattn {

namespace tokenizer_detail {
struct Impl;
}

class Tokenizer {
 public:
  // GGUF keys: tokenizer.ggml.{model ("gpt2" or "llama"), pre, tokens, token_type, merges,
  // bos_token_id, eos_token_id, add_bos_token}, tokenizer.chat_template; for "llama" also
  // tokenizer.ggml.{scores, add_space_prefix, unknown_token_id}.
  static Tokenizer from_gguf(const GgufFile& gguf);
  // HF tokenizer.json (model.type "BPE": byte-level, or with byte_fallback and the Prepend /
  // Replace / Metaspace steps SentencePiece conversions use; NFC/NFD/NFKC/NFKD normalizers, via
  // utf8proc); tokenizer_config.json (optional) supplies bos/eos, add_bos_token and chat_template.
  static Tokenizer from_hf_json(const std::string& tokenizer_json_path,
                                const std::string& tokenizer_config_path = "");
  // Same as from_hf_json on in-memory JSON text (used by tests and fuzzers).
  static Tokenizer from_hf_json_text(std::string_view tokenizer_json,
                                     std::string_view tokenizer_config_json = {},
                                     const std::string& name = "<memory>");

  // parse_special: match special (control) tokens such as <|im_start|> in the text. Non-special
  // added tokens are always matched, as in HF tokenizers.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Concatenated token bytes; may contain invalid UTF-8 when ids cut a character. SentencePiece-
  // style models then drop the prefix space as HF's Strip decoder does (one leading space of the
  // whole text; llama.cpp keeps it after a skipped BOS).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // The token's text as stored in the vocabulary (byte-level form, e.g. "Ġthe").
  std::string token_text(int32_t id) const;
  // The raw bytes the token decodes to (" the").
  const std::string& token_bytes(int32_t id) const;
  int32_t vocab_size() const;
  std::optional<int32_t> token_id(std::string_view token_text) const;
  bool is_special(int32_t id) const;

  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;  // -1 when the model has none
  bool add_bos() const;
  // eos plus the end-of-turn tokens present in the vocabulary (<|im_end|>, <|endoftext|>,
  // <|eot_id|>, <|end_of_text|>, ...), sorted, without duplicates.
  std::vector<int32_t> stop_ids() const;

  const std::optional<ChatTemplate>& chat_template() const;
  // Throws when the model's template is not a recognised family (see chat_template.h).
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt,
                                  std::optional<bool> enable_thinking = std::nullopt,
                                  std::string_view tools_json = {}) const;

 private:
  explicit Tokenizer(std::shared_ptr<const tokenizer_detail::Impl> impl);
  std::shared_ptr<const tokenizer_detail::Impl> impl_;
};

// Turns a stream of token ids into text that never ends in half a UTF-8 character: bytes of an
// incomplete character are held back until the next token completes it (byte-fallback tokens
// included). Invalid bytes become U+FFFD. The stream continues a prompt, so the first token's
// "▁" stays a space (as llama.cpp's token_to_piece). The tokenizer must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(&tokenizer), skip_special_(skip_special) {}
  std::string push(int32_t id);
  // Emits what is held back (an incomplete character becomes U+FFFD) and resets.
  std::string flush();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace kvattn
