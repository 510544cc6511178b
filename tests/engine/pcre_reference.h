// Shared by the structured-output tests that compare kvattn's grammars with PCRE2
// (structured_regex_test, structured_gbnf_test): the reference matcher and a printable form of
// byte strings for failure messages.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace kvattn::structured::test {

// Bytes outside printable ASCII (and backslashes) as \xHH.
inline std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<uint8_t>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

// A PCRE2 pattern compiled twice: for full matches, and as (?:pattern)\z for hard partial
// matches (which PCRE2 refuses with PCRE2_ENDANCHORED): a subject that is a prefix of some
// match is a partial match or, when itself a match, either.
class Pcre {
 public:
  explicit Pcre(const std::string& pattern) {
    full_ = compile(pattern, PCRE2_ENDANCHORED);
    prefix_ = compile("(?:" + pattern + ")\\z", 0);
    data_ = pcre2_match_data_create(4, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(context_, 200000);  // backtracking blow-ups: skipped, not waited for
  }
  ~Pcre() {
    pcre2_match_context_free(context_);
    pcre2_match_data_free(data_);
    pcre2_code_free(full_);
    pcre2_code_free(prefix_);
  }
  Pcre(const Pcre&) = delete;
  Pcre& operator=(const Pcre&) = delete;

  bool ok() const { return full_ && prefix_; }
  const std::string& error() const { return error_; }
  // PCRE2's return code for a full match of `s`.
  int full(std::string_view s) const { return match(full_, s, 0); }
  // The same for "s can still become a match": >= 0 or PCRE2_ERROR_PARTIAL when it can.
  int prefix(std::string_view s) const { return match(prefix_, s, PCRE2_PARTIAL_HARD); }

 private:
  pcre2_code* compile(const std::string& pattern, uint32_t options) {
    pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_ANCHORED | options, &error, &offset, cc);
    pcre2_compile_context_free(cc);
    if (!code) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(error, buf, sizeof buf);
      error_ = std::string(reinterpret_cast<char*>(buf)) + " at " + std::to_string(offset);
    }
    return code;
  }
  int match(pcre2_code* code, std::string_view s, uint32_t options) const {
    return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, options, data_,
                       context_);
  }

  pcre2_code* full_ = nullptr;
  pcre2_code* prefix_ = nullptr;
  pcre2_match_data* data_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  std::string error_;
};

}  // namespace kvattn::structured::test
