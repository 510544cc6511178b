#include "kvattn/cache/detail/block_hash_table.h"

#include "kvattn/core/error.h"

namespace kvattn::detail {

BlockHashTable::BlockHashTable(int64_t max_entries) : max_entries_(max_entries) {
  KVATTN_CHECK(max_entries >= 0 && max_entries <= (int64_t{1} << 40),
               "BlockHashTable: max_entries must be in [0, 2^40] but is ", max_entries);
  int bits = 4;
  while ((int64_t{1} << bits) < 2 * max_entries) ++bits;
  slots_.resize(size_t{1} << bits);
  mask_ = (uint64_t{1} << bits) - 1;
  shift_ = 64 - bits;
}

void BlockHashTable::insert(uint64_t key, int32_t value) {
  KVATTN_CHECK(value >= 0, "BlockHashTable::insert: value must be >= 0 but is ", value);
  KVATTN_CHECK(size_ < max_entries_, "BlockHashTable::insert: table holds its maximum of ",
               max_entries_, " entries");
  for (uint64_t i = home(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.value < 0) {
      s = Slot{key, value};
      ++size_;
      return;
    }
    KVATTN_CHECK(s.key != key, "BlockHashTable::insert: key ", key, " is already present");
  }
}

bool BlockHashTable::erase(uint64_t key) {
  uint64_t i = home(key);
  for (;; i = (i + 1) & mask_) {
    if (slots_[i].value < 0) return false;
    if (slots_[i].key == key) break;
  }
  // Backward-shift deletion: pull later members of the probe run into the hole when their home
  // is not cyclically inside (hole, j], so every key stays reachable from its home.
  for (uint64_t j = (i + 1) & mask_; slots_[j].value >= 0; j = (j + 1) & mask_) {
    const uint64_t h = home(slots_[j].key);
    if (((j - h) & mask_) >= ((j - i) & mask_)) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
  --size_;
  return true;
}

}  // namespace kvattn::detail
