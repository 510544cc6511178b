#include "support/paged_case.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn::test {

PagedKv make_paged_kv(std::mt19937_64& rng, DType dt, int64_t hkv, int64_t d, int64_t bs,
                      const std::vector<int64_t>& lens, float v_lo, float v_hi,
                      int64_t min_width) {
  const auto num_seqs = static_cast<int64_t>(lens.size());
  std::vector<int64_t> need(lens.size());
  for (size_t b = 0; b < lens.size(); ++b) need[b] = (lens[b] + bs - 1) / bs;

  // Which leading blocks each sequence shares with the previous one (a prefix hit).
  std::vector<int64_t> shared(lens.size(), 0);
  for (size_t b = 1; b < lens.size(); ++b) {
    if (uniform_int(rng, 0, 3) != 0) continue;
    const int64_t full_prev = lens[b - 1] / bs;
    shared[b] = uniform_int(rng, 0, std::min(full_prev, need[b]));
  }
  int64_t distinct = 0;
  for (size_t b = 0; b < lens.size(); ++b) distinct += need[b] - shared[b];
  const int64_t num_blocks = std::max<int64_t>(1, distinct + uniform_int(rng, 0, 3));

  // Cache memory, poisoned: 0xFF bytes are NaN in f32, bf16 and f16.
  PagedKv p;
  const int64_t es = dtype_size(dt);
  const int64_t block = bs * hkv * d;
  const int64_t guard = uniform_int(rng, 1, 32);
  const int64_t pad = pick(rng, std::vector<int64_t>{0, 0, 1, d});
  const bool fused = uniform_int(rng, 0, 1) == 1;
  const int64_t stride = fused ? 2 * block + pad : block + pad;
  const int64_t region = guard + num_blocks * stride + guard;
  p.storage = Tensor::empty({(fused ? region : 2 * region) * es}, DType::kU8);
  std::memset(p.storage.data(), 0xFF, static_cast<size_t>(p.storage.nbytes()));
  char* base = static_cast<char*>(p.storage.data());
  char* kb = base + guard * es;
  char* vb = fused ? kb + block * es : base + (region + guard) * es;
  p.k_cache = TensorView(kb, dt, Device::cpu(), {num_blocks, bs, hkv, d}, {stride, hkv * d, d, 1});
  p.v_cache = TensorView(vb, dt, Device::cpu(), {num_blocks, bs, hkv, d}, {stride, hkv * d, d, 1});

  // Block tables: a random permutation of block ids, -1 past the last block.
  std::vector<int64_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int64_t width = std::max<int64_t>(min_width, 1);
  for (int64_t n : need) width = std::max(width, n);
  width += uniform_int(rng, 0, 2);
  const int64_t extra_cols = pick(rng, std::vector<int64_t>{0, 0, 3});
  const int64_t row = width + extra_cols;
  p.table_storage = Tensor::empty({std::max<int64_t>(num_seqs, 1), row}, DType::kI32);
  auto* t = p.table_storage.ptr<int32_t>();
  for (int64_t i = 0; i < std::max<int64_t>(num_seqs, 1) * row; ++i) {
    t[i] = (i % row) < width ? -1 : (1 << 30);  // unread columns hold garbage ids
  }
  size_t next = 0;
  for (int64_t b = 0; b < num_seqs; ++b) {
    for (int64_t i = 0; i < need[b]; ++i) {
      t[b * row + i] = i < shared[b] ? t[(b - 1) * row + i] : static_cast<int32_t>(ids[next++]);
    }
  }
  p.block_table = TensorView(t, DType::kI32, Device::cpu(), {num_seqs, width}, {row, 1});

  // Keys and values of every live slot.
  for (int64_t b = 0; b < num_seqs; ++b) {
    for (int64_t j = 0; j < lens[b]; ++j) {
      const int64_t blk = t[b * row + j / bs];
      const int64_t off = blk * stride + (j % bs) * hkv * d;
      fill_random(TensorView(kb + off * es, dt, Device::cpu(), {hkv * d}), rng, -1.0f, 1.0f);
      fill_random(TensorView(vb + off * es, dt, Device::cpu(), {hkv * d}), rng, v_lo, v_hi);
    }
  }
  std::ostringstream os;
  os << (fused ? "fused" : "separate") << " blocks " << num_blocks << " pad " << pad
     << " width " << width << "+" << extra_cols;
  p.layout = os.str();
  return p;
}

}  // namespace kvattn::test
