// The decode kernels' page arithmetic (decode_page.h): for every block size the shift-and-mask
// form agrees with the division it replaces, keys near INT_MAX included, and the shift is
// found exactly for the powers of two.
#include "kernels/cuda/decode/decode_page.h"

#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <vector>

namespace {

using kvattn::cuda::decode_block_shift;
using kvattn::cuda::page_of;

TEST(DecodePage, ShiftOnlyForPowersOfTwo) {
  for (int64_t b = 1; b <= 4096; ++b) {
    const bool pow2 = (b & (b - 1)) == 0;
    const int shift = decode_block_shift(b);
    if (pow2) {
      ASSERT_GE(shift, 0) << "block size " << b;
      EXPECT_EQ(int64_t{1} << shift, b);
    } else {
      EXPECT_EQ(shift, -1) << "block size " << b;
    }
  }
  EXPECT_EQ(decode_block_shift(0), -1);
  EXPECT_EQ(decode_block_shift(-16), -1);
}

TEST(DecodePage, AgreesWithTheDivisionForEveryBlockSize) {
  std::mt19937_64 rng(0x9a6e5eedULL);
  std::uniform_int_distribution<int> any_key(0, INT_MAX);
  int64_t checked = 0;
  for (int b = 1; b <= 1024; ++b) {
    const int shift = decode_block_shift(b);
    std::vector<int> keys = {0, 1, b - 1, b, b + 1, 2 * b - 1, 16 * b + 15, INT_MAX,
                             INT_MAX - 1, INT_MAX - b};
    for (int i = 0; i < 200; ++i) keys.push_back(any_key(rng));
    for (int k = 0; k < 3 * b + 40; ++k) keys.push_back(k);
    for (const int key : keys) {
      if (key < 0) continue;
      int offset = -1;
      const int page = page_of(b, shift, key, offset);
      ASSERT_EQ(page, key / b) << "block size " << b << ", key " << key;
      ASSERT_EQ(offset, key % b) << "block size " << b << ", key " << key;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000000);
}

}  // namespace
