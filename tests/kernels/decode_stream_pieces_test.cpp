// The decode split kernel's stream-mode arithmetic (kernels/cuda/decode/decode_params.h), which
// its merge inside the kernel relies on (decode_fused_merge.cuh): decode_piece_range names
// exactly the ranges that hold a sequence's tiles, a range cuts at most two sequences (each
// warp keeps two), and the fused merge's words fit beside the partials. Plain C++: runs on the
// CPU in CI (the kernel itself is tested on the GPU by decode_gpu_test).
#include "kernels/cuda/decode/decode_params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace kvattn::cuda {
namespace {

// Range p of P over T tiles: [g0(p), g0(p + 1)), g0(p) = floor(p T / P), as the kernel cuts.
int64_t range_begin(int64_t p, int64_t total, int64_t parts) { return p * total / parts; }

TEST(DecodeStreamPieces, PieceRangeNamesExactlyTheRangesHoldingASequence) {
  std::mt19937 rng(std::random_device{}());
  for (int c = 0; c < 3000; ++c) {
    const int64_t seqs = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    std::vector<int64_t> tiles(static_cast<size_t>(seqs));
    for (int64_t& t : tiles) {  // empty sequences and long ones among short ones
      const int kind = std::uniform_int_distribution<int>(0, 5)(rng);
      t = kind == 0 ? 0 : kind == 1 ? std::uniform_int_distribution<int64_t>(50, 400)(rng)
                                    : std::uniform_int_distribution<int64_t>(1, 12)(rng);
    }
    std::vector<int64_t> prefix(tiles.size() + 1, 0);
    for (size_t b = 0; b < tiles.size(); ++b) prefix[b + 1] = prefix[b] + tiles[b];
    const int64_t total = prefix.back();
    if (total == 0) continue;
    const int64_t parts = std::uniform_int_distribution<int64_t>(1, total)(rng);
    SCOPED_TRACE(testing::Message() << "case " << c << ": " << seqs << " sequences, " << total
                                    << " tiles, " << parts << " ranges");
    std::vector<int> cut(static_cast<size_t>(parts), 0);  // sequences a range cuts
    for (int64_t b = 0; b < seqs; ++b) {
      const int64_t first = prefix[b], n = tiles[b];
      if (n == 0) continue;
      const DecodePieceRange r = decode_piece_range(first, n, total, parts);
      ASSERT_LE(0, r.first_part);
      ASSERT_LE(r.first_part, r.last_part);
      ASSERT_LT(r.last_part, parts);
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t lo = range_begin(p, total, parts), hi = range_begin(p + 1, total, parts);
        const bool holds = std::max(lo, first) < std::min(hi, first + n);
        ASSERT_EQ(holds, p >= r.first_part && p <= r.last_part) << "sequence " << b << " range " << p;
      }
      if (r.first_part != r.last_part) {  // in pieces: each of its ranges cuts it
        for (int p = r.first_part; p <= r.last_part; ++p) ++cut[static_cast<size_t>(p)];
      }
    }
    for (int64_t p = 0; p < parts; ++p) {
      ASSERT_LE(cut[static_cast<size_t>(p)], 2) << "range " << p;
    }
  }
}

TEST(DecodeStreamPieces, FusedMergeWordsFitBesideThePartials) {
  for (int64_t seqs : {1, 3, 17, 256}) {
    for (int64_t kv_heads : {1, 3, 8}) {
      for (int64_t rows : {1, 3, 8, 9, 16, 40}) {
        for (int64_t d : {64, 128, 256}) {
          for (int64_t splits : {2, 3, 7, 34}) {
            const int64_t heads = kv_heads * rows;  // q_len 1: rows = group
            const int64_t bytes = decode_workspace_bytes(seqs, heads, d, 1, splits);
            const int64_t sync = decode_merge_sync_bytes(seqs, kv_heads, rows);
            const int64_t rows_total = kv_heads * rows;
            const int64_t slots = decode_ws_slots(bytes, seqs, rows_total, d, sync);
            // partials, their LSEs, the meta, then the 8-byte aligned words
            const int64_t used = slots * rows_total * (d + 1) * 4 + seqs * 2 * 4 + sync;
            EXPECT_LE(used, bytes) << seqs << " " << kv_heads << " " << rows << " " << d << " "
                                   << splits;
            EXPECT_GE(sync, seqs * kv_heads * ((rows + 7) / 8) * 16 + 8);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvattn::cuda
