#include "kvattn/kernels/fp8_cache_forms.h"

#ifdef KVATTN_WITH_CUDA
#include "kernels/cuda/tuning.h"
#endif

namespace kvattn {

bool fp8_cache_extended_forms(Device device) {
  if (device.is_cpu()) return true;
#ifdef KVATTN_WITH_CUDA
  return cuda::cuda_tuning().fp8_extended_forms != 0;
#else
  return false;
#endif
}

bool fp8_cache_padded_decode(Device device) {
  if (device.is_cpu()) return true;
#ifdef KVATTN_WITH_CUDA
  return cuda::cuda_tuning().fp8_extended_forms != 0 && cuda::cuda_tuning().fp8_padded_decode != 0;
#else
  return false;
#endif
}

}  // namespace kvattn
