// Random paged KV caches for attention tests: non-identity block tables, -1 padding, shared
// prefix blocks, block strides wider than a block, and NaN wherever no key lives, so an op
// that reads past a sequence's length or an unused block shows NaN instead of passing.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn::test {

struct PagedKv {
  Tensor storage;  // raw bytes behind both caches (gaps and guards included)
  TensorView k_cache, v_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  Tensor table_storage;         // int32; may be wider than the table (unread columns)
  TensorView block_table;       // int32 [num_seqs, width], -1 past each sequence's last block
  std::string layout;           // for SCOPED_TRACE
};

// Sequence b holds lens[b] keys; those slots get uniform values (K in [-1, 1), V in
// [v_lo, v_hi)); every other cache byte is NaN. `min_width` forces a wider table.
PagedKv make_paged_kv(std::mt19937_64& rng, DType dtype, int64_t num_kv_heads, int64_t head_dim,
                      int64_t block_size, const std::vector<int64_t>& lens, float v_lo = -1.0f,
                      float v_hi = 1.0f, int64_t min_width = 0);

}  // namespace kvattn::test
