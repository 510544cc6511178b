#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "engine/tokenizer/utf8.h"
#include "kvattn/core/error.h"

namespace kvattn::tokenizer_detail {

Regex::Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &err, &err_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    KVATTN_FAIL("tokenizer: pre-tokenizer regex '", pattern, "' does not compile at offset ",
                err_offset, ": ", reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  code_ = std::shared_ptr<void>(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); });
}

void Regex::split(std::string_view text, std::vector<std::string_view>& out,
                  bool drop_matches) const {
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const int n = utf8_char_len(text, i);
    if (n > 0) {
      i += n;
      continue;
    }
    split_valid(text.substr(start, i - start), out, drop_matches);
    out.push_back(text.substr(i, 1));
    start = ++i;
  }
  split_valid(text.substr(start), out, drop_matches);
}

void Regex::split_valid(std::string_view text, std::vector<std::string_view>& out,
                        bool drop_matches) const {
  if (text.empty()) return;
  auto* code = static_cast<pcre2_code*>(code_.get());
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  KVATTN_CHECK(md != nullptr, "tokenizer: out of memory for regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap = 0, pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(),
                               nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      KVATTN_FAIL("tokenizer: regex '", pattern_, "' failed on a ", text.size(),
                  "-byte piece: ", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e <= b) {  // an empty match splits nothing; step over one character
      const int n = utf8_char_len(text, b < text.size() ? b : text.size() - 1);
      pos = b + static_cast<size_t>(n > 0 ? n : 1);
      continue;
    }
    if (b > gap) out.push_back(text.substr(gap, b - gap));
    if (!drop_matches) out.push_back(text.substr(b, e - b));
    gap = pos = e;
  }
  if (gap < text.size()) out.push_back(text.substr(gap));
}

std::vector<std::string> PreTokenizer::run(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string_view> views;
  for (const Step& step : steps) {
    std::vector<std::string> next;
    for (std::string& p : pieces) {
      if (step.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
      if (!step.regex) {
        next.push_back(std::move(p));
        continue;
      }
      views.clear();
      step.regex->split(p, views, step.drop_matches);
      for (std::string_view v : views) next.emplace_back(v);
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace kvattn::tokenizer_detail
