#include "kernels/cuda/hopper/tensor_map.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <array>

#include "kvattn/core/error.h"

namespace kvattn::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status);
    KVATTN_CHECK(err == cudaSuccess && status == cudaDriverEntryPointSuccess && ptr != nullptr,
                 "TMA: cuTensorMapEncodeTiled is not available from the driver (",
                 cudaGetErrorString(err), ")");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

CUtensorMap make_tensor_map(const char* what, CUtensorMapDataType type, const void* base,
                            std::initializer_list<uint64_t> dims,
                            std::initializer_list<uint64_t> strides_bytes,
                            std::initializer_list<uint32_t> box) {
  constexpr size_t kMaxRank = 5;
  const size_t rank = dims.size();
  KVATTN_CHECK(rank >= 1 && rank <= kMaxRank && box.size() == rank &&
                   strides_bytes.size() == rank - 1,
               "TMA: ", what, ": inconsistent tensor map rank");
  std::array<cuuint64_t, kMaxRank> d{};
  std::array<cuuint64_t, kMaxRank> s{};
  std::array<cuuint32_t, kMaxRank> b{};
  std::array<cuuint32_t, kMaxRank> e{};
  size_t i = 0;
  for (uint64_t v : dims) d[i++] = v;
  i = 0;
  for (uint64_t v : strides_bytes) s[i++] = v;
  i = 0;
  for (uint32_t v : box) {
    e[i] = 1;
    b[i++] = v;
  }
  CUtensorMap map{};
  const CUresult r = encode_fn()(
      &map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base),
      d.data(), s.data(), b.data(), e.data(), CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  KVATTN_CHECK(r == CUDA_SUCCESS, "TMA: cuTensorMapEncodeTiled failed for ", what, " (CUresult ",
               static_cast<int>(r), ")");
  return map;
}

}  // namespace

CUtensorMap make_tensor_map_2byte(const char* what, const void* base,
                                  std::initializer_list<uint64_t> dims,
                                  std::initializer_list<uint64_t> strides_bytes,
                                  std::initializer_list<uint32_t> box) {
  return make_tensor_map(what, CU_TENSOR_MAP_DATA_TYPE_UINT16, base, dims, strides_bytes, box);
}

CUtensorMap make_tensor_map_1byte(const char* what, const void* base,
                                  std::initializer_list<uint64_t> dims,
                                  std::initializer_list<uint64_t> strides_bytes,
                                  std::initializer_list<uint32_t> box) {
  return make_tensor_map(what, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, dims, strides_bytes, box);
}

}  // namespace kvattn::cuda
