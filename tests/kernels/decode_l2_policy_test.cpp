// The small decode kernel's L2 policy by size (decode_kv_evict_first): forced values pass
// through, and by size it is evict-first exactly when the launch's K/V bytes exceed the L2.
// Host arithmetic only: runs on every build.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/decode/decode_params.h"

namespace kvattn::cuda {
namespace {

constexpr int64_t kL2 = 50 << 20;  // an H100's / H200's L2

TEST(DecodeL2Policy, ForcedValuesPassThrough) {
  for (int forced : {0, 1}) {
    EXPECT_EQ(decode_kv_evict_first(forced, 1, 8192, 8, 128, 2, kL2), forced);
    EXPECT_EQ(decode_kv_evict_first(forced, 64, 4096, 8, 128, 2, kL2), forced);
  }
}

TEST(DecodeL2Policy, BySizeAgainstTheL2) {
  // 1 x 8192 keys, 8 KV heads, d128, bf16: 32 MiB of K and V, inside 50 MiB: normal.
  EXPECT_EQ(decode_kv_evict_first(-1, 1, 8192, 8, 128, 2, kL2), 0);
  // Twice that (64 MiB) exceeds it; the same at fp8 (32 MiB) does not.
  EXPECT_EQ(decode_kv_evict_first(-1, 2, 8192, 8, 128, 2, kL2), 1);
  EXPECT_EQ(decode_kv_evict_first(-1, 2, 8192, 8, 128, 1, kL2), 0);
  // Exactly the L2 is kept (not more than it); one key more is not.
  const int64_t keys = kL2 / (2 * 8 * 128 * 2);
  EXPECT_EQ(decode_kv_evict_first(-1, 1, keys, 8, 128, 2, kL2), 0);
  EXPECT_EQ(decode_kv_evict_first(-1, 1, keys + 1, 8, 128, 2, kL2), 1);
  // A smaller L2 moves the line.
  EXPECT_EQ(decode_kv_evict_first(-1, 1, 8192, 8, 128, 2, 24 << 20), 1);
}

TEST(DecodeL2Policy, HugeLaunchesDoNotOverflow) {
  const int64_t big = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(decode_kv_evict_first(-1, big, big, 64, 256, 2, kL2), 1);
  EXPECT_EQ(decode_kv_evict_first(-1, 0, big, 64, 256, 2, kL2), 0);  // no sequences: no bytes
}

}  // namespace
}  // namespace kvattn::cuda
