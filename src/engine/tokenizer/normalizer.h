// Unicode normalization forms that HF tokenizer.json normalizers declare (NFC, NFD, NFKC, NFKD),
// computed with utf8proc. Qwen2/2.5/3's tokenizer.json declare NFC; the SentencePiece
// conversions of Llama 2 / Mistral / Gemma declare only Prepend/Replace. llama.cpp applies none
// of these to GGUF tokenizers of the supported families, so GGUF loaders add none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvattn::tokenizer_detail {

enum class UnicodeForm : uint8_t { kNFC, kNFD, kNFKC, kNFKD };

// "NFC" -> kNFC, ...; nullopt for any other normalizer type.
std::optional<UnicodeForm> unicode_form(std::string_view hf_type);

// The text in `form`. HF only ever sees valid UTF-8; here each maximal run of valid UTF-8 is
// normalized on its own and ill-formed bytes are kept as they are (so encode/decode still
// round-trip bytes that are not text).
std::string normalize_unicode(std::string_view text, UnicodeForm form);

}  // namespace kvattn::tokenizer_detail
