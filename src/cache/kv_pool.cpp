#include "kvattn/cache/kv_pool.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

int64_t checked_mul(int64_t a, int64_t b, const char* fn) {
  int64_t r = 0;
  KVATTN_CHECK(!__builtin_mul_overflow(a, b, &r), fn, ": size overflows int64 (", a, " * ", b,
               ")");
  return r;
}

void check_spec(const KVCacheSpec& s, const char* fn) {
  KVATTN_CHECK(s.num_layers > 0, fn, ": spec.num_layers must be > 0 but is ", s.num_layers);
  KVATTN_CHECK(s.num_kv_heads > 0, fn, ": spec.num_kv_heads must be > 0 but is ", s.num_kv_heads);
  KVATTN_CHECK(s.head_dim > 0, fn, ": spec.head_dim must be > 0 but is ", s.head_dim);
  KVATTN_CHECK(s.block_size > 0, fn, ": spec.block_size must be > 0 but is ", s.block_size);
  KVATTN_CHECK(s.dtype == DType::kF32 || s.dtype == DType::kF16 || s.dtype == DType::kBF16 ||
                   s.dtype == DType::kU8 || s.dtype == DType::kF8E4M3,
               fn, ": spec.dtype must be float32, float16, bfloat16, float8_e4m3 or uint8 but is ",
               s.dtype);
}

// Elements of one block of one layer's K (or V).
int64_t block_elems(const KVCacheSpec& s, const char* fn) {
  return checked_mul(checked_mul(s.block_size, s.num_kv_heads, fn), s.head_dim, fn);
}

}  // namespace

int64_t kv_block_bytes(const KVCacheSpec& spec) {
  const char* fn = "kv_block_bytes";
  check_spec(spec, fn);
  const int64_t per_layer = checked_mul(block_elems(spec, fn), dtype_size(spec.dtype), fn);
  return checked_mul(checked_mul(per_layer, spec.num_layers, fn), 2, fn);
}

int64_t kv_num_blocks_for_budget(const KVCacheSpec& spec, int64_t budget_bytes) {
  KVATTN_CHECK(budget_bytes >= 0, "kv_num_blocks_for_budget: budget_bytes must be >= 0 but is ",
               budget_bytes);
  return budget_bytes / kv_block_bytes(spec);
}

KVPool::KVPool(const KVCacheSpec& spec, int64_t num_blocks, Device device)
    : spec_(spec), num_blocks_(num_blocks) {
  const char* fn = "KVPool";
  check_spec(spec, fn);
  KVATTN_CHECK(num_blocks >= 1, fn, ": num_blocks must be >= 1 but is ", num_blocks);
  checked_mul(kv_block_bytes(spec), num_blocks, fn);
  storage_ = Tensor::empty(
      {2, spec.num_layers, num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim},
      spec.dtype, device);
  // A host pool is written once here, by all threads, so its pages (huge pages,
  // core/memory.cpp) are faulted in and zeroed now rather than one by one inside the steps
  // that first fill them, where the team waits at a barrier for the faulting thread: on a
  // 2-core VM that moved ~8% of a 4,095-token prefill and ~10% of a batch's steps out of the
  // timed path (docs/perf/NOTES.md session 42). llama.cpp clears its KV buffer the same way.
  if (device.is_cpu()) {
    constexpr int64_t kChunk = int64_t{2} << 20;
    char* base = static_cast<char*>(storage_.data());
    const int64_t bytes = storage_.nbytes();
#pragma omp parallel for schedule(static)
    for (int64_t at = 0; at < bytes; at += kChunk) {
      std::memset(base + at, 0, static_cast<std::size_t>(std::min(kChunk, bytes - at)));
    }
  }
}

TensorView KVPool::layer_view(int64_t kv, int64_t layer) const {
  KVATTN_CHECK(layer >= 0 && layer < spec_.num_layers, kv == 0 ? "KVPool::k_cache" : "KVPool::v_cache",
               ": layer must be in [0, ", spec_.num_layers, ") but is ", layer);
  const int64_t layer_elems = num_blocks_ * block_elems(spec_, "KVPool");
  char* base = static_cast<char*>(storage_.data()) +
               (kv * spec_.num_layers + layer) * layer_elems * dtype_size(spec_.dtype);
  return TensorView(base, spec_.dtype, storage_.device(),
                    {num_blocks_, spec_.block_size, spec_.num_kv_heads, spec_.head_dim});
}

TensorView KVPool::k_cache(int64_t layer) const { return layer_view(0, layer); }
TensorView KVPool::v_cache(int64_t layer) const { return layer_view(1, layer); }

void KVPool::copy_blocks(std::span<const BlockCopy> copies) const {
  const char* fn = "KVPool::copy_blocks";
  std::vector<uint8_t> role(static_cast<size_t>(num_blocks_), 0);  // bit 0: src, bit 1: dst
  for (size_t i = 0; i < copies.size(); ++i) {
    const BlockCopy& c = copies[i];
    KVATTN_CHECK(c.src >= 0 && c.src < num_blocks_ && c.dst >= 0 && c.dst < num_blocks_, fn,
                 ": copies[", i, "] = (", c.src, ", ", c.dst, ") must name blocks in [0, ",
                 num_blocks_, ")");
    KVATTN_CHECK(c.src != c.dst, fn, ": copies[", i, "] copies block ", c.src, " onto itself");
    role[c.src] |= 1;
    KVATTN_CHECK(!(role[c.dst] & 2), fn, ": copies[", i, "]: block ", c.dst,
                 " is a destination twice");
    role[c.dst] |= 2;
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    KVATTN_CHECK(role[copies[i].dst] != 3, fn, ": copies[", i, "]: block ", copies[i].dst,
                 " is both a source and a destination");
  }
  const int64_t block_bytes = block_elems(spec_, fn) * dtype_size(spec_.dtype);
  for (int64_t kv = 0; kv < 2; ++kv) {
    for (int64_t layer = 0; layer < spec_.num_layers; ++layer) {
      const TensorView cache = layer_view(kv, layer);
      for (const BlockCopy& c : copies) {
        if (storage_.device().is_cpu()) {
          char* base = static_cast<char*>(cache.data);
          std::memcpy(base + c.dst * block_bytes, base + c.src * block_bytes,
                      static_cast<size_t>(block_bytes));
        } else {
          copy_bytes(cache.slice0(c.dst, c.dst + 1), cache.slice0(c.src, c.src + 1));
        }
      }
    }
  }
}

}  // namespace kvattn
