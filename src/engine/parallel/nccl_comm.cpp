#ifdef KVATTN_WITH_NCCL

#include "engine/parallel/nccl_comm.h"

#include <nccl.h>

#include <cstdlib>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

#define NCCL_CHECK(expr)                                                               \
  do {                                                                                 \
    const ncclResult_t r_ = (expr);                                                    \
    KVATTN_CHECK(r_ == ncclSuccess, "NCCL: ", #expr, " failed: ", ncclGetErrorString(r_)); \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    default: break;
  }
  KVATTN_FAIL("NCCL: dtype must be f32, f16 or bf16 but is ", dtype);
}

}  // namespace

std::vector<std::unique_ptr<NcclComm>> NcclComm::create(std::span<const int> devices) {
  KVATTN_CHECK(!devices.empty(), "NcclComm::create: needs at least one device");
  int visible = 0;
  KVATTN_CHECK(cudaGetDeviceCount(&visible) == cudaSuccess && visible > 0,
               "NcclComm::create: no CUDA device is visible");
  for (int d : devices) {
    KVATTN_CHECK(d >= 0 && d < visible, "NcclComm::create: device ", d,
                 " is not visible (", visible, " visible)");
  }
  // Keep NVLink multicast off, for NCCL and for every child process (never overridden).
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size());
  NCCL_CHECK(ncclCommInitAll(comms.data(), n, devices.data()));
  std::vector<std::unique_ptr<NcclComm>> out;
  for (int r = 0; r < n; ++r) out.emplace_back(new NcclComm(comms[r], r, n, devices[r]));
  return out;
}

NcclComm::NcclComm(void* comm, int rank, int size, int device)
    : comm_(comm), rank_(rank), size_(size), device_(device) {}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

void NcclComm::all_reduce_sum(void* buf, int64_t count, DType dtype, cudaStream_t stream) {
  KVATTN_CHECK(count >= 0, "NcclComm::all_reduce_sum: count must be >= 0 but is ", count);
  if (count == 0) return;
  NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(count), nccl_type(dtype), ncclSum,
                           static_cast<ncclComm_t>(comm_), stream));
}

void NcclComm::all_gather(const void* send, void* recv, int64_t count, DType dtype,
                          cudaStream_t stream) {
  KVATTN_CHECK(count >= 0, "NcclComm::all_gather: count must be >= 0 but is ", count);
  if (count == 0) return;
  NCCL_CHECK(ncclAllGather(send, recv, static_cast<size_t>(count), nccl_type(dtype),
                           static_cast<ncclComm_t>(comm_), stream));
}

void NcclComm::group_start() { NCCL_CHECK(ncclGroupStart()); }
void NcclComm::group_end() { NCCL_CHECK(ncclGroupEnd()); }

}  // namespace kvattn

#endif  // KVATTN_WITH_NCCL
