// Internal: checks shared by the prefill and decode entries.
#pragma once

#include <string_view>

#include "backend.h"

namespace kvattn::detail {

// q and out: token-major, same shape, float dtype, out's dtype == q's. Fills num_heads,
// head_dim, total_q of `shape`.
void check_query_and_out(std::string_view fn, const TensorView& q, const TensorView& out,
                         AttentionShape& shape);

// num_heads % num_kv_heads == 0 and key head_dim == query head_dim.
void check_heads(std::string_view fn, std::string_view kv_name, int64_t num_kv_heads,
                 int64_t kv_head_dim, AttentionShape& shape);

// k/v caches (paged form): same shape, dtype == q's, on q's device. Fills paged fields.
void check_caches(std::string_view fn, const TensorView& q, const TensorView& k_cache,
                  const TensorView& v_cache, const TensorView& block_table,
                  int64_t num_seqs, AttentionShape& shape);

// CPU only: every block id a sequence of `len` keys uses is in [0, num_blocks), and len fits
// the table.
void check_block_row(std::string_view fn, const TensorView& block_table, int64_t seq,
                     int64_t len, const AttentionShape& shape, std::string_view len_name);

// Optional lse: float32 [num_heads, total_q], contiguous, on q's device.
void check_lse(std::string_view fn, const TensorView& lse, const TensorView& q,
               const AttentionShape& shape);

}  // namespace kvattn::detail
