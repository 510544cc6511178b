#include "engine/structured/token_constraint.h"

#include <algorithm>
#include <limits>

namespace kvattn::structured {

TokenBytes::TokenBytes(std::vector<std::string> token_bytes, const std::vector<bool>& eligible)
    : bytes_(std::move(token_bytes)), eligible_(bytes_.size(), false) {
  std::vector<bool> seen(256, false);
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (id < eligible.size() && eligible[id] && !bytes_[id].empty()) {
      eligible_[id] = true;
      order_.push_back(static_cast<int32_t>(id));
      const auto b = static_cast<uint8_t>(bytes_[id][0]);
      if (bytes_[id].size() == 1 && !seen[b]) {
        seen[b] = true;
        single_bytes_.push_back(static_cast<int32_t>(id));
      }
    }
  }
  std::sort(order_.begin(), order_.end(),
            [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenBytes> vocab,
                                 std::vector<int32_t> end_ids, std::shared_ptr<FrameMasks> frames,
                                 int64_t work_budget)
    : matcher_(std::move(grammar)),
      vocab_(std::move(vocab)),
      end_ids_(std::move(end_ids)),
      work_budget_(work_budget),
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
bool TokenConstraint::walk(const Matcher::State& start, std::span<const uint32_t> entries,
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
      work_left_ -= static_cast<int64_t>(path_[k].tops.size()) + 1;
      if (work_left_ < 0) return false;
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
  return true;
}

const FrameMasks::Mask* TokenConstraint::frame_mask(int32_t top) {
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
    const bool done = walk(
        start, short_entries_, [&](uint32_t e) { set_bit(m.taken, order[e]); },
        [&](uint32_t e) { m.escaped.push_back(e); });
    matcher_.rewind(mark);
    if (!done) return nullptr;
    it = masks.emplace(std::move(key), std::move(m)).first;
  }
  matcher_.rewind(mark);
  return &it->second;
}

const std::vector<uint64_t>* TokenConstraint::allowed_bits() {
  std::string key = matcher_.state_key();
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (cache_[i].first == key) {
      std::rotate(cache_.begin(), cache_.begin() + static_cast<std::ptrdiff_t>(i),
                  cache_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return cache_.front().second.empty() ? nullptr : &cache_.front().second;
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
  // the whole state. Past the work budget the state is marked (an empty entry) for
  // candidates().
  work_left_ = work_budget_;
  std::vector<uint64_t> bits((vocab_->vocab_size() + 63) / 64, 0);
  std::vector<uint32_t> rest = long_entries_;
  bool done = matcher_.current().tops.size() <= kMaxStacksForMask;
  for (int32_t top : done ? matcher_.current().tops : std::vector<int32_t>{}) {
    const FrameMasks::Mask* f = frame_mask(top);
    if (f == nullptr) {
      done = false;
      break;
    }
    for (size_t w = 0; w < bits.size(); ++w) bits[w] |= f->taken[w];
    rest.insert(rest.end(), f->escaped.begin(), f->escaped.end());
  }
  if (done) {
    std::sort(rest.begin(), rest.end());
    rest.erase(std::unique(rest.begin(), rest.end()), rest.end());
    rest.erase(std::remove_if(rest.begin(), rest.end(),
                              [&](uint32_t e) { return has_bit(bits, order[e]); }),
               rest.end());
    const size_t mark = matcher_.mark();
    done = walk(
        matcher_.current(), rest, [&](uint32_t e) { set_bit(bits, order[e]); }, [](uint32_t) {});
    matcher_.rewind(mark);
  }
  if (!done) bits.clear();
  if (cache_.size() == kCachedStates) cache_.pop_back();
  cache_.insert(cache_.begin(), {std::move(key), std::move(bits)});
  return cache_.front().second.empty() ? nullptr : &cache_.front().second;
}

bool TokenConstraint::takes(int32_t token) {
  const std::string& b = vocab_->bytes(token);
  if (b.empty() || !vocab_->eligible(token)) return false;
  const size_t mark = matcher_.mark();
  Matcher::State a = matcher_.current(), next;
  bool ok = true;
  for (char c : b) {
    matcher_.step(a, static_cast<uint8_t>(c), next);
    std::swap(a, next);
    if (a.dead()) {
      ok = false;
      break;
    }
  }
  matcher_.rewind(mark);
  return ok;
}

void TokenConstraint::candidates(std::span<float> logits) {
  // The grammar is too ambiguous for a whole mask within the budget: the kCandidates most
  // likely tokens are checked one by one and the rest masked; when none of them fits, the
  // single-byte tokens are (one of them continues any live state of a byte-level vocabulary).
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const size_t known = std::min(logits.size(), vocab_->vocab_size());
  std::vector<int32_t> ids;
  for (size_t id = 0; id < known; ++id) {
    if (logits[id] > kMasked && !is_end(static_cast<int32_t>(id))) {
      ids.push_back(static_cast<int32_t>(id));
    }
  }
  const size_t n = std::min(kCandidates, ids.size());
  std::partial_sort(
      ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
      [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
               (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
      });
  std::vector<int32_t> keep;
  for (size_t i = 0; i < n; ++i) {
    if (takes(ids[i])) keep.push_back(ids[i]);
  }
  if (keep.empty()) {
    for (int32_t id : vocab_->single_bytes()) {
      if (static_cast<size_t>(id) < known && logits[static_cast<size_t>(id)] > kMasked &&
          takes(id)) {
        keep.push_back(id);
      }
    }
  }
  std::vector<float> kept(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) kept[i] = logits[static_cast<size_t>(keep[i])];
  std::fill(logits.begin(), logits.end(), kMasked);
  for (size_t i = 0; i < keep.size(); ++i) logits[static_cast<size_t>(keep[i])] = kept[i];
}

bool TokenConstraint::allows(int32_t token) {
  if (token < 0) return false;
  if (is_end(token)) return matcher_.can_end() || broken_;
  if (broken_ || static_cast<size_t>(token) >= vocab_->vocab_size()) return false;
  const std::vector<uint64_t>* bits = allowed_bits();
  return bits != nullptr ? has_bit(*bits, token) : takes(token);
}

void TokenConstraint::apply(std::span<float> logits) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  // The end ids keep their logits exactly where the output may end, whatever their bytes.
  const bool end = matcher_.can_end() || broken_;
  ends_.clear();
  for (int32_t e : end_ids_) {
    if (static_cast<size_t>(e) < logits.size())
      ends_.emplace_back(e, logits[static_cast<size_t>(e)]);
  }
  if (broken_ || complete()) {
    std::fill(logits.begin(), logits.end(), kMasked);
  } else if (const std::vector<uint64_t>* bits = allowed_bits(); bits != nullptr) {
    const size_t known = std::min(logits.size(), vocab_->vocab_size());
    for (size_t id = 0; id < known; ++id) {
      if (!has_bit(*bits, static_cast<int32_t>(id))) logits[id] = kMasked;
    }
    std::fill(logits.begin() + static_cast<std::ptrdiff_t>(known), logits.end(), kMasked);
  } else {
    candidates(logits);
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
