#include "kvattn/cache/detail/free_block_list.h"

#include "kvattn/core/error.h"

namespace kvattn::detail {

FreeBlockList::FreeBlockList(int32_t num_blocks) {
  KVATTN_CHECK(num_blocks >= 0, "FreeBlockList: num_blocks must be >= 0 but is ", num_blocks);
  prev_.resize(num_blocks);
  next_.resize(num_blocks);
  linked_.assign(num_blocks, 0);
  for (int32_t b = 0; b < num_blocks; ++b) push_back(b);
}

void FreeBlockList::push_front(int32_t b) {
  prev_[b] = -1;
  next_[b] = head_;
  if (head_ >= 0) prev_[head_] = b; else tail_ = b;
  head_ = b;
  linked_[b] = 1;
  ++size_;
}

void FreeBlockList::push_back(int32_t b) {
  next_[b] = -1;
  prev_[b] = tail_;
  if (tail_ >= 0) next_[tail_] = b; else head_ = b;
  tail_ = b;
  linked_[b] = 1;
  ++size_;
}

void FreeBlockList::remove(int32_t b) {
  const int32_t p = prev_[b];
  const int32_t n = next_[b];
  if (p >= 0) next_[p] = n; else head_ = n;
  if (n >= 0) prev_[n] = p; else tail_ = p;
  linked_[b] = 0;
  --size_;
}

int32_t FreeBlockList::pop_front() {
  const int32_t b = head_;
  remove(b);
  return b;
}

}  // namespace kvattn::detail
