#include "kvattn/cache/kv_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

TEST(KVPool, BlockBytesAndBudget) {
  // Qwen3-0.6B-like: 28 layers, 8 KV heads, head_dim 128, bf16, 256-token blocks.
  const KVCacheSpec qwen{28, 8, 128, DType::kBF16, 256};
  EXPECT_EQ(kv_block_bytes(qwen), int64_t{2} * 28 * 256 * 8 * 128 * 2);  // 28 MiB
  EXPECT_EQ(kv_num_blocks_for_budget(qwen, int64_t{10} << 30), 365);  // 10 GiB / 28 MiB
  EXPECT_EQ(kv_num_blocks_for_budget(qwen, kv_block_bytes(qwen) - 1), 0);
  EXPECT_EQ(kv_num_blocks_for_budget(qwen, 0), 0);
  const KVCacheSpec f32{2, 3, 5, DType::kF32, 7};
  EXPECT_EQ(kv_block_bytes(f32), 2 * 2 * 7 * 3 * 5 * 4);
}

TEST(KVPool, RejectsBadSpecs) {
  const KVCacheSpec ok{2, 2, 64, DType::kF32, 16};
  for (int field = 0; field < 4; ++field) {
    KVCacheSpec s = ok;
    int64_t* f[] = {&s.num_layers, &s.num_kv_heads, &s.head_dim, &s.block_size};
    *f[field] = 0;
    EXPECT_THROW(kv_block_bytes(s), Error) << field;
  }
  KVCacheSpec s = ok;
  s.dtype = DType::kI32;
  EXPECT_THROW(kv_block_bytes(s), Error);
  s = ok;
  s.num_layers = std::numeric_limits<int64_t>::max() / 4;
  EXPECT_THROW(kv_block_bytes(s), Error);  // overflow
  EXPECT_THROW(kv_num_blocks_for_budget(ok, -1), Error);
  EXPECT_THROW(KVPool(ok, 0), Error);
  try {
    KVCacheSpec bad = ok;
    bad.head_dim = -3;
    kv_block_bytes(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spec.head_dim must be > 0 but is -3"), std::string::npos);
  }
}

TEST(KVPool, LayerViewsTileTheStorage) {
  const KVCacheSpec spec{3, 2, 4, DType::kF32, 5};
  KVPool pool(spec, 6);
  const int64_t layer_elems = 6 * 5 * 2 * 4;
  for (int64_t l = 0; l < 3; ++l) {
    for (const TensorView& v : {pool.k_cache(l), pool.v_cache(l)}) {
      EXPECT_EQ(v.shape_str(), "[6, 5, 2, 4]");
      EXPECT_TRUE(v.is_contiguous());
      EXPECT_EQ(v.dtype, DType::kF32);
    }
    EXPECT_EQ(pool.k_cache(l).ptr<float>() - pool.storage().ptr<float>(), l * layer_elems);
    EXPECT_EQ(pool.v_cache(l).ptr<float>() - pool.storage().ptr<float>(), (3 + l) * layer_elems);
  }
  EXPECT_EQ(pool.storage().nbytes(), 6 * kv_block_bytes(spec));
  EXPECT_THROW(pool.k_cache(3), Error);
  EXPECT_THROW(pool.v_cache(-1), Error);
}

TEST(KVPool, CopyBlocksCopiesEveryLayerAndNothingElse) {
  const KVCacheSpec spec{2, 2, 3, DType::kF32, 4};
  KVPool pool(spec, 5);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  float* data = pool.storage().ptr<float>();
  for (int64_t i = 0; i < pool.storage().numel(); ++i) data[i] = u(rng);
  const std::vector<float> before(data, data + pool.storage().numel());
  const std::vector<BlockCopy> copies = {{1, 3}, {0, 4}};
  pool.copy_blocks(copies);
  const int64_t be = 4 * 2 * 3;
  for (int64_t kv = 0; kv < 2; ++kv) {
    for (int64_t l = 0; l < 2; ++l) {
      const int64_t base = (kv * 2 + l) * 5 * be;
      for (int64_t b = 0; b < 5; ++b) {
        const int64_t src = b == 3 ? 1 : b == 4 ? 0 : b;
        EXPECT_EQ(std::memcmp(data + base + b * be, before.data() + base + src * be,
                              sizeof(float) * be),
                  0)
            << "kv " << kv << " layer " << l << " block " << b;
      }
    }
  }
  const std::vector<float> after(data, data + pool.storage().numel());
  EXPECT_THROW(pool.copy_blocks(std::vector<BlockCopy>{{1, 5}}), Error);
  EXPECT_THROW(pool.copy_blocks(std::vector<BlockCopy>{{2, 2}}), Error);
  EXPECT_THROW(pool.copy_blocks(std::vector<BlockCopy>{{1, 2}, {0, 2}}), Error);
  EXPECT_THROW(pool.copy_blocks(std::vector<BlockCopy>{{1, 2}, {2, 3}}), Error);
  EXPECT_EQ(std::memcmp(after.data(), data, sizeof(float) * after.size()), 0);
}

}  // namespace
}  // namespace kvattn
