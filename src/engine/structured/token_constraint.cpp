#include "engine/structured/token_constraint.h"

#include <algorithm>
#include <limits>

namespace kvattn::structured {

TokenBytes::TokenBytes(std::vector<std::string> token_bytes, const std::vector<bool>& eligible)
    : bytes_(std::move(token_bytes)) {
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (id < eligible.size() && eligible[id] && !bytes_[id].empty()) {
      order_.push_back(static_cast<int32_t>(id));
    }
  }
  std::sort(order_.begin(), order_.end(),
            [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenBytes> vocab,
                                 std::vector<int32_t> end_ids,
                                 std::shared_ptr<FrameMasks> frames)
    : matcher_(std::move(grammar)),
      vocab_(std::move(vocab)),
      end_ids_(std::move(end_ids)),
      frames_(frames ? std::move(frames) : std::make_shared<FrameMasks>()) {
  std::sort(end_ids_.begin(), end_ids_.end());
  end_ids_.erase(std::unique(end_ids_.begin(), end_ids_.end()), end_ids_.end());
}

bool TokenConstraint::is_end(int32_t token) const {
  return std::binary_search(end_ids_.begin(), end_ids_.end(), token);
}

namespace {

size_t common_prefix(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t k = 0;
  while (k < n && a[k] == b[k]) ++k;
  return k;
}

void set_bit(std::vector<uint64_t>& bits, int32_t id) {
  bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<size_t>(id) % 64);
}

bool has_bit(const std::vector<uint64_t>& bits, int32_t id) {
  return (bits[static_cast<size_t>(id) / 64] >> (static_cast<size_t>(id) % 64)) & 1;
}

}  // namespace

template <typename Taken, typename Escaped>
void TokenConstraint::walk(const Matcher::State& start, std::span<const uint32_t> entries,
                           Taken&& taken, Escaped&& escaped) {
  // path_[k] is the state after the first k bytes of the current entry; `valid` of them carry
  // over to the next entry (its common prefix with this one). A prefix the grammar rejects
  // settles every entry that shares it alike: rejected, or escaped when a path left the frame.
  const auto& order = vocab_->order();
  if (path_.empty()) path_.resize(1);
  path_[0] = start;
  size_t valid = 0;
  const std::string* previous = nullptr;
  size_t dead = std::numeric_limits<size_t>::max();  // the settled prefix's length
  bool dead_escaped = false;
  for (uint32_t e : entries) {
    const int32_t id = order[e];
    const std::string& b = vocab_->bytes(id);
    const size_t shared = previous == nullptr ? 0 : common_prefix(*previous, b);
    previous = &b;
    if (shared >= dead) {
      if (dead_escaped) escaped(e);
      continue;
    }
    dead = std::numeric_limits<size_t>::max();
    size_t k = std::min(valid, shared);
    if (path_.size() < b.size() + 1) path_.resize(b.size() + 1);
    for (; k < b.size(); ++k) {
      matcher_.step(path_[k], static_cast<uint8_t>(b[k]), path_[k + 1]);
      if (path_[k + 1].dead()) {
        dead = k + 1;
        dead_escaped = path_[k + 1].escaped;
        break;
      }
    }
    valid = k;
    if (k == b.size()) {
      taken(e);
    } else if (dead_escaped) {
      escaped(e);
    }
  }
}

const FrameMasks::Mask& TokenConstraint::frame_mask(int32_t top) {
  std::string key;
  const size_t mark = matcher_.mark();
  Matcher::State start = matcher_.frame(top, kFrameDepth, kHorizon + 1, key);
  auto& masks = frames_->by_key;
  auto it = masks.find(key);
  if (it == masks.end()) {
    if (masks.size() >= FrameMasks::kMaxFrames) masks.clear();
    FrameMasks::Mask m;
    m.taken.assign((vocab_->vocab_size() + 63) / 64, 0);
    const auto& order = vocab_->order();
    walk(start, short_entries_,
         [&](uint32_t e) { set_bit(m.taken, order[e]); },
         [&](uint32_t e) { m.escaped.push_back(e); });
    it = masks.emplace(std::move(key), std::move(m)).first;
  }
  matcher_.rewind(mark);
  return it->second;
}

const std::vector<uint64_t>& TokenConstraint::allowed_bits() {
  std::string key = matcher_.state_key();
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (cache_[i].first == key) {
      std::rotate(cache_.begin(), cache_.begin() + static_cast<std::ptrdiff_t>(i),
                  cache_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return cache_.front().second;
    }
  }
  const auto& order = vocab_->order();
  if (short_entries_.empty() && long_entries_.empty()) {
    for (uint32_t e = 0; e < order.size(); ++e) {
      (vocab_->bytes(order[e]).size() <= kHorizon ? short_entries_ : long_entries_).push_back(e);
    }
  }
  // Each stack's top frames decide most tokens whatever lies below them (cached per frame);
  // the tokens that leave those frames, and the few longer than the horizon, are walked from
  // the whole state.
  std::vector<uint64_t> bits((vocab_->vocab_size() + 63) / 64, 0);
  std::vector<uint32_t> rest = long_entries_;
  for (int32_t top : matcher_.current().tops) {
    const FrameMasks::Mask& f = frame_mask(top);
    for (size_t w = 0; w < bits.size(); ++w) bits[w] |= f.taken[w];
    rest.insert(rest.end(), f.escaped.begin(), f.escaped.end());
  }
  std::sort(rest.begin(), rest.end());
  rest.erase(std::unique(rest.begin(), rest.end()), rest.end());
  rest.erase(std::remove_if(rest.begin(), rest.end(),
                            [&](uint32_t e) { return has_bit(bits, order[e]); }),
             rest.end());
  const size_t mark = matcher_.mark();
  walk(matcher_.current(), rest, [&](uint32_t e) { set_bit(bits, order[e]); },
       [](uint32_t) {});
  matcher_.rewind(mark);
  if (cache_.size() == kCachedStates) cache_.pop_back();
  cache_.insert(cache_.begin(), {std::move(key), std::move(bits)});
  return cache_.front().second;
}

bool TokenConstraint::allows(int32_t token) {
  if (token < 0) return false;
  if (is_end(token)) return matcher_.can_end() || broken_;
  if (broken_ || static_cast<size_t>(token) >= vocab_->vocab_size()) return false;
  const auto id = static_cast<size_t>(token);
  return has_bit(allowed_bits(), token);
}

void TokenConstraint::apply(std::span<float> logits) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  // The end ids keep their logits exactly where the output may end, whatever their bytes.
  const bool end = matcher_.can_end() || broken_;
  ends_.clear();
  for (int32_t e : end_ids_) {
    if (static_cast<size_t>(e) < logits.size()) ends_.emplace_back(e, logits[static_cast<size_t>(e)]);
  }
  if (broken_ || complete()) {
    std::fill(logits.begin(), logits.end(), kMasked);
  } else {
    const auto& bits = allowed_bits();
    const size_t known = std::min(logits.size(), vocab_->vocab_size());
    for (size_t id = 0; id < known; ++id) {
      if (!has_bit(bits, static_cast<int32_t>(id))) logits[id] = kMasked;
    }
    std::fill(logits.begin() + static_cast<std::ptrdiff_t>(known), logits.end(), kMasked);
  }
  for (const auto& [id, logit] : ends_) logits[static_cast<size_t>(id)] = end ? logit : kMasked;
}

void TokenConstraint::on_generated(int32_t token) {
  if (broken_ || is_end(token)) return;
  if (token < 0 || static_cast<size_t>(token) >= vocab_->vocab_size() ||
      vocab_->bytes(token).empty() || !matcher_.advance(vocab_->bytes(token))) {
    broken_ = true;
  }
}

}  // namespace kvattn::structured
