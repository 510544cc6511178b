#include "kvattn/engine/tokenizer.h"

#include <algorithm>
#include <queue>

#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/utf8.h"

namespace kvattn {
namespace {

// C's isspace in the "C" locale (llama.cpp's test for lstrip / rstrip).
bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

namespace tokenizer_detail {

void Impl::check_id(int64_t id, const char* what) const {
  KVATTN_CHECK(id >= -1 && id < static_cast<int64_t>(tokens.size()), name, ": ", what, " ", id,
               " is outside the vocabulary of ", tokens.size(), " tokens");
}

void Impl::finalize() {
  KVATTN_CHECK(!tokens.empty() && static_cast<int64_t>(tokens.size()) <= kMaxVocab, name,
               ": vocabulary size ", tokens.size(), " must lie in [1, ", kMaxVocab, "]");
  check_id(unk, "unknown token id");
  check_id(bos, "bos token id");
  check_id(eos, "eos token id");
  if (chat_template) {  // the template's bos_token / eos_token are the vocabulary's
    if (bos >= 0 && !tokens[bos].empty()) chat_template->bos_token = tokens[bos];
    if (eos >= 0 && !tokens[eos].empty()) chat_template->eos_token = tokens[eos];
  }
  const auto n = static_cast<int32_t>(tokens.size());
  ids.reserve(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    if (!tokens[i].empty()) ids.emplace(tokens[i], i);  // first spelling wins
  }
  special.assign(tokens.size(), 0);
  bytes.resize(tokens.size());
  const bool byte_level = model == Model::kByteLevelBpe;
  for (int32_t i = 0; i < n; ++i) {
    bytes[i] = byte_level ? byte_level_decode(tokens[i]) : spm_token_bytes(i, tokens[i], false);
  }
  for (const AddedToken& a : added) {
    KVATTN_CHECK(a.id >= 0 && a.id < n, name, ": added token '", a.content, "' has id ", a.id,
                 " outside the vocabulary");
    special[a.id] = a.special;
    if (byte_level) bytes[a.id] = byte_level_decode(a.content);
    else if (types.empty()) bytes[a.id] = spm_token_bytes(-1, a.content, false);
    ids.try_emplace(a.content, a.id);
  }
  std::erase_if(added, [](const AddedToken& a) { return a.content.empty(); });
  for (int32_t k = 0; k < static_cast<int32_t>(added.size()); ++k) {
    added_by_byte[static_cast<uint8_t>(added[k].content[0])].push_back(k);
  }
  for (auto& list : added_by_byte) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return added[a].content.size() > added[b].content.size();
    });
  }
  if (byte_level) {
    for (int b = 0; b < 256; ++b) {
      auto it = ids.find(byte_to_unicode()[b]);
      byte_ids[b] = it == ids.end() ? -1 : it->second;
    }
  } else {
    spm_finalize();
  }
  merge_rank.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(a + b);
    if (ia == ids.end() || ib == ids.end() || iab == ids.end()) continue;  // can never apply
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    merge_rank.try_emplace(key, static_cast<int32_t>(r), iab->second);
  }
  merges.clear();
  merges.shrink_to_fit();

  static const char* kEndOfTurn[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>",
                                     "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>", "<|end|>"};
  if (eos >= 0) stop.push_back(eos);
  for (const char* t : kEndOfTurn) {
    auto it = ids.find(t);
    if (it != ids.end() && special[it->second]) stop.push_back(it->second);
  }
  std::sort(stop.begin(), stop.end());
  stop.erase(std::unique(stop.begin(), stop.end()), stop.end());
}

// BPE within one piece: start from one symbol per byte, then repeatedly merge the adjacent pair
// of lowest rank (leftmost first on ties), as HF tokenizers and llama.cpp do. A heap of candidate
// pairs keeps this O(n log n) for long pieces; stale entries are skipped when popped.
void Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    auto it = ids.find(byte_level_encode(piece));
    if (it != ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  for (unsigned char c : piece) {
    const int32_t id = byte_ids[c] >= 0 ? byte_ids[c] : unk;
    if (id >= 0) ids.push_back(id);  // else a byte the vocabulary cannot spell (HF drops it)
  }
  merge_by_rank(std::move(ids), out);
}

void Impl::merge_by_rank(std::vector<int32_t> ids, std::vector<int32_t>& out) const {
  if (ids.empty()) return;
  struct Sym {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(ids.size());
  for (int32_t id : ids) {
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, i + 1});
  }
  syms.back().next = -1;

  struct Cand {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Cand& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0) return;
    const int32_t a = syms[left].id, b = syms[syms[left].next].id;
    auto it = merge_rank.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    if (it != merge_rank.end()) heap.push({it->second.first, left, a, b});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& l = syms[c.left];
    if (l.id != c.left_id || l.next < 0 || syms[l.next].id != c.right_id) continue;  // stale
    const int32_t r = l.next;
    l.id = merge_rank.at((static_cast<uint64_t>(c.left_id) << 32) |
                         static_cast<uint32_t>(c.right_id)).second;
    l.next = syms[r].next;
    if (l.next >= 0) syms[l.next].prev = c.left;
    syms[r].id = -1;
    push(l.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace tokenizer_detail

using tokenizer_detail::Impl;

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  auto encode_span = [&](std::string_view span, bool at_text_start) {
    if (span.empty()) return;
    if (t.model != tokenizer_detail::Model::kByteLevelBpe) {
      t.spm_encode(span, at_text_start, out);
      return;
    }
    if (t.unicode_forms.empty()) {
      for (const std::string& piece : t.pre.run(span)) t.bpe(piece, out);
      return;
    }
    std::string text(span);
    for (tokenizer_detail::UnicodeForm f : t.unicode_forms) text = normalize_unicode(text, f);
    for (const std::string& piece : t.pre.run(text)) t.bpe(piece, out);
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const tokenizer_detail::AddedToken* hit = nullptr;
    for (int32_t k : t.added_by_byte[static_cast<uint8_t>(text[i])]) {
      const auto& a = t.added[k];
      if ((parse_special || !a.special) && text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t end = i;  // of the text before the token
    if (hit->lstrip) {
      while (end > start && is_ascii_space(text[end - 1])) --end;
    }
    encode_span(text.substr(start, end - start), start == 0);
    out.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && is_ascii_space(text[i])) ++i;
    }
    start = i;
  }
  encode_span(text.substr(start), start == 0);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& t = *impl_;
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    const std::string& bytes = token_bytes(id);  // checks the id
    if (first && t.spm.first_token_differs) {
      out += t.spm_token_bytes(id, t.tokens[id], true);
    } else {
      out += bytes;
    }
    first = false;
  }
  // HF's Strip decoder (after Fuse) and llama.cpp's add_space_prefix: the space the encoder put
  // in front of the text is not part of it.
  int lead = t.spm.strip_leading, trail = t.spm.strip_trailing;
  if (lead == 0 && trail == 0) return out;
  size_t b = 0, e = out.size();
  while (lead-- > 0 && b < e && out[b] == ' ') ++b;
  while (trail-- > 0 && e > b && out[e - 1] == ' ') --e;
  return out.substr(b, e - b);
}

std::string Tokenizer::token_text(int32_t id) const {
  KVATTN_CHECK(id >= 0 && id < vocab_size(), "Tokenizer::token_text: id ", id,
               " is outside the vocabulary of ", vocab_size());
  return impl_->tokens[id];
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  KVATTN_CHECK(id >= 0 && id < vocab_size(), "Tokenizer::decode: id ", id,
               " is outside the vocabulary of ", vocab_size());
  return impl_->bytes[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  auto it = impl_->ids.find(std::string(text));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id] != 0;
}

int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos && impl_->bos >= 0; }
std::vector<int32_t> Tokenizer::stop_ids() const { return impl_->stop; }

const std::optional<ChatTemplate>& Tokenizer::chat_template() const {
  return impl_->chat_template;
}

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt,
                                           std::optional<bool> enable_thinking,
                                           std::string_view tools_json) const {
  KVATTN_CHECK(impl_->chat_template.has_value(), impl_->name,
               ": the model has no chat template kvattn recognises (ChatML or Llama-3)");
  return impl_->chat_template->render(messages, add_generation_prompt, enable_thinking,
                                      tools_json);
}

}  // namespace kvattn
