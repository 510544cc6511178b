#include "mask_options.h"

#include <cmath>

#include "validate.h"

namespace kvattn::detail {

void check_mask_options(std::string_view fn, int64_t window_left, int64_t window_right,
                        float softcap, bool causal, Device device, AttentionShape& shape,
                        bool cuda_ok) {
  KVATTN_CHECK(window_left >= -1, fn, ": window_size left must be >= -1 (-1 = unbounded) but is ",
               window_left);
  KVATTN_CHECK(window_right >= -1, fn,
               ": window_size right must be >= -1 (-1 = unbounded) but is ", window_right);
  KVATTN_CHECK(std::isfinite(softcap) && softcap >= 0.0f, fn,
               ": softcap must be finite and >= 0 (0 = off) but is ", softcap);
  const bool windowed = window_left >= 0 || window_right >= 0;
  if (!device.is_cpu() && !cuda_ok) {
    KVATTN_CHECK(!windowed, fn, ": window_size: sliding windows are not supported on ", device,
                 " yet (CPU only) but window_size is (", window_left, ", ", window_right, ")");
    KVATTN_CHECK(softcap == 0.0f, fn, ": softcap is not supported on ", device,
                 " yet (CPU only) but softcap is ", softcap);
  }
  shape.window_left = window_left;
  shape.window_right = causal ? 0 : window_right;
  shape.softcap = softcap;
}

void check_alibi_slopes(std::string_view fn, const TensorView& slopes, Device device,
                        const AttentionShape& shape, bool cuda_ok) {
  if (!slopes.defined()) return;
  KVATTN_CHECK(device.is_cpu() || cuda_ok, fn, ": alibi_slopes is not supported on ", device,
               " yet (CPU only) but alibi_slopes of shape ", slopes.shape_str(), " was given");
  KVATTN_CHECK(slopes.ndim == 1 || slopes.ndim == 2, fn,
               ": alibi_slopes must be [num_heads] or [num_seqs, num_heads] but has shape ",
               slopes.shape_str());
  if (slopes.ndim == 1) {
    check_dim(fn, "alibi_slopes", slopes, 0, "num_heads", shape.num_heads);
  } else {
    check_dim(fn, "alibi_slopes", slopes, 0, "num_seqs", shape.num_seqs);
    check_dim(fn, "alibi_slopes", slopes, 1, "num_heads", shape.num_heads);
  }
  check_dtype(fn, "alibi_slopes", slopes, DType::kF32);
  check_device(fn, "alibi_slopes", slopes, device);
  check_stride(fn, "alibi_slopes", slopes, slopes.ndim - 1, 1, "heads contiguous");
  if (!device.is_cpu()) return;  // values on the GPU: not read here
  const int64_t rows = slopes.ndim == 2 ? shape.num_seqs : 1;
  const int64_t row_stride = slopes.ndim == 2 ? slopes.stride(0) : 0;
  for (int64_t b = 0; b < rows; ++b) {
    const float* s = slopes.ptr<const float>() + b * row_stride;
    for (int64_t h = 0; h < shape.num_heads; ++h) {
      if (std::isfinite(s[h])) continue;
      if (slopes.ndim == 2) {
        KVATTN_FAIL(fn, ": alibi_slopes[", b, "][", h, "] must be finite but is ", s[h]);
      }
      KVATTN_FAIL(fn, ": alibi_slopes[", h, "] must be finite but is ", s[h]);
    }
  }
}

void check_cache_leftpad(std::string_view fn, const TensorView& leftpad,
                         const TensorView& cache_seqlens, Device device, int64_t num_seqs) {
  if (!leftpad.defined()) return;
  check_rank(fn, "cache_leftpad", leftpad, 1);
  check_dtype(fn, "cache_leftpad", leftpad, DType::kI32);
  check_dim(fn, "cache_leftpad", leftpad, 0, "num_seqs", num_seqs);
  check_device(fn, "cache_leftpad", leftpad, device);
  check_contiguous(fn, "cache_leftpad", leftpad);
  if (!device.is_cpu()) return;  // values: the kernel clamps and records (fault word)
  const int32_t* pad = leftpad.ptr<const int32_t>();
  const int32_t* lens = cache_seqlens.ptr<const int32_t>();
  for (int64_t b = 0; b < num_seqs; ++b) {
    KVATTN_CHECK(pad[b] >= 0 && pad[b] <= lens[b], fn, ": cache_leftpad[", b,
                 "] must be in [0, cache_seqlens[", b, "] = ", lens[b], "] but is ", pad[b]);
  }
}

}  // namespace kvattn::detail
