// CPU store_kv: checks every slot first (so a bad slot writes nothing), then copies each
// token's [num_kv_heads * head_dim] row, which is contiguous in both source and cache.
#include <cstring>

#include "kernels/backend.h"
#include "kernels/validate.h"

namespace kvattn::cpu {

void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping) {
  const int64_t n = slot_mapping.size(0);
  const int64_t block_size = k_cache.size(1);
  const int64_t num_slots = k_cache.size(0) * block_size;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = detail::index_at(slot_mapping, i);
    KVATTN_CHECK(slot < num_slots, "store_kv: slot_mapping[", i, "] is ", slot,
                 " but the cache holds ", num_slots, " slots (", k_cache.size(0),
                 " blocks of ", block_size, ")");
  }
  const int64_t es = dtype_size(key.dtype);
  const auto row_bytes = static_cast<size_t>(key.size(1) * key.size(2) * es);
  const int64_t row = key.size(1) * key.size(2);
  auto* kc = static_cast<char*>(k_cache.data);
  auto* vc = static_cast<char*>(v_cache.data);
  const auto* ks = static_cast<const char*>(key.data);
  const auto* vs = static_cast<const char*>(value.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = detail::index_at(slot_mapping, i);
    if (slot < 0) continue;  // padding
    const int64_t b = slot / block_size, off = slot % block_size;
    std::memcpy(kc + (b * k_cache.stride(0) + off * row) * es, ks + i * key.stride(0) * es,
                row_bytes);
    std::memcpy(vc + (b * v_cache.stride(0) + off * row) * es, vs + i * value.stride(0) * es,
                row_bytes);
  }
}

}  // namespace kvattn::cpu
