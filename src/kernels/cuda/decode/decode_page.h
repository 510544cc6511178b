// Where a key lives in a paged cache: its page (block table column) and its offset in the page.
// The decode kernels find the page of every key they copy; for the usual power-of-two block
// sizes a shift and a mask replace the integer division (~30 instructions a tile). Plain C++
// (host and device), so the CPU tests check it against the division without a GPU.
#pragma once

#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define KVATTN_PAGE_HD __host__ __device__
#else
#define KVATTN_PAGE_HD
#endif

namespace kvattn::cuda {

// log2(block_size) when block_size (> 0) is a power of two, else -1.
inline int decode_block_shift(int64_t block_size) {
  const auto b = static_cast<uint64_t>(block_size);
  return block_size > 0 && std::has_single_bit(b) ? std::countr_zero(b) : -1;
}

// The page of key `key` (>= 0) and, in `offset`, its place in the page; block_shift is
// decode_block_shift(block_size).
KVATTN_PAGE_HD inline int page_of(int block_size, int block_shift, int key, int& offset) {
  if (block_shift >= 0) {
    offset = key & (block_size - 1);
    return key >> block_shift;
  }
  const int page = key / block_size;
  offset = key - page * block_size;
  return page;
}

}  // namespace kvattn::cuda
