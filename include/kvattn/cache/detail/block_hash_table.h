// BlockHashTable: the prefix cache's index, block hash -> block id. Open addressing with linear
// probing and backward-shift deletion, sized once for the pool (never rehashes, never allocates
// after construction), so a lookup is one multiply and usually one cache line. Keys are any
// 64-bit values (injected test hashes may be tiny or all equal); each key maps to one block.
#pragma once

#include <cstdint>
#include <vector>

namespace kvattn::detail {

class BlockHashTable {
 public:
  // Holds up to max_entries keys at a load factor of at most 1/2.
  explicit BlockHashTable(int64_t max_entries);

  // The block stored under key, or -1.
  int32_t find(uint64_t key) const {
    for (uint64_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value < 0) return -1;
      if (s.key == key) return s.value;
    }
  }
  // Precondition (checked): key is absent, value >= 0 and the table is not full.
  void insert(uint64_t key, int32_t value);
  // Removes key if present; returns whether it was.
  bool erase(uint64_t key);

  int64_t size() const { return size_; }
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }

  // Visits every (key, value) in slot order.
  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.value >= 0) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t value = -1;  // -1 => empty
  };
  uint64_t home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  int shift_ = 0;
  int64_t max_entries_ = 0;
  int64_t size_ = 0;
};

}  // namespace kvattn::detail
