#include "engine/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "engine/tokenizer/utf8.h"
#include "kvattn/core/error.h"

namespace kvattn::tokenizer_detail {
namespace {

utf8proc_option_t options(UnicodeForm form) {
  // UTF8PROC_STABLE: no unassigned code points are changed (Unicode's stable normalization).
  switch (form) {
    case UnicodeForm::kNFC: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case UnicodeForm::kNFD: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case UnicodeForm::kNFKC:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case UnicodeForm::kNFKD:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return UTF8PROC_STABLE;
}

void append_normalized(std::string& out, std::string_view run, UnicodeForm form) {
  if (run.empty()) return;
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &dst, options(form));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dst, &std::free);
  KVATTN_CHECK(n >= 0, "tokenizer: Unicode normalization failed: ", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

std::optional<UnicodeForm> unicode_form(std::string_view hf_type) {
  if (hf_type == "NFC") return UnicodeForm::kNFC;
  if (hf_type == "NFD") return UnicodeForm::kNFD;
  if (hf_type == "NFKC") return UnicodeForm::kNFKC;
  if (hf_type == "NFKD") return UnicodeForm::kNFKD;
  return std::nullopt;
}

std::string normalize_unicode(std::string_view text, UnicodeForm form) {
  if (is_ascii(text)) return std::string(text);  // ASCII is invariant under all four forms
  std::string out;
  out.reserve(text.size());
  size_t run = 0, i = 0;
  while (i < text.size()) {
    int bad = 1;
    const int n = utf8_char_len(text, i, &bad);
    if (n > 0) {
      i += static_cast<size_t>(n);
      continue;
    }
    append_normalized(out, text.substr(run, i - run), form);
    const size_t skip = n < 0 ? text.size() - i : static_cast<size_t>(std::max(bad, 1));
    out.append(text.substr(i, skip));
    i += skip;
    run = i;
  }
  append_normalized(out, text.substr(run), form);
  return out;
}

}  // namespace kvattn::tokenizer_detail
