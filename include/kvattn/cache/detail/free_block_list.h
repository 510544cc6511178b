// FreeBlockList: the blocks with no holder, in the order they should be reused. An intrusive
// doubly linked list over block ids, so taking a cached block back out of it on a prefix hit
// is O(1). The front is reused first: blocks without a cache entry are pushed to the front
// (reusing them evicts nothing), cached blocks to the back when freed, which makes the front
// of the cached run the least recently freed block (LRU eviction).
#pragma once

#include <cstdint>
#include <vector>

namespace kvattn::detail {

class FreeBlockList {
 public:
  // All blocks 0..num_blocks-1 start free, in id order.
  explicit FreeBlockList(int32_t num_blocks);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool contains(int32_t b) const { return linked_[b] != 0; }
  int32_t front() const { return head_; }
  // The block after b in reuse order, or -1.
  int32_t next(int32_t b) const { return next_[b]; }

  // Preconditions (the caller guarantees them): b in range and not in the list for push_*,
  // in the list for remove; pop_front on a non-empty list.
  void push_front(int32_t b);
  void push_back(int32_t b);
  void remove(int32_t b);
  int32_t pop_front();

 private:
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
  std::vector<uint8_t> linked_;
  int32_t head_ = -1;
  int32_t tail_ = -1;
  int64_t size_ = 0;
};

}  // namespace kvattn::detail
