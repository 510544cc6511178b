#include <numeric>

#include "kernels/cuda/device_props.h"
#include "kernels/cuda/hopper/prefill_sm90_launch.h"
#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {

bool prefill_sm90_eligible(const PrefillParams& p, bool paged, int device, bool mods) {
#if defined(KVATTN_SM90A)
  if (cuda_tuning().prefill_sm90 == 0 || compute_capability(device) != 90) return false;
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return false;
  if (paged) {
    static_assert(Sm90PrefillTile<64>::kBlockN == Sm90PrefillTile<128>::kBlockN);
    const int kBlockN =
        p.head_dim == 256 ? Sm90PrefillTile<256>::kBlockN : Sm90PrefillTile<128>::kBlockN;
    // TMA boxes of gcd(block_size, kBlockN) keys (prefill_sm90_launch.cuh) must be whole
    // 8-row swizzle atoms.
    const bool whole_boxes = p.block_size > 0 && std::gcd(p.block_size, kBlockN) % 8 == 0;
    // The experimental gather takes any page size, but only for the 128-key tiles and not with
    // window / softcap / ALiBi.
    const bool gather = !mods && kBlockN == 128 && cuda_tuning().prefill_sm90_paged_gather != 0;
    if (!whole_boxes && !gather) return false;
  }
  return true;
#else
  (void)p;
  (void)paged;
  (void)device;
  (void)mods;
  return false;
#endif
}

}  // namespace kvattn::cuda
