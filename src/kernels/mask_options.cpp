#include "mask_options.h"

#include <cmath>

#include "validate.h"

namespace kvattn::detail {

void check_mask_options(std::string_view fn, int64_t window_left, int64_t window_right,
                        float softcap, bool causal, Device device, AttentionShape& shape) {
  KVATTN_CHECK(window_left >= -1, fn, ": window_size left must be >= -1 (-1 = unbounded) but is ",
               window_left);
  KVATTN_CHECK(window_right >= -1, fn,
               ": window_size right must be >= -1 (-1 = unbounded) but is ", window_right);
  KVATTN_CHECK(std::isfinite(softcap) && softcap >= 0.0f, fn,
               ": softcap must be finite and >= 0 (0 = off) but is ", softcap);
  const bool windowed = window_left >= 0 || window_right >= 0;
  if (!device.is_cpu()) {
    KVATTN_CHECK(!windowed, fn, ": window_size: sliding windows are not supported on ", device,
                 " yet (CPU only) but window_size is (", window_left, ", ", window_right, ")");
    KVATTN_CHECK(softcap == 0.0f, fn, ": softcap is not supported on ", device,
                 " yet (CPU only) but softcap is ", softcap);
  }
  shape.window_left = window_left;
  shape.window_right = causal ? 0 : window_right;
  shape.softcap = softcap;
}

}  // namespace kvattn::detail
