// The DLPack 1.x ABI pieces the binding needs beyond <dlpack/dlpack.h> 0.6 (Debian 12's):
// DLManagedTensorVersioned and the C exchange API that frameworks publish as the PyCapsule
// `type(tensor).__dlpack_c_exchange_api__` (DLPack >= 1.2; PyTorch >= 2.10). The layouts are
// the C ABI of dlpack.h 1.x; DLTensor itself is unchanged since 0.6.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

namespace kvattn::py {

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

using DLPackManagedTensorAllocator = int (*)(DLTensor* prototype, DLManagedTensorVersioned** out,
                                             void* error_ctx,
                                             void (*set_error)(void* error_ctx, const char* kind,
                                                               const char* message));
using DLPackManagedTensorFromPyObjectNoSync = int (*)(void* py_object,
                                                      DLManagedTensorVersioned** out);
using DLPackManagedTensorToPyObjectNoSync = int (*)(DLManagedTensorVersioned* tensor,
                                                    void** out_py_object);
using DLPackDLTensorFromPyObjectNoSync = int (*)(void* py_object, DLTensor* out);
using DLPackCurrentWorkStream = int (*)(DLDeviceType device_type, int32_t device_id,
                                        void** out_current_stream);

struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  DLPackExchangeAPIHeader* prev_api;
};

struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;  // may be null
  DLPackCurrentWorkStream current_work_stream;
};

}  // namespace kvattn::py
