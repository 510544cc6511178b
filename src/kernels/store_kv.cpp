// store_kv entry: validates once, then dispatches on the device.
#include "kvattn/kernels/store_kv.h"

#include "backend.h"
#include "kv_cache_checks.h"
#include "validate.h"

namespace kvattn {

void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping, Stream stream) {
  store_kv(key, value, k_cache, v_cache, slot_mapping, TensorView(), TensorView(), stream);
}

void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping,
              const TensorView& k_scale, const TensorView& v_scale, Stream stream) {
  using namespace detail;
  constexpr std::string_view fn = "store_kv";
  check_token_major(fn, "key", key);
  check_token_major(fn, "value", value);
  check_paged_cache(fn, "k_cache", k_cache);
  check_paged_cache(fn, "v_cache", v_cache);
  check_rank(fn, "slot_mapping", slot_mapping, 1);

  const Device device = key.device;
  check_device(fn, "value", value, device);
  check_device(fn, "k_cache", k_cache, device);
  check_device(fn, "v_cache", v_cache, device);
  check_device(fn, "slot_mapping", slot_mapping, device);

  check_dtype_in(fn, "key", key, {DType::kF32, DType::kF16, DType::kBF16});
  check_dtype(fn, "value", value, key.dtype);
  check_cache_dtype(fn, "k_cache", k_cache, key.dtype, "key");
  KVATTN_CHECK(v_cache.dtype == k_cache.dtype, fn, ": v_cache dtype must equal k_cache dtype (",
               k_cache.dtype, ") but is ", v_cache.dtype);
  check_dtype_in(fn, "slot_mapping", slot_mapping, {DType::kI32, DType::kI64});

  const int64_t head_dim = key.size(2);
  const int64_t num_kv_heads = key.size(1);
  KVATTN_CHECK(k_cache.size(3) == head_dim, fn, ": k_cache head_dim is ", k_cache.size(3),
               " but key head_dim is ", head_dim);
  KVATTN_CHECK(k_cache.size(2) == num_kv_heads, fn, ": k_cache num_kv_heads is ",
               k_cache.size(2), " but key num_kv_heads is ", num_kv_heads);
  KVATTN_CHECK(value.size(1) == num_kv_heads && value.size(2) == head_dim, fn,
               ": value shape ", value.shape_str(), " must match key shape ", key.shape_str(),
               " in heads and head_dim");
  for (int d = 0; d < 4; ++d) {
    KVATTN_CHECK(v_cache.size(d) == k_cache.size(d), fn, ": v_cache shape ",
                 v_cache.shape_str(), " must equal k_cache shape ", k_cache.shape_str());
  }
  check_kv_scale(fn, "k_scale", k_scale, "k_cache", k_cache, num_kv_heads);
  check_kv_scale(fn, "v_scale", v_scale, "v_cache", v_cache, num_kv_heads);
  const int64_t n = slot_mapping.size(0);
  KVATTN_CHECK(n <= key.size(0), fn, ": slot_mapping length must be <= key tokens (",
               key.size(0), ") but is ", n);
  KVATTN_CHECK(n <= value.size(0), fn, ": slot_mapping length must be <= value tokens (",
               value.size(0), ") but is ", n);
  if (n == 0) return;

  if (device.is_cpu()) {
    cpu::store_kv(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale);
    return;
  }
#ifdef KVATTN_WITH_CUDA
  if (k_cache.dtype == DType::kF8E4M3) {
    cuda::store_kv_fp8(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale, stream);
    return;
  }
  cuda::store_kv(key, value, k_cache, v_cache, slot_mapping, stream);
#else
  (void)stream;
  KVATTN_FAIL(fn, ": key is on ", device, " but this build of kvattn has no CUDA backend");
#endif
}

}  // namespace kvattn
