// CPU store_kv: checks every slot first (so a bad slot writes nothing), then writes each
// token's [num_kv_heads * head_dim] row, which is contiguous in both source and cache: a byte
// copy when the dtypes match, otherwise an element-wise conversion (float8_e4m3 with the scale
// of each KV head, or float32 -> bfloat16).
#include <cstring>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/validate.h"

namespace kvattn::cpu {
namespace {

// dst[h * d + x] = convert(src[h * d + x]) for every KV head h.
template <typename S, typename C>
void convert_row(const S* src, C* dst, int64_t heads, int64_t d, const float* scales) {
  for (int64_t h = 0; h < heads; ++h) {
    if constexpr (std::is_same_v<C, f8e4m3_t>) {
      const float scale = scales != nullptr ? scales[h] : 1.0f;
      for (int64_t x = 0; x < d; ++x) {
        dst[h * d + x].bits = quantize_e4m3(to_float(src[h * d + x]), scale);
      }
    } else {
      for (int64_t x = 0; x < d; ++x) dst[h * d + x] = from_float<C>(to_float(src[h * d + x]));
    }
  }
}

// Calls fn(S{}, C{}) for the (key, cache) dtypes the entry admits with different dtypes.
template <typename Fn>
void dispatch_conversion(DType src, DType cache, Fn fn) {
  auto with_src = [&](auto s) {
    if (cache == DType::kF8E4M3) return fn(s, f8e4m3_t{});
    if constexpr (std::is_same_v<decltype(s), float>) {
      if (cache == DType::kBF16) return fn(s, bf16_t{});
    }
    KVATTN_FAIL("store_kv (cpu): no conversion from ", src, " to a ", cache, " cache");
  };
  switch (src) {
    case DType::kF32: with_src(float{}); break;
    case DType::kBF16: with_src(bf16_t{}); break;
    case DType::kF16: with_src(f16_t{}); break;
    default: KVATTN_FAIL("store_kv (cpu): unsupported key dtype ", src);
  }
}

}  // namespace

void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping,
              const TensorView& k_scale, const TensorView& v_scale) {
  const int64_t n = slot_mapping.size(0);
  const int64_t block_size = k_cache.size(1);
  const int64_t num_slots = k_cache.size(0) * block_size;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = detail::index_at(slot_mapping, i);
    KVATTN_CHECK(slot < num_slots, "store_kv: slot_mapping[", i, "] is ", slot,
                 " but the cache holds ", num_slots, " slots (", k_cache.size(0),
                 " blocks of ", block_size, ")");
  }
  const int64_t heads = key.size(1), d = key.size(2), row = heads * d;
  if (k_cache.dtype != key.dtype) {
    const float* ks = k_scale.defined() ? k_scale.ptr<const float>() : nullptr;
    const float* vs = v_scale.defined() ? v_scale.ptr<const float>() : nullptr;
    dispatch_conversion(key.dtype, k_cache.dtype, [&](auto s, auto c) {
      using S = decltype(s);
      using C = decltype(c);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t slot = detail::index_at(slot_mapping, i);
        if (slot < 0) continue;  // padding
        const int64_t b = slot / block_size, off = slot % block_size;
        convert_row(key.ptr<const S>() + i * key.stride(0),
                    k_cache.ptr<C>() + b * k_cache.stride(0) + off * row, heads, d, ks);
        convert_row(value.ptr<const S>() + i * value.stride(0),
                    v_cache.ptr<C>() + b * v_cache.stride(0) + off * row, heads, d, vs);
      }
    });
    return;
  }
  const int64_t es = dtype_size(key.dtype);
  const auto row_bytes = static_cast<size_t>(row * es);
  auto* kc = static_cast<char*>(k_cache.data);
  auto* vc = static_cast<char*>(v_cache.data);
  const auto* ksrc = static_cast<const char*>(key.data);
  const auto* vsrc = static_cast<const char*>(value.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = detail::index_at(slot_mapping, i);
    if (slot < 0) continue;  // padding
    const int64_t b = slot / block_size, off = slot % block_size;
    std::memcpy(kc + (b * k_cache.stride(0) + off * row) * es, ksrc + i * key.stride(0) * es,
                row_bytes);
    std::memcpy(vc + (b * v_cache.stride(0) + off * row) * es, vsrc + i * value.stride(0) * es,
                row_bytes);
  }
}

}  // namespace kvattn::cpu
