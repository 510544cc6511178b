// The planner's rule for batches of uniform lengths (decode_uniform_one_chunk): one 4-warp
// small-kernel CTA a (sequence, unit), no merge, only when those CTAs fill at least one wave
// and each warp streams at least 16 tiles of 16 keys. Host arithmetic only: runs on every build.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/decode/decode_params.h"

namespace kvattn::cuda {
namespace {

constexpr int64_t kSlots = 132 * 2;  // an H100's / H200's SMs x two 4-warp CTAs

TEST(DecodeUniformRule, TheMeasuredShapes) {
  // 64 x 4096 32/8 and 256 x 1024 16/8 (8 units a sequence): measured faster (session 45).
  EXPECT_TRUE(decode_uniform_one_chunk(64, 8, kSlots, 4096));
  EXPECT_TRUE(decode_uniform_one_chunk(256, 8, kSlots, 1024));
  // 8 x 32768: 64 CTAs, a quarter of a wave: measured slower.
  EXPECT_FALSE(decode_uniform_one_chunk(8, 8, kSlots, 32768));
}

TEST(DecodeUniformRule, WaveAndTileBoundaries) {
  // Exactly one wave takes it; one CTA fewer does not.
  EXPECT_TRUE(decode_uniform_one_chunk(33, 8, kSlots, 4096));
  EXPECT_FALSE(decode_uniform_one_chunk(1, kSlots - 1, kSlots, 4096));
  EXPECT_TRUE(decode_uniform_one_chunk(1, kSlots, kSlots, 4096));
  // 16 tiles a warp of 4 = 1024 keys; a partial tile counts as a tile.
  EXPECT_TRUE(decode_uniform_one_chunk(64, 8, kSlots, 1024));
  EXPECT_TRUE(decode_uniform_one_chunk(64, 8, kSlots, 1009));  // 64 tiles (the last partial)
  EXPECT_FALSE(decode_uniform_one_chunk(64, 8, kSlots, 1008));  // 63 tiles: 15 a warp
}

TEST(DecodeUniformRule, DegenerateInputsAreNo) {
  EXPECT_FALSE(decode_uniform_one_chunk(0, 8, kSlots, 4096));
  EXPECT_FALSE(decode_uniform_one_chunk(64, 0, kSlots, 4096));
  EXPECT_FALSE(decode_uniform_one_chunk(64, 8, 0, 4096));
  EXPECT_FALSE(decode_uniform_one_chunk(64, 8, kSlots, 0));
  EXPECT_FALSE(decode_uniform_one_chunk(-1, 8, kSlots, 4096));
  // Large counts do not overflow (int64 products of int32-sized values).
  const int64_t big = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(decode_uniform_one_chunk(big, big, kSlots, big));
}

}  // namespace
}  // namespace kvattn::cuda
