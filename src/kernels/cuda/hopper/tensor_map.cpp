#include "kernels/cuda/hopper/tensor_map.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <array>

#include "kvattn/core/error.h"

namespace kvattn::cuda {
namespace {

// The driver's cuTensorMapEncodeTiled, or null where the driver has none (looked up once).
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status);
    const bool found = err == cudaSuccess && status == cudaDriverEntryPointSuccess;
    return found ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr) : nullptr;
  }();
  return fn;
}

// The encode itself: its CUresult, or CUDA_ERROR_NOT_SUPPORTED without the entry point.
// Inconsistent ranks are a caller's bug and throw.
CUresult encode(CUtensorMap* map, CUtensorMapDataType type, const void* base,
                std::initializer_list<uint64_t> dims,
                std::initializer_list<uint64_t> strides_bytes,
                std::initializer_list<uint32_t> box,
                CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  constexpr size_t kMaxRank = 5;
  const size_t rank = dims.size();
  KVATTN_CHECK(rank >= 1 && rank <= kMaxRank && box.size() == rank &&
                   strides_bytes.size() == rank - 1,
               "TMA: inconsistent tensor map rank (dims ", rank, ", box ", box.size(),
               ", strides ", strides_bytes.size(), ")");
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
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
  return fn(map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d.data(),
            s.data(), b.data(), e.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

CUtensorMap make_tensor_map(const char* what, CUtensorMapDataType type, const void* base,
                            std::initializer_list<uint64_t> dims,
                            std::initializer_list<uint64_t> strides_bytes,
                            std::initializer_list<uint32_t> box,
                            CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  KVATTN_CHECK(encode_fn() != nullptr,
               "TMA: cuTensorMapEncodeTiled is not available from the driver (", what, ")");
  CUtensorMap map{};
  const CUresult r = encode(&map, type, base, dims, strides_bytes, box, swizzle);
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

CUtensorMap make_tensor_map_2byte_plain(const char* what, const void* base,
                                        std::initializer_list<uint64_t> dims,
                                        std::initializer_list<uint64_t> strides_bytes,
                                        std::initializer_list<uint32_t> box) {
  return make_tensor_map(what, CU_TENSOR_MAP_DATA_TYPE_UINT16, base, dims, strides_bytes, box,
                         CU_TENSOR_MAP_SWIZZLE_NONE);
}

std::optional<CUtensorMap> try_tensor_map(int elem_bytes, const void* base,
                                          std::initializer_list<uint64_t> dims,
                                          std::initializer_list<uint64_t> strides_bytes,
                                          std::initializer_list<uint32_t> box,
                                          CUresult* result) {
  KVATTN_CHECK(elem_bytes == 1 || elem_bytes == 2, "TMA: elements of 1 or 2 bytes, not ",
               elem_bytes);
  const CUtensorMapDataType type =
      elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16;
  CUtensorMap map{};
  const CUresult r = encode(&map, type, base, dims, strides_bytes, box);
  if (result != nullptr) *result = r;
  if (r != CUDA_SUCCESS) return std::nullopt;
  return map;
}

}  // namespace kvattn::cuda
