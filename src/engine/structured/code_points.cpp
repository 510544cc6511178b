#include "engine/structured/code_points.h"

#include <algorithm>

namespace kvattn::structured {

CodePoints normalized(CodePoints s) {
  std::sort(s.begin(), s.end());
  CodePoints out;
  for (auto [lo, hi] : s) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodePoints intersect(const CodePoints& a, const CodePoints& b) {
  CodePoints out;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const uint32_t lo = std::max(a[i].first, b[j].first);
    const uint32_t hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second ? i : j)++;
  }
  return out;
}

CodePoints negated(const CodePoints& s) {
  CodePoints out;
  uint32_t next = 0;
  for (auto [lo, hi] : s) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return intersect(out, kScalars);
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | cp >> 12);
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | cp >> 18);
    s += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

Utf8Char decode_utf8(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) {
    return at + i < text.size() ? static_cast<uint8_t>(text[at + i]) : 0;
  };
  const uint8_t b0 = byte(0);
  const size_t len = b0 < 0x80                 ? 1
                     : b0 >= 0xC2 && b0 < 0xE0 ? 2
                     : b0 >= 0xE0 && b0 < 0xF0 ? 3
                     : b0 >= 0xF0 && b0 < 0xF5 ? 4
                                               : 0;
  uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return {};
    cp = cp << 6 | (byte(i) & 0x3F);
  }
  const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
  if (len == 0 || overlong || !is_scalar(cp)) return {};
  return {cp, len};
}

std::optional<GrammarBuilder::Symbol> Utf8Sets::symbol(const CodePoints& set) {
  if (set.size() == 1 && set[0].first == set[0].second) return b_.literal(utf8(set[0].first));
  if (const auto it = built_.find(set); it != built_.end()) return it->second;
  struct Length {
    uint32_t lo, hi;
    uint8_t lead_lo, lead_hi;
    int tail;
  };
  static constexpr Length kLengths[] = {{0, 0x7F, 0x00, 0x7F, 0},
                                        {0x80, 0x7FF, 0xC0, 0xDF, 1},
                                        {0x800, 0xFFFF, 0xE0, 0xEF, 2},
                                        {0x10000, kMaxCodePoint, 0xF0, 0xF4, 3}};
  std::vector<GrammarBuilder::Symbol> alts;
  for (const Length& l : kLengths) {
    cps_ = intersect(set, {{l.lo, l.hi}});
    if (!cps_.empty()) bytes(0, l.lead_lo, l.lead_hi, uint32_t{1} << (6 * l.tail), l.tail, alts);
  }
  if (alts.empty()) return std::nullopt;
  const GrammarBuilder::Symbol s = b_.choice(alts);
  built_.emplace(set, s);
  return s;
}

// Alternatives for bytes lo..hi, byte lo standing for code points first..first+block-1, each
// byte followed by `tail` continuation bytes.
void Utf8Sets::bytes(uint32_t first, uint8_t lo, uint8_t hi, uint32_t block, int tail,
                     std::vector<GrammarBuilder::Symbol>& alts) {
  ByteSet whole;
  for (uint32_t byte = lo; byte <= hi; ++byte) {
    const uint32_t a = first + (byte - lo) * block, z = a + block - 1;
    const auto it = std::lower_bound(cps_.begin(), cps_.end(), a,
                                     [](const auto& r, uint32_t v) { return r.second < v; });
    if (it == cps_.end() || it->first > z) continue;  // none of the block
    if (it->first <= a && it->second >= z) {          // all of it
      whole.set(byte);
      continue;
    }
    std::vector<GrammarBuilder::Symbol> next;
    bytes(a, 0x80, 0xBF, block / 64, tail - 1, next);
    next = {b_.choice(next)};
    next.insert(next.begin(), b_.byte(static_cast<uint8_t>(byte)));
    alts.push_back(b_.sequence(next));
  }
  if (whole.none()) return;
  std::vector<GrammarBuilder::Symbol> seq = {b_.bytes(whole)};
  for (int i = 0; i < tail; ++i) seq.push_back(b_.byte_range(0x80, 0xBF));
  alts.push_back(b_.sequence(seq));
}

}  // namespace kvattn::structured
