// UTF-8 helpers and GPT-2's byte-to-unicode table (byte-level BPE vocabularies spell every byte
// as one printable code point, e.g. ' ' -> 'Ġ' U+0120, '\n' -> 'Ċ' U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvattn::tokenizer_detail {

// Length of the well-formed UTF-8 character starting at s[i] (1..4), 0 when the bytes there are
// not a well-formed character (bad lead, bad continuation, overlong, surrogate, > U+10FFFF), and
// -1 when they are a valid but incomplete prefix cut off by the end of s.
int utf8_char_len(std::string_view s, size_t i, int* bad_len = nullptr);
// With bad_len: when the result is 0, *bad_len is the length of the maximal ill-formed subpart
// (the bytes one U+FFFD replaces, as Unicode recommends and Rust/Python do).
bool is_valid_utf8(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
// Decodes one well-formed character at s[i] of length n (from utf8_char_len).
uint32_t decode_utf8(std::string_view s, size_t i, int n);

// The UTF-8 spelling of each byte in the byte-level alphabet.
const std::array<std::string, 256>& byte_to_unicode();
// The byte a code point spells, or -1 when it is not in the alphabet.
int unicode_to_byte(uint32_t cp);
// Token text in the byte-level alphabet -> raw bytes. A text with any code point outside the
// alphabet (added tokens such as "<|im_start|>" pass through unchanged, as do ones with spaces)
// is returned as is, like HF's ByteLevel decoder.
std::string byte_level_decode(std::string_view text);
std::string byte_level_encode(std::string_view bytes);

}  // namespace kvattn::tokenizer_detail
