#include "engine/tokenizer/spm.h"

#include <queue>

#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/utf8.h"

namespace kvattn::tokenizer_detail {

std::vector<std::string_view> spm_symbols(std::string_view text) {
  std::vector<std::string_view> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const int len = utf8_char_len(text, i);
    const size_t n = len > 0 ? static_cast<size_t>(len) : 1;
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string byte_token_text(uint8_t b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
}

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  size_t i = 0;
  for (size_t at; (at = s.find(from, i)) != std::string::npos; i = at + from.size()) {
    out.append(s, i, at - i).append(to);
  }
  out.append(s, i, std::string::npos);
  s = std::move(out);
}

}  // namespace

void Impl::spm_encode(std::string_view span, bool at_text_start, std::vector<int32_t>& out) const {
  std::string text(span);
  for (const SpmTextRule& r : spm.rules) {
    if (r.kind == SpmTextRule::Kind::kReplace) {
      replace_all(text, r.from, r.to);
    } else if (r.kind == SpmTextRule::Kind::kUnicode) {
      text = normalize_unicode(text, r.form);
    } else if (!text.empty()) {
      text.insert(0, r.from);
    }
  }
  auto encode_piece = [&](std::string_view piece) {
    if (model == Model::kSpmByScore) {
      spm_by_score(piece, out);
    } else {
      spm_by_rank(piece, out);
    }
  };
  if (!spm.metaspace) {
    encode_piece(text);
    return;
  }
  // HF Metaspace: spaces become the replacement, which is prepended unless already there.
  const std::string& rep = spm.meta.replacement;
  replace_all(text, " ", rep);
  using P = SpmMetaspace::Prepend;
  const bool prepend = spm.meta.prepend == P::kAlways || (spm.meta.prepend == P::kFirst && at_text_start);
  if (prepend && !text.empty() && !text.starts_with(rep)) text.insert(0, rep);
  if (!spm.meta.split) {
    encode_piece(text);
    return;
  }
  size_t start = 0;  // each piece runs up to the next replacement ("MergedWithNext")
  for (size_t at = text.find(rep, 1); at != std::string::npos; at = text.find(rep, at + 1)) {
    encode_piece(std::string_view(text).substr(start, at - start));
    start = at;
  }
  encode_piece(std::string_view(text).substr(start));
}

// llama.cpp's llm_tokenizer_spm_session::tokenize, step for step. A queued bigram is stale when
// either side has been merged away or has grown; the size check catches both, since a symbol only
// grows by absorbing its right neighbour.
void Impl::spm_by_score(std::string_view piece, std::vector<int32_t>& out) const {
  const std::vector<std::string_view> units = spm_symbols(piece);
  if (units.empty()) return;
  struct Sym {
    size_t start, n;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(units.size());
  for (std::string_view u : units) {
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<size_t>(u.data() - piece.data()), u.size(), i - 1, i + 1});
  }
  syms.back().next = -1;
  auto lookup = [&](size_t start, size_t n) {
    auto it = ids.find(std::string(piece.substr(start, n)));
    return it == ids.end() ? -1 : it->second;
  };
  struct Bigram {
    float score;
    int32_t left, right;
    size_t size;
  };
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t n = syms[left].n + syms[right].n;
    const int32_t id = lookup(syms[left].start, n);
    if (id >= 0) queue.push({scores[id], left, right, n});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = syms[b.left];
    Sym& r = syms[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (l.next >= 0) syms[l.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const int32_t id = lookup(syms[i].start, syms[i].n);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t k = 0; k < syms[i].n; ++k) {
      const int32_t b = byte_ids[static_cast<uint8_t>(piece[syms[i].start + k])];
      if (b >= 0) out.push_back(b);  // spm_finalize guarantees one for GGUF vocabularies
    }
  }
}

// HF BPE::merge_word with byte_fallback: a character that is not a token becomes its byte tokens
// when all of them exist, else unk (fused with the previous unk under fuse_unk, dropped without
// an unk token); then merges apply by rank. Like HF, a pending unk is not flushed by byte tokens.
void Impl::spm_by_rank(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    if (auto it = ids.find(std::string(piece)); it != ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(piece.size());
  bool pending_unk = false;
  for (std::string_view u : spm_symbols(piece)) {
    if (auto it = ids.find(std::string(u)); it != ids.end()) {
      if (pending_unk) syms.push_back(unk);
      pending_unk = false;
      syms.push_back(it->second);
      continue;
    }
    bool all_bytes = true;
    for (unsigned char c : u) all_bytes = all_bytes && byte_ids[c] >= 0;
    if (all_bytes) {
      for (unsigned char c : u) syms.push_back(byte_ids[c]);
      continue;
    }
    if (unk < 0) continue;
    if (pending_unk && !spm.fuse_unk) syms.push_back(unk);
    pending_unk = true;
  }
  if (pending_unk) syms.push_back(unk);
  merge_by_rank(std::move(syms), out);
}

std::string Impl::spm_token_bytes(int32_t id, std::string_view text, bool first) const {
  if (!types.empty() && id >= 0) {  // GGUF: llama.cpp's token_to_piece
    std::string s(text);
    switch (types[id]) {
      case kTypeNormal:
        replace_all(s, kSpmSpace, " ");
        return s;
      case kTypeByte:
        return std::string(1, static_cast<char>(parse_byte_token(text)));  // checked at load
      case kTypeControl:
      case kTypeUserDefined:
      case kTypeUnknown:
        return s;
      default:
        return {};  // unused and undefined tokens print nothing
    }
  }
  std::string s(text);
  for (const SpmDecodeStep& step : spm.steps) {
    switch (step.kind) {
      case SpmDecodeStep::Kind::kReplace:
        replace_all(s, step.from, step.to);
        break;
      case SpmDecodeStep::Kind::kMetaspace:
        replace_all(s, step.from, first && step.strip_first ? "" : " ");
        break;
      case SpmDecodeStep::Kind::kByteFallback:
        if (const int b = parse_byte_token(s); b >= 0) s.assign(1, static_cast<char>(b));
        break;
    }
  }
  return s;
}

void Impl::spm_finalize() {
  for (int b = 0; b < 256; ++b) {
    auto it = ids.find(byte_token_text(static_cast<uint8_t>(b)));
    int32_t id = it == ids.end() ? -1 : it->second;
    if (model == Model::kSpmByScore) {  // llama.cpp: <0xXX>, else the byte itself as a token
      if (id < 0) {
        it = ids.find(std::string(1, static_cast<char>(b)));
        id = it == ids.end() ? unk : it->second;
      }
      KVATTN_CHECK(id >= 0, name, ": the vocabulary has no byte token ",
                   byte_token_text(static_cast<uint8_t>(b)),
                   " and no unknown token to spell that byte with");
    }
    byte_ids[b] = id;
  }
  for (const SpmDecodeStep& step : spm.steps) {
    spm.first_token_differs |= step.kind == SpmDecodeStep::Kind::kMetaspace && step.strip_first;
  }
}

}  // namespace kvattn::tokenizer_detail
